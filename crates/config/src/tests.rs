use super::*;
use std::collections::HashMap;

pub(super) fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn parse_err(text: &str) -> (Option<u64>, Option<String>, String) {
    match parse(text, Path::new("s.yaml"), &env(&[])) {
        Err(ConfigError::Invalid(InvalidAt {
            line, key, message, ..
        })) => (line, key, message),
        other => panic!("expected an invalid-config error, got {other:?}"),
    }
}

/// Asserts that `text` is refused at `line`, naming `key`, with a message that contains `says`.
#[track_caller]
fn refused(text: &str, line: u64, key: &str, says: &str) {
    let (l, k, message) = parse_err(text);
    assert_eq!(
        (l, k.as_deref()),
        (Some(line), Some(key)),
        "{text}: {message}"
    );
    assert!(message.contains(says), "{text}: {message}");
}

#[test]
fn empty_file_means_defaults() {
    let s = parse("# only a comment\n", Path::new("s.yaml"), &env(&[])).unwrap();
    assert_eq!(s.model.default_profile, "fast");
    assert_eq!(s.agent.max_steps, 8);
    assert_eq!(s.tools.result_max_tokens, 800);
    assert_eq!(s.server.port, 8765);
    assert_eq!(s.scheduler.timezone, "", "the machine's own zone");
    assert_eq!(
        s.model.profiles["fast"].base_url,
        "http://127.0.0.1:11434/v1"
    );
}

#[test]
fn the_shipped_settings_yaml_is_valid_and_matches_the_defaults() {
    let text = include_str!("../../../settings.yaml");
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

    let (line, key, message) = parse_err(text);
    assert_eq!(line, Some(4));
    assert_eq!(key.as_deref(), Some("model.profiles.fast.api_key"));
    assert!(
        message.contains("${MY_KEY}") && message.contains("not set"),
        "{message}"
    );
}

#[test]
fn bad_settings_are_errors_with_line_and_key() {
    refused(
        "agent:\n  max_steps: 3\n  max_stepz: 4\n",
        3,
        "agent.max_stepz",
        "unknown field",
    );
    refused("agnet:\n  max_steps: 3\n", 1, "agnet", "agnet");
    refused(
        "server:\n  port: eighty\n",
        2,
        "server.port",
        "whole number",
    );
    refused(
        "server:\n  port: 99999\n",
        2,
        "server.port",
        "from 0 to 65535",
    );
    // A negative timeout cannot be a duration; `yes` is not a boolean here.
    refused("tools:\n  timeout_s: -5\n", 2, "tools.timeout_s", "");
    refused(
        "context:\n  summary_enabled: yes\n",
        2,
        "context.summary_enabled",
        "",
    );
    refused(
        "# c\nagent:\n  workers: 0\n",
        3,
        "agent.workers",
        "greater than 0",
    );
    refused(
        "model:\n  default_profile: turbo\n",
        2,
        "model.default_profile",
        "turbo",
    );
    refused(
        "model:\n  default_profile: turbo\n",
        2,
        "model.default_profile",
        "fast",
    );
    refused(
        "scheduler:\n  timezone: Mars/Olympus\n",
        2,
        "scheduler.timezone",
        "",
    );
    refused(
        "model:\n  profiles:\n    fast:\n      base_url: localhost:11434\n",
        4,
        "model.profiles.fast.base_url",
        "",
    );
    refused(
        "notify:\n  email:\n    smtp_host: mail\n    from: me@example.org\n    to: []\n",
        5,
        "notify.email.to",
        "",
    );
    refused(
        "# c\nserver:\n  token: \"${NOT_SET_TOKEN}\"\n",
        3,
        "server.token",
        "NOT_SET_TOKEN",
    );
    refused(
        "scheduler:\n  catch_up_grace_s: 99999999999\n",
        2,
        "scheduler.catch_up_grace_s",
        "more than a year",
    );
    // Port 0 is not a mistake: the daemon binds a free port and says which.
    assert!(parse("server:\n  port: 0\n", Path::new("x.yaml"), &env(&[])).is_ok());
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
    let text = "model:\n  profiles:\n    fast:\n      api_key: sk-secret\n\
                server:\n  token: tok-secret\n\
                notify:\n  email:\n    smtp_host: mail.test\n    from: a@b.test\n    to: [c@d.test]\n    password: pw-secret\n\
                \x20 webhooks:\n    hook:\n      url: https://h.test/x\n      secret: wh-secret\n\
                mcp:\n  servers:\n    t:\n      url: https://m.test/mcp\n      headers: {Authorization: hd-secret}\n";
    let s = parse(text, Path::new("s.yaml"), &env(&[])).unwrap();
    let dbg = format!("{s:?}");
    for secret in [
        "sk-secret",
        "tok-secret",
        "pw-secret",
        "wh-secret",
        "hd-secret",
    ] {
        assert!(!dbg.contains(secret), "{secret} in {dbg}");
    }
    // What is not secret still shows, and a secret shows as set.
    for shown in [
        "mail.test",
        "https://h.test/x",
        "Authorization",
        "<redacted>",
    ] {
        assert!(dbg.contains(shown), "{shown} not in {dbg}");
    }
}

#[test]
fn env_vars_expand_in_quoted_strings_too() {
    let text = "server:\n  token: \"${TOK}\"\nnotify:\n  webhooks:\n    ops: {url: \"https://h.example/${HOOK_PATH:-x}\", secret: '${HOOK_SECRET}'}\n";
    let e = env(&[("TOK", "t0k"), ("HOOK_SECRET", "s3")]);
    let s = parse(text, Path::new("s.yaml"), &e).unwrap();
    assert_eq!(s.server.token, "t0k");
    assert_eq!(s.notify.webhooks["ops"].url, "https://h.example/x");
    assert_eq!(s.notify.webhooks["ops"].secret, "s3");
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

#[test]
fn server_limits_are_checked() {
    for key in [
        "header_timeout_s",
        "idle_timeout_s",
        "max_login_failures",
        "login_window_s",
    ] {
        refused(
            &format!("server:\n  {key}: 0\n"),
            2,
            &format!("server.{key}"),
            "greater than 0",
        );
    }
    // 0 connections means "derived from the open-file limit".
    let s = parse(
        "server:\n  max_connections: 0\n",
        Path::new("s.yaml"),
        &env(&[]),
    );
    assert_eq!(s.map(|s| s.server.max_connections).ok(), Some(0));
}

/// An `inbox.email` section with `extra` lines (indented four spaces) and a notify.email.
fn inbox(extra: &[&str]) -> String {
    let mut text = String::from(
        "notify:\n  email:\n    smtp_host: mail.example.org\n    from: hermes@example.org\n    to: [me@example.org]\n\
         inbox:\n  email:\n    imap_host: imap.example.org\n    username: hermes@example.org\n    password: secret\n",
    );
    for l in extra {
        text.push_str(&format!("    {l}\n"));
    }
    text
}

#[test]
fn the_documented_inbox_example_is_valid_and_its_defaults_are_the_real_ones() {
    // settings.yaml shows the section commented out: uncommented, it must parse.
    let shipped = include_str!("../../../settings.yaml");
    let start = shipped.find("#  email:").expect("the inbox example");
    let example: String = shipped[start..]
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.strip_prefix('#').unwrap_or(l))
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let text = format!(
        "notify:\n  email:\n    smtp_host: mail.example.org\n    from: hermes@example.org\n    to: [me@example.org]\ninbox:\n{example}"
    );
    let s = parse(&text, Path::new("s.yaml"), &env(&[("IMAP_PASSWORD", "pw")])).unwrap();
    let e = s.inbox.email.expect("an inbox");
    let d = ImapSettings::default();
    assert_eq!(e.password, "pw");
    assert_eq!(e.allow_from, ["me@example.org"]);
    assert_eq!(
        (
            e.imap_port,
            e.security,
            e.mailbox.as_str(),
            e.max_tasks_per_hour,
            e.poll_s
        ),
        (
            d.imap_port,
            d.security,
            d.mailbox.as_str(),
            d.max_tasks_per_hour,
            d.poll_s
        )
    );
    assert_eq!(e.trusted_authserv_id, d.trusted_authserv_id);
}

#[test]
fn a_bad_inbox_is_refused_at_its_line() {
    assert!(parse(&inbox(&[]), Path::new("s.yaml"), &env(&[])).is_ok());
    // Plain text over the network would carry the password in clear.
    refused(
        &inbox(&["security: none"]),
        11,
        "inbox.email.security",
        "only for a server",
    );
    assert!(
        parse(
            &inbox(&["security: none"]).replace("imap.example.org", "127.0.0.1"),
            Path::new("s.yaml"),
            &env(&[])
        )
        .is_ok()
    );
    // Each setting is the section's last line, the 11th.
    for (setting, key, says) in [
        ("imap_port: 0", "imap_port", "greater than 0"),
        ("imap_port: 70000", "imap_port", "whole number"),
        (
            "allow_from: [\"Me <me@example.org>\"]",
            "allow_from",
            "not an email address",
        ),
        ("poll_s: 0", "poll_s", "greater than 0"),
        (
            "max_tasks_per_hour: 0",
            "max_tasks_per_hour",
            "greater than 0",
        ),
    ] {
        refused(&inbox(&[setting]), 11, &format!("inbox.email.{key}"), says);
    }
    refused(
        &inbox(&[]).replace("password: secret", "password: \"\""),
        10,
        "inbox.email.password",
        "IMAP_PASSWORD",
    );
    refused(
        "inbox:\n  email:\n    imap_host: imap.example.org\n    username: u\n    password: p\n",
        2,
        "inbox.email",
        "notify.email",
    );
    let (line, _, message) =
        parse_err(&inbox(&[]).replace("password: secret", "password: ${IMAP_PASSWORD}"));
    assert_eq!(line, Some(10));
    assert!(message.contains("IMAP_PASSWORD"), "{message}");
}

#[test]
fn the_imap_password_never_shows_in_debug_output() {
    let s = parse(&inbox(&[]), Path::new("s.yaml"), &env(&[])).unwrap();
    let shown = format!("{s:?}");
    assert!(!shown.contains("secret"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[test]
fn fallback_chains_follow_each_fallback_and_refuse_cycles_and_unknown_names_at_their_line() {
    let text = "model:\n  profiles:\n    fast:\n      fallback: [pro, local]\n    pro:\n      fallback: [cloud]\n    local: {}\n    cloud: {}\n";
    let s = parse(text, Path::new("s.yaml"), &env(&[])).unwrap();
    assert_eq!(
        s.model.fallback_chain("fast"),
        ["fast", "pro", "cloud", "local"],
        "a fallback's own fallbacks follow it"
    );
    assert_eq!(s.model.fallback_chain("local"), ["local"]);
    refused(
        "model:\n  profiles:\n    fast:\n      fallback: [turbo]\n",
        4,
        "model.profiles.fast.fallback",
        "unknown profile 'turbo'",
    );
    refused(
        "model:\n  profiles:\n    fast:\n      fallback: [fast]\n",
        4,
        "model.profiles.fast.fallback",
        "itself",
    );
    refused(
        "model:\n  profiles:\n    fast:\n      fallback: [pro, pro]\n    pro: {}\n",
        4,
        "model.profiles.fast.fallback",
        "twice",
    );
    refused(
        "model:\n  profiles:\n    fast:\n      fallback: [pro]\n    pro:\n      timeout_s: 9\n      fallback: [fast]\n",
        7,
        "model.profiles.pro.fallback",
        "fast → pro → fast",
    );
}

#[test]
fn model_change_settings_are_checked() {
    refused(
        "model:\n  on_change_notify: [ops]\n",
        2,
        "model.on_change_notify",
        "unknown notify channel 'ops'; none is configured",
    );
    refused("model:\n  on_change: panic\n", 2, "model.on_change", "");
    refused(
        "model:\n  identity_check_s: 5\n",
        2,
        "model.identity_check_s",
        "at least 60",
    );
    let ok = "model:\n  identity_check_s: 0\n  on_change: hold\n  on_change_notify: [ops]\nnotify:\n  webhooks:\n    ops: {url: 'http://127.0.0.1:9/h'}\n";
    let s = parse(ok, Path::new("s.yaml"), &env(&[])).unwrap();
    assert_eq!(s.model.on_change, OnChange::Hold);
}

/// The commented-out example under `key` in settings.yaml, uncommented.
#[cfg(any(feature = "matrix", feature = "telegram"))]
pub(super) fn shipped_example(marker: &str) -> String {
    let shipped = include_str!("../../../settings.yaml");
    let start = shipped.find(marker).expect("the example");
    shipped[start..]
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| l.strip_prefix('#').unwrap_or(l))
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

#[cfg(feature = "matrix")]
#[test]
fn the_documented_matrix_example_is_valid_and_its_defaults_are_the_real_ones() {
    let text = format!("channels:\n{}", shipped_example("#  matrix:"));
    let e = env(&[
        ("MATRIX_PASSWORD", "pw"),
        ("MATRIX_RECOVERY_KEY", "EsT0 abcd"),
    ]);
    let s = parse(&text, Path::new("s.yaml"), &e).unwrap();
    s.validate().unwrap();
    let m = s.channels.matrix.as_ref().expect("a Matrix account");
    assert_eq!(m.password, "pw");
    assert_eq!(m.user, "@hermes:example.org");
    assert_eq!(m.allow_from, ["@me:example.org"]);
    assert_eq!(
        m.max_tasks_per_hour,
        crate::MatrixSettings::default().max_tasks_per_hour
    );
    assert_eq!(s.matrix_channels(), ["matrix:family", "matrix:me"]);
    let shown = format!("{m:?}");
    assert!(!shown.contains("pw") && !shown.contains("EsT0"), "{shown}");
}

#[cfg(feature = "matrix")]
#[test]
fn matrix_settings_that_cannot_work_are_refused_with_their_key() {
    let base = "channels:\n  matrix:\n    homeserver: https://m.example.org\n    user: \"@hermes:example.org\"\n";
    let refused = [
        (
            "    allow_from: [me@example.org]\n",
            "channels.matrix.allow_from",
        ),
        (
            "    allow_from: [\"@hermes:example.org\"]\n",
            "channels.matrix.allow_from",
        ),
        (
            "    rooms: {me: \"@stranger:example.org\"}\n",
            "channels.matrix.rooms.me",
        ),
        (
            "    rooms: {fam: \"#alias:example.org\"}\n",
            "channels.matrix.rooms.fam",
        ),
        (
            "    rooms: {\"a b\": \"!r:example.org\"}\n",
            "channels.matrix.rooms.a b",
        ),
        (
            "    max_tasks_per_hour: 0\n",
            "channels.matrix.max_tasks_per_hour",
        ),
    ];
    for (extra, key) in refused {
        let text = format!("{base}{extra}");
        match parse(&text, Path::new("s.yaml"), &env(&[])) {
            Err(ConfigError::Invalid(InvalidAt { key: Some(k), .. })) => {
                assert_eq!(k, key, "{extra}")
            }
            other => panic!("{extra}: {other:?}"),
        }
    }
    for (hs, ok) in [
        ("http://127.0.0.1:8008", true),
        ("http://matrix.example.org", false),
        ("ftp://x", false),
        ("not a url", false),
    ] {
        let text = format!(
            "channels:\n  matrix:\n    homeserver: {hs}\n    user: \"@hermes:example.org\"\n"
        );
        assert_eq!(
            parse(&text, Path::new("s.yaml"), &env(&[])).is_ok(),
            ok,
            "{hs}"
        );
    }
    let text = format!(
        "{base}    rooms: {{me: \"@me:example.org\"}}\n    allow_from: [\"@me:example.org\"]\ntools:\n  approval_notify: [matrix:me]\n"
    );
    let s = parse(&text, Path::new("s.yaml"), &env(&[])).unwrap();
    s.validate().unwrap();
}

/// A build without the Matrix channel says so for `channels.matrix`, with what to do; a build
/// with it takes the same settings.
#[test]
fn channels_matrix_is_refused_only_by_a_build_without_the_channel() {
    let text = "channels:\n  matrix:\n    homeserver: https://m.example.org\n    user: \"@hermes:example.org\"\n    allow_from: [\"@me:example.org\"]\n";
    let got = parse(text, Path::new("s.yaml"), &env(&[]));
    if cfg!(feature = "matrix") {
        assert!(got.is_ok(), "{got:?}");
        return;
    }
    match got {
        Err(ConfigError::Invalid(InvalidAt {
            key: Some(k),
            message,
            ..
        })) => {
            assert_eq!(k, "channels.matrix");
            assert!(message.contains("--features matrix"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}
