//! `/inbox`: the mail the agent read, newest first, and what each became — a task (linked),
//! a command on a job (linked, with what it did), or ignored with the reason — and how the
//! mailbox is doing.
//!
//! Must not: change anything (mail is acted on by the inbox alone) or show a message's text
//! (its task does).

use super::guard::PageQuery;
use super::layout::{Ctx, PageResult, Shown, badge, render, rows_or, short, state_tabs, when};
use crate::http::extract::word_filter;
use axum::response::IntoResponse;
use hermes_engine::inbox::Health;
use hermes_store::{InboxFilter, InboxMessage, InboxState};
use maud::{Markup, html};
use serde::Deserialize;

#[derive(Deserialize, Default)]
pub(crate) struct ListQuery {
    #[serde(default)]
    state: String,
}

pub(crate) async fn list(ctx: Ctx, PageQuery(q): PageQuery<ListQuery>) -> PageResult {
    let s = &ctx.state;
    let state = word_filter(Some(&q.state))?;
    let inbox = s.agent.store().inbox();
    let messages = inbox.list(&InboxFilter::of(state, None, 200)).await?;
    let tabs = [("", "All"), ("acted", "Acted on"), ("ignored", "Ignored")];
    let body = html! {
        (status(&s.inbox.health()))
        (matrix_status(&s.matrix.status()))
        (telegram_status(&s.telegram.status()))
        (state_tabs("/inbox", &q.state, &tabs))
        (rows_or(&messages, html! { "No message read yet." }, "inbox", html! {
            th { "Read" } th { "Channel" } th { "From" } th { "Subject" } th { "State" } th { "Became" }
        }, |m| row(&ctx, m)))
    };
    Ok(render(&ctx, "Inbox", body).into_response())
}

/// The mailbox's connection, in a sentence.
fn status(h: &Health) -> Markup {
    html! {
        p #inbox-status data-state=(h.word()) {
            @match h {
                Health::Off => { "No mailbox is configured (inbox.email in settings.yaml; see the README, “Inbox”)." }
                Health::Starting => { (badge(Shown::Mailbox { up: None })) " Connecting to the mailbox…" }
                Health::Ok { idle: true } => { (badge(Shown::Mailbox { up: Some(true) })) " Connected; new mail is read as it arrives (IDLE)." }
                Health::Ok { idle: false } => { (badge(Shown::Mailbox { up: Some(true) })) " Connected; the server has no IDLE, so it is asked every inbox.email.poll_s seconds." }
                Health::Down { error } => { (badge(Shown::Mailbox { up: Some(false) })) " Not connected — retrying: " (error) }
            }
        }
    }
}

/// The Matrix channel's connection and decryption, in a sentence (nothing when it is off).
fn matrix_status(st: &hermes_engine::channels::matrix::Status) -> Markup {
    use hermes_engine::channels::matrix::State;
    html! {
        @if st.state != State::Off {
            p #matrix-status data-state=(st.state.word()) data-decryption-failing=(st.protocol.decryption_failing) {
                @match st.state {
                    State::Starting => { "Matrix: connecting…" }
                    State::Down => { "Matrix: not connected — retrying: " (st.error.as_deref().unwrap_or("")) }
                    _ => { "Matrix: connected" @if let Some(d) = &st.protocol.device { " as device " code { (d) } } "." }
                }
                @if st.protocol.undecryptable > 0 {
                    " " (st.protocol.undecryptable) " message(s) could not be decrypted since the start (reason undecryptable below)"
                    @if st.protocol.decryption_failing { ", the last one included: verify this device from your own session, or set channels.matrix.recovery_key" }
                    "."
                }
            }
        }
    }
}

/// The Telegram bot's polling, in a sentence (nothing when it is off).
fn telegram_status(st: &hermes_engine::channels::telegram::Status) -> Markup {
    use hermes_engine::channels::State;
    html! {
        @if st.state != State::Off {
            p #telegram-status data-state=(st.state.word()) {
                @match st.state {
                    State::Starting => { "Telegram: connecting…" @if let Some(e) = &st.error { " (" (e) ")" } }
                    State::Down if st.protocol.revoked => { "Telegram: stopped — " (st.error.as_deref().unwrap_or("")) }
                    State::Down => { "Telegram: not connected — retrying: " (st.error.as_deref().unwrap_or("")) }
                    _ => { "Telegram: polling" @if let Some(b) = &st.protocol.bot { " as " code { (b) } } "." }
                }
            }
        }
    }
}

fn row(ctx: &Ctx, m: &InboxMessage) -> Markup {
    let tz = ctx.tz();
    html! {
        tr data-id=(m.id) {
            td data-label="Read" { (when(m.received_at, tz)) }
            td data-label="Channel" { (m.channel.as_str()) }
            td data-label="From" { (m.sender) }
            td data-label="Subject" { (short(&m.subject, 80)) }
            td data-label="State" { (badge(Shown::Mail(m.state))) }
            td data-label="Became" { (became(m)) }
        }
    }
}

/// A task link, a command with its job and outcome, or the reason it was ignored.
fn became(m: &InboxMessage) -> Markup {
    html! {
        @match (m.state, m.command) {
            (InboxState::Ignored, _) => {
                span.reason { (m.reason.map_or("ignored", |r| r.as_str())) }
                @if let Some(d) = &m.detail { " " span.muted { (short(d, 120)) } }
            }
            (InboxState::Acted, Some(c)) => {
                span.command { (c.as_str()) }
                @if let Some(j) = &m.job_id { " on " a href={"/jobs/" (j)} { "job " (j) } }
                @if let Some(t) = &m.task_id { " — " a href={"/tasks/" (t)} { "run" } }
                @if let Some(d) = &m.detail { div.muted { (short(d, 160)) } }
            }
            (InboxState::Acted, None) => {
                @if let Some(t) = &m.task_id { a href={"/tasks/" (t)} { "task " (t) } }
                @if m.notice_id.is_some() { " " span.muted { "(a reply)" } }
            }
        }
    }
}
