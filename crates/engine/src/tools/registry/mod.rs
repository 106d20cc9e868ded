//! The tool registry: the one door between a model's tool call and a tool's executor.
//!
//! Owns: registration (unique names, JSON Schemas compiled once), the two-layer allowlist
//! (what is offered, what is refused), argument validation, per-attempt timeouts, retries of
//! network-class errors with exponential backoff, circuit breaking, result shaping and
//! capping (large results go to working memory, up to `memory.working_max_bytes`),
//! delimiting, one log line per call, and which sources are still on their first start
//! (`starting.rs`); how a successful result is shown to the model is in `present.rs`, and how
//! a source's tools come and go in `sources.rs`.
//! Must not: know about the agent loop or messages; it returns the text the model will see
//! and the facts the trace needs, nothing more.

use super::away::Away;
use super::breaker::Breakers;
use super::permit::Permit;
use super::schema::{self, violation};
use super::shape::{self, Rest};
use super::starting::{SOURCE_START_WAIT, Starting};
use super::{Tool, ToolContext, ToolError};
use crate::llm::{ToolCall, ToolSpec, Toolset, estimate_tokens};
use crate::metrics::Metrics;
use hermes_config::ToolSettings;
use hermes_store::Store;
use hermes_store::util::Backoff;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;
use tokio::time::Instant;

mod present;
mod sources;

/// At most this many schema violations are reported for one call; the model fixes them in
/// a few rounds anyway, and a long list costs tokens.
const MAX_REPORTED_VIOLATIONS: usize = 8;

/// Toolsets kept for reuse: one per distinct offer seen lately (the full set, each sub-agent's
/// restricted one, sets without a tool whose breaker is open).
const KEPT_OFFERS: usize = 8;

/// Retries of a tool call: quick, since the task waits on them, and never longer than a
/// tool's usual timeout.
const DEFAULT_BACKOFF: Backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));

/// Why a tool could not be registered. Each names the tool.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    #[error("tool '{0}' is registered twice; tool names must be unique (rename or remove one)")]
    Duplicate(String),
    #[error("tool name '{0}' is invalid: use 1 to 64 characters of a-z, A-Z, 0-9, '_' or '-'")]
    InvalidName(String),
    #[error("tool '{tool}' has an invalid parameter schema: {message}")]
    InvalidSchema { tool: String, message: String },
}

/// What happened to one tool call.
#[derive(Debug, Clone)]
pub struct ToolOutcome {
    /// Exactly what the model will see: delimited, shaped and capped.
    pub content: String,
    /// `None` on success.
    pub error: Option<ToolError>,
    /// Executions tried (0 when the call was refused before running).
    pub attempts: u32,
    pub duration: Duration,
    /// `estimate_tokens(content)`.
    pub result_tokens: u32,
    /// Set when the full result went to working memory.
    pub working_key: Option<String>,
}

/// Collects the tools known at start, then becomes a [`Registry`].
pub struct RegistryBuilder {
    settings: ToolSettings,
    store: Store,
    backoff: Backoff,
    working_max_bytes: usize,
    entries: BTreeMap<String, Arc<Entry>>,
    metrics: Metrics,
}

impl RegistryBuilder {
    pub fn new(settings: ToolSettings, store: Store) -> RegistryBuilder {
        RegistryBuilder {
            settings,
            store,
            backoff: DEFAULT_BACKOFF,
            working_max_bytes: hermes_config::MemorySettings::default().working_max_bytes as usize,
            entries: BTreeMap::new(),
            metrics: Metrics::default(),
        }
    }

    /// Count every call in `metrics` (by tool and outcome).
    pub fn with_metrics(mut self, metrics: Metrics) -> RegistryBuilder {
        self.metrics = metrics;
        self
    }

    /// Keep at most this many bytes of one result in working memory (`memory.working_max_bytes`).
    pub fn with_working_max_bytes(mut self, bytes: u64) -> RegistryBuilder {
        self.working_max_bytes = usize::try_from(bytes).unwrap_or(usize::MAX);
        self
    }

    /// The first retry waits `base`, each further one twice as long.
    pub fn with_retry_backoff(mut self, base: Duration) -> RegistryBuilder {
        self.backoff.base = base;
        self
    }

    pub fn register(&mut self, tool: Arc<dyn Tool>) -> Result<(), RegistryError> {
        let entry = Entry::compile(tool, None)?;
        if self.entries.contains_key(&entry.spec.name) {
            return Err(RegistryError::Duplicate(entry.spec.name.clone()));
        }
        self.entries
            .insert(entry.spec.name.clone(), Arc::new(entry));
        Ok(())
    }

    pub fn build(self) -> Registry {
        let breakers = Breakers::new(
            self.settings.circuit_breaker_threshold,
            Duration::from_secs(self.settings.circuit_breaker_cooldown_s),
        );
        Registry(Arc::new(Inner {
            settings: self.settings,
            store: self.store,
            backoff: self.backoff,
            working_max_bytes: self.working_max_bytes,
            entries: RwLock::new(self.entries),
            breakers,
            offers: Mutex::default(),
            starting: Starting::default(),
            away: Away::default(),
            metrics: self.metrics,
        }))
    }
}

/// The tools; a cheap clone shared by every task.
#[derive(Clone)]
pub struct Registry(Arc<Inner>);

struct Inner {
    /// Timeouts, retries, breaker thresholds, the result cap and the global allowlist.
    settings: ToolSettings,
    /// Where over-cap results go (working memory).
    store: Store,
    /// How much of one over-cap result is kept there: a server's 12 MB answer must not become
    /// a 12 MB row (nor a 12 MB string read back page by page).
    working_max_bytes: usize,
    /// Waits between retries of network-class errors.
    backoff: Backoff,
    /// Every tool by name: those registered at start, and the current tools of each source.
    /// Written only when a source's tools change (an MCP server starts, dies, or says its list
    /// changed), read at every step; a BTreeMap so offers come out sorted.
    entries: RwLock<BTreeMap<String, Arc<Entry>>>,
    breakers: Breakers,
    /// The sets offered lately, each with the entries it was made from, oldest first.
    /// Weak, so a replaced MCP tool is dropped at once; its allocation, and so its address,
    /// stays taken while the key lives, so a new entry is never mistaken for it.
    offers: Mutex<Vec<(Vec<Weak<Entry>>, Toolset)>>,
    /// Sources on their first start, whose tools a new task waits for (bounded).
    starting: Starting,
    /// The tools of sources that are away (restarting, failed), for what a call is told.
    away: Away,
    /// Where each call is counted.
    metrics: Metrics,
}

pub(super) struct Entry {
    pub(super) tool: Arc<dyn Tool>,
    /// Compiled once at registration; validating is then cheap per call.
    validator: jsonschema::Validator,
    /// What the model is sent: the schema without grammar-unfriendly keywords.
    spec: ToolSpec,
    /// The source whose tools can change at runtime (an MCP server's name); `None` for tools
    /// registered at start.
    source: Option<String>,
}

impl Entry {
    fn compile(tool: Arc<dyn Tool>, source: Option<&str>) -> Result<Entry, RegistryError> {
        let info = tool.info();
        let name = info.name.clone();
        let name_ok = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !name_ok {
            return Err(RegistryError::InvalidName(name));
        }
        let parameters = &info.parameters;
        if parameters.get("type").and_then(Value::as_str) != Some("object") {
            return Err(RegistryError::InvalidSchema {
                tool: name,
                message: "the parameters must be an object schema ({\"type\": \"object\", ...})"
                    .into(),
            });
        }
        let validator =
            jsonschema::validator_for(parameters).map_err(|e| RegistryError::InvalidSchema {
                tool: name.clone(),
                message: violation(&e),
            })?;
        // A runtime source's (an MCP server's) descriptions are someone else's text: inert.
        // Built-ins and manifests are ours and the person's, and may name our delimiters.
        let description = match source {
            Some(_) => hermes_store::util::inert::neutralise(&info.description).into_owned(),
            None => info.description.clone(),
        };
        let spec = ToolSpec {
            name,
            description,
            parameters: schema::for_model(parameters),
        };
        Ok(Entry {
            tool,
            validator,
            spec,
            source: source.map(str::to_string),
        })
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("tools", &self.names())
            .finish_non_exhaustive()
    }
}

/// A call that ended without a result: the error for the trace and the text for the model.
struct Refusal {
    error: ToolError,
    message: String,
}

impl From<ToolError> for Refusal {
    fn from(error: ToolError) -> Refusal {
        Refusal {
            message: error.to_string(),
            error,
        }
    }
}

impl Registry {
    /// The tools this task may use: in the global allowlist, in `restrict` when given (a
    /// sub-agent's own list), and not circuit-open. Sorted by name. The same tools give back
    /// the same [`Toolset`], serialised once, not once per step.
    pub fn offered(&self, restrict: Option<&[String]>) -> Toolset {
        let on_offer: Vec<Arc<Entry>> = self
            .entries()
            .values()
            .filter(|e| {
                let name = e.spec.name.as_str();
                self.allowed(name, restrict) && !self.0.breakers.is_open(name)
            })
            .cloned()
            .collect();
        let mut offers = self.0.offers.lock().unwrap_or_else(|p| p.into_inner());
        let made_from = |key: &[Weak<Entry>]| {
            key.len() == on_offer.len()
                && key
                    .iter()
                    .zip(&on_offer)
                    .all(|(k, e)| std::ptr::eq(k.as_ptr(), Arc::as_ptr(e)))
        };
        if let Some((_, set)) = offers.iter().find(|(key, _)| made_from(key)) {
            return set.clone();
        }
        let set = Toolset::new(on_offer.iter().map(|e| e.spec.clone()).collect());
        if offers.len() >= KEPT_OFFERS {
            offers.remove(0);
        }
        offers.push((on_offer.iter().map(Arc::downgrade).collect(), set.clone()));
        set
    }

    /// Every tool's name, sorted, whatever the allowlist says.
    pub fn names(&self) -> Vec<String> {
        self.entries().keys().cloned().collect()
    }

    /// How many circuits are open now (`/metrics`).
    pub fn open_circuits(&self) -> usize {
        self.0.breakers.open_count()
    }

    /// The sources (MCP servers) on their first start, whose tools a new task waits for.
    pub fn starting(&self) -> &Starting {
        &self.0.starting
    }

    fn entries(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<Entry>>> {
        // Writers only swap whole entries in and out, so a poisoned map is still consistent.
        self.0.entries.read().unwrap_or_else(|p| p.into_inner())
    }

    fn entries_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<Entry>>> {
        self.0.entries.write().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn settings(&self) -> &ToolSettings {
        &self.0.settings
    }

    pub(super) fn entry(&self, name: &str) -> Option<Arc<Entry>> {
        self.entries().get(name).cloned()
    }

    pub(super) async fn execute_with(
        &self,
        call: &ToolCall,
        ctx: &ToolContext,
        restrict: Option<&[String]>,
        permit: Option<Permit>,
    ) -> ToolOutcome {
        let started = Instant::now();
        let name = call.name.as_str();
        let mut attempts = 0;
        let result = self.run(call, ctx, restrict, permit, &mut attempts).await;
        let (content, error, working_key) = match result {
            Ok((entry, value)) => {
                let (content, key) = self.present(&entry, value, ctx).await;
                (content, None, key)
            }
            Err(r) => {
                let cap = self.0.settings.result_max_tokens;
                let message = if estimate_tokens(&r.message) > cap {
                    shape::cut_with_note(&r.message, cap, &Rest::Dropped)
                } else {
                    r.message
                };
                (shape::wrap_error(name, &message), Some(r.error), None)
            }
        };
        let duration = started.elapsed();
        super::count_call(&self.0.metrics, name, error.as_ref());
        let ms = duration.as_millis() as u64;
        match &error {
            None => tracing::info!(tool = name, ms, attempts, outcome = "ok", "tool call"),
            Some(e) => {
                tracing::info!(tool = name, ms, attempts, outcome = "error", error = %e, "tool call")
            }
        }
        ToolOutcome {
            result_tokens: estimate_tokens(&content),
            content,
            error,
            attempts,
            duration,
            working_key,
        }
    }

    /// Why there is no tool `name`: its source is away, or it is unknown.
    fn absent(&self, name: &str) -> ToolError {
        match self.0.away.of(name) {
            Some((server, why)) => ToolError::Unavailable {
                tool: name.to_string(),
                server,
                why,
            },
            None => ToolError::Unknown(name.to_string()),
        }
    }

    /// Would `name` with `arguments` pass the checks before a call (it exists, is allowed,
    /// the arguments fit its schema)? Nothing runs.
    pub(crate) fn check_call(&self, name: &str, arguments: &Value) -> Result<(), ToolError> {
        let Some(entry) = self.entry(name) else {
            return Err(self.absent(name));
        };
        if !self.allowed(name, None) {
            return Err(ToolError::NotAllowed(name.to_string()));
        }
        self.validate(&entry, arguments)
            .map(|_| ())
            .map_err(|r| r.error)
    }

    /// Run one call with every check (allowlist, breaker, schema, timeout, retries) but no
    /// shaping: the raw result, for code that reads it rather than a model (a job's precheck).
    pub(crate) async fn call_raw(
        &self,
        call: &ToolCall,
        ctx: &ToolContext,
    ) -> Result<Value, ToolError> {
        let mut attempts = 0;
        self.run(call, ctx, None, None, &mut attempts)
            .await
            .map(|(_, value)| value)
            .map_err(|r| r.error)
    }

    /// Does every call of `name` wait for a person's approval (`tools.approval`, or the
    /// tool's own `approval: required`)?
    pub(crate) fn needs_approval(&self, name: &str) -> bool {
        self.settings().needs_approval(name)
            || self
                .entry(name)
                .is_some_and(|e| e.tool.info().approval_required)
    }

    pub(super) fn allowed(&self, name: &str, restrict: Option<&[String]>) -> bool {
        self.0.settings.allows(name)
            && restrict.is_none_or(|r| r.iter().any(|a| hermes_store::util::glob_matches(a, name)))
    }

    async fn run(
        &self,
        call: &ToolCall,
        ctx: &ToolContext,
        restrict: Option<&[String]>,
        permit: Option<Permit>,
        attempts: &mut u32,
    ) -> Result<(Arc<Entry>, Value), Refusal> {
        let name = call.name.as_str();
        // A tool of a source on its first start (a job's precheck at the daemon's start).
        let mut entry = self.entry(name);
        if entry.is_none() && !self.0.starting.names().is_empty() {
            self.0.starting.wait(SOURCE_START_WAIT).await;
            entry = self.entry(name);
        }
        let Some(entry) = entry else {
            let absent = self.absent(name);
            if matches!(absent, ToolError::Unavailable { .. }) {
                return Err(absent.into());
            }
            let available: Vec<String> = self
                .offered(restrict)
                .iter()
                .map(|s| s.name.clone())
                .collect();
            let list = if available.is_empty() {
                "none".to_string()
            } else {
                available.join(", ")
            };
            return Err(Refusal {
                message: format!(
                    "unknown tool '{name}'; the tools available to this task are: {list}"
                ),
                error: absent,
            });
        };
        if !self.allowed(name, restrict) {
            return Err(ToolError::NotAllowed(name.to_string()).into());
        }
        let args = self.validate(&entry, &call.arguments)?;
        // The one place every call passes: a tool that needs a person never runs without one.
        if permit.is_none() && self.needs_approval(name) {
            return Err(ToolError::NeedsApproval(name.to_string()).into());
        }
        // The breaker keeps the tool's health per scope when the tool has one (a web tool:
        // the host), so one dead site does not switch off web access.
        let circuit = match entry.tool.breaker_scope(&args) {
            Some(scope) => format!("{name} for {scope}"),
            None => name.to_string(),
        };
        if self.0.breakers.is_open(&circuit) {
            return Err(ToolError::CircuitOpen(circuit).into());
        }
        let result = self.attempts(&entry, args, ctx, attempts).await;
        match result {
            Ok(value) => {
                self.0.breakers.record_success(&circuit);
                Ok((entry, value))
            }
            Err(error) => {
                // Only the tool's own health counts: timeouts, connection failures, 5xx. A
                // refusal, a 404 or a business "no" is the tool working; bad arguments are the
                // model's fault.
                let counts = matches!(error, ToolError::Network(_) | ToolError::Timeout(_));
                if counts && self.0.breakers.record_failure(&circuit) {
                    tracing::warn!(
                        tool = name,
                        circuit,
                        cooldown_s = self.0.settings.circuit_breaker_cooldown_s,
                        "circuit breaker opened after repeated failures"
                    );
                }
                let message = match &error {
                    ToolError::Network(_) if *attempts > 1 => {
                        format!("{error} (after {} attempts)", *attempts)
                    }
                    _ => error.to_string(),
                };
                Err(Refusal { error, message })
            }
        }
    }

    /// The call under its timeout, retried for network-class errors with backoff.
    async fn attempts(
        &self,
        entry: &Entry,
        args: Value,
        ctx: &ToolContext,
        attempts: &mut u32,
    ) -> Result<Value, ToolError> {
        let settings = &self.0.settings;
        let timeout = entry
            .tool
            .info()
            .timeout
            .unwrap_or(Duration::from_secs(settings.timeout_s));
        loop {
            *attempts += 1;
            let attempt = tokio::time::timeout(timeout, entry.tool.call(args.clone(), ctx)).await;
            match attempt.unwrap_or(Err(ToolError::Timeout(timeout))) {
                Err(e) if e.is_retryable() && *attempts <= settings.max_retries => {
                    let delay = self.0.backoff.delay(*attempts - 1);
                    tracing::debug!(tool = %entry.spec.name, attempt = *attempts, error = %e, ?delay, "retrying tool call");
                    tokio::time::sleep(delay).await;
                }
                other => return other,
            }
        }
    }

    fn validate(&self, entry: &Entry, arguments: &Value) -> Result<Value, Refusal> {
        let args = match arguments {
            // A tool without parameters is often called with nothing at all.
            Value::Null => Value::Object(Map::new()),
            Value::String(s) => {
                let excerpt = hermes_store::util::text::prefix(s, 200);
                let msg = format!(
                    "the arguments must be a JSON object, but they arrived as a string that is not valid JSON ({excerpt:?}); call again with an object matching the schema"
                );
                return Err(ToolError::InvalidArguments(msg).into());
            }
            other => other.clone(),
        };
        let violations: Vec<String> = entry
            .validator
            .iter_errors(&args)
            .take(MAX_REPORTED_VIOLATIONS)
            .map(|e| violation(&e))
            .collect();
        if violations.is_empty() {
            return Ok(args);
        }
        let msg = format!("{}; fix them and call again", violations.join("; "));
        Err(ToolError::InvalidArguments(msg).into())
    }
}
