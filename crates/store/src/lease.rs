//! This node's lease on a database other daemons share, as a fencing token: the epoch its
//! last join drew, and when the database last took its heartbeat under it.
//!
//! The store stamps the epoch on what the node claims (tasks, job runs) and takes a step or an
//! end for them only while the node's row still holds that epoch (`nodes.rs`); the agent asks
//! [`Lease::ensure`] before each model call and each tool call, so a node that was stopped past
//! its lease (SIGSTOP, a suspended laptop) and declared dead does nothing more once it
//! continues: its first act waits for a heartbeat, which finds the row gone.
//! Must not: beat or judge other nodes (the daemon's keeper does), or touch SQL.

use chrono::{DateTime, Utc};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often [`Lease::ensure`] looks at the clock again while the lease is unconfirmed: the
/// wall clock moves on by itself, without a heartbeat to say so.
const RECHECK: Duration = Duration::from_secs(1);

/// A cheap handle shared by every clone of the store (and the heartbeat's own connection).
#[derive(Debug, Clone)]
pub struct Lease {
    standing: Arc<watch::Sender<Standing>>,
}

#[derive(Debug, Clone)]
struct Standing {
    /// `None` until the node joins (SQLite, `run`, before the daemon's start): nothing is
    /// fenced then.
    epoch: Option<Arc<str>>,
    /// The wall-clock time stamped on the last heartbeat the database took under `epoch`.
    /// Wall clock, not `Instant`: a suspended machine's monotonic clock stands still while
    /// the others' time — the time they judge this node by — goes on.
    confirmed: DateTime<Utc>,
    /// `storage.node_lease_s`.
    length: Duration,
}

/// A step refused because this node no longer holds the lease it was claimed under.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error(
    "this node lost its lease on the database (it was silent for longer than storage.node_lease_s and the other nodes took over its work); it does nothing more for what it was running"
)]
pub struct Fenced;

impl Default for Lease {
    fn default() -> Lease {
        Lease {
            standing: Arc::new(watch::Sender::new(Standing {
                epoch: None,
                confirmed: DateTime::<Utc>::UNIX_EPOCH,
                length: Duration::ZERO,
            })),
        }
    }
}

impl Lease {
    /// A new epoch to join under: random, so no earlier join of this node (nor any other
    /// node) ever held it.
    pub(crate) fn draw() -> Arc<str> {
        Arc::from(uuid::Uuid::new_v4().simple().to_string())
    }

    /// The database took this node's join under `epoch` at `at`.
    pub fn joined(&self, epoch: Arc<str>, at: DateTime<Utc>, length: Duration) {
        self.standing.send_modify(|s| {
            s.epoch = Some(epoch);
            s.confirmed = at;
            s.length = length;
        });
    }

    /// The database took a heartbeat stamped `at` under `epoch`.
    pub fn confirmed(&self, epoch: &str, at: DateTime<Utc>) {
        self.standing.send_if_modified(|s| {
            if s.epoch.as_deref() == Some(epoch) && at > s.confirmed {
                s.confirmed = at;
                return true;
            }
            false
        });
    }

    /// The node's row is gone or holds another epoch: the others took it for dead. Its epoch
    /// becomes one no row holds, so nothing is claimed or written under it until it joins
    /// again; true if it held a lease until now.
    pub fn lose(&self) -> bool {
        let mut was = false;
        self.standing.send_modify(|s| {
            was = s.epoch.is_some();
            s.epoch = Some(Lease::draw());
        });
        was
    }

    /// The epoch to stamp on what this node claims now; `None` before it joined.
    pub fn epoch(&self) -> Option<Arc<str>> {
        self.standing.borrow().epoch.clone()
    }

    /// Whether `epoch` (a task's) is the one this node holds now.
    pub fn holds(&self, epoch: &str) -> bool {
        self.standing.borrow().epoch.as_deref() == Some(epoch)
    }

    /// Wait until work claimed under `epoch` may act: the node still holds that epoch and a
    /// heartbeat confirmed it recently enough that the others cannot have taken the node for
    /// dead (two thirds of the lease: heartbeats come every third). While unconfirmed — the
    /// process was stopped, the database is out of reach — it waits for the next heartbeat
    /// rather than acting on a lease that may be gone; the task's own limit bounds the wait.
    /// Work claimed under no epoch (not a node's) is never fenced.
    pub async fn ensure(&self, epoch: Option<&str>) -> Result<(), Fenced> {
        let Some(epoch) = epoch else {
            return Ok(());
        };
        let mut heard = self.standing.subscribe();
        loop {
            {
                let s = heard.borrow_and_update();
                if s.epoch.as_deref() != Some(epoch) {
                    return Err(Fenced);
                }
                let fresh = chrono::Duration::from_std(s.length * 2 / 3)
                    .unwrap_or(chrono::Duration::zero());
                if Utc::now() - s.confirmed < fresh {
                    return Ok(());
                }
            }
            // Either the heartbeat's word or the clock's next look; a closed sender cannot
            // happen while `self` holds it.
            let _ = tokio::time::timeout(RECHECK, heard.changed()).await;
        }
    }

    /// Wait until this node loses the lease it holds now (the keeper stops its work then).
    /// A join after a loss wakes it too; what the keeper does then finds nothing to stop.
    pub async fn lost(&self) {
        let mut heard = self.standing.subscribe();
        let mut held = heard.borrow_and_update().epoch.clone();
        loop {
            if heard.changed().await.is_err() {
                return;
            }
            let now = heard.borrow_and_update().epoch.clone();
            match held {
                // Not joined when asked: the first join is what may be lost.
                None => held = now,
                Some(_) if now != held => return,
                Some(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_of_no_node_is_never_fenced() {
        assert_eq!(Lease::default().ensure(None).await, Ok(()));
    }

    #[tokio::test]
    async fn a_confirmed_lease_lets_its_own_epoch_act_and_no_other() {
        let lease = Lease::default();
        let epoch = Lease::draw();
        lease.joined(epoch.clone(), Utc::now(), Duration::from_secs(30));
        assert_eq!(lease.ensure(Some(&epoch)).await, Ok(()));
        assert_eq!(lease.ensure(Some("an-older-epoch")).await, Err(Fenced));
        assert!(lease.lose());
        assert_eq!(lease.ensure(Some(&epoch)).await, Err(Fenced));
        assert!(!lease.holds(&epoch));
    }

    #[tokio::test]
    async fn a_stale_lease_waits_for_a_heartbeat_before_acting() {
        let lease = Lease::default();
        let epoch = Lease::draw();
        let long_ago = Utc::now() - chrono::Duration::seconds(60);
        lease.joined(epoch.clone(), long_ago, Duration::from_secs(6));
        let waiting = tokio::spawn({
            let (lease, epoch) = (lease.clone(), epoch.clone());
            async move { lease.ensure(Some(&epoch)).await }
        });
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "acted on a lease not confirmed for 60 s"
        );
        lease.confirmed(&epoch, Utc::now());
        let acted = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the heartbeat was heard")
            .expect("the waiter ran");
        assert_eq!(acted, Ok(()));
    }

    #[tokio::test]
    async fn a_stale_lease_that_is_lost_refuses() {
        let lease = Lease::default();
        let epoch = Lease::draw();
        lease.joined(
            epoch.clone(),
            DateTime::<Utc>::UNIX_EPOCH,
            Duration::from_secs(6),
        );
        let waiting = tokio::spawn({
            let (lease, epoch) = (lease.clone(), epoch.clone());
            async move { lease.ensure(Some(&epoch)).await }
        });
        let lost = tokio::spawn({
            let lease = lease.clone();
            async move { lease.lost().await }
        });
        tokio::task::yield_now().await;
        lease.lose();
        let refused = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("the loss was heard")
            .expect("the waiter ran");
        assert_eq!(refused, Err(Fenced));
        tokio::time::timeout(Duration::from_secs(5), lost)
            .await
            .expect("the keeper heard the loss")
            .expect("the keeper ran");
    }
}
