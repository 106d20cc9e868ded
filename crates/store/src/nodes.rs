//! The daemons that share this database ("nodes"): each one's heartbeat, and what a node found
//! silent leaves behind — the tasks it was running, the run locks its firings held as
//! placeholders, the job runs it was following — for the others to end or take over.
//!
//! Every take-over is one conditional statement (`… WHERE node_id = <the silent node>`), so two
//! nodes sweeping at once cannot both take the same run, and a sweep run twice changes nothing.
//! Must not: decide when a node is silent (the daemon's keeper passes the cut-off), or follow a
//! run itself (the scheduler does).
//!
//! The node's own row is the nodes' aggregate (`store.nodes()`); the take-over writes are the
//! tasks' and the jobs' (`store.tasks().fail_running_on`, `store.jobs().take_run`, …), kept
//! here beside the rules above.

use super::aggregates::{Jobs, Nodes, Tasks};
use super::{Builder, FailReason, Lease, Result, Store, StoreError, now, query, query_as};
use chrono::{DateTime, Utc};
use std::sync::Arc;

/// One daemon as the database knows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct Node {
    pub id: String,
    pub host: String,
    pub pid: i64,
    /// The address its API serves, when it said.
    pub api: Option<String>,
    pub started_at: DateTime<Utc>,
    pub seen_at: DateTime<Utc>,
}

/// A job run a node fired and was following to its end, whose task still holds the job's
/// run lock.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct OpenRun {
    pub run_id: i64,
    pub job_id: String,
    pub task_id: String,
    pub scheduled_at: DateTime<Utc>,
    /// The lease of the node following it, when it fired (or took it over).
    pub node_epoch: Option<String>,
}

/// The prefix of the run lock a firing holds before its task exists, naming its node: the
/// placeholders of a silent node can be released without touching anyone else's.
pub fn placeholder_prefix(node: Option<&str>) -> String {
    format!("firing:{}:", node.unwrap_or("-"))
}

impl Store {
    /// This store as used by node `id`: the tasks it claims and the job runs it fires are
    /// recorded as its own.
    pub fn with_node(mut self, id: &str) -> Store {
        self.node = Some(Arc::from(id));
        self.lease = Lease::default();
        self
    }

    /// This node's lease on the database (unjoined, so fencing nothing, until
    /// [`Nodes::join`]).
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The epoch to stamp on what this node claims now; `None` before it joined.
    pub(super) fn stamp(&self) -> Option<String> {
        self.lease.epoch().map(|e| e.to_string())
    }

    /// The node this store works for, if it was given one.
    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// This store on a connection of its own, not shared with the pool: a heartbeat written
    /// through it never waits behind a burst of work holding every pooled connection (and a
    /// node so busy must not look dead). SQLite: the same store.
    pub fn on_own_connection(&self) -> Store {
        let super::Engine::Postgres(pool) = &self.engine else {
            return self.clone();
        };
        let options = (*pool.connect_options()).clone();
        let own = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(super::postgres::PG_ACQUIRE)
            .connect_lazy_with(options);
        Store {
            engine: super::Engine::Postgres(own),
            ..self.clone()
        }
    }
}

/// A pid of this host that names no process now.
fn gone(pid: i64) -> bool {
    u32::try_from(pid).is_ok_and(|pid| !crate::util::process_alive(pid))
}

impl Nodes<'_> {
    /// Say this node is up. Refused when the same node id beat within `lease` from another
    /// host, or from another live process on this one: two daemons started from one data dir
    /// (copied to a second machine, or beside the first). A process of this host that is gone
    /// was this node's own run before a crash: its restart joins at once.
    pub async fn join(
        self,
        host: &str,
        pid: u32,
        api: Option<&str>,
        lease: chrono::Duration,
    ) -> Result<()> {
        let id = self.store.node().unwrap_or_default();
        let at = now();
        let mut tx = self.store.begin().await?;
        let other: Option<(String, i64, DateTime<Utc>)> =
            query_as("SELECT host, pid, seen_at FROM nodes WHERE id = ?")
                .bind(id)
                .fetch_optional(&mut tx)
                .await?;
        if let Some((other_host, other_pid, seen)) = other
            && seen > at - lease
            && !(other_host == host && (other_pid == i64::from(pid) || gone(other_pid)))
        {
            return Err(StoreError::NodeInUse {
                node: id.to_string(),
                holder: format!("{other_host} pid {other_pid}"),
                seconds: (at - seen).num_seconds(),
            });
        }
        // A new epoch at every join: what this node claimed before (under an epoch the others
        // may already have taken over) is fenced from now on, even if nobody took it yet.
        let epoch = Lease::draw();
        query(
            "INSERT INTO nodes (id, host, pid, api, started_at, seen_at, epoch) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6) \
             ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, \
             api = excluded.api, started_at = excluded.started_at, seen_at = excluded.seen_at, \
             epoch = excluded.epoch",
        )
        .bind(id)
        .bind(host)
        .bind(i64::from(pid))
        .bind(api)
        .bind(at)
        .bind(&*epoch)
        .execute(&mut tx)
        .await?;
        tx.commit().await?;
        let length = lease.to_std().unwrap_or_default();
        self.store.lease.joined(epoch, at, length);
        Ok(())
    }

    /// This node's heartbeat, under the epoch it joined with. False when its row is gone or
    /// holds another epoch: the others took it for dead (it was silent past the lease) and
    /// ended what it was running; its lease is lost from here on.
    pub async fn beat(self) -> Result<bool> {
        let Some(epoch) = self.store.lease.epoch() else {
            return Ok(false);
        };
        let at = now();
        let beat = query("UPDATE nodes SET seen_at = ? WHERE id = ? AND epoch = ?")
            .bind(at)
            .bind(self.store.node().unwrap_or_default())
            .bind(&*epoch);
        let beat = self.store.one_row(beat).await?;
        if beat {
            self.store.lease.confirmed(&epoch, at);
        } else {
            self.store.lease.lose();
        }
        Ok(beat)
    }

    /// A graceful stop: the others need not wait out the lease to take over what this node
    /// leaves (a firing still waiting for a person).
    pub async fn leave(self) -> Result<()> {
        let leave = query("UPDATE nodes SET seen_at = ? WHERE id = ?")
            .bind(DateTime::<Utc>::UNIX_EPOCH)
            .bind(self.store.node().unwrap_or_default());
        self.store.run(leave).await
    }

    /// Every node, most recently seen first.
    pub async fn list(self) -> Result<Vec<Node>> {
        let sql =
            "SELECT id, host, pid, api, started_at, seen_at FROM nodes ORDER BY seen_at DESC, id";
        self.store.all(query_as(sql)).await
    }

    /// Nodes other than this one not seen since `before`.
    pub async fn silent(self, before: DateTime<Utc>) -> Result<Vec<String>> {
        let silent: Vec<(String,)> = self
            .store
            .all(
                query_as("SELECT id FROM nodes WHERE seen_at < ? AND id <> ? ORDER BY id")
                    .bind(before)
                    .bind(self.store.node().unwrap_or_default()),
            )
            .await?;
        Ok(silent.into_iter().map(|(id,)| id).collect())
    }

    /// Declare a node silent since `before` dead: its row is deleted, and with it its lease,
    /// so nothing it still writes under it is taken (`lease.rs`) — the first thing a take-over
    /// does, before ending or taking anything. False when it beat again meanwhile (it was only
    /// slow, and keeps its row and its work).
    pub async fn revoke(self, id: &str, before: DateTime<Utc>) -> Result<bool> {
        self.store
            .one_row(
                query("DELETE FROM nodes WHERE id = ? AND seen_at < ?")
                    .bind(id)
                    .bind(before),
            )
            .await
    }
}

impl Tasks<'_> {
    /// End the tasks `node` was running under no lease its row holds (not those waiting for a
    /// person: any node continues them once answered, nor those of the live processes in
    /// `spare`, see [`Tasks::live_owners`]). After [`Nodes::revoke`] that is all of them; a
    /// node that already joined again keeps what it claimed since.
    pub async fn fail_running_on(
        self,
        node: &str,
        reason: FailReason,
        spare: &[i64],
    ) -> Result<u64> {
        let mut fail = Builder::new("UPDATE tasks SET state = 'failed', reason = ");
        fail.push_bind(reason)
            .push(", error = COALESCE(error, ")
            .push_bind(format!(
                "task was running on node {node}, which stopped ({reason})"
            ))
            .push("), finished_at = ")
            .push_bind(now())
            .push(" WHERE state = 'running' AND waiting = FALSE AND node_id = ")
            .push_bind(node.to_string())
            .push(
                " AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = tasks.node_id \
                 AND n.epoch = tasks.node_epoch)",
            );
        super::tasks::sparing(&mut fail, spare);
        self.store.rows(fail.build()).await
    }

    /// End the running tasks claimed under a lease no node holds any more, whoever's: what a
    /// take-over interrupted between revoking a node and ending its tasks.
    pub async fn fail_orphaned(self, reason: FailReason) -> Result<u64> {
        let fail = query(
            "UPDATE tasks SET state = 'failed', reason = ?, error = COALESCE(error, ?), \
             finished_at = ? WHERE state = 'running' AND waiting = FALSE \
             AND node_id IS NOT NULL AND node_epoch IS NOT NULL \
             AND NOT EXISTS (SELECT 1 FROM nodes n WHERE n.id = tasks.node_id \
                             AND n.epoch = tasks.node_epoch)",
        )
        .bind(reason)
        .bind(format!(
            "task was running on a node that lost its lease ({reason})"
        ))
        .bind(now());
        self.store.rows(fail).await
    }
}

impl Jobs<'_> {
    /// Free the run locks `node`'s firings held before their tasks existed.
    pub async fn release_placeholders_of(self, node: &str) -> Result<u64> {
        // Node ids are UUIDs (hex and dashes): nothing in one is a LIKE wildcard.
        let release =
            query("UPDATE jobs SET running_task_id = NULL WHERE running_task_id LIKE ? || '%'")
                .bind(placeholder_prefix(Some(node)));
        self.store.rows(release).await
    }

    /// The runs `node` fired and was following, whose tasks still hold their jobs' locks.
    pub async fn open_runs_of(self, node: &str) -> Result<Vec<OpenRun>> {
        let sql = "SELECT r.id AS run_id, r.job_id, r.task_id, r.scheduled_at, r.node_epoch FROM job_runs r \
                   JOIN jobs j ON j.id = r.job_id AND j.running_task_id = r.task_id \
                   WHERE r.outcome = 'fired' AND r.node_id = ? ORDER BY r.id";
        self.store.all(query_as(sql).bind(node)).await
    }

    /// Move `run` from node `from` to this node under its current lease; false when someone
    /// moved it first (another node sweeping, or `from` itself restarting: both compare the
    /// same node and epoch, so exactly one follows the run), or `from` still holds the lease
    /// the run was followed under (it is alive).
    pub async fn take_run(self, run: &OpenRun, from: &str) -> Result<bool> {
        self.store.one_row(
            query(
                "UPDATE job_runs SET node_id = ?1, node_epoch = ?2 WHERE id = ?3 AND node_id = ?4 \
                 AND node_epoch IS NOT DISTINCT FROM ?5 \
                 AND NOT EXISTS (SELECT 1 FROM nodes WHERE id = ?4 AND epoch = job_runs.node_epoch)",
            )
            .bind(self.store.node())
            .bind(self.store.stamp())
            .bind(run.run_id)
            .bind(from)
            .bind(&run.node_epoch),
        )
        .await
    }
}

#[cfg(test)]
#[path = "nodes_tests.rs"]
mod tests;
