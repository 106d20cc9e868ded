//! `/evals`: which model each profile serves and which one a passing eval verified (a badge
//! when it answers with one no eval verified yet), and the past regression runs with each
//! case's verdict and why it failed.
//!
//! Must not: run an eval (`hermes-agent eval` and the daemon's model watch do).

use super::layout::{Ctx, PageResult, Shown, badge, render, rows_or, short, when, when_opt};
use crate::doctor::Verdict;
use axum::response::IntoResponse;
use hermes_store::{EvalRun, EvalVerdict, ModelStatus};
use maud::{Markup, html};

pub(crate) async fn page(ctx: Ctx) -> PageResult {
    let store = ctx.state.agent.store();
    let models = store.models().statuses().await?;
    let runs = store.evals().runs(30).await?;
    let body = html! {
        h2 { "Models" }
        (rows_or(
            &models,
            html! { "No profile's model has been checked yet: the daemon checks each at start and every model.identity_check_s." },
            "models",
            html! { th { "Profile" } th { "Serving" } th { "Verified" } th { "Status" } },
            |m| model_row(&ctx, m),
        ))
        h2 { "Runs" }
        @if runs.is_empty() {
            p.muted { "No eval has run yet. Run " code { "hermes-agent eval" } " to check a profile's model against the regression cases." }
        } @else {
            @for run in &runs { (run_block(&ctx, run)) }
        }
    };
    Ok(render(&ctx, "Evals", body).into_response())
}

fn model_row(ctx: &Ctx, m: &ModelStatus) -> Markup {
    let tz = ctx.tz();
    let (verdict, word) = match (m.unverified_change(), &m.current, &m.verified) {
        (Some(_), _, _) => (Verdict::Warn, "changed, not verified"),
        (None, Some(c), _) if c.verified_at.is_some() => (Verdict::Ok, "verified"),
        _ => (Verdict::Warn, "not verified"),
    };
    html! {
        tr data-profile=(m.profile) {
            td data-label="Profile" { (m.profile) }
            td data-label="Serving" {
                @if let Some(c) = &m.current {
                    code { (short(&c.identity, 80)) }
                    div.muted { (c.source) ", seen " (when(c.last_seen_at, tz)) }
                } @else { span.muted { "unknown" } }
            }
            td data-label="Verified" {
                @if let Some(v) = &m.verified {
                    code { (short(&v.identity, 80)) }
                    div.muted { (when_opt(v.verified_at, tz)) }
                } @else { span.muted { "none yet" } }
            }
            td data-label="Status" {
                (badge(Shown::Check(verdict))) " " (word)
                @if let Some(c) = m.unverified_change() {
                    div.error-text {
                        "changed from " code { (short(&c.old_identity, 60)) } " " (when(c.seen_at, tz))
                        @if !c.paused_jobs.is_empty() {
                            "; jobs held: "
                            @for (i, j) in c.paused_jobs.iter().enumerate() {
                                @if i > 0 { ", " }
                                a href={"/jobs/" (j)} { (j) }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn run_block(ctx: &Ctx, run: &EvalRun) -> Markup {
    let tz = ctx.tz();
    let verdict = match (run.finished_at, run.failed) {
        (None, _) => Verdict::Warn,
        (Some(_), 0) => Verdict::Ok,
        _ => Verdict::Fail,
    };
    html! {
        details.eval-run id={"run-" (run.id)} open[run.failed > 0] {
            summary {
                (badge(Shown::Check(verdict)))
                " run " (run.id) " · " (when(run.started_at, tz)) " · " (run.trigger)
                " · profile " (run.profile)
                " · " (run.passed) " passed, " (run.failed) " failed"
                @if run.finished_at.is_none() { " · unfinished" }
            }
            @if let Some(id) = &run.identity { p.muted { "model: " code { (id) } } }
            div.scroll { table.rows {
                thead { tr {
                    th { "Case" } th { "Verdict" } th { "Calls" } th { "Tokens" } th { "Seconds" } th { "Why" }
                } }
                tbody { @for r in &run.results {
                    tr {
                        td data-label="Case" { (r.case_name) }
                        td data-label="Verdict" { (badge(Shown::Check(match r.verdict {
                            EvalVerdict::Passed => Verdict::Ok,
                            EvalVerdict::Failed => Verdict::Fail,
                        }))) }
                        td data-label="Calls" { (r.model_calls) }
                        td data-label="Tokens" { (r.tokens) }
                        td data-label="Seconds" { (format!("{:.1}", r.duration_ms as f64 / 1000.0)) }
                        td data-label="Why" { (short(r.why.as_deref().unwrap_or(""), 300)) }
                    }
                } }
            } }
        }
    }
}
