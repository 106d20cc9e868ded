//! What a failing job tells its person: one failure report when it has failed
//! `scheduler.failure_report_after` runs in a row — with the causes read from the failed task's
//! trace and what to do —, nothing more while it keeps failing (the runs are still recorded,
//! their delivery `suppressed`), and one short "recovered" notice at its next success.
//!
//! Owns: counting a job's failure streak from its run rows, the wording of the report and the
//! recovery notice, and queueing a job's notices on its channels (`deliver_all`). Must not: decide a run's outcome (`fire` does) or send anything but
//! through the job's channels.

use super::Scheduler;
use hermes_store::util::text::one_line;
use hermes_store::{Delivery, FailReason, Job, JobRun, NewNotice, RunOutcome, StepKind};
use std::fmt::Write;

/// Runs looked at to count a streak; a job failing longer than this is reported as "at least".
const STREAK_WINDOW: i64 = 100;
/// Causes quoted per kind in a report.
const MAX_CAUSES: usize = 3;

impl Scheduler {
    /// A run failed (`error`): report it if this failure completes the streak that warrants a
    /// report; the delivery state for its run row.
    pub(crate) async fn failure_notice(
        &self,
        job: &Job,
        run_id: i64,
        task_id: Option<&str>,
        error: &str,
    ) -> Delivery {
        let settings = &self.inner.settings;
        if !settings.notify_on_failure {
            return Delivery::None;
        }
        // This run, and the failed runs right before it.
        let streak = 1 + self.failures_before(job, run_id).await;
        let threshold = settings.failure_report_after.max(1);
        if streak < threshold {
            return Delivery::None;
        }
        if streak > threshold {
            return Delivery::Suppressed;
        }
        let title = match streak {
            1 => format!("{} — failing", job.name),
            n => format!("{} — failing ({n} runs in a row)", job.name),
        };
        let text = self.report_text(job, streak, task_id, error).await;
        self.deliver_all(job, run_id, task_id, &title, &text).await
    }

    /// A run succeeded: if the failures before it were reported, say it works again.
    pub(crate) async fn recovery_notice(&self, job: &Job, run_id: i64, task_id: &str) {
        let settings = &self.inner.settings;
        if !settings.notify_on_failure {
            return;
        }
        let streak = self.failures_before(job, run_id).await;
        if streak < settings.failure_report_after.max(1) {
            return;
        }
        let title = format!("{} — recovered", job.name);
        let text = format!(
            "{} works again: this run succeeded after {streak} failed run(s) in a row.",
            job.name
        );
        let delivery = self
            .deliver_all(job, run_id, Some(task_id), &title, &text)
            .await;
        if delivery.is_failed() {
            tracing::warn!(job = %job.id, run = run_id, %delivery, "recovery notice not queued");
        }
    }

    /// Failed runs of `job` in a row before run `run_id`. Skipped and missed firings ran
    /// nothing, so they neither count nor break a streak.
    async fn failures_before(&self, job: &Job, run_id: i64) -> u32 {
        let runs = match self.inner.store.jobs().runs(&job.id, STREAK_WINDOW).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(job = %job.id, error = %e, "cannot read the job's runs to count its failures");
                return 0;
            }
        };
        streak_of(&runs, run_id)
    }

    /// The report: how long it has failed, the causes from the last failed task's trace, what
    /// to do, and where to look.
    async fn report_text(
        &self,
        job: &Job,
        streak: u32,
        task_id: Option<&str>,
        error: &str,
    ) -> String {
        let mut text = if streak == 1 {
            format!("**{}** failed.\n\n", job.name)
        } else {
            format!("**{}** has failed {streak} runs in a row.\n\n", job.name)
        };
        let _ = writeln!(text, "- Last error: {}", one_line(error, 300));
        let mut reason = None;
        if let Some(id) = task_id
            && let Ok(Some(record)) = self.inner.store.tasks().record(id).await
        {
            reason = record.task.reason;
            text.push_str(&trace_causes(&record.steps, error));
        }
        let what = match task_id {
            Some(_) => advice(reason).replace("jobs run ID", &format!("jobs run {}", job.id)),
            // No task ran (the precheck failed, or the task could not start): no trace.
            None => format!(
                "the run failed before any task ran (its precheck, or the task could not start): fix what the error above says, then run the job once with `hermes-agent jobs run {}`.",
                job.id
            ),
        };
        let _ = writeln!(text, "\n**What to do:** {what}");
        if let Some(id) = task_id {
            let _ = writeln!(text, "\nThe trace: `hermes-agent tasks show {id}`.");
        }
        text.push_str(
            "\nNo further failure notices while it keeps failing; you will hear when it recovers.",
        );
        text
    }
}

impl Scheduler {
    /// Queue `text` on every channel of the job; the run's delivery state.
    pub(crate) async fn deliver_all(
        &self,
        job: &Job,
        run_id: i64,
        task_id: Option<&str>,
        title: &str,
        text: &str,
    ) -> Delivery {
        if job.notify.is_empty() {
            return Delivery::None;
        }
        let mut errors = Vec::new();
        for channel in &job.notify {
            let notice = NewNotice {
                channel: channel.clone(),
                title: title.to_string(),
                body: text.to_string(),
                task_id: task_id.map(str::to_string),
                job_id: Some(job.id.clone()),
                run_id: Some(run_id),
                ..NewNotice::default()
            };
            let r = self.inner.deliver.deliver(notice).await;
            if let Err(e) = r {
                tracing::warn!(job = %job.id, run = run_id, channel = %channel, error = %e, "delivery failed");
                errors.push(format!("{channel}: {e}"));
            }
        }
        if errors.is_empty() {
            Delivery::Queued
        } else {
            Delivery::Failed(errors.join("; "))
        }
    }
}

/// The failed runs right before `run_id` (newest first in `runs`).
fn streak_of(runs: &[JobRun], run_id: i64) -> u32 {
    let mut streak = 0;
    for run in runs.iter().filter(|r| r.id != run_id) {
        match run.outcome {
            RunOutcome::Failed => streak += 1,
            RunOutcome::Skipped | RunOutcome::Missed => {}
            RunOutcome::Fired => break,
        }
    }
    streak
}

/// The model errors, the tool errors and the step the task stopped at, from its trace.
fn trace_causes(steps: &[hermes_store::Step], said: &str) -> String {
    let mut out = String::new();
    // The task's own error is said already as the last error: not again as a cause.
    let errors = |kind: StepKind| {
        steps
            .iter()
            .filter(move |s| s.row.kind == kind)
            .filter_map(|s| s.row.error.as_deref().map(|e| (s.row.name.as_str(), e)))
            .filter(|(_, e)| e.trim() != said.trim())
    };
    let model: Vec<_> = errors(StepKind::Model).take(MAX_CAUSES).collect();
    let tools: Vec<_> = errors(StepKind::Tool).take(MAX_CAUSES).collect();
    for (_, e) in &model {
        let _ = writeln!(out, "- Model error: {}", one_line(e, 200));
    }
    for (name, e) in &tools {
        let _ = writeln!(out, "- Tool error in `{name}`: {}", one_line(e, 200));
    }
    if let Some(last) = steps.last() {
        let _ = writeln!(out, "- Stopped at step {}.", last.row.step);
    }
    out
}

/// What a person can do about a failure, by its reason.
fn advice(reason: Option<FailReason>) -> &'static str {
    match reason {
        Some(FailReason::Model) => {
            "check that the model server is up and the profile points at it (`hermes-agent doctor`)."
        }
        Some(FailReason::Timeout) => {
            "the task ran out of time: raise agent.task_timeout_s, or make the job's task smaller."
        }
        Some(FailReason::MaxSteps) | Some(FailReason::Loop) => {
            "the model went round in circles: make the job's task more specific, or use a stronger profile."
        }
        Some(FailReason::Store) => {
            "the database could not be written: check the disk (`hermes-agent doctor`)."
        }
        _ => {
            "read the trace below; fix what it shows, then run the job once with `hermes-agent jobs run ID`."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn run(id: i64, outcome: RunOutcome) -> JobRun {
        JobRun {
            id,
            job_id: "j".into(),
            scheduled_at: Utc::now(),
            fired_at: Utc::now(),
            outcome,
            task_id: None,
            reason: None,
            delivery: Delivery::None,
        }
    }

    #[test]
    fn a_streak_counts_failures_back_to_the_last_success() {
        use RunOutcome::*;
        let runs = [
            run(9, Failed),
            run(8, Failed),
            run(7, Skipped),
            run(6, Failed),
            run(5, Fired),
            run(4, Failed),
        ];
        assert_eq!(streak_of(&runs, 9), 2, "the run itself is not counted");
        assert_eq!(streak_of(&runs, 10), 3);
        assert_eq!(streak_of(&[run(1, Fired)], 2), 0);
    }

    #[test]
    fn the_last_error_is_not_said_again_as_a_cause() {
        let step = |seq: i64, kind: StepKind, error: &str| hermes_store::Step {
            seq,
            row: hermes_store::NewStep {
                error: Some(error.into()),
                ..hermes_store::NewStep::new(1, kind, "fast")
            },
            created_at: Utc::now(),
        };
        let said = "the model server answered HTTP 500";
        let steps = [
            step(1, StepKind::Model, "timed out after 30 s"),
            step(2, StepKind::Model, said),
        ];
        let causes = trace_causes(&steps, said);
        assert!(
            causes.contains("- Model error: timed out after 30 s"),
            "{causes}"
        );
        assert!(!causes.contains(said), "{causes}");
    }
}
