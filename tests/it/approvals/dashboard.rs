//! Approvals on the dashboard and the API, in process: the `/approvals` page, the buttons on a
//! task's page and the overview (open requests first), the CSRF token on every answer, and
//! `GET /v1/approvals` / `POST /v1/approvals/{id}/deny` with a reason.

use super::{Pool, Ran, gated_settings, model};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use hermes_engine::llm::scripted::ScriptedModel;
use hermes_store::{ApprovalState, TaskState};
use hermes_surfaces::http::{ApiState, router};
use serde_json::{Value, json};
use tower::ServiceExt;

async fn body_text(r: axum::response::Response) -> String {
    let bytes = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .expect("a body");
    String::from_utf8_lossy(&bytes).into_owned()
}

fn page(path: &str, cookie: &str) -> Request<Body> {
    Request::get(path)
        .header(header::ACCEPT, "text/html")
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .expect("a request")
}

fn form_post(path: &str, cookie: &str, body: String) -> Request<Body> {
    Request::post(path)
        .header(header::HOST, "127.0.0.1:8765")
        .header(header::COOKIE, cookie)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(body))
        .expect("a request")
}

fn csrf_in(html: &str) -> String {
    let at = html
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF field")
        + 19;
    html[at..].split('"').next().unwrap_or("").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_on_the_dashboard_and_the_api_with_csrf_and_a_reason() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let p = Pool::start(gated_settings(&model.base_url()), &ran, 1).await;
    let app = router(ApiState::new(p.app()));
    let first = p.submit("[send] tell bob hi").await;
    p.settled(&first.id).await;
    let open = p.open().await;
    let id = open[0].id.clone();

    // The overview shows the open request before anything else; a session comes with it.
    let r = app.clone().oneshot(page("/", "")).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let set = r
        .headers()
        .get(header::SET_COOKIE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let cookie = set.split(';').next().unwrap_or("").to_string();
    let html = body_text(r).await;
    let waiting = html
        .find("Waiting for your approval")
        .expect("open requests shown");
    assert!(
        waiting < html.find("At a glance").expect("the cards"),
        "not first"
    );
    assert!(html.contains(&id));
    for path in ["/approvals".to_string(), format!("/tasks/{}", first.id)] {
        let r = app.clone().oneshot(page(&path, &cookie)).await.unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        let html = body_text(r).await;
        assert!(html.contains(&format!("/approvals/{id}/approve")), "{path}");
        assert!(
            html.contains("&quot;bob&quot;") || html.contains("\"bob\""),
            "{path}"
        );
    }
    let r = app
        .clone()
        .oneshot(page("/approvals", &cookie))
        .await
        .unwrap();
    let csrf = csrf_in(&body_text(r).await);

    // Without the token: refused, and nothing ran.
    let back = format!("back=/tasks/{}", first.id);
    let r = app
        .clone()
        .oneshot(form_post(
            &format!("/approvals/{id}/approve"),
            &cookie,
            back.clone(),
        ))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(ran.sends().is_empty());
    let r = app
        .clone()
        .oneshot(form_post(
            &format!("/approvals/{id}/approve"),
            &cookie,
            format!("csrf={csrf}&{back}"),
        ))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let location = r.headers()[header::LOCATION].to_str().unwrap().to_string();
    assert_eq!(location, format!("/tasks/{}?done=approved", first.id));
    assert_eq!(p.finished(&first.id).await.state, TaskState::Succeeded);
    assert_eq!(ran.sends().len(), 1);
    let a = p.app().agent.approvals().get(&id).await.unwrap();
    assert_eq!(a.decided_by.as_deref(), Some("dashboard"));

    // The API: listed by state, denied with a reason the model is told.
    let second = p.submit("[send] tell bob again").await;
    p.settled(&second.id).await;
    let list = app
        .clone()
        .oneshot(
            Request::get("/v1/approvals?state=open")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(list.status(), StatusCode::OK);
    let v: Value = serde_json::from_str(&body_text(list).await).unwrap();
    let item = &v["approvals"][0];
    for field in [
        "id",
        "task_id",
        "tool",
        "arguments",
        "state",
        "reason",
        "created_at",
        "decided_at",
        "decided_by",
    ] {
        assert!(item.get(field).is_some(), "{field} missing: {item}");
    }
    assert_eq!(item["task_id"], second.id.as_str());
    let deny = Request::post(format!(
        "/v1/approvals/{}/deny",
        item["id"].as_str().unwrap()
    ))
    .header(header::CONTENT_TYPE, "application/json")
    .body(Body::from(json!({"reason": "bob is busy"}).to_string()))
    .unwrap();
    let r = app.clone().oneshot(deny).await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = serde_json::from_str(&body_text(r).await).unwrap();
    assert_eq!(v["state"], "denied");
    assert_eq!(v["reason"], "bob is busy");
    let done = p.finished(&second.id).await;
    assert_eq!(done.state, TaskState::Succeeded);
    assert!(done.answer.unwrap_or_default().contains("bob is busy"));
    assert_eq!(ran.sends().len(), 1);
    let bad = app
        .clone()
        .oneshot(
            Request::get("/v1/approvals?state=maybe")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        p.app()
            .agent
            .approvals()
            .list(Some(ApprovalState::Denied), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    p.stop().await;
}
