//! `/tasks`: the task list (filter by state, origin and job; search the text) with a form to
//! start a task; `/tasks/{id}`: one task's timeline, live while it runs, with its deliveries
//! and a cancel button.
//!
//! Must not: run a task itself — starting and cancelling go through the `Agent`, exactly as
//! `POST /v1/tasks` and `/v1/tasks/{id}/cancel` do; tasks started here have origin `web`.

use super::guard::{CsrfForm, PageQuery, see_other};
use super::layout::{
    Ctx, PageError, PageResult, Shown, badge, long_text, markdown, render, when, when_opt,
};
use super::overview::task_table;
use super::timeline::timeline;
use crate::http::extract::{Id, word_filter};
use crate::http::{ApiError, ApiState};
use axum::extract::State;
use axum::response::IntoResponse;
use chrono_tz::Tz;
use hermes_engine::agent::Submit;
use hermes_store::{
    Approval, ApprovalState, Notice, Origin, Step, StepKind, Task, TaskRecord, TaskSearch,
};
use maud::{Markup, html};
use serde::Deserialize;

const STATES: &[&str] = &["pending", "running", "succeeded", "failed", "cancelled"];

#[derive(Deserialize, Default)]
pub(crate) struct ListQuery {
    #[serde(default)]
    state: String,
    #[serde(default)]
    origin: String,
    #[serde(default)]
    job: String,
    #[serde(default)]
    q: String,
}

fn some(s: &str) -> Option<&str> {
    Some(s.trim()).filter(|s| !s.is_empty())
}

pub(crate) async fn list(ctx: Ctx, PageQuery(q): PageQuery<ListQuery>) -> PageResult {
    let s = &ctx.state;
    let search = TaskSearch {
        state: word_filter(Some(&q.state))?,
        origin: word_filter(Some(&q.origin))?,
        job_id: some(&q.job).map(str::to_string),
        text: some(&q.q).map(str::to_string),
        limit: 100,
    };
    // An end this process could not write yet shows as it is known, as on the API.
    let tasks: Vec<_> = s
        .agent
        .store()
        .tasks()
        .search(&search)
        .await?
        .into_iter()
        .map(|t| s.agent.as_known(t))
        .collect();
    let jobs = s.scheduler.list().await?;
    let body = html! {
        (start_form(&ctx, "", None))
        section aria-labelledby="h-list" {
            h2 #h-list { "History" }
            form.filters method="get" action="/tasks" role="search" {
                div.field {
                    label for="f-q" { "Text" }
                    input #f-q type="search" name="q" value=(q.q) placeholder="words in the task or answer";
                }
                div.field {
                    label for="f-state" { "State" }
                    select #f-state name="state" {
                        option value="" { "any" }
                        @for st in STATES { option value=(st) selected[q.state == *st] { (st) } }
                    }
                }
                div.field {
                    label for="f-origin" { "Origin" }
                    select #f-origin name="origin" {
                        option value="" { "any" }
                        @for o in Origin::ALL { option value=(o) selected[q.origin == o.as_str()] { (o) } }
                    }
                }
                div.field {
                    label for="f-job" { "Job" }
                    select #f-job name="job" {
                        option value="" { "any" }
                        @for j in &jobs { option value=(j.id) selected[q.job == j.id] { (j.name) } }
                    }
                }
                button type="submit" { "Filter" }
            }
            (task_table(&ctx, &tasks, "No task matches."))
        }
    };
    Ok(render(&ctx, "Tasks", body).into_response())
}

/// The form that starts a task; `error` from a refused attempt, with the text kept.
fn start_form(ctx: &Ctx, text: &str, error: Option<&str>) -> Markup {
    let settings = ctx.state.agent.settings();
    html! {
        section.card aria-labelledby="h-start" {
            h2 #h-start { "Start a task" }
            form.stack method="post" action="/tasks" {
                (ctx.csrf())
                @if let Some(e) = error { p.error role="alert" { (e) } }
                label for="task-text" { "What should the agent do?" }
                textarea #task-text name="task" rows="3" required maxlength="20000" { (text) }
                div.row {
                    div.field {
                        label for="task-profile" { "Model profile" }
                        select #task-profile name="profile" {
                            @for name in settings.model.profiles.keys() {
                                option value=(name) selected[*name == settings.model.default_profile] { (name) }
                            }
                        }
                    }
                    button type="submit" { "Start" }
                }
            }
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct StartForm {
    task: String,
    #[serde(default)]
    profile: String,
}

pub(crate) async fn start(ctx: Ctx, CsrfForm(f): CsrfForm<StartForm>) -> PageResult {
    let s = &ctx.state;
    let submitted = s
        .agent
        .submit(Submit::new(
            f.task.clone(),
            Origin::Web,
            some(&f.profile).map(str::to_string),
        ))
        .await;
    match submitted {
        Ok(task) => Ok(see_other(&format!("/tasks/{}", task.id))),
        Err(e) => {
            let status = ApiError::from(e);
            let body = start_form(&ctx, &f.task, Some(&status.message));
            Ok((status.status, render(&ctx, "Tasks", body)).into_response())
        }
    }
}

/// `?done=` after an approval answered on the task's page.
#[derive(Deserialize, Default)]
pub(crate) struct ShowQuery {
    #[serde(default)]
    done: Option<String>,
}

pub(crate) async fn show(ctx: Ctx, Id(id): Id, PageQuery(q): PageQuery<ShowQuery>) -> PageResult {
    let s = &ctx.state;
    let Some(record) = s.agent.task_record(&id).await? else {
        return Err(PageError(ApiError::not_found(format!(
            "There is no task {id}; the task list shows the ids."
        ))));
    };
    let t = &record.task;
    let live = !t.state.is_finished();
    let tokens = token_totals(&record, live);
    let answered_by = answered_by(&record.steps);
    let events = format!("/v1/tasks/{}/events", t.id);
    let requests = s.agent.approvals().of_task(&t.id).await?;
    let (open, answered): (Vec<_>, Vec<_>) = requests
        .into_iter()
        .partition(|a| a.state == ApprovalState::Open);
    let back = format!("/tasks/{}", t.id);
    let body = html! {
        (super::flash::flash(q.done.as_deref()))
        div.task-text { (long_text(&t.task, "task")) }
        (facts(t, &answered_by, tokens, ctx.tz()))
        @if live {
            form #cancel method="post" action={"/tasks/" (t.id) "/cancel"} {
                (ctx.csrf())
                button.danger type="submit" { "Cancel this task" }
            }
        }
        (approvals_section(&ctx, &open, &answered, &back))
        section aria-labelledby="h-steps" {
            h2 #h-steps { "Timeline" }
            (timeline(&record.steps, live.then_some(events.as_str())))
        }
        @if let Some(e) = &t.error {
            p.error #task-error role="alert" { (e) }
        }
        @if let Some(a) = &t.answer {
            section aria-labelledby="h-answer" {
                h2 #h-answer { "Answer" }
                div.answer #answer { (markdown(a)) }
            }
        }
        (deliveries_section(&record.notices))
    };
    Ok(render(&ctx, &format!("Task {}", t.id), body).into_response())
}

/// Tokens in and out: a task's totals are written when it ends; until then, its model calls
/// so far.
fn token_totals(record: &TaskRecord, live: bool) -> (i64, i64) {
    let t = &record.task;
    if live {
        record
            .steps
            .iter()
            .filter(|s| s.row.kind == StepKind::Model)
            .fold((0, 0), |(i, o), s| {
                (i + s.row.request_tokens, o + s.row.result_tokens)
            })
    } else {
        (t.prompt_tokens, t.completion_tokens)
    }
}

/// The profiles (and models) that answered, in order, each once: a fallback shows here.
fn answered_by(steps: &[Step]) -> Vec<String> {
    let mut answered_by: Vec<String> = Vec::new();
    // A failed call's row has no reply: no model, no output, no calls.
    let replied = |s: &&Step| {
        s.row.kind == StepKind::Model
            && (s.row.model.is_some() || s.row.output.is_some() || s.row.arguments.is_some())
    };
    for step in steps.iter().filter(replied) {
        let who = match &step.row.model {
            Some(m) => format!("{} ({m})", step.row.name),
            None => step.row.name.clone(),
        };
        if !answered_by.contains(&who) {
            answered_by.push(who);
        }
    }
    answered_by
}

/// The task's facts: state, where it came from, who answered, when, and what it cost.
fn facts(t: &Task, answered_by: &[String], tokens: (i64, i64), tz: Tz) -> Markup {
    html! {
        dl.facts {
            dt { "State" } dd #task-state {
                (badge(Shown::Task(t.state)))
                @if t.waiting { " " (badge(Shown::Waiting)) }
                @if let Some(r) = t.reason { " " span.muted { (r) } }
            }
            dt { "Origin" } dd { (t.origin) }
            dt { "Profile" } dd { (t.profile) }
            @if !answered_by.is_empty() { dt { "Answered by" } dd #answered-by { (answered_by.join(", then ")) } }
            @if let Some(j) = &t.job_id { dt { "Job" } dd { a href={"/jobs/" (j)} { (j) } } }
            @if let Some(p) = &t.parent_id { dt { "Parent" } dd { a href={"/tasks/" (p)} { (p) } } }
            dt { "Created" } dd { (when(t.created_at, tz)) }
            dt { "Finished" } dd { (when_opt(t.finished_at, tz)) }
            dt { "Tokens" } dd { (tokens.0) " in · " (tokens.1) " out" }
        }
    }
}

/// The task's approval requests, open and answered; nothing when it asked for none.
fn approvals_section(ctx: &Ctx, open: &[Approval], answered: &[Approval], back: &str) -> Markup {
    html! {
        @if !open.is_empty() || !answered.is_empty() {
            section aria-labelledby="h-approvals" {
                h2 #h-approvals { "Approvals" }
                @if !open.is_empty() { (super::approvals::open_list(ctx, open, back)) }
                @if !answered.is_empty() { (super::approvals::answered_table(ctx, answered)) }
            }
        }
    }
}

/// The notices the task queued and how their delivery went; nothing when it queued none.
fn deliveries_section(notices: &[Notice]) -> Markup {
    html! {
        @if !notices.is_empty() {
            section aria-labelledby="h-notices" {
                h2 #h-notices { "Deliveries" }
                ul.notices { @for n in notices {
                    li {
                        (badge(Shown::Notice(n.state))) " "
                        b { (n.queued.channel) } " · " (n.queued.title)
                        " · " (n.attempts) " attempt(s)"
                        @if let Some(e) = &n.last_error { " — " span.error-text { (e) } }
                        " " a href={"/deliveries?state=" (n.state.as_str())} { "outbox" }
                    }
                } }
            }
        }
    }
}

pub(crate) async fn cancel(
    State(s): State<ApiState>,
    Id(id): Id,
    CsrfForm(_): CsrfForm,
) -> PageResult {
    match s.agent.cancel(&id).await {
        Ok(t) => Ok(see_other(&format!("/tasks/{}", t.id))),
        // Finished meanwhile: its page shows how.
        Err(hermes_engine::agent::AgentError::AlreadyFinished { id, .. }) => {
            Ok(see_other(&format!("/tasks/{id}")))
        }
        Err(e) => Err(e.into()),
    }
}
