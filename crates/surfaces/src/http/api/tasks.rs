//! Tasks: `POST /v1/tasks` (optionally waiting), `GET /v1/tasks`, `GET /v1/tasks/{id}`,
//! `POST /v1/tasks/{id}/cancel`. The live stream of one task is in `events`.

use crate::http::extract::{ClientOrigin, Id, Query, bounded, word_filter};
use crate::http::{ApiError, ApiResult, ApiState};
use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use hermes_engine::agent::Submit;
use hermes_store::{TaskFilter, TaskState};
use serde::Deserialize;
use serde_json::json;
use std::time::Duration;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTask {
    task: String,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    wait: bool,
}

pub(crate) async fn create_task(
    State(s): State<ApiState>,
    ClientOrigin(origin): ClientOrigin,
    body: Result<Json<CreateTask>, JsonRejection>,
) -> ApiResult {
    let Json(req) = body?;
    // Subscribe before submitting, so a fast task cannot finish unseen.
    let rx = s.agent.subscribe();
    let task = s
        .agent
        .submit(Submit::new(req.task, origin, req.profile))
        .await?;
    if !req.wait {
        return Ok((
            StatusCode::ACCEPTED,
            Json(json!({"id": task.id, "state": task.state})),
        )
            .into_response());
    }
    // Long enough for a queue ahead of it plus its own limit; the task's own limit is enforced
    // by the agent, this only bounds the HTTP wait.
    let limit = Duration::from_secs(
        s.agent
            .settings()
            .agent
            .task_timeout_s
            .saturating_mul(3)
            .saturating_add(30),
    );
    // A task waiting for a person is answered as it is (202, `waiting: true`): a client must
    // not hang on a person.
    let done = s.agent.wait_settled(&task.id, rx, limit).await?;
    let record = s
        .agent
        .task_record(&done.id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("task '{}' vanished", done.id)))?;
    let status = if done.state.is_finished() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((status, Json(record)).into_response())
}

pub(crate) async fn get_task(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
    match s.agent.task_record(&id).await? {
        Some(r) => Ok(Json(r).into_response()),
        None => Err(ApiError::not_found(format!("task '{id}' not found"))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListTasks {
    state: Option<String>,
    limit: Option<i64>,
    job_id: Option<String>,
}

pub(crate) async fn list_tasks(State(s): State<ApiState>, Query(q): Query<ListTasks>) -> ApiResult {
    let state: Option<TaskState> = word_filter(q.state.as_deref())?;
    let limit = bounded("limit", q.limit, 50, 1000)?;
    let tasks = s
        .agent
        .list_tasks(&TaskFilter {
            state,
            job_id: q.job_id,
            limit,
        })
        .await?;
    Ok(Json(json!({ "tasks": tasks })).into_response())
}

/// How long a cancel request waits for a running task to reach its final state.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

pub(crate) async fn cancel_task(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
    // Subscribe first: a running task only stops at its next await point, after `cancel`
    // returns, and the answer should be its final state rather than `running`.
    let rx = s.agent.subscribe();
    let t = s.agent.cancel(&id).await?;
    let t = if t.state.is_finished() {
        t
    } else {
        s.agent.wait(&t.id, rx, CANCEL_WAIT).await?
    };
    Ok(Json(json!({"id": t.id, "state": t.state, "reason": t.reason})).into_response())
}
