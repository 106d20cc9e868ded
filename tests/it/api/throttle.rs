//! Guessing the token: after `server.max_login_failures` wrong tokens from one address, its
//! token attempts — bearer or sign-in, right or wrong — are refused with 429 and
//! `Retry-After` until the window has passed; other addresses are not affected. Real sockets,
//! since the lockout keys on the peer's address.

use super::api;
use super::wire::{QUICK, serve_state};
use hermes_surfaces::http::ApiState;
use reqwest::StatusCode;
use reqwest::header::RETRY_AFTER;
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

const TOKEN: &str = "the-right-token-for-tests";

/// A client whose connections come from `from` (any 127.0.0.0/8 address reaches the server).
fn client(from: [u8; 4]) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(Ipv4Addr::from(from)))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// The sign-in form, posted with `token`.
trait SignIn {
    fn signin(self, token: &str) -> Self;
}

impl SignIn for reqwest::RequestBuilder {
    fn signin(self, token: &str) -> Self {
        let body: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("token", token)
            .append_pair("next", "/")
            .finish();
        self.header(
            reqwest::header::CONTENT_TYPE,
            "application/x-www-form-urlencoded",
        )
        .body(body)
    }
}

/// The seconds of a `Retry-After` header; panics when it is missing or not in 1..=60.
fn retry_after(r: &reqwest::Response) -> u64 {
    let secs: u64 = r
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!((1..=60).contains(&secs), "Retry-After: {secs}");
    secs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_bearer_tokens_lock_their_address_out_and_only_it() {
    let a = api(TOKEN).await;
    let state = ApiState {
        token: Arc::from(TOKEN),
        ..ApiState::new(&a.t.app)
    };
    let base = format!("http://{}", serve_state(state, QUICK).await);
    let tasks = format!("{base}/v1/tasks");
    let attacker = client([127, 0, 0, 1]);
    for i in 0..10 {
        let r = attacker
            .get(&tasks)
            .bearer_auth(format!("guess-{i}"))
            .send()
            .await
            .expect("answered");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "guess {i}");
    }
    let r = attacker
        .get(&tasks)
        .bearer_auth("guess-11")
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    retry_after(&r);
    let v: Value = r.json().await.expect("JSON");
    assert_eq!(v["error"]["code"], "too_many_attempts", "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("try again"),
        "{v}"
    );
    // Locked out: the right token is not even compared until the window has passed.
    let r = attacker
        .get(&tasks)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    // The sign-in form too, with a page that says so.
    let r = attacker
        .post(format!("{base}/login"))
        .signin(TOKEN)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    retry_after(&r);
    let page = r.text().await.expect("a page");
    assert!(page.contains("Too many wrong tokens"), "{page}");
    // Health needs no token and stays open.
    let r = attacker
        .get(format!("{base}/healthz"))
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::OK);

    // Another address is not locked out.
    let r = client([127, 0, 0, 2])
        .get(&tasks)
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_at_sign_in_get_a_429_page_after_ten() {
    let a = api(TOKEN).await;
    let state = ApiState {
        token: Arc::from(TOKEN),
        ..ApiState::new(&a.t.app)
    };
    let login = format!("http://{}/login", serve_state(state, QUICK).await);
    let browser = client([127, 0, 0, 3]);
    for i in 0..10 {
        let r = browser
            .post(&login)
            .signin(&format!("guess-{i}"))
            .send()
            .await
            .expect("answered");
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "guess {i}");
        assert!(r.text().await.unwrap_or_default().contains("not the token"));
    }
    let r = browser
        .post(&login)
        .signin("guess-11")
        .send()
        .await
        .expect("answered");
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let secs = retry_after(&r);
    let page = r.text().await.expect("a page");
    assert!(page.contains("Too many wrong tokens"), "{page}");
    assert!(page.contains(&format!("{secs} s")), "{page}");

    // A right token from an address with a few mistakes signs in, and forgives them.
    let other = client([127, 0, 0, 4]);
    for _ in 0..9 {
        let r = other.post(&login).signin("typo").send().await;
        assert_eq!(r.expect("answered").status(), StatusCode::UNAUTHORIZED);
    }
    let r = other.post(&login).signin(TOKEN).send().await;
    assert_eq!(r.expect("answered").status(), StatusCode::SEE_OTHER);
    for _ in 0..9 {
        let r = other.post(&login).signin("typo").send().await;
        assert_eq!(r.expect("answered").status(), StatusCode::UNAUTHORIZED);
    }
}
