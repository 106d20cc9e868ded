//! What an execution has counted and recorded so far — tokens, parse failures, trace rows not
//! yet written — kept outside the loop so a timeout or a cancel that drops the loop loses none
//! of it; and how the loop's end becomes the task's stored outcome.
//!
//! Owns: the counters, the numbering of trace rows, [`LoopEnd`] and its translation to a
//! [`TaskOutcome`]. Must not: write to the store (the runner flushes what it takes from here).

use crate::llm::ModelReply;
use hermes_store::util::lock;
use hermes_store::{FailReason, NewStep, Step, StoreError, TaskOutcome, TaskState, now};
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// What must survive the loop being dropped by a timeout or a cancel: the token counters, and
/// the trace rows recorded but not yet written.
#[derive(Debug, Default)]
pub(super) struct Tally {
    prompt_tokens: AtomicI64,
    completion_tokens: AtomicI64,
    parse_failures: AtomicI64,
    trace: Mutex<Unwritten>,
    /// The model call under way, its step and start, until it answers or fails: a cancel or
    /// the task's limit that drops it mid-call still gets it into the trace.
    calling: Mutex<Option<(i64, Instant)>>,
}

/// Trace rows numbered by the runner — the only writer of its task's trace — and written in
/// batches: a model call together with the tool calls it asked for is one store round trip.
#[derive(Debug, Default)]
struct Unwritten {
    last_seq: i64,
    rows: Vec<Step>,
}

impl Tally {
    /// The counters and trace numbering of an execution continued from a checkpoint's
    /// [`Tally::counts`].
    pub(super) fn restored(c: Counts) -> Tally {
        let t = Tally::default();
        t.prompt_tokens.store(c.prompt_tokens, Ordering::Relaxed);
        t.completion_tokens
            .store(c.completion_tokens, Ordering::Relaxed);
        t.parse_failures.store(c.parse_failures, Ordering::Relaxed);
        lock(&t.trace).last_seq = c.last_seq;
        t
    }

    /// The counters and the last trace number, for a checkpoint.
    pub(super) fn counts(&self) -> Counts {
        Counts {
            prompt_tokens: self.prompt_tokens.load(Ordering::Relaxed),
            completion_tokens: self.completion_tokens.load(Ordering::Relaxed),
            parse_failures: self.parse_failures.load(Ordering::Relaxed),
            last_seq: lock(&self.trace).last_seq,
        }
    }

    pub(super) fn add(&self, reply: &ModelReply) {
        let add = |counter: &AtomicI64, n: i64| counter.fetch_add(n, Ordering::Relaxed);
        add(&self.prompt_tokens, reply.usage.prompt_tokens.into());
        add(
            &self.completion_tokens,
            reply.usage.completion_tokens.into(),
        );
        add(&self.parse_failures, reply.parse_warnings.len() as i64);
    }

    /// Number a trace row (the runner is its task's only writer) and keep it for the next
    /// [`Tally::take_unwritten`]; `show` sees it first, in the same order as the numbers.
    pub(super) fn number(&self, row: NewStep, show: impl FnOnce(&Step)) {
        let mut trace = lock(&self.trace);
        trace.last_seq += 1;
        let step = row.into_step(trace.last_seq, now());
        show(&step);
        trace.rows.push(step);
    }

    /// A model call for `step` starts now.
    pub(super) fn calling(&self, step: i64) {
        *lock(&self.calling) = Some((step, Instant::now()));
    }

    /// The model call under way came back (with an answer or an error).
    pub(super) fn called(&self) {
        *lock(&self.calling) = None;
    }

    /// The model call that was under way when the loop was dropped: its step and how long it
    /// had run.
    pub(super) fn cut_call(&self) -> Option<(i64, Duration)> {
        lock(&self.calling)
            .take()
            .map(|(step, at)| (step, at.elapsed()))
    }

    /// The rows numbered since the last call, to be written in one go.
    pub(super) fn take_unwritten(&self) -> Vec<Step> {
        std::mem::take(&mut lock(&self.trace).rows)
    }
}

/// [`Tally::counts`].
pub(super) struct Counts {
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub parse_failures: i64,
    pub last_seq: i64,
}

/// How the loop's end is stored: a cancelled task ends in its own state, a store failure as a
/// failure of the task.
pub(super) fn final_outcome(end: Result<LoopEnd, StoreError>, tally: &Tally) -> TaskOutcome {
    match end {
        Ok(LoopEnd::Answer(a)) => outcome(TaskState::Succeeded, Some(a), None, None, tally),
        // `drive` never writes a held task's end; should one get here, it is not an answer.
        Ok(LoopEnd::Held) => outcome(
            TaskState::Failed,
            None,
            Some("the task stopped while waiting for approval".into()),
            Some(FailReason::Interrupted),
            tally,
        ),
        Ok(LoopEnd::Failed { reason, error }) => {
            let state = match reason {
                FailReason::Cancelled => TaskState::Cancelled,
                _ => TaskState::Failed,
            };
            outcome(state, None, Some(error), Some(reason), tally)
        }
        Err(e) => outcome(
            TaskState::Failed,
            None,
            Some(format!("could not record the task's progress: {e}")),
            Some(FailReason::Store),
            tally,
        ),
    }
}

pub(super) fn outcome(
    state: TaskState,
    answer: Option<String>,
    error: Option<String>,
    reason: Option<FailReason>,
    tally: &Tally,
) -> TaskOutcome {
    TaskOutcome {
        state,
        answer,
        error,
        reason,
        parse_failures: tally.parse_failures.load(Ordering::Relaxed),
        prompt_tokens: tally.prompt_tokens.load(Ordering::Relaxed),
        completion_tokens: tally.completion_tokens.load(Ordering::Relaxed),
    }
}

/// How the loop ended, before it becomes a stored outcome.
pub(super) enum LoopEnd {
    Answer(String),
    Failed {
        reason: FailReason,
        error: String,
    },
    /// Waiting for a person: the checkpoint is stored, the task stays `running` (waiting) and
    /// this execution ends, freeing its worker.
    Held,
}
