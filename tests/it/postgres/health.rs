//! `/healthz` on PostgreSQL as monitors meet it: answered fast whatever the server does, open
//! to anyone but saying where the database is only to who has the token, never with a password
//! (not even one given as `?password=`, valid libpq syntax), and following the server back
//! within seconds of its return. `doctor` and `storage migrate` keep the password out as well.

use super::cluster;
use crate::common::echo_model;
use crate::daemon::Site;
use crate::process::{Daemon, PATIENCE};
use hermes_engine::llm::scripted::ScriptedModel;
use serde_json::Value;
use std::time::{Duration, Instant};

const TOKEN: &str = "health-token-for-tests";

/// A site on `url` with the API behind [`TOKEN`].
fn guarded_site_on(model_url: &str, url: &str) -> Site {
    let site = Site::new(model_url, &[], &[&format!("token: {TOKEN}")]);
    let mut yaml = std::fs::read_to_string(site.config()).expect("settings");
    yaml.push_str(&format!("storage:\n  url: \"{url}\"\n"));
    std::fs::write(site.config(), yaml).expect("settings written");
    site
}

/// `/healthz` with or without the token: the answer and how long it took.
async fn healthz(d: &Daemon, token: Option<&str>) -> (Value, Duration) {
    let mut req = reqwest::Client::new()
        .get(format!("{}/healthz", d.base()))
        .timeout(PATIENCE);
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let started = Instant::now();
    let resp = req.send().await.expect("healthz answers");
    let v = resp.json::<Value>().await.expect("healthz is JSON");
    (v, started.elapsed())
}

/// Unauthenticated `/healthz` until `pred` holds (bounded); the answer, and how long since
/// `since`.
async fn healthz_until(
    d: &Daemon,
    since: Instant,
    pred: impl Fn(&Value) -> bool,
) -> (Value, Duration) {
    loop {
        let (h, _) = healthz(d, None).await;
        if pred(&h) {
            return (h, since.elapsed());
        }
        assert!(since.elapsed() < PATIENCE, "healthz never matched: {h}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn output(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_fast_and_discreet_while_the_server_is_down_and_follows_it_back() {
    let model = ScriptedModel::start_with(echo_model).await;
    let own =
        tokio::task::spawn_blocking(|| cluster::Cluster::start().unwrap_or_else(|e| panic!("{e}")))
            .await
            .expect("the cluster's thread");
    // The password as a query parameter, which the old masking missed.
    let url = format!(
        "postgres://hermes@127.0.0.1:{}/postgres?password={}",
        own.port,
        cluster::PASSWORD
    );
    let site = guarded_site_on(&model.base_url(), &url);
    let mut d = site.start(&[]);
    d.ready().await;
    let d = d.with_token(TOKEN);
    let (h, took) = healthz(&d, None).await;
    assert_eq!(h["status"], "ok", "{h}");
    eprintln!("healthz, server up: {took:?}");

    own.stop_server();
    let stopped = Instant::now();
    let (h, noticed) = healthz_until(&d, stopped, |h| h["status"] == "degraded").await;
    eprintln!("healthz degraded {noticed:?} after the server stopped");
    // Without the token: what is wrong and what to do, nothing about where.
    let storage = h["storage"].as_str().unwrap_or_default();
    assert!(storage.starts_with("database unreachable"), "{h}");
    let text = h.to_string();
    for secret in [
        cluster::PASSWORD,
        "127.0.0.1",
        &own.port.to_string(),
        "postgres://",
    ] {
        assert!(!text.contains(secret), "{secret} shown to anyone: {h}");
    }
    assert_eq!(h["pending"], Value::Null, "{h}");
    // Every answer comes well inside the CLI's 700 ms, though the main pool waits 5 s.
    let mut slowest = Duration::ZERO;
    for _ in 0..5 {
        for token in [None, Some(TOKEN)] {
            let (_, took) = healthz(&d, token).await;
            slowest = slowest.max(took);
        }
    }
    eprintln!("healthz, server down: slowest of 10 answers {slowest:?}");
    assert!(
        slowest < Duration::from_millis(1500),
        "healthz took {slowest:?}"
    );
    // With the token: where, still without the password.
    let (h, _) = healthz(&d, Some(TOKEN)).await;
    let storage = h["storage"].as_str().unwrap_or_default();
    assert!(
        storage.contains("database unreachable")
            && storage.contains(&format!("127.0.0.1:{}", own.port)),
        "{h}"
    );
    assert!(!storage.contains(cluster::PASSWORD), "{h}");
    assert!(storage.contains("password=***"), "{h}");

    // doctor and storage migrate name the database without its password.
    let out = site.cli(&["doctor"], &[]);
    let text = output(&out);
    assert!(text.contains("database"), "{text}");
    assert!(!text.contains(cluster::PASSWORD), "{text}");
    let out = site.cli(&["storage", "migrate", "--to", &url], &[]);
    let text = output(&out);
    assert!(!out.status.success(), "{text}");
    assert!(!text.contains(cluster::PASSWORD), "{text}");
    let sqlite = Site::new(&model.base_url(), &[], &[]);
    let mut s = sqlite.start(&[]);
    s.ready().await;
    s.stop().await;
    let out = sqlite.cli(&["storage", "migrate", "--to", &url], &[]);
    let text = output(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("cannot connect"), "{text}");
    assert!(!text.contains(cluster::PASSWORD), "{text}");

    // Back: health says so within seconds, not after a minute of "unreachable".
    own.start_server();
    let started = Instant::now();
    let (h, recovered) = healthz_until(&d, started, |h| h["status"] == "ok").await;
    eprintln!("healthz ok {recovered:?} after the server started again");
    assert!(recovered < Duration::from_secs(10), "{recovered:?}: {h}");
    assert_eq!(h["storage"], "ok", "{h}");
    let id = super::accepted(&d, "after").await;
    assert_eq!(d.finished(&id).await["state"], "succeeded");
    let mut d = d;
    d.stop().await;
    assert!(
        !d.log().contains(cluster::PASSWORD),
        "the password was logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_given_as_a_query_parameter_is_not_shown_when_the_server_is_unreachable() {
    let model = ScriptedModel::start_with(echo_model).await;
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("postgres://hermes@127.0.0.1:{port}/hermes?sslmode=prefer&password=hunter2");
    let site = guarded_site_on(&model.base_url(), &url);
    let mut d = site.start(&[]);
    assert!(!d.exited(PATIENCE).await.success());
    let log = d.log();
    assert!(
        log.contains("cannot connect to the PostgreSQL database")
            && log.contains(&format!(
                "127.0.0.1:{port}/hermes?sslmode=prefer&password=***"
            )),
        "{log}"
    );
    assert!(!log.contains("hunter2"), "the password was shown: {log}");
    let out = site.cli(&["doctor"], &[]);
    let text = output(&out);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("cannot connect"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    let out = site.cli(&["storage", "migrate", "--to", &url], &[]);
    let text = output(&out);
    assert!(!out.status.success(), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
}
