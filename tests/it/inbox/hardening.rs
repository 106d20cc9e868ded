//! Mail built to hurt: a message nested 20,000 deep, a stranger's megabyte headers, a mailbox
//! its server renumbered (a new UIDVALIDITY) holding mail without a Message-ID.

use super::{Daemon, ME, PATIENCE, Site, fresh, imap_server, new_message_id, reply, until};
use serde_json::Value;
use std::time::Instant;

/// `raw` without its Message-ID line, as some clients and scripts send mail.
fn without_message_id(raw: &str) -> String {
    raw.lines()
        .filter(|l| !l.to_ascii_lowercase().starts_with("message-id:"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// The recorded message whose subject is `subject`, once `pred` holds (bounded).
async fn recorded_by_subject(d: &Daemon, subject: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(m) = d
            .inbox()
            .await
            .into_iter()
            .find(|m| m["subject"] == subject && pred(m))
        {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "no message '{subject}' as expected within {PATIENCE:?}: {:#?}\n{}",
            d.inbox().await,
            d.log()
        );
        tokio::time::sleep(super::POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mail_nested_20000_deep_is_recorded_unreadable_and_the_daemon_goes_on() {
    let site = Site::new(&[]).await;
    let mut d = site.start().await;
    // From the allowed sender, so that its body is looked at (a stranger's never is).
    let id = new_message_id();
    let mut raw = format!(
        "From: {ME}\nTo: {user}\nSubject: deep\nMessage-ID: <{id}>\n\
         Date: Tue, 1 Dec 2026 09:00:00 +0000\nMIME-Version: 1.0\n",
        user = imap_server::USER
    );
    for _ in 0..20_000 {
        raw.push_str("Content-Type: message/rfc822\n\n");
    }
    raw.push_str("Subject: inner\n\nhello\n");
    site.arrive(&raw).await;
    let m = d.recorded(&id, |m| m["state"] == "ignored").await;
    assert_eq!(m["reason"], "unreadable", "{m}");
    assert!(m["task_id"].is_null(), "{m}");
    d.still_running();

    // The next mail acts as ever.
    let (next, raw) = fresh(ME, "After the deep one", "say hi", "");
    site.arrive(&raw).await;
    d.recorded(&next, |m| m["task_id"].is_string()).await;
    site.smtp
        .wait_for("answering the mail after the deep one", |s| {
            s.header("In-Reply-To").as_deref() == Some(&format!("<{next}>"))
        })
        .await;

    // A restart does not read it again.
    d.stop().await;
    let mut d = site.start().await;
    let (marker, raw) = fresh(ME, "Marker", "and again", "");
    site.arrive(&raw).await;
    d.recorded(&marker, |m| m["task_id"].is_string()).await;
    d.still_running();
    assert_eq!(d.inbox().await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_strangers_huge_headers_are_stored_bounded() {
    let site = Site::new(&[]).await;
    let d = site.start().await;
    let db_size = || {
        std::fs::read_dir(site.data())
            .map(|dir| {
                dir.filter_map(Result::ok)
                    .filter(|e| e.file_name().to_string_lossy().starts_with("hermes.db"))
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum::<u64>()
            })
            .unwrap_or(0)
    };
    let before = db_size();
    let huge_ref = format!("<{}@evil.test>", "r".repeat(900_000));
    let many: String = (0..2_000).map(|i| format!(" <ref{i}@evil.test>")).collect();
    let mut ids = Vec::new();
    for i in 0..5 {
        let (id, raw) = fresh(
            "stranger@evil.test",
            &format!("{i} {}", "s".repeat(60_000)),
            "hello",
            // The huge id newest, where an answer's References would keep it.
            &format!("References:{many} {huge_ref}\nIn-Reply-To: {huge_ref}\n"),
        );
        site.arrive(&raw).await;
        ids.push(id);
    }
    for id in &ids {
        let m = d.recorded(id, |m| m["state"] == "ignored").await;
        assert_eq!(m["reason"], "not_allowed", "{m}");
        assert!(
            m["subject"]
                .as_str()
                .is_some_and(|s| s.chars().count() <= 300),
            "{m}"
        );
    }
    let listing = d.text("/v1/inbox?limit=50").await;
    assert!(
        listing.len() < 20_000,
        "GET /v1/inbox is {} bytes",
        listing.len()
    );
    // Five mails of ~1 MB each: what is stored of them is a few kilobytes.
    let grown = db_size().saturating_sub(before);
    assert!(grown < 512 * 1024, "the database grew by {grown} bytes");
}

/// The runs of job `id`.
async fn runs(d: &Daemon, id: &str) -> usize {
    let (_, r) = d.get(&format!("/v1/jobs/{id}/runs")).await;
    r["runs"].as_array().map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renumbered_mailbox_replays_no_run_and_no_task() {
    let site = Site::new(&[]).await;
    let mut d = site.start().await;
    let (job, digest) = site.digest(&d, "Renumbered").await;
    assert_eq!(runs(&d, &job).await, 1);

    // Without a Message-ID: a `run now` reply, and a fresh task.
    let (_, raw) = reply(ME, &digest, "run now", "");
    site.arrive(&without_message_id(&raw)).await;
    let subject = format!("Re: {}", digest.subject());
    recorded_by_subject(&d, &subject, |m| m["command_state"] == "done").await;
    assert_eq!(runs(&d, &job).await, 2);
    let (_, raw) = fresh(ME, "A task without an id", "what is the date", "");
    site.arrive(&without_message_id(&raw)).await;
    let task = recorded_by_subject(&d, "A task without an id", |m| m["task_id"].is_string()).await;

    // The server renumbers the mailbox while the daemon is away.
    d.stop().await;
    site.imap.renumber(4_000_000_000);
    let d = site.start().await;
    let (marker, raw) = fresh(ME, "Marker", "hello again", "");
    site.arrive(&raw).await;
    d.recorded(&marker, |m| m["task_id"].is_string()).await;
    until("the log saying the mailbox was renumbered", || async {
        d.log().contains("renumbered")
    })
    .await;

    assert_eq!(runs(&d, &job).await, 2, "the run was fired again");
    let inbox = d.inbox().await;
    assert_eq!(inbox.len(), 3, "{inbox:#?}");
    let (_, tasks) = d.get("/v1/tasks?limit=1000").await;
    let from_mail: Vec<&Value> = tasks["tasks"]
        .as_array()
        .map(|ts| ts.iter().filter(|t| t["origin"] == "email").collect())
        .unwrap_or_default();
    assert_eq!(from_mail.len(), 2, "{from_mail:#?}");
    assert!(from_mail.iter().any(|t| t["id"] == task["task_id"]));
}
