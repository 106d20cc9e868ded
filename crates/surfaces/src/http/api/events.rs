//! `GET /v1/tasks/{id}/events`: one task followed live as Server-Sent Events — an `event: step`
//! per trace row (the same JSON as a step of `GET /v1/tasks/{id}`, with the row's `seq` as the
//! event id), then one `event: state` with `{"state", "reason", "answer"}`, and the stream ends.
//! The rows recorded before the request are replayed first, so a late subscriber misses
//! nothing; a reconnecting `EventSource` sends `Last-Event-ID` and gets only what it lacks.
//!
//! Owns: the wire format only. Following (store reads, announcements, the poll) is
//! `Agent::follow`'s.

use crate::http::extract::Id;
use crate::http::{ApiError, ApiState};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use hermes_engine::agent::Followed;
use serde_json::json;

pub(crate) async fn task_events(
    State(s): State<ApiState>,
    Id(id): Id,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    // A reconnect says the last row it got; a first connection gets them all.
    let after: i64 = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    // An unknown task is the usual JSON 404, before any of the stream is sent.
    let followed = s.agent.follow(&id).await?;
    let events = followed.filter_map(move |item| async move {
        let event = match item {
            Ok(Followed::Step(step)) if step.seq <= after => return None,
            Ok(Followed::Step(step)) => Event::default()
                .event("step")
                .id(step.seq.to_string())
                .json_data(&step),
            Ok(Followed::End(task)) => Event::default().event("state").json_data(json!({
                "state": task.state,
                "reason": task.reason,
                "answer": task.answer,
                "error": task.error,
            })),
            Err(e) => {
                tracing::warn!(error = %e, "following a task failed");
                Ok(Event::default()
                    .event("error")
                    .data("the task can no longer be followed; reload the page"))
            }
        };
        Some(event)
    });
    let mut resp = Sse::new(events)
        .keep_alive(KeepAlive::default())
        .into_response();
    // A reverse proxy must pass each event on as it comes, not buffer the stream.
    resp.headers_mut().insert(
        "x-accel-buffering",
        axum::http::HeaderValue::from_static("no"),
    );
    Ok(resp)
}
