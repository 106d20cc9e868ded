//! What the model cost, as a person asks for it: real tasks — a job's runs, a task from the
//! command line, one from the API — on a scripted model that bills each a known number of
//! tokens, then `GET /v1/usage` and the `/usage` page, whose figures must be those.

use super::{Api, PATIENCE, text_of};
use crate::common::{self, TestApp, error_of};
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use chrono::{DateTime, NaiveDate, Utc};
use hermes_engine::agent::{RunOptions, Submit};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_store::{Origin, StepKind};
use hermes_surfaces::http::{ApiState, router};
use serde_json::{Value, json};
use std::time::Duration;
use tower::ServiceExt;

/// A zone 14 hours ahead of UTC: its calendar day is not UTC's for most of the day, so a day
/// counted in UTC by mistake shows.
const ZONE: &str = "Pacific/Kiritimati";
/// How long each digest call takes: model time the figures must carry.
const DIGEST_TAKES: Duration = Duration::from_millis(150);

/// The bill per task: prompt and completion tokens the model reports for its one call.
fn bill(task: &str) -> (u64, u64) {
    if task.contains("digest") {
        (1000, 50)
    } else if task.contains("weather") {
        (300, 15)
    } else {
        (200, 10)
    }
}

/// A plain answer with the usage block of [`bill`]; digests take a while.
fn billing_model(req: &Value) -> Reply {
    let task = common::task_text(req);
    let (prompt, completion) = bill(&task);
    let answer = match Reply::text(&format!("answer to: {task}")) {
        Reply::Body(mut body) => {
            body["usage"] = json!({"prompt_tokens": prompt, "completion_tokens": completion,
                                   "total_tokens": prompt + completion});
            Reply::Body(body)
        }
        other => other,
    };
    if task.contains("digest") {
        Reply::Delay(DIGEST_TAKES, Box::new(answer))
    } else {
        answer
    }
}

async fn billed_api() -> Api {
    let model = ScriptedModel::start_with(billing_model).await;
    let mut s = common::settings(&model.base_url());
    s.scheduler.timezone = ZONE.into();
    // The bill's prompt counts are too small to hold the tools offered: `auto` would take that
    // for a server ignoring them, switch to text mode and ask again (both answers billed).
    for p in s.model.profiles.values_mut() {
        p.tool_mode = hermes_config::ToolMode::Native;
    }
    let t = common::app(s, vec![]).await;
    Api {
        router: router(ApiState::new(&t.app)),
        t,
        _model: model,
    }
}

/// Run a task from `origin` in this process to its end; its id.
async fn run_as(t: &TestApp, text: &str, origin: Origin) -> String {
    let task = t
        .app
        .agent
        .create(Submit::new(text, origin, None))
        .await
        .expect("task created");
    let done = t
        .app
        .agent
        .execute(&task.id, RunOptions::default())
        .await
        .expect("task ran");
    assert_eq!(done.state.as_str(), "succeeded", "{done:?}");
    task.id
}

/// Today in [`ZONE`].
fn today() -> NaiveDate {
    let zone: chrono_tz::Tz = ZONE.parse().expect("a zone");
    Utc::now().with_timezone(&zone).date_naive()
}

fn figures(v: &Value) -> [i64; 5] {
    [
        "calls",
        "prompt_tokens",
        "completion_tokens",
        "total_tokens",
        "model_ms",
    ]
    .map(|k| v[k].as_i64().unwrap_or_else(|| panic!("no {k} in {v}")))
}

/// The sum of `figures` over a list.
fn summed(list: &Value) -> [i64; 5] {
    let mut sum = [0; 5];
    for item in list.as_array().expect("a list") {
        for (s, f) in sum.iter_mut().zip(figures(item)) {
            *s += f;
        }
    }
    sum
}

async fn page(api: &Api, path: &str) -> (StatusCode, String) {
    let req = Request::get(path)
        .header(header::ACCEPT, "text/html")
        .body(Body::empty())
        .expect("a request");
    let r = api.router.clone().oneshot(req).await.expect("answered");
    (r.status(), text_of(r).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_shows_what_each_job_and_profile_cost_per_day() {
    let api = billed_api().await;
    let a = api
        .post(
            "/v1/jobs",
            json!({"task": "the morning digest", "schedule": "0 8 * * *", "name": "digest"}),
        )
        .await;
    assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    let job = a.body["id"].as_str().expect("a job id").to_string();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let a = api.post(&format!("/v1/jobs/{job}/run"), json!({})).await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
        tasks.push(a.body["task_id"].as_str().expect("a task id").to_string());
        tokio::time::timeout(PATIENCE, api.t.app.scheduler.wait_idle())
            .await
            .expect("the firing ends in time");
    }
    tasks.push(run_as(&api.t, "water the plants", Origin::Cli).await);
    tasks.push(run_as(&api.t, "check the weather", Origin::Api).await);
    // The model time recorded, call by call, which the figures must add up to.
    let mut recorded_ms = 0;
    let mut digest_ms = 0;
    for id in &tasks {
        let record = api.t.app.store.tasks().record(id).await.expect("read");
        let record = record.expect("stored");
        assert_eq!(record.task.state.as_str(), "succeeded", "{record:?}");
        let calls: Vec<_> = record
            .steps
            .iter()
            .filter(|s| s.row.kind == StepKind::Model)
            .collect();
        assert_eq!(calls.len(), 1, "one model call per task: {record:?}");
        recorded_ms += calls[0].row.duration_ms;
        if record.task.job_id.as_deref() == Some(job.as_str()) {
            digest_ms += calls[0].row.duration_ms;
        }
    }
    assert!(
        digest_ms >= 2 * DIGEST_TAKES.as_millis() as i64,
        "{digest_ms}"
    );

    let before = today();
    let a = api.get("/v1/usage").await;
    let after = today();
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let u = a.body;
    assert_eq!(
        (u["days"].as_i64(), u["timezone"].as_str()),
        (Some(30), Some(ZONE)),
        "{u}"
    );
    // Two digests at 1,000 + 50, the plants at 200 + 10, the weather at 300 + 15.
    assert_eq!(
        figures(&u["totals"]),
        [4, 2500, 125, 2625, recorded_ms],
        "{u}"
    );
    let since: DateTime<Utc> = u["since"].as_str().expect("since").parse().expect("a time");
    let until: DateTime<Utc> = u["until"].as_str().expect("until").parse().expect("a time");
    assert_eq!(until - since, chrono::TimeDelta::days(30), "{u}");

    // Every day of the window, oldest first, the last one today in the zone (not in UTC).
    let days = u["by_day"].as_array().expect("by_day");
    assert_eq!(days.len(), 30, "{u}");
    let last = days[29]["day"].as_str().expect("a day");
    assert!(
        last == before.to_string() || last == after.to_string(),
        "{last} is not today in {ZONE}"
    );
    assert_eq!(summed(&u["by_day"]), figures(&u["totals"]), "{u}");
    let busy: Vec<_> = days.iter().filter(|d| d["calls"] != 0).collect();
    assert_eq!(busy.len(), 1, "every call was made today: {u}");

    // One profile answered everything.
    assert_eq!(u["by_profile"].as_array().map(Vec::len), Some(1), "{u}");
    assert_eq!(u["by_profile"][0]["profile"], "fast", "{u}");
    assert_eq!(figures(&u["by_profile"][0]), figures(&u["totals"]));

    // The digest job first (by name), then the tasks no job started, per origin; dearest first.
    let jobs = &u["by_job"];
    assert_eq!(jobs.as_array().map(Vec::len), Some(3), "{u}");
    assert_eq!(
        (&jobs[0]["job_id"], &jobs[0]["job_name"], &jobs[0]["origin"]),
        (&json!(job), &json!("digest"), &Value::Null),
        "{u}"
    );
    assert_eq!(figures(&jobs[0]), [2, 2000, 100, 2100, digest_ms], "{u}");
    assert_eq!(
        (&jobs[1]["job_id"], &jobs[1]["origin"]),
        (&Value::Null, &json!("api")),
        "{u}"
    );
    assert_eq!(figures(&jobs[1])[..4], [1, 300, 15, 315], "{u}");
    assert_eq!(
        (&jobs[2]["job_id"], &jobs[2]["origin"]),
        (&Value::Null, &json!("cli")),
        "{u}"
    );
    assert_eq!(figures(&jobs[2])[..4], [1, 200, 10, 210], "{u}");
    assert_eq!(summed(jobs), figures(&u["totals"]), "{u}");

    // The CLI's remote backend reads this answer back as the store's type, losing nothing.
    let typed: hermes_store::Usage =
        serde_json::from_value(u.clone()).expect("the answer reads as `Usage`");
    assert_eq!(serde_json::to_value(&typed).expect("serialises"), u);

    // A shorter window holds the same calls in fewer days.
    let week = api.get("/v1/usage?days=7").await.body;
    assert_eq!(week["by_day"].as_array().map(Vec::len), Some(7), "{week}");
    assert_eq!(figures(&week["totals"]), figures(&u["totals"]), "{week}");

    // The page: the same figures, the bar of today titled with them, the job linked.
    let (status, html) = page(&api, "/usage").await;
    assert_eq!(status, StatusCode::OK, "{html}");
    assert!(
        html.contains(r#"role="img""#) && html.contains("<svg"),
        "{html}"
    );
    assert!(
        html.contains("Tokens per day, last 30 days"),
        "the chart's title"
    );
    let bar_title = "2,625 tokens (2,500 prompt, 125 completion), 4 calls";
    assert_eq!(html.matches(bar_title).count(), 1, "{html}");
    assert!(
        html.contains(&format!("<title>{last}: {bar_title}")),
        "today's bar: {html}"
    );
    // Only today has bars (one prompt and one completion rectangle) and a row of figures.
    assert_eq!(html.matches("<tr data-day=").count(), 1, "{html}");
    assert_eq!(html.matches(r#"<rect class="prompt""#).count(), 1, "{html}");
    assert_eq!(
        html.matches(r#"<rect class="completion""#).count(),
        1,
        "{html}"
    );
    assert!(
        html.contains(&format!(r#"<a href="/jobs/{job}">digest</a>"#)),
        "{html}"
    );
    assert!(html.contains(r#"id="usage-total">2,625<"#), "{html}");
    assert!(
        html.contains(r#"<a href="/usage?days=30" aria-current="page">"#),
        "{html}"
    );
    assert!(
        html.contains(r#"href="/usage""#),
        "the navigation links the page"
    );
    let (_, week) = page(&api, "/usage?days=7").await;
    assert!(
        week.contains(r#"<a href="/usage?days=7" aria-current="page">"#),
        "{week}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_calls_yet_is_said_and_a_window_out_of_range_is_refused() {
    let api = super::api("").await;
    let u = api.get("/v1/usage").await.body;
    assert_eq!(figures(&u["totals"]), [0; 5], "{u}");
    let days = u["by_day"].as_array().expect("by_day");
    assert_eq!(days.len(), 30, "{u}");
    assert!(days.iter().all(|d| figures(d) == [0; 5]), "{u}");
    assert_eq!(
        (&u["by_profile"], &u["by_job"]),
        (&json!([]), &json!([])),
        "{u}"
    );
    let (status, html) = page(&api, "/usage").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        html.contains("No model calls yet in the last 30 days."),
        "{html}"
    );
    assert!(!html.contains("<svg"), "no chart of nothing: {html}");

    for (path, words) in [
        ("/v1/usage?days=0", "between 1 and 366"),
        ("/v1/usage?days=367", "between 1 and 366"),
        ("/v1/usage?days=a+week", "days"),
        ("/v1/usage?day=7", "day"),
    ] {
        let a = api.get(path).await;
        assert_eq!(a.status, StatusCode::BAD_REQUEST, "{path}: {}", a.body);
        let (code, message) = error_of(&a.body);
        assert_eq!(code, "bad_request", "{path}");
        assert!(message.contains(words), "{path}: {message}");
    }
    let (status, html) = page(&api, "/usage?days=400").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(html.contains("between 1 and 366"), "{html}");
}
