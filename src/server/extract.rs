//! Extractors whose rejections are JSON errors like every other answer of the API.

use super::ApiError;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;

/// The `{id}` of a route. A path that does not decode (`/v1/tasks/%FF`) is a JSON 400, not
/// axum's plain-text rejection.
pub struct Id(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Id {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Id, ApiError> {
        axum::extract::Path::<String>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(id)| Id(id))
            .map_err(|r| {
                ApiError::bad_request(format!(
                    "the path could not be read ({}); ids are plain text such as 3f2a9c1e0b7d4a66",
                    r.body_text()
                ))
            })
    }
}
