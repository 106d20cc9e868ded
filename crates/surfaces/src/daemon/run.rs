//! [`run`]: the daemon's parts started on a given listener, then drained in order. Separate
//! from binding so tests run a daemon on 127.0.0.1:0 in-process and stop it at will.
//!
//! Owns: the order of start-up and shutdown, and how long each shutdown step may take.
//! Must not: bind, lock or build anything (`serve` does), parse arguments or print.

use super::node::Membership;
use super::{AddrFile, DaemonError};
use crate::app::App;
use crate::http::{self, ApiState};
use hermes_store::StoreError;
use hermes_store::{FailReason, Origin, TaskState};
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How often old working-memory rows are pruned: they age in days, an hourly look is plenty.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// After the grace, tasks are stopped; ending them is a store write each, not a model call,
/// so background work that still has not stopped after this is stuck, not slow.
const SECOND_CHANCE: Duration = Duration::from_secs(10);
/// The last outbox pass: notices queued during the grace go out now or wait in the outbox for
/// the next start; a slow mail server must not hold the exit hostage.
const LAST_OUTBOX_PASS: Duration = Duration::from_secs(10);
/// The outbox sender stops at its next await; this bounds a send already in flight.
const SENDER_STOP: Duration = Duration::from_secs(5);
/// Requests waiting on tasks are answered once every task has ended; this bounds slow clients.
/// With the default 30 s grace, the steps after it add at most 38 s (with the MCP servers'
/// `mcp::limits::STOP_WAIT` of 8 s): well inside the unit's
/// `TimeoutStopSec=90s`, so systemd never has to SIGKILL a draining daemon.
const SERVER_STOP: Duration = Duration::from_secs(5);
/// How often the daemon looks whether its database file is still at its path: one `stat`.
const FILE_CHECK_EVERY: Duration = Duration::from_secs(2);

/// Run the daemon on `listener` until `shutdown` completes, then drain.
pub async fn run(
    app: App,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), DaemonError> {
    // On PostgreSQL, daemons share the database's lock with each other; a `storage migrate`
    // copying into it holds it alone. Held until this function returns.
    let _database = app.store.lock_for_daemon().await?;
    // A daemon that cannot write its database would accept tasks it can never record: refuse
    // to start, naming the file.
    if let Err(StoreError::Unavailable { fault, .. }) = app.store.check_writable().await {
        return Err(DaemonError::Unwritable {
            path: app.store.path().to_path_buf(),
            fault,
        });
    }
    let local = listener
        .local_addr()
        .map_err(|source| DaemonError::ListenerAddr { source })?;
    // Several daemons may share a PostgreSQL database: this one joins them before it marks
    // anything interrupted, so it marks only its own.
    let mut node = Membership::join(&app, local).await?;
    mark_interrupted(&app, node.is_some()).await?;
    // Written before anything starts, so a failure leaves nothing to stop; a CLI that reads
    // it a moment early waits in the listener's backlog until the API accepts.
    let addr_file = AddrFile::write(&app.config.data_dir, local)?;
    let services = Services::start(&app).await?;
    if let Some(node) = &mut node {
        node.start();
    }
    let api = Api::start(&app, listener);
    let settings = &app.config.settings;
    tracing::info!(
        "ready: API on http://{local} ({} workers, {} tools, {} MCP servers starting, memory {}; address in {})",
        settings.agent.workers,
        app.agent.registry().names().len(),
        settings.mcp.servers.len(),
        if app.memory.is_some() { "on" } else { "off" },
        addr_file.path().display()
    );

    let lost = tokio::select! {
        _ = shutdown => None,
        lost = file_lost(&app.store) => Some(lost),
    };
    if let Some(lost) = lost {
        tracing::error!(
            path = %app.store.path().display(),
            "the database file was {} under the running daemon: stopping at once (SQLite refuses every write to it now)",
            lost.as_str()
        );
        // First of all, before any part opens a connection on whatever is at the path now.
        for path in app.store.abandon_file().await {
            tracing::info!(path = %path.display(), "removed the lost database's write-ahead file, which the next start would have replayed into the file now in place");
        }
    }
    // A request already on a kept-alive connection may still reach a handler: it is refused.
    app.agent.close_intake();
    // Stop accepting first: a task submitted now would only wait as `pending` until the next
    // start. Requests already in flight (a `wait` on a running task) are still answered.
    api.stop.cancel();
    // The address is no longer served: the CLI must not wait on it from now on.
    drop(addr_file);
    // Nothing can be recorded any more once the file is lost: no grace.
    let grace = match lost {
        Some(_) => Duration::ZERO,
        None => Duration::from_secs(app.config.settings.agent.shutdown_grace_s),
    };
    services.drain(&app, grace).await;
    if let Some(node) = node {
        node.leave().await;
    }
    api.finish().await;
    app.store.close().await;
    tracing::info!("stopped");
    match lost {
        Some(lost) => Err(DaemonError::DatabaseLost {
            path: app.store.path().to_path_buf(),
            lost,
        }),
        None => Ok(()),
    }
}

/// Resolves once the SQLite file the store opened is deleted or replaced at its path; never
/// on PostgreSQL.
async fn file_lost(store: &hermes_store::Store) -> hermes_store::FileLost {
    loop {
        tokio::time::sleep(FILE_CHECK_EVERY).await;
        if let Some(lost) = store.file_lost() {
            return lost;
        }
    }
}

/// Nothing of this daemon can be running at start: a task still marked running was cut off
/// by a crash. One node among several (`shared`) marks only its own tasks; its job tasks still
/// pending are followed by its scheduler's restore, not failed.
async fn mark_interrupted(app: &App, shared: bool) -> Result<(), DaemonError> {
    // A `run` (or `mcp`, `eval`) on this data dir may be running its own task right now: that
    // task is its process's to finish, and ending it would throw its answer away.
    let spare = app.store.tasks().live_owners().await?;
    if !spare.is_empty() {
        tracing::info!(processes = ?spare, "tasks run by other live processes of this data dir are left to them");
    }
    if shared {
        let me = app.store.node().unwrap_or_default();
        let interrupted = app
            .store
            .tasks()
            .fail_running_on(me, FailReason::Interrupted, &spare)
            .await?;
        if interrupted > 0 {
            tracing::warn!(
                count = interrupted,
                "tasks this node left running at its last stop marked failed (interrupted)"
            );
        }
        return Ok(());
    }
    let tasks = app.store.tasks();
    let interrupted = tasks
        .fail_unfinished(&[TaskState::Running], FailReason::Interrupted, &spare)
        .await?;
    if interrupted > 0 {
        tracing::warn!(
            count = interrupted,
            "tasks left running by an earlier process marked failed (interrupted)"
        );
    }
    // Job tasks still queued by the previous daemon with no open run (its job removed, or its
    // run already recorded): nothing would deliver their answer. They never ran, so the log
    // says so apart. One whose run is still open is followed by the scheduler's restore.
    let unstarted = tasks
        .fail_pending_of_origin(Origin::Job, FailReason::Interrupted)
        .await?;
    if unstarted > 0 {
        tracing::warn!(
            count = unstarted,
            "job tasks queued but never started before the last stop, with no run left to deliver them, marked failed"
        );
    }
    Ok(())
}

/// The background work: workers, the scheduler loop and the pruner on one tracker, and the
/// outbox sender and the inbox apart from them.
struct Services {
    tracker: TaskTracker,
    stop: CancellationToken,
    sender: JoinHandle<()>,
    sender_stop: CancellationToken,
    inbox: hermes_engine::inbox::Running,
    matrix: hermes_engine::channels::matrix::Running,
    telegram: hermes_engine::channels::telegram::Running,
}

/// Say, at start, each job that sends to a channel the settings no longer have: its runs are
/// recorded, but nothing reaches that channel until it is configured again or the job changed.
async fn warn_of_unknown_channels(app: &App) {
    let known = app.notifier.channels();
    let profiles = &app.config.settings.model.profiles;
    let jobs = match app.store.jobs().list().await {
        Ok(jobs) => jobs,
        Err(e) => return tracing::warn!(error = %e, "cannot list the jobs to check their channels"),
    };
    for job in jobs {
        let unknown: Vec<&str> = job
            .notify
            .iter()
            .map(String::as_str)
            .filter(|c| !known.iter().any(|k| k == c))
            .collect();
        if !unknown.is_empty() {
            tracing::warn!(
                job = %job.id,
                name = %job.name,
                "the job sends to {}, which the settings do not configure (configured: {}); its runs reach none of them until they are configured again, or remove the job and add it again with other channels",
                unknown.join(", "),
                if known.is_empty() { "none".to_string() } else { known.join(", ") }
            );
        }
        if let Some(profile) = job
            .profile
            .as_deref()
            .filter(|p| !profiles.contains_key(*p))
        {
            let defined: Vec<&str> = profiles.keys().map(String::as_str).collect();
            tracing::warn!(
                job = %job.id,
                name = %job.name,
                "the job uses model profile {profile}, which the settings do not define (defined: {}); its runs fail until it is defined again, or remove the job and add it again with another --profile",
                defined.join(", ")
            );
        }
    }
}

impl Services {
    async fn start(app: &App) -> Result<Services, DaemonError> {
        let settings = &app.config.settings;
        let tracker = TaskTracker::new();
        let stop = CancellationToken::new();
        // In the background: a slow or broken MCP server delays nothing; its tools join the
        // registry when it is up, and `app.mcp.status()` says how each one is doing.
        app.mcp.start();
        app.agent
            .spawn_workers(settings.agent.workers as usize, &tracker, stop.clone());
        app.scheduler.start(&tracker, stop.clone()).await?;
        warn_of_unknown_channels(app).await;
        // The outbox sender stops last, so answers of tasks that end during the grace period
        // are still sent before the process exits.
        let sender_stop = CancellationToken::new();
        let sender = {
            let notifier = app.notifier.clone();
            let stop = sender_stop.clone();
            tokio::spawn(async move { notifier.run(stop).await })
        };
        spawn_pruner(app, &tracker, stop.clone());
        // Unanswered approval requests are denied when their time is up.
        app.agent.approvals().spawn_sweeper(&tracker, stop.clone());
        if let Some(memory) = &app.memory {
            memory.spawn_follow(&tracker, stop.clone());
            // Facts get their vectors in the background (memory.embeddings), never on a
            // task's path.
            memory.spawn_meaning(&tracker, stop.clone());
        }
        // Which model each profile serves: checked now, then every model.identity_check_s.
        crate::eval::ModelWatch::new(app, &tracker, stop.clone()).spawn();
        // Mail becomes tasks for the workers started above; its answers go through the sender.
        let inbox = app.inbox.start();
        // Matrix messages go to the inbox like mail; notices to rooms go out through the sender.
        let matrix = app.matrix.start(app.inbox.clone(), app.metrics.clone());
        let telegram = app.telegram.start(app.inbox.clone(), app.metrics.clone());
        Ok(Services {
            tracker,
            stop,
            sender,
            sender_stop,
            inbox,
            matrix,
            telegram,
        })
    }

    /// Give running tasks the grace, stop what is left, send what was queued, stop the sender.
    async fn drain(mut self, app: &App, grace: Duration) {
        // No mail becomes a task from now on; what arrives waits in the mailbox for the next
        // start (the watermark has not passed it).
        self.inbox.stop_intake().await;
        self.matrix.stop_intake().await;
        self.telegram.stop_intake().await;
        tracing::info!(
            running = app.agent.running_count(),
            "shutting down: taking no new tasks; running tasks get {} s to finish",
            grace.as_secs()
        );
        self.stop.cancel();
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait())
            .await
            .is_err()
        {
            let n = app.agent.stop_all_running();
            tracing::warn!(
                count = n,
                "grace period over: unfinished tasks stopped (failed, reason shutdown)"
            );
            if tokio::time::timeout(SECOND_CHANCE, self.tracker.wait())
                .await
                .is_err()
            {
                tracing::error!("some background work did not stop in time");
            }
        }
        // Tasks are over, so no tool call needs the MCP servers any more (bounded).
        app.mcp.stop().await;
        // The answers of email tasks that ended in the grace are queued for the last pass.
        self.inbox.stop().await;
        // One bounded last pass for notices queued during the grace; what does not go out now
        // stays in the outbox for the next start.
        let _ = tokio::time::timeout(LAST_OUTBOX_PASS, app.notifier.deliver_due()).await;
        self.sender_stop.cancel();
        if tokio::time::timeout(SENDER_STOP, self.sender)
            .await
            .is_err()
        {
            tracing::warn!("the outbox sender did not stop in time; pending notices stay queued");
        }
        self.matrix.stop().await;
        self.telegram.stop().await;
    }
}

fn spawn_pruner(app: &App, tracker: &TaskTracker, stop: CancellationToken) {
    let store = app.store.clone();
    let days = i64::from(app.config.settings.memory.working_retention_days);
    tracker.spawn(async move {
        loop {
            let before = hermes_store::now() - chrono::Duration::days(days);
            match store.working().prune(before).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(rows = n, "pruned old working memory"),
                Err(e) => tracing::warn!(error = %e, "could not prune working memory"),
            }
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(PRUNE_EVERY) => {}
            }
        }
    });
}

/// The HTTP API, served until `stop` is cancelled.
struct Api {
    stop: CancellationToken,
    server: JoinHandle<std::io::Result<()>>,
}

impl Api {
    fn start(app: &App, listener: TcpListener) -> Api {
        let state = ApiState::new(app);
        let stop = CancellationToken::new();
        let limits = http::Limits::for_process(&state.config.settings.server);
        let server = tokio::spawn(http::serve(
            listener,
            state,
            limits,
            stop.clone().cancelled_owned(),
        ));
        Api { stop, server }
    }

    /// Requests waiting on tasks are answered now that every task has ended.
    async fn finish(self) {
        match tokio::time::timeout(SERVER_STOP, self.server).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "API server ended with an error"),
            Ok(Err(e)) => tracing::warn!(error = %e, "API server task failed"),
            Err(_) => tracing::warn!("API server did not stop in time"),
        }
    }
}
