//! The runner's loopback server: the page a case serves (`fixtures.page`), the answers of the
//! eval manifest tool (`/eval/orders`), and the `eval` webhook channel's receiver
//! (`/eval/hook`). On `127.0.0.1:0`, for the run's length.
//!
//! Owns: its listener and the page of the case running. Must not: be reachable from beyond
//! loopback.

use axum::Router;
use axum::extract::{Query, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hermes_engine::loopback::Loopback;
use serde_json::json;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The page served now: `(path, body)`.
type Page = Arc<Mutex<Option<(String, String)>>>;

pub(super) struct FixtureServer {
    base: String,
    page: Page,
    server: Loopback,
}

impl FixtureServer {
    /// Listening once this returns (the listener is bound here; serving runs on the runtime).
    pub(super) fn start() -> std::io::Result<FixtureServer> {
        let page: Page = Arc::default();
        let app = Router::new()
            .route("/eval/orders", get(order))
            .route("/eval/hook", post(hook))
            .fallback(serve_page)
            .with_state(page.clone());
        let server = Loopback::serve(app, "eval fixture")?;
        Ok(FixtureServer {
            base: format!("http://{}", server.addr()),
            page,
            server,
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub(super) fn base(&self) -> &str {
        &self.base
    }

    /// Serve `body` at `path` from now on (and nothing else); the page's URL.
    pub(super) fn set_page(&self, path: &str, body: &str) -> String {
        *hermes_store::util::lock(&self.page) = Some((path.to_string(), body.to_string()));
        format!("{}{path}", self.base)
    }

    pub(super) fn clear_page(&self) {
        *hermes_store::util::lock(&self.page) = None;
    }

    pub(super) async fn stop(self) {
        self.server.stop().await;
    }
}

async fn serve_page(State(page): State<Page>, req: Request) -> Response {
    let served = hermes_store::util::lock(&page).clone();
    match served {
        Some((path, body)) if req.uri().path() == path => {
            ([(header::CONTENT_TYPE, content_type(&body))], body).into_response()
        }
        _ => (StatusCode::NOT_FOUND, "no such page in this case").into_response(),
    }
}

/// A feed for a body that starts like one, JSON for JSON, else HTML.
fn content_type(body: &str) -> &'static str {
    let head = body.trim_start();
    if ["<?xml", "<rss", "<feed"]
        .iter()
        .any(|p| head.starts_with(p))
    {
        "application/xml; charset=utf-8"
    } else if head.starts_with('{') || head.starts_with('[') {
        "application/json"
    } else {
        "text/html; charset=utf-8"
    }
}

/// The eval manifest tool's answer: every order code is shipped, due in two days.
async fn order(Query(q): Query<HashMap<String, String>>) -> Response {
    match q.get("code").map(|c| c.trim()).filter(|c| !c.is_empty()) {
        Some(code) => axum::Json(json!({
            "code": code, "status": "shipped", "carrier": "Parcel Post", "expected_in_days": 2
        }))
        .into_response(),
        None => (
            StatusCode::BAD_REQUEST,
            axum::Json(json!({"error": "give an order code"})),
        )
            .into_response(),
    }
}

async fn hook() -> StatusCode {
    StatusCode::NO_CONTENT
}
