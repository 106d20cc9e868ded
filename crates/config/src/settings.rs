//! The typed settings tree. Every key is optional; `Default` is the documented default and
//! must agree with the repository's `settings.yaml`.

use super::channels::{ChannelSettings, MatrixSettings, TelegramSettings};
use super::embeddings::EmbeddingSettings;
use super::inbox::{ImapSettings, InboxSettings};
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
    /// MCP servers whose tools the agent may use.
    pub mcp: McpSettings,
    /// Mail the agent reads and acts on.
    pub inbox: InboxSettings,
    /// Chat accounts the agent talks through (Matrix).
    pub channels: ChannelSettings,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ModelSettings {
    pub default_profile: String,
    pub profiles: BTreeMap<String, Profile>,
    /// A model reply larger than this is refused while it streams in (a broken or hostile
    /// server cannot grow the daemon's memory without bound).
    pub max_response_bytes: u64,
    /// A 429 asking to wait longer than this (or than the task has left) fails the call at once.
    pub max_retry_after_s: u64,
    /// A profile whose call failed and fell back is skipped (its fallbacks asked first) for
    /// this long, then tried first again; 0: always tried first.
    pub fallback_cooldown_s: u64,
    /// How often the daemon asks each profile's server what it serves (Ollama's digest,
    /// llama.cpp's `/props`, else a greedy answer), besides at start and when a reply reports
    /// another model id; 0: never — only the model ids the replies report are compared.
    pub identity_check_s: u64,
    /// What the daemon does when a profile answers with a model other than its verified one.
    pub on_change: OnChange,
    /// Channels (`email`, webhook names) told of a model change and of its eval's verdict.
    pub on_change_notify: Vec<String>,
}

impl ModelSettings {
    /// The profiles a call to `name` tries, in order: `name`, then each of its fallbacks
    /// followed by that one's own fallbacks, each profile once. Names not defined are left
    /// out (validation refuses them, and cycles, before a gateway is built).
    pub fn fallback_chain(&self, name: &str) -> Vec<String> {
        fn visit(settings: &ModelSettings, name: &str, chain: &mut Vec<String>) {
            if chain.iter().any(|n| n == name) || !settings.profiles.contains_key(name) {
                return;
            }
            chain.push(name.to_string());
            for next in &settings.profiles[name].fallback {
                visit(settings, next, chain);
            }
        }
        let mut chain = Vec::new();
        visit(self, name, &mut chain);
        chain
    }
}

/// See [`ModelSettings::on_change`]. Each one does what the one before it does, and more.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OnChange {
    /// Record it, tell `on_change_notify`, show a badge on the dashboard and in `doctor`.
    #[default]
    Warn,
    /// Also run the regression cases against the new model in the background; notice the verdict.
    Eval,
    /// Also pause the jobs that use the profile (reason `model_changed`) until an eval passes
    /// or a person resumes them.
    Hold,
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
            max_response_bytes: 4_000_000,
            max_retry_after_s: 30,
            fallback_cooldown_s: 60,
            identity_check_s: 3600,
            on_change: OnChange::Warn,
            on_change_notify: Vec::new(),
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
    /// How tools reach the model: `native` (the request's `tools` field), `text` (described in
    /// the system prompt, calls read from `<tool_call>` blocks), or `auto` (native until the
    /// server shows it ignores tools, then text).
    pub tool_mode: ToolMode,
    /// Profiles to ask, in order, when a call to this one fails for a reason another server
    /// could fix (unreachable, timeout, 5xx or 429 after the retries, a reply too large, the
    /// context too long); each with its own URL, key, model and tool mode. A fallback's own
    /// fallbacks follow it.
    pub fallback: Vec<String>,
}

/// See [`Profile::tool_mode`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ToolMode {
    #[default]
    Auto,
    Native,
    Text,
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
            tool_mode: ToolMode::Auto,
            fallback: Vec::new(),
        }
    }
}

/// `Debug` for a settings section that holds secrets (they must never reach a log line): every
/// field as serialised, except `secrets` — a string shows only whether it is set, a map only its
/// keys. Built from the serialised form, so a field added later is neither forgotten nor leaked.
fn debug_redacted<T: Serialize>(
    section: &T,
    name: &str,
    secrets: &[&str],
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    use serde_json::Value;
    let mut shown = serde_json::to_value(section).map_err(|_| std::fmt::Error)?;
    if let Value::Object(fields) = &mut shown {
        for key in secrets {
            if let Some(v) = fields.get_mut(*key) {
                *v = match v {
                    Value::String(s) if s.is_empty() => Value::from(""),
                    Value::Object(m) => Value::from(m.keys().cloned().collect::<Vec<_>>()),
                    _ => Value::from("<redacted>"),
                };
            }
        }
    }
    write!(f, "{name} {shown}")
}

/// The sections that hold secrets, and which of their fields: their `Debug` is
/// [`debug_redacted`].
macro_rules! debug_without_secrets {
    ($($section:ident: [$($secret:literal),+];)+) => {$(
        impl std::fmt::Debug for $section {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                debug_redacted(self, stringify!($section), &[$($secret),+], f)
            }
        }
    )+};
}

debug_without_secrets! {
    Profile: ["api_key"];
    EmbeddingSettings: ["api_key"];
    EmailSettings: ["password"];
    ImapSettings: ["password"];
    MatrixSettings: ["password", "recovery_key"];
    TelegramSettings: ["bot_token"];
    WebhookSettings: ["secret"];
    ServerSettings: ["token"];
    McpServer: ["env", "headers"];
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
    /// The same tool with the same arguments this many times in one task; one more is not run.
    pub max_identical_calls: u32,
}

impl Default for AgentSettings {
    fn default() -> Self {
        AgentSettings {
            max_steps: 8,
            task_timeout_s: 300,
            workers: 4,
            system_prompt_extra: String::new(),
            shutdown_grace_s: 30,
            max_identical_calls: 2,
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
    /// Tools (names or globs, as in the allowlist) whose every call waits for a person's
    /// approval; manifests can also ask for it (`approval: required`).
    pub approval: Vec<String>,
    /// An unanswered request is denied (reason `expired`) after this long.
    pub approval_expire_s: u64,
    /// Channels each new request is sent to, once ("email" or webhook names).
    pub approval_notify: Vec<String>,
    /// Whether manifest commands and stdio MCP servers run confined (crates/engine/src/tools/sandbox).
    pub sandbox: super::sandbox::Mode,
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
            approval: Vec::new(),
            approval_expire_s: 86_400,
            approval_notify: Vec::new(),
            sandbox: super::sandbox::Mode::Enforce,
        }
    }
}

impl ToolSettings {
    pub fn allows(&self, name: &str) -> bool {
        self.allowlist
            .iter()
            .any(|a| hermes_store::util::glob_matches(a, name))
    }

    /// Does `tools.approval` name this tool?
    pub fn needs_approval(&self, name: &str) -> bool {
        self.approval
            .iter()
            .any(|a| hermes_store::util::glob_matches(a, name))
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
    /// The most of one over-cap tool result kept in working memory (bytes); the rest is
    /// dropped, and the model is told so.
    pub working_max_bytes: u64,
    /// An OpenAI-compatible `/v1/embeddings` server: facts are then recalled by meaning as well
    /// as by words. `None`: keyword recall only.
    pub embeddings: Option<EmbeddingSettings>,
}

impl Default for MemorySettings {
    fn default() -> Self {
        MemorySettings {
            recall_top_k: 5,
            working_retention_days: 7,
            working_max_bytes: 1024 * 1024,
            embeddings: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SchedulerSettings {
    /// IANA zone for jobs that name none and for the task's time line; empty: the machine's
    /// own zone (resolved into the effective config, see [`super::zone`]).
    pub timezone: String,
    pub max_jobs: u32,
    pub min_interval_s: u64,
    pub catch_up_grace_s: u64,
    /// May a task started by a job create further jobs?
    pub allow_nested: bool,
    /// Report failing runs on the job's channels (see `failure_report_after`).
    pub notify_on_failure: bool,
    /// Consecutive failed runs before the one failure report; no further reports while the job
    /// keeps failing, one "recovered" notice at its next success.
    pub failure_report_after: u32,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        SchedulerSettings {
            timezone: String::new(),
            max_jobs: 100,
            min_interval_s: 60,
            catch_up_grace_s: 3600,
            allow_nested: false,
            notify_on_failure: true,
            failure_report_after: 2,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NotifySettings {
    pub email: Option<EmailSettings>,
    pub webhooks: BTreeMap<String, WebhookSettings>,
    /// The whole of one delivery attempt (connect, TLS, the SMTP dialogue or the webhook's
    /// answer); a stalled server past it is a temporary failure, retried with backoff.
    pub send_timeout_s: u64,
}

impl Default for NotifySettings {
    fn default() -> Self {
        NotifySettings {
            email: None,
            webhooks: BTreeMap::new(),
            send_timeout_s: 60,
        }
    }
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

#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WebhookSettings {
    pub url: String,
    /// HMAC-SHA256 key for `X-Hermes-Signature`; empty means unsigned.
    pub secret: String,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerSettings {
    pub host: String,
    /// 0: any free port; the daemon writes the one it got to `DATA_DIR/daemon.addr`.
    pub port: u16,
    /// Bearer token; empty means none (allowed only on loopback).
    pub token: String,
    /// Host names a request may carry besides the bound address and loopback names (a reverse
    /// proxy's name). Any other `Host` is refused, so a DNS-rebinding page cannot drive the API.
    pub allowed_hosts: Vec<String>,
    /// Where the dashboard is reachable from outside (e.g. `https://hermes.example.org`); digest
    /// emails link to a run's page when set.
    pub public_url: String,
    /// A request head (the request line and headers) must arrive whole within this many
    /// seconds of the connection opening or of its first byte; else the connection is closed.
    pub header_timeout_s: u64,
    /// A kept-alive connection with no request for this many seconds is closed.
    pub idle_timeout_s: u64,
    /// The most connections open at once; more wait until one closes. 0: half the process's
    /// open-file limit (at most 4096). Never more than half that limit.
    pub max_connections: u64,
    /// Wrong tokens (at /login or as a bearer token) taken from one address within
    /// `login_window_s`; after that many its token attempts are refused (429) until the
    /// window has passed, even with the right token.
    pub max_login_failures: u32,
    /// The window of `max_login_failures`, and how long an address stays locked out.
    pub login_window_s: u64,
    /// Serve `GET /metrics` without the token (a Prometheus that cannot send one); the rest
    /// of the API keeps it.
    pub metrics_public: bool,
}

impl Default for ServerSettings {
    fn default() -> Self {
        ServerSettings {
            host: "127.0.0.1".into(),
            port: 8765,
            token: String::new(),
            allowed_hosts: Vec::new(),
            public_url: String::new(),
            header_timeout_s: 10,
            idle_timeout_s: 60,
            max_connections: 0,
            max_login_failures: 10,
            login_window_s: 60,
            metrics_public: false,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageSettings {
    /// Empty means the XDG data dir.
    pub data_dir: String,
    /// The database: empty keeps SQLite in the data dir; `postgres://USER@HOST:PORT/DB`
    /// selects PostgreSQL (the password as `${VAR}` from the environment, or `PGPASSWORD`).
    pub url: String,
    /// How long a process that holds work — a `run` waiting on its own task's approvals — may
    /// go without a heartbeat before the daemon takes the work over.
    pub node_lease_s: u64,
}

impl Default for StorageSettings {
    fn default() -> Self {
        StorageSettings {
            data_dir: String::new(),
            url: String::new(),
            node_lease_s: 30,
        }
    }
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

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpSettings {
    /// By name; each server's tools are offered as `NAME__TOOL`.
    pub servers: BTreeMap<String, McpServer>,
    /// The most tools taken from one server (the first ones it lists); every tool costs
    /// prompt tokens at every step.
    pub max_tools_per_server: u32,
    /// The most `tools/list` pages read from one server per listing.
    pub max_list_pages: u32,
}

impl Default for McpSettings {
    fn default() -> Self {
        McpSettings {
            servers: BTreeMap::new(),
            max_tools_per_server: 128,
            max_list_pages: 10,
        }
    }
}

/// One MCP server: a program speaking MCP on stdio (`command`), or a streamable-HTTP endpoint
/// (`url`). Exactly one of the two.
#[derive(Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpServer {
    /// Program and arguments, run without a shell.
    pub command: Vec<String>,
    /// Environment for the program (only these and PATH, HOME, LANG; values may be secrets).
    pub env: BTreeMap<String, String>,
    /// Working directory for the program; empty: the daemon's.
    pub cwd: String,
    /// Streamable-HTTP endpoint, e.g. `https://example.org/mcp`.
    pub url: String,
    /// Headers sent to `url` (often a token).
    pub headers: BTreeMap<String, String>,
    /// Per tool call; 0: `tools.timeout_s`.
    pub timeout_s: u64,
    /// A stdio server's widening of its box (network, read, write, memory_mb, processes).
    pub sandbox: super::sandbox::Widening,
}

/// How to reach an MCP server, once validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpTransport {
    Stdio,
    Http,
}

impl McpServer {
    /// Stdio when `command` is set, HTTP when `url` is; validation ensures one of them.
    pub fn transport(&self) -> McpTransport {
        if self.command.is_empty() {
            McpTransport::Http
        } else {
            McpTransport::Stdio
        }
    }
}
