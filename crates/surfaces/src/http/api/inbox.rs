//! The inbox over HTTP: `GET /v1/inbox?state=acted|ignored&channel=email|matrix&limit=` — the
//! messages read on every channel, newest first, with what each became (a task, a command, or
//! ignored with the reason).

use crate::http::extract::{Query, bounded, word_filter};
use crate::http::{ApiError, ApiState};
use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use hermes_store::InboxFilter;
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListInbox {
    state: Option<String>,
    channel: Option<String>,
    limit: Option<i64>,
}

pub(crate) async fn list_inbox(
    State(s): State<ApiState>,
    Query(q): Query<ListInbox>,
) -> Result<Response, ApiError> {
    let state = word_filter(q.state.as_deref())?;
    let channel = word_filter(q.channel.as_deref())?;
    let limit = bounded("limit", q.limit, 50, 1000)?;
    let inbox = s.agent.store().inbox();
    let messages = inbox.list(&InboxFilter::of(state, channel, limit)).await?;
    Ok(Json(json!({ "messages": messages })).into_response())
}
