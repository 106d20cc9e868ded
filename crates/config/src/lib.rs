//! hermes-config, the layer above the store. Configuration: the typed form of `settings.yaml`, where it is found, and whether it is valid.
//!
//! Owns: locating the file (`--config`, `HERMES_CONFIG`, the XDG config dir, else built-in
//! defaults), `${VAR}` expansion from the environment, parsing with precise `file:line: key`
//! errors, semantic validation, and resolving the data dir, the person's regression cases'
//! directory and the time zone (`TZ`, see [`zone`]). This is the only crate that reads
//! environment variables (the entry layer passes the CLI's values in through [`Sources`]).
//! Must not: open databases, talk to the network, or hold runtime state; depend on any crate of
//! the workspace but `hermes-store` (for its URL parser and `util`).

mod channels;
mod chat_rules;
mod embeddings;
mod files;
mod inbox;
mod locate;
pub mod sandbox;
mod settings;
mod validate;
pub mod zone;

pub(crate) use channels::TELEGRAM_API;
pub use channels::{
    ChannelSettings, MATRIX_NOT_BUILT, MatrixSettings, MatrixTarget, TELEGRAM_NOT_BUILT,
    TelegramSettings,
};
pub use embeddings::EmbeddingSettings;
pub use files::{ReadError, read_text, yaml_files};
pub use inbox::*;
pub use locate::line_of_key;
pub use settings::*;
pub use validate::{Violation, is_loopback_host};
pub(crate) use zone::TimeZone;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Where a configuration came from; shown by `config check`, `serve` and `doctor`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// A file that was found and parsed.
    File(PathBuf),
    /// No file anywhere: the built-in defaults. `looked_in` lists the places searched.
    Defaults { looked_in: Vec<PathBuf> },
}

impl std::fmt::Display for ConfigSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConfigSource::File(p) => write!(f, "{}", p.display()),
            ConfigSource::Defaults { looked_in } => {
                write!(f, "built-in defaults (no config file; looked in ")?;
                for (i, p) in looked_in.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{}", p.display())?;
                }
                write!(f, ")")
            }
        }
    }
}

/// An error in a configuration, always naming the file and, where known, the line and key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Invalid(InvalidAt),
    #[error(
        "no usable data directory: set storage.data_dir in the config, pass --data-dir, or set HERMES_DATA_DIR"
    )]
    NoDataDir,
}

/// Values the entry layer collected from its flags; the environment is read here.
#[derive(Debug, Default, Clone)]
pub struct Sources {
    /// `--config PATH`.
    pub config_flag: Option<PathBuf>,
    /// `--data-dir DIR`.
    pub data_dir_flag: Option<PathBuf>,
}

/// A loaded, validated configuration plus the facts about where it came from.
#[derive(Debug, Clone)]
pub struct Config {
    /// The effective settings: `scheduler.timezone` always names a zone here (an empty one in
    /// the file has become the machine's), so every part reads one name and nothing more.
    pub settings: Settings,
    pub source: ConfigSource,
    /// The resolved data directory (flag > env > `storage.data_dir` > XDG data dir).
    pub data_dir: PathBuf,
    /// Whether this command named the data dir (`--data-dir`, `HERMES_DATA_DIR`) rather than
    /// taking the settings' or the XDG one: the CLI then works on that data dir, never through
    /// a daemon that serves another.
    pub data_dir_named: bool,
    /// The resolved directory of manifest tools.
    pub manifests_dir: PathBuf,
    /// The zone in `settings.scheduler.timezone`, and where it came from.
    pub timezone: TimeZone,
    /// The person's own regression cases (`*.yaml`), run by `hermes-agent eval` after the
    /// shipped ones: the `evals` directory beside the XDG settings file. `None`: none.
    pub evals_dir: Option<PathBuf>,
}

impl Config {
    /// Locate, read, expand, parse and validate the configuration.
    pub fn load(sources: &Sources) -> Result<Config, ConfigError> {
        let env = env_map();
        let (settings, source) = match locate_file(sources, &env) {
            Ok(path) => {
                let text = read_text(&path, "config file")?;
                (parse(&text, &path, &env)?, ConfigSource::File(path))
            }
            Err(looked_in) => (Settings::default(), ConfigSource::Defaults { looked_in }),
        };
        let data_dir = resolve_data_dir(sources, &env, &settings, &source)?;
        let data_dir_named = sources.data_dir_flag.is_some() || named_in_env(&env);
        let manifests_dir = resolve_relative(&source, &env, &settings.tools.manifests_dir);
        let (settings, timezone) = with_zone(settings, env.get("TZ").map(String::as_str));
        Ok(Config {
            settings,
            source,
            data_dir,
            data_dir_named,
            manifests_dir,
            timezone,
            evals_dir: xdg_evals_dir(),
        })
    }

    /// A configuration from already-built settings (tests, embedding). An empty
    /// `scheduler.timezone` becomes the machine's zone, as in [`Config::load`].
    pub fn from_settings(settings: Settings, data_dir: PathBuf) -> Config {
        let manifests_dir = PathBuf::from(&settings.tools.manifests_dir);
        let tz_var = std::env::var("TZ").ok();
        let (settings, timezone) = with_zone(settings, tz_var.as_deref());
        Config {
            settings,
            source: ConfigSource::Defaults { looked_in: vec![] },
            data_dir,
            data_dir_named: false,
            manifests_dir,
            timezone,
            evals_dir: None,
        }
    }
}

/// The settings with `scheduler.timezone` resolved to a zone name, and that zone.
fn with_zone(mut settings: Settings, tz_var: Option<&str>) -> (Settings, TimeZone) {
    let zone = zone::resolve(
        &settings.scheduler.timezone,
        tz_var,
        &zone::ZoneFiles::system(),
    );
    settings.scheduler.timezone = zone.tz.name().to_string();
    (settings, zone)
}

/// The process environment, for `${VAR}` expansion in files other than settings.yaml (tool
/// manifests). Read here so that no other module touches the environment.
pub fn env_map() -> HashMap<String, String> {
    std::env::vars().collect()
}

/// The XDG config file path (`~/.config/hermes-agent/settings.yaml` on Linux).
pub(crate) fn xdg_config_file() -> Option<PathBuf> {
    directories::ProjectDirs::from("", "", "hermes-agent")
        .map(|d| d.config_dir().join("settings.yaml"))
}

/// The person's regression cases: `~/.config/hermes-agent/evals` on Linux.
pub(crate) fn xdg_evals_dir() -> Option<PathBuf> {
    directories::ProjectDirs::from("", "", "hermes-agent").map(|d| d.config_dir().join("evals"))
}

/// The XDG data dir (`~/.local/share/hermes-agent` on Linux).
pub(crate) fn xdg_data_dir() -> Option<PathBuf> {
    directories::ProjectDirs::from("", "", "hermes-agent").map(|d| d.data_dir().to_path_buf())
}

/// Returns the config file to read, or the list of places looked in when there is none.
/// An explicitly named file (flag or env) that does not exist is still returned, so the
/// read fails loudly instead of silently falling back to defaults.
fn locate_file(sources: &Sources, env: &HashMap<String, String>) -> Result<PathBuf, Vec<PathBuf>> {
    if let Some(p) = &sources.config_flag {
        return Ok(p.clone());
    }
    if let Some(p) = env.get("HERMES_CONFIG").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    let mut looked_in = Vec::new();
    if let Some(p) = xdg_config_file() {
        if p.is_file() {
            return Ok(p);
        }
        looked_in.push(p);
    }
    Err(looked_in)
}

/// `HERMES_DATA_DIR` set to a path (an empty one names nothing).
fn named_in_env(env: &HashMap<String, String>) -> bool {
    env.get("HERMES_DATA_DIR").is_some_and(|v| !v.is_empty())
}

fn resolve_data_dir(
    sources: &Sources,
    env: &HashMap<String, String>,
    settings: &Settings,
    source: &ConfigSource,
) -> Result<PathBuf, ConfigError> {
    if let Some(p) = &sources.data_dir_flag {
        return Ok(p.clone());
    }
    if let Some(p) = env.get("HERMES_DATA_DIR").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if !settings.storage.data_dir.is_empty() {
        return Ok(resolve_relative(source, env, &settings.storage.data_dir));
    }
    xdg_data_dir().ok_or(ConfigError::NoDataDir)
}

/// Relative paths in a config file are taken from the file's own directory, so a service
/// started from `$HOME` finds the same `tools/` and data dir as a shell started next to the
/// file; `~/` is the home (`HOME`), as a shell would read it.
fn resolve_relative(source: &ConfigSource, env: &HashMap<String, String>, p: &str) -> PathBuf {
    let home = env.get("HOME").filter(|h| !h.is_empty());
    if let Some(home) = home {
        if p == "~" {
            return PathBuf::from(home);
        }
        if let Some(rest) = p.strip_prefix("~/") {
            return Path::new(home).join(rest);
        }
    }
    let path = Path::new(p);
    if path.is_absolute() {
        return path.to_path_buf();
    }
    match source {
        ConfigSource::File(f) => f
            .parent()
            .map(|d| d.join(path))
            .unwrap_or_else(|| path.to_path_buf()),
        ConfigSource::Defaults { .. } => path.to_path_buf(),
    }
}

/// Parse and validate settings text. `path` is only used in messages.
pub fn parse(
    text: &str,
    path: &Path,
    env: &HashMap<String, String>,
) -> Result<Settings, ConfigError> {
    let settings = match read_yaml::<Option<Settings>>(text, env) {
        // An empty file (or one holding only comments) means "all defaults".
        Ok(s) => s.unwrap_or_default(),
        Err(e) => {
            return Err(ConfigError::Invalid(e.at(path)));
        }
    };
    let settings = expand_quoted(settings, env).and_then(|s| s.validate().map(|()| s));
    let settings = match settings {
        Ok(s) => s,
        Err(v) => {
            let keys: Vec<&str> = v.key.split('.').collect();
            return Err(ConfigError::Invalid(InvalidAt {
                path: path.to_path_buf(),
                line: locate::line_of_key(text, &keys),
                key: (!v.key.is_empty()).then_some(v.key),
                message: v.message,
            }));
        }
    };
    Ok(settings)
}

/// What is wrong at a place of a YAML file a person wrote — the settings, a tool manifest, a
/// regression case — said the same way for all three: `file:line: key: message` (`?` for a
/// line not known).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{}: {}{message}", path.display(), line.map(|l| l.to_string()).unwrap_or_else(|| "?".into()), key.as_deref().map(|k| format!("{k}: ")).unwrap_or_default())]
pub struct InvalidAt {
    pub path: PathBuf,
    pub line: Option<u64>,
    /// The key or field path (`a.b[0].c`), when known.
    pub key: Option<String>,
    pub message: String,
}

/// Why YAML text did not read as the type asked for, in the user's terms.
pub struct YamlError {
    pub line: Option<u64>,
    /// The failing field's path (`a.b[0].c`), when serde got that far.
    pub key: Option<String>,
    pub message: String,
}

impl YamlError {
    /// This error, at `path`.
    pub fn at(self, path: &Path) -> InvalidAt {
        InvalidAt {
            path: path.to_path_buf(),
            line: self.line,
            key: self.key,
            message: self.message,
        }
    }
}

/// YAML text as `T`, with `${VAR}` expanded from `env` in plain scalars. Settings files and
/// tool manifests read the same way: only `true`/`false` are booleans (`yes`/`on` surprise
/// people), and an error names its line and field.
pub fn read_yaml<T: serde::de::DeserializeOwned>(
    text: &str,
    env: &HashMap<String, String>,
) -> Result<T, YamlError> {
    let mut options = serde_saphyr::Options::default().with_properties(env.clone());
    options.strict_booleans = true;
    options.with_snippet = false;
    let mut failed_path: Option<String> = None;
    let parsed = serde_saphyr::with_deserializer_from_str_with_options(text, options, |de| {
        serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
            let p = e.path().to_string();
            if p != "." {
                failed_path = Some(p);
            }
            e.into_inner()
        })
    });
    parsed.map_err(|e| {
        let line = e.location().map(|l| l.line());
        let raw = e.to_string();
        // An unset `${VAR}` fails while the parser reads the map holding it, so the path ends
        // at the map; the key is the one written on the line.
        let key = match (failed_path, line) {
            (Some(map), Some(n)) if raw.starts_with("missing property") => {
                Some(with_key_on_line(map, text, n))
            }
            (path, _) => path,
        };
        YamlError {
            line,
            key,
            message: yaml_error_message(&raw),
        }
    })
}

/// `map`'s path with the key written on line `n` (1-based) of `text`, when that line is a
/// `key: value` and the path does not already end with it.
fn with_key_on_line(map: String, text: &str, n: u64) -> String {
    let key = usize::try_from(n)
        .ok()
        .and_then(|n| text.lines().nth(n.checked_sub(1)?))
        .and_then(|l| l.trim_start().trim_start_matches("- ").split_once(':'))
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_'));
    match key {
        Some(k) if !map.ends_with(k) => format!("{map}.{k}"),
        _ => map,
    }
}

/// A serde-saphyr error in the user's terms: its own "at line X column Y" dropped (callers
/// print the location in front) and Rust type names replaced by what to write.
fn yaml_error_message(raw: &str) -> String {
    let first = raw.lines().next().unwrap_or(raw).trim();
    let first = match first.find(" at line ") {
        Some(i) => &first[..i],
        None => first,
    };
    if let Some(name) = first
        .strip_prefix("missing property `")
        .and_then(|r| r.strip_suffix('`'))
    {
        return unset_var_message(name);
    }
    // The parser's advice is for programmers (a policy in its options), not for this file.
    if let Some(key) = first
        .strip_prefix("duplicate mapping key: ")
        .and_then(|r| r.split(", set DuplicateKeyPolicy").next())
    {
        return format!("'{key}' is written twice in the same section; keep one");
    }
    if first == "expected mapping start" {
        return "expected a section of `key: value` lines here (a settings file and a manifest are maps, not lists)".into();
    }
    let expected = match first {
        "invalid u8" => Some("expected a whole number from 0 to 255"),
        "invalid u16" => Some("expected a whole number from 0 to 65535"),
        "invalid u32" => Some("expected a whole number from 0 to 4294967295"),
        "invalid u64" | "invalid usize" => Some("expected a whole number (0 or more), e.g. 5"),
        "invalid i32" | "invalid i64" => Some("expected a whole number"),
        "invalid f32" | "invalid f64" => Some("expected a number"),
        "invalid bool" | "invalid boolean" => Some("expected true or false"),
        _ => None,
    };
    match expected {
        Some(e) => format!("{first}: {e}"),
        None => first.to_string(),
    }
}

/// A `${NAME}` whose variable is unset or empty, with no default.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "environment variable {0} is not set (the file uses ${{{0}}}); export it, put it in the service's EnvironmentFile, or write ${{{0}:-default}}"
)]
pub struct UnsetVar(pub String);

fn unset_var_message(name: &str) -> String {
    UnsetVar(name.to_string()).to_string()
}

/// Expand `${NAME}` and `${NAME:-default}` from `env`. The YAML parser expands plain scalars
/// itself; this covers quoted ones (`"Bearer ${TOKEN}"`) too. An unset or empty name without a
/// default is an error, never a silent empty string. Text that is not `${IDENT}` stays as is.
pub fn expand_vars(s: &str, env: &HashMap<String, String>) -> Result<String, UnsetVar> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start + 2..].find('}') else {
            break;
        };
        let inner = &rest[start + 2..start + 2 + len];
        let (name, default) = match inner.split_once(":-") {
            Some((n, d)) => (n, Some(d)),
            None => (inner, None),
        };
        let valid = !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            out.push_str(&rest[..start + 2]);
            rest = &rest[start + 2..];
            continue;
        }
        out.push_str(&rest[..start]);
        match (env.get(name).filter(|v| !v.is_empty()), default) {
            (Some(v), _) => out.push_str(v),
            (None, Some(d)) => out.push_str(d),
            (None, None) => return Err(UnsetVar(name.to_string())),
        }
        rest = &rest[start + 2 + len + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Expand `${VAR}` left in quoted strings after parsing, reporting the key of an unset one.
fn expand_quoted(settings: Settings, env: &HashMap<String, String>) -> Result<Settings, Violation> {
    fn walk(
        v: &mut serde_json::Value,
        path: &mut Vec<String>,
        env: &HashMap<String, String>,
    ) -> Result<bool, Violation> {
        match v {
            serde_json::Value::String(s) if s.contains("${") => {
                let expanded = expand_vars(s, env).map_err(|e| Violation {
                    key: path.join("."),
                    message: e.to_string(),
                })?;
                let changed = expanded != *s;
                *s = expanded;
                Ok(changed)
            }
            serde_json::Value::Object(map) => {
                let mut changed = false;
                for (k, child) in map.iter_mut() {
                    path.push(k.clone());
                    changed |= walk(child, path, env)?;
                    path.pop();
                }
                Ok(changed)
            }
            serde_json::Value::Array(items) => {
                let mut changed = false;
                for child in items.iter_mut() {
                    changed |= walk(child, path, env)?;
                }
                Ok(changed)
            }
            _ => Ok(false),
        }
    }
    let Ok(mut value) = serde_json::to_value(&settings) else {
        return Ok(settings);
    };
    if !walk(&mut value, &mut Vec::new(), env)? {
        return Ok(settings);
    }
    serde_json::from_value(value).map_err(|e| Violation {
        key: String::new(),
        message: format!("after expanding environment variables: {e}"),
    })
}

#[cfg(test)]
mod files_tests;
#[cfg(test)]
mod tests;
