//! Approvals: `GET /v1/approvals?state=open|approved|denied|expired`,
//! `POST /v1/approvals/{id}/approve`, `POST /v1/approvals/{id}/deny` (optional `{"reason"}`).
//! Each answer goes through the one door, `Approvals::decide`.

use crate::http::extract::{Id, Query, bounded, word_filter};
use crate::http::{ApiError, ApiResult, ApiState};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use hermes_engine::agent::{ApprovalError, Decision, VIA_HEADER, answered_via};
use hermes_store::ApprovalState;
use serde::Deserialize;
use serde_json::json;

impl From<ApprovalError> for ApiError {
    fn from(e: ApprovalError) -> ApiError {
        match e {
            ApprovalError::NotFound(_) => ApiError::not_found(e.to_string()),
            ApprovalError::AlreadyDecided { .. } | ApprovalError::Expired { .. } => {
                ApiError::conflict(e.to_string())
            }
            ApprovalError::Store(s) => s.into(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListApprovals {
    state: Option<String>,
    limit: Option<i64>,
}

pub(crate) async fn list_approvals(
    State(s): State<ApiState>,
    Query(q): Query<ListApprovals>,
) -> ApiResult {
    let state: Option<ApprovalState> = word_filter(q.state.as_deref())?;
    let limit = bounded("limit", q.limit, 100, 1000)?;
    let approvals = s.agent.approvals().list(state, limit).await?;
    Ok(Json(json!({ "approvals": approvals })).into_response())
}

/// Who answered: `api`, or the tool the client names in [`VIA_HEADER`].
fn via(headers: &HeaderMap) -> &'static str {
    answered_via(headers.get(VIA_HEADER).and_then(|v| v.to_str().ok()))
}

pub(crate) async fn approve(
    State(s): State<ApiState>,
    Id(id): Id,
    headers: HeaderMap,
) -> ApiResult {
    let a = s
        .agent
        .approvals()
        .decide(&id, Decision::Approve, via(&headers))
        .await?;
    Ok(Json(a).into_response())
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DenyBody {
    #[serde(default)]
    reason: Option<String>,
}

/// The body is optional: none, or `{"reason": "..."}`.
pub(crate) async fn deny(
    State(s): State<ApiState>,
    Id(id): Id,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult {
    let body: DenyBody = if body.iter().all(u8::is_ascii_whitespace) {
        DenyBody::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            ApiError::bad_request(format!(
                "the body must be empty or {{\"reason\": \"...\"}}: {e}"
            ))
        })?
    };
    let a = s
        .agent
        .approvals()
        .decide(
            &id,
            Decision::Deny {
                reason: body.reason,
            },
            via(&headers),
        )
        .await?;
    Ok(Json(a).into_response())
}
