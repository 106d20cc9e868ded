//! A task's trace (`task_steps`): one row per model call, tool call or note, appended a step
//! at a time by the task's runner (under its lease when it has one) and read back in order.

use super::aggregates::Tasks;
use super::{Builder, Result, StepKind, StoreError, now, query_as};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One row of a task's trace: what was appended, numbered and dated by the store. Serialised
/// flat (`{seq, step, kind, …, created_at}`), as the API has always shown it.
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow)]
pub struct Step {
    pub seq: i64,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub row: NewStep,
    pub created_at: DateTime<Utc>,
}

/// A trace row to append; `seq` and `created_at` are assigned by the store.
#[derive(Debug, Clone, Serialize, Deserialize, sqlx::FromRow)]
pub struct NewStep {
    pub step: i64,
    pub kind: StepKind,
    pub name: String,
    pub request_tokens: i64,
    pub result_tokens: i64,
    pub arguments: Option<String>,
    pub output: Option<String>,
    pub error: Option<String>,
    pub duration_ms: i64,
    /// A model row: the model id the server reported for the call (the profile that
    /// answered is `name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// A model row: the reply's `system_fingerprint`, when the server sent one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// A model row: the profile's identity as last checked (see `llm::Identity`), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub identity: Option<String>,
}

impl NewStep {
    /// A row with its place, kind and name and nothing else yet: no tokens, texts, time or
    /// model; whoever writes it fills in what it has.
    pub fn new(step: i64, kind: StepKind, name: &str) -> NewStep {
        NewStep {
            step,
            kind,
            name: name.to_string(),
            request_tokens: 0,
            result_tokens: 0,
            arguments: None,
            output: None,
            error: None,
            duration_ms: 0,
            model: None,
            fingerprint: None,
            identity: None,
        }
    }

    /// The row as stored, once the store gave it its `seq` and time.
    pub fn into_step(self, seq: i64, created_at: DateTime<Utc>) -> Step {
        Step {
            seq,
            row: self,
            created_at,
        }
    }
}

impl Tasks<'_> {
    /// Append a trace row; `seq` continues from the task's last row.
    pub async fn add_step(self, task_id: &str, step: &NewStep) -> Result<i64> {
        let insert = query_as(
            "INSERT INTO task_steps (task_id, seq, step, kind, name, request_tokens, result_tokens, \
             arguments, output, error, duration_ms, created_at, model, fingerprint, identity) \
             VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM task_steps WHERE task_id = ?1), \
             ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) RETURNING seq",
        )
        .bind(task_id)
        .bind(step.step)
        .bind(step.kind)
        .bind(&step.name)
        .bind(step.request_tokens)
        .bind(step.result_tokens)
        .bind(&step.arguments)
        .bind(&step.output)
        .bind(&step.error)
        .bind(step.duration_ms)
        .bind(now())
        .bind(&step.model)
        .bind(&step.fingerprint)
        .bind(&step.identity);
        let (seq,): (i64,) = self.store.inserted(insert).await?;
        Ok(seq)
    }

    /// Append trace rows numbered by their writer (the task's runner, the only one writing its
    /// trace) in one multi-row insert: a model call and the tool calls it asked for cost one
    /// round trip. A `seq` already taken is a conflict, never an overwrite.
    /// `epoch`: the lease the task was claimed under, if any; refused with
    /// [`StoreError::Fenced`] once this node no longer holds it.
    pub async fn add_steps(self, task_id: &str, epoch: Option<&str>, rows: &[Step]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let mut insert = Builder::new(
            "INSERT INTO task_steps (task_id, seq, step, kind, name, request_tokens, result_tokens, \
             arguments, output, error, duration_ms, created_at, model, fingerprint, identity) ",
        );
        if epoch.is_some() {
            insert.push("SELECT * FROM (");
        }
        insert.push_values(rows, |b, r| {
            b.push_bind(task_id)
                .push_bind(r.seq)
                .push_bind(r.row.step)
                .push_bind(r.row.kind)
                .push_bind(&r.row.name)
                .push_bind(r.row.request_tokens)
                .push_bind(r.row.result_tokens)
                .push_bind(&r.row.arguments)
                .push_bind(&r.row.output)
                .push_bind(&r.row.error)
                .push_bind(r.row.duration_ms)
                .push_bind(r.created_at)
                .push_bind(&r.row.model)
                .push_bind(&r.row.fingerprint)
                .push_bind(&r.row.identity);
        });
        let Some(epoch) = epoch else {
            insert.build().execute(self.store).await?;
            return Ok(());
        };
        // Under a lease: the rows go in only while the node's row still holds it, in the same
        // statement — on PostgreSQL with the row locked against a take-over's delete until the
        // rows are in (`lease.rs`).
        insert.push(") AS v WHERE EXISTS (SELECT 1 FROM nodes WHERE id = ");
        insert.push_bind(self.store.node().unwrap_or_default());
        insert.push(" AND epoch = ");
        insert.push_bind(epoch);
        insert.push(if self.store.is_postgres() {
            " FOR SHARE)"
        } else {
            ")"
        });
        if insert.build().execute(self.store).await? == 0 {
            return Err(StoreError::Fenced(super::Fenced));
        }
        Ok(())
    }

    pub async fn steps(self, task_id: &str) -> Result<Vec<Step>> {
        self.steps_after(task_id, 0).await
    }

    /// The task's trace rows with `seq` above `after`, in order: what a follower has not seen.
    pub async fn steps_after(self, task_id: &str, after: i64) -> Result<Vec<Step>> {
        self.store.all(query_as(
            "SELECT seq, step, kind, name, request_tokens, result_tokens, arguments, output, error, \
             duration_ms, model, fingerprint, identity, created_at FROM task_steps \
             WHERE task_id = ? AND seq > ? ORDER BY seq",
        )
        .bind(task_id)
        .bind(after))
        .await
    }
}
