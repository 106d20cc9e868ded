//! What answers when no route does: an unknown path (a page for a browser, JSON for the API)
//! and a method a route does not take.

use super::{ApiError, pages};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};

/// An unknown path: a page for a browser asking for one outside the API, JSON otherwise.
pub(super) async fn not_found(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    if method == Method::GET && !uri.path().starts_with("/v1/") && pages::wants_html(&headers) {
        return pages::not_found_page(uri.path());
    }
    ApiError::not_found("no such endpoint; README.md lists the API's endpoints").into_response()
}

pub(super) async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!(
            "{method} is not allowed on {}; the `Allow` header lists the methods that are",
            uri.path()
        ),
    )
}
