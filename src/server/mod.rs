//! The HTTP API (axum): request validation, authentication, and mapping to the agent, the
//! scheduler and memory. The endpoints and their shapes are the contract listed in README.md.
//!
//! Owns: routes, the bearer-token check, body limits, JSON errors.
//! Must not: hold business logic — every handler is a thin call into a part.

mod error;
mod handlers;

pub use error::ApiError;

use crate::agent::Agent;
use crate::memory::LongTerm;
use crate::scheduler::Scheduler;
use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// Largest request body accepted (a task text is capped well below this).
pub const BODY_LIMIT: usize = 64 * 1024;

/// What the handlers reach: cheap-to-clone handles of the parts.
#[derive(Clone)]
pub struct ApiState {
    pub agent: Agent,
    pub scheduler: Scheduler,
    pub memory: Option<LongTerm>,
    /// Empty: no authentication (only allowed on loopback, checked by `serve`).
    pub token: Arc<str>,
}

pub fn router(state: ApiState) -> Router {
    let api = Router::new()
        .route(
            "/v1/tasks",
            post(handlers::create_task).get(handlers::list_tasks),
        )
        .route("/v1/tasks/{id}", get(handlers::get_task))
        .route("/v1/tasks/{id}/cancel", post(handlers::cancel_task))
        .route(
            "/v1/jobs",
            get(handlers::list_jobs).post(handlers::create_job),
        )
        .route("/v1/jobs/{id}", axum::routing::delete(handlers::delete_job))
        .route("/v1/jobs/{id}/run", post(handlers::run_job))
        .route("/v1/jobs/{id}/runs", get(handlers::job_runs))
        .route(
            "/v1/memory",
            get(handlers::search_memory).post(handlers::add_memory),
        )
        .route(
            "/v1/memory/{id}",
            axum::routing::delete(handlers::forget_memory),
        )
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token));
    Router::new()
        .route("/healthz", get(handlers::health))
        .merge(api)
        // After the routes: it is set on each route present, and keeps axum's `Allow` header.
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .with_state(state)
}

/// Serve the API on `listener` until `shutdown` completes; in-flight requests finish first.
pub async fn serve(
    listener: TcpListener,
    state: ApiState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn require_token(
    State(state): State<ApiState>,
    req: Request,
    next: Next,
) -> Result<Response, ApiError> {
    if state.token.is_empty() {
        return Ok(next.run(req).await);
    }
    let given = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .unwrap_or("");
    if token_matches(given, &state.token) {
        Ok(next.run(req).await)
    } else {
        Err(ApiError::new(
            axum::http::StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token; send `Authorization: Bearer <server.token>`",
        ))
    }
}

/// The credentials of an `Authorization: Bearer …` value; the scheme name is case-insensitive
/// (RFC 9110 §11.1), so `bearer x` from a hand-written client works too.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim_start_matches(' '))
}

/// Constant-time in the token's content, so timing does not reveal how much of a guess was right.
fn token_matches(given: &str, expected: &str) -> bool {
    use subtle::ConstantTimeEq;
    given.len() == expected.len() && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
}

/// Whether `host` is a loopback address (or `localhost`); non-loopback binds need a token.
pub fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.trim_matches(['[', ']'])
        .parse::<std::net::IpAddr>()
        .map(|ip| ip.is_loopback())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_exactly() {
        assert!(token_matches("abc", "abc"));
        assert!(!token_matches("abd", "abc"));
        assert!(!token_matches("ab", "abc"));
        assert!(!token_matches("", "abc"));
    }

    #[test]
    fn bearer_scheme_is_case_insensitive() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer abc"), Some("abc"));
        assert_eq!(bearer_token("BEARER  abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearerabc"), None);
        assert_eq!(bearer_token(""), None);
    }

    #[test]
    fn loopback_hosts() {
        assert!(is_loopback_host("127.0.0.1"));
        assert!(is_loopback_host("127.8.0.1"));
        assert!(is_loopback_host("::1"));
        assert!(is_loopback_host("[::1]"));
        assert!(is_loopback_host("localhost"));
        assert!(!is_loopback_host("0.0.0.0"));
        assert!(!is_loopback_host("192.168.1.4"));
        assert!(!is_loopback_host("example.org"));
    }
}
