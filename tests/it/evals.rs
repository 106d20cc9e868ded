//! Evals as a person meets them: `hermes-agent eval` (the real binary, a case of their own, the
//! table, the exit code, the run recorded, doctor's view of the verified model afterwards), and
//! what the API and the dashboard show of runs, verified models and the model a job last used.

use crate::common;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::llm::{Identity, Told};
use hermes_engine::scheduler::JobRequest;
use hermes_store::{Origin, PauseReason, Store};
use hermes_surfaces::eval::ModelWatch;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// A GET through the whole router, as a browser (`html`) or an API client; the status and body.
async fn get(router: &axum::Router, path: &str, html: bool) -> (u16, String) {
    use tower::ServiceExt;
    let accept = if html {
        "text/html"
    } else {
        "application/json"
    };
    let req = axum::http::Request::get(path)
        .header(axum::http::header::ACCEPT, accept)
        .body(axum::body::Body::empty())
        .expect("a request");
    let resp = router.clone().oneshot(req).await.expect("answered");
    let status = resp.status().as_u16();
    let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .expect("a body");
    (status, common::text(&body))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_and_dashboard_show_runs_verified_models_and_what_answered_a_job() {
    let model = ScriptedModel::start_with(|req| {
        let task = common::task_text(req);
        if task.contains("capital of France") {
            Reply::text("Paris.")
        } else {
            Reply::text(&format!("done: {task}"))
        }
    })
    .await;
    model.report_model("qwen-test");
    let t = common::app(common::settings(&model.base_url()), vec![]).await;
    let app = &t.app;
    let router = hermes_surfaces::http::router(hermes_surfaces::http::ApiState::new(app));
    let job = app
        .scheduler
        .add(
            JobRequest {
                task: "check the garden".into(),
                schedule: "every 6h".into(),
                ..JobRequest::default()
            },
            Origin::Cli,
        )
        .await
        .expect("job");
    let seen = app
        .agent
        .gateway()
        .check_identity("fast")
        .await
        .expect("check")
        .expect("an identity");
    let run = app.scheduler.run_now_wait(&job.id).await.expect("job ran");
    let task_id = run.task_id.clone().expect("the run's task");

    let (status, page) = get(&router, &format!("/jobs/{}", job.id), true).await;
    assert_eq!(status, 200, "{page}");
    let last = page
        .split("id=\"last-model\"")
        .nth(1)
        .expect("the job page shows its last model");
    assert!(
        last.contains("qwen-test") && last.contains("not verified"),
        "{last}"
    );
    let (_, page) = get(&router, &format!("/tasks/{task_id}"), true).await;
    assert!(
        page.contains("fast (qwen-test)"),
        "the task page names who answered"
    );

    let report = common::run_evals(
        app,
        None,
        &["plain-answer"],
        Some(common::fast_retry()),
        &|_| {},
    )
    .await;
    assert!(report.all_passed(), "{:?}", report.run.results);
    assert_eq!(report.verified, [("fast".to_string(), seen.key())]);

    let (_, page) = get(&router, &format!("/jobs/{}", job.id), true).await;
    let last = page.split("id=\"last-model\"").nth(1).expect("last model");
    let last = last.split("</dd>").next().unwrap_or_default();
    assert!(
        last.contains("verified") && !last.contains("not verified"),
        "{last}"
    );
    app.scheduler
        .pause_for(&job.id, PauseReason::ModelChanged)
        .await
        .expect("held");
    let (_, page) = get(&router, &format!("/jobs/{}", job.id), true).await;
    assert!(page.contains("data-reason=\"model_changed\""), "{page}");

    let (status, body) = get(&router, "/v1/evals", false).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["runs"][0]["passed"], 1, "{v}");
    assert_eq!(v["runs"][0]["results"][0]["case"], "plain-answer", "{v}");
    assert_eq!(v["runs"][0]["results"][0]["verdict"], "passed", "{v}");
    assert_eq!(v["models"][0]["profile"], "fast", "{v}");
    assert_eq!(v["models"][0]["verified"]["identity"], seen.key(), "{v}");
    assert_eq!(v["models"][0]["unverified_change"], false, "{v}");
    let (status, page) = get(&router, "/evals", true).await;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("plain-answer") && page.contains(&seen.key()),
        "{page}"
    );
    let (_, page) = get(&router, "/", true).await;
    assert!(!page.contains("model-changed"), "no badge while verified");

    // The profile is seen answering as another model: a badge until an eval verifies it.
    let watch = ModelWatch::new(app, &TaskTracker::new(), CancellationToken::new());
    let other = Identity {
        model: "qwen-test-2".into(),
        told: Some(Told::Greedy("0123456789ab".into())),
    };
    let change = watch.observe("fast", &other).await.expect("observe");
    assert!(change.is_some(), "a change from the verified model");
    let (_, page) = get(&router, "/", true).await;
    assert!(
        page.contains("model-changed") && page.contains("qwen-test-2"),
        "{page}"
    );
    let (_, page) = get(&router, "/evals", true).await;
    assert!(page.contains("changed, not verified"), "{page}");
    let (_, body) = get(&router, "/v1/evals", false).await;
    let v: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(v["models"][0]["unverified_change"], true, "{v}");
}

/// The real binary on a settings file whose profiles talk to `model_url`, with the person's
/// config home (and so their evals dir) inside `dir`.
fn hermes(dir: &std::path::Path, model_url: &str, args: &[&str]) -> std::process::Output {
    let config = dir.join("settings.yaml");
    let yaml = format!(
        "model:\n  profiles:\n    fast: {{base_url: \"{model_url}\", model: scripted, timeout_s: 20}}\n    \
         pro: {{base_url: \"{model_url}\", model: scripted, timeout_s: 20}}\n\
         tools:\n  manifests_dir: /nonexistent-hermes-eval-test-tools\n\
         context:\n  summary_enabled: false\n\
         scheduler:\n  timezone: UTC\n"
    );
    std::fs::write(&config, yaml).expect("settings");
    std::process::Command::new(env!("CARGO_BIN_EXE_hermes-agent"))
        .arg("--config")
        .arg(&config)
        .args(args)
        .env("HERMES_DATA_DIR", dir.join("data"))
        .env_remove("HERMES_CONFIG")
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"))
        .env("RUST_LOG", "warn")
        .output()
        .expect("the binary runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_prints_a_table_records_the_run_and_exits_1_when_a_case_fails() {
    let model = ScriptedModel::start_with(|req| {
        let task = common::task_text(req);
        if task.contains("capital of France") {
            Reply::text("Paris.")
        } else {
            Reply::text(&format!("done: {task}"))
        }
    })
    .await;
    model.list_models(Some(&["scripted"]));
    let url = model.base_url();
    let dir = tempfile::tempdir().expect("dir");
    let evals = dir.path().join("xdg-config/hermes-agent/evals");
    std::fs::create_dir_all(&evals).expect("evals dir");
    std::fs::write(
        evals.join("mine.yaml"),
        "name: mine-fails\ntask: Say hello.\nexpect: {answer_contains: goodbye}\n",
    )
    .expect("case");
    let run = |args: &'static [&'static str]| {
        let (d, u) = (dir.path().to_path_buf(), url.clone());
        tokio::task::spawn_blocking(move || hermes(&d, &u, args))
    };

    let out = run(&["eval", "--case", "plain-answer", "--case", "mine-*"])
        .await
        .expect("ran");
    let stdout = common::text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}{}",
        common::text(&out.stderr)
    );
    let line = |name: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row for {name}: {stdout}"))
            .to_string()
    };
    assert!(line("plain-answer").contains("passed"), "{stdout}");
    let failed = line("mine-fails");
    assert!(
        failed.contains("FAILED") && failed.contains("does not contain 'goodbye'"),
        "{failed}"
    );
    assert!(stdout.contains("1 passed, 1 failed"), "{stdout}");
    assert!(
        !stdout.contains("verified:"),
        "a failing run verifies nothing: {stdout}"
    );

    let out = run(&["eval", "--case", "plain-answer", "--json"])
        .await
        .expect("ran");
    assert_eq!(out.status.code(), Some(0), "{}", common::text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["passed"], 1, "{v}");
    assert_eq!(v["results"][0]["case"], "plain-answer", "{v}");
    assert!(
        v["identity"]
            .as_str()
            .is_some_and(|i| i.contains("scripted")),
        "{v}"
    );
    // The same narrowed run in a table says why it verified nothing.
    let out = run(&["eval", "--case", "plain-answer"]).await.expect("ran");
    let stdout = common::text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(
        !stdout.contains("verified:")
            && stdout.contains("verified nothing: --case ran 1 of the 11 cases"),
        "{stdout}"
    );

    // All three runs are in the data dir; the passing ones ran one case of the suite, which
    // verifies no model: the model failed the rest of it for all anyone knows.
    let store = Store::open(&dir.path().join("data")).await.expect("store");
    assert_eq!(store.evals().runs(10).await.expect("runs").len(), 3);
    let status = store.models().status("fast").await.expect("status");
    assert!(status.verified.is_none(), "{status:?}");
    store.close().await;
    let out = run(&["doctor"]).await.expect("ran");
    let stdout = common::text(&out.stdout);
    let identity = stdout
        .lines()
        .find(|l| l.contains("model profile fast identity"))
        .unwrap_or_else(|| panic!("no identity line: {stdout}"));
    assert!(
        identity.contains("serves scripted") && !identity.contains("; verified"),
        "{identity}"
    );

    let out = run(&["eval", "--case", "nothing-like-this*"])
        .await
        .expect("ran");
    assert_ne!(out.status.code(), Some(0));
    assert!(
        common::text(&out.stderr).contains("no regression case matches"),
        "{}",
        common::text(&out.stderr)
    );
    // A mistyped profile is the whole answer, before any "running …".
    let out = run(&["eval", "--profile", "turbo"]).await.expect("ran");
    let stderr = common::text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.starts_with("error: unknown model profile 'turbo'; defined profiles: fast, pro"),
        "{stderr}"
    );
}
