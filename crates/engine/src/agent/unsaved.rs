//! Task ends that could not be written. When the runner cannot store a task's final state (a
//! full disk), the end is kept in memory, shown in place of the stored `running` row by every
//! read that goes through the agent (the API's task, list and wait, the live follower), and
//! written by a background retry with a bounded backoff as soon as the database takes it. A
//! process that stops first leaves the row `running`, and the next daemon start marks it
//! `interrupted`, as for any task cut off.
//! Owns: the unsaved ends and their retries. Must not: show an unsaved end as if stored — the
//! row shown says that it is not saved, and why.

use super::{Agent, Inner};
use hermes_store::util::{Backoff, lock};
use hermes_store::{FailReason, Store, StoreError, Task, TaskFilter, TaskOutcome, TaskRecord, now};
use std::sync::Weak;
use std::time::Duration;

/// The waits between attempts to write an unsaved end: soon at first (space freed a moment
/// later is used at once), then at most a minute apart.
const RETRY: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(60)).with_jitter();

impl Agent {
    /// Keep the end `out` of `task`, which could not be written (`why`), and write it in the
    /// background as soon as the database takes it. The row as shown meanwhile.
    pub(super) fn keep_unsaved(&self, task: &Task, out: TaskOutcome, why: &StoreError) -> Task {
        if let StoreError::Unavailable { fault, .. } = why {
            self.inner.store.note_fault(*fault);
        }
        let shown = shown_row(task, &out, why);
        lock(&self.inner.unsaved).insert(task.id.clone(), shown.clone());
        // Weak: a retry must not keep a finished process's agent alive.
        let inner = std::sync::Arc::downgrade(&self.inner);
        tokio::spawn(write_later(inner, task.id.clone(), out));
        shown
    }

    /// `task` as this process knows it: the end it could not write yet, while the stored row
    /// is unfinished.
    pub fn as_known(&self, task: Task) -> Task {
        if task.state.is_finished() {
            return task;
        }
        match lock(&self.inner.unsaved).get(&task.id) {
            Some(end) => end.clone(),
            None => task,
        }
    }

    /// A task with its trace and notices (`GET /v1/tasks/{id}`), its unsaved end shown.
    pub async fn task_record(&self, id: &str) -> Result<Option<TaskRecord>, StoreError> {
        let record = self.inner.store.tasks().record(id).await?;
        Ok(record.map(|r| TaskRecord {
            task: self.as_known(r.task),
            ..r
        }))
    }

    /// Tasks as `store.tasks().list` finds them, unsaved ends shown. A state filter selects
    /// by the stored state and keeps only the tasks still in it as shown, so `running` never
    /// lists an end that is only unsaved.
    pub async fn list_tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>, StoreError> {
        let tasks = self.inner.store.tasks().list(filter).await?;
        Ok(tasks
            .into_iter()
            .map(|t| self.as_known(t))
            .filter(|t| filter.state.is_none_or(|state| t.state == state))
            .collect())
    }
}

/// The row shown for an end not yet written: the end itself, with a note that says so.
fn shown_row(task: &Task, out: &TaskOutcome, why: &StoreError) -> Task {
    let cause = match why {
        StoreError::Unavailable { fault, .. } => {
            format!(
                "the database {} ({fault}); {}",
                fault.headline(),
                fault.hint()
            )
        }
        other => other.to_string(),
    };
    let note = format!(
        "this end is not saved yet: {cause}; the daemon keeps trying to write it (a restart before it succeeds marks the task {})",
        FailReason::Interrupted.as_str()
    );
    Task {
        state: out.state,
        answer: out.answer.clone(),
        error: Some(match &out.error {
            Some(error) => format!("{error}; {note}"),
            None => note,
        }),
        reason: out.reason,
        parse_failures: out.parse_failures,
        prompt_tokens: out.prompt_tokens,
        completion_tokens: out.completion_tokens,
        finished_at: Some(now()),
        ..task.clone()
    }
}

/// Try writing the end until the database takes it, waiting [`RETRY`] between attempts. Ends
/// when the agent or its store is gone (the process is stopping).
async fn write_later(inner: Weak<Inner>, id: String, out: TaskOutcome) {
    let mut attempt: u32 = 0;
    loop {
        tokio::time::sleep(RETRY.delay(attempt)).await;
        attempt = attempt.saturating_add(1);
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let store: &Store = &inner.store;
        // Closed: the process is stopping; the next start marks the task interrupted.
        if store.is_closed() {
            return;
        }
        match store.tasks().finish_row(&id, &out).await {
            Ok(done) => {
                lock(&inner.unsaved).remove(&id);
                match done {
                    Some(done) => tracing::info!(
                        task = %id,
                        state = %done.state,
                        reason = done.reason.map(FailReason::as_str).unwrap_or(""),
                        attempts = attempt,
                        "task's end written, now that the database can be written again"
                    ),
                    // Ended by someone else meanwhile (another process on the data dir).
                    None => tracing::warn!(task = %id, "task's end was written elsewhere first"),
                }
                return;
            }
            Err(e) => {
                if let StoreError::Unavailable { fault, .. } = e {
                    store.note_fault(fault);
                }
                tracing::debug!(task = %id, error = %e, attempts = attempt, "task's end still cannot be written");
            }
        }
    }
}
