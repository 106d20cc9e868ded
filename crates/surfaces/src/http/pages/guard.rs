//! The session every page runs in, and the CSRF check of every form.
//!
//! A page request with a live `hermes_session` cookie runs with that [`Session`] in its
//! extensions. Without one: when `server.token` is set, the browser is sent to `/login` (and
//! back afterwards); when it is not, a session is made on the spot — it carries the CSRF token
//! the page's forms need (while the database cannot be written, a page that only reads runs in
//! a session that is not stored). [`CsrfForm`] refuses a form whose `csrf` field is not its session's;
//! it and [`PageQuery`] answer what they cannot read with an error page.

use super::layout::{PageError, error_page};
use crate::http::ApiState;
use crate::http::session::{self, Session};
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request, State};
use axum::http::header::{LOCATION, SET_COOKIE};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hermes_store::StoreError;
use maud::html;
use serde::Deserialize;
use serde::de::DeserializeOwned;

pub(crate) async fn require_session(
    State(s): State<ApiState>,
    mut req: Request,
    next: Next,
) -> Response {
    let found = match s.sessions.from_headers(req.headers()).await {
        Ok(found) => found,
        Err(e) => return PageError::from(e).into_response(),
    };
    if let Some((_, sess)) = found {
        req.extensions_mut().insert(sess);
        return next.run(req).await;
    }
    if s.token.is_empty() {
        let (id, sess) = match s.sessions.create().await {
            Ok((id, sess)) => (Some(id), sess),
            // A full disk is when one most wants to look: the page is still shown, in a
            // session that is not stored (and so sets no cookie).
            Err(StoreError::Unavailable { .. }) if session::is_safe(req.method()) => {
                (None, Session::unsaved())
            }
            Err(e) => return PageError::from(e).into_response(),
        };
        req.extensions_mut().insert(sess);
        let mut resp = next.run(req).await;
        if let Some(id) = id {
            resp.headers_mut()
                .append(SET_COOKIE, session::set_cookie(&id, s.secure_cookies()));
        }
        return resp;
    }
    let here = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let cross_site = req
        .headers()
        .get("sec-fetch-site")
        .is_some_and(|v| v == "cross-site");
    if req.method() == Method::GET && cross_site {
        // A link from another site (a digest in webmail): the browser held back the
        // SameSite=Strict cookie. Loading the page again from here sends it, if there is one.
        return bounce(&here);
    }
    let next_path = if req.method() == Method::GET {
        here
    } else {
        "/".into()
    };
    see_other(&format!("/login?next={}", encode(&next_path)))
}

/// A page that loads `path` again, as a navigation of our own site.
fn bounce(path: &str) -> Response {
    let body = html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content={"0;url=" (path)};
                title { "hermes-agent" }
            }
            body { p { a href=(path) { "Continue to the dashboard" } } }
        }
    };
    body.into_response()
}

/// `303 See Other` to a path of this site.
pub(crate) fn see_other(path: &str) -> Response {
    let location = HeaderValue::from_str(path).unwrap_or_else(|_| HeaderValue::from_static("/"));
    (StatusCode::SEE_OTHER, [(LOCATION, location)]).into_response()
}

/// Percent-encode a value for a query string.
pub(crate) fn encode(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// A path the sign-in may send the browser back to: a path of this site, never another site
/// (`//evil.example`, `/\evil.example` and absolute URLs are refused).
pub(crate) fn local_path(next: &str) -> &str {
    let ok = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(|c| c.is_control());
    if ok { next } else { "/" }
}

/// A page's query string read into `T`; one that does not fit (a parameter given twice) is an
/// error page, not axum's plain-text rejection.
pub(crate) struct PageQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for PageQuery<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Response> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(q)| PageQuery(q))
            .map_err(|r| {
                error_page(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "The address could not be read ({}). Use the page's own links and forms.",
                        r.body_text()
                    ),
                )
            })
    }
}

/// A form that changes something: refused unless its `csrf` field is its session's token.
/// `T` is the rest of the form (unknown fields, `csrf` among them, are ignored); a form that
/// carries nothing but the token is a `CsrfForm` of [`NoFields`].
pub(crate) struct CsrfForm<T = NoFields>(pub T);

/// The fields of a form that only carries its CSRF token.
#[derive(Deserialize)]
pub(crate) struct NoFields {}

/// A form whose one field says where to return: the list view (a filter, a search) the button
/// was pressed in.
#[derive(Deserialize)]
pub(crate) struct Back {
    #[serde(default)]
    pub back: String,
}

impl<T> FromRequest<ApiState> for CsrfForm<T>
where
    T: DeserializeOwned + Send,
{
    type Rejection = Response;

    async fn from_request(req: Request, state: &ApiState) -> Result<Self, Response> {
        let session = req.extensions().get::<Session>().cloned();
        let unreadable = |detail: String| {
            error_page(
                StatusCode::BAD_REQUEST,
                &format!("The form could not be read: {detail}"),
            )
        };
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|e| unreadable(e.body_text()))?;
        let csrf = url::form_urlencoded::parse(&body)
            .find(|(k, _)| k == "csrf")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        match session {
            Some(s) if session::csrf_matches(&s, &csrf) => {}
            _ => {
                return Err(error_page(
                    StatusCode::FORBIDDEN,
                    "This form has expired or did not come from the dashboard (its CSRF token does not match). Reload the page and try again.",
                ));
            }
        }
        serde_urlencoded::from_bytes(&body)
            .map(CsrfForm)
            .map_err(|e| unreadable(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_local_paths_come_back() {
        assert_eq!(local_path("/tasks/abc?x=1"), "/tasks/abc?x=1");
        for bad in [
            "//evil.example",
            "/\\evil.example",
            "https://evil.example",
            "",
            "tasks",
        ] {
            assert_eq!(local_path(bad), "/", "{bad}");
        }
    }
}
