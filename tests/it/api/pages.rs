//! What the dashboard makes of its URLs: flash messages ("Job added.", "Forgotten.") come from
//! a fixed set of keys in the redirect after a form, and text in the URL is never shown; an
//! address or form a page cannot read is an error page, not a plain-text rejection.

use super::{api, csrf_in, form_post, header_of, text_of};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use tower::ServiceExt;

/// A page's HTML and its flash message, if it shows one.
async fn flash_of(a: &super::Api, path: &str, cookie: &str) -> (String, Option<String>) {
    let req = Request::get(path)
        .header(header::ACCEPT, "text/html")
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .expect("a request");
    let r = a.router.clone().oneshot(req).await.expect("answered");
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    let html = text_of(r).await;
    let flash = html.split("class=\"flash\"").nth(1).map(|rest| {
        let text = rest.split_once('>').map_or("", |(_, t)| t);
        text.split('<').next().unwrap_or("").to_string()
    });
    (html, flash)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_in_the_url_is_never_a_flash_message() {
    let a = api("").await;
    for path in [
        "/jobs?done=Your+account+is+suspended.+Call+555-0100",
        "/memory?done=Your+account+is+suspended&error=Call+555-0100",
        "/deliveries?state=&done=Your+account+is+suspended",
        "/jobs?error=Your+account+is+suspended",
    ] {
        let (html, flash) = flash_of(&a, path, "").await;
        assert_eq!(flash, None, "{path}");
        assert!(
            !html.contains("suspended") && !html.contains("555-0100"),
            "{path}"
        );
    }
    // A key shows its own words.
    let (_, flash) = flash_of(&a, "/jobs?done=job_deleted", "").await;
    assert_eq!(flash.as_deref(), Some("Job deleted."));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_form_redirects_to_a_flash_key() {
    let a = api("").await;
    let send = |req| a.router.clone().oneshot(req);
    // The first page gives this browser its session and the forms' CSRF token.
    let req = Request::get("/jobs")
        .header(header::ACCEPT, "text/html")
        .body(Body::empty())
        .expect("a request");
    let r = send(req).await.expect("answered");
    let cookie = header_of(&r, header::SET_COOKIE)
        .split(';')
        .next()
        .unwrap_or("")
        .to_string();
    let csrf = csrf_in(&text_of(r).await);
    let post = |path: &str, fields: &str| form_post(path, &cookie, format!("csrf={csrf}&{fields}"));
    let follow = |r: axum::response::Response| {
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        header_of(&r, header::LOCATION)
    };

    let to = follow(
        send(post("/jobs", "task=digest&schedule=every+2h"))
            .await
            .expect("answered"),
    );
    assert!(to.ends_with("?done=job_added"), "{to}");
    let job = to
        .trim_start_matches("/jobs/")
        .split('?')
        .next()
        .unwrap_or("")
        .to_string();
    let expect = [
        ("pause", "job_paused", "Paused"),
        ("resume", "job_resumed", "Resumed"),
        ("run", "job_run_started", "Run started"),
        ("delete", "job_deleted", "Job deleted"),
    ];
    for (action, key, words) in expect {
        let to = follow(
            send(post(&format!("/jobs/{job}/{action}"), ""))
                .await
                .expect("answered"),
        );
        assert!(to.ends_with(&format!("?done={key}")), "{action}: {to}");
        let (_, flash) = flash_of(&a, &to, &cookie).await;
        assert!(flash.unwrap_or_default().starts_with(words), "{action}");
    }

    let to = follow(
        send(post("/memory", "text=likes+green+tea&tags="))
            .await
            .expect("answered"),
    );
    assert!(to.ends_with("&done=fact_remembered"), "{to}");
    let (_, flash) = flash_of(&a, &to, &cookie).await;
    assert_eq!(flash.as_deref(), Some("Remembered."));
    let to = follow(
        send(post("/memory", "text=likes+green+tea&tags="))
            .await
            .expect("answered"),
    );
    assert!(to.ends_with("&done=fact_merged"), "{to}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_or_form_a_page_cannot_read_is_an_error_page() {
    let a = api("sign-in-token").await;
    let req = Request::get("/login?next=%2F&next=%2Ftasks")
        .header(header::ACCEPT, "text/html")
        .body(Body::empty())
        .expect("a request");
    let r = a.router.clone().oneshot(req).await.expect("answered");
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(header_of(&r, header::CONTENT_TYPE).starts_with("text/html"));
    assert!(text_of(r).await.contains("The address could not be read"));

    let req = Request::post("/login")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"token": "x"}"#))
        .expect("a request");
    let r = a.router.clone().oneshot(req).await.expect("answered");
    assert_eq!(r.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    assert!(header_of(&r, header::CONTENT_TYPE).starts_with("text/html"));
    assert!(text_of(r).await.contains("sign-in form could not be read"));
}
