//! Signing in and out: `GET /login` asks for `server.token`, `POST /login` checks it in
//! constant time and sets the session cookie, `POST /logout` ends the session. Wrong tokens
//! count towards the address's lockout (`http::throttle`), shared with the API's bearer
//! tokens; a locked-out address gets a 429 page saying how long to wait.
//!
//! Must not: render or log the token, or send the browser anywhere but a path of this site.

use super::guard::{CsrfForm, PageQuery, local_path, see_other};
use super::layout::{PageError, error_page, shell};
use crate::http::session::{self, COOKIE_NAME};
use crate::http::throttle::{Door, Peer};
use crate::http::{ApiState, Session, token_matches};
use axum::extract::rejection::FormRejection;
use axum::extract::{Extension, Form, State};
use axum::http::header::{RETRY_AFTER, SET_COOKIE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::{Markup, html};
use serde::Deserialize;

#[derive(Deserialize)]
pub(crate) struct LoginQuery {
    #[serde(default)]
    next: String,
}

pub(crate) async fn page(
    State(s): State<ApiState>,
    PageQuery(q): PageQuery<LoginQuery>,
) -> Response {
    if s.token.is_empty() {
        // Nothing to sign in to: every page is open on this (loopback) daemon.
        return see_other(local_path(&q.next));
    }
    form(local_path(&q.next), None).into_response()
}

fn form(next: &str, error: Option<&str>) -> Markup {
    shell(
        "Sign in",
        None,
        html! {},
        html! {
            form.card.narrow method="post" action="/login" {
                @if let Some(e) = error {
                    p.error role="alert" #login-error { (e) }
                }
                input type="hidden" name="next" value=(next);
                label for="token" { "Token" }
                p.hint #token-hint { "The value of " code { "server.token" } " in the daemon's settings (often " code { "$HERMES_TOKEN" } ")." }
                input #token type="password" name="token" required autocomplete="current-password" aria-describedby="token-hint" autofocus;
                button type="submit" { "Sign in" }
            }
        },
    )
}

#[derive(Deserialize)]
pub(crate) struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    next: String,
}

pub(crate) async fn submit(
    State(s): State<ApiState>,
    Peer(peer): Peer,
    form_data: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let f = match form_data {
        Ok(Form(f)) => f,
        Err(r) => {
            let message = format!("The sign-in form could not be read: {}", r.body_text());
            return error_page(r.status(), &message);
        }
    };
    let next = local_path(&f.next);
    if s.token.is_empty() {
        return see_other(next);
    }
    if let Err(locked) = s.logins.check(peer) {
        let secs = locked.seconds();
        let message = format!(
            "Too many wrong tokens from your address. Try again in {secs} s (after {} wrong tokens, sign-in waits {} s).",
            s.config.settings.server.max_login_failures, s.config.settings.server.login_window_s
        );
        let page = form(next, Some(&message));
        let retry = [(RETRY_AFTER, HeaderValue::from(secs))];
        return (StatusCode::TOO_MANY_REQUESTS, retry, page).into_response();
    }
    if !token_matches(&f.token, &s.token) {
        s.logins.failed(peer, Door::SignIn);
        let page = form(
            next,
            Some("That is not the token. Check server.token (or $HERMES_TOKEN) and try again."),
        );
        return (StatusCode::UNAUTHORIZED, page).into_response();
    }
    s.logins.succeeded(peer);
    let id = match s.sessions.create().await {
        Ok((id, _)) => id,
        Err(e) => return PageError::from(e).into_response(),
    };
    let mut resp = see_other(next);
    resp.headers_mut()
        .append(SET_COOKIE, session::set_cookie(&id, s.secure_cookies()));
    resp
}

pub(crate) async fn logout(
    State(s): State<ApiState>,
    _session: Extension<Session>,
    headers: HeaderMap,
    CsrfForm(_): CsrfForm,
) -> Response {
    if let Some(id) = session::cookie(&headers, COOKIE_NAME)
        && let Err(e) = s.sessions.remove(id).await
    {
        // Still signed in: say so rather than pretend.
        return PageError::from(e).into_response();
    }
    let mut resp = see_other(if s.token.is_empty() { "/" } else { "/login" });
    resp.headers_mut()
        .append(SET_COOKIE, session::clear_cookie(s.secure_cookies()));
    resp
}
