//! The outbox over HTTP: `GET /v1/deliveries?state=&limit=` (newest first) and
//! `POST /v1/deliveries/{id}/retry` (a pending or failed notice due now; the sender is woken).

use crate::http::extract::{Id, Query, bounded, word_filter};
use crate::http::{ApiError, ApiState};
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use hermes_store::NoticeFilter;
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListDeliveries {
    state: Option<String>,
    limit: Option<i64>,
}

pub(crate) async fn list_deliveries(
    State(s): State<ApiState>,
    Query(q): Query<ListDeliveries>,
) -> Result<Response, ApiError> {
    let state = word_filter(q.state.as_deref())?;
    let limit = bounded("limit", q.limit, 50, 1000)?;
    let outbox = s.agent.store().outbox();
    let notices = outbox.list(&NoticeFilter::newest(state, limit)).await?;
    Ok(Json(json!({ "deliveries": notices })).into_response())
}

/// A notice id from the path: a whole number.
pub(crate) fn notice_id(id: &str) -> Result<i64, ApiError> {
    id.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "'{id}' is not a delivery id; ids are whole numbers (GET /v1/deliveries lists them)"
        ))
    })
}

pub(crate) async fn retry_delivery(
    State(s): State<ApiState>,
    Id(id): Id,
) -> Result<Response, ApiError> {
    let notice = s.notifier.retry(notice_id(&id)?).await?;
    Ok(Json(notice).into_response())
}
