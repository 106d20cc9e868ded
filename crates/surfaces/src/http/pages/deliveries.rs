//! `/deliveries`: the outbox — pending, sent and failed notices with their attempts, the last
//! error and the next retry — and "retry now" for a pending or failed one.
//!
//! Must not: send anything itself; a retry goes through the `Notifier`, which wakes its sender.

use super::flash::{Flash, flash};
use super::guard::{Back, CsrfForm, PageQuery, see_other};
use super::layout::{
    Ctx, PageResult, Shown, badge, render, rows_or, short, state_tabs, when, when_opt,
};
use crate::http::ApiState;
use crate::http::api::deliveries::notice_id;
use crate::http::extract::Id;
use crate::http::extract::word_filter;
use axum::extract::State;
use axum::response::IntoResponse;
use hermes_store::{Notice, NoticeFilter, NoticeState};
use maud::{Markup, html};
use serde::Deserialize;

#[derive(Deserialize, Default)]
pub(crate) struct ListQuery {
    #[serde(default)]
    state: String,
    #[serde(default)]
    done: Option<String>,
}

pub(crate) async fn list(ctx: Ctx, PageQuery(q): PageQuery<ListQuery>) -> PageResult {
    let s = &ctx.state;
    let state = word_filter(Some(&q.state))?;
    let outbox = s.agent.store().outbox();
    let notices = outbox.list(&NoticeFilter::newest(state, 200)).await?;
    let tabs = [
        ("", "All"),
        ("pending", "Pending"),
        ("failed", "Failed"),
        ("sent", "Sent"),
    ];
    let body = html! {
        (flash(q.done.as_deref()))
        (state_tabs("/deliveries", &q.state, &tabs))
        (rows_or(&notices, html! { "Nothing here." }, "deliveries", html! {
            th { "Queued" } th { "Channel" } th { "Title" } th { "State" }
            th { "Attempts" } th { "Next try / sent" } th { "From" } th { span.sr-only { "Actions" } }
        }, |n| row(&ctx, n, &q.state)))
    };
    Ok(render(&ctx, "Deliveries", body).into_response())
}

/// One notice; `back` is the filter to come back to after a retry.
fn row(ctx: &Ctx, n: &Notice, back: &str) -> Markup {
    let tz = ctx.tz();
    html! {
        tr data-id=(n.id) {
            td data-label="Queued" { (when(n.created_at, tz)) }
            td data-label="Channel" { (n.queued.channel) }
            td data-label="Title" { (short(&n.queued.title, 60)) }
            td data-label="State" {
                (badge(Shown::Notice(n.state)))
                @if let Some(e) = &n.last_error { div.error-text { (short(e, 200)) } }
            }
            td data-label="Attempts" { (n.attempts) }
            td data-label="Next try / sent" { @match n.state {
                NoticeState::Pending => { (when(n.next_attempt_at, tz)) }
                _ => { (when_opt(n.sent_at, tz)) }
            } }
            td data-label="From" {
                @if let Some(t) = &n.queued.task_id { a href={"/tasks/" (t)} { "task" } " " }
                @if let Some(j) = &n.queued.job_id { a href={"/jobs/" (j)} { "job" } }
            }
            td.actions-cell { @if n.state != NoticeState::Sent {
                form.inline method="post" action={"/deliveries/" (n.id) "/retry"} {
                    (ctx.csrf())
                    input type="hidden" name="back" value=(back);
                    button type="submit" { "Retry now" }
                }
            } }
        }
    }
}

pub(crate) async fn retry(
    State(s): State<ApiState>,
    Id(id): Id,
    CsrfForm(f): CsrfForm<Back>,
) -> PageResult {
    s.notifier.retry(notice_id(&id)?).await?;
    let back = word_filter(Some(&f.back))
        .ok()
        .flatten()
        .map_or("", NoticeState::as_str);
    Ok(see_other(&format!(
        "/deliveries?state={back}&done={}",
        Flash::NoticeDue.key()
    )))
}
