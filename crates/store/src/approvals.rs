//! Approval requests, the notices that asked about them, and held tasks' checkpoints
//! (`approvals`, `approval_notices`, `task_holds`).

use super::aggregates::{Approvals, Holds};
use super::{ApprovalState, Result, StoreError, limit_or, new_id, now};
use super::{query, query_as};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One held call and what became of it: the shape of `GET /v1/approvals`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, sqlx::FromRow)]
pub struct Approval {
    pub id: String,
    pub task_id: String,
    pub tool: String,
    /// The exact arguments that run once approved, as canonical JSON text.
    #[sqlx(skip)]
    pub arguments: serde_json::Value,
    pub state: ApprovalState,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    /// When the approved call ran (it runs once).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub used_at: Option<DateTime<Utc>>,
}

impl Approval {
    /// The request as a person meets it at `at`: one still open past its time is expired,
    /// whether or not the sweep has recorded that yet.
    pub fn as_of(self, at: DateTime<Utc>) -> Approval {
        if self.state == ApprovalState::Open && self.expires_at <= at {
            Approval {
                state: ApprovalState::Expired,
                ..self
            }
        } else {
            self
        }
    }
}

impl super::WithJson for Approval {
    fn read_json(self, row: &super::DbRow) -> Result<Approval> {
        let owner = format!("approval {}", self.id);
        Ok(Approval {
            arguments: super::json_column(row, "arguments", &owner)?,
            ..self
        })
    }
}

/// A held task's checkpoint as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Hold {
    pub task_id: String,
    /// JSON written and read by the agent; the store does not look inside.
    pub checkpoint: String,
    pub owner: Option<String>,
}

/// Which held tasks a runner may continue: the daemon's workers take those no process owns,
/// a `run` those of its own task.
#[derive(Debug, Clone, Copy)]
pub enum HoldOwner<'a> {
    Pool,
    Task(&'a str),
}

impl HoldOwner<'_> {
    fn as_option(&self) -> Option<&str> {
        match self {
            HoldOwner::Pool => None,
            HoldOwner::Task(id) => Some(id),
        }
    }
}

impl Approvals<'_> {
    /// A new open request for `tool` with `arguments` (canonical JSON text) in `task_id`.
    pub async fn create(
        self,
        task_id: &str,
        tool: &str,
        arguments: &str,
        expires_at: DateTime<Utc>,
    ) -> Result<Approval> {
        let id = format!("a_{}", new_id());
        let insert = query(concat!(
            "INSERT INTO approvals (id, task_id, tool, arguments, state, created_at, expires_at) \
             VALUES (?, ?, ?, ?, 'open', ?, ?) RETURNING ",
            columns!(approvals)
        ))
        .bind(&id)
        .bind(task_id)
        .bind(tool)
        .bind(arguments)
        .bind(now())
        .bind(expires_at);
        // All rows read, so the statement runs to its commit (see `write.rs`).
        let rows = insert.fetch_all(self.store).await?;
        let row = rows
            .first()
            .ok_or_else(|| StoreError::Corrupt("an inserted approval did not come back".into()))?;
        <Approval as super::WithJson>::from_json_row(row)
    }

    pub async fn get(self, id: &str) -> Result<Approval> {
        self.store
            .json_row(select!(approvals, "WHERE id = ?"), "approval", id)
            .await
    }

    /// Newest first; `state` `None`: all. Each in its state as of now ([`Approval::as_of`]):
    /// `open` leaves out, and `expired` includes, open requests past their time.
    pub async fn list(self, state: Option<ApprovalState>, limit: i64) -> Result<Vec<Approval>> {
        let at = now();
        let listed = query(select!(
            approvals,
            "WHERE (?1 IS NULL OR CASE WHEN state = 'open' AND expires_at <= ?3 THEN 'expired' \
             ELSE state END = ?1) ORDER BY created_at DESC, id LIMIT ?2"
        ))
        .bind(state)
        .bind(limit_or(limit, 100))
        .bind(at);
        let rows: Vec<Approval> = self.store.json_rows(listed).await?;
        Ok(rows.into_iter().map(|a| a.as_of(at)).collect())
    }

    /// The requests of one task, oldest first.
    pub async fn of_task(self, task_id: &str) -> Result<Vec<Approval>> {
        let q = query(select!(
            approvals,
            "WHERE task_id = ? ORDER BY created_at, id"
        ));
        self.store.json_rows(q.bind(task_id)).await
    }

    /// open → `state` (approved, denied or expired), once: `None` when it was no longer open
    /// (someone answered first). A request past its time at this moment becomes `expired`
    /// instead (reason `expired`, by `expiry`), in the same statement: no answer given after
    /// the expiry counts, whoever gives it and whether or not the sweep ran.
    pub async fn decide(
        self,
        id: &str,
        state: ApprovalState,
        reason: Option<&str>,
        decided_by: &str,
    ) -> Result<Option<Approval>> {
        let decide = query(concat!(
            "UPDATE approvals SET \
             state = CASE WHEN expires_at <= ?1 THEN 'expired' ELSE ?2 END, \
             reason = CASE WHEN expires_at <= ?1 THEN 'expired' ELSE ?3 END, \
             decided_at = ?1, \
             decided_by = CASE WHEN expires_at <= ?1 THEN 'expiry' ELSE ?4 END \
             WHERE id = ?5 AND state = 'open' RETURNING ",
            columns!(approvals)
        ))
        .bind(now())
        .bind(state)
        .bind(reason)
        .bind(decided_by)
        .bind(id);
        self.store.json_first(decide).await
    }

    /// Open requests whose time has passed → `expired` (reason `expired`); their ids.
    pub async fn expire(self, at: DateTime<Utc>) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = self
            .store
            .returning(
                query_as(
                    "UPDATE approvals SET state = 'expired', reason = 'expired', decided_at = ?1, \
                     decided_by = 'expiry' WHERE state = 'open' AND expires_at <= ?1 RETURNING id",
                )
                .bind(at),
            )
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// The open requests of `root` and of its sub-tasks (nested at most two deep), oldest
    /// first: what a `run` waits on.
    pub async fn open_under(self, root: &str) -> Result<Vec<Approval>> {
        let open = query(select!(
            approvals,
            "WHERE state = 'open' AND (task_id = ?1 \
             OR task_id IN (SELECT id FROM tasks WHERE parent_id = ?1) \
             OR task_id IN (SELECT id FROM tasks WHERE parent_id IN \
                            (SELECT id FROM tasks WHERE parent_id = ?1))) \
             ORDER BY created_at, id"
        ))
        .bind(root);
        self.store.json_rows(open).await
    }

    /// Mark an approved request as used by the one run it allows; false when it was used.
    pub async fn mark_used(self, id: &str) -> Result<bool> {
        self.store
            .one_row(
                query(
                    "UPDATE approvals SET used_at = ? WHERE id = ? AND state = 'approved' \
                 AND used_at IS NULL",
                )
                .bind(now())
                .bind(id),
            )
            .await
    }

    /// Remember that notice `notice_id` asked about `approval_id` (a reply to it answers it).
    pub async fn link_notice(self, approval_id: &str, notice_id: i64) -> Result<()> {
        self.store
            .run(
                query("INSERT INTO approval_notices (approval_id, notice_id) VALUES (?, ?)")
                    .bind(approval_id)
                    .bind(notice_id),
            )
            .await
    }

    /// The request a notice asked about, if it asked about one.
    pub async fn for_notice(self, notice_id: i64) -> Result<Option<Approval>> {
        let asked = query(concat!(
            "SELECT ",
            columns!(approvals),
            " FROM approvals WHERE id = (SELECT approval_id FROM approval_notices WHERE notice_id = ?)"
        ))
        .bind(notice_id);
        self.store.json_first(asked).await
    }
}

impl Holds<'_> {
    /// Keep a running task's checkpoint and mark it waiting, in one transaction.
    pub async fn hold(self, task_id: &str, checkpoint: &str, owner: Option<&str>) -> Result<()> {
        let mut tx = self.store.begin().await?;
        query(
            "INSERT INTO task_holds (task_id, checkpoint, owner, created_at, owner_seen_at) \
             VALUES (?1, ?2, ?3, ?4, ?4) \
             ON CONFLICT (task_id) DO UPDATE SET checkpoint = excluded.checkpoint, \
             owner = excluded.owner, created_at = excluded.created_at, \
             owner_seen_at = excluded.owner_seen_at",
        )
        .bind(task_id)
        .bind(checkpoint)
        .bind(owner)
        .bind(now())
        .execute(&mut tx)
        .await?;
        // Only under the lease the task was claimed under (`lease.rs`).
        let marked = query(concat!(
            "UPDATE tasks SET waiting = TRUE WHERE id = ? AND state = 'running' AND ",
            fenced!()
        ))
        .pg(concat!(
            "UPDATE tasks SET waiting = TRUE WHERE id = $1 AND state = 'running' AND ",
            fenced!(pg)
        ))
        .bind(task_id)
        .execute(&mut tx)
        .await?;
        if marked == 0 {
            // Ended meanwhile (cancelled): nothing to continue.
            tx.rollback().await?;
            return Err(StoreError::Conflict(format!(
                "task '{task_id}' is no longer running; it cannot wait"
            )));
        }
        tx.commit().await?;
        Ok(())
    }

    /// Take one held task of `owner` that can continue — none of its requests open, none of
    /// its sub-tasks unfinished — removing its hold: the caller runs it from the checkpoint.
    pub async fn take_ready(self, owner: HoldOwner<'_>) -> Result<Option<Hold>> {
        let mut tx = self.store.begin().await?;
        let hold: Vec<Hold> = query_as(
            "DELETE FROM task_holds WHERE task_id = (SELECT h.task_id FROM task_holds h \
             WHERE h.owner IS NOT DISTINCT FROM ?1 \
             AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.task_id = h.task_id AND a.state = 'open') \
             AND NOT EXISTS (SELECT 1 FROM tasks c WHERE c.parent_id = h.task_id \
                             AND c.state IN ('pending', 'running')) \
             ORDER BY h.created_at LIMIT 1) RETURNING task_id, checkpoint, owner",
        )
        // As a pending task's claim: takers at once skip the hold another is taking.
        .pg(
            "DELETE FROM task_holds WHERE task_id = (SELECT h.task_id FROM task_holds h \
             WHERE h.owner IS NOT DISTINCT FROM $1 \
             AND NOT EXISTS (SELECT 1 FROM approvals a WHERE a.task_id = h.task_id AND a.state = 'open') \
             AND NOT EXISTS (SELECT 1 FROM tasks c WHERE c.parent_id = h.task_id \
                             AND c.state IN ('pending', 'running')) \
             ORDER BY h.created_at LIMIT 1 FOR UPDATE OF h SKIP LOCKED) \
             RETURNING task_id, checkpoint, owner",
        )
        .bind(owner.as_option())
        .fetch_all(&mut tx)
        .await?;
        let hold = hold.into_iter().next();
        if let Some(h) = &hold {
            // Its taker runs it from here: the task is this node's now (see `nodes.rs`), and
            // this process's when a `run` takes its own (a daemon's worker owns none).
            let taker = owner.as_option().map(|_| std::process::id());
            query(
                "UPDATE tasks SET waiting = FALSE, node_id = ?, node_epoch = ?, owner_pid = ?, \
                 owner_start = ? WHERE id = ?",
            )
            .bind(self.store.node())
            .bind(self.store.stamp())
            .bind(taker.map(i64::from))
            .bind(taker.and_then(crate::util::process_started))
            .bind(&h.task_id)
            .execute(&mut tx)
            .await?;
        }
        tx.commit().await?;
        Ok(hold)
    }

    /// `owner` is alive: its holds are not to be taken over.
    pub async fn touch_owned(self, owner: &str) -> Result<u64> {
        self.store
            .rows(
                query("UPDATE task_holds SET owner_seen_at = ? WHERE owner = ?")
                    .bind(now())
                    .bind(owner),
            )
            .await
    }

    /// Hand the holds of owners silent since `before` to the daemon's workers; their task ids.
    pub async fn adopt_silent(self, before: DateTime<Utc>) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = self
            .store
            .returning(
                query_as(
                    "UPDATE task_holds SET owner = NULL, owner_seen_at = NULL \
                     WHERE owner IS NOT NULL AND (owner_seen_at IS NULL OR owner_seen_at < ?) \
                     RETURNING task_id",
                )
                .bind(before),
            )
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }

    /// Drop a task's hold (it was cancelled while waiting).
    pub async fn remove(self, task_id: &str) -> Result<()> {
        self.store
            .run(query("DELETE FROM task_holds WHERE task_id = ?").bind(task_id))
            .await
    }
}

#[cfg(test)]
mod tests {
    use crate::{Approval, ApprovalState, HoldOwner, Origin, now};

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_request_past_its_time_cannot_be_answered_and_is_listed_expired(store: Store) {
            let t = crate::testing::new_task(&store, "t", Origin::Cli).await;
            let past = now() - chrono::Duration::seconds(1);
            let late = store
                .approvals()
                .create(&t.id, "send", "{}", past)
                .await
                .unwrap();
            let later = now() + chrono::Duration::hours(1);
            let live = store
                .approvals()
                .create(&t.id, "send", "{}", later)
                .await
                .unwrap();
            // No sweeper has run: the row still says open, yet a person listing sees it expired.
            let ids = |list: Vec<Approval>| {
                list.into_iter()
                    .map(|a| (a.id, a.state))
                    .collect::<Vec<_>>()
            };
            let open = store
                .approvals()
                .list(Some(ApprovalState::Open), 10)
                .await
                .unwrap();
            assert_eq!(ids(open), vec![(live.id.clone(), ApprovalState::Open)]);
            let expired = store
                .approvals()
                .list(Some(ApprovalState::Expired), 10)
                .await
                .unwrap();
            assert_eq!(
                ids(expired),
                vec![(late.id.clone(), ApprovalState::Expired)]
            );
            let all = store.approvals().list(None, 10).await.unwrap();
            assert_eq!(all.len(), 2);
            assert!(all.iter().all(|a| a.state
                == if a.id == late.id {
                    ApprovalState::Expired
                } else {
                    ApprovalState::Open
                }));

            // Approving it records it expired, in the same statement, not approved.
            let done = store
                .approvals()
                .decide(&late.id, ApprovalState::Approved, None, "cli")
                .await
                .unwrap()
                .expect("still open in the table");
            assert_eq!(done.state, ApprovalState::Expired);
            assert_eq!(done.reason.as_deref(), Some("expired"));
            assert_eq!(done.decided_by.as_deref(), Some("expiry"));
            assert!(
                !store.approvals().mark_used(&late.id).await.unwrap(),
                "an expired request ran"
            );
            assert_eq!(
                store.approvals().get(&late.id).await.unwrap().state,
                ApprovalState::Expired
            );
            // Answered once: a second answer finds it no longer open.
            assert!(
                store
                    .approvals()
                    .decide(&late.id, ApprovalState::Approved, None, "cli")
                    .await
                    .unwrap()
                    .is_none()
            );
            // One within its time is answered as asked.
            let ok = store
                .approvals()
                .decide(&live.id, ApprovalState::Approved, None, "cli")
                .await
                .unwrap()
                .expect("open");
            assert_eq!(ok.state, ApprovalState::Approved);
        }
    );

    on_both_engines!(
        Memory,
        tokio::test,
        async fn only_the_holds_of_a_silent_owner_are_handed_to_the_workers(store: Store) {
            let mut held = Vec::new();
            for (task, owner) in [("alive", "run-a"), ("dead", "run-b"), ("pooled", "")] {
                let t = crate::testing::new_task(&store, task, Origin::Cli).await;
                assert!(store.tasks().start(&t.id).await.unwrap());
                let owner = (!owner.is_empty()).then_some(owner);
                store.holds().hold(&t.id, "{}", owner).await.unwrap();
                held.push(t.id);
            }
            let lease_start = now();
            // Only `run-a` beats after the lease starts.
            assert_eq!(store.holds().touch_owned("run-a").await.unwrap(), 1);
            let adopted = store.holds().adopt_silent(lease_start).await.unwrap();
            assert_eq!(adopted, vec![held[1].clone()]);
            // Adopted once: the workers take it, and the live run's hold is still its own.
            assert!(
                store
                    .holds()
                    .adopt_silent(lease_start)
                    .await
                    .unwrap()
                    .is_empty()
            );
            let mut pooled: Vec<String> = Vec::new();
            while let Some(h) = store.holds().take_ready(HoldOwner::Pool).await.unwrap() {
                assert_eq!(h.owner, None);
                pooled.push(h.task_id);
            }
            pooled.sort();
            let mut want = vec![held[1].clone(), held[2].clone()];
            want.sort();
            assert_eq!(pooled, want);
            let own = store
                .holds()
                .take_ready(HoldOwner::Task("run-a"))
                .await
                .unwrap()
                .expect("the live run's hold");
            assert_eq!(own.task_id, held[0]);
        }
    );
}
