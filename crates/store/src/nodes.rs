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
mod tests {
    use super::*;
    use crate::testing::LEASE;
    use crate::{NewJob, NewTask, Origin, RunOutcome, TaskState};
    use chrono::Duration;

    async fn claimed_task(node: &Store) -> String {
        let new = NewTask {
            task: "t".into(),
            origin: Origin::Api,
            profile: "fast".into(),
            ..Default::default()
        };
        let t = node.tasks().create(&new).await.unwrap();
        assert_eq!(
            node.tasks().start_row(&t.id).await.unwrap().unwrap().id,
            t.id
        );
        t.id
    }

    async fn job(store: &Store, name: &str) -> String {
        let new = NewJob {
            name: name.into(),
            task: "say hello".into(),
            schedule: "0 8 * * *".into(),
            timezone: "UTC".into(),
            ..NewJob::default()
        };
        store.jobs().create(&new).await.unwrap().id
    }

    /// A job whose run a fired and follows: its run id.
    async fn followed_by(a: &Store, store: &Store) -> i64 {
        let followed = job(store, "followed").await;
        let job_task = claimed_task(a).await;
        assert!(a.jobs().lock(&followed, &job_task).await.unwrap());
        a.jobs()
            .add_run(&followed, now(), RunOutcome::Fired, Some(&job_task), None)
            .await
            .unwrap()
    }

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_node_restarted_after_a_crash_rejoins_but_a_live_copy_is_refused(store: Store) {
            let a = store.clone().with_node("node-a");
            // A pid no process has: the run before this one, killed (systemd restarts it
            // within a second, well inside the lease).
            let dead = dead_pid();
            a.nodes().join("host-a", dead, None, LEASE).await.unwrap();
            a.nodes()
                .join("host-a", std::process::id(), None, LEASE)
                .await
                .unwrap();
            // The same node id in a live process on this host (a data dir copied beside the
            // first) is still refused, as on another host.
            let copy = a.nodes().join("host-a", 1, None, LEASE).await.unwrap_err();
            assert!(matches!(copy, StoreError::NodeInUse { .. }), "{copy}");
        }
    );

    /// A pid that names no process now.
    fn dead_pid() -> u32 {
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        pid
    }

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_silent_node_leaves_its_tasks_locks_and_runs_to_the_others(store: Store) {
            let a = store.clone().with_node("node-a");
            let b = store.clone().with_node("node-b");
            a.nodes()
                .join("host-a", 1, Some("127.0.0.1:1"), LEASE)
                .await
                .unwrap();
            b.nodes().join("host-b", 2, None, LEASE).await.unwrap();
            assert_eq!(store.nodes().list().await.unwrap().len(), 2);
            // The same node id from another process, while it beats: refused.
            let copy = a.nodes().join("host-c", 3, None, LEASE).await.unwrap_err();
            assert!(matches!(copy, StoreError::NodeInUse { .. }), "{copy}");

            let on_a = claimed_task(&a).await;
            let on_b = claimed_task(&b).await;
            let waiting = job(&store, "placeholder").await;
            assert!(
                a.jobs()
                    .lock(&waiting, &format!("{}x", placeholder_prefix(a.node())))
                    .await
                    .unwrap()
            );
            let of_b = job(&store, "b's placeholder").await;
            assert!(
                b.jobs()
                    .lock(&of_b, &format!("{}y", placeholder_prefix(b.node())))
                    .await
                    .unwrap()
            );
            let followed = job(&store, "followed").await;
            let job_task = claimed_task(&a).await;
            assert!(a.jobs().lock(&followed, &job_task).await.unwrap());
            let run = a
                .jobs()
                .add_run(&followed, now(), RunOutcome::Fired, Some(&job_task), None)
                .await
                .unwrap();

            // Seen from b, a minute on: a is silent, b is not among the silent.
            let since = now() + Duration::minutes(1);
            assert_eq!(
                b.nodes().silent(since).await.unwrap(),
                vec!["node-a".to_string()]
            );
            // Revoked first: from here on a's lease fences everything it still tries.
            assert!(b.nodes().revoke("node-a", since).await.unwrap());
            assert!(!b.nodes().revoke("node-a", since).await.unwrap(), "once");
            assert_eq!(
                b.tasks()
                    .fail_running_on("node-a", FailReason::Interrupted, &[])
                    .await
                    .unwrap(),
                2
            );
            let t = store.tasks().get(&on_a).await.unwrap();
            assert_eq!(
                (t.state, t.reason),
                (TaskState::Failed, Some(FailReason::Interrupted))
            );
            assert_eq!(
                store.tasks().get(&on_b).await.unwrap().state,
                TaskState::Running
            );
            assert_eq!(b.jobs().release_placeholders_of("node-a").await.unwrap(), 1);
            assert_eq!(
                store.jobs().get(&waiting).await.unwrap().running_task_id,
                None
            );
            assert!(
                store
                    .jobs()
                    .get(&of_b)
                    .await
                    .unwrap()
                    .running_task_id
                    .is_some()
            );

            let open = b.jobs().open_runs_of("node-a").await.unwrap();
            assert_eq!(open.len(), 1);
            assert_eq!(
                (open[0].run_id, open[0].task_id.as_str()),
                (run, job_task.as_str())
            );
            assert!(b.jobs().take_run(&open[0], "node-a").await.unwrap());
            assert!(
                !b.jobs().take_run(&open[0], "node-a").await.unwrap(),
                "taken once"
            );
            assert_eq!(b.jobs().open_runs_of("node-b").await.unwrap().len(), 1);
            // a's next beat finds its row gone: it was taken for dead, and knows it.
            let epoch = t.node_epoch.clone().expect("claimed under a lease");
            assert!(a.lease().holds(&epoch));
            assert!(!a.nodes().beat().await.unwrap());
            assert!(!a.lease().holds(&epoch));
            assert!(b.nodes().beat().await.unwrap());
        }
    );

    on_both_engines!(
        Memory,
        tokio::test,
        async fn nothing_is_written_or_claimed_under_a_lease_taken_over(store: Store) {
            let (a, b) = crate::testing::two_nodes(&store).await;
            let mine = claimed_task(&a).await;
            let task = store.tasks().get(&mine).await.unwrap();
            let epoch = task.node_epoch.clone().expect("claimed under a's lease");
            let row = |seq| crate::testing::note(1, "a note").into_step(seq, now());
            // Under its lease a's steps are taken.
            a.tasks()
                .add_steps(&mine, Some(&epoch), &[row(1)])
                .await
                .unwrap();
            // b declares a dead (a stopped process): a does not know yet.
            assert!(
                b.nodes()
                    .revoke("node-a", now() + Duration::minutes(1))
                    .await
                    .unwrap()
            );
            let refused = a.tasks().add_steps(&mine, Some(&epoch), &[row(2)]).await;
            assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
            let end = crate::TaskOutcome::answered("done twice");
            assert_eq!(
                a.tasks()
                    .finish_row(&mine, &end)
                    .await
                    .unwrap()
                    .map(|t| t.id),
                None
            );
            let hold = a.holds().hold(&mine, "{}", None).await;
            assert!(hold.is_err(), "held under a lost lease");
            // Nor is anything new claimed by it.
            let pending = crate::testing::new_task(&a, "queued", Origin::Api).await;
            assert!(a.tasks().claim_next_pending().await.unwrap().is_none());
            assert!(a.tasks().start_row(&pending.id).await.unwrap().is_none());
            assert_eq!(store.tasks().steps(&mine).await.unwrap().len(), 1);
            assert_eq!(
                store.tasks().get(&mine).await.unwrap().state,
                TaskState::Running
            );
            // The sweep ends it; a joins again under a new lease and its new work is its own,
            // while the old task stays fenced.
            assert_eq!(
                b.tasks()
                    .fail_orphaned(FailReason::Interrupted)
                    .await
                    .unwrap(),
                1
            );
            assert!(!a.nodes().beat().await.unwrap());
            a.nodes().join("host-a", 1, None, LEASE).await.unwrap();
            let again = a
                .tasks()
                .claim_next_pending()
                .await
                .unwrap()
                .expect("claimed again");
            assert_ne!(again.node_epoch.as_deref(), Some(epoch.as_str()));
            assert_eq!(
                b.tasks()
                    .fail_orphaned(FailReason::Interrupted)
                    .await
                    .unwrap(),
                0
            );
            let refused = a.tasks().add_steps(&mine, Some(&epoch), &[row(2)]).await;
            assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
            assert!(
                a.tasks()
                    .finish_row(&again.id, &end)
                    .await
                    .unwrap()
                    .is_some()
            );
        }
    );

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_restart_racing_a_take_over_follows_each_run_once(store: Store) {
            let (a, b) = crate::testing::two_nodes(&store).await;
            followed_by(&a, &store).await;
            let open = b.jobs().open_runs_of("node-a").await.unwrap();
            // a restarts (a new lease) while b, which read the run before, takes it over.
            let restarted = store.clone().with_node("node-a");
            restarted
                .nodes()
                .join("host-a", 1, None, LEASE)
                .await
                .unwrap();
            let own = restarted.jobs().open_runs_of("node-a").await.unwrap();
            let by_restart = restarted.jobs().take_run(&own[0], "node-a").await.unwrap();
            let by_b = b.jobs().take_run(&open[0], "node-a").await.unwrap();
            assert!(by_restart, "the restarted node follows its own run");
            assert!(!by_b, "and nobody else does");
        }
    );

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_node_that_beat_keeps_its_runs_one_that_left_is_silent(store: Store) {
            let (a, b) = crate::testing::two_nodes(&store).await;
            let run = followed_by(&a, &store).await;
            // Taken for silent since a moment ago, but a beat since: it keeps its run.
            let since = now() - Duration::seconds(1);
            assert!(a.nodes().beat().await.unwrap());
            let open = b.jobs().open_runs_of("node-a").await.unwrap();
            assert_eq!(open.first().map(|r| r.run_id), Some(run));
            assert!(!b.nodes().revoke("node-a", since).await.unwrap());
            assert!(
                !b.jobs().take_run(&open[0], "node-a").await.unwrap(),
                "a holds its lease"
            );
            // A graceful stop: silent for anyone at once.
            a.nodes().leave().await.unwrap();
            assert_eq!(
                b.nodes().silent(now() - LEASE).await.unwrap(),
                vec!["node-a".to_string()]
            );
            assert!(b.nodes().revoke("node-a", now() - LEASE).await.unwrap());
            assert!(b.jobs().take_run(&open[0], "node-a").await.unwrap());
        }
    );
}
