//! The typed settings tree. Every key is optional; `Default` is the documented default and
//! must agree with the repository's `settings.yaml`.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Settings {
    pub model: ModelSettings,
    pub agent: AgentSettings,
    pub tools: ToolSettings,
    pub context: ContextSettings,
    pub memory: MemorySettings,
    pub scheduler: SchedulerSettings,
    pub notify: NotifySettings,
    pub server: ServerSettings,
    pub storage: StorageSettings,
    /// Named sub-agents for `delegate`.
    pub agents: BTreeMap<String, SubAgent>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSettings {
    pub default_profile: String,
    pub profiles: BTreeMap<String, Profile>,
}

impl Default for ModelSettings {
    fn default() -> Self {
        let mut profiles = BTreeMap::new();
        profiles.insert("fast".to_string(), Profile::default());
        profiles.insert(
            "pro".to_string(),
            Profile {
                model: "qwen2.5:14b".into(),
                timeout_s: 120,
                ..Profile::default()
            },
        );
        ModelSettings {
            default_profile: "fast".into(),
            profiles,
        }
    }
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Profile {
    pub base_url: String,
    /// Empty means "send no Authorization header" (Ollama, llama.cpp).
    pub api_key: String,
    pub model: String,
    pub temperature: f32,
    pub max_tokens: u32,
    pub timeout_s: u64,
}

impl Default for Profile {
    fn default() -> Self {
        Profile {
            base_url: "http://127.0.0.1:11434/v1".into(),
            api_key: String::new(),
            model: "qwen2.5:7b".into(),
            temperature: 0.2,
            max_tokens: 1024,
            timeout_s: 60,
        }
    }
}

// The key must never reach a log line, so Debug is written by hand.
impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Profile")
            .field("base_url", &self.base_url)
            .field(
                "api_key",
                &if self.api_key.is_empty() {
                    ""
                } else {
                    "<redacted>"
                },
            )
            .field("model", &self.model)
            .field("temperature", &self.temperature)
            .field("max_tokens", &self.max_tokens)
            .field("timeout_s", &self.timeout_s)
            .finish()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentSettings {
    pub max_steps: u32,
    pub task_timeout_s: u64,
    pub workers: u32,
    pub system_prompt_extra: String,
    /// On SIGTERM, how long running tasks may go on before they are stopped (reason `shutdown`).
    pub shutdown_grace_s: u64,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            max_steps: 8,
            task_timeout_s: 300,
            workers: 4,
            system_prompt_extra: String::new(),
            shutdown_grace_s: 30,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolSettings {
    pub timeout_s: u64,
    pub max_retries: u32,
    pub circuit_breaker_threshold: u32,
    pub circuit_breaker_cooldown_s: u64,
    pub result_max_tokens: u32,
    /// Tool names the agent may use; `"*"` allows every registered tool.
    pub allowlist: Vec<String>,
    pub manifests_dir: String,
    pub web_fetch: WebFetchSettings,
}

impl Default for ToolSettings {
    fn default() -> Self {
        ToolSettings {
            timeout_s: 10,
            max_retries: 2,
            circuit_breaker_threshold: 5,
            circuit_breaker_cooldown_s: 60,
            result_max_tokens: 800,
            allowlist: vec!["*".into()],
            manifests_dir: "./tools".into(),
            web_fetch: WebFetchSettings::default(),
        }
    }
}

impl ToolSettings {
    pub fn allows(&self, name: &str) -> bool {
        self.allowlist
            .iter()
            .any(|a| crate::util::glob_matches(a, name))
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebFetchSettings {
    pub allow_private: bool,
    pub max_bytes: u64,
    pub timeout_s: u64,
    pub max_redirects: u32,
}

impl Default for WebFetchSettings {
    fn default() -> Self {
        WebFetchSettings {
            allow_private: false,
            max_bytes: 2_000_000,
            timeout_s: 15,
            max_redirects: 5,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ContextSettings {
    pub max_dialog_rounds: u32,
    pub summary_enabled: bool,
    pub summary_max_length: u32,
}

impl Default for ContextSettings {
    fn default() -> Self {
        ContextSettings {
            max_dialog_rounds: 2,
            summary_enabled: true,
            summary_max_length: 100,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MemorySettings {
    pub recall_top_k: u32,
    /// Days a task's working-memory rows are kept.
    pub working_retention_days: u32,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            recall_top_k: 5,
            working_retention_days: 7,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSettings {
    pub timezone: String,
    pub max_jobs: u32,
    pub min_interval_s: u64,
    pub catch_up_grace_s: u64,
    /// May a task started by a job create further jobs?
    pub allow_nested: bool,
    /// Send a short notice on the job's channels when a run fails.
    pub notify_on_failure: bool,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        SchedulerSettings {
            timezone: "Asia/Shanghai".into(),
            max_jobs: 100,
            min_interval_s: 60,
            catch_up_grace_s: 3600,
            allow_nested: false,
            notify_on_failure: true,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifySettings {
    pub email: Option<EmailSettings>,
    pub webhooks: BTreeMap<String, WebhookSettings>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum SmtpSecurity {
    #[default]
    Starttls,
    Tls,
    None,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmailSettings {
    pub smtp_host: String,
    pub smtp_port: u16,
    pub security: SmtpSecurity,
    pub username: String,
    pub password: String,
    pub from: String,
    pub to: Vec<String>,
}

impl Default for EmailSettings {
    fn default() -> Self {
        EmailSettings {
            smtp_host: String::new(),
            smtp_port: 587,
            security: SmtpSecurity::Starttls,
            username: String::new(),
            password: String::new(),
            from: String::new(),
            to: Vec::new(),
        }
    }
}

impl std::fmt::Debug for EmailSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailSettings")
            .field("smtp_host", &self.smtp_host)
            .field("smtp_port", &self.smtp_port)
            .field("security", &self.security)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("from", &self.from)
            .field("to", &self.to)
            .finish()
    }
}

#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookSettings {
    pub url: String,
    /// HMAC-SHA256 key for `X-Hermes-Signature`; empty means unsigned.
    pub secret: String,
}

impl std::fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSettings")
            .field("url", &self.url)
            .field("secret", &"<redacted>")
            .finish()
    }
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    pub host: String,
    /// 0: any free port; the daemon writes the one it got to `DATA_DIR/daemon.addr`.
    pub port: u16,
    /// Bearer token; empty means none (allowed only on loopback).
    pub token: String,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            host: "127.0.0.1".into(),
            port: 8765,
            token: String::new(),
        }
    }
}

impl std::fmt::Debug for ServerSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSettings")
            .field("host", &self.host)
            .field("port", &self.port)
            .field(
                "token",
                &if self.token.is_empty() {
                    ""
                } else {
                    "<redacted>"
                },
            )
            .finish()
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageSettings {
    /// Empty means the XDG data dir.
    pub data_dir: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SubAgent {
    pub description: String,
    /// Empty means the default profile.
    pub profile: String,
    pub tools: Vec<String>,
    pub system_prompt: String,
    pub timeout_s: u64,
}

/// A semantic error: the dotted key and what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub key: String,
    pub message: String,
}

fn bad(key: impl Into<String>, message: impl Into<String>) -> Result<(), Violation> {
    Err(Violation {
        key: key.into(),
        message: message.into(),
    })
}

fn positive(key: &str, v: u64) -> Result<(), Violation> {
    if v == 0 {
        return bad(key, "must be greater than 0");
    }
    Ok(())
}

/// Durations beyond a year are typos, and would overflow time arithmetic.
const MAX_SECONDS: u64 = 366 * 24 * 3600;

fn seconds(key: &str, v: u64, allow_zero: bool) -> Result<(), Violation> {
    if !allow_zero {
        positive(key, v)?;
    }
    if v > MAX_SECONDS {
        return bad(
            key,
            format!("{v} s is more than a year; use at most {MAX_SECONDS}"),
        );
    }
    Ok(())
}

impl Settings {
    /// Values that parse but cannot work. The first problem found is reported.
    pub fn validate(&self) -> Result<(), Violation> {
        self.validate_model()?;
        self.validate_limits()?;
        self.validate_scheduler()?;
        self.validate_notify()?;
        self.validate_server()?;
        self.validate_agents()
    }

    fn validate_model(&self) -> Result<(), Violation> {
        let m = &self.model;
        if !m.profiles.contains_key(&m.default_profile) {
            let known: Vec<&str> = m.profiles.keys().map(String::as_str).collect();
            return bad(
                "model.default_profile",
                format!(
                    "unknown profile '{}'; defined profiles: {}",
                    m.default_profile,
                    known.join(", ")
                ),
            );
        }
        for (name, p) in &m.profiles {
            let k = |f: &str| format!("model.profiles.{name}.{f}");
            if !(p.base_url.starts_with("http://") || p.base_url.starts_with("https://")) {
                return bad(
                    k("base_url"),
                    format!(
                        "'{}' is not an http(s) URL (example: http://127.0.0.1:11434/v1)",
                        p.base_url
                    ),
                );
            }
            if p.model.trim().is_empty() {
                return bad(k("model"), "must name a model");
            }
            if !(0.0..=2.0).contains(&p.temperature) {
                return bad(k("temperature"), "must be between 0 and 2");
            }
            positive(&k("max_tokens"), p.max_tokens.into())?;
            seconds(&k("timeout_s"), p.timeout_s, false)?;
        }
        Ok(())
    }

    /// The numbers of the agent, tools, context and memory sections.
    fn validate_limits(&self) -> Result<(), Violation> {
        positive("agent.max_steps", self.agent.max_steps.into())?;
        seconds("agent.task_timeout_s", self.agent.task_timeout_s, false)?;
        seconds("agent.shutdown_grace_s", self.agent.shutdown_grace_s, true)?;
        positive("agent.workers", self.agent.workers.into())?;
        let t = &self.tools;
        seconds("tools.timeout_s", t.timeout_s, false)?;
        seconds(
            "tools.circuit_breaker_cooldown_s",
            t.circuit_breaker_cooldown_s,
            true,
        )?;
        positive(
            "tools.circuit_breaker_threshold",
            t.circuit_breaker_threshold.into(),
        )?;
        positive("tools.result_max_tokens", t.result_max_tokens.into())?;
        positive("tools.web_fetch.max_bytes", t.web_fetch.max_bytes)?;
        seconds("tools.web_fetch.timeout_s", t.web_fetch.timeout_s, false)?;
        positive(
            "context.summary_max_length",
            self.context.summary_max_length.into(),
        )?;
        positive("memory.recall_top_k", self.memory.recall_top_k.into())
    }

    fn validate_scheduler(&self) -> Result<(), Violation> {
        let s = &self.scheduler;
        if s.timezone.parse::<chrono_tz::Tz>().is_err() {
            return bad(
                "scheduler.timezone",
                format!(
                    "unknown time zone '{}'; use an IANA name such as Europe/Berlin",
                    s.timezone
                ),
            );
        }
        positive("scheduler.max_jobs", s.max_jobs.into())?;
        seconds("scheduler.min_interval_s", s.min_interval_s, true)?;
        seconds("scheduler.catch_up_grace_s", s.catch_up_grace_s, true)
    }

    fn validate_notify(&self) -> Result<(), Violation> {
        if let Some(e) = &self.notify.email {
            if e.smtp_host.is_empty() {
                return bad("notify.email.smtp_host", "must name the SMTP server");
            }
            positive("notify.email.smtp_port", e.smtp_port.into())?;
            if !e.from.contains('@') {
                return bad("notify.email.from", "must be an email address");
            }
            if e.to.is_empty() {
                return bad("notify.email.to", "must list at least one recipient");
            }
            if let Some(addr) = e.to.iter().find(|a| !a.contains('@')) {
                return bad(
                    "notify.email.to",
                    format!("'{addr}' is not an email address"),
                );
            }
        }
        for (name, w) in &self.notify.webhooks {
            if name == "email" {
                return bad(
                    "notify.webhooks.email",
                    "'email' is the email channel's name; choose another webhook name",
                );
            }
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                return bad(
                    format!("notify.webhooks.{name}.url"),
                    format!("'{}' is not an http(s) URL", w.url),
                );
            }
        }
        Ok(())
    }

    fn validate_server(&self) -> Result<(), Violation> {
        // Port 0 is allowed: the daemon then binds a free port and writes it to the data dir.
        if self.server.host.trim().is_empty() {
            return bad("server.host", "must be an address such as 127.0.0.1");
        }
        Ok(())
    }

    fn validate_agents(&self) -> Result<(), Violation> {
        let m = &self.model;
        for (name, a) in &self.agents {
            seconds(&format!("agents.{name}.timeout_s"), a.timeout_s, true)?;
            if !a.profile.is_empty() && !m.profiles.contains_key(&a.profile) {
                return bad(
                    format!("agents.{name}.profile"),
                    format!("unknown profile '{}'", a.profile),
                );
            }
        }
        Ok(())
    }

    /// The profile a task asks for, or the default one.
    pub fn profile(&self, name: Option<&str>) -> Option<(&str, &Profile)> {
        let name = name.unwrap_or(&self.model.default_profile);
        self.model
            .profiles
            .get_key_value(name)
            .map(|(k, v)| (k.as_str(), v))
    }
}
