//! `/memory`: long-term facts — search them, add one, forget one — through `LongTerm`, as
//! the API does (facts added here have source `web`).
//!
//! Must not: touch the facts table or the index directly.

use super::flash::{Flash, flash};
use super::guard::{Back, CsrfForm, PageQuery, encode, see_other};
use super::layout::{Ctx, PageError, PageResult, render, when};
use crate::http::extract::Id;
use crate::http::{ApiError, ApiState};
use axum::extract::State;
use axum::response::IntoResponse;
use hermes_engine::memory::{LongTerm, MeaningStatus, Recalled, ServerState};
use hermes_store::Fact;
use maud::{Markup, html};
use serde::Deserialize;

/// Facts shown for a search, and most recent facts shown without one.
const SHOWN: usize = 20;

fn memory(s: &ApiState) -> Result<&LongTerm, PageError> {
    s.memory.as_ref().ok_or_else(|| {
        PageError(ApiError::unavailable(
            "Long-term memory is unavailable: its index could not be opened (the daemon's log says why).",
        ))
    })
}

#[derive(Deserialize, Default)]
pub(crate) struct SearchQuery {
    #[serde(default)]
    q: String,
    #[serde(default)]
    done: Option<String>,
}

pub(crate) async fn page(ctx: Ctx, PageQuery(q): PageQuery<SearchQuery>) -> PageResult {
    let s = &ctx.state;
    let mem = memory(s)?;
    let query = q.q.trim();
    let found: Vec<(Fact, Option<Recalled>)> = if query.is_empty() {
        let mut all = s.agent.store().facts().all().await?;
        all.sort_by_key(|f| std::cmp::Reverse(f.updated_at));
        all.into_iter().take(SHOWN).map(|f| (f, None)).collect()
    } else {
        mem.recall(query, SHOWN)
            .await
            .map_err(ApiError::internal)?
            .into_iter()
            .map(|r| (r.fact.clone(), Some(r)))
            .collect()
    };
    let meaning = mem.meaning();
    let tz = ctx.tz();
    let body = html! {
        (flash(q.done.as_deref()))
        form.filters method="get" action="/memory" role="search" {
            div.field.grow {
                label for="m-q" { "Search facts" }
                input #m-q type="search" name="q" value=(q.q) placeholder=(if meaning.is_some() { "words or a question (any language)" } else { "words (any language)" });
            }
            button type="submit" { "Search" }
        }
        @if let Some(m) = &meaning { (meaning_line(m)) }
        h2 { @if query.is_empty() { "Most recent facts" } @else { "Found" } }
        @if found.is_empty() {
            p.muted #no-facts { "No facts." }
        } @else {
            ul.facts-list #facts { @for (f, score) in &found {
                li data-id=(f.id) {
                    p.fact { (f.text) }
                    p.muted {
                        @for t in &f.tags { span.tag { (t) } " " }
                        "from " (f.source) " · " (when(f.updated_at, tz))
                        @if let Some(r) = score {
                            " · score " (format!("{:.3}", r.score))
                            @if meaning.is_some() {
                                span.parts {
                                    " · by words " (r.keyword_rank.map_or("—".to_string(), |k| format!("#{k}")))
                                    " · by meaning " (r.similarity.map_or("—".to_string(), |v| format!("{v:.2}")))
                                }
                            }
                        }
                    }
                    form.inline method="post" action={"/memory/" (f.id) "/forget"} {
                        (ctx.csrf())
                        input type="hidden" name="back" value=(q.q);
                        button.danger type="submit" aria-label={"Forget: " (hermes_store::util::text::one_line(&f.text, 40))} { "Forget" }
                    }
                }
            } }
        }
        (add_form(&ctx))
    };
    Ok(render(&ctx, "Memory", body).into_response())
}

/// Recall by meaning's state, said where the results are: away means keyword only.
fn meaning_line(m: &MeaningStatus) -> Markup {
    html! {
        p.muted #meaning {
            "Recall by meaning: " (m.model) " · " (m.vectors) " facts embedded · "
            @match m.server {
                ServerState::Ok => "its server answers",
                ServerState::Starting => "its server not asked yet",
                ServerState::Away => {
                    "its server is away, so recall is by words only: "
                    (m.reason.as_deref().unwrap_or(""))
                }
            }
        }
    }
}

fn add_form(ctx: &Ctx) -> Markup {
    html! {
        section.card aria-labelledby="h-add" {
            h2 #h-add { "Add a fact" }
            form.stack method="post" action="/memory" {
                (ctx.csrf())
                label for="fact-text" { "Fact" }
                textarea #fact-text name="text" rows="2" required maxlength="2000" {}
                label for="fact-tags" { "Tags (comma-separated)" }
                input #fact-tags name="tags" placeholder="preference, home";
                button type="submit" { "Remember" }
            }
        }
    }
}

#[derive(Deserialize)]
pub(crate) struct AddForm {
    text: String,
    #[serde(default)]
    tags: String,
}

pub(crate) async fn add(State(s): State<ApiState>, CsrfForm(f): CsrfForm<AddForm>) -> PageResult {
    let tags: Vec<String> = f.tags.split(',').map(|t| t.trim().to_string()).collect();
    let (fact, how) = memory(&s)?
        .remember(&f.text, &tags, "web")
        .await
        .map_err(ApiError::from)?;
    let done = match how {
        hermes_store::Upsert::Merged => Flash::FactMerged,
        _ => Flash::FactRemembered,
    };
    Ok(see_other(&format!(
        "/memory?q={}&done={}",
        encode(&fact.text),
        done.key()
    )))
}

pub(crate) async fn forget(
    State(s): State<ApiState>,
    Id(id): Id,
    CsrfForm(f): CsrfForm<Back>,
) -> PageResult {
    if !memory(&s)?.forget(&id).await.map_err(ApiError::internal)? {
        return Err(ApiError::not_found(format!("There is no fact {id}.")).into());
    }
    Ok(see_other(&format!(
        "/memory?q={}&done={}",
        encode(&f.back),
        Flash::FactForgotten.key()
    )))
}
