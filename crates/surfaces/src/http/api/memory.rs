//! Long-term memory: `GET /v1/memory?q=`, `POST /v1/memory`, `DELETE /v1/memory/{id}`.

use crate::http::extract::{ClientOrigin, Id, Query, bounded};
use crate::http::{ApiError, ApiResult, ApiState};
use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hermes_engine::memory::LongTerm;
use serde::Deserialize;
use serde_json::{Value, json};

fn memory(s: &ApiState) -> ApiResult<&LongTerm> {
    s.memory.as_ref().ok_or_else(|| {
        ApiError::unavailable(
            "long-term memory is unavailable (its index could not be opened; see the daemon's log)",
        )
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Search {
    #[serde(default)]
    q: String,
    k: Option<usize>,
}

pub(crate) async fn search_memory(State(s): State<ApiState>, Query(q): Query<Search>) -> ApiResult {
    let k = bounded("k", q.k, 5, 100)?;
    let found = memory(&s)?.recall(&q.q, k).await?;
    let facts: Vec<Value> = found
        .iter()
        .map(|r| {
            json!({"id": r.fact.id, "text": r.fact.text, "tags": r.fact.tags,
                   "score": r.score, "keyword_rank": r.keyword_rank,
                   "similarity": r.similarity, "created_at": r.fact.created_at})
        })
        .collect();
    Ok(Json(json!({ "facts": facts })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddFact {
    text: String,
    #[serde(default)]
    tags: Vec<String>,
}

pub(crate) async fn add_memory(
    State(s): State<ApiState>,
    ClientOrigin(origin): ClientOrigin,
    body: Result<Json<AddFact>, JsonRejection>,
) -> ApiResult {
    let Json(req) = body?;
    if req.text.trim().is_empty() {
        return Err(ApiError::bad_request("`text` is empty"));
    }
    if req.text.chars().count() > 2000 {
        return Err(ApiError::bad_request(
            "`text` is over 2000 characters; store one fact at a time",
        ));
    }
    let (fact, how) = memory(&s)?
        .remember(&req.text, &req.tags, origin.as_str())
        .await?;
    let merged = matches!(how, hermes_store::Upsert::Merged);
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": fact.id, "merged": merged})),
    )
        .into_response())
}

pub(crate) async fn forget_memory(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
    if memory(&s)?.forget(&id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::not_found(format!("fact '{id}' not found")))
    }
}
