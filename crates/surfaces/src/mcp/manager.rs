//! The MCP servers' lives: each configured server gets a supervisor that connects, registers
//! its tools with the registry (`Registry::set_source_tools`), lists them again when the
//! server says they changed (at most once per `RELIST_EVERY`), takes them away when it ends,
//! and starts it again with backoff. A server that cannot start is logged with its reason and
//! retried; it never stops the daemon. While a server is on its first start the registry
//! knows it (`Registry::starting`), so a task that begins then waits for its tools.
//!
//! Owns: the supervisors, each server's status, and the orderly stop (close stdin, then
//! SIGTERM, then SIGKILL, bounded).
//! Must not: offer a tool other than through the registry, or hold a tool of a server that
//! is not running.

use super::client::{self, Connection, Handler};
use super::limits::{RELIST_EVERY, STOP_WAIT};
use super::listing::list_tools;
use super::status::{ServerState, ServerStatus, transport_word};
use super::tool::{McpTool, PeerSlot};
use super::{McpError, SEPARATOR};
use hermes_config::{McpServer, McpSettings};
use hermes_engine::tools::sandbox::Mode;
use hermes_engine::tools::{Registry, RegistryError, SourceStart, Withdrawn};
use hermes_store::util::{Backoff, lock};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Waits between attempts to start a server again: quick at first (a crash), then rarely
/// (a server that cannot start only fills the log).
const RESTART_BACKOFF: Backoff = Backoff::new(Duration::from_millis(500), Duration::from_secs(300));
/// A server that ran this long before ending counts as healthy: its next restart is quick.
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// The MCP servers of the settings; a cheap handle. Nothing runs until [`McpManager::start`].
#[derive(Clone)]
pub struct McpManager(Arc<Inner>);

struct Inner {
    servers: Vec<Arc<Server>>,
    registry: Registry,
    /// The bounds on listing a server's tools (`max_tools_per_server`, `max_list_pages`).
    settings: McpSettings,
    /// The process environment, from which PATH, HOME and LANG are passed on.
    env: HashMap<String, String>,
    /// `tools.sandbox`: whether stdio servers start confined.
    sandbox: Mode,
    started: AtomicBool,
    stop: CancellationToken,
    tracker: TaskTracker,
    /// Bumped at every status change, for [`McpManager::wait_until`].
    changes: watch::Sender<()>,
}

/// One server: its settings, its current connection and what it reports.
struct Server {
    name: String,
    config: McpServer,
    peer: PeerSlot,
    status: Mutex<ServerStatus>,
}

/// How a connection ended.
enum Ended {
    Stopped,
    /// It ran, then ended (the reason says how).
    Died(String),
    /// It connected but could not be used.
    Unusable(McpError),
}

impl McpManager {
    /// Servers confined as `tools.sandbox: enforce` (the default) says.
    pub fn new(settings: &McpSettings, registry: Registry, env: HashMap<String, String>) -> Self {
        Self::with_sandbox(settings, registry, env, Mode::Enforce)
    }

    /// `sandbox`: `tools.sandbox`; `warn` names each stdio server left unconfined.
    pub fn with_sandbox(
        settings: &McpSettings,
        registry: Registry,
        env: HashMap<String, String>,
        sandbox: Mode,
    ) -> Self {
        if sandbox == Mode::Warn {
            for (name, s) in &settings.servers {
                if s.transport() == hermes_config::McpTransport::Stdio {
                    tracing::warn!(server = %name, "tools.sandbox is warn: this MCP server runs unconfined");
                }
            }
        }
        let servers = settings
            .servers
            .iter()
            .map(|(name, config)| {
                Arc::new(Server {
                    name: name.clone(),
                    config: config.clone(),
                    peer: PeerSlot::default(),
                    status: Mutex::new(ServerStatus {
                        name: name.clone(),
                        transport: transport_word(config.transport()),
                        state: ServerState::Starting,
                        tools: Vec::new(),
                        pid: None,
                        restarts: 0,
                        since: chrono::Utc::now(),
                    }),
                })
            })
            .collect();
        McpManager(Arc::new(Inner {
            servers,
            registry,
            settings: settings.clone(),
            env,
            sandbox,
            started: AtomicBool::new(false),
            stop: CancellationToken::new(),
            tracker: TaskTracker::new(),
            changes: watch::Sender::new(()),
        }))
    }

    /// Start every server in the background (once; later calls do nothing).
    pub fn start(&self) {
        if self.0.started.swap(true, Ordering::SeqCst) {
            return;
        }
        for server in &self.0.servers {
            // Said before anything runs, so a task submitted right after waits for it.
            let first = self.0.registry.starting().begin(&server.name);
            let (inner, server) = (self.0.clone(), server.clone());
            self.0
                .tracker
                .spawn(async move { supervise(inner, server, first).await });
        }
    }

    /// Every server's status, in name order.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.0
            .servers
            .iter()
            .map(|s| lock(&s.status).clone())
            .collect()
    }

    /// Wait until `done` holds for the statuses, or `bound` passes; whether it held.
    pub async fn wait_until(
        &self,
        bound: Duration,
        done: impl Fn(&[ServerStatus]) -> bool,
    ) -> bool {
        let mut changes = self.0.changes.subscribe();
        let deadline = Instant::now() + bound;
        loop {
            if done(&self.status()) {
                return true;
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return done(&self.status()),
            }
        }
    }

    /// Wait (at most `bound`) until no server is still on its first start; whether none is.
    pub async fn wait_started(&self, bound: Duration) -> bool {
        self.wait_until(bound, |all| {
            all.iter().all(|s| s.state != ServerState::Starting)
        })
        .await
    }

    /// Stop every server in order and take their tools away; bounded by [`STOP_WAIT`].
    pub async fn stop(&self) {
        self.0.stop.cancel();
        self.0.tracker.close();
        if tokio::time::timeout(STOP_WAIT, self.0.tracker.wait())
            .await
            .is_err()
        {
            tracing::warn!("some MCP servers did not stop in time; they are killed at exit");
        }
    }
}

impl hermes_engine::tools::ToolSources for McpManager {
    fn start(&self) {
        McpManager::start(self)
    }

    fn stop(&self) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(McpManager::stop(self))
    }
}

impl Inner {
    fn set(&self, server: &Server, change: impl FnOnce(&mut ServerStatus)) {
        {
            let mut status = lock(&server.status);
            let before = status.state.clone();
            change(&mut status);
            if status.state != before {
                status.since = chrono::Utc::now();
            }
        }
        self.changes.send_replace(());
    }

    /// The server's tools leave the registry and its connection slot.
    fn withdraw(&self, server: &Server, why: Withdrawn) {
        *lock(&server.peer) = None;
        self.registry.withdraw_source(&server.name, why);
    }
}

/// Connect, serve, and start again with backoff, until the manager stops. `first` is held
/// until the first start ends, whichever way.
async fn supervise(inner: Arc<Inner>, server: Arc<Server>, first: SourceStart) {
    let mut first = Some(first);
    let mut failures = 0u32;
    loop {
        let changed = Arc::new(Notify::new());
        let handler = Handler {
            changed: changed.clone(),
        };
        let attempt = tokio::select! {
            _ = inner.stop.cancelled() => return,
            r = client::connect(&server.name, &server.config, &inner.env, inner.sandbox, handler) => r,
        };
        let began = Instant::now();
        let ended = match attempt {
            Ok(conn) => serve(&inner, &server, conn, &changed, &mut first).await,
            Err(e) => Ended::Unusable(e),
        };
        inner.withdraw(
            &server,
            match &ended {
                Ended::Stopped => Withdrawn::Stopped,
                Ended::Died(_) => Withdrawn::Restarting,
                Ended::Unusable(_) => Withdrawn::Failed,
            },
        );
        match ended {
            Ended::Stopped => return,
            Ended::Died(reason) => {
                tracing::warn!(server = %server.name, "MCP server ended ({reason}); starting it again");
                if began.elapsed() >= STABLE_AFTER {
                    failures = 0;
                }
                inner.set(&server, |s| {
                    s.state = ServerState::Restarting(reason);
                    s.restarts += 1;
                    s.tools.clear();
                    s.pid = None;
                });
            }
            Ended::Unusable(e) => {
                // Said once: a server that keeps failing the same way is retried quietly.
                let reason = e.to_string();
                if matches!(&lock(&server.status).state, ServerState::Failed(r) if *r == reason) {
                    tracing::debug!(server = %server.name, "{reason} (again)");
                } else {
                    tracing::warn!(server = %server.name, "{reason}; trying again with backoff");
                }
                inner.set(&server, |s| {
                    s.state = ServerState::Failed(reason);
                    s.tools.clear();
                    s.pid = None;
                });
            }
        }
        // Whatever happened, the first start is over: restarts make no task wait.
        first = None;
        let delay = RESTART_BACKOFF.delay(failures);
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = inner.stop.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Offer the server's tools, follow its list changes, and wait for its end or the stop. The
/// first start ends (`first` is dropped) once its tools are offered.
async fn serve(
    inner: &Inner,
    server: &Server,
    conn: Connection,
    changed: &Notify,
    first: &mut Option<SourceStart>,
) -> Ended {
    let Connection {
        service,
        pid,
        last_words,
    } = conn;
    let peer = service.peer().clone();
    *lock(&server.peer) = Some(peer.clone());
    let tools = match refresh(inner, server, &peer).await {
        Ok(tools) => tools,
        Err(e) => {
            let _ = tokio::time::timeout(STOP_WAIT, service.cancel()).await;
            return Ended::Unusable(e);
        }
    };
    tracing::info!(server = %server.name, tools = tools.len(), "MCP server running");
    inner.set(server, |s| {
        s.state = ServerState::Running;
        s.tools = tools;
        s.pid = pid;
    });
    *first = None;
    let stop = service.cancellation_token();
    let ending = service.waiting();
    tokio::pin!(ending);
    // A burst of list changes costs one re-list per RELIST_EVERY: the notification only
    // schedules one (a later one while it is due adds nothing; one during the re-list leaves
    // Notify's permit, so the final list is always read).
    let mut listed_at = Instant::now();
    let mut relist_at: Option<Instant> = None;
    loop {
        let relist = async {
            match relist_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = inner.stop.cancelled() => {
                inner.withdraw(server, Withdrawn::Stopped);
                stop.cancel();
                if tokio::time::timeout(STOP_WAIT, ending).await.is_err() {
                    tracing::warn!(server = %server.name, "MCP server did not stop in time");
                }
                return Ended::Stopped;
            }
            _ = changed.notified(), if relist_at.is_none() => {
                relist_at = Some(listed_at + RELIST_EVERY);
            }
            _ = relist => {
                relist_at = None;
                listed_at = Instant::now();
                match refresh(inner, server, &peer).await {
                    Ok(tools) => {
                        tracing::info!(server = %server.name, tools = tools.len(), "MCP server's tools changed");
                        inner.set(server, |s| s.tools = tools);
                    }
                    Err(e) => tracing::warn!(server = %server.name, "{e}; keeping the tools it had"),
                }
            }
            quit = &mut ending => {
                let how = match quit {
                    Ok(rmcp::service::QuitReason::Closed) => "its connection closed".to_string(),
                    Ok(other) => format!("its session ended ({other:?})"),
                    Err(e) => format!("its session failed: {e}"),
                };
                return Ended::Died(format!("{how}{}", last_words.suffix()));
            }
        }
    }
}

/// List the server's tools and make them its tools in the registry; their names, sorted,
/// without those the registry refused (each refusal is logged).
async fn refresh(
    inner: &Inner,
    server: &Server,
    peer: &rmcp::Peer<rmcp::RoleClient>,
) -> Result<Vec<String>, McpError> {
    let listed = list_tools(&server.name, peer, &inner.settings).await?;
    let timeout = match server.config.timeout_s {
        0 => None,
        s => Some(Duration::from_secs(s)),
    };
    let tools = McpTool::from_listed(&server.name, listed, &server.peer, timeout);
    let mut names: Vec<String> = tools.iter().map(|t| t.info().name.clone()).collect();
    let refused = inner.registry.set_source_tools(&server.name, tools);
    for e in &refused {
        tracing::warn!(server = %server.name, "MCP tool left out: {e}");
    }
    names.retain(|n| !refused.iter().any(|e| refused_name(e) == n));
    names.sort();
    debug_assert!(names.iter().all(|n| n.contains(SEPARATOR)));
    Ok(names)
}

fn refused_name(e: &RegistryError) -> &str {
    match e {
        RegistryError::Duplicate(n) | RegistryError::InvalidName(n) => n,
        RegistryError::InvalidSchema { tool, .. } => tool,
    }
}
