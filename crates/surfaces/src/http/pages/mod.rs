//! The dashboard: server-rendered pages (maud) with a little plain JavaScript, served by the
//! daemon on the API's own router and port, every asset compiled into the binary.
//!
//! Owns: the pages and their forms — overview (`overview`), tasks with their live timeline
//! (`tasks`, `timeline`), jobs (`jobs`), the outbox (`deliveries`), the mail read (`inbox`),
//! the regression runs and verified models (`evals`), held tool calls to approve or deny
//! (`approvals`), long-term memory (`memory`), what the model cost per day, profile and job
//! (`usage`), the redacted settings and doctor's verdicts (`settings`), signing in
//! (`login`) — the page shell (`layout`), the flash messages after a form (`flash`), the assets
//! (`assets`) and the session every page runs in (`guard`). The security headers of every
//! response are `http/headers.rs`'s.
//! Must not: keep a second source of truth. Every page reads the same store and calls the
//! same parts as the API (`Agent`, `Scheduler`, `LongTerm`, `Notifier`); the live timeline is
//! the API's own event stream (`GET /v1/tasks/{id}/events`). No page renders a secret.
//!
//! Security, in short (the reasoning is in `http::session`): with `server.token` set, a page
//! without a live session redirects to `/login`, which takes the token once (constant-time
//! compare) and sets the `hermes_session` cookie; without a token, each browser gets a session
//! on its first page. Either way, every form carries the session's CSRF token and is refused
//! without it, and any change coming from another site is refused before routing. Pages
//! carry a strict Content-Security-Policy: scripts and styles only from `/assets/`, no inline
//! script, no framing.

pub(super) mod approvals;
pub(super) mod assets;
pub(super) mod deliveries;
pub(super) mod evals;
mod flash;
pub(super) mod guard;
pub(super) mod inbox;
pub(super) mod jobs;
mod layout;
pub(super) mod login;
pub(super) mod memory;
pub(super) mod overview;
pub(super) mod settings;
pub(super) mod tasks;
mod timeline;
pub(super) mod usage;

use axum::http::header::{self, HeaderMap};
use axum::response::Response;

/// Whether a request is a browser asking for a page (not a client asking for JSON).
pub(crate) fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"))
}

/// The page for a path that is neither a page nor an endpoint.
pub(crate) fn not_found_page(path: &str) -> Response {
    layout::error_page(
        axum::http::StatusCode::NOT_FOUND,
        &format!("There is no page at {path}."),
    )
}
