//! The database's health as `/healthz` and `doctor` report it: a probe (one tiny write and the
//! pending count) on a connection of its own, the storage faults requests met, and how long
//! each is shown.
//! Must not: decide what the API answers (`http` does), or hold a lock across a probe.

use super::{Result, StorageFault, Store, StoreError, now, query};
use std::time::{Duration, Instant};

/// What `/healthz` knows of the database between probes.
#[derive(Debug, Default)]
pub(super) struct Reading {
    /// The last probe's answer and when it came.
    pub(super) last: Option<(Health, Instant)>,
    /// A probe that outlived the request that started it, and since when it runs: its answer
    /// is a later request's. Run apart from the request so that a slow first connection (a
    /// debug build's SCRAM handshake on a loaded machine takes longer than [`PROBE_WAIT`]) is
    /// made once and kept, rather than started and abandoned at every request.
    running: Option<(tokio::task::JoinHandle<Result<Health>>, Instant)>,
}

/// How long a request for health waits for the probe, write and count together: well under
/// the 700 ms the CLI gives `/healthz` as a whole, and a round trip on an open connection takes
/// far less. A probe that takes longer goes on; the request answers with what is known.
pub(crate) const PROBE_WAIT: Duration = Duration::from_millis(400);
/// A server whose probe has not answered for this long is reported unreachable.
const SILENT_AS_DOWN: Duration = Duration::from_secs(2);
/// A probe gives up after this long (its connection's wait, its statements): the server is
/// then as good as down, and the next request starts a new probe.
pub(crate) const PROBE_GIVE_UP: Duration = Duration::from_secs(5);
/// A reading this recent is answered again without asking the database.
const READING_FRESH: Duration = Duration::from_millis(500);
/// How long a storage fault a request met keeps health `degraded` when the probe cannot
/// prove it over (a full disk takes the probe's one-row write and still refuses a task).
pub(crate) const FAULT_MEMORY: Duration = Duration::from_secs(60);

/// What the health probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    /// Why the database cannot be written now, or was not lately; `None`: it can.
    pub fault: Option<StorageFault>,
    /// Tasks waiting for a worker; `None` when unknown (the database did not answer).
    pub pending: Option<i64>,
}

impl Store {
    /// Can the database still be written? One tiny write; `Unavailable` says why not.
    pub async fn check_writable(&self) -> Result<()> {
        match self.write_health_row().await {
            Ok(()) => Ok(()),
            Err(e) => {
                if let StoreError::Unavailable { fault, .. } = &e {
                    self.note_fault(*fault);
                }
                Err(e)
            }
        }
    }

    async fn write_health_row(&self) -> Result<()> {
        query(
            "INSERT INTO health (id, checked_at) VALUES (1, ?) \
             ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
        )
        .bind(now())
        .execute(self)
        .await?;
        Ok(())
    }

    /// Remember that a write failed for want of storage (so health reports it).
    pub fn note_fault(&self, fault: StorageFault) {
        *crate::util::lock(&self.fault) = Some((fault, Instant::now()));
    }

    /// A storage fault noticed within `within`, if any.
    pub(crate) fn recent_fault(&self, within: Duration) -> Option<StorageFault> {
        crate::util::lock(&self.fault)
            .filter(|(_, at)| at.elapsed() < within)
            .map(|(fault, _)| fault)
    }

    /// The database's health for `/healthz`, within [`PROBE_WAIT`] (plus the wait for a probe
    /// already running), whatever the server does: one write on the probe's own connection,
    /// then the pending count, an indexed count whatever the history's length.
    pub async fn health(&self) -> Result<Health> {
        let mut reading = self.reading.lock().await;
        if let Some((health, at)) = reading.last
            && at.elapsed() < READING_FRESH
        {
            return Ok(health);
        }
        let (mut probe, started) = match reading.running.take() {
            Some(running) => running,
            None => {
                let me = self.clone();
                (
                    tokio::spawn(async move { me.probe_now().await }),
                    Instant::now(),
                )
            }
        };
        match tokio::time::timeout(PROBE_WAIT, &mut probe).await {
            Ok(joined) => {
                let health = joined
                    .map_err(|e| StoreError::Corrupt(format!("the health probe stopped: {e}")))??;
                reading.last = Some((health, Instant::now()));
                Ok(health)
            }
            Err(_) => {
                let silent = started.elapsed();
                reading.running = Some((probe, started));
                if self.is_postgres() && silent >= SILENT_AS_DOWN {
                    return Ok(Health {
                        fault: Some(StorageFault::Unreachable),
                        pending: None,
                    });
                }
                // Not long enough to call it down: what was known, without a count.
                let fault = reading
                    .last
                    .and_then(|(h, _)| h.fault)
                    .or_else(|| self.recent_fault(FAULT_MEMORY));
                Ok(Health {
                    fault,
                    pending: None,
                })
            }
        }
    }

    async fn probe_now(&self) -> Result<Health> {
        let deadline = tokio::time::Instant::now() + PROBE_GIVE_UP;
        let on = self.probe.as_deref().unwrap_or(self);
        let written = tokio::time::timeout_at(deadline, on.write_health_row()).await;
        let fault = match written {
            Ok(Ok(())) => {
                // The write went through, so the server is reachable and the database
                // writable: a fault of that kind a request noted is over (it would otherwise
                // stay on show for a minute after the server came back). A full disk or an
                // I/O error may still fail bigger writes, so those are kept for a while.
                let mut noted = crate::util::lock(&self.fault);
                if noted.is_some_and(|(f, _)| {
                    matches!(f, StorageFault::Unreachable | StorageFault::ReadOnly)
                }) {
                    *noted = None;
                }
                drop(noted);
                self.recent_fault(FAULT_MEMORY)
            }
            Ok(Err(StoreError::Unavailable { fault, .. })) => {
                self.note_fault(fault);
                Some(fault)
            }
            Ok(Err(e)) => return Err(e),
            // A server that does not take a one-row write in that long is as good as down for
            // whoever asks. SQLite taking that long is a busy writer (it waits its turn): no
            // fault of its own.
            Err(_) if self.is_postgres() => Some(StorageFault::Unreachable),
            Err(_) => self.recent_fault(FAULT_MEMORY),
        };
        let pending = match fault {
            Some(_) => None,
            None => match tokio::time::timeout_at(deadline, on.pending_count()).await {
                Ok(Ok(n)) => Some(n),
                Ok(Err(StoreError::Unavailable { .. })) | Err(_) => None,
                Ok(Err(e)) => return Err(e),
            },
        };
        Ok(Health { fault, pending })
    }
}
