//! The HTTP API (axum): request validation, authentication, and mapping to the agent, the
//! scheduler and memory. The endpoints and their shapes are the contract listed in README.md.
//!
//! Owns: routes (the dashboard's pages are merged in from `crate::web`, on the same router
//! and behind the same checks), the Host, same-origin and token/session checks (`guard`,
//! `session`), the lockout after repeated wrong tokens (`throttle`), body limits, JSON errors —
//! for every request, including a path that does not parse (`extract`) and what hyper refuses
//! before routing (`wire`) — the connections themselves, their cap and timeouts (`conn`), and
//! the live event stream of a task (`events`).
//! Must not: hold business logic — every handler is a thin call into a part.

mod conn;
mod error;
mod events;
pub(crate) mod extract;
mod framing;
mod guard;
mod handlers;
pub(crate) mod inbox;
mod jobs;
pub(crate) mod outbox;
pub mod session;
pub mod throttle;
mod wire;

pub use conn::Limits;
pub use error::ApiError;
pub use guard::token_matches;
pub use session::{Session, Sessions};

use crate::agent::Agent;
use crate::app::App;
use crate::config::Config;
use crate::memory::LongTerm;
use crate::notify::Notifier;
use crate::scheduler::Scheduler;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
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
    /// The outbox's sender, woken by "retry now"; its channels are checked on /settings.
    pub notifier: Notifier,
    /// The configuration as loaded: /settings shows it (redacted) with doctor's verdicts.
    pub config: Arc<Config>,
    /// Empty: no authentication (only allowed on loopback, checked by `serve`).
    pub token: Arc<str>,
    /// The dashboard's signed-in browsers (see `session`).
    pub sessions: Sessions,
    /// Wrong tokens per client address, and the lockouts they led to.
    pub logins: throttle::LoginThrottle,
    /// The MCP servers, for their status (`GET /v1/mcp`, doctor, /settings).
    pub mcp: crate::mcp::McpManager,
    /// The mailbox's health (`/healthz`).
    pub inbox: crate::inbox::Inbox,
}

impl ApiState {
    /// The state over a built app, with the token from its settings.
    pub fn new(app: &App) -> ApiState {
        ApiState {
            agent: app.agent.clone(),
            scheduler: app.scheduler.clone(),
            memory: app.memory.clone(),
            notifier: app.notifier.clone(),
            config: app.config.clone(),
            token: Arc::from(app.config.settings.server.token.as_str()),
            sessions: Sessions::default(),
            logins: throttle::LoginThrottle::from_settings(&app.config.settings.server),
            mcp: app.mcp.clone(),
            inbox: app.inbox.clone(),
        }
    }

    /// Whether the session cookie must be marked `Secure`: the dashboard is reached over https.
    pub fn secure_cookies(&self) -> bool {
        let url = &self.agent.settings().server.public_url;
        url.trim().to_ascii_lowercase().starts_with("https://")
    }
}

pub fn router(state: ApiState) -> Router {
    let api = Router::new()
        .route(
            "/v1/tasks",
            post(handlers::create_task).get(handlers::list_tasks),
        )
        .route("/v1/tasks/{id}", get(handlers::get_task))
        .route("/v1/tasks/{id}/events", get(events::task_events))
        .route("/v1/tasks/{id}/cancel", post(handlers::cancel_task))
        .route(
            "/v1/jobs",
            get(handlers::list_jobs).post(handlers::create_job),
        )
        .route("/v1/jobs/{id}", axum::routing::delete(handlers::delete_job))
        .route("/v1/jobs/{id}/run", post(handlers::run_job))
        .route("/v1/jobs/{id}/runs", get(handlers::job_runs))
        .route("/v1/jobs/{id}/pause", post(jobs::pause_job))
        .route("/v1/jobs/{id}/resume", post(jobs::resume_job))
        .route("/v1/schedule", get(jobs::preview_schedule))
        .route("/v1/deliveries", get(outbox::list_deliveries))
        .route("/v1/deliveries/{id}/retry", post(outbox::retry_delivery))
        .route(
            "/v1/memory",
            get(handlers::search_memory).post(handlers::add_memory),
        )
        .route(
            "/v1/memory/{id}",
            axum::routing::delete(handlers::forget_memory),
        )
        .route("/v1/mcp", get(handlers::mcp_servers))
        .route("/v1/inbox", get(inbox::list_inbox))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            guard::require_token,
        ));
    Router::new()
        .route("/healthz", get(handlers::health))
        .merge(api)
        .merge(crate::web::routes(state.clone()))
        // After the routes: it is set on each route present, and keeps axum's `Allow` header.
        .method_not_allowed_fallback(handlers::method_not_allowed)
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            note_storage_faults,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            guard::require_same_origin,
        ))
        .layer(middleware::from_fn(crate::web::security_headers))
        // Outermost: a request for a foreign host is refused before anything else runs.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            guard::require_known_host,
        ))
        .with_state(state)
}

/// Serve the API on `listener` within the limits of `server.*` (the connection cap bounded by
/// this process's open-file limit) until `shutdown` completes; in-flight requests finish first.
pub async fn serve(
    listener: TcpListener,
    state: ApiState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let s = &state.config.settings.server;
    let files = conn::open_file_limit();
    let limits = Limits::from_settings(s, files);
    let files_text = files.map_or("unlimited".to_string(), |f| f.to_string());
    if s.max_connections > limits.max_connections as u64 {
        tracing::warn!(
            "server.max_connections is {} but the open-file limit is {files_text}: at most {} connections (raise the limit, e.g. LimitNOFILE= in the systemd unit)",
            s.max_connections,
            limits.max_connections
        );
    }
    tracing::info!(
        "HTTP: at most {} connections at once (open-file limit {files_text}), header timeout {} s, idle timeout {} s",
        limits.max_connections,
        s.header_timeout_s,
        s.idle_timeout_s
    );
    serve_with(listener, state, limits, shutdown).await
}

/// [`serve`] with explicit limits (tests use short timeouts).
pub async fn serve_with(
    listener: TcpListener,
    state: ApiState,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    conn::serve(listener, router(state), limits, shutdown).await
}

/// A request that failed for want of storage: name the database file in the answer (errors
/// are built without it), and let health report the fault for a while.
async fn note_storage_faults(
    axum::extract::State(state): axum::extract::State<ApiState>,
    req: axum::extract::Request,
    next: middleware::Next,
) -> axum::response::Response {
    let resp = next.run(req).await;
    let Some(fault) = resp
        .extensions()
        .get::<crate::store::StorageFault>()
        .copied()
    else {
        return resp;
    };
    let store = state.agent.store();
    store.note_fault(fault);
    axum::response::IntoResponse::into_response(ApiError::new(
        resp.status(),
        "storage_unavailable",
        format!(
            "the database {} cannot be written ({fault}); {}",
            store.path().display(),
            fault.hint()
        ),
    ))
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
