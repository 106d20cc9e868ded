//! `GET /metrics`: what the parts counted, in the Prometheus text format, with the gauges
//! read now — tasks by state and origin and the outbox's backlog from the database, open
//! circuits from the tool registry. Behind the token like the API unless
//! `server.metrics_public`.

use crate::http::{ApiResult, ApiState};
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use hermes_engine::metrics::{CONTENT_TYPE, Reading};

pub(crate) async fn metrics(State(s): State<ApiState>) -> ApiResult {
    let store = s.agent.store();
    // A database that cannot be read leaves its gauges out of this scrape; the counters, and
    // `/healthz` saying why, are worth more than a failed scrape.
    let tasks = match store.tasks().counts_by_origin().await {
        Ok(counts) => Some(
            counts
                .into_iter()
                .map(|(state, origin, n)| (state.as_str(), origin.as_str(), n))
                .collect(),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot count the tasks");
            None
        }
    };
    let outbox_pending = match store.outbox().backlog().await {
        Ok(b) => Some(b.pending),
        Err(e) => {
            tracing::warn!(error = %e, "metrics: cannot read the outbox's backlog");
            None
        }
    };
    let reading = Reading {
        tasks,
        outbox_pending,
        open_circuits: s.agent.registry().open_circuits(),
    };
    let body = s.metrics.render(&reading);
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], body).into_response())
}
