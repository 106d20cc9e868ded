//! Regression runs over HTTP: `GET /v1/evals?limit=` — the newest eval runs first, each with its
//! per-case results, and per profile the model identity seen last, the one verified, and the
//! change it is on when no eval verified it yet.

use crate::http::extract::{Query, bounded};
use crate::http::{ApiError, ApiState};
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListEvals {
    limit: Option<i64>,
}

pub(crate) async fn list_evals(
    State(s): State<ApiState>,
    Query(q): Query<ListEvals>,
) -> Result<Response, ApiError> {
    let limit = bounded("limit", q.limit, 20, 200)?;
    let store = s.agent.store();
    let runs = store.evals().runs(limit).await?;
    let models: Vec<_> = store
        .models()
        .statuses()
        .await?
        .into_iter()
        .map(|m| {
            let unverified = m.unverified_change().is_some();
            json!({"profile": m.profile, "current": m.current, "verified": m.verified,
                   "change": m.change, "unverified_change": unverified})
        })
        .collect();
    Ok(Json(json!({ "runs": runs, "models": models })).into_response())
}
