//! Manifest tools: capabilities declared as YAML files in the manifests directory (`tools/`),
//! each either a command (an argv template, run without a shell) or an HTTP request.
//!
//! Owns: parsing and checking manifests (with `file:line: field: message` errors),
//! filling `{{param}}` placeholders, running the command or request, and mapping outcomes to
//! [`ToolError`]s (connect errors and 5xx are `Network`, so the registry retries them).
//! Must not: validate arguments, time out, retry or shape results — the registry does that
//! for every tool alike — and must never hand a template to a shell.

use super::{Tool, ToolContext, ToolError, ToolInfo};
use futures::future::BoxFuture;
use hermes_config::{InvalidAt, ReadError, read_text, yaml_files};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt};

mod parse;
mod run;
mod template;

pub use parse::parse;
use template::{Template, percent_encode, value_text};

/// A command's stdout and an HTTP body are read up to this many bytes.
pub(crate) const MAX_OUTPUT_BYTES: usize = 1024 * 1024;
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
    /// The manifests directory or a manifest.
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Invalid(InvalidAt),
    /// More than one manifest is wrong: each is named, so one `config check` shows them all.
    #[error("{} manifests are invalid:\n  {}", .0.len(), join_lines(.0))]
    Several(Vec<ManifestError>),
}

fn join_lines(errors: &[ManifestError]) -> String {
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    lines.join("\n  ")
}

impl ManifestError {
    /// One error for all the manifests that failed: itself when only one did.
    fn gather(mut errors: Vec<ManifestError>) -> Option<ManifestError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ManifestError::Several(errors)),
        }
    }
}

/// Load every `*.yaml` / `*.yml` in `dir`, in file-name order. A missing directory holds no
/// tools; when any manifest is wrong, none loads, and the error names every wrong one. `env` expands `${VAR}` in the files and supplies the commands' small environment.
/// Commands run confined (`tools.sandbox: enforce`, the default).
pub fn load_dir(
    dir: &Path,
    env: &HashMap<String, String>,
) -> Result<Vec<Arc<dyn Tool>>, ManifestError> {
    load_dir_with(dir, env, crate::tools::sandbox::Mode::Enforce)
}

/// [`load_dir`] with `tools.sandbox`'s mode; `warn` names each command tool left unconfined.
pub fn load_dir_with(
    dir: &Path,
    env: &HashMap<String, String>,
    mode: crate::tools::sandbox::Mode,
) -> Result<Vec<Arc<dyn Tool>>, ManifestError> {
    let files = yaml_files(dir, "manifests directory")?;
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut seen: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut errors = Vec::new();
    for path in files {
        let tool = read_text(&path, "manifest")
            .map_err(ManifestError::from)
            .and_then(|text| parse(&text, &path, env));
        let mut tool = match tool {
            Ok(tool) => tool,
            Err(e) => {
                errors.push(e);
                continue;
            }
        };
        tool.sandbox.set_mode(mode);
        tool.sandbox.warn_widening();
        tool.warn_missing_program(env);
        if mode == crate::tools::sandbox::Mode::Warn
            && matches!(tool.action, Action::Command { .. })
        {
            tracing::warn!(tool = %tool.info.name, manifest = %path.display(), "tools.sandbox is warn: this tool's command runs unconfined");
        }
        let name = tool.info.name.clone();
        let taken = if crate::tools::builtin::BUILTIN_NAMES.contains(&name.as_str()) {
            Some(format!(
                "'{name}' is the name of a built-in tool; pick another (built in: {})",
                crate::tools::builtin::BUILTIN_NAMES.join(", ")
            ))
        } else {
            seen.get(&name).map(|first| {
                format!(
                    "the tool name '{name}' is already used by {}; names must be unique",
                    first.display()
                )
            })
        };
        if let Some(message) = taken {
            errors.push(ManifestError::Invalid(InvalidAt {
                line: Some(tool.name_line),
                path,
                key: Some("name".into()),
                message,
            }));
            continue;
        }
        seen.insert(name, path);
        tools.push(Arc::new(tool));
    }
    match ManifestError::gather(errors) {
        Some(e) => Err(e),
        None => Ok(tools),
    }
}

/// A tool loaded from a manifest.
pub struct ManifestTool {
    info: ToolInfo,
    /// Where `name:` is, for the duplicate-name error.
    name_line: u64,
    keep_fields: Vec<String>,
    action: Action,
    /// The file it came from, for messages.
    source: PathBuf,
    /// The box its command runs in (crates/engine/src/tools/sandbox); unused by HTTP tools.
    sandbox: crate::tools::sandbox::Policy,
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

impl ManifestTool {
    /// Say, in the log, that the command's program is not there: the manifest is valid, but
    /// every call fails until the program is installed.
    fn warn_missing_program(&self, env: &HashMap<String, String>) {
        if let Some(problem) = self.missing_program(env) {
            tracing::warn!(
                tool = %self.info.name,
                manifest = %self.source.display(),
                "{problem}"
            );
        }
    }

    /// What is wrong with the command's program, when it is not there.
    fn missing_program(&self, env: &HashMap<String, String>) -> Option<String> {
        let Action::Command { program, .. } = &self.action else {
            return None;
        };
        let looked = missing_program(program, env.get("PATH").map(String::as_str))?;
        Some(format!(
            "`{program}` {looked}: every call of this tool fails until it is installed, or command.argv names another"
        ))
    }
}

/// Each command tool in `dir` whose program is not installed, as `NAME: problem` (for
/// `doctor`; loading warns of them too). Manifests that do not load are left to the load.
pub fn missing_programs(dir: &Path, env: &HashMap<String, String>) -> Vec<String> {
    let Ok(files) = yaml_files(dir, "manifests directory") else {
        return Vec::new();
    };
    files
        .iter()
        .filter_map(|path| {
            let text = read_text(path, "manifest").ok()?;
            let tool = parse(&text, path, env).ok()?;
            let problem = tool.missing_program(env)?;
            Some(format!(
                "{} ({}): {problem}",
                tool.info.name,
                path.display()
            ))
        })
        .collect()
}

/// How `program` was looked for when it is not there. `None` when it is, or when that cannot
/// be told here (a path relative to the directory the command runs in).
fn missing_program(program: &str, path: Option<&str>) -> Option<&'static str> {
    if program.starts_with('~') {
        return Some("is not expanded (`~` means nothing in a program's path; write it in full)");
    }
    let p = Path::new(program);
    if p.is_absolute() {
        return (!is_executable(p)).then_some("does not exist or is not executable");
    }
    if program.contains('/') {
        return None;
    }
    let found = path
        .unwrap_or_default()
        .split(':')
        .filter(|dir| !dir.is_empty())
        .any(|dir| is_executable(&Path::new(dir).join(program)));
    (!found).then_some("is not found on PATH")
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

impl std::fmt::Debug for ManifestTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManifestTool")
            .field("name", &self.info.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::parse::check_url;
    use super::run::{output_value, render_argv};
    use super::template::Piece;
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
    fn a_missing_program_is_told_by_how_it_was_looked_for() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().display().to_string();
        assert_eq!(
            missing_program("hermes-no-such-program", Some(&path)),
            Some("is not found on PATH")
        );
        assert_eq!(
            missing_program("sh", Some("/nonexistent:/bin:/usr/bin")),
            None
        );
        assert_eq!(missing_program("sh", None), Some("is not found on PATH"));
        assert_eq!(missing_program("/bin/sh", None), None);
        let plain = dir.path().join("not-executable");
        std::fs::write(&plain, "#!/bin/sh\n").expect("write");
        assert_eq!(
            missing_program(&plain.display().to_string(), None),
            Some("does not exist or is not executable")
        );
        // Relative to where the command runs: not for the check to say.
        assert_eq!(missing_program("./bin/tool", Some(&path)), None);
        assert!(missing_program("~/bin/tool", Some(&path)).is_some_and(|m| m.contains("~")));
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
            hermes_config::expand_vars("Bearer ${TOKEN}", &env).as_deref(),
            Ok("Bearer s3cret")
        );
        assert_eq!(
            hermes_config::expand_vars("${NOPE:-x}-${TOKEN}", &env).as_deref(),
            Ok("x-s3cret")
        );
        assert_eq!(
            hermes_config::expand_vars("{{a}} ${ not a var } $5", &env).as_deref(),
            Ok("{{a}} ${ not a var } $5")
        );
        let e = hermes_config::expand_vars("${MISSING}", &env).unwrap_err();
        assert!(e.to_string().contains("MISSING is not set"), "{e}");
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
