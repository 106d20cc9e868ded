//! The dashboard: server-rendered pages (maud) with a little plain JavaScript, served by the
//! daemon on the API's own router and port, every asset compiled into the binary.
//!
//! Owns: the pages and their forms — overview (`overview`), tasks with their live timeline
//! (`tasks`, `timeline`), jobs (`jobs`), the outbox (`deliveries`), the mail read (`inbox`), long-term memory
//! (`memory`), the redacted settings and doctor's verdicts (`settings`), signing in
//! (`login`) — the page shell (`layout`), the flash messages after a form (`flash`), the assets (`assets`), the security headers of every
//! response ([`security_headers`]) and the session every page runs in (`guard`).
//! Must not: keep a second source of truth. Every page reads the same store and calls the
//! same parts as the API (`Agent`, `Scheduler`, `LongTerm`, `Notifier`); the live timeline is
//! the API's own event stream (`GET /v1/tasks/{id}/events`). No page renders a secret.
//!
//! Security, in short (the reasoning is in `server::session`): with `server.token` set, a page
//! without a live session redirects to `/login`, which takes the token once (constant-time
//! compare) and sets the `hermes_session` cookie; without a token, each browser gets a session
//! on its first page. Either way, every form carries the session's CSRF token and is refused
//! without it, and any change coming from another site is refused before routing. Pages
//! carry a strict Content-Security-Policy: scripts and styles only from `/assets/`, no inline
//! script, no framing.

mod assets;
mod deliveries;
mod flash;
mod guard;
mod inbox;
mod jobs;
mod layout;
mod login;
mod memory;
mod overview;
mod settings;
mod tasks;
mod timeline;

use crate::server::ApiState;
use axum::Router;
use axum::extract::Request;
use axum::http::header::{self, HeaderMap, HeaderValue};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};

/// The policy of every response: nothing but this origin's own scripts, styles, images and
/// connections (the event stream, the preview); no inline script; no framing; forms post here.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; \
     frame-ancestors 'none'; base-uri 'none'";

/// The dashboard's routes, on the API's state; the API's own checks (Host, same-origin) wrap
/// them in `server::router`.
pub fn routes(state: ApiState) -> Router<ApiState> {
    let pages = Router::new()
        .route("/", get(overview::page))
        .route("/tasks", get(tasks::list).post(tasks::start))
        .route("/tasks/{id}", get(tasks::show))
        .route("/tasks/{id}/cancel", post(tasks::cancel))
        .route("/jobs", get(jobs::list).post(jobs::create))
        .route("/jobs/{id}", get(jobs::show))
        .route("/jobs/{id}/{action}", post(jobs::act))
        .route("/deliveries", get(deliveries::list))
        .route("/deliveries/{id}/retry", post(deliveries::retry))
        .route("/inbox", get(inbox::list))
        .route("/memory", get(memory::page).post(memory::add))
        .route("/memory/{id}/forget", post(memory::forget))
        .route("/settings", get(settings::page))
        .route("/settings/checks", get(settings::checks))
        .route("/logout", post(login::logout))
        .route_layer(middleware::from_fn_with_state(
            state,
            guard::require_session,
        ));
    Router::new()
        .route("/login", get(login::page).post(login::submit))
        .route("/assets/{name}", get(assets::serve))
        .merge(pages)
}

/// The security headers, on every response of the router (pages, assets, the API alike).
pub async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    resp
}

/// Whether a request is a browser asking for a page (not a client asking for JSON).
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"))
}

/// The page for a path that is neither a page nor an endpoint.
pub fn not_found_page(path: &str) -> Response {
    layout::error_page(
        axum::http::StatusCode::NOT_FOUND,
        &format!("There is no page at {path}."),
    )
}
