//! Jobs: list, create, get one, delete, run now, their runs, pause and resume, and the schedule preview
//! (`GET /v1/schedule?expr=&timezone=`) the dashboard's form asks as you type.

use crate::http::extract::{ClientOrigin, Id, Query, bounded};
use crate::http::{ApiError, ApiResult, ApiState};
use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use hermes_engine::scheduler::JobRequest;
use serde::Deserialize;
use serde_json::json;

pub(crate) async fn list_jobs(State(s): State<ApiState>) -> ApiResult {
    let jobs = s.scheduler.list().await?;
    Ok(Json(json!({ "jobs": jobs })).into_response())
}

pub(crate) async fn create_job(
    State(s): State<ApiState>,
    ClientOrigin(origin): ClientOrigin,
    body: Result<Json<JobRequest>, JsonRejection>,
) -> ApiResult {
    let Json(req) = body?;
    let job = s.scheduler.add(req, origin).await?;
    let view = s.scheduler.view(job).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

pub(crate) async fn get_job(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
    Ok(Json(s.scheduler.get(&id).await?).into_response())
}

pub(crate) async fn delete_job(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
    if s.scheduler.remove(&id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::not_found(format!("job '{id}' not found")))
    }
}

pub(crate) async fn run_job(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
    let task_id = s.scheduler.run_now(&id).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "task_id": task_id }))).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Limit {
    limit: Option<i64>,
}

pub(crate) async fn job_runs(
    State(s): State<ApiState>,
    Id(id): Id,
    Query(q): Query<Limit>,
) -> ApiResult {
    let limit = bounded("limit", q.limit, 50, 1000)?;
    let runs = s.scheduler.runs(&id, limit).await?;
    Ok(Json(json!({ "runs": runs })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PreviewQuery {
    #[serde(default)]
    expr: String,
    timezone: Option<String>,
}

/// Always 200: an unusable schedule is `{"valid": false, "error": …}`, since checking it is
/// what was asked.
pub(crate) async fn preview_schedule(
    State(s): State<ApiState>,
    Query(q): Query<PreviewQuery>,
) -> Result<Response, ApiError> {
    Ok(Json(s.scheduler.preview(&q.expr, q.timezone.as_deref())).into_response())
}

pub(crate) async fn pause_job(State(s): State<ApiState>, Id(id): Id) -> Result<Response, ApiError> {
    s.scheduler.pause(&id).await?;
    Ok(Json(s.scheduler.get(&id).await?).into_response())
}

pub(crate) async fn resume_job(
    State(s): State<ApiState>,
    Id(id): Id,
) -> Result<Response, ApiError> {
    s.scheduler.resume(&id).await?;
    Ok(Json(s.scheduler.get(&id).await?).into_response())
}
