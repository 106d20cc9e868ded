//! Manifest tools: capabilities declared as YAML files in the manifests directory (`tools/`),
//! each either a command (an argv template, run without a shell) or an HTTP request.
//!
//! Owns: parsing and checking manifests (with `file:line: field: message` errors),
//! filling `{{param}}` placeholders, running the command or request, and mapping outcomes to
//! [`ToolError`]s (connect errors and 5xx are `Network`, so the registry retries them).
//! Must not: validate arguments, time out, retry or shape results — the registry does that
//! for every tool alike — and must never hand a template to a shell.

use super::{Tool, ToolContext, ToolError};
use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Map, Value};
use serde_saphyr::Spanned;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

mod run;
mod template;

use template::{Piece, Template, percent_encode, value_text};

/// A command's stdout and an HTTP body are read up to this many bytes.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
/// How much of a failing command's stderr (its tail) goes into the error.
const STDERR_TAIL_BYTES: usize = 1000;
/// How much of a failing HTTP response's body goes into the error.
const BODY_EXCERPT_CHARS: usize = 300;
/// Environment variables a command inherits; everything else (API keys, SMTP passwords)
/// stays in the daemon. A manifest passes a secret on purpose with `${VAR}` in its argv.
const INHERITED_ENV: [&str; 7] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER"];

/// A manifest that could not be loaded; always names the file, and the line and field
/// where known.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("{}: cannot read the manifests directory: {source}", path.display())]
    ReadDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: cannot read the manifest: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}:{}: {}{message}", path.display(), line.map(|l| l.to_string()).unwrap_or_else(|| "?".into()), field.as_deref().map(|k| format!("{k}: ")).unwrap_or_default())]
    Invalid {
        path: PathBuf,
        line: Option<u64>,
        field: Option<String>,
        message: String,
    },
}

/// Load every `*.yaml` / `*.yml` in `dir`, in file-name order. A missing directory holds no
/// tools. `env` expands `${VAR}` in the files and supplies the commands' small environment.
pub fn load_dir(
    dir: &Path,
    env: &HashMap<String, String>,
) -> Result<Vec<Arc<dyn Tool>>, ManifestError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(ManifestError::ReadDir {
                path: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|source| ManifestError::ReadDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let path = entry.path();
        let is_yaml = matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        );
        if is_yaml && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    for path in files {
        let text = std::fs::read_to_string(&path).map_err(|source| ManifestError::Read {
            path: path.clone(),
            source,
        })?;
        let tool = parse(&text, &path, env)?;
        if let Some(first) = seen.get(&tool.name) {
            return Err(ManifestError::Invalid {
                line: Some(tool.name_line),
                path,
                field: Some("name".into()),
                message: format!(
                    "the tool name '{}' is already used by {}; names must be unique",
                    tool.name,
                    first.display()
                ),
            });
        }
        seen.insert(tool.name.clone(), path);
        tools.push(Arc::new(tool));
    }
    Ok(tools)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: Spanned<String>,
    description: Spanned<String>,
    parameters: Spanned<Value>,
    #[serde(default)]
    command: Option<Spanned<RawCommand>>,
    #[serde(default)]
    http: Option<Spanned<RawHttp>>,
    #[serde(default)]
    keep_fields: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCommand {
    argv: Spanned<Vec<String>>,
    #[serde(default)]
    timeout_s: Option<Spanned<u64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    method: Spanned<String>,
    url: Spanned<String>,
    #[serde(default)]
    json: bool,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    timeout_s: Option<Spanned<u64>>,
}

/// Parse one manifest's text. `path` is used in messages only.
pub fn parse(
    text: &str,
    path: &Path,
    env: &HashMap<String, String>,
) -> Result<ManifestTool, ManifestError> {
    let mut options = serde_saphyr::Options::default().with_properties(env.clone());
    options.strict_booleans = true;
    options.with_snippet = false;
    let mut failed_path: Option<String> = None;
    let parsed = serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        serde_path_to_error::deserialize::<_, RawManifest>(de).map_err(|e| {
            let p = e.path().to_string();
            if p != "." {
                failed_path = Some(p);
            }
            e.into_inner()
        })
    });
    let raw = parsed.map_err(|e| ManifestError::Invalid {
        path: path.to_path_buf(),
        line: e.location().map(|l| l.line()),
        field: failed_path.map(|p| clean_path(&p)),
        message: crate::config::yaml_error_message(&e.to_string()),
    })?;
    let invalid = |line: u64, field: &str, message: String| ManifestError::Invalid {
        path: path.to_path_buf(),
        line: Some(line),
        field: Some(field.to_string()),
        message,
    };

    let name = raw.name.value;
    let name_line = raw.name.referenced.line();
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(invalid(
            name_line,
            "name",
            format!("'{name}' is not a valid tool name: use 1 to 64 of a-z, 0-9 and '_'"),
        ));
    }
    if raw.description.value.trim().is_empty() {
        return Err(invalid(
            raw.description.referenced.line(),
            "description",
            "say when to use the tool, and when not: it is all the model knows about it".into(),
        ));
    }

    let parameters = raw.parameters.value;
    let params_line = raw.parameters.referenced.line();
    if parameters.get("type").and_then(Value::as_str) != Some("object") {
        return Err(invalid(
            params_line,
            "parameters",
            "must be an object schema: {type: object, properties: {...}}".into(),
        ));
    }
    if let Err(e) = jsonschema::validator_for(&parameters) {
        return Err(invalid(
            params_line,
            "parameters",
            format!("not a valid JSON Schema: {e}"),
        ));
    }
    let properties: BTreeSet<String> = parameters
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let check_placeholders = |t: &Template, line: u64, field: &str| {
        for p in t.params() {
            if !properties.contains(p) {
                return Err(invalid(
                    line,
                    field,
                    format!(
                        "the placeholder {{{{{p}}}}} is not a parameter (declare it under parameters.properties)"
                    ),
                ));
            }
        }
        Ok(())
    };

    let (action, timeout) = match (raw.command, raw.http) {
        (Some(_), Some(h)) => {
            return Err(invalid(
                h.referenced.line(),
                "http",
                "a manifest has either `command` or `http`, not both".into(),
            ));
        }
        (None, None) => {
            return Err(invalid(
                name_line,
                "command",
                "a manifest needs either `command: {argv: [...]}` or `http: {method, url}`".into(),
            ));
        }
        (Some(c), None) => {
            let argv_line = c.value.argv.referenced.line();
            let mut argv = Vec::with_capacity(c.value.argv.value.len());
            for a in &c.value.argv.value {
                let a = crate::config::expand_vars(a, env)
                    .map_err(|m| invalid(argv_line, "command.argv", m))?;
                argv.push(Template::parse(&a));
            }
            let Some(program) = argv.first() else {
                return Err(invalid(
                    argv_line,
                    "command.argv",
                    "is empty: give the program and its arguments".into(),
                ));
            };
            let Some(program) = program.literal() else {
                return Err(invalid(
                    argv_line,
                    "command.argv",
                    "the program (the first element) must be fixed text, not a placeholder".into(),
                ));
            };
            if program.is_empty() {
                return Err(invalid(
                    argv_line,
                    "command.argv",
                    "the program is empty".into(),
                ));
            }
            for t in &argv {
                check_placeholders(t, argv_line, "command.argv")?;
            }
            let timeout = checked_timeout(c.value.timeout_s, "command.timeout_s", &invalid)?;
            let env = INHERITED_ENV
                .iter()
                .filter_map(|k| env.get(*k).map(|v| (k.to_string(), v.clone())))
                .collect();
            (
                Action::Command {
                    program: program.to_string(),
                    args: argv[1..].to_vec(),
                    env,
                },
                timeout,
            )
        }
        (None, Some(h)) => {
            let h = h.value;
            let method_line = h.method.referenced.line();
            let method = match h.method.value.to_ascii_uppercase().as_str() {
                "GET" => reqwest::Method::GET,
                "POST" => reqwest::Method::POST,
                "PUT" => reqwest::Method::PUT,
                "PATCH" => reqwest::Method::PATCH,
                "DELETE" => reqwest::Method::DELETE,
                other => {
                    return Err(invalid(
                        method_line,
                        "http.method",
                        format!("'{other}' is not supported: use GET, POST, PUT, PATCH or DELETE"),
                    ));
                }
            };
            let url_line = h.url.referenced.line();
            let url = crate::config::expand_vars(&h.url.value, env)
                .map_err(|m| invalid(url_line, "http.url", m))?;
            let url = Template::parse(&url);
            check_placeholders(&url, url_line, "http.url")?;
            check_url(&url).map_err(|m| invalid(url_line, "http.url", m))?;
            let mut headers = reqwest::header::HeaderMap::new();
            for (k, v) in &h.headers {
                let field = format!("http.headers.{k}");
                let line = v.referenced.line();
                let v = crate::config::expand_vars(&v.value, env)
                    .map_err(|m| invalid(line, &field, m))?;
                let hn = reqwest::header::HeaderName::from_bytes(k.as_bytes())
                    .map_err(|e| invalid(line, &field, format!("not a valid header name: {e}")))?;
                let mut hv = reqwest::header::HeaderValue::from_str(&v)
                    .map_err(|e| invalid(line, &field, format!("not a valid header value: {e}")))?;
                // Headers often carry tokens: keep them out of any Debug output.
                hv.set_sensitive(true);
                headers.insert(hn, hv);
            }
            let timeout = checked_timeout(h.timeout_s, "http.timeout_s", &invalid)?;
            // A connect failure should be seen (and retried) well before the attempt's
            // overall timeout ends the call.
            let connect = timeout.map(|t| t / 2).unwrap_or(Duration::from_secs(5));
            let client = reqwest::Client::builder()
                .connect_timeout(connect)
                .user_agent(concat!("hermes-agent/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| {
                    invalid(
                        url_line,
                        "http",
                        format!("cannot build an HTTP client: {e}"),
                    )
                })?;
            (
                Action::Http {
                    method,
                    url,
                    json: h.json,
                    headers,
                    client,
                },
                timeout,
            )
        }
    };

    Ok(ManifestTool {
        name,
        name_line,
        description: raw.description.value.trim().to_string(),
        parameters,
        keep_fields: raw.keep_fields,
        timeout,
        action,
        source: path.to_path_buf(),
    })
}

fn checked_timeout<F>(
    t: Option<Spanned<u64>>,
    field: &str,
    invalid: &F,
) -> Result<Option<Duration>, ManifestError>
where
    F: Fn(u64, &str, String) -> ManifestError,
{
    match t {
        None => Ok(None),
        Some(t) if t.value == 0 => Err(invalid(
            t.referenced.line(),
            field,
            "must be at least 1 (seconds)".into(),
        )),
        Some(t) => Ok(Some(Duration::from_secs(t.value))),
    }
}

/// A URL template must be http(s) with a fixed host: placeholders may only follow the
/// first `/`, `?` or `#` after the authority, so no argument can pick the server.
fn check_url(url: &Template) -> Result<(), String> {
    let fixed = match url.0.first() {
        Some(Piece::Lit(s)) => s.as_str(),
        _ => "",
    };
    let Some(scheme_end) = fixed.find("://") else {
        return Err("must start with a fixed http:// or https:// address".into());
    };
    let has_param = url.0.iter().any(|p| matches!(p, Piece::Param(_)));
    let authority_closed = fixed[scheme_end + 3..].contains(['/', '?', '#']);
    if has_param && !authority_closed {
        return Err(
            "placeholders may only appear after the host (in the path or query), so an argument can never choose the server"
                .into(),
        );
    }
    let sample = url.render(&Map::new(), |_| "x".to_string());
    let parsed = reqwest::Url::parse(&sample).map_err(|e| format!("not a valid URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err("must be an http:// or https:// URL with a host".into());
    }
    Ok(())
}

/// `Spanned` wraps values in `value`; users never wrote that key.
fn clean_path(p: &str) -> String {
    p.split('.')
        .filter(|s| *s != "value")
        .collect::<Vec<_>>()
        .join(".")
}

/// A tool loaded from a manifest.
pub struct ManifestTool {
    name: String,
    name_line: u64,
    description: String,
    parameters: Value,
    keep_fields: Vec<String>,
    timeout: Option<Duration>,
    action: Action,
    /// The file it came from, for messages.
    source: PathBuf,
}

enum Action {
    Command {
        program: String,
        args: Vec<Template>,
        /// The command's whole environment (see [`INHERITED_ENV`]).
        env: Vec<(String, String)>,
    },
    Http {
        method: reqwest::Method,
        url: Template,
        json: bool,
        headers: reqwest::header::HeaderMap,
        client: reqwest::Client,
    },
}

impl std::fmt::Debug for ManifestTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManifestTool")
            .field("name", &self.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::run::{output_value, render_argv};
    use super::*;
    use serde_json::json;

    #[test]
    fn templates_parse_placeholders_and_keep_other_braces() {
        let t = Template::parse("--sku={{ sku }}-x");
        assert_eq!(
            t.0,
            vec![
                Piece::Lit("--sku=".into()),
                Piece::Param("sku".into()),
                Piece::Lit("-x".into())
            ]
        );
        assert_eq!(Template::parse("{{.Name}}").literal(), Some("{{.Name}}"));
        assert_eq!(Template::parse("a {{ b").literal(), Some("a {{ b"));
        assert_eq!(Template::parse("{{x}}").sole_param(), Some("x"));
    }

    #[test]
    fn argv_fills_whole_elements_and_drops_absent_optionals() {
        let t: Vec<Template> = [
            "-h",
            "{{path}}",
            "--n={{n}}",
            "{{flag}}",
            "pre{{missing}}post",
        ]
        .iter()
        .map(|s| Template::parse(s))
        .collect();
        let args = json!({"path": "/a b; rm -rf /", "n": 3, "flag": true});
        let args = args.as_object().cloned().unwrap_or_default();
        assert_eq!(
            render_argv(&t, &args),
            vec!["-h", "/a b; rm -rf /", "--n=3", "true", "prepost"]
        );
        let none = Map::new();
        assert_eq!(render_argv(&t, &none), vec!["-h", "--n=", "prepost"]);
    }

    #[test]
    fn url_values_are_percent_encoded() {
        let t = Template::parse("https://h.example/v1/{{id}}?q={{q}}");
        let args = json!({"id": "../admin", "q": "a&b=c@evil.example/"});
        let args = args.as_object().cloned().unwrap_or_default();
        assert_eq!(
            t.render(&args, percent_encode),
            "https://h.example/v1/..%2Fadmin?q=a%26b%3Dc%40evil.example%2F"
        );
    }

    #[test]
    fn the_host_cannot_be_a_placeholder() {
        assert!(check_url(&Template::parse("https://{{host}}/x")).is_err());
        assert!(check_url(&Template::parse("https://api.example{{x}}/")).is_err());
        assert!(check_url(&Template::parse("{{u}}")).is_err());
        assert!(check_url(&Template::parse("ftp://h.example/{{x}}")).is_err());
        assert!(check_url(&Template::parse("https://h.example/{{x}}")).is_ok());
        assert!(check_url(&Template::parse("http://127.0.0.1:9/a?b={{x}}")).is_ok());
    }

    #[test]
    fn env_expansion_in_quoted_values() {
        let env = HashMap::from([("TOKEN".to_string(), "s3cret".to_string())]);
        assert_eq!(
            crate::config::expand_vars("Bearer ${TOKEN}", &env).as_deref(),
            Ok("Bearer s3cret")
        );
        assert_eq!(
            crate::config::expand_vars("${NOPE:-x}-${TOKEN}", &env).as_deref(),
            Ok("x-s3cret")
        );
        assert_eq!(
            crate::config::expand_vars("{{a}} ${ not a var } $5", &env).as_deref(),
            Ok("{{a}} ${ not a var } $5")
        );
        let e = crate::config::expand_vars("${MISSING}", &env).unwrap_err();
        assert!(e.contains("MISSING is not set"), "{e}");
    }

    #[test]
    fn output_is_json_when_it_is_json() {
        assert_eq!(output_value(b"{\"a\":1}\n", false), json!({"a": 1}));
        assert_eq!(output_value(b"hello\n", false), json!("hello"));
        assert_eq!(output_value(b"", false), json!(""));
        let cut = output_value(b"{\"a\":", true);
        assert!(cut.as_str().is_some_and(|s| s.contains("output cut")));
    }
}
