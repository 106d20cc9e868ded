//! The dashboard's assets — one style sheet, one script, one icon — compiled into the binary,
//! so the dashboard needs no network, no CDN and no files beside the binary.
//!
//! Each is linked with a digest of its content in the query (`/assets/app.css?v=…`), so a
//! browser may keep it for a year and still sees a new build's at once.

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// Name, content type, content.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("assets/app.css"),
    ),
    (
        "app.js",
        "text/javascript; charset=utf-8",
        include_str!("assets/app.js"),
    ),
    ("icon.svg", "image/svg+xml", include_str!("assets/icon.svg")),
];

/// The first 12 hex digits of the SHA-256 of everything above: changes with any asset.
static VERSION: LazyLock<String> = LazyLock::new(|| {
    let mut h = Sha256::new();
    for (_, _, body) in ASSETS {
        h.update(body.as_bytes());
    }
    hex::encode(h.finalize())[..12].to_string()
});

/// The URL to link an asset by.
pub(crate) fn url(name: &str) -> String {
    format!("/assets/{name}?v={}", *VERSION)
}

pub(crate) async fn serve(Path(name): Path<String>) -> Response {
    match ASSETS.iter().find(|(n, _, _)| *n == name) {
        Some((_, content_type, body)) => (
            [
                (header::CONTENT_TYPE, HeaderValue::from_static(content_type)),
                (
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, max-age=31536000, immutable"),
                ),
            ],
            *body,
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "no such asset").into_response(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn assets_stay_small() {
        // The dashboard promises to stay far under 300 KB.
        let total: usize = super::ASSETS.iter().map(|(_, _, body)| body.len()).sum();
        assert!(total < 60 * 1024, "{total}");
        assert!(super::url("app.css").starts_with("/assets/app.css?v="));
    }
}
