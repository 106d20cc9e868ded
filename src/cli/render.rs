//! What the commands print, whichever backend answered: the task table and the step timeline
//! (shared by `tasks show` and the live output of `run`), the job table, found facts, a
//! finished task's outcome, and JSON.
//!
//! Must not: fetch anything — every function takes the typed values a backend returned.

use super::backend::FoundFact;
use crate::scheduler::JobView;
use crate::store::{Notice, NoticeState, Step, StepKind, Task, TaskRecord, TaskState};
use crate::util::text;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use std::fmt::Write;
use std::process::ExitCode;

/// Print as pretty JSON. Through `serde_json::Value`, whose keys are sorted: the same text
/// whether the value came from the daemon's API or from the data dir.
pub fn print_json(v: &impl Serialize) -> anyhow::Result<()> {
    let value = serde_json::to_value(v)?;
    // Not through `for_terminal`: JSON escapes control characters itself, and a program reading
    // it must get the text exactly as stored.
    println!("{}", serde_json::to_string_pretty(&value)?);
    Ok(())
}

/// A time as the API writes it (RFC 3339, `Z`), so tables read the same as the JSON.
pub fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// A value's JSON word (an enum such as a run's outcome), or `?`.
pub fn word(v: &impl Serialize) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        _ => "?".into(),
    }
}

/// Exit 0 for a task that succeeded, 1 for any other end.
pub fn exit_for(state: TaskState) -> ExitCode {
    if state == TaskState::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Print a finished task the way `run` promises: the answer on stdout, problems on stderr.
pub fn print_outcome(record: &TaskRecord, json: bool) -> anyhow::Result<ExitCode> {
    if json {
        print_json(record)?;
    } else {
        let t = &record.task;
        match (&t.answer, t.state) {
            (Some(a), TaskState::Succeeded) => outln!("{a}"),
            _ => errln!(
                "task {} {}{}: {}",
                t.id,
                t.state,
                t.reason.map(|r| format!(" ({r})")).unwrap_or_default(),
                t.error.as_deref().unwrap_or("no answer")
            ),
        }
    }
    Ok(exit_for(record.task.state))
}

/// Shorten to `max` characters on one line, marking the cut; control characters are written
/// out (as `\x1b`) first, so what they were stays visible in the line.
pub fn one_line(s: &str, max: usize) -> String {
    text::one_line(&text::for_terminal(s), max)
}

pub fn task_table(tasks: &[Task]) -> String {
    if tasks.is_empty() {
        return "no tasks yet — start one with `hermes-agent run \"...\"`\n".into();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16}  {:<9}  {:<6}  {:<19}  TASK",
        "ID", "STATE", "ORIGIN", "CREATED (UTC)"
    );
    for t in tasks {
        let _ = writeln!(
            out,
            "{:<16}  {:<9}  {:<6}  {:<19}  {}",
            t.id,
            t.state.as_str(),
            t.origin,
            t.created_at.format("%Y-%m-%d %H:%M:%S"),
            one_line(&t.task, 60)
        );
    }
    out
}

/// One line per trace row, as `run` prints them live.
pub fn step_line(s: &Step) -> String {
    match s.row.kind {
        StepKind::Model => {
            let what = match (&s.row.arguments, &s.row.output) {
                (Some(calls), _) if calls != "[]" => format!("→ tools {}", one_line(calls, 100)),
                (_, Some(text)) => format!("→ answer {}", one_line(text, 100)),
                _ => String::new(),
            };
            let err = s
                .row
                .error
                .as_deref()
                .map(|e| format!("  ! {}", one_line(e, 120)))
                .unwrap_or_default();
            format!(
                "[{:>2}] model {} ({} ms, {}→{} tok) {what}{err}",
                s.row.step,
                s.row.name,
                s.row.duration_ms,
                s.row.request_tokens,
                s.row.result_tokens
            )
        }
        StepKind::Tool => {
            let outcome = match &s.row.error {
                Some(e) => format!("✗ {}", one_line(e, 120)),
                None => format!("✓ {}", one_line(s.row.output.as_deref().unwrap_or(""), 100)),
            };
            format!(
                "[{:>2}]   tool {}({}) {} ms {outcome}",
                s.row.step,
                s.row.name,
                one_line(s.row.arguments.as_deref().unwrap_or(""), 80),
                s.row.duration_ms
            )
        }
        StepKind::Note => format!(
            "[{:>2}]   note {}",
            s.row.step,
            one_line(
                s.row
                    .output
                    .as_deref()
                    .or(s.row.error.as_deref())
                    .unwrap_or(""),
                140
            )
        ),
    }
}

pub fn task_timeline(t: &Task, steps: &[Step], notices: &[Notice]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "task {}  [{}]  origin {}  profile {}",
        t.id, t.state, t.origin, t.profile
    );
    let _ = writeln!(out, "  {}", one_line(&t.task, 200));
    let _ = writeln!(out, "  created {}", t.created_at.to_rfc3339());
    for s in steps {
        let _ = writeln!(out, "{}", step_line(s));
    }
    if let Some(f) = t.finished_at {
        let secs = (f - t.created_at).num_milliseconds() as f64 / 1000.0;
        let _ = writeln!(
            out,
            "  finished {} after {secs:.1} s; tokens {} in / {} out{}",
            f.to_rfc3339(),
            t.prompt_tokens,
            t.completion_tokens,
            if t.parse_failures > 0 {
                format!("; {} unparseable model output(s)", t.parse_failures)
            } else {
                String::new()
            }
        );
    }
    if let Some(e) = &t.error {
        let reason = t.reason.map(|r| format!(" ({r})")).unwrap_or_default();
        let _ = writeln!(out, "  error{reason}: {e}");
    }
    for n in notices {
        let state = match n.state {
            NoticeState::Sent => "sent".to_string(),
            NoticeState::Pending => format!("pending (attempt {} done)", n.attempts),
            NoticeState::Failed => "FAILED".to_string(),
        };
        let err = n
            .last_error
            .as_deref()
            .map(|e| format!(" — {}", one_line(e, 120)))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  notice #{} to {} \"{}\": {state}{err}",
            n.id,
            n.queued.channel,
            one_line(&n.queued.title, 60)
        );
    }
    if let Some(a) = &t.answer {
        let _ = writeln!(out, "answer:\n{a}");
    }
    out
}

pub fn job_table(jobs: &[JobView]) -> String {
    if jobs.is_empty() {
        return "no jobs — add one with `hermes-agent jobs add \"TASK\" --schedule \"0 8 * * *\"`\n"
            .into();
    }
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<18}  {:<16}  {:<14}  {:<20}  LAST RUN",
        "ID", "NAME", "SCHEDULE", "NEXT (UTC)"
    );
    for j in jobs {
        let last = match &j.last_run {
            Some(r) => format!(
                "{} {}{}",
                word(&r.outcome),
                time(r.fired_at),
                r.reason
                    .as_deref()
                    .map(|x| format!(" ({x})"))
                    .unwrap_or_default()
            ),
            None => "never".into(),
        };
        let next = j.next_run_at.map(time).unwrap_or_default();
        let _ = writeln!(
            out,
            "{:<18}  {:<16}  {:<14}  {:<20}  {last}",
            j.id,
            one_line(&j.name, 16),
            j.schedule,
            one_line(&next, 20)
        );
    }
    out
}

/// One line per fact: id, score, text.
pub fn fact_list(facts: &[FoundFact]) -> String {
    if facts.is_empty() {
        return "nothing found\n".into();
    }
    let mut out = String::new();
    for f in facts {
        let _ = writeln!(out, "{}  {:.2}  {}", f.id, f.score, f.text);
    }
    out
}
