//! Reading one manifest file: the YAML into raw sections, then each section checked on its
//! own (`name`, `description`, `parameters`, then `command` or `http`), every error naming
//! the file, the line and the field.

use super::template::{Piece, Template};
use super::{Action, INHERITED_ENV, ManifestError, ManifestTool};
use crate::tools::ToolInfo;
use crate::tools::sandbox::{Mode, Policy, Widening};
use hermes_config::InvalidAt;
use serde::Deserialize;
use serde_json::{Map, Value};
use serde_saphyr::Spanned;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::Duration;

/// The connect timeout of an HTTP tool whose manifest sets no `timeout_s` (with one, it is
/// half of it): a host that does not answer is seen, and retried, well before a call's end.
const DEFAULT_CONNECT: Duration = Duration::from_secs(5);

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
    /// `required`: every call waits for a person's approval.
    #[serde(default)]
    approval: Option<Spanned<Approval>>,
    /// `required`, or a widening of the box (crates/engine/src/tools/sandbox).
    #[serde(default)]
    sandbox: Option<Spanned<RawSandbox>>,
}

/// A manifest's `sandbox` field: the word `required`, or what the box is widened by.
#[derive(Deserialize)]
#[serde(
    untagged,
    expecting = "`required`, or a map of what widens the box: {network, read, write, memory_mb, processes}"
)]
enum RawSandbox {
    Word(SandboxWord),
    Widen(Widening),
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum SandboxWord {
    /// Refuse to run when the kernel cannot confine it fully.
    Required,
}

/// A manifest's `approval` field.
#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Approval {
    /// Each call waits for a person.
    Required,
    /// The default: calls run without asking (unless `tools.approval` names the tool).
    None,
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

/// The file being read, for errors that name it.
struct Site<'a> {
    path: &'a Path,
}

impl Site<'_> {
    fn invalid(&self, line: u64, field: &str, message: impl Into<String>) -> ManifestError {
        ManifestError::Invalid(InvalidAt {
            path: self.path.to_path_buf(),
            line: Some(line),
            key: Some(field.to_string()),
            message: message.into(),
        })
    }
}

/// Parse one manifest's text. `path` is used in messages only; `env` expands `${VAR}`.
pub fn parse(
    text: &str,
    path: &Path,
    env: &HashMap<String, String>,
) -> Result<ManifestTool, ManifestError> {
    let raw = read_raw(text, path, env)?;
    let site = Site { path };
    let name_line = raw.name.referenced.line();
    let name = check_name(raw.name.value, name_line, &site)?;
    let description = check_description(raw.description, &site)?;
    let (parameters, properties) = check_parameters(raw.parameters, &site)?;
    let (action, timeout) = match (raw.command, raw.http) {
        (Some(_), Some(h)) => {
            return Err(site.invalid(
                h.referenced.line(),
                "http",
                "a manifest has either `command` or `http`, not both",
            ));
        }
        (None, None) => {
            return Err(site.invalid(
                name_line,
                "command",
                "a manifest needs either `command: {argv: [...]}` or `http: {method, url}`",
            ));
        }
        (Some(c), None) => command(c.value, env, &properties, &site)?,
        (None, Some(h)) => http(h.value, env, &properties, &site)?,
    };
    let approval_required = raw.approval.map(|a| a.value) == Some(Approval::Required);
    let sandbox = sandbox_policy(raw.sandbox, &action, env, &site)?;
    Ok(ManifestTool {
        info: ToolInfo {
            timeout,
            approval_required,
            ..ToolInfo::new(name, description, parameters)
        },
        name_line,
        keep_fields: raw.keep_fields,
        action,
        source: path.to_path_buf(),
        sandbox,
    })
}

/// The tool's sandbox: what the manifest widens (or requires), plus its own files — the
/// manifest's folder, the program, and any script a fixed argument names.
fn sandbox_policy(
    raw_sandbox: Option<Spanned<RawSandbox>>,
    action: &Action,
    env: &HashMap<String, String>,
    site: &Site,
) -> Result<Policy, ManifestError> {
    let (widening, required) = match raw_sandbox {
        None => (Widening::default(), false),
        Some(s) => match s.value {
            RawSandbox::Word(SandboxWord::Required) => (Widening::default(), true),
            RawSandbox::Widen(w) => {
                if let Err((field, message)) = w.check() {
                    return Err(site.invalid(
                        s.referenced.line(),
                        &format!("sandbox.{field}"),
                        message,
                    ));
                }
                (w, false)
            }
        },
    };
    let mut sandbox = Policy::new(
        Mode::Enforce,
        &widening,
        required,
        env.get("HOME").map(Path::new),
        site.path.display().to_string(),
    );
    if let Some(dir) = site.path.parent() {
        sandbox.own_dir(&std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()));
    }
    if let Action::Command { program, args, .. } = action {
        sandbox.own_program(program, env.get("PATH").map(String::as_str));
        // A fixed argument naming a file (a script the program runs) is the tool's own too.
        for a in args.iter().filter_map(Template::literal) {
            let a = Path::new(a);
            if a.is_absolute()
                && a.is_file()
                && let Some(dir) = a.parent()
            {
                sandbox.own_dir(dir);
            }
        }
    }
    Ok(sandbox)
}

/// The YAML as raw sections, with `${VAR}` expanded in plain scalars; a syntax error, an
/// unknown field or a wrong type names its line and field.
fn read_raw(
    text: &str,
    path: &Path,
    env: &HashMap<String, String>,
) -> Result<RawManifest, ManifestError> {
    hermes_config::read_yaml::<RawManifest>(text, env).map_err(|e| {
        let mut at = e.at(path);
        at.key = at.key.map(|p| clean_path(&p));
        ManifestError::Invalid(at)
    })
}

fn check_name(name: String, line: u64, site: &Site<'_>) -> Result<String, ManifestError> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if valid {
        return Ok(name);
    }
    Err(site.invalid(
        line,
        "name",
        format!("'{name}' is not a valid tool name: use 1 to 64 of a-z, 0-9 and '_'"),
    ))
}

fn check_description(d: Spanned<String>, site: &Site<'_>) -> Result<String, ManifestError> {
    let text = d.value.trim();
    if text.is_empty() {
        return Err(site.invalid(
            d.referenced.line(),
            "description",
            "say when to use the tool, and when not: it is all the model knows about it",
        ));
    }
    Ok(text.to_string())
}

/// The schema, checked to be a valid object schema, and the names of its properties (the
/// only names a `{{placeholder}}` may use).
fn check_parameters(
    p: Spanned<Value>,
    site: &Site<'_>,
) -> Result<(Value, BTreeSet<String>), ManifestError> {
    let line = p.referenced.line();
    let parameters = p.value;
    if parameters.get("type").and_then(Value::as_str) != Some("object") {
        return Err(site.invalid(
            line,
            "parameters",
            "must be an object schema: {type: object, properties: {...}}",
        ));
    }
    if let Err(e) = jsonschema::validator_for(&parameters) {
        return Err(site.invalid(line, "parameters", format!("not a valid JSON Schema: {e}")));
    }
    let properties = parameters
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    Ok((parameters, properties))
}

fn check_placeholders(
    t: &Template,
    line: u64,
    field: &str,
    properties: &BTreeSet<String>,
    site: &Site<'_>,
) -> Result<(), ManifestError> {
    match t.params().find(|p| !properties.contains(*p)) {
        None => Ok(()),
        Some(p) => Err(site.invalid(
            line,
            field,
            format!(
                "the placeholder {{{{{p}}}}} is not a parameter (declare it under parameters.properties)"
            ),
        )),
    }
}

fn command(
    c: RawCommand,
    env: &HashMap<String, String>,
    properties: &BTreeSet<String>,
    site: &Site<'_>,
) -> Result<(Action, Option<Duration>), ManifestError> {
    let line = c.argv.referenced.line();
    let field = "command.argv";
    let mut argv = Vec::with_capacity(c.argv.value.len());
    for a in &c.argv.value {
        let a = hermes_config::expand_vars(a, env)
            .map_err(|e| site.invalid(line, field, e.to_string()))?;
        argv.push(Template::parse(&a));
    }
    let Some(program) = argv.first() else {
        return Err(site.invalid(line, field, "is empty: give the program and its arguments"));
    };
    let Some(program) = program.literal() else {
        return Err(site.invalid(
            line,
            field,
            "the program (the first element) must be fixed text, not a placeholder",
        ));
    };
    if program.is_empty() {
        return Err(site.invalid(line, field, "the program is empty"));
    }
    for t in &argv {
        check_placeholders(t, line, field, properties, site)?;
    }
    let timeout = checked_timeout(c.timeout_s, "command.timeout_s", site)?;
    let env = INHERITED_ENV
        .iter()
        .filter_map(|k| env.get(*k).map(|v| (k.to_string(), v.clone())))
        .collect();
    let action = Action::Command {
        program: program.to_string(),
        args: argv[1..].to_vec(),
        env,
    };
    Ok((action, timeout))
}

fn http(
    h: RawHttp,
    env: &HashMap<String, String>,
    properties: &BTreeSet<String>,
    site: &Site<'_>,
) -> Result<(Action, Option<Duration>), ManifestError> {
    let method = match h.method.value.to_ascii_uppercase().as_str() {
        "GET" => reqwest::Method::GET,
        "POST" => reqwest::Method::POST,
        "PUT" => reqwest::Method::PUT,
        "PATCH" => reqwest::Method::PATCH,
        "DELETE" => reqwest::Method::DELETE,
        other => {
            return Err(site.invalid(
                h.method.referenced.line(),
                "http.method",
                format!("'{other}' is not supported: use GET, POST, PUT, PATCH or DELETE"),
            ));
        }
    };
    let url_line = h.url.referenced.line();
    let url = hermes_config::expand_vars(&h.url.value, env)
        .map_err(|e| site.invalid(url_line, "http.url", e.to_string()))?;
    let url = Template::parse(&url);
    check_placeholders(&url, url_line, "http.url", properties, site)?;
    check_url(&url).map_err(|m| site.invalid(url_line, "http.url", m))?;
    let headers = headers(&h.headers, env, site)?;
    let timeout = checked_timeout(h.timeout_s, "http.timeout_s", site)?;
    // A connect failure should be seen (and retried) well before the attempt's overall
    // timeout ends the call.
    let connect = timeout.map(|t| t / 2).unwrap_or(DEFAULT_CONNECT);
    let sample = reqwest::Url::parse(&url.render(&Map::new(), |_| "x".to_string()))
        .map_err(|e| site.invalid(url_line, "http.url", format!("not a valid URL: {e}")))?;
    // The manifest's own host may be private (the person named it); redirects are guarded.
    let client =
        crate::tools::builtin::web::guard::named_host_client(&sample, connect).map_err(|e| {
            site.invalid(
                url_line,
                "http",
                format!("cannot build an HTTP client: {e}"),
            )
        })?;
    let action = Action::Http {
        method,
        url,
        json: h.json,
        headers,
        client,
    };
    Ok((action, timeout))
}

fn headers(
    raw: &BTreeMap<String, Spanned<String>>,
    env: &HashMap<String, String>,
    site: &Site<'_>,
) -> Result<reqwest::header::HeaderMap, ManifestError> {
    let mut headers = reqwest::header::HeaderMap::new();
    for (k, v) in raw {
        let field = format!("http.headers.{k}");
        let line = v.referenced.line();
        let v = hermes_config::expand_vars(&v.value, env)
            .map_err(|e| site.invalid(line, &field, e.to_string()))?;
        let name = reqwest::header::HeaderName::from_bytes(k.as_bytes())
            .map_err(|e| site.invalid(line, &field, format!("not a valid header name: {e}")))?;
        let mut value = reqwest::header::HeaderValue::from_str(&v)
            .map_err(|e| site.invalid(line, &field, format!("not a valid header value: {e}")))?;
        // Headers often carry tokens: keep them out of any Debug output.
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    Ok(headers)
}

fn checked_timeout(
    t: Option<Spanned<u64>>,
    field: &str,
    site: &Site<'_>,
) -> Result<Option<Duration>, ManifestError> {
    match t {
        None => Ok(None),
        Some(t) if t.value == 0 => {
            Err(site.invalid(t.referenced.line(), field, "must be at least 1 (seconds)"))
        }
        Some(t) => Ok(Some(Duration::from_secs(t.value))),
    }
}

/// A URL template must be http(s) with a fixed host: placeholders may only follow the
/// first `/`, `?` or `#` after the authority, so no argument can pick the server.
pub(super) fn check_url(url: &Template) -> Result<(), String> {
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
