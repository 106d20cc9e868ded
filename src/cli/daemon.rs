//! `serve`: the long-running daemon. Takes its listener and its shutdown future as parameters
//! so tests start it on 127.0.0.1:0 and stop it at will.

use crate::app::{App, JobExecution};
use crate::config::Config;
use crate::server::{self, ApiState};
use crate::store::{FailReason, Origin, TaskState};
use anyhow::Context;
use std::fs::{File, TryLockError};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The file in the data dir a running daemon holds locked.
const LOCK_FILE: &str = "daemon.lock";
/// How often old working-memory rows are pruned.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

pub async fn serve(config: Config) -> anyhow::Result<()> {
    let s = &config.settings.server;
    if s.token.is_empty() && !server::is_loopback_host(&s.host) {
        anyhow::bail!(
            "refusing to listen on {} without a token: anyone on the network could run tasks. \
             Set server.token (e.g. token: ${{HERMES_TOKEN}}) or use host: 127.0.0.1",
            s.host
        );
    }
    let addr = format!("{}:{}", s.host, s.port);
    tracing::info!(config = %config.source, data_dir = %config.data_dir.display(), "hermes-agent {} starting", env!("CARGO_PKG_VERSION"));
    let listener = TcpListener::bind(&addr).await.with_context(|| {
        format!("cannot listen on {addr}: is another hermes-agent running? (change server.port to use another port)")
    })?;
    // Held until this function returns, i.e. for the daemon's whole life.
    let _lock = lock_data_dir(&config.data_dir)?;
    let app = App::build(config, JobExecution::Pool).await?;
    run(app, listener, shutdown_signal()).await
}

/// One daemon per data dir. A second one would take the first one's running tasks for
/// leftovers of a crash and mark them failed, and run the same jobs twice. The OS releases the
/// lock when the process ends, however it ends, so a crash leaves nothing to clean up.
fn lock_data_dir(data_dir: &Path) -> anyhow::Result<File> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create the data dir {}", data_dir.display()))?;
    let path = data_dir.join(LOCK_FILE);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => anyhow::bail!(
            "another hermes-agent daemon is already using the data dir {} (it holds {}); \
             stop it first (`systemctl --user stop hermes-agent`) or use another --data-dir",
            data_dir.display(),
            path.display()
        ),
        Err(TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("cannot lock {}", path.display()))
        }
    }
}

/// Run the daemon on `listener` until `shutdown` completes, then drain.
pub async fn run(
    app: App,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    let settings = &app.config.settings;
    // Nothing can be running at start: a task still marked running was cut off by a crash.
    let interrupted = app
        .store
        .fail_unfinished(&[TaskState::Running], FailReason::Interrupted)
        .await?
        // Job tasks still queued by the previous daemon: their firing is over (the scheduler
        // records it as interrupted), so running them now would deliver nowhere.
        + app.store.fail_pending_of_origin(Origin::Job, FailReason::Interrupted).await?;
    if interrupted > 0 {
        tracing::warn!(
            count = interrupted,
            "tasks left running by the previous process marked failed (interrupted)"
        );
    }
    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    app.agent
        .spawn_workers(settings.agent.workers as usize, &tracker, stop.clone());
    app.scheduler.start(&tracker, stop.clone()).await?;
    // The outbox sender stops last, so answers of tasks that end during the grace period are
    // still sent before the process exits.
    let sender_stop = CancellationToken::new();
    let sender = {
        let notifier = app.notifier.clone();
        let stop = sender_stop.clone();
        tokio::spawn(async move { notifier.run(stop).await })
    };
    {
        let store = app.store.clone();
        let days = i64::from(settings.memory.working_retention_days);
        let stop = stop.clone();
        tracker.spawn(async move {
            loop {
                let before = crate::store::now() - chrono::Duration::days(days);
                match store.prune_working(before).await {
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
    let local = listener.local_addr()?;
    let state = ApiState {
        agent: app.agent.clone(),
        scheduler: app.scheduler.clone(),
        memory: app.memory.clone(),
        token: Arc::from(settings.server.token.as_str()),
    };
    let server_stop = CancellationToken::new();
    let server = tokio::spawn(server::serve(
        listener,
        state,
        server_stop.clone().cancelled_owned(),
    ));
    tracing::info!(
        "ready: API on http://{local} ({} workers, {} tools, memory {})",
        settings.agent.workers,
        app.agent.registry().names().len(),
        if app.memory.is_some() { "on" } else { "off" }
    );

    shutdown.await;
    let grace = Duration::from_secs(settings.agent.shutdown_grace_s);
    // Stop accepting first: a task submitted now would only wait as `pending` until the next
    // start. Requests already in flight (a `wait` on a running task) are still answered.
    server_stop.cancel();
    tracing::info!(
        running = app.agent.running_count(),
        "shutting down: taking no new tasks; running tasks get {} s to finish",
        grace.as_secs()
    );
    stop.cancel();
    tracker.close();
    if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
        let n = app.agent.stop_all_running();
        tracing::warn!(
            count = n,
            "grace period over: unfinished tasks stopped (failed, reason shutdown)"
        );
        if tokio::time::timeout(Duration::from_secs(10), tracker.wait())
            .await
            .is_err()
        {
            tracing::error!("some background work did not stop in time");
        }
    }
    // One bounded last pass for notices queued during the grace; what does not go out now
    // stays in the outbox for the next start.
    let _ = tokio::time::timeout(Duration::from_secs(10), app.notifier.deliver_due()).await;
    sender_stop.cancel();
    if tokio::time::timeout(Duration::from_secs(5), sender)
        .await
        .is_err()
    {
        tracing::warn!("the outbox sender did not stop in time; pending notices stay queued");
    }
    // Requests waiting on tasks are answered now that every task has ended.
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(e))) => tracing::warn!(error = %e, "API server ended with an error"),
        Ok(Err(e)) => tracing::warn!(error = %e, "API server task failed"),
        Err(_) => tracing::warn!("API server did not stop in time"),
    }
    app.store.close().await;
    tracing::info!("stopped");
    Ok(())
}

/// SIGTERM (systemd) or SIGINT (Ctrl-C).
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the daemon");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
