//! `/approvals`: the tool calls waiting for a person, each with Approve and Deny (with a
//! reason), and the answers given lately; the same buttons on a task's page and the overview.
//!
//! Must not: answer except through `Approvals::decide` (decided by `dashboard`), as the API,
//! the CLI and a reply to the request's mail do.

use super::flash::{Flash, flash};
use super::guard::{CsrfForm, PageQuery, see_other};
use super::layout::{Ctx, PageResult, render, short, when, when_opt};
use crate::http::extract::Id;
use crate::http::{ApiError, ApiState};
use axum::extract::State;
use axum::response::IntoResponse;
use hermes_engine::agent::{ApprovalError, Decision};
use hermes_store::{Approval, ApprovalState};
use maud::{Markup, html};
use serde::Deserialize;

/// Answers shown under the open requests.
const RECENT: i64 = 50;

#[derive(Deserialize, Default)]
pub(crate) struct PageArgs {
    #[serde(default)]
    done: Option<String>,
}

pub(crate) async fn page(ctx: Ctx, PageQuery(q): PageQuery<PageArgs>) -> PageResult {
    let approvals = ctx.state.agent.approvals();
    let open = approvals.list(Some(ApprovalState::Open), 500).await?;
    let all = approvals.list(None, RECENT + open.len() as i64).await?;
    let answered: Vec<Approval> = all
        .into_iter()
        .filter(|a| a.state != ApprovalState::Open)
        .collect();
    let body = html! {
        (flash(q.done.as_deref()))
        section aria-labelledby="h-open" {
            h2 #h-open { "Waiting for you" }
            (open_list(&ctx, &open, "/approvals"))
        }
        section aria-labelledby="h-answered" {
            h2 #h-answered { "Answered" }
            (answered_table(&ctx, &answered))
        }
    };
    Ok(render(&ctx, "Approvals", body).into_response())
}

/// The open requests, each with its buttons; `back` is the page the buttons return to.
pub(crate) fn open_list(ctx: &Ctx, open: &[Approval], back: &str) -> Markup {
    let tz = ctx.tz();
    html! {
        @if open.is_empty() {
            p.muted { "Nothing is waiting for approval." }
        } @else {
            ul.approvals { @for a in open {
                li.approval data-approval=(a.id) {
                    div.head {
                        b.name { (a.tool) } " · task "
                        a href={"/tasks/" (a.task_id)} { (a.task_id) }
                        " · asked " (when(a.created_at, tz)) " · expires " (when(a.expires_at, tz))
                    }
                    div.label { "arguments (what runs once approved)" }
                    pre.args { (pretty(&a.arguments)) }
                    form.inline method="post" action={"/approvals/" (a.id) "/approve"} {
                        (ctx.csrf())
                        input type="hidden" name="back" value=(back);
                        button type="submit" { "Approve" }
                    }
                    form.inline method="post" action={"/approvals/" (a.id) "/deny"} {
                        (ctx.csrf())
                        input type="hidden" name="back" value=(back);
                        label for={"reason-" (a.id)} { "Reason" }
                        input id={"reason-" (a.id)} name="reason" placeholder="told to the model";
                        button.danger type="submit" { "Deny" }
                    }
                }
            } }
        }
    }
}

/// Answered requests: what, who, when.
pub(crate) fn answered_table(ctx: &Ctx, list: &[Approval]) -> Markup {
    let tz = ctx.tz();
    html! {
        @if list.is_empty() {
            p.muted { "No answers yet." }
        } @else {
            div.scroll { table.rows {
                thead { tr { th { "Tool" } th { "Arguments" } th { "Answer" } th { "By" } th { "When" } th { "Task" } } }
                tbody { @for a in list {
                    tr {
                        td data-label="Tool" { (a.tool) }
                        td data-label="Arguments" { code { (short(&a.arguments.to_string(), 80)) } }
                        td data-label="Answer" {
                            (a.state)
                            @if let Some(r) = &a.reason { ": " (r) }
                        }
                        td data-label="By" { (a.decided_by.as_deref().unwrap_or("")) }
                        td data-label="When" { (when_opt(a.decided_at, tz)) }
                        td data-label="Task" { a href={"/tasks/" (a.task_id)} { (short(&a.task_id, 20)) } }
                    }
                } }
            } }
        }
    }
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// Where a button returns to: the approvals page, a task's page or the overview, nothing else.
#[derive(Deserialize)]
pub(crate) struct Answer {
    #[serde(default)]
    back: String,
    #[serde(default)]
    reason: String,
}

fn back_to(back: &str, flash: Flash) -> String {
    let safe = back == "/"
        || back == "/approvals"
        || back.strip_prefix("/tasks/").is_some_and(|id| {
            !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        });
    let path = if safe { back } else { "/approvals" };
    format!("{path}?done={}", flash.key())
}

pub(crate) async fn approve(
    State(s): State<ApiState>,
    Id(id): Id,
    CsrfForm(f): CsrfForm<Answer>,
) -> PageResult {
    answer(&s, &id, Decision::Approve, &f.back, Flash::Approved).await
}

pub(crate) async fn deny(
    State(s): State<ApiState>,
    Id(id): Id,
    CsrfForm(f): CsrfForm<Answer>,
) -> PageResult {
    let reason = Some(f.reason.trim().to_string()).filter(|r| !r.is_empty());
    answer(&s, &id, Decision::Deny { reason }, &f.back, Flash::Denied).await
}

async fn answer(s: &ApiState, id: &str, decision: Decision, back: &str, done: Flash) -> PageResult {
    match s.agent.approvals().decide(id, decision, "dashboard").await {
        Ok(_) => Ok(see_other(&back_to(back, done))),
        // Answered meanwhile (another tab, the CLI, expiry): the page shows how.
        Err(ApprovalError::AlreadyDecided { .. }) => {
            Ok(see_other(&back_to(back, Flash::AlreadyAnswered)))
        }
        Err(ApprovalError::Expired { .. }) => Ok(see_other(&back_to(back, Flash::Expired))),
        Err(e) => Err(ApiError::from(e).into()),
    }
}
