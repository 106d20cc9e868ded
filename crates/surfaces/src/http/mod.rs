//! HTTP: the JSON API (`api`) and the dashboard's pages (`pages`) side by side on one router,
//! one state ([`ApiState`]), one error type ([`ApiError`]) and the same extractors; the router
//! is assembled in one place ([`router`]). The API's endpoints and shapes are the contract
//! listed in README.md; the pages are server-rendered (maud) with everything compiled in.
//!
//! Owns: the routes; the Host, same-origin and token/session checks (`guard`, `session`); the
//! lockout after repeated wrong tokens (`throttle`); body limits; JSON errors for every
//! request — a path that does not parse (`extract`), no route at all (`fallback`), what hyper
//! refuses before routing (`wire`); the security headers of every response (`headers`); the
//! connections themselves, their cap and timeouts (`conn`); the HTTP status of every error
//! a part can return (`error`).
//! Must not: hold business logic — every handler is a thin call into a part — or be reached
//! from below: no part imports this module.

mod api;
mod conn;
mod error;
pub(crate) mod extract;
mod fallback;
mod framing;
mod guard;
mod headers;
mod pages;
pub mod session;
pub mod throttle;
mod wire;

pub use conn::{Limits, serve};
pub use error::ApiError;
pub(crate) use session::token_matches;
pub use session::{Session, Sessions};

use crate::app::App;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{delete, get, post};
use hermes_config::Config;
use hermes_engine::agent::Agent;
use hermes_engine::memory::LongTerm;
use hermes_engine::notify::Notifier;
use hermes_engine::scheduler::Scheduler;
use std::sync::Arc;

/// Largest request body accepted. The longest task text (`MAX_TASK_CHARS`, 20,000 characters)
/// fits even written as escaped JSON, where one character takes up to 12 bytes
/// (`\ud83d\ude00`): the text limit then answers, in characters, not this one in bytes.
pub const BODY_LIMIT: usize = 256 * 1024;

/// What a handler returns: a response, or an error that becomes a JSON (or page) answer.
pub(crate) type ApiResult<T = axum::response::Response> = Result<T, ApiError>;

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
    pub inbox: hermes_engine::inbox::Inbox,
    /// The Matrix channel's health (`/healthz`, the inbox page, doctor).
    pub matrix: hermes_engine::channels::Matrix,
    /// The Telegram channel's health (`/healthz`, the inbox page, doctor).
    pub telegram: hermes_engine::channels::Telegram,
    /// What the parts counted, rendered by `GET /metrics`.
    pub metrics: hermes_engine::metrics::Metrics,
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
            sessions: Sessions::new(app.store.clone()),
            logins: throttle::LoginThrottle::from_settings(&app.config.settings.server),
            mcp: app.mcp.clone(),
            inbox: app.inbox.clone(),
            matrix: app.matrix.clone(),
            telegram: app.telegram.clone(),
            metrics: app.metrics.clone(),
        }
    }

    /// The zone pages show times in and usage counts days in: the scheduler's (the user's).
    pub(crate) fn zone(&self) -> chrono_tz::Tz {
        self.agent
            .settings()
            .scheduler
            .timezone
            .parse()
            .unwrap_or(chrono_tz::Tz::UTC)
    }

    /// Whether the session cookie must be marked `Secure`: the dashboard is reached over https.
    pub(crate) fn secure_cookies(&self) -> bool {
        let url = &self.agent.settings().server.public_url;
        url.trim().to_ascii_lowercase().starts_with("https://")
    }
}

/// The whole router, assembled here: the API and the dashboard's pages side by side on one
/// state, behind the same outer checks.
pub fn router(state: ApiState) -> Router {
    // Behind the token like the API, unless `server.metrics_public` opens it to a scraper
    // that cannot send one.
    let scrape = Router::new().route("/metrics", get(api::metrics::metrics));
    let (open, guarded) = if state.config.settings.server.metrics_public {
        (scrape, Router::new())
    } else {
        (Router::new(), scrape)
    };
    let api = api_routes(&state, guarded);
    let dashboard = dashboard_routes(&state);
    Router::new()
        .route("/healthz", get(api::health::health))
        .route("/login", get(pages::login::page).post(pages::login::submit))
        .route("/assets/{name}", get(pages::assets::serve))
        .merge(open)
        .merge(api)
        .merge(dashboard)
        // After the routes: it is set on each route present, and keeps axum's `Allow` header.
        .method_not_allowed_fallback(fallback::method_not_allowed)
        .fallback(fallback::not_found)
        .layer(DefaultBodyLimit::max(BODY_LIMIT))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            note_storage_faults,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            guard::require_same_origin,
        ))
        .layer(middleware::from_fn(headers::security_headers))
        // Outermost: a request for a foreign host is refused before anything else runs.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            guard::require_known_host,
        ))
        .with_state(state)
}

/// The JSON API, with `guarded` (the scrape endpoint when it is not public), behind the token.
/// The token check is a route layer, so it covers only what is added before it here.
fn api_routes(state: &ApiState, guarded: Router<ApiState>) -> Router<ApiState> {
    use api::{approvals, deliveries, evals, events, health, inbox, jobs, memory, tasks, usage};
    Router::new()
        .route("/v1/tasks", post(tasks::create_task).get(tasks::list_tasks))
        .route("/v1/tasks/{id}", get(tasks::get_task))
        .route("/v1/tasks/{id}/events", get(events::task_events))
        .route("/v1/tasks/{id}/cancel", post(tasks::cancel_task))
        .route("/v1/jobs", get(jobs::list_jobs).post(jobs::create_job))
        .route("/v1/jobs/{id}", get(jobs::get_job).delete(jobs::delete_job))
        .route("/v1/jobs/{id}/run", post(jobs::run_job))
        .route("/v1/jobs/{id}/runs", get(jobs::job_runs))
        .route("/v1/jobs/{id}/pause", post(jobs::pause_job))
        .route("/v1/jobs/{id}/resume", post(jobs::resume_job))
        .route("/v1/schedule", get(jobs::preview_schedule))
        .route("/v1/approvals", get(approvals::list_approvals))
        .route("/v1/approvals/{id}/approve", post(approvals::approve))
        .route("/v1/approvals/{id}/deny", post(approvals::deny))
        .route("/v1/deliveries", get(deliveries::list_deliveries))
        .route("/v1/evals", get(evals::list_evals))
        .route(
            "/v1/deliveries/{id}/retry",
            post(deliveries::retry_delivery),
        )
        .route(
            "/v1/memory",
            get(memory::search_memory).post(memory::add_memory),
        )
        .route("/v1/memory/{id}", delete(memory::forget_memory))
        .route("/v1/mcp", get(health::mcp_servers))
        .route("/v1/channels/matrix/rooms", get(health::matrix_rooms))
        .route("/v1/inbox", get(inbox::list_inbox))
        .route("/v1/usage", get(usage::usage))
        .merge(guarded)
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            guard::require_token,
        ))
}

/// The dashboard's pages behind a signed-in session; the login page itself stays outside.
fn dashboard_routes(state: &ApiState) -> Router<ApiState> {
    use pages::{
        approvals, deliveries, evals, guard, inbox, jobs, login, memory, overview, settings, tasks,
        usage,
    };
    Router::new()
        .route("/", get(overview::page))
        .route("/tasks", get(tasks::list).post(tasks::start))
        .route("/tasks/{id}", get(tasks::show))
        .route("/tasks/{id}/cancel", post(tasks::cancel))
        .route("/jobs", get(jobs::list).post(jobs::create))
        .route("/jobs/{id}", get(jobs::show))
        .route("/jobs/{id}/{action}", post(jobs::act))
        .route("/approvals", get(approvals::page))
        .route("/approvals/{id}/approve", post(approvals::approve))
        .route("/approvals/{id}/deny", post(approvals::deny))
        .route("/deliveries", get(deliveries::list))
        .route("/inbox", get(inbox::list))
        .route("/usage", get(usage::page))
        .route("/evals", get(evals::page))
        .route("/deliveries/{id}/retry", post(deliveries::retry))
        .route("/memory", get(memory::page).post(memory::add))
        .route("/memory/{id}/forget", post(memory::forget))
        .route("/settings", get(settings::page))
        .route("/settings/checks", get(settings::checks))
        .route("/logout", post(login::logout))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            guard::require_session,
        ))
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
        .get::<hermes_store::StorageFault>()
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
            "the database {} {} ({fault}); {}",
            store.path().display(),
            fault.headline(),
            fault.hint()
        ),
    ))
}
