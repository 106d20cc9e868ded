//! Usage over HTTP: `GET /v1/usage?days=N` — model calls, prompt and completion tokens and
//! model time over the last N calendar days (default 30, at most 366; today included, days in
//! `scheduler.timezone`), per day, per profile and per job, dearest first.

use crate::http::extract::{Query, bounded};
use crate::http::{ApiError, ApiState};
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use hermes_store::{DEFAULT_USAGE_DAYS, MAX_USAGE_DAYS, UsageWindow};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UsageQuery {
    days: Option<u32>,
}

pub(crate) async fn usage(
    State(s): State<ApiState>,
    Query(q): Query<UsageQuery>,
) -> Result<Response, ApiError> {
    let days = bounded("days", q.days, DEFAULT_USAGE_DAYS, MAX_USAGE_DAYS)?;
    let window = UsageWindow::last_days(days, s.zone(), chrono::Utc::now());
    let usage = s.agent.store().tasks().usage(&window).await?;
    Ok(Json(usage).into_response())
}
