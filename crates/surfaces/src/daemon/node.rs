//! This daemon as one node among several on a shared PostgreSQL database: it says it is up,
//! beats a heartbeat, and takes over what a node silent past `storage.node_lease_s` left —
//! its running tasks end `failed` (reason `interrupted`) as after a crash on one node, the
//! run locks its firings held are freed, and the job runs it was following are followed to
//! their end and delivered here. Nothing waits for the silent node to come back.
//!
//! Each join draws a new lease epoch (a fencing token, `crates/store/src/lease.rs`); a node swept is
//! revoked before anything of it is taken, so when it continues (a stopped process, a
//! suspended laptop) its heartbeat finds the lease lost, its tasks are stopped first, nothing
//! it writes under the old lease is taken, and it joins again under a new one. A node judges
//! others only after reaching the database itself for a whole lease: an outage is nobody's
//! death.
//!
//! On SQLite none of this runs: the data dir's lock keeps one daemon per database, and the
//! start-up restore covers a crash.
//! Must not: run tasks or fire jobs itself (the workers and the scheduler do), or hold SQL.

use super::DaemonError;
use crate::app::App;
use hermes_engine::agent::Heard;
use hermes_store::{Change, FailReason, StoreError, now};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The keeper of this node's membership: its heartbeat and the sweep of silent nodes.
pub(super) struct Membership {
    keeper: Option<JoinHandle<()>>,
    stop: CancellationToken,
    app: App,
}

/// The bounds of a node's beat: often enough to notice a dead node soon under a short lease,
/// seldom enough not to load the database under a long one.
const BEAT_MIN: Duration = Duration::from_secs(1);
const BEAT_MAX: Duration = Duration::from_secs(10);

/// How often a node beats and looks for silent ones: a third of the lease, so one late beat
/// never makes a live node look dead, within [`BEAT_MIN`]–[`BEAT_MAX`].
fn beat_every(lease: Duration) -> Duration {
    (lease / 3).clamp(BEAT_MIN, BEAT_MAX)
}

/// The machine's name, for `nodes` rows and messages (Linux: the kernel's hostname).
fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

impl Membership {
    /// Join the database's nodes (PostgreSQL only; `None` on SQLite), before anything runs.
    pub(super) async fn join(
        app: &App,
        api: SocketAddr,
    ) -> Result<Option<Membership>, DaemonError> {
        if app.store.shared().is_none() || app.store.node().is_none() {
            return Ok(None);
        }
        let lease = app.agent.node_lease();
        app.store
            .nodes()
            .join(
                &host_name(),
                std::process::id(),
                Some(&api.to_string()),
                chrono_lease(lease),
            )
            .await?;
        Ok(Some(Membership {
            keeper: None,
            stop: CancellationToken::new(),
            app: app.clone(),
        }))
    }

    /// Start the heartbeat and the sweep; once the workers and the scheduler run (a run taken
    /// over is followed by this node's scheduler).
    pub(super) fn start(&mut self) {
        let app = self.app.clone();
        let stop = self.stop.clone();
        self.keeper = Some(tokio::spawn(async move {
            tokio::join!(keep(app.clone(), stop.clone()), relay(app, stop));
        }));
    }

    /// Stop beating and tell the others this node is gone, so what it leaves (a firing still
    /// waiting for a person) is taken over at their next sweep, not after the lease.
    pub(super) async fn leave(mut self) {
        self.stop.cancel();
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.await;
        }
        if let Err(e) = self.app.store.nodes().leave().await {
            tracing::warn!(error = %e, "could not tell the other nodes this one stopped; they take over after storage.node_lease_s");
        }
    }
}

impl Drop for Membership {
    /// A daemon whose `run` is dropped without a graceful stop (a crash in-process, a test)
    /// stops beating, like a process killed: the others take over after the lease.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn chrono_lease(lease: Duration) -> chrono::Duration {
    chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::seconds(30))
}

/// The sweep of silent nodes, on the daemon's runtime; the heartbeat beats apart from it.
/// When the heartbeat finds this node's lease lost, its tasks are stopped first of all.
async fn keep(app: App, stop: CancellationToken) {
    let lease = app.agent.node_lease();
    let beating = beat_apart(&app, lease, stop.clone());
    let mut reach = Reach::default();
    loop {
        // Also each round, not only when told: a loss between two rounds is not missed.
        stop_fenced(&app);
        if let Err(e) = sweep(&app, lease, &mut reach).await {
            reach.broken();
            tracing::warn!(error = %e, "cannot look for silent nodes; retrying");
        }
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = app.store.lease().lost() => {}
            _ = tokio::time::sleep(beat_every(lease)) => {}
        }
    }
    if let Some(thread) = beating {
        // It sees the same cancellation at its next beat (within `beat_every`).
        let _ = tokio::task::spawn_blocking(move || thread.join()).await;
    }
}

/// Stop the tasks this node runs under a lease it lost: the other nodes ended them.
fn stop_fenced(app: &App) {
    let stopped = app.agent.stop_fenced();
    if stopped > 0 {
        tracing::error!(
            tasks = stopped,
            "fenced: this node's lease was lost (the other nodes took it for dead); its running tasks were stopped before anything else"
        );
    }
}

/// Since when this node has reached the database without a break. Silence the node could not
/// have seen is no proof of death: while the database was down nobody could beat, and after it
/// is back the others need a beat or two to reconnect. So a node judges others only once it has
/// itself reached the database for a whole lease (after its start, and after every break).
#[derive(Debug, Default)]
struct Reach {
    since: Option<chrono::DateTime<chrono::Utc>>,
}

impl Reach {
    /// A look at the database succeeded at `at`: whether this node may judge the others now.
    fn may_judge(&mut self, at: chrono::DateTime<chrono::Utc>, lease: Duration) -> bool {
        let since = *self.since.get_or_insert(at);
        at - since >= chrono_lease(lease)
    }

    fn broken(&mut self) {
        self.since = None;
    }
}

/// Beat on a thread and runtime of its own, over a connection of its own: a node busy with a
/// burst of work — every runtime thread and pooled connection taken for seconds — is still
/// alive, and must not look dead to the others. `None` if the thread could not start (then
/// it beats on the daemon's runtime).
fn beat_apart(
    app: &App,
    lease: Duration,
    stop: CancellationToken,
) -> Option<std::thread::JoinHandle<()>> {
    let store = app.store.clone();
    let thread_stop = stop.clone();
    let spawned = std::thread::Builder::new()
        .name("hermes-heartbeat".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the heartbeat's runtime; the node may be taken for dead");
                    return;
                }
            };
            // The connection belongs to this runtime: made (inside it) and used here only.
            runtime.block_on(async move {
                beat(store.on_own_connection(), lease, thread_stop).await
            });
        });
    match spawned {
        Ok(thread) => Some(thread),
        Err(e) => {
            tracing::warn!(error = %e, "cannot start the heartbeat's thread; beating on the daemon's runtime");
            let store = app.store.clone();
            tokio::spawn(async move { beat(store, lease, stop).await });
            None
        }
    }
}

async fn beat(store: hermes_store::Store, lease: Duration, stop: CancellationToken) {
    loop {
        match store.nodes().beat().await {
            Ok(true) => {}
            Ok(false) => rejoin(&store, lease).await,
            Err(e) => tracing::warn!(error = %e, "cannot beat this node's heartbeat; retrying"),
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(beat_every(lease)) => {}
        }
    }
}

/// Pass the database's change feed on: queued work wakes this node's idle workers, news of
/// a task wakes whoever here waits on or follows it. Without the feed (lost, the server
/// down) everyone still polls; it is connected again after [`FEED_RETRY`].
async fn relay(app: App, stop: CancellationToken) {
    let mut feed = None;
    loop {
        if feed.is_none() {
            match app.store.change_feed().await {
                Ok(Some(f)) => feed = Some(f),
                Ok(None) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen to the database's changes; polling meanwhile");
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(FEED_RETRY) => continue,
                    }
                }
            }
        }
        let Some(listening) = feed.as_mut() else {
            continue;
        };
        let change = tokio::select! {
            _ = stop.cancelled() => return,
            change = listening.next() => change,
        };
        match change {
            // A task queued or an approval answered elsewhere: either may be work here.
            Ok(Change::Pending) => app.agent.wake_for_holds(),
            Ok(Change::Task(id)) => app.agent.heard_elsewhere(Heard::State(id)),
            Ok(Change::Facts) => {
                if let Some(memory) = &app.memory {
                    memory.wake();
                }
            }
            Ok(Change::Lost) => {
                tracing::info!("the database's change feed was cut; everyone looks again");
                app.agent.heard_elsewhere(Heard::Lagged);
                app.agent.wake_for_holds();
                app.agent.wake_all_workers();
                if let Some(memory) = &app.memory {
                    memory.wake();
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "the database's change feed failed; polling meanwhile");
                app.agent.heard_elsewhere(Heard::Lagged);
                feed = None;
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(FEED_RETRY) => {}
                }
            }
        }
    }
}

/// How soon a change feed that failed is connected again.
const FEED_RETRY: Duration = Duration::from_secs(2);

/// This node's row is gone: the others took it for dead (it was silent past the lease — a
/// stalled machine, a lost database) and ended what it was running; its lease is lost, so the
/// keeper stops those tasks here. It joins again, under a new lease.
async fn rejoin(store: &hermes_store::Store, lease: Duration) {
    tracing::error!(
        "the other nodes took this one for dead (no heartbeat for storage.node_lease_s = {} s): the tasks it was running were ended as interrupted; joining again",
        lease.as_secs()
    );
    if let Err(e) = store
        .nodes()
        .join(&host_name(), std::process::id(), None, chrono_lease(lease))
        .await
    {
        tracing::warn!(error = %e, "cannot join the nodes again; retrying");
    }
}

/// End and take over what every node silent for longer than the lease left. The node is
/// revoked first — its row and with it its lease deleted — so that whatever it still tries
/// under that lease is refused (`crates/store/src/lease.rs`); each step is one conditional statement, so
/// nodes sweeping at once do each thing once.
async fn sweep(app: &App, lease: Duration, reach: &mut Reach) -> Result<(), SweepError> {
    let at = now();
    let since = at - chrono_lease(lease);
    let silent = app.store.nodes().silent(since).await?;
    if !reach.may_judge(at, lease) {
        if !silent.is_empty() {
            tracing::info!(
                nodes = silent.len(),
                "nodes silent past storage.node_lease_s, judged once this node has reached the database for a whole lease"
            );
        }
        return Ok(());
    }
    for node in silent {
        if !app.store.nodes().revoke(&node, since).await? {
            // It beat again just now: it was slow, not dead, and keeps its work.
            tracing::warn!(node = %node, "a node taken for silent beat again before the sweep");
            continue;
        }
        let failed = app
            .store
            .tasks()
            .fail_running_on(&node, FailReason::Interrupted, &[])
            .await?;
        let freed = app.store.jobs().release_placeholders_of(&node).await?;
        let taken = app.scheduler.take_over(&node).await?;
        // Its jobs are this node's to fire now; one it made lately may be due before this
        // scheduler's next look.
        app.scheduler.wake();
        tracing::warn!(
            node = %node,
            tasks_interrupted = failed,
            locks_freed = freed,
            runs_taken_over = taken,
            "node silent for more than storage.node_lease_s ({} s): taken over",
            lease.as_secs()
        );
    }
    // Work a sweep left half done (it stopped between revoking a node and ending its tasks).
    let orphaned = app
        .store
        .tasks()
        .fail_orphaned(FailReason::Interrupted)
        .await?;
    if orphaned > 0 {
        tracing::warn!(
            tasks_interrupted = orphaned,
            "tasks claimed under a lease no node holds any more: ended as interrupted"
        );
    }
    Ok(())
}

#[derive(Debug, thiserror::Error)]
enum SweepError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Scheduler(#[from] hermes_engine::scheduler::SchedulerError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_beats_three_times_a_lease_within_bounds() {
        assert_eq!(beat_every(Duration::from_secs(30)), Duration::from_secs(10));
        assert_eq!(beat_every(Duration::from_secs(6)), Duration::from_secs(2));
        assert_eq!(beat_every(Duration::from_secs(1)), Duration::from_secs(1));
        assert_eq!(
            beat_every(Duration::from_secs(600)),
            Duration::from_secs(10)
        );
    }
}
