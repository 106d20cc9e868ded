//! The daemons that share this database ("nodes"): each one's heartbeat, and what a node found
//! silent leaves behind — the tasks it was running, the run locks its firings held as
//! placeholders, the job runs it was following — for the others to end or take over.
//!
//! Every take-over is one conditional statement (`… WHERE node_id = <the silent node>`), so two
//! nodes sweeping at once cannot both take the same run, and a sweep run twice changes nothing.
//! Must not: decide when a node is silent (the daemon's keeper passes the cut-off), or follow a
//! run itself (the scheduler does).

use super::{FailReason, Result, Store, StoreError, now, query, query_as};
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
}

/// The prefix of the run lock a firing holds before its task exists, naming its node: the
/// placeholders of a silent node can be released without touching anyone else's.
pub(crate) fn placeholder_prefix(node: Option<&str>) -> String {
    format!("firing:{}:", node.unwrap_or("-"))
}

impl Store {
    /// This store as used by node `id`: the tasks it claims and the job runs it fires are
    /// recorded as its own.
    pub fn with_node(mut self, id: &str) -> Store {
        self.node = Some(Arc::from(id));
        self
    }

    /// The node this store works for, if it was given one.
    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// This store on a connection of its own, not shared with the pool: a heartbeat written
    /// through it never waits behind a burst of work holding every pooled connection (and a
    /// node so busy must not look dead). SQLite: the same store.
    pub(crate) fn on_own_connection(&self) -> Store {
        let super::Engine::Postgres(pool) = &self.engine else {
            return self.clone();
        };
        let options = (*pool.connect_options()).clone();
        let own = sqlx::postgres::PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(std::time::Duration::from_secs(5))
            .connect_lazy_with(options);
        Store {
            engine: super::Engine::Postgres(own),
            ..self.clone()
        }
    }

    /// Say this node is up. Refused when the same node id beat within `lease` from another
    /// host or process: two daemons started from one data dir (copied to a second machine).
    pub(crate) async fn join_cluster(
        &self,
        host: &str,
        pid: u32,
        api: Option<&str>,
        lease: chrono::Duration,
    ) -> Result<()> {
        let id = self.node().unwrap_or_default();
        let at = now();
        let mut tx = self.begin().await?;
        let other: Option<(String, i64, DateTime<Utc>)> =
            query_as("SELECT host, pid, seen_at FROM nodes WHERE id = ?")
                .bind(id)
                .fetch_optional(&mut tx)
                .await?;
        if let Some((other_host, other_pid, seen)) = other
            && seen > at - lease
            && (other_host != host || other_pid != i64::from(pid))
        {
            return Err(StoreError::NodeInUse {
                node: id.to_string(),
                holder: format!("{other_host} pid {other_pid}"),
                seconds: (at - seen).num_seconds(),
            });
        }
        query(
            "INSERT INTO nodes (id, host, pid, api, started_at, seen_at) VALUES (?1, ?2, ?3, ?4, ?5, ?5) \
             ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, \
             api = excluded.api, started_at = excluded.started_at, seen_at = excluded.seen_at",
        )
        .bind(id)
        .bind(host)
        .bind(i64::from(pid))
        .bind(api)
        .bind(at)
        .execute(&mut tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// This node's heartbeat. False when its row is gone: the others took it for dead (it
    /// was silent past the lease) and ended what it was running.
    pub(crate) async fn beat(&self) -> Result<bool> {
        let beat = query("UPDATE nodes SET seen_at = ? WHERE id = ?")
            .bind(now())
            .bind(self.node().unwrap_or_default());
        self.one_row(beat).await
    }

    /// A graceful stop: the others need not wait out the lease to take over what this node
    /// leaves (a firing still waiting for a person).
    pub(crate) async fn leave_cluster(&self) -> Result<()> {
        let leave = query("UPDATE nodes SET seen_at = ? WHERE id = ?")
            .bind(DateTime::<Utc>::UNIX_EPOCH)
            .bind(self.node().unwrap_or_default());
        self.run(leave).await
    }

    /// Every node, most recently seen first.
    pub async fn nodes(&self) -> Result<Vec<Node>> {
        let sql =
            "SELECT id, host, pid, api, started_at, seen_at FROM nodes ORDER BY seen_at DESC, id";
        self.all(query_as(sql)).await
    }

    /// Nodes other than this one not seen since `before`.
    pub(crate) async fn silent_nodes(&self, before: DateTime<Utc>) -> Result<Vec<String>> {
        let silent: Vec<(String,)> = self
            .all(
                query_as("SELECT id FROM nodes WHERE seen_at < ? AND id <> ? ORDER BY id")
                    .bind(before)
                    .bind(self.node().unwrap_or_default()),
            )
            .await?;
        Ok(silent.into_iter().map(|(id,)| id).collect())
    }

    /// Drop a silent node's row once what it left was taken over; false when it beat again
    /// meanwhile (it was only slow, and keeps its row).
    pub(crate) async fn forget_node(&self, id: &str, before: DateTime<Utc>) -> Result<bool> {
        self.one_row(
            query("DELETE FROM nodes WHERE id = ? AND seen_at < ?")
                .bind(id)
                .bind(before),
        )
        .await
    }

    /// End the tasks `node` was running (not those waiting for a person: any node continues
    /// them once answered).
    pub(crate) async fn fail_running_on(&self, node: &str, reason: FailReason) -> Result<u64> {
        let fail = query(
            "UPDATE tasks SET state = 'failed', reason = ?, error = COALESCE(error, ?), \
             finished_at = ? WHERE state = 'running' AND waiting = FALSE AND node_id = ?",
        )
        .bind(reason)
        .bind(format!(
            "task was running on node {node}, which stopped ({reason})"
        ))
        .bind(now())
        .bind(node);
        self.rows(fail).await
    }

    /// Free the run locks `node`'s firings held before their tasks existed.
    pub(crate) async fn release_placeholders_of(&self, node: &str) -> Result<u64> {
        // Node ids are UUIDs (hex and dashes): nothing in one is a LIKE wildcard.
        let release =
            query("UPDATE jobs SET running_task_id = NULL WHERE running_task_id LIKE ? || '%'")
                .bind(placeholder_prefix(Some(node)));
        self.rows(release).await
    }

    /// The runs `node` fired and was following, whose tasks still hold their jobs' locks.
    pub(crate) async fn open_runs_of(&self, node: &str) -> Result<Vec<OpenRun>> {
        let sql = "SELECT r.id AS run_id, r.job_id, r.task_id, r.scheduled_at FROM job_runs r \
                   JOIN jobs j ON j.id = r.job_id AND j.running_task_id = r.task_id \
                   WHERE r.outcome = 'fired' AND r.node_id = ? ORDER BY r.id";
        self.all(query_as(sql).bind(node)).await
    }

    /// Move run `run_id` from node `from`, silent since `since`, to this node; false when
    /// another node took it first, or `from` beat again meanwhile.
    pub(crate) async fn take_run(
        &self,
        run_id: i64,
        from: &str,
        since: DateTime<Utc>,
    ) -> Result<bool> {
        self.one_row(
            query(
                "UPDATE job_runs SET node_id = ?1 WHERE id = ?2 AND node_id = ?3 \
                 AND NOT EXISTS (SELECT 1 FROM nodes WHERE id = ?3 AND seen_at >= ?4)",
            )
            .bind(self.node())
            .bind(run_id)
            .bind(from)
            .bind(since),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NewJob, NewTask, Origin, RunOutcome, TaskState};
    use chrono::Duration;

    const LEASE: Duration = Duration::seconds(30);

    async fn claimed_task(node: &Store) -> String {
        let new = NewTask {
            task: "t".into(),
            origin: Origin::Api,
            profile: "fast".into(),
            ..Default::default()
        };
        let t = node.create_task(&new).await.unwrap();
        assert_eq!(node.start_task_row(&t.id).await.unwrap().unwrap().id, t.id);
        t.id
    }

    async fn job(store: &Store, name: &str) -> String {
        let new = NewJob {
            name: name.into(),
            task: "say hello".into(),
            schedule: "0 8 * * *".into(),
            timezone: "UTC".into(),
            notify: vec![],
            profile: None,
            origin: Origin::Cli,
            precheck: None,
            next_run_at: None,
            pre_approved: vec![],
        };
        store.create_job(&new).await.unwrap().id
    }

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_silent_node_leaves_its_tasks_locks_and_runs_to_the_others(store: Store) {
            let a = store.clone().with_node("node-a");
            let b = store.clone().with_node("node-b");
            a.join_cluster("host-a", 1, Some("127.0.0.1:1"), LEASE)
                .await
                .unwrap();
            b.join_cluster("host-b", 2, None, LEASE).await.unwrap();
            assert_eq!(store.nodes().await.unwrap().len(), 2);
            // The same node id from another process, while it beats: refused.
            let copy = a.join_cluster("host-c", 3, None, LEASE).await.unwrap_err();
            assert!(matches!(copy, StoreError::NodeInUse { .. }), "{copy}");

            let on_a = claimed_task(&a).await;
            let on_b = claimed_task(&b).await;
            let waiting = job(&store, "placeholder").await;
            assert!(
                a.lock_job(&waiting, &format!("{}x", placeholder_prefix(a.node())))
                    .await
                    .unwrap()
            );
            let of_b = job(&store, "b's placeholder").await;
            assert!(
                b.lock_job(&of_b, &format!("{}y", placeholder_prefix(b.node())))
                    .await
                    .unwrap()
            );
            let followed = job(&store, "followed").await;
            let job_task = claimed_task(&a).await;
            assert!(a.lock_job(&followed, &job_task).await.unwrap());
            let run = a
                .add_job_run(&followed, now(), RunOutcome::Fired, Some(&job_task), None)
                .await
                .unwrap();

            // Seen from b, a minute on: a is silent, b is not among the silent.
            let since = now() + Duration::minutes(1);
            assert_eq!(
                b.silent_nodes(since).await.unwrap(),
                vec!["node-a".to_string()]
            );
            assert_eq!(
                b.fail_running_on("node-a", FailReason::Interrupted)
                    .await
                    .unwrap(),
                2
            );
            let t = store.task(&on_a).await.unwrap();
            assert_eq!(
                (t.state, t.reason),
                (TaskState::Failed, Some(FailReason::Interrupted))
            );
            assert_eq!(store.task(&on_b).await.unwrap().state, TaskState::Running);
            assert_eq!(b.release_placeholders_of("node-a").await.unwrap(), 1);
            assert_eq!(store.job(&waiting).await.unwrap().running_task_id, None);
            assert!(store.job(&of_b).await.unwrap().running_task_id.is_some());

            let open = b.open_runs_of("node-a").await.unwrap();
            assert_eq!(open.len(), 1);
            assert_eq!(
                (open[0].run_id, open[0].task_id.as_str()),
                (run, job_task.as_str())
            );
            assert!(b.take_run(run, "node-a", since).await.unwrap());
            assert!(
                !b.take_run(run, "node-a", since).await.unwrap(),
                "taken once"
            );
            assert_eq!(b.open_runs_of("node-b").await.unwrap().len(), 1);
            assert!(b.forget_node("node-a", since).await.unwrap());
            // a's next beat finds its row gone: it was taken for dead.
            assert!(!a.beat().await.unwrap());
            assert!(b.beat().await.unwrap());
        }
    );

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_node_that_beat_keeps_its_runs_one_that_left_is_silent(store: Store) {
            let a = store.clone().with_node("node-a");
            let b = store.clone().with_node("node-b");
            a.join_cluster("host-a", 1, None, LEASE).await.unwrap();
            b.join_cluster("host-b", 2, None, LEASE).await.unwrap();
            let followed = job(&store, "followed").await;
            let job_task = claimed_task(&a).await;
            assert!(a.lock_job(&followed, &job_task).await.unwrap());
            let run = a
                .add_job_run(&followed, now(), RunOutcome::Fired, Some(&job_task), None)
                .await
                .unwrap();
            // Taken for silent since a moment ago, but a beat since: it keeps its run.
            let since = now() - Duration::seconds(1);
            assert!(a.beat().await.unwrap());
            assert!(!b.take_run(run, "node-a", since).await.unwrap());
            assert!(!b.forget_node("node-a", since).await.unwrap());
            // A graceful stop: silent for anyone at once.
            a.leave_cluster().await.unwrap();
            assert_eq!(
                b.silent_nodes(now() - LEASE).await.unwrap(),
                vec!["node-a".to_string()]
            );
            assert!(b.take_run(run, "node-a", now() - LEASE).await.unwrap());
        }
    );
}
