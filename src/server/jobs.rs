//! Job endpoints beyond create/list/delete/run: the schedule preview
//! (`GET /v1/schedule?expr=&timezone=`) and pause/resume.

use super::extract::{Id, Query};
use super::{ApiError, ApiState};
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreviewQuery {
    #[serde(default)]
    expr: String,
    timezone: Option<String>,
}

/// Always 200: an unusable schedule is `{"valid": false, "error": …}`, since checking it is
/// what was asked.
pub async fn preview_schedule(
    State(s): State<ApiState>,
    Query(q): Query<PreviewQuery>,
) -> Result<Response, ApiError> {
    Ok(Json(s.scheduler.preview(&q.expr, q.timezone.as_deref())).into_response())
}

pub async fn pause_job(State(s): State<ApiState>, Id(id): Id) -> Result<Response, ApiError> {
    s.scheduler.pause(&id).await?;
    Ok(Json(s.scheduler.get(&id).await?).into_response())
}

pub async fn resume_job(State(s): State<ApiState>, Id(id): Id) -> Result<Response, ApiError> {
    s.scheduler.resume(&id).await?;
    Ok(Json(s.scheduler.get(&id).await?).into_response())
}
