//! `GET /healthz` and `GET /v1/mcp`: what the daemon and its parts are doing, for monitors,
//! `doctor` and scripts.

use crate::http::{ApiResult, ApiState};
use crate::memory::LongTerm;
use crate::store::TaskState;
use axum::Json;
use axum::extract::State;
use axum::response::IntoResponse;
use serde_json::json;
use std::time::Duration;

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
    // The mailbox comes back by itself; meanwhile mail waits there, nothing is lost.
    let inbox = s.inbox.health();
    let degraded = fault.is_some()
        || index_trouble.is_some()
        || matches!(inbox, crate::inbox::Health::Down { .. });
    // With the database unwritable it may be unreadable too (a PostgreSQL server that went
    // away): health still answers, with the count unknown (null).
    let counts = match store.task_counts().await {
        Ok(c) => Some(c),
        Err(_) if fault.is_some() => None,
        Err(e) => return Err(e.into()),
    };
    let count = |st: TaskState| {
        counts.as_ref().map(|counts| {
            counts
                .iter()
                .find(|(k, _)| *k == st)
                .map(|(_, n)| *n)
                .unwrap_or(0)
        })
    };
    Ok(Json(json!({
        "status": if degraded { "degraded" } else { "ok" },
        "storage": storage,
        "memory_index": memory_index,
        "version": env!("CARGO_PKG_VERSION"),
        "running": s.agent.running_count(),
        "pending": count(TaskState::Pending),
        "memory": s.memory.is_some(),
        "inbox": inbox.word(),
        "sandbox": sandbox_health(s.agent.settings().tools.sandbox),
    }))
    .into_response())
}

/// `tools.sandbox` and what of it this kernel cannot enforce (empty: nothing).
fn sandbox_health(mode: crate::tools::sandbox::Mode) -> serde_json::Value {
    let support = crate::tools::sandbox::Support::get();
    json!({
        "mode": mode,
        "landlock_abi": support.landlock_abi,
        "missing": support.missing(),
    })
}

/// Each MCP server's state and tools (`{"servers": [...]}`): for `doctor` and scripts.
pub(crate) async fn mcp_servers(State(s): State<ApiState>) -> ApiResult {
    Ok(Json(json!({ "servers": s.mcp.status() })).into_response())
}
