//! Model identity and evals against real model servers: the server at `HERMES_REAL_MODEL_URL`
//! (SmolLM2 by `scripts/local-model.sh`, llama-cpp-python: it echoes the requested model name
//! and sends no fingerprint, so its identity is behavioural) and, for the swap, a second
//! server at `HERMES_REAL_MODEL_URL_B` serving **another** GGUF (e.g. Gemma 3 270M) under the
//! **same** model alias — a model upgrade behind an unchanged name.
//!
//! Ignored unless asked for, and then failing (never passing) when a server is not named:
//!
//! ```sh
//! HERMES_REAL_MODEL_URL=http://127.0.0.1:8080/v1 HERMES_REAL_MODEL_URL_B=http://127.0.0.1:8001/v1 \
//!   cargo test --test it real_model_identity:: -- --ignored --nocapture
//! ```
//!
//! `HERMES_REAL_MODEL_NAME` is the alias both serve (default `smollm2`).

use crate::common;
use hermes_config::{ModelSettings, Profile};
use hermes_engine::llm::{Gateway, Identity};
use hermes_surfaces::eval::ModelWatch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

const NEEDS: &str = "needs HERMES_REAL_MODEL_URL (scripts/local-model.sh)";
const NEEDS_B: &str =
    "needs HERMES_REAL_MODEL_URL_B: a second server, another GGUF under the same alias";

/// One local server answers one request at a time: the tests take turns.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn url(var: &str, needs: &str) -> String {
    let url = std::env::var(var).unwrap_or_default();
    assert!(!url.trim().is_empty(), "{needs}");
    url.trim().trim_end_matches('/').to_string()
}

fn alias() -> String {
    std::env::var("HERMES_REAL_MODEL_NAME")
        .ok()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| "smollm2".into())
}

/// Profile `fast` on `url`, serving the alias.
fn model_settings(url: &str) -> ModelSettings {
    let mut s = ModelSettings::default();
    s.profiles.clear();
    s.profiles.insert(
        "fast".into(),
        Profile {
            base_url: url.into(),
            model: alias(),
            timeout_s: 300,
            ..Profile::default()
        },
    );
    s
}

async fn identity_of(url: &str) -> Identity {
    let gw = Gateway::new(&model_settings(url)).expect("gateway");
    gw.check_identity("fast")
        .await
        .expect("the server answers the identity check")
        .expect("checks are on by default")
}

#[tokio::test]
#[ignore = "needs HERMES_REAL_MODEL_URL (scripts/local-model.sh)"]
async fn a_real_server_s_identity_is_the_same_each_time_it_is_checked() {
    let _turn = SERIAL.lock().await;
    let url = url("HERMES_REAL_MODEL_URL", NEEDS);
    let gw = Gateway::new(&model_settings(&url)).expect("gateway");
    let listed = gw.served_models("fast").await.expect("GET /models");
    println!("{url} serves {listed:?}");
    let first = gw.check_identity("fast").await.expect("check").expect("id");
    let second = gw.check_identity("fast").await.expect("check").expect("id");
    println!("identity: {} ({})", first.key(), first.source());
    assert_eq!(
        first, second,
        "the same server, the same model: one identity"
    );
}

#[tokio::test]
#[ignore = "needs HERMES_REAL_MODEL_URL and HERMES_REAL_MODEL_URL_B"]
async fn another_model_behind_the_same_alias_is_a_change() {
    let _turn = SERIAL.lock().await;
    let a = identity_of(&url("HERMES_REAL_MODEL_URL", NEEDS)).await;
    let b = identity_of(&url("HERMES_REAL_MODEL_URL_B", NEEDS_B)).await;
    println!("A: {}\nB: {}", a.key(), b.key());
    assert_ne!(
        a.key(),
        b.key(),
        "two models under one alias must not look the same"
    );

    // The watch over a profile that served A and now serves B records one change.
    let t = common::app(
        common::settings(&url("HERMES_REAL_MODEL_URL", NEEDS)),
        vec![],
    )
    .await;
    let tracker = TaskTracker::new();
    let watch = ModelWatch::new(&t.app, &tracker, CancellationToken::new());
    assert!(watch.observe("fast", &a).await.expect("observe").is_none());
    let change = watch
        .observe("fast", &b)
        .await
        .expect("observe")
        .expect("a change");
    assert_eq!(
        (change.old_identity, change.new_identity),
        (a.key(), b.key())
    );
    assert!(watch.observe("fast", &b).await.expect("observe").is_none());
}

#[tokio::test]
#[ignore = "needs HERMES_REAL_MODEL_URL (scripts/local-model.sh)"]
async fn an_eval_run_on_a_real_model_is_recorded_with_the_identity_it_saw() {
    let _turn = SERIAL.lock().await;
    let mut settings = common::settings(&url("HERMES_REAL_MODEL_URL", NEEDS));
    for p in settings.model.profiles.values_mut() {
        p.model = alias();
        p.timeout_s = 300;
    }
    settings.agent.task_timeout_s = 900;
    let t = common::app(settings, vec![]).await;
    let app = &t.app;
    // A tiny model answers badly: what is checked is the run, not its verdicts.
    let report = common::run_evals(
        app,
        Some("fast"),
        &["plain-answer", "remember"],
        None,
        &|r| println!("{}: {} ({:?})", r.case_name, r.verdict, r.why),
    )
    .await;
    let run = app
        .store
        .evals()
        .run(report.run.id)
        .await
        .expect("recorded");
    assert_eq!(run.results.len(), 2);
    assert!(run.finished_at.is_some());
    assert!(run.identity.is_some(), "{run:?}");
    assert_eq!(report.all_passed(), !report.verified.is_empty());
}
