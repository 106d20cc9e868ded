//! The daemon under a small open-file limit, as a service manager may start it: crowds of
//! idle connections do not starve `/healthz`, and a burst of wrong tokens is a line or two in
//! the log, not one per guess.

use super::{BIN, Daemon, PATIENCE, Site, clean_command};
use crate::common::echo_model;
use hermes_engine::llm::scripted::ScriptedModel;
use reqwest::StatusCode;
use std::process::Command;
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_idle_connections_under_256_files_do_not_starve_health() {
    let model = ScriptedModel::start_with(echo_model).await;
    let site = Site::new(
        &model.base_url(),
        &[],
        &["header_timeout_s: 1", "idle_timeout_s: 2", "token: tok"],
    );
    // `ulimit -n 256`, then the daemon in the shell's place.
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "ulimit -n 256 && exec \"$0\" \"$@\"", BIN])
        .arg("--config")
        .arg(site.config())
        .arg("--data-dir")
        .arg(site.data())
        .arg("serve");
    let cmd = clean_command(cmd, site.dir.path(), &[]);
    let mut d = Daemon::spawn(cmd, site.dir.path(), &site.data()).with_token("tok");
    d.ready().await;
    let addr = d.base().trim_start_matches("http://").to_string();
    d.wait_log("at most 128 connections").await;

    let mut idle = Vec::new();
    for _ in 0..300 {
        idle.push(
            tokio::net::TcpStream::connect(&addr)
                .await
                .expect("connect"),
        );
    }
    // A new connection, queued behind the three hundred (a pooled one would skip the queue).
    let asked = Instant::now();
    let r = reqwest::Client::new()
        .get(format!("{}/healthz", d.base()))
        .timeout(PATIENCE)
        .send()
        .await
        .expect("health answers");
    assert_eq!(r.status(), StatusCode::OK);
    assert!(asked.elapsed() < PATIENCE, "{:?}", asked.elapsed());
    assert_eq!(
        d.log().matches("new connections wait").count(),
        1,
        "one line per burst:\n{}",
        d.log()
    );
    drop(idle);

    // Two hundred wrong tokens: refused, and logged as a burst.
    let http = reqwest::Client::new();
    let mut refused = 0;
    for i in 0..200 {
        let r = http
            .get(format!("{}/v1/tasks", d.base()))
            .bearer_auth(format!("guess-{i}"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .expect("answered");
        if r.status() == StatusCode::TOO_MANY_REQUESTS {
            refused += 1;
        }
    }
    assert_eq!(refused, 190);
    d.wait_log("locked out").await;
    let lines = d
        .log()
        .lines()
        .filter(|l| l.contains("wrong token"))
        .count();
    assert!((1..=2).contains(&lines), "{lines} lines:\n{}", d.log());
    d.stop().await;
}
