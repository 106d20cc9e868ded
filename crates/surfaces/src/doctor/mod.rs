//! `doctor`'s checks as data: each dependency — the config, the model endpoints, the data
//! dir, memory, tools, SMTP and webhooks, the mailbox — with a verdict and a detail that says
//! what to do.
//! The CLI prints them (`cli/doctor.rs`); the dashboard's /settings page shows them.
//!
//! Owns: what is checked and how each outcome is judged.
//! Must not: print, exit, or change anything — every check only probes.

mod chat;

pub use chat::{matrix, matrix_health, telegram, telegram_health};

use crate::mcp::{ServerState, ServerStatus};
use hermes_config::{Config, Settings, ToolMode};
use hermes_engine::agent::prompt;
use hermes_engine::llm::Gateway;
use hermes_engine::memory::LongTerm;
use hermes_engine::notify::Notifier;
use hermes_engine::tools::Registry;
use hermes_store::Store;
use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Warn,
    Fail,
}

impl Verdict {
    /// Its word, as JSON and the settings page write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Warn => "warn",
            Verdict::Fail => "fail",
        }
    }
}

/// One verdict: what was checked (never a secret), and the detail.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub what: String,
    pub verdict: Verdict,
    pub detail: String,
}

impl Check {
    pub fn new(verdict: Verdict, what: impl Into<String>, detail: impl Into<String>) -> Check {
        Check {
            what: what.into(),
            verdict,
            detail: detail.into(),
        }
    }
}

/// The config loaded, so it is valid.
pub fn config(config: &Config) -> Check {
    Check::new(Verdict::Ok, "config", format!("{} is valid", config.source))
}

/// The zone jobs that name none fire in and tasks are told the time in, and where it came from.
pub fn time_zone(config: &Config) -> Check {
    let verdict = match config.timezone.ignored_tz {
        Some(_) => Verdict::Warn,
        None => Verdict::Ok,
    };
    Check::new(verdict, "time zone", config.timezone.describe())
}

/// Each model profile's endpoint answers (a `GET /models`, a few seconds at most), how it
/// calls tools, and which model it serves — checked against what `store` (the data dir's
/// record, when it can be read) says was verified.
pub async fn models(config: &Config, store: Option<&Store>) -> Vec<Check> {
    let s = &config.settings;
    let gateway = match Gateway::new(&s.model) {
        Ok(g) => g.with_settings_source(&config.source),
        Err(e) => return vec![Check::new(Verdict::Fail, "model", e.to_string())],
    };
    let mut checks = Vec::new();
    for (name, profile) in &s.model.profiles {
        let what = format!("model profile {name}");
        match gateway.probe(name).await {
            Ok(detail) => {
                checks.push(Check::new(Verdict::Ok, what, detail));
                checks.push(tool_calling(&gateway, name, profile.tool_mode).await);
                checks.push(identity(&gateway, name, store).await);
            }
            Err(e) => checks.push(Check::new(Verdict::Fail, what, e.to_string())),
        }
    }
    checks
}

/// The model ids the profile's server lists, the identity it is seen serving, and whether a
/// passing eval verified it; a change no eval verified yet is a warning (the badge).
pub async fn identity(gateway: &Gateway, name: &str, store: Option<&Store>) -> Check {
    let what = format!("model profile {name} identity");
    let listed = match gateway.served_models(name).await {
        Ok(ids) if ids.is_empty() => "GET /models lists no model".to_string(),
        Ok(ids) => format!("serves {}", ids.join(", ")),
        Err(e) => format!("GET /models failed ({})", e.kind().words()),
    };
    let seen = match gateway.check_identity(name).await {
        Ok(Some(id)) => id,
        Ok(None) => {
            return Check::new(
                Verdict::Ok,
                what,
                format!("{listed}; identity checks are off (model.identity_check_s: 0)"),
            );
        }
        Err(e) => {
            return Check::new(
                Verdict::Warn,
                what,
                format!("{listed}; cannot tell which model: {e}"),
            );
        }
    };
    let key = seen.key();
    let mut detail = format!("{listed}; sees {key} (from {})", seen.source());
    let Some(store) = store else {
        return Check::new(Verdict::Ok, what, detail);
    };
    let status = store.models().status(name).await.unwrap_or_default();
    let verified = store
        .models()
        .seen_identity(name, &key)
        .await
        .ok()
        .flatten()
        .and_then(|i| i.verified_at);
    let verdict = match (verified, &status.verified) {
        (Some(at), _) => {
            detail.push_str(&format!("; verified {}", at.format("%Y-%m-%d %H:%M UTC")));
            Verdict::Ok
        }
        (None, Some(v)) => {
            detail.push_str(&format!(
                "; NOT verified — the verified model is {} (run `hermes-agent eval --profile {name}`)",
                v.identity
            ));
            Verdict::Warn
        }
        (None, None) => {
            detail.push_str(&format!(
                "; no eval has verified a model of this profile yet (`hermes-agent eval --profile {name}`)"
            ));
            Verdict::Ok
        }
    };
    if let Some(change) = status.unverified_change() {
        detail.push_str(&format!(
            "; changed from {} at {}{}",
            change.old_identity,
            change.seen_at.format("%Y-%m-%d %H:%M UTC"),
            if change.paused_jobs.is_empty() {
                String::new()
            } else {
                format!(", jobs held: {}", change.paused_jobs.join(", "))
            }
        ));
        return Check::new(Verdict::Warn, what, detail);
    }
    Check::new(verdict, what, detail)
}

/// Whether the profile's model calls an offered tool, and whether its `tool_mode` fits that.
async fn tool_calling(gateway: &Gateway, name: &str, set: ToolMode) -> Check {
    let what = format!("model profile {name} tools");
    match gateway.probe_tools(name).await {
        Ok(probe) => {
            let advice = probe.advice(name, set);
            let verdict = if advice.fits {
                Verdict::Ok
            } else {
                Verdict::Warn
            };
            Check::new(verdict, what, advice.words)
        }
        Err(e) => Check::new(Verdict::Fail, what, e.to_string()),
    }
}

/// The database `storage.url` names: SQLite in the data dir, or a PostgreSQL server reached,
/// with the schema version it holds against the one this build knows. The store opened (for
/// the checks after this one), when it could be.
pub async fn database(config: &Config) -> (Check, Option<Store>) {
    let url = config.settings.storage.url.trim();
    if url.is_empty() {
        return (sqlite(&config.data_dir).await, None);
    }
    let opts = hermes_store::StoreOptions {
        max_connections: 1,
        ..Default::default()
    };
    let store = match Store::open_postgres(url, opts).await {
        Ok(s) => s,
        Err(e) => return (Check::new(Verdict::Fail, "database", e.to_string()), None),
    };
    let check = match store.applied_version().await {
        Ok(v) => Check::new(
            Verdict::Ok,
            "database",
            format!(
                "PostgreSQL at {}: reachable, schema v{v} (this build knows v{})",
                hermes_store::redact_url(url),
                Store::schema_version()
            ),
        ),
        Err(e) => Check::new(Verdict::Fail, "database", e.to_string()),
    };
    (check, Some(store))
}

/// The SQLite database of `data_dir`: a place it can be written (a read-only mount, another
/// owner or a full disk stops every write), and a file SQLite finds sound. Read only: never
/// created or migrated here.
async fn sqlite(data_dir: &std::path::Path) -> Check {
    let path = data_dir.join(hermes_store::DB_FILE);
    let fail = |detail: String| Check::new(Verdict::Fail, "database", detail);
    if data_dir.is_dir()
        && let Err(e) = tempfile::tempfile_in(data_dir)
    {
        return fail(format!(
            "cannot write in the data dir {} ({e}): every task, job and fact is written there. Free some space, give it to the user the daemon runs as, or choose another --data-dir",
            data_dir.display()
        ));
    }
    if !path.is_file() {
        return Check::new(
            Verdict::Ok,
            "database",
            format!("SQLite, {}: made at the first start", path.display()),
        );
    }
    let options = hermes_store::StoreOptions {
        read_only: true,
        max_connections: 1,
        ..Default::default()
    };
    let damaged = |why: String| {
        fail(format!(
            "SQLite, {}: the file is damaged ({why}). Stop the daemon, keep a copy of the file, then restore it from a backup, or move it aside to start with an empty database",
            path.display()
        ))
    };
    let store = match Store::open_with(data_dir, options).await {
        Ok(store) => store,
        Err(e) => return fail(e.to_string()),
    };
    let checked = store.quick_check().await;
    let version = store.applied_version().await;
    store.close().await;
    let (problems, v) = match (checked, version) {
        (Ok(problems), Ok(v)) => (problems, v),
        (Err(e), _) | (_, Err(e)) => return damaged(e.to_string()),
    };
    if !problems.is_empty() {
        return damaged(problems.join("; "));
    }
    Check::new(
        Verdict::Ok,
        "database",
        format!(
            "SQLite, {}: sound, schema v{v} (this build knows v{})",
            path.display(),
            Store::schema_version()
        ),
    )
}

/// How tools are confined (`tools.sandbox`), and what this kernel cannot enforce.
pub fn sandbox(config: &Config) -> Check {
    use hermes_engine::tools::sandbox::{Mode, Support};
    let support = Support::get();
    let missing = support.missing();
    let (verdict, detail) = match config.settings.tools.sandbox {
        Mode::Off => (Verdict::Warn, "off: tools run unconfined".to_string()),
        Mode::Warn => (Verdict::Warn, "warn: tools run unconfined".to_string()),
        Mode::Enforce if missing.is_empty() => (
            Verdict::Ok,
            format!(
                "enforce: Landlock ABI {}, seccomp, rlimits",
                support.landlock_abi
            ),
        ),
        Mode::Enforce => (
            Verdict::Warn,
            format!(
                "enforce, partly: this kernel lacks {}; tools with `sandbox: required` will not run",
                missing.join("; ")
            ),
        ),
    };
    Check::new(verdict, "sandbox", detail)
}

/// The data dir opened, with its schema version.
pub fn data_dir(config: &Config) -> Check {
    Check::new(
        Verdict::Ok,
        "data dir",
        format!(
            "{} (database schema v{})",
            config.data_dir.display(),
            Store::schema_version()
        ),
    )
}

/// Long-term memory: its index open, and how many facts it holds.
pub async fn memory(store: &Store, memory: Option<&LongTerm>) -> Check {
    match memory {
        Some(_) => {
            let n = store.facts().count().await.unwrap_or(0);
            Check::new(Verdict::Ok, "memory", format!("{n} fact(s) indexed"))
        }
        None => Check::new(
            Verdict::Warn,
            "memory",
            "long-term memory index could not be opened; see the log above",
        ),
    }
}

/// The tools offered to the model, and the fixed prompt they cost per call; a warning when a
/// manifest tool's program is not installed (`missing`, from `manifest::missing_programs`).
pub fn tools(registry: &Registry, settings: &Settings, missing: &[String]) -> Check {
    let tools = registry.offered(None);
    let system = prompt::system_prompt(&settings.agent.system_prompt_extra, None);
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    let mut detail = format!(
        "{} offered ({}); fixed prompt overhead ≈ {} tokens per model call",
        tools.len(),
        names.join(", "),
        prompt::fixed_overhead_tokens(&system, &tools)
    );
    if missing.is_empty() {
        return Check::new(Verdict::Ok, "tools", detail);
    }
    detail.push_str("; not installed: ");
    detail.push_str(&missing.join("; "));
    Check::new(Verdict::Warn, "tools", detail)
}

/// The daemon's long-term memory, from its `/healthz` (`memory_index`): with a daemon up its
/// index is its own, and only it can say how it is.
pub fn memory_of_daemon(memory_index: &str) -> Check {
    match memory_index {
        "ok" => Check::new(Verdict::Ok, "memory", "the daemon's index is open"),
        "off" => Check::new(
            Verdict::Warn,
            "memory",
            "the daemon runs without long-term memory: its index could not be opened (its log says why)",
        ),
        other => Check::new(
            Verdict::Warn,
            "memory",
            format!("the daemon's index is {other}"),
        ),
    }
}

/// SMTP (connect, TLS, login; nothing sent) and each webhook reachable.
pub async fn notify(notifier: &Notifier) -> Vec<Check> {
    let results = notifier.check().await;
    if results.is_empty() {
        return vec![Check::new(
            Verdict::Warn,
            "notify",
            "no email or webhook configured (notify.email, notify.webhooks)",
        )];
    }
    results
        .into_iter()
        .map(|r| {
            let v = if r.ok { Verdict::Ok } else { Verdict::Fail };
            Check::new(v, r.target, r.detail)
        })
        .collect()
}

/// The embedding server of `memory.embeddings`, asked for one vector; nothing when recall is
/// by keyword only. Away is a warning: recall falls back to keywords, nothing fails.
pub async fn embeddings(s: &Settings) -> Option<Check> {
    let e = s.memory.embeddings.as_ref()?;
    let what = "embeddings";
    let embedder = match hermes_engine::llm::Embedder::new(e) {
        Ok(embedder) => embedder,
        Err(why) => return Some(Check::new(Verdict::Fail, what, why.to_string())),
    };
    let started = std::time::Instant::now();
    Some(
        match embedder.embed(&["doctor"], embedder.timeout()).await {
            Ok(v) => Check::new(
                Verdict::Ok,
                what,
                format!(
                    "model {} at {} answers with {} dimensions in {} ms; facts are recalled by meaning and keyword",
                    embedder.model(),
                    embedder.url(),
                    v.first().map_or(0, Vec::len),
                    started.elapsed().as_millis()
                ),
            ),
            Err(why) => Check::new(
                Verdict::Warn,
                what,
                format!("{why} (until it answers, facts are recalled by keyword only)"),
            ),
        },
    )
}

/// The mailbox of `inbox.email`: logged in and opened (nothing changed), and whether the
/// server offers IDLE; nothing when no mailbox is configured.
pub async fn inbox(s: &Settings) -> Option<Check> {
    let e = s.inbox.email.as_ref()?;
    let what = format!("inbox {}", e.label());
    Some(match hermes_engine::inbox::probe(e).await {
        Ok(p) => inbox_verdict(what, e, Ok(&p)),
        Err(why) => inbox_verdict(what, e, Err(why.to_string())),
    })
}

fn inbox_verdict(
    what: String,
    e: &hermes_config::ImapSettings,
    found: Result<&hermes_engine::inbox::Probe, String>,
) -> Check {
    let p = match found {
        Ok(p) => p,
        Err(why) => return Check::new(Verdict::Fail, what, why),
    };
    let how = if p.idle {
        "the server offers IDLE: mail is read as it arrives".to_string()
    } else {
        format!(
            "the server offers no IDLE: mail is looked for every {} s (inbox.email.poll_s)",
            e.poll_s
        )
    };
    let detail = format!(
        "logged in, mailbox {} opened ({} message(s)); {how}",
        p.mailbox, p.messages
    );
    if e.allow_from.is_empty() {
        return Check::new(
            Verdict::Warn,
            what,
            format!("{detail}; but inbox.email.allow_from is empty, so no mail is acted on"),
        );
    }
    let verdict = if p.idle { Verdict::Ok } else { Verdict::Warn };
    Check::new(verdict, what, detail)
}

/// The running daemon's mailbox, as its connection is doing.
pub(crate) fn inbox_health(s: &Settings, health: &hermes_engine::inbox::Health) -> Option<Check> {
    use hermes_engine::inbox::Health;
    let e = s.inbox.email.as_ref()?;
    let what = format!("inbox {}", e.label());
    Some(match health {
        Health::Off => return None,
        Health::Starting => Check::new(Verdict::Warn, what, "connecting"),
        Health::Ok { idle: true } => Check::new(Verdict::Ok, what, "connected, in IDLE"),
        Health::Ok { idle: false } => Check::new(
            Verdict::Warn,
            what,
            format!("connected; no IDLE, polling every {} s", e.poll_s),
        ),
        Health::Down { error } => Check::new(
            Verdict::Fail,
            what,
            format!("{error} (retried with backoff)"),
        ),
    })
}

/// Each MCP server as the running daemon sees it: its state and its tools.
pub fn mcp_servers(statuses: &[ServerStatus]) -> Vec<Check> {
    statuses.iter().map(mcp_server).collect()
}

/// One MCP server's verdict from its status.
pub fn mcp_server(st: &ServerStatus) -> Check {
    let what = format!("mcp server {} ({})", st.name, st.transport);
    match &st.state {
        ServerState::Running => Check::new(
            Verdict::Ok,
            what,
            format!(
                "running, {} tool(s): {}",
                st.tools.len(),
                st.tools.join(", ")
            ),
        ),
        ServerState::Failed(why) => Check::new(
            Verdict::Fail,
            what,
            format!("{why} (retried with backoff; its tools are not offered)"),
        ),
        ServerState::Starting => Check::new(
            Verdict::Warn,
            what,
            format!(
                "starting (its first start); a task that begins now waits up to {} s for its tools",
                crate::mcp::RUN_START_WAIT.as_secs()
            ),
        ),
        ServerState::Restarting(how) => Check::new(
            Verdict::Warn,
            what,
            format!("restarting ({how}); its tools are offered again once it is back"),
        ),
    }
}

/// Each MCP server started, asked for its tools and stopped: `doctor` with no daemon up.
pub async fn mcp_probe(
    s: &Settings,
    env: &std::collections::HashMap<String, String>,
) -> Vec<Check> {
    let mut checks = Vec::new();
    for (name, server) in &s.mcp.servers {
        let what = format!("mcp server {name}");
        checks.push(match crate::mcp::probe(name, server, &s.mcp, env).await {
            Ok(tools) => Check::new(
                Verdict::Ok,
                what,
                format!("starts, {} tool(s): {}", tools.len(), tools.join(", ")),
            ),
            Err(e) => Check::new(Verdict::Fail, what, e.to_string()),
        });
    }
    checks
}

/// The handles a running daemon checks itself with.
pub(crate) struct Parts<'a> {
    pub config: &'a Config,
    pub store: &'a Store,
    pub memory: Option<&'a LongTerm>,
    pub registry: &'a Registry,
    pub notifier: &'a Notifier,
    pub mcp: &'a crate::mcp::McpManager,
    pub inbox: &'a hermes_engine::inbox::Inbox,
    pub matrix: &'a hermes_engine::channels::Matrix,
    pub telegram: &'a hermes_engine::channels::Telegram,
}

/// Every check, as a running daemon sees them (the dashboard's /settings): the daemon is this
/// very process, and the data dir is the one it has open.
pub(crate) async fn running_daemon(p: Parts<'_>) -> Vec<Check> {
    let s = &p.config.settings;
    let mut checks = vec![config(p.config), time_zone(p.config)];
    checks.extend(models(p.config, Some(p.store)).await);
    checks.push(Check::new(
        Verdict::Ok,
        "daemon",
        format!(
            "running (this process), listening on {}:{}",
            s.server.host, s.server.port
        ),
    ));
    checks.push(data_dir(p.config));
    checks.push(memory(p.store, p.memory).await);
    let env = hermes_config::env_map();
    let missing = hermes_engine::tools::manifest::missing_programs(&p.config.manifests_dir, &env);
    checks.push(tools(p.registry, s, &missing));
    checks.extend(notify(p.notifier).await);
    checks.extend(mcp_servers(&p.mcp.status()));
    checks.extend(inbox_health(s, &p.inbox.health()));
    checks.extend(matrix_health(s, &p.matrix.status()));
    checks.extend(telegram_health(s, &p.telegram.status()));
    checks
}
