//! What the commands print, whichever backend answered: the task table and the step timeline
//! (shared by `tasks show` and the live output of `run`), the job table, found facts, a
//! finished task's outcome, and JSON.
//!
//! Must not: fetch anything — every function takes the typed values a backend returned.

use super::backend::FoundFact;
use super::table::{Table, cell};
use chrono::{DateTime, SecondsFormat, Utc};
use hermes_engine::scheduler::JobView;
use hermes_store::util::text;
use hermes_store::{Notice, NoticeState, PauseReason, Step, StepKind, Task, TaskRecord, TaskState};
use serde::Serialize;
use std::fmt::Write;
use std::process::ExitCode;

/// Print as pretty JSON. Through `serde_json::Value`, whose keys are sorted: the same text
/// whether the value came from the daemon's API or from the data dir.
pub(crate) fn print_json(v: &impl Serialize) -> anyhow::Result<()> {
    let value = serde_json::to_value(v)?;
    // Not through `for_terminal`: JSON escapes control characters itself, and a program reading
    // it must get the text exactly as stored.
    super::write_out(&format!("{}\n", serde_json::to_string_pretty(&value)?));
    Ok(())
}

/// A time as the API writes it (RFC 3339, `Z`), so tables read the same as the JSON.
pub fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// Exit 0 for a task that succeeded, 1 for any other end.
pub(crate) fn exit_for(state: TaskState) -> ExitCode {
    if state == TaskState::Succeeded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Print a finished task the way `run` promises: the answer on stdout, problems on stderr.
pub(crate) fn print_outcome(record: &TaskRecord, json: bool) -> anyhow::Result<ExitCode> {
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

/// Errors and notes on a timeline longer than this are cut (at a word); the rest is in
/// `tasks show ID --json`. Model errors stay well under it: they quote at most 400 characters
/// of a server's body.
const WHOLE_CHARS: usize = 1500;

/// An error or a note on one line, whole: it ends with what to do, so cutting it at a fixed
/// width cut off the advice. Only past [`WHOLE_CHARS`] is it cut, at a word.
pub(crate) fn whole_line(s: &str) -> String {
    let flat = text::collapse(&text::for_terminal(s));
    if flat.chars().count() <= WHOLE_CHARS {
        return flat;
    }
    let kept = text::prefix(&flat, WHOLE_CHARS);
    let at = kept.rfind(' ').unwrap_or(kept.len());
    format!(
        "{}{} (the whole text: tasks show --json)",
        &kept[..at],
        text::ELLIPSIS
    )
}

pub(crate) fn task_table(tasks: &[Task]) -> String {
    if tasks.is_empty() {
        return "no tasks yet — start one with `hermes-agent run \"...\"`\n".into();
    }
    let mut table = Table::new(&["ID", "STATE", "ORIGIN", "CREATED (UTC)", "TASK"]);
    for t in tasks {
        let state = if t.waiting {
            format!("{} (waiting for approval)", t.state)
        } else {
            t.state.to_string()
        };
        table.row(vec![
            cell(&t.id, 32),
            state,
            t.origin.to_string(),
            t.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            cell(&t.task, 60),
        ]);
    }
    table.render()
}

pub fn approval_table(list: &[hermes_store::Approval]) -> String {
    if list.is_empty() {
        return "no approval requests\n".into();
    }
    let mut table = Table::new(&["ID", "STATE", "TASK", "CREATED (UTC)", "TOOL", "ARGUMENTS"]);
    for a in list {
        let state = match (&a.reason, a.state) {
            (Some(r), hermes_store::ApprovalState::Denied) => format!("denied: {r}"),
            _ => a.state.to_string(),
        };
        table.row(vec![
            cell(&a.id, 20),
            cell(&state, 30),
            cell(&a.task_id, 20),
            a.created_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            cell(&a.tool, 30),
            cell(&a.arguments.to_string(), 60),
        ]);
    }
    table.render()
}

/// One line per trace row, as `run` prints them live.
pub(crate) fn step_line(s: &Step) -> String {
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
                .map(|e| format!("  ! {}", whole_line(e)))
                .unwrap_or_default();
            // The profile that answered, and the model its server said answered.
            let served = s
                .row
                .model
                .as_deref()
                .map(|m| format!(" [{m}]"))
                .unwrap_or_default();
            format!(
                "[{:>2}] model {}{served} ({} ms, {}→{} tok) {what}{err}",
                s.row.step,
                s.row.name,
                s.row.duration_ms,
                s.row.request_tokens,
                s.row.result_tokens
            )
        }
        StepKind::Approval => format!(
            "[{:>2}]   approval {}: {}{}",
            s.row.step,
            s.row.name,
            one_line(s.row.output.as_deref().unwrap_or(""), 100),
            s.row
                .error
                .as_deref()
                .map(|e| format!("  ! {}", whole_line(e)))
                .unwrap_or_default()
        ),
        StepKind::Tool => {
            let outcome = match &s.row.error {
                Some(e) => format!("✗ {}", whole_line(e)),
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
            whole_line(
                s.row
                    .output
                    .as_deref()
                    .or(s.row.error.as_deref())
                    .unwrap_or("")
            )
        ),
    }
}

pub(crate) fn task_timeline(t: &Task, steps: &[Step], notices: &[Notice]) -> String {
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
            .map(|e| format!(" — {}", whole_line(e)))
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

pub(crate) fn job_table(jobs: &[JobView]) -> String {
    if jobs.is_empty() {
        return "no jobs — add one with `hermes-agent jobs add \"TASK\" --schedule \"0 8 * * *\"`\n"
            .into();
    }
    let mut table = Table::new(&[
        "ID",
        "NAME",
        "SCHEDULE",
        "NEXT (UTC)",
        "LAST RUN",
        "DELIVERY",
    ]);
    for j in jobs {
        let last = match &j.last_run {
            Some(r) => format!(
                "{} {}{}",
                r.outcome.as_str(),
                time(r.fired_at),
                r.reason
                    .as_deref()
                    .map(|x| format!(" ({})", one_line(x, 80)))
                    .unwrap_or_default()
            ),
            None => "never".into(),
        };
        // Of the last run: queued, sent, or what failed (cut: the column is for a glance).
        let delivery = j
            .last_run
            .as_ref()
            .map(|r| cell(&r.delivery.to_string(), 40))
            .unwrap_or_default();
        // To the second: the fraction the API gives only widens the column.
        let next = match (j.enabled, j.pause_reason) {
            (false, Some(PauseReason::ModelChanged)) => "paused: model changed".to_string(),
            (false, _) => "paused".to_string(),
            (true, _) => j
                .next_run_at
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
                .unwrap_or_default(),
        };
        table.row(vec![
            cell(&j.id, 32),
            cell(&j.name, 24),
            cell(&j.schedule, 40),
            next,
            last,
            delivery,
        ]);
    }
    table.render()
}

/// One line per fact: id, score, text; with recall by meaning on, what found it (its place
/// by words, its similarity by meaning) after the score.
pub(crate) fn fact_list(facts: &[FoundFact]) -> String {
    if facts.is_empty() {
        return "nothing found\n".into();
    }
    let by_meaning = facts.iter().any(|f| f.similarity.is_some());
    let mut out = String::new();
    for f in facts {
        if by_meaning {
            let words = f.keyword_rank.map_or("-".to_string(), |r| format!("#{r}"));
            let meaning = f.similarity.map_or("-".to_string(), |s| format!("{s:.2}"));
            let _ = writeln!(
                out,
                "{}  {:.3}  words {words:<3}  meaning {meaning:<4}  {}",
                f.id, f.score, f.text
            );
        } else {
            let _ = writeln!(out, "{}  {:.2}  {}", f.id, f.score, f.text);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_engine::scheduler::JobView;
    use hermes_store::{Job, Origin};
    use unicode_width::UnicodeWidthStr;

    fn task(id: &str, state: TaskState, origin: Origin, text: &str) -> Task {
        Task {
            id: id.into(),
            state,
            origin,
            parent_id: None,
            job_id: None,
            profile: "fast".into(),
            task: text.into(),
            answer: None,
            error: None,
            reason: None,
            parse_failures: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
            created_at: Utc::now(),
            started_at: None,
            finished_at: None,
            waiting: false,
            node_epoch: None,
        }
    }

    /// The display column at which `needle` starts in each line that holds it.
    fn columns_of(table: &str, needles: &[&str]) -> Vec<usize> {
        table
            .lines()
            .zip(needles)
            .map(|(line, needle)| {
                let at = line
                    .find(needle)
                    .unwrap_or_else(|| panic!("no {needle} in {line}"));
                line[..at].width()
            })
            .collect()
    }

    #[test]
    fn errors_on_the_timeline_are_whole_or_cut_at_a_word() {
        let advice = "cannot reach the model server at http://127.0.0.1:9/v1 (connection refused) after 4 attempt(s): is the model server running and listening there? Or point model.profiles.fast.base_url at an OpenAI-compatible server, in /etc/h/settings.yaml.";
        assert_eq!(whole_line(advice), advice);
        let long = "word ".repeat(WHOLE_CHARS);
        let cut = whole_line(&long);
        assert!(
            cut.starts_with("word word") && cut.contains("word… (the whole text"),
            "{cut}"
        );
        assert!(cut.chars().count() < WHOLE_CHARS + 60);
    }

    #[test]
    fn the_task_table_lines_up_whatever_the_origin_and_script() {
        let table = task_table(&[
            task(
                "aaaaaaaaaaaaaaaa",
                TaskState::Succeeded,
                Origin::Cli,
                "乌龙茶多少钱？",
            ),
            task(
                "bbbbbbbbbbbbbbbb",
                TaskState::Failed,
                Origin::Mcp,
                "the price of tea",
            ),
            task("cccccccccccccccc", TaskState::Pending, Origin::Job, "x"),
        ]);
        let task_column = columns_of(&table, &["TASK", "乌龙茶", "the price", "x"]);
        assert!(task_column.iter().all(|c| *c == task_column[0]), "{table}");
        let created = columns_of(&table, &["CREATED", "20", "20", "20"]);
        assert!(created.iter().all(|c| *c == created[0]), "{table}");
    }

    #[test]
    fn a_paused_job_says_so_and_why_in_the_next_column() {
        let job = |id: &str, reason: Option<PauseReason>| JobView {
            job: Job {
                id: id.into(),
                name: id.into(),
                task: "t".into(),
                schedule: "every 2h".into(),
                timezone: "UTC".into(),
                notify: vec![],
                profile: None,
                origin: Origin::Cli,
                precheck: None,
                enabled: reason.is_none(),
                next_run_at: Some(Utc::now()),
                running_task_id: None,
                pause_reason: reason,
                pre_approved: vec![],
                created_at: Utc::now(),
            },
            last_run: None,
        };
        let table = job_table(&[
            job("j_held", Some(PauseReason::ModelChanged)),
            job("j_paused", Some(PauseReason::Person)),
        ]);
        let line = |id: &str| table.lines().find(|l| l.starts_with(id)).unwrap_or("");
        assert!(line("j_held").contains("paused: model changed"), "{table}");
        assert!(line("j_paused").contains("paused"), "{table}");
        assert!(!line("j_paused").contains("model"), "{table}");
    }

    #[test]
    fn the_job_table_lines_up_wide_names_and_long_schedules() {
        let job = |id: &str, name: &str, schedule: &str| JobView {
            job: Job {
                id: id.into(),
                name: name.into(),
                task: "t".into(),
                schedule: schedule.into(),
                timezone: "UTC".into(),
                notify: vec![],
                profile: None,
                origin: Origin::Cli,
                precheck: None,
                enabled: true,
                next_run_at: Some(Utc::now()),
                running_task_id: None,
                pause_reason: None,
                created_at: Utc::now(),
                pre_approved: vec![],
            },
            last_run: None,
        };
        let table = job_table(&[
            job("j_aaaaaaaaaaaaaaaa", "乌龙茶价格监控", "every 2h"),
            job("j_bbbbbbbbbbbbbbbb", "tea", "2026-12-01T08:00:00+08:00"),
        ]);
        for column in [
            ["SCHEDULE", "every", "2026-12-01T08"],
            ["LAST RUN", "never", "never"],
        ] {
            let at = columns_of(&table, &column);
            assert!(at.iter().all(|c| *c == at[0]), "{column:?}: {table}");
        }
        assert!(table.contains("2026-12-01T08:00:00+08:00"), "{table}");
    }
}
