//! Extractors whose rejections are JSON errors like every other answer of the API.

use super::ApiError;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

/// The `{id}` of a route. A path that does not decode (`/v1/tasks/%FF`) is a JSON 400, not
/// axum's plain-text rejection.
pub(crate) struct Id(pub String);

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

/// On whose behalf a request creates a task, a job or a fact: the header `X-Hermes-Origin`,
/// which the CLI (`cli`) and `hermes-agent mcp` (`mcp`) send when they go through the daemon,
/// so what they make counts under their own origin as it does without one. Absent: `api`.
/// Nothing else may be claimed (a job's origin decides what it may do).
pub(crate) struct ClientOrigin(pub hermes_store::Origin);

/// The header's name.
pub(crate) const ORIGIN_HEADER: &str = "x-hermes-origin";

impl<S: Send + Sync> FromRequestParts<S> for ClientOrigin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<ClientOrigin, ApiError> {
        use hermes_store::Origin;
        let Some(value) = parts.headers.get(ORIGIN_HEADER) else {
            return Ok(ClientOrigin(Origin::Api));
        };
        match value.to_str().map(str::trim) {
            Ok("cli") => Ok(ClientOrigin(Origin::Cli)),
            Ok("mcp") => Ok(ClientOrigin(Origin::Mcp)),
            Ok("api") => Ok(ClientOrigin(Origin::Api)),
            _ => Err(ApiError::bad_request(
                "X-Hermes-Origin may only be cli, mcp or api (leave it out for api)",
            )),
        }
    }
}

/// A route's query string read into `T`. An unknown or malformed parameter is a JSON 400
/// naming it, not axum's plain-text rejection.
pub(crate) struct Query<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Query<T>, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(q)| Query(q))
            .map_err(|r| ApiError::bad_request(r.body_text()))
    }
}

/// A numeric parameter such as `limit`: `default` when absent, else it must lie in `1..=max`.
pub(crate) fn bounded<N>(name: &str, value: Option<N>, default: N, max: N) -> Result<N, ApiError>
where
    N: PartialOrd + From<u8> + std::fmt::Display + Copy,
{
    let v = value.unwrap_or(default);
    if v < N::from(1) || v > max {
        return Err(ApiError::bad_request(format!(
            "`{name}` must be between 1 and {max}"
        )));
    }
    Ok(v)
}

/// A stored word from a query or form value (`?state=`, `?channel=`, `?origin=`); empty means
/// "any". A word outside the set is a 400 that lists the set's words.
pub(crate) fn word_filter<T>(v: Option<&str>) -> Result<Option<T>, ApiError>
where
    T: std::str::FromStr<Err = hermes_store::UnknownWord>,
{
    match v.map(str::trim) {
        None | Some("") => Ok(None),
        Some(word) => word
            .parse()
            .map(Some)
            .map_err(|e: hermes_store::UnknownWord| ApiError::bad_request(e.to_string())),
    }
}
