//! `/`: the overview — health, running and pending tasks, the next job firings, failures in
//! the last 24 hours, the outbox backlog and the tokens used today.
//!
//! Must not: change anything; every figure is read from the store (or the agent) per request.

use super::layout::{Ctx, PageResult, Shown, badge, firing, render, short, when, when_opt};
use crate::http::ApiState;
use axum::response::IntoResponse;
use chrono::DateTime;
use chrono::{Duration, TimeZone, Utc};
use chrono_tz::Tz;
use hermes_engine::scheduler::JobView;
use hermes_engine::scheduler::{describe_job, upcoming};
use hermes_store::{Approval, Backlog, JobRun, ModelChange, Task, TaskFilter, TaskState, Tokens};
use maud::{Markup, html};

/// Rows per list on the overview; the full lists are a click away.
const ROWS: i64 = 10;

pub(crate) async fn page(ctx: Ctx) -> PageResult {
    let s = &ctx.state;
    let tz = ctx.tz();
    let store = s.agent.store();
    let now = Utc::now();
    let list = |state| TaskFilter {
        state: Some(state),
        job_id: None,
        limit: ROWS,
    };
    let running = store.tasks().list(&list(TaskState::Running)).await?;
    let pending = store.tasks().list(&list(TaskState::Pending)).await?;
    let day_ago = now - Duration::hours(24);
    let failed = store.tasks().failed_since(day_ago, ROWS).await?;
    let run_failures = store
        .jobs()
        .taskless_run_failures_since(day_ago, ROWS)
        .await?;
    let backlog = store.outbox().backlog().await?;
    let tokens = store.tasks().tokens_since(midnight(now, tz)).await?;
    let mut firings: Vec<_> = s
        .scheduler
        .list()
        .await?
        .into_iter()
        .filter_map(|j| upcoming(&j.job, 1).first().map(|t| (*t, j)))
        .collect();
    firings.sort_by_key(|(t, _)| *t);
    firings.truncate(ROWS as usize);

    let pending_count = store
        .tasks()
        .counts()
        .await?
        .into_iter()
        .find(|(st, _)| *st == TaskState::Pending)
        .map_or(0, |(_, n)| n);
    let open = s
        .agent
        .approvals()
        .list(Some(hermes_store::ApprovalState::Open), ROWS)
        .await?;
    // The profiles answering with a model no eval verified: the badge of a model change.
    let changed: Vec<_> = store
        .models()
        .statuses()
        .await?
        .into_iter()
        .filter_map(|m| m.unverified_change().cloned())
        .collect();
    let troubles = crate::http::api::health::degraded_parts(s).await;
    let body = html! {
        // What only a person can unblock comes first.
        (waiting_for_you(&ctx, &open, &changed))
        (cards(s, &troubles, pending_count, tokens, &backlog, tz))
        section aria-labelledby="h-running" {
            h2 #h-running { "Running and pending tasks" }
            (task_table(&ctx, &[running, pending].concat(), "Nothing is running or waiting."))
        }
        (next_firings(&firings, tz))
        section aria-labelledby="h-failures" {
            h2 #h-failures { "Failures in the last 24 hours" }
            (task_table(&ctx, &failed, "No task failed."))
            (run_failures_table(&run_failures, tz))
        }
    };
    Ok(render(&ctx, "Overview", body).into_response())
}

/// The start of "today", the user's day: midnight in their zone (24 hours ago in the rare zone
/// where midnight does not exist that day).
fn midnight(now: DateTime<Utc>, tz: Tz) -> DateTime<Utc> {
    now.with_timezone(&tz)
        .date_naive()
        .and_hms_opt(0, 0, 0)
        .and_then(|m| tz.from_local_datetime(&m).earliest())
        .map_or(now - Duration::hours(24), |m| m.with_timezone(&Utc))
}

/// Open approvals and unverified model changes: what waits for a person.
fn waiting_for_you(ctx: &Ctx, open: &[Approval], changed: &[ModelChange]) -> Markup {
    html! {
        @if !open.is_empty() {
            section aria-labelledby="h-approvals" {
                h2 #h-approvals { a href="/approvals" { "Waiting for your approval" } }
                (super::approvals::open_list(ctx, open, "/"))
            }
        }
        @for c in changed {
            p.error-text.model-changed data-profile=(c.profile) {
                span.badge.busy { "model changed" } " "
                "Profile " strong { (c.profile) } " now answers with " code { (short(&c.new_identity, 80)) }
                ", which no eval has verified"
                @if !c.paused_jobs.is_empty() { " (" (c.paused_jobs.len()) " job(s) held)" }
                ". " a href="/evals" { "See evals" }
            }
        }
    }
}

pub(crate) fn task_table(ctx: &Ctx, tasks: &[Task], empty: &str) -> Markup {
    let tz = ctx.tz();
    html! {
        @if tasks.is_empty() {
            p.muted { (empty) }
        } @else {
            div.scroll { table.tasks.rows {
                thead { tr { th { "Task" } th { "State" } th { "Origin" } th { "Created" } th { "Finished" } } }
                tbody { @for t in tasks {
                    tr {
                        td data-label="Task" { a href={"/tasks/" (t.id)} { (short(&t.task, 90)) } }
                        td data-label="State" {
                            (badge(Shown::Task(t.state)))
                            @if t.waiting { " " (badge(Shown::Waiting)) }
                            @if let Some(r) = t.reason { " " span.muted { (r) } }
                        }
                        td data-label="Origin" { (t.origin) }
                        td data-label="Created" { (when(t.created_at, tz)) }
                        td data-label="Finished" { (when_opt(t.finished_at, tz)) }
                    }
                } }
            } }
        }
    }
}

/// Health, tokens today, the outbox.
fn cards(
    s: &ApiState,
    troubles: &[&str],
    pending: i64,
    tokens: Tokens,
    backlog: &Backlog,
    tz: Tz,
) -> Markup {
    html! {
        section.cards aria-label="At a glance" {
            div.card {
                h2 { "Health" }
                @if troubles.is_empty() {
                    p.big { span.badge.good { "ok" } }
                } @else {
                    p.big { span.badge.bad { "degraded" } }
                    p { "Not well: " (troubles.join(", ")) " — " a href="/settings" { "the checks" } " say why." }
                }
                p { "version " (env!("CARGO_PKG_VERSION")) " · memory " (if s.memory.is_some() { "on" } else { "off" }) }
                p { (s.agent.running_count()) " running · " (pending) " pending" }
            }
            div.card {
                h2 { a href="/usage" { "Tokens today" } }
                p.big { (tokens.prompt + tokens.completion) }
                p { (tokens.prompt) " in · " (tokens.completion) " out · " (tokens.calls) " model calls" }
            }
            div.card {
                h2 { a href="/deliveries" { "Outbox" } }
                p.big { (backlog.pending) " " span.unit { "pending" } }
                p {
                    a href="/deliveries?state=failed" { (backlog.failed) " failed" } " · " (backlog.sent) " sent"
                    @if let Some(t) = backlog.oldest_pending { " · oldest pending since " (when(t, tz)) }
                }
            }
        }
    }
}

fn next_firings(firings: &[(DateTime<Utc>, JobView)], tz: Tz) -> Markup {
    html! {
        section aria-labelledby="h-next" {
            h2 #h-next { "Next job firings" }
            @if firings.is_empty() {
                p.muted { "No job is due. " a href="/jobs" { "Add a job" } "." }
            } @else {
                div.scroll { table.rows {
                    thead { tr { th { "When" } th { "Job" } th { "Schedule" } } }
                    tbody { @for (t, j) in firings {
                        tr {
                            td data-label="When" { (firing(*t, tz)) }
                            td data-label="Job" { a href={"/jobs/" (j.id)} { (j.name) } }
                            td data-label="Schedule" { (describe_job(&j.job)) }
                        }
                    } }
                } }
            }
        }
    }
}

/// Job runs that failed or were missed without a task (a task list cannot show them).
fn run_failures_table(run_failures: &[JobRun], tz: Tz) -> Markup {
    html! {
        @if !run_failures.is_empty() {
            h3 { "Job runs that did not start" }
            div.scroll { table.rows {
                thead { tr { th { "When" } th { "Job" } th { "Outcome" } th { "Why" } } }
                tbody { @for r in run_failures {
                    tr {
                        td data-label="When" { (when(r.fired_at, tz)) }
                        td data-label="Job" { a href={"/jobs/" (r.job_id)} { (r.job_id) } }
                        td data-label="Outcome" { (badge(Shown::Run(r.outcome))) }
                        td data-label="Why" { (r.reason.as_deref().unwrap_or("")) }
                    }
                } }
            } }
        }
    }
}
