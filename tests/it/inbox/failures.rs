//! What goes wrong: the daemon killed -9 at the worst moments, the IMAP server going away, a
//! server without IDLE — and what doctor says about the mailbox.

use super::{Daemon, ME, Site, fresh, imap_server, until};
use serde_json::Value;
use std::collections::HashMap;

/// How many answers went out to each mail, by the Message-ID they answer.
fn answers(site: &Site) -> HashMap<String, usize> {
    let mut n = HashMap::new();
    for s in site.smtp.all() {
        if let Some(to) = s.header("In-Reply-To") {
            *n.entry(to.trim_matches(['<', '>']).to_string())
                .or_insert(0) += 1;
        }
    }
    n
}

/// Tasks of origin email, by the mail they came from.
async fn email_tasks(d: &Daemon) -> Vec<Value> {
    let (_, t) = d.get("/v1/tasks?limit=1000").await;
    t["tasks"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .filter(|t| t["origin"] == "email")
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_between_arrival_and_processing_each_mail_is_acted_on_exactly_once() {
    let site = Site::new(&[]).await;

    // 1. The mail arrives while the daemon cannot run (stopped), then it is killed.
    let mut d = site.start().await;
    d.signal("-STOP");
    let (a, raw) = fresh(ME, "First", "what is the date", "");
    site.arrive(&raw).await;
    d.kill9();
    let mut d = site.start().await;
    let m = d.recorded(&a, |m| m["task_id"].is_string()).await;
    let a_task = m["task_id"].as_str().unwrap_or_default().to_string();
    site.smtp
        .wait_for("answering the first mail", |s| {
            s.header("In-Reply-To").as_deref() == Some(&format!("<{a}>"))
        })
        .await;

    // 2. Killed after the mail became a task, while the task runs: the mail is not read
    //    again, and the interrupted task is answered once, at the next start.
    let (b, raw) = fresh(ME, "Second", "a slow question", "");
    site.arrive(&raw).await;
    let m = d.recorded(&b, |m| m["task_id"].is_string()).await;
    let b_task = m["task_id"].as_str().unwrap_or_default().to_string();
    until("the slow task running", || async {
        d.task(&b_task).await["state"] == "running"
    })
    .await;
    d.kill9();
    let mut d = site.start().await;
    let t = d.task(&b_task).await;
    assert_eq!(t["state"], "failed", "{t}");
    assert_eq!(t["reason"], "interrupted", "{t}");
    let answer = site
        .smtp
        .wait_for("answering the interrupted task", |s| {
            s.header("In-Reply-To").as_deref() == Some(&format!("<{b}>"))
        })
        .await;
    assert!(
        answer.text().contains("could not finish"),
        "{}",
        answer.text()
    );

    // 3. A clean restart, and one more mail as a marker: once its answer is out, every
    //    earlier answer that would ever go out has.
    d.stop().await;
    let d = site.start().await;
    let (c, raw) = fresh(ME, "Third", "hello again", "");
    site.arrive(&raw).await;
    site.smtp
        .wait_for("answering the marker", |s| {
            s.header("In-Reply-To").as_deref() == Some(&format!("<{c}>"))
        })
        .await;
    let inbox = d.inbox().await;
    assert_eq!(inbox.len(), 3, "{inbox:#?}");
    let tasks = email_tasks(&d).await;
    assert_eq!(tasks.len(), 3, "{tasks:#?}");
    assert!(tasks.iter().any(|t| t["id"] == a_task.as_str()));
    let n = answers(&site);
    for id in [&a, &b, &c] {
        assert_eq!(n.get(id.as_str()), Some(&1), "answers to {id}: {n:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mail_that_arrives_while_the_imap_server_is_down_is_picked_up() {
    let mut site = Site::new(&[]).await;
    let d = site.start().await;
    site.imap.down().await;
    until("the inbox reported down", || async {
        let (_, h) = d.get("/healthz").await;
        h["inbox"] == "down" && h["status"] == "degraded"
    })
    .await;
    // Delivered while no server runs, and appended the moment it is back.
    let (offline, raw) = fresh(ME, "While down", "delivered while the server was down", "");
    site.imap.deliver_offline(&raw);
    site.imap.up().await;
    let (after, raw) = fresh(ME, "Right after", "appended as it came back", "");
    site.arrive(&raw).await;
    for id in [&offline, &after] {
        d.recorded(id, |m| m["task_id"].is_string()).await;
        site.smtp
            .wait_for("an answer", |s| {
                s.header("In-Reply-To").as_deref() == Some(&format!("<{id}>"))
            })
            .await;
    }
    let (_, h) = d.get("/healthz").await;
    assert_eq!(h["inbox"], "ok", "{h}");
    assert_eq!(h["status"], "ok", "{h}");
    assert!(d.log().contains("inbox down"), "{}", d.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_idle_is_polled() {
    let site = Site::with(false, &["poll_s: 1"]).await;
    let d = site.start().await;
    assert!(d.log().contains("idle=false"), "{}", d.log());
    let (id, raw) = fresh(ME, "Polled", "found by polling", "");
    site.arrive(&raw).await;
    d.recorded(&id, |m| m["task_id"].is_string()).await;
    let checks = d.text("/settings/checks").await;
    assert!(checks.contains("no IDLE, polling every 1 s"), "{checks}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_logs_in_and_reports_idle_support() {
    let site = Site::new(&[]).await;
    let out = site.command(&["doctor"]).output().expect("doctor runs");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .lines()
        .find(|l| l.contains(&format!("inbox 127.0.0.1:{}", site.imap.port)))
        .unwrap_or_else(|| panic!("no inbox check in:\n{text}"));
    assert!(
        line.contains("logged in") && line.contains("offers IDLE"),
        "{line}"
    );

    let wrong = site
        .command(&["doctor"])
        .env("IMAP_PASSWORD", "not-the-password")
        .output()
        .expect("doctor runs");
    let text = String::from_utf8_lossy(&wrong.stdout).to_string();
    assert!(
        !wrong.status.success(),
        "a refused login is a failed check:\n{text}"
    );
    let line = text
        .lines()
        .find(|l| l.contains("inbox 127.0.0.1"))
        .unwrap_or_else(|| panic!("no inbox check in:\n{text}"));
    assert!(
        line.contains("refused the login") && line.contains("IMAP_PASSWORD"),
        "{line}"
    );
    assert!(!text.contains("not-the-password") && !text.contains(imap_server::PASSWORD));
}
