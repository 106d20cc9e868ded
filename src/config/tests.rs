use super::*;
use std::collections::HashMap;

fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parse_err(text: &str) -> (Option<u64>, Option<String>, String) {
    match parse(text, Path::new("s.yaml"), &env(&[])) {
        Err(ConfigError::Invalid {
            line, key, message, ..
        }) => (line, key, message),
        other => panic!("expected an invalid-config error, got {other:?}"),
    }
}

#[test]
fn empty_file_means_defaults() {
    let s = parse("# only a comment\n", Path::new("s.yaml"), &env(&[])).unwrap();
    assert_eq!(s.model.default_profile, "fast");
    assert_eq!(s.agent.max_steps, 8);
    assert_eq!(s.tools.result_max_tokens, 800);
    assert_eq!(s.server.port, 8765);
    assert_eq!(s.scheduler.timezone, "Asia/Shanghai");
    assert_eq!(
        s.model.profiles["fast"].base_url,
        "http://127.0.0.1:11434/v1"
    );
}

#[test]
fn the_shipped_settings_yaml_is_valid_and_matches_the_defaults() {
    let text = include_str!("../../settings.yaml");
    let e = env(&[
        ("HERMES_API_KEY", ""),
        ("HERMES_TOKEN", ""),
        ("SMTP_PASSWORD", ""),
    ]);
    let s = parse(text, Path::new("settings.yaml"), &e).unwrap();
    let d = Settings::default();
    // Serialise both: the shipped file must document the real defaults, not drift from them.
    let mut a = serde_json::to_value(&s).unwrap();
    let mut b = serde_json::to_value(&d).unwrap();
    for v in [&mut a, &mut b] {
        v["storage"]["data_dir"] = serde_json::Value::Null;
    }
    assert_eq!(a, b);
}

#[test]
fn env_vars_expand_and_a_missing_one_is_named_with_its_line() {
    let text = "model:\n  profiles:\n    fast:\n      api_key: ${MY_KEY}\n";
    let s = parse(text, Path::new("s.yaml"), &env(&[("MY_KEY", "sk-123")])).unwrap();
    assert_eq!(s.model.profiles["fast"].api_key, "sk-123");

    let (line, _key, message) = parse_err(text);
    assert_eq!(line, Some(4));
    assert!(message.contains("MY_KEY"), "{message}");
    assert!(message.contains("not set"), "{message}");
}

#[test]
fn unknown_keys_are_errors_with_line_and_key() {
    let (line, key, message) = parse_err("agent:\n  max_steps: 3\n  max_stepz: 4\n");
    assert_eq!(line, Some(3));
    assert_eq!(key.as_deref(), Some("agent.max_stepz"));
    assert!(message.contains("unknown field"), "{message}");

    let (line, _, message) = parse_err("agnet:\n  max_steps: 3\n");
    assert_eq!(line, Some(1));
    assert!(message.contains("agnet"), "{message}");
}

#[test]
fn wrong_types_are_errors_with_line_and_key() {
    let (line, key, message) = parse_err("server:\n  host: 127.0.0.1\n  port: eighty\n");
    assert_eq!(line, Some(3));
    assert_eq!(key.as_deref(), Some("server.port"));
    assert!(message.contains("whole number"), "{message}");

    // A negative timeout cannot be a duration.
    let (line, key, _) = parse_err("tools:\n  timeout_s: -5\n");
    assert_eq!(line, Some(2));
    assert_eq!(key.as_deref(), Some("tools.timeout_s"));

    // `yes` is not a boolean here.
    let (line, key, _) = parse_err("context:\n  summary_enabled: yes\n");
    assert_eq!(line, Some(2));
    assert_eq!(key.as_deref(), Some("context.summary_enabled"));
}

#[test]
fn bad_values_are_errors_with_line_and_key() {
    let (line, key, message) = parse_err("# c\nagent:\n  workers: 0\n");
    assert_eq!(line, Some(3));
    assert_eq!(key.as_deref(), Some("agent.workers"));
    assert!(message.contains("greater than 0"), "{message}");
    // Port 0 is not a mistake: the daemon binds a free port and says which.
    assert!(parse("server:\n  port: 0\n", Path::new("x.yaml"), &env(&[])).is_ok());

    let (line, key, message) = parse_err("model:\n  default_profile: turbo\n");
    assert_eq!(line, Some(2));
    assert_eq!(key.as_deref(), Some("model.default_profile"));
    assert!(
        message.contains("turbo") && message.contains("fast"),
        "{message}"
    );

    let (line, key, _) = parse_err("scheduler:\n  timezone: Mars/Olympus\n");
    assert_eq!(line, Some(2));
    assert_eq!(key.as_deref(), Some("scheduler.timezone"));

    let (line, key, _) =
        parse_err("model:\n  profiles:\n    fast:\n      base_url: localhost:11434\n");
    assert_eq!(line, Some(4));
    assert_eq!(key.as_deref(), Some("model.profiles.fast.base_url"));

    let (line, key, _) =
        parse_err("notify:\n  email:\n    smtp_host: mail\n    from: me@example.org\n    to: []\n");
    assert_eq!(line, Some(5));
    assert_eq!(key.as_deref(), Some("notify.email.to"));
}

#[test]
fn the_error_names_the_file() {
    let err = parse(
        "agent:\n  workers: 0\n",
        Path::new("/etc/h.yaml"),
        &env(&[]),
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("/etc/h.yaml:2: agent.workers:"), "{text}");
}

#[test]
fn secrets_do_not_show_in_debug_output() {
    let text =
        "model:\n  profiles:\n    fast:\n      api_key: sk-secret\nserver:\n  token: tok-secret\n";
    let s = parse(text, Path::new("s.yaml"), &env(&[])).unwrap();
    let dbg = format!("{s:?}");
    assert!(
        !dbg.contains("sk-secret") && !dbg.contains("tok-secret"),
        "{dbg}"
    );
}

#[test]
fn relative_paths_resolve_against_the_config_file() {
    let src = ConfigSource::File(PathBuf::from("/home/u/.config/hermes-agent/settings.yaml"));
    assert_eq!(
        resolve_relative(&src, "./tools"),
        PathBuf::from("/home/u/.config/hermes-agent/./tools")
    );
    assert_eq!(resolve_relative(&src, "/opt/t"), PathBuf::from("/opt/t"));
}

#[test]
fn env_vars_expand_in_quoted_strings_too() {
    let text = "server:\n  token: \"${TOK}\"\nnotify:\n  webhooks:\n    ops: {url: \"https://h.example/${HOOK_PATH:-x}\", secret: '${HOOK_SECRET}'}\n";
    let e = env(&[("TOK", "t0k"), ("HOOK_SECRET", "s3")]);
    let s = parse(text, Path::new("s.yaml"), &e).unwrap();
    assert_eq!(s.server.token, "t0k");
    assert_eq!(s.notify.webhooks["ops"].url, "https://h.example/x");
    assert_eq!(s.notify.webhooks["ops"].secret, "s3");

    let (line, key, message) = parse_err("# c\nserver:\n  token: \"${NOT_SET_TOKEN}\"\n");
    assert_eq!(line, Some(3));
    assert_eq!(key.as_deref(), Some("server.token"));
    assert!(message.contains("NOT_SET_TOKEN"), "{message}");
}

#[test]
fn durations_beyond_a_year_are_refused() {
    let (line, key, message) = parse_err("scheduler:\n  catch_up_grace_s: 99999999999\n");
    assert_eq!(line, Some(2));
    assert_eq!(key.as_deref(), Some("scheduler.catch_up_grace_s"));
    assert!(message.contains("more than a year"), "{message}");
}

#[test]
fn mcp_servers_are_checked_by_key() {
    let ok = "mcp:\n  servers:\n    time:\n      command: [python3, -m, mcp_server_time]\n    web:\n      url: https://example.org/mcp\n      headers: {Authorization: Bearer x}\n";
    let s = parse(ok, Path::new("s.yaml"), &env(&[])).expect("valid");
    assert_eq!(s.mcp.servers["time"].transport(), McpTransport::Stdio);
    assert_eq!(s.mcp.servers["web"].transport(), McpTransport::Http);
    assert!(!format!("{:?}", s.mcp.servers["web"]).contains("Bearer"));

    let cases = [
        (
            "mcp:\n  servers:\n    t: {}\n",
            "mcp.servers.t",
            "either `command",
        ),
        (
            "mcp:\n  servers:\n    t: {command: [x], url: 'http://a/mcp'}\n",
            "mcp.servers.t.url",
            "not both",
        ),
        (
            "mcp:\n  servers:\n    a__b: {command: [x]}\n",
            "mcp.servers.a__b",
            "'__'",
        ),
        (
            "mcp:\n  servers:\n    t: {url: 'ftp://a/mcp'}\n",
            "mcp.servers.t.url",
            "http(s)",
        ),
        (
            "server:\n  allowed_hosts: ['http://x/']\n",
            "server.allowed_hosts",
            "Host header",
        ),
        (
            "model:\n  profiles:\n    fast: {tool_mode: grammar}\n",
            "model.profiles.fast.tool_mode",
            "unknown variant",
        ),
    ];
    for (yaml, key, says) in cases {
        let (_, k, message) = parse_err(yaml);
        assert_eq!(k.as_deref(), Some(key), "{yaml}: {message}");
        assert!(message.contains(says), "{yaml}: {message}");
    }
}
