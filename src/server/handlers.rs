//! The handlers: each validates its input, calls one part, and shapes the answer.

use super::extract::{Id, Query, bounded};
use super::{ApiError, ApiState};
use crate::agent::Submit;
use crate::memory::LongTerm;
use crate::scheduler::JobRequest;
use crate::store::{Origin, TaskFilter, TaskState};
use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

type ApiResult<T = Response> = Result<T, ApiError>;

/// How long a storage fault seen by a request keeps health `degraded`.
const FAULT_MEMORY: Duration = Duration::from_secs(60);

pub async fn health(State(s): State<ApiState>) -> ApiResult {
    let store = s.agent.store();
    let fault = match store.check_writable().await {
        Ok(()) => store.recent_fault(FAULT_MEMORY),
        Err(crate::store::StoreError::Unavailable { fault, .. }) => Some(fault),
        Err(e) => return Err(e.into()),
    };
    let storage = match fault {
        None => "ok".to_string(),
        Some(f) => format!("{f} at {}: {}", store.path().display(), f.hint()),
    };
    // Facts stay saved without the index; recall reads the database until it is rebuilt.
    let index_trouble = s.memory.as_ref().and_then(LongTerm::trouble);
    let memory_index = match (&s.memory, &index_trouble) {
        (None, _) => "off".to_string(),
        (Some(_), None) => "ok".to_string(),
        (Some(_), Some(why)) => {
            format!("rebuilding (recall reads the database meanwhile): {why}")
        }
    };
    let degraded = fault.is_some() || index_trouble.is_some();
    let counts = store.task_counts().await?;
    let count = |st: TaskState| {
        counts
            .iter()
            .find(|(k, _)| *k == st)
            .map(|(_, n)| *n)
            .unwrap_or(0)
    };
    Ok(Json(json!({
        "status": if degraded { "degraded" } else { "ok" },
        "storage": storage,
        "memory_index": memory_index,
        "version": env!("CARGO_PKG_VERSION"),
        "running": s.agent.running_count(),
        "pending": count(TaskState::Pending),
        "memory": s.memory.is_some(),
    }))
    .into_response())
}

/// An unknown path: a page for a browser asking for one outside the API, JSON otherwise.
pub async fn not_found(method: Method, uri: Uri, headers: axum::http::HeaderMap) -> Response {
    if method == Method::GET && !uri.path().starts_with("/v1/") && crate::web::wants_html(&headers)
    {
        return crate::web::not_found_page(uri.path());
    }
    ApiError::not_found("no such endpoint; README.md lists the API's endpoints").into_response()
}

pub async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{method} is not allowed on {}; the `Allow` header lists the methods that are",
            uri.path()
        ),
    )
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateTask {
    task: String,
    #[serde(default)]
    profile: Option<String>,
    #[serde(default)]
    wait: bool,
}

pub async fn create_task(
    State(s): State<ApiState>,
    body: Result<Json<CreateTask>, JsonRejection>,
) -> ApiResult {
    let Json(req) = body?;
    // Subscribe before submitting, so a fast task cannot finish unseen.
    let rx = s.agent.subscribe();
    let task = s
        .agent
        .submit(Submit::new(req.task, Origin::Api, req.profile))
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
    let done = s.agent.wait(&task.id, rx, limit).await?;
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

pub async fn get_task(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
    match s.agent.task_record(&id).await? {
        Some(r) => Ok(Json(r).into_response()),
        None => Err(ApiError::not_found(format!("task '{id}' not found"))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListTasks {
    state: Option<String>,
    limit: Option<i64>,
    job_id: Option<String>,
}

pub async fn list_tasks(State(s): State<ApiState>, Query(q): Query<ListTasks>) -> ApiResult {
    let state = match q.state.as_deref() {
        None | Some("") => None,
        Some(v) => Some(
            v.parse::<TaskState>()
                .map_err(|e| ApiError::bad_request(e.to_string()))?,
        ),
    };
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

pub async fn cancel_task(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
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

pub async fn list_jobs(State(s): State<ApiState>) -> ApiResult {
    let jobs = s.scheduler.list().await?;
    Ok(Json(json!({ "jobs": jobs })).into_response())
}

pub async fn create_job(
    State(s): State<ApiState>,
    body: Result<Json<JobRequest>, JsonRejection>,
) -> ApiResult {
    let Json(req) = body?;
    let job = s.scheduler.add(req, Origin::Api).await?;
    let view = s.scheduler.view(job).await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

pub async fn delete_job(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
    if s.scheduler.remove(&id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::not_found(format!("job '{id}' not found")))
    }
}

pub async fn run_job(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
    let task_id = s.scheduler.run_now(&id).await?;
    Ok((StatusCode::ACCEPTED, Json(json!({ "task_id": task_id }))).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    limit: Option<i64>,
}

pub async fn job_runs(State(s): State<ApiState>, Id(id): Id, Query(q): Query<Limit>) -> ApiResult {
    let limit = bounded("limit", q.limit, 50, 1000)?;
    let runs = s.scheduler.runs(&id, limit).await?;
    Ok(Json(json!({ "runs": runs })).into_response())
}

fn memory(s: &ApiState) -> ApiResult<&LongTerm> {
    s.memory.as_ref().ok_or_else(|| {
        ApiError::unavailable(
            "long-term memory is unavailable (its index could not be opened; see the daemon's log)",
        )
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Search {
    #[serde(default)]
    q: String,
    k: Option<usize>,
}

pub async fn search_memory(State(s): State<ApiState>, Query(q): Query<Search>) -> ApiResult {
    let k = bounded("k", q.k, 5, 100)?;
    let found = memory(&s)?.recall(&q.q, k).await?;
    let facts: Vec<Value> = found
        .iter()
        .map(|r| {
            json!({"id": r.fact.id, "text": r.fact.text, "tags": r.fact.tags,
                   "score": r.score, "created_at": r.fact.created_at})
        })
        .collect();
    Ok(Json(json!({ "facts": facts })).into_response())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddFact {
    text: String,
    #[serde(default)]
    tags: Vec<String>,
}

pub async fn add_memory(
    State(s): State<ApiState>,
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
    let (fact, how) = memory(&s)?.remember(&req.text, &req.tags, "api").await?;
    let merged = matches!(how, crate::store::Upsert::Merged);
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": fact.id, "merged": merged})),
    )
        .into_response())
}

pub async fn forget_memory(State(s): State<ApiState>, Id(id): Id) -> ApiResult {
    if memory(&s)?.forget(&id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(ApiError::not_found(format!("fact '{id}' not found")))
    }
}

/// Each MCP server's state and tools (`{"servers": [...]}`): for `doctor` and scripts.
pub async fn mcp_servers(State(s): State<ApiState>) -> ApiResult {
    Ok(Json(json!({ "servers": s.mcp.status() })).into_response())
}
