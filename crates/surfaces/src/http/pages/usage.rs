//! `/usage`: what the model cost over the last 7, 30 or 90 days — tokens per day as a chart
//! (inline SVG, drawn here: no script, no library, nothing from another origin), then the
//! figures per profile and per job, dearest first, so a person sees which job costs what.
//!
//! Must not: change anything, or count anything itself: the figures are `store.tasks().usage`'s,
//! the same as `GET /v1/usage` answers.

use super::guard::PageQuery;
use super::layout::{Ctx, PageResult, render, tabs};
use crate::http::extract::bounded;
use axum::response::IntoResponse;
use hermes_store::util::text::{duration_ms, grouped};
use hermes_store::{
    DEFAULT_USAGE_DAYS, DayUsage, Figures, JobUsage, MAX_USAGE_DAYS, Usage, UsageWindow,
};
use maud::{Markup, html};
use serde::Deserialize;

/// The windows the page offers; any other `?days=` up to a year works too.
const WINDOWS: [u32; 3] = [7, 30, 90];

#[derive(Deserialize, Default)]
pub(crate) struct UsageQuery {
    days: Option<u32>,
}

pub(crate) async fn page(ctx: Ctx, PageQuery(q): PageQuery<UsageQuery>) -> PageResult {
    let days = bounded("days", q.days, DEFAULT_USAGE_DAYS, MAX_USAGE_DAYS)?;
    let window = UsageWindow::last_days(days, ctx.tz(), chrono::Utc::now());
    let u = ctx.state.agent.store().tasks().usage(&window).await?;
    let body = html! {
        (tabs("Window", WINDOWS.map(|n| {
            (format!("/usage?days={n}"), format!("Last {n} days"), n == days)
        })))
        @if u.totals.calls == 0 {
            p.muted #usage-empty { "No model calls yet in the last " (days) " days." }
        } @else {
            (cards(&u.totals))
            section aria-labelledby="h-per-day" {
                h2 #h-per-day { "Tokens per day" }
                (chart(&u))
                (day_table(&u.by_day))
            }
            section aria-labelledby="h-per-profile" {
                h2 #h-per-profile { "Per profile" }
                (figures_table("by-profile", "Profile", &u.totals, u.by_profile.iter().map(|p| {
                    (html! { code { (p.profile) } }, &p.figures)
                })))
            }
            section aria-labelledby="h-per-job" {
                h2 #h-per-job { "Per job" }
                (figures_table("by-job", "Job", &u.totals, u.by_job.iter().map(|j| (job_cell(j), &j.figures))))
            }
        }
        p.muted { "Days run from midnight to midnight in " (u.timezone) "; today is the last, still counting. "
            "A call counts for the profile that answered it and the job whose task made it (a sub-agent's for its parent's). "
            "The same figures as JSON: " code { "GET /v1/usage?days=" (days) } "." }
    };
    Ok(render(&ctx, "Usage", body).into_response())
}

fn cards(t: &Figures) -> Markup {
    html! {
        section.cards aria-label="Totals" {
            div.card {
                h2 { "Tokens" }
                p.big #usage-total { (grouped(t.total_tokens)) }
                p { (grouped(t.prompt_tokens)) " prompt · " (grouped(t.completion_tokens)) " completion" }
            }
            div.card {
                h2 { "Model calls" }
                p.big { (grouped(t.calls)) }
            }
            div.card {
                h2 { "Model time" }
                p.big { (duration_ms(t.model_ms)) }
            }
        }
    }
}

/// The chart's drawing area, in the SVG's own units (it scales to the page's width).
const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 220.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 26.0;

/// Tokens per day as stacked bars — prompt below, completion on top — with a title per bar
/// (a tooltip, and what a screen reader reads), gridlines at half and full scale, and a few
/// dates under the bars. The table after it has every figure.
fn chart(u: &Usage) -> Markup {
    let n = u.by_day.len().max(1) as f64;
    let top = nice_ceiling(
        u.by_day
            .iter()
            .map(|d| d.figures.total_tokens)
            .max()
            .unwrap_or(0),
    );
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot = plot_w / n;
    let bar = (slot * 0.7).max(1.0);
    let y = |tokens: i64| TOP + plot_h - plot_h * tokens as f64 / top as f64;
    // About six dates fit under the bars at any window; counted back from today, which
    // always has its date, so no two labels crowd each other at the end.
    let every = (u.by_day.len() / 6).max(1);
    let last = u.by_day.len().saturating_sub(1);
    let busiest = u.by_day.iter().max_by_key(|d| d.figures.total_tokens);
    html! {
        figure.chart {
            svg viewBox={"0 0 " (WIDTH) " " (HEIGHT)} role="img"
                aria-labelledby="usage-chart-title usage-chart-desc" {
                title #usage-chart-title { "Tokens per day, last " (u.days) " days" }
                desc #usage-chart-desc {
                    (grouped(u.totals.total_tokens)) " tokens in all: " (grouped(u.totals.prompt_tokens))
                    " prompt and " (grouped(u.totals.completion_tokens)) " completion"
                    @if let Some(b) = busiest { "; the most on " (b.day) " (" (grouped(b.figures.total_tokens)) ")" }
                    "."
                }
                @for (value, label) in [(0, "0".to_string()), (top / 2, compact(top / 2)), (top, compact(top))] {
                    line.grid x1=(LEFT) x2=(WIDTH - RIGHT) y1=(fmt(y(value))) y2=(fmt(y(value))) {}
                    text.axis x=(LEFT - 6.0) y=(fmt(y(value) + 4.0)) text-anchor="end" { (label) }
                }
                @for (i, d) in u.by_day.iter().enumerate() {
                    @let x = LEFT + slot * i as f64 + (slot - bar) / 2.0;
                    @let f = &d.figures;
                    g.day data-day=(d.day) {
                        title { (day_title(d)) }
                        // The whole slot takes the pointer, so a tooltip shows on a day of few tokens too.
                        rect.hit x=(fmt(LEFT + slot * i as f64)) y=(TOP) width=(fmt(slot)) height=(fmt(plot_h)) {}
                        @if f.prompt_tokens > 0 {
                            rect.prompt x=(fmt(x)) y=(fmt(y(f.prompt_tokens))) width=(fmt(bar))
                                height=(fmt(y(0) - y(f.prompt_tokens))) {}
                        }
                        @if f.completion_tokens > 0 {
                            rect.completion x=(fmt(x)) y=(fmt(y(f.total_tokens))) width=(fmt(bar))
                                height=(fmt(y(f.prompt_tokens) - y(f.total_tokens))) {}
                        }
                        @if (last - i).is_multiple_of(every) {
                            text.axis x=(fmt(x + bar / 2.0)) y=(fmt(HEIGHT - 8.0)) text-anchor="middle" {
                                (d.day.format("%m-%d"))
                            }
                        }
                    }
                }
            }
            figcaption.legend {
                span.swatch.prompt aria-hidden="true" {} " prompt tokens "
                span.swatch.completion aria-hidden="true" {} " completion tokens"
            }
        }
    }
}

fn day_title(d: &DayUsage) -> String {
    let f = &d.figures;
    format!(
        "{}: {} tokens ({} prompt, {} completion), {} calls, {}",
        d.day,
        grouped(f.total_tokens),
        grouped(f.prompt_tokens),
        grouped(f.completion_tokens),
        grouped(f.calls),
        duration_ms(f.model_ms)
    )
}

/// The figures of every day with calls, newest first, folded away (the chart is the summary).
fn day_table(days: &[DayUsage]) -> Markup {
    html! {
        details.config {
            summary { "Figures per day" }
            div.scroll { table.rows #by-day {
                thead { tr { th { "Day" } th.num { "Calls" } th.num { "Prompt" } th.num { "Completion" } th.num { "Total" } th.num { "Model time" } } }
                tbody { @for d in days.iter().rev().filter(|d| d.figures.calls > 0) {
                    tr data-day=(d.day) {
                        td data-label="Day" { (d.day.format("%a %Y-%m-%d")) }
                        td.num data-label="Calls" { (grouped(d.figures.calls)) }
                        td.num data-label="Prompt" { (grouped(d.figures.prompt_tokens)) }
                        td.num data-label="Completion" { (grouped(d.figures.completion_tokens)) }
                        td.num data-label="Total" { (grouped(d.figures.total_tokens)) }
                        td.num data-label="Model time" { (duration_ms(d.figures.model_ms)) }
                    }
                } }
            } }
        }
    }
}

/// A table of figures per row, each with its share of the window's tokens.
fn figures_table<'a>(
    id: &str,
    what: &str,
    totals: &Figures,
    rows: impl Iterator<Item = (Markup, &'a Figures)>,
) -> Markup {
    html! {
        div.scroll { table.rows id=(id) {
            thead { tr {
                th { (what) } th.num { "Calls" } th.num { "Prompt" } th.num { "Completion" }
                th.num { "Total" } th.num { "Share" } th.num { "Model time" }
            } }
            tbody { @for (name, f) in rows {
                tr {
                    td data-label=(what) { (name) }
                    td.num data-label="Calls" { (grouped(f.calls)) }
                    td.num data-label="Prompt" { (grouped(f.prompt_tokens)) }
                    td.num data-label="Completion" { (grouped(f.completion_tokens)) }
                    td.num data-label="Total" { (grouped(f.total_tokens)) }
                    td.num data-label="Share" { (share(f.total_tokens, totals.total_tokens)) }
                    td.num data-label="Model time" { (duration_ms(f.model_ms)) }
                }
            } }
        } }
    }
}

/// A job by name, linked; a job deleted since by its id; tasks of no job by who started them.
fn job_cell(j: &JobUsage) -> Markup {
    html! {
        @match (&j.job_id, &j.job_name) {
            (Some(id), Some(name)) => { a href={"/jobs/" (id)} { (name) } }
            (Some(id), None) => { span.muted { "deleted job " } code { (id) } }
            (None, _) => {
                "no job (by hand)"
                @if let Some(o) = j.origin { " " span.tag { (o) } }
            }
        }
    }
}

/// `part` of `whole` as a percentage with one decimal.
fn share(part: i64, whole: i64) -> String {
    if whole <= 0 {
        return "—".into();
    }
    format!("{:.1} %", part as f64 * 100.0 / whole as f64)
}

/// An axis label, short enough for the space left of the bars: `2,500`, `25k`, `2.5M`.
fn compact(n: i64) -> String {
    let short = |unit: f64, suffix: &str| {
        let v = format!("{:.1}", n as f64 / unit);
        format!("{}{suffix}", v.trim_end_matches(".0"))
    };
    match n {
        ..10_000 => grouped(n),
        10_000..1_000_000 => short(1e3, "k"),
        1_000_000..1_000_000_000 => short(1e6, "M"),
        _ => short(1e9, "G"),
    }
}

/// A chart coordinate, to a tenth of a unit (enough at any screen size, and short).
fn fmt(v: f64) -> String {
    format!("{v:.1}")
}

/// The chart's top: the largest day rounded up to 1, 2 or 5 times a power of ten, so the
/// gridlines' labels are round numbers. At least 1, so an empty chart still has a scale.
fn nice_ceiling(max: i64) -> i64 {
    let mut step = 1i64;
    loop {
        for m in [1, 2, 5] {
            let top = step.saturating_mul(m);
            if top >= max || top == i64::MAX {
                return top.max(1);
            }
        }
        step = step.saturating_mul(10);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_is_a_percentage_of_the_window() {
        assert_eq!(share(1, 3), "33.3 %");
        assert_eq!(share(5, 0), "—");
    }

    #[test]
    fn axis_labels_stay_short() {
        for (n, label) in [
            (0, "0"),
            (5_000, "5,000"),
            (25_000, "25k"),
            (2_500_000, "2.5M"),
        ] {
            assert_eq!(compact(n), label);
        }
        assert_eq!(compact(50_000_000_000), "50G");
    }

    #[test]
    fn the_scale_tops_at_a_round_number_at_or_above_the_largest_day() {
        for (max, top) in [
            (0, 1),
            (1, 1),
            (3, 5),
            (7, 10),
            (10, 10),
            (11, 20),
            (4300, 5000),
        ] {
            assert_eq!(nice_ceiling(max), top, "{max}");
        }
        assert_eq!(nice_ceiling(i64::MAX), i64::MAX);
    }
}
