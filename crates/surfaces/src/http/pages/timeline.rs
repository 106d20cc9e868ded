//! A task's timeline as HTML, the way `tasks show` prints it: each model call with its tokens
//! and time, each tool call with its arguments and result (long ones folded), notes.
//!
//! `assets/app.js` builds the same markup for the steps that arrive live over the event
//! stream; a change here is a change there.

use super::layout::long_text;
use hermes_store::{Step, StepKind};
use maud::{Markup, html};

/// The whole timeline; the list the live script appends to.
pub(super) fn timeline(steps: &[Step], events: Option<&str>) -> Markup {
    html! {
        ol.timeline #timeline data-events=[events] aria-live="polite" aria-label="Steps" {
            @for s in steps { (step(s)) }
        }
        @if steps.is_empty() {
            p.muted #no-steps { "No steps yet." }
        }
    }
}

fn kind(k: StepKind) -> &'static str {
    match k {
        StepKind::Model => "model",
        StepKind::Tool => "tool",
        StepKind::Note => "note",
        StepKind::Approval => "approval",
    }
}

pub(super) fn step(s: &Step) -> Markup {
    let k = kind(s.row.kind);
    html! {
        li class={"step " (k)} data-seq=(s.seq) {
            div.head {
                span.n { (s.row.step) }
                " "
                span.kind { (k) }
                " "
                b.name { (s.row.name) }
                " "
                span.meta { (meta(s)) }
            }
            (body(s))
        }
    }
}

fn meta(s: &Step) -> String {
    match s.row.kind {
        StepKind::Model => format!(
            "{}{} ms · {} → {} tokens",
            s.row
                .model
                .as_deref()
                .map(|m| format!("{m} · "))
                .unwrap_or_default(),
            s.row.duration_ms,
            s.row.request_tokens,
            s.row.result_tokens
        ),
        StepKind::Tool => format!("{} ms", s.row.duration_ms),
        StepKind::Note | StepKind::Approval => String::new(),
    }
}

fn body(s: &Step) -> Markup {
    let calls = s
        .row
        .arguments
        .as_deref()
        .filter(|a| !a.is_empty() && *a != "[]");
    html! {
        @match s.row.kind {
            StepKind::Model => {
                @if let Some(c) = calls { div.label { "tool calls" } (long_text(c, "args")) }
                @if let Some(o) = s.row.output.as_deref().filter(|o| !o.is_empty()) {
                    div.label { "answer" } (long_text(o, "out"))
                }
            }
            StepKind::Tool => {
                @if let Some(a) = s.row.arguments.as_deref() { div.label { "arguments" } (long_text(a, "args")) }
                @if let Some(o) = s.row.output.as_deref() { div.label { "result" } (long_text(o, "out")) }
            }
            StepKind::Note => {
                @if let Some(o) = s.row.output.as_deref() { p.note { (o) } }
            }
            StepKind::Approval => {
                @if let Some(a) = s.row.arguments.as_deref() { div.label { "arguments" } (long_text(a, "args")) }
                @if let Some(o) = s.row.output.as_deref() { p.note { (o) } }
            }
        }
        @if let Some(e) = s.row.error.as_deref() { p.error { (e) } }
    }
}
