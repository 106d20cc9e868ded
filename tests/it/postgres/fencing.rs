//! A node's lease as a fencing token, as an operator of several daemons meets it: a node
//! stopped past its lease (SIGSTOP, as a suspended laptop) and declared dead by the others acts
//! no more when it continues — no tool call, no model call, no trace row, no end — and joins
//! again; a database outage longer than the lease is nobody's death: every live task finishes.

use super::{cluster, fresh_database, psql};
use crate::common::task_text;
use crate::daemon::Site;
use crate::process::{Daemon, PATIENCE};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The fenced test's lease: short, so a take-over is seen in seconds.
const LEASE_S: u64 = 3;
/// The outage test's lease, as in the review: shorter than the outage.
const OUTAGE_LEASE_S: u64 = 6;
/// How long the outage test keeps PostgreSQL down: longer than the lease.
const OUTAGE: Duration = Duration::from_secs(9);

/// "fenced": after 3 s, remember a fact (a side effect anyone can count), then answer;
/// "long": answer after 14 s (across the outage); anything else at once.
fn model(req: &Value) -> Reply {
    let task = task_text(req);
    let answer = Reply::text(&format!("answer to: {task}"));
    let after_tool = req["messages"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    if task.contains("fenced") && !after_tool {
        let call = Reply::tool_calls(&[("remember", json!({"text": "the fenced fact"}))]);
        Reply::Delay(Duration::from_secs(3), Box::new(call))
    } else if task.contains("long") {
        Reply::Delay(Duration::from_secs(14), Box::new(answer))
    } else {
        answer
    }
}

fn node_site(model_url: &str, url: &str, workers: u32, lease_s: u64) -> Site {
    let site = super::site_on(model_url, url);
    let mut yaml = std::fs::read_to_string(site.config()).expect("settings");
    yaml.push_str(&format!("  node_lease_s: {lease_s}\n"));
    yaml = yaml.replace(
        "agent:\n  workers: 4\n",
        &format!("agent:\n  workers: {workers}\n"),
    );
    std::fs::write(site.config(), yaml).expect("settings written");
    site
}

async fn start(site: &Site) -> Daemon {
    let mut d = site.start(&[]);
    d.ready().await;
    d
}

/// Poll `read` until it satisfies `ok`, bounded by `within`; its last value.
async fn until<F, Fut>(within: Duration, what: &str, read: F, ok: impl Fn(i64) -> bool) -> i64
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = i64>,
{
    let deadline = Instant::now() + within;
    loop {
        let n = read().await;
        if ok(n) {
            return n;
        }
        assert!(
            Instant::now() < deadline,
            "{what} stayed at {n} for {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_declared_dead_acts_no_more_when_it_continues() {
    let model = ScriptedModel::start_with(model).await;
    let db = fresh_database().await;
    let url = cluster::cluster().url(&db);
    let (site_a, site_b) = (
        node_site(&model.base_url(), &url, 2, LEASE_S),
        node_site(&model.base_url(), &url, 2, LEASE_S),
    );
    let mut a = start(&site_a).await;
    let fenced = a.submit("the fenced task").await;
    let count = |sql: String| {
        let db = db.clone();
        move || {
            let (db, sql) = (db.clone(), sql.clone());
            async move { psql(&db, &sql).await.parse::<i64>().unwrap_or(-1) }
        }
    };
    let running = format!("SELECT COUNT(*) FROM tasks WHERE id = '{fenced}' AND state = 'running'");
    until(PATIENCE, "the task running on A", count(running), |n| {
        n == 1
    })
    .await;
    // A stops mid model call, as a laptop whose lid is closed; B takes it for dead.
    a.signal("-STOP");
    let mut b = start(&site_b).await;
    let interrupted = format!(
        "SELECT COUNT(*) FROM tasks WHERE id = '{fenced}' AND state = 'failed' AND reason = 'interrupted'"
    );
    until(
        PATIENCE,
        "the task interrupted by B",
        count(interrupted),
        |n| n == 1,
    )
    .await;
    let steps_before = psql(
        &db,
        &format!("SELECT COUNT(*) FROM task_steps WHERE task_id = '{fenced}'"),
    )
    .await;
    // A continues, with the model's answer (a tool call) waiting in its socket.
    a.signal("-CONT");
    a.wait_log("took this one for dead").await;
    // A joined again and works: a task it takes now runs under its new lease.
    let after = a.submit("after the stop").await;
    assert_eq!(a.finished(&after).await["state"], "succeeded");

    // Nothing of the fenced task happened after B ended it: no tool call (the fact), no
    // second model call, no trace row, and its end stays B's.
    let facts = psql(&db, "SELECT COUNT(*) FROM facts").await;
    let extra_calls = model
        .requests()
        .iter()
        .filter(|r| task_text(r).contains("fenced"))
        .count()
        - 1;
    eprintln!(
        "after SIGCONT the node declared dead made {facts} tool call(s) and {extra_calls} model call(s) for the task"
    );
    assert_eq!(facts, "0", "the tool ran after the node was declared dead");
    let calls = model
        .requests()
        .iter()
        .filter(|r| task_text(r).contains("fenced"))
        .count();
    assert_eq!(
        calls, 1,
        "the model was called again after the node was declared dead"
    );
    let steps_after = psql(
        &db,
        &format!("SELECT COUNT(*) FROM task_steps WHERE task_id = '{fenced}'"),
    )
    .await;
    assert_eq!(
        steps_before, steps_after,
        "trace rows written under a lost lease"
    );
    let (_, t) = b.get(&format!("/v1/tasks/{fenced}")).await;
    assert_eq!(
        (t["state"].as_str(), t["reason"].as_str()),
        (Some("failed"), Some("interrupted")),
        "{t}"
    );
    assert!(a.log().contains("fenced"), "{}", a.log());
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_longer_than_the_lease_ends_no_live_task() {
    let model = ScriptedModel::start_with(model).await;
    let own =
        tokio::task::spawn_blocking(|| cluster::Cluster::start().unwrap_or_else(|e| panic!("{e}")))
            .await
            .expect("the cluster's thread");
    let url = own.url("postgres");
    let sites: Vec<Site> = (0..3)
        .map(|_| node_site(&model.base_url(), &url, 2, OUTAGE_LEASE_S))
        .collect();
    let mut nodes = Vec::new();
    for site in &sites {
        nodes.push(start(site).await);
    }
    let mut ids = Vec::new();
    for i in 0..6 {
        ids.push(nodes[i % 3].submit(&format!("a long task {i}")).await);
    }
    let own = std::sync::Arc::new(own);
    let psql_own = |sql: &'static str| {
        let own = own.clone();
        move || {
            let own = own.clone();
            async move {
                tokio::task::spawn_blocking(move || own.psql("postgres", sql))
                    .await
                    .expect("the cluster's thread")
                    .ok()
                    .and_then(|s| s.parse::<i64>().ok())
                    .unwrap_or(-1)
            }
        }
    };
    let running =
        "SELECT COUNT(DISTINCT node_id) * 100 + COUNT(*) FROM tasks WHERE state = 'running'";
    // Six running, on all three nodes.
    until(PATIENCE, "running tasks", psql_own(running), |n| n == 306).await;

    let down = own.clone();
    tokio::task::spawn_blocking(move || down.stop_server())
        .await
        .expect("the cluster's thread");
    // The outage's length is the scenario itself, not a wait for an event.
    tokio::time::sleep(OUTAGE).await;
    let up = own.clone();
    tokio::task::spawn_blocking(move || up.start_server())
        .await
        .expect("the cluster's thread");

    let mut ends = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        ends.push(nodes[i % 3].finished(id).await);
    }
    let ended = ends.iter().filter(|t| t["state"] != "succeeded").count();
    eprintln!(
        "outage of {OUTAGE:?} with a lease of {OUTAGE_LEASE_S} s: {ended} of 6 live tasks ended by it"
    );
    for (i, t) in ends.iter().enumerate() {
        assert_eq!(
            (t["state"].as_str(), t["reason"].as_str()),
            (Some("succeeded"), None),
            "task {i} of a live node was ended by the outage: {t}"
        );
    }
    assert_eq!(
        psql_own("SELECT COUNT(*) FROM nodes")().await,
        3,
        "a live node was forgotten"
    );
    for n in &mut nodes {
        assert!(!n.log().contains("taken over"), "{}", n.log());
        n.stop().await;
    }
}
