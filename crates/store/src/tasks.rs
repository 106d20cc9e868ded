//! Tasks and their trace (`tasks`, `task_steps`).

use super::aggregates::Tasks;
use super::sql::{Arg, Bind as _};
use super::steps::Step;
use super::{Builder, query, query_as};
use super::{
    FailReason, Origin, Result, Store, StoreError, TaskState, found, limit_or, new_id, now,
};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The columns a new task is inserted with, one statement for one task or for a burst, so
/// that both write the same row.
macro_rules! insert_tasks {
    () => {
        "INSERT INTO tasks (id, state, origin, parent_id, job_id, profile, task, created_at, started_at, node_id, \
         node_epoch, owner_pid, owner_start) "
    };
}

/// The longest task text accepted from any way in (API, CLI, a job), in characters: far more
/// than an instruction needs, far less than would crowd the model's context.
pub const MAX_TASK_CHARS: usize = 20_000;

/// A task as stored. `steps` are loaded separately ([`Tasks::steps`]).
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow)]
pub struct Task {
    pub id: String,
    pub state: TaskState,
    pub origin: Origin,
    pub parent_id: Option<String>,
    pub job_id: Option<String>,
    pub profile: String,
    pub task: String,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub reason: Option<FailReason>,
    pub parse_failures: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub created_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    /// Running, but waiting for a person's approval (directly, or through a sub-agent): no
    /// worker is held meanwhile.
    #[serde(default)]
    pub waiting: bool,
    /// The lease epoch of the node that claimed it (`lease.rs`); its steps and its end are
    /// written only while that node still holds it. Internal: never in an answer.
    #[serde(skip)]
    pub node_epoch: Option<String>,
}

/// What a new task needs; everything else starts empty.
#[derive(Debug, Clone, Default)]
pub struct NewTask {
    pub task: String,
    pub origin: Origin,
    pub profile: String,
    pub parent_id: Option<String>,
    pub job_id: Option<String>,
    /// Create it already `running`, owned by the creating process: no worker may take it.
    pub claimed: bool,
}

/// How a task ended.
#[derive(Debug, Clone)]
pub struct TaskOutcome {
    pub state: TaskState,
    pub answer: Option<String>,
    pub error: Option<String>,
    pub reason: Option<FailReason>,
    pub parse_failures: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
}

impl TaskOutcome {
    /// Succeeded with `answer`; nothing counted yet (see [`TaskOutcome::counted`]).
    pub fn answered(answer: impl Into<String>) -> TaskOutcome {
        TaskOutcome {
            state: TaskState::Succeeded,
            answer: Some(answer.into()),
            ..TaskOutcome::uncounted(TaskState::Succeeded)
        }
    }

    /// Ended without an answer (failed, cancelled): `error` says why in words, `reason` as a
    /// kind; nothing counted yet.
    pub fn ended(state: TaskState, error: impl Into<String>, reason: FailReason) -> TaskOutcome {
        TaskOutcome {
            error: Some(error.into()),
            reason: Some(reason),
            ..TaskOutcome::uncounted(state)
        }
    }

    /// The same end, with what the task spent.
    pub fn counted(self, parse_failures: i64, prompt_tokens: i64, completion_tokens: i64) -> Self {
        TaskOutcome {
            parse_failures,
            prompt_tokens,
            completion_tokens,
            ..self
        }
    }

    fn uncounted(state: TaskState) -> TaskOutcome {
        TaskOutcome {
            state,
            answer: None,
            error: None,
            reason: None,
            parse_failures: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
        }
    }
}

/// Filters for [`Tasks::list`].
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub state: Option<TaskState>,
    pub job_id: Option<String>,
    pub limit: i64,
}

impl Store {
    /// The values of [`insert_tasks!`] for a new task made at `at`; a task claimed as it is
    /// made is running already, under this node's lease `epoch`, owned by this process.
    fn task_row(
        &self,
        id: &str,
        new: &NewTask,
        at: DateTime<Utc>,
        epoch: Option<&str>,
    ) -> [Arg; 13] {
        let (state, started) = if new.claimed {
            (TaskState::Running, Some(at))
        } else {
            (TaskState::Pending, None)
        };
        [
            id.arg(),
            state.arg(),
            new.origin.arg(),
            new.parent_id.arg(),
            new.job_id.arg(),
            new.profile.arg(),
            new.task.arg(),
            at.arg(),
            started.arg(),
            new.claimed.then(|| self.node()).flatten().arg(),
            new.claimed.then_some(epoch).flatten().arg(),
            new.claimed.then(|| i64::from(std::process::id())).arg(),
            new.claimed
                .then(|| crate::util::process_started(std::process::id()))
                .flatten()
                .arg(),
        ]
    }

    /// Tasks waiting for a worker, for `/healthz`: read from the `tasks_by_state` index, so
    /// it costs what the queue holds, not the history (a test checks the plan).
    pub(crate) async fn pending_count(&self) -> Result<i64> {
        self.count(PENDING_COUNT).await
    }
}

impl Tasks<'_> {
    pub async fn create(self, new: &NewTask) -> Result<Task> {
        let id = new_id();
        // The lease epoch is read only for a task claimed as it is made: most are not.
        let epoch = if new.claimed {
            self.store.stamp()
        } else {
            None
        };
        // The row comes back from the insert itself: one round trip, not an insert and a read.
        let mut insert = query_as(concat!(
            insert_tasks!(),
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING ",
            columns!(tasks)
        ));
        for value in self.store.task_row(&id, new, now(), epoch.as_deref()) {
            insert = insert.bind_arg(value);
        }
        self.store.inserted(insert).await
    }

    /// Several new tasks in one statement (a burst of job firings); the rows as stored, in the
    /// order given.
    pub async fn create_many(self, new: &[NewTask]) -> Result<Vec<Task>> {
        let mut created = Vec::with_capacity(new.len());
        // 13 bound values a row, well under SQLite's 32,766-variable limit.
        let epoch = self.store.stamp();
        for chunk in new.chunks(500) {
            let at = now();
            let mut insert = Builder::new(insert_tasks!());
            let ids: Vec<String> = chunk.iter().map(|_| new_id()).collect();
            insert.push_values(chunk.iter().zip(&ids), |b, (n, id)| {
                for value in self.store.task_row(id, n, at, epoch.as_deref()) {
                    b.push_arg(value);
                }
            });
            insert.push(concat!(" RETURNING ", columns!(tasks)));
            // Sized by the burst, so not kept in the statement cache (see `claim_burst`).
            let mut rows: Vec<Task> = self
                .store
                .returning(insert.build_query_as().persistent(false))
                .await?;
            // RETURNING promises no order: put the rows back in the caller's.
            let order: std::collections::HashMap<&str, usize> = ids
                .iter()
                .enumerate()
                .map(|(i, id)| (id.as_str(), i))
                .collect();
            rows.sort_by_key(|t| order.get(t.id.as_str()).copied());
            created.extend(rows);
        }
        Ok(created)
    }

    pub async fn get(self, id: &str) -> Result<Task> {
        found(self.find(id).await?, "task", id)
    }

    /// A task by its full id, or by a prefix that matches exactly one task (typing 6 of 16
    /// hex characters in a terminal is enough).
    pub async fn find(self, id: &str) -> Result<Option<Task>> {
        let exact = query_as(select!(tasks, "WHERE id = ?")).bind(id);
        if let Some(t) = self.store.first(exact).await? {
            return Ok(Some(t));
        }
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let sql = select!(tasks, "WHERE id LIKE ? || '%' LIMIT 2");
        let mut rows = self.store.all(query_as(sql).bind(id)).await?;
        match rows.len() {
            1 => Ok(rows.pop()),
            0 => Ok(None),
            _ => Err(StoreError::Conflict(format!(
                "task id prefix '{id}' matches several tasks; type more of the id"
            ))),
        }
    }

    /// Newest first.
    pub async fn list(self, filter: &TaskFilter) -> Result<Vec<Task>> {
        let sql = select!(
            tasks,
            "WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR job_id = ?2) \
             ORDER BY created_at DESC, id LIMIT ?3"
        );
        self.store
            .all(
                query_as(sql)
                    .bind(filter.state)
                    .bind(&filter.job_id)
                    .bind(limit_or(filter.limit, 50)),
            )
            .await
    }

    /// Oldest pending tasks first: the order workers take them in.
    pub async fn pending(self, limit: i64) -> Result<Vec<Task>> {
        let sql = select!(
            tasks,
            "WHERE state = 'pending' ORDER BY created_at, id LIMIT ?"
        );
        self.store.all(query_as(sql).bind(limit)).await
    }

    /// Take the oldest pending task and mark it running, in one statement: workers never race
    /// each other for the same row, and no read-then-claim window exists. On PostgreSQL claimers
    /// run truly at once: each skips the rows another is claiming (`SKIP LOCKED`) instead of
    /// picking the same one and coming back empty while tasks are pending.
    pub async fn claim_next_pending(self) -> Result<Option<Task>> {
        // Claimed only under a lease the node's row still holds (`lease.rs`): a node taken
        // for dead that does not know it yet takes nothing.
        let sql = concat!(
            "UPDATE tasks SET state = 'running', started_at = ?1, node_id = ?2, node_epoch = ?3 WHERE id = \
             (SELECT id FROM tasks WHERE state = 'pending' ORDER BY created_at, id LIMIT 1) \
             AND state = 'pending' \
             AND (?3 IS NULL OR EXISTS (SELECT 1 FROM nodes WHERE id = ?2 AND epoch = ?3)) RETURNING ",
            columns!(tasks)
        );
        let pg = concat!(
            "UPDATE tasks SET state = 'running', started_at = $1, node_id = $2, node_epoch = $3 WHERE id = \
             (SELECT id FROM tasks WHERE state = 'pending' ORDER BY created_at, id LIMIT 1 \
             FOR UPDATE SKIP LOCKED) AND state = 'pending' \
             AND ($3::text IS NULL OR EXISTS (SELECT 1 FROM nodes WHERE id = $2 AND epoch = $3 FOR SHARE)) \
             RETURNING ",
            columns!(tasks)
        );
        let epoch = self.store.stamp();
        self.store
            .returning_one(
                query_as(sql)
                    .pg(pg)
                    .bind(now())
                    .bind(self.store.node())
                    .bind(epoch),
            )
            .await
    }

    /// pending → running. Returns false when the task was not pending (taken or cancelled).
    pub async fn start(self, id: &str) -> Result<bool> {
        Ok(self.start_row(id).await?.is_some())
    }

    /// [`Tasks::start`], returning the started row; `None` when it was not pending.
    pub async fn start_row(self, id: &str) -> Result<Option<Task>> {
        let start = query_as(concat!(
            "UPDATE tasks SET state = 'running', started_at = ?1, node_id = ?2, node_epoch = ?3 \
             WHERE id = ?4 AND state = 'pending' \
             AND (?3 IS NULL OR EXISTS (SELECT 1 FROM nodes WHERE id = ?2 AND epoch = ?3)) RETURNING ",
            columns!(tasks)
        ))
        .bind(now())
        .bind(self.store.node())
        .bind(self.store.stamp())
        .bind(id);
        self.store.returning_one(start).await
    }

    /// running|pending → a final state. A task already finished keeps its first outcome
    /// (a cancel racing a success must not overwrite it); returns whether this call won.
    pub async fn finish(self, id: &str, outcome: &TaskOutcome) -> Result<bool> {
        Ok(self.finish_row(id, outcome).await?.is_some())
    }

    /// [`Tasks::finish`], returning the finished row when this call won: one round trip
    /// for the runner, which reports the row it ended.
    pub async fn finish_row(self, id: &str, outcome: &TaskOutcome) -> Result<Option<Task>> {
        let finish = query_as(concat!(
            "UPDATE tasks SET state = ?, answer = ?, error = ?, reason = ?, parse_failures = ?, \
             prompt_tokens = ?, completion_tokens = ?, finished_at = ?, waiting = FALSE \
             WHERE id = ? AND state IN ('pending', 'running') AND ",
            fenced!(),
            " RETURNING ",
            columns!(tasks)
        ))
        .pg(concat!(
            "UPDATE tasks SET state = $1, answer = $2, error = $3, reason = $4, parse_failures = $5, \
             prompt_tokens = $6, completion_tokens = $7, finished_at = $8, waiting = FALSE \
             WHERE id = $9 AND state IN ('pending', 'running') AND ",
            fenced!(pg),
            " RETURNING ",
            columns!(tasks)
        ))
        .bind(outcome.state)
        .bind(&outcome.answer)
        .bind(&outcome.error)
        .bind(outcome.reason)
        .bind(outcome.parse_failures)
        .bind(outcome.prompt_tokens)
        .bind(outcome.completion_tokens)
        .bind(now())
        .bind(id);
        self.store.returning_one(finish).await
    }

    /// pending → cancelled; false when the task is no longer pending (it started somewhere).
    pub async fn cancel_pending(self, id: &str, error: &str) -> Result<bool> {
        let cancel = query(
            "UPDATE tasks SET state = 'cancelled', reason = 'cancelled', error = ?, finished_at = ? \
             WHERE id = ? AND state = 'pending'",
        )
        .bind(error)
        .bind(now())
        .bind(id);
        self.store.one_row(cancel).await
    }

    /// Fail the pending tasks of one origin that no job's open run holds (at daemon start: job
    /// tasks queued by a previous daemon whose firing is over, so their answer would have
    /// nowhere to go; a run still open is followed to its end by the scheduler instead).
    pub async fn fail_pending_of_origin(self, origin: Origin, reason: FailReason) -> Result<u64> {
        let fail = query(
            "UPDATE tasks SET state = 'failed', reason = ?, \
             error = 'task was pending when the daemon stopped (' || ? || ')', finished_at = ? \
             WHERE state = 'pending' AND origin = ? \
             AND NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.running_task_id = tasks.id)",
        )
        .bind(reason)
        .bind(reason.as_str())
        .bind(now())
        .bind(origin);
        self.store.rows(fail).await
    }

    /// Mark every task still in one of `states` as failed with `reason`, except those waiting
    /// for a person (they continue from their checkpoint once answered) and those claimed by a
    /// process in `spare` ([`Tasks::live_owners`]: a `run` still running its task). Used at
    /// start-up (`interrupted`: the previous process died).
    pub async fn fail_unfinished(
        self,
        states: &[TaskState],
        reason: FailReason,
        spare: &[i64],
    ) -> Result<u64> {
        let mut total = 0;
        for state in states {
            let mut fail = Builder::new("UPDATE tasks SET state = 'failed', reason = ");
            fail.push_bind(reason)
                .push(", error = COALESCE(error, ")
                .push_bind(format!(
                    "task was {state} when the daemon stopped ({reason})"
                ))
                .push("), finished_at = ")
                .push_bind(now())
                .push(" WHERE state = ")
                .push_bind(*state)
                .push(" AND waiting = FALSE");
            sparing(&mut fail, spare);
            total += self.store.rows(fail.build()).await?;
        }
        Ok(total)
    }

    /// End the running tasks of this node whose own process (a `run`, `mcp` or `eval` on this
    /// machine, [`Tasks::live_owners`]) is gone without finishing them: killed, nobody else
    /// would. How many.
    pub async fn fail_abandoned(self, reason: FailReason) -> Result<u64> {
        let Some(node) = self.store.node() else {
            return Ok(0);
        };
        let owned: Vec<(String, i64, Option<i64>)> = self
            .store
            .all(
                query_as(
                    "SELECT id, owner_pid, owner_start FROM tasks WHERE state = 'running' \
                     AND waiting = FALSE AND owner_pid IS NOT NULL AND node_id = ?",
                )
                .bind(node),
            )
            .await?;
        let me = i64::from(std::process::id());
        let mut ended = 0;
        for (id, pid, started) in owned {
            if pid == me || crate::util::owner_alive(pid, started) {
                continue;
            }
            let fail = query(
                "UPDATE tasks SET state = 'failed', reason = ?, error = COALESCE(error, ?), \
                 finished_at = ? WHERE id = ? AND state = 'running' AND waiting = FALSE \
                 AND owner_pid = ?",
            )
            .bind(reason)
            .bind(format!(
                "the process running this task (pid {pid}) ended before it finished ({reason})"
            ))
            .bind(now())
            .bind(&id)
            .bind(pid);
            ended += self.store.rows(fail).await?;
        }
        Ok(ended)
    }

    /// The processes of this machine running tasks they claimed as they made them (`run`,
    /// `mcp` and `eval` on the data dir), still alive and not this one: their tasks are theirs
    /// to finish, not a dead process's to end.
    pub async fn live_owners(self) -> Result<Vec<i64>> {
        let owners: Vec<(i64, Option<i64>)> = self
            .store
            .all(query_as(
                "SELECT DISTINCT owner_pid, owner_start FROM tasks WHERE state = 'running' \
                 AND owner_pid IS NOT NULL",
            ))
            .await?;
        let me = i64::from(std::process::id());
        Ok(owners
            .into_iter()
            .filter(|&(pid, started)| pid != me && crate::util::owner_alive(pid, started))
            .map(|(pid, _)| pid)
            .collect())
    }

    /// Count of tasks per state, for `doctor` (a scan of every task: not for `/healthz`).
    pub async fn counts(self) -> Result<Vec<(TaskState, i64)>> {
        self.store
            .all(query_as("SELECT state, COUNT(*) FROM tasks GROUP BY state"))
            .await
    }

    /// Count of tasks per state and origin, for `/metrics`.
    pub async fn counts_by_origin(self) -> Result<Vec<(TaskState, Origin, i64)>> {
        self.store
            .all(query_as(
                "SELECT state, origin, COUNT(*) FROM tasks GROUP BY state, origin",
            ))
            .await
    }

    /// The sub-tasks of `parent` that wait for a person.
    pub async fn waiting_children(self, parent: &str) -> Result<Vec<String>> {
        let rows: Vec<(String,)> = self
            .store
            .all(
                query_as("SELECT id FROM tasks WHERE parent_id = ? AND waiting = TRUE")
                    .bind(parent),
            )
            .await?;
        Ok(rows.into_iter().map(|(id,)| id).collect())
    }
}

/// The pending count's statement, one place for the store and the test of its plan.
pub(crate) const PENDING_COUNT: &str = "SELECT COUNT(*) FROM tasks WHERE state = 'pending'";

/// A task with its trace and the delivery state of the notices it queued: the shape of
/// `GET /v1/tasks/{id}` and `tasks show --json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TaskRecord {
    #[serde(flatten)]
    pub task: Task,
    pub steps: Vec<Step>,
    #[serde(default)]
    pub notices: Vec<super::Notice>,
}

impl Tasks<'_> {
    pub async fn record(self, id: &str) -> Result<Option<TaskRecord>> {
        let Some(task) = self.find(id).await? else {
            return Ok(None);
        };
        let steps = self.steps(&task.id).await?;
        let notices = self.store.outbox().for_task(&task.id).await?;
        Ok(Some(TaskRecord {
            task,
            steps,
            notices,
        }))
    }
}

/// ` AND (owner_pid IS NULL OR owner_pid NOT IN (…))`: leave the tasks of the processes in
/// `spare` alone.
pub(crate) fn sparing(statement: &mut Builder, spare: &[i64]) {
    if spare.is_empty() {
        return;
    }
    statement.push(" AND (owner_pid IS NULL OR owner_pid NOT IN (");
    for (i, pid) in spare.iter().enumerate() {
        if i > 0 {
            statement.push(", ");
        }
        statement.push_bind(*pid);
    }
    statement.push("))");
}
