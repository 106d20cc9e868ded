//! Replies to what the daemon sent: free text continues the run and is answered in the
//! thread; a command's first line acts on the job and is confirmed.

use super::{ME, Site, reply, until};
use crate::common::task_text;
use reqwest::StatusCode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_to_a_digest_continues_the_run_and_is_answered_in_the_thread() {
    let site = Site::new(&[]).await;
    let d = site.start().await;
    let (job, digest) = site.digest(&d, "Morning brief").await;
    let digest_id = digest.message_id();
    assert!(
        digest_id.starts_with("hermes.") && digest_id.ends_with("@example.test"),
        "{digest_id}"
    );
    let (status, runs) = d.get(&format!("/v1/jobs/{job}/runs")).await;
    assert_eq!(status, StatusCode::OK);
    let run_task = runs["runs"][0]["task_id"]
        .as_str()
        .expect("the run's task")
        .to_string();

    let (id, raw) = reply(ME, &digest, "Tell me more about the second item.", "");
    site.arrive(&raw).await;
    let m = d.recorded(&id, |m| m["task_id"].is_string()).await;
    assert_eq!(m["state"], "acted");
    assert_eq!(m["from"], ME);
    assert!(m["command"].is_null(), "{m}");
    let task_id = m["task_id"].as_str().expect("a task").to_string();

    // The task continues the run: its parent is the run's task, its text what was written.
    let task = d.task(&task_id).await;
    assert_eq!(task["origin"], "email");
    assert_eq!(task["parent_id"], run_task.as_str());
    assert_eq!(task["task"], "Tell me more about the second item.");

    // The answer comes back threaded under the reply, to the sender only.
    let answer = site
        .smtp
        .wait_for("answering the reply", |s| {
            s.header("In-Reply-To").as_deref() == Some(&format!("<{id}>"))
        })
        .await;
    assert_eq!(answer.rcpt, [ME]);
    assert_eq!(answer.subject(), format!("Re: {}", digest.subject()));
    let refs = answer.header("References").unwrap_or_default();
    assert!(refs.contains(&digest_id) && refs.contains(&id), "{refs}");
    assert!(
        answer.raw.contains("multipart/alternative"),
        "{}",
        answer.raw
    );
    assert!(
        answer
            .text()
            .contains("answer to: Tell me more about the second item."),
        "{}",
        answer.text()
    );

    // The model saw what was sent and what was written, the quote and its attribution gone.
    let request = site
        .model
        .requests()
        .into_iter()
        .find(|r| task_text(r) == "Tell me more about the second item.")
        .expect("the task's model call");
    let first = request["messages"][1]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(first.contains("<previous_message>"), "{first}");
    assert!(first.contains(&digest.subject()), "{first}");
    assert!(
        first.contains("answer to: news for Morning brief"),
        "{first}"
    );
    assert!(!first.contains("wrote:"), "{first}");

    // A reply to the answer is bound to it too: it carries the same job.
    let (pause_id, raw) = reply(ME, &answer, "pause", "");
    site.arrive(&raw).await;
    let m = d.recorded(&pause_id, |m| m["command"] == "pause").await;
    assert_eq!(m["state"], "acted");
    until("the job paused", || async {
        d.job(&job).await["enabled"] == false
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pause_and_resume_by_reply_in_english_and_chinese() {
    let site = Site::new(&[]).await;
    let d = site.start().await;
    let (job, digest) = site.digest(&d, "Weekly report").await;
    assert_eq!(d.job(&job).await["enabled"], true);

    for (word, command, enabled, says) in [
        ("pause", "pause", false, "Paused"),
        ("恢复", "resume", true, "Resumed"),
        ("暂停", "pause", false, "Paused"),
        ("Resume.", "resume", true, "Resumed"),
    ] {
        let (id, raw) = reply(ME, &digest, word, "");
        site.arrive(&raw).await;
        let m = d.recorded(&id, |m| m["command"] == command).await;
        assert_eq!(m["state"], "acted", "{word}: {m}");
        assert!(m["task_id"].is_null(), "a command starts no task: {m}");
        // As the API would leave it: paused keeps its next time, resumed has one ahead.
        let j = d.job(&job).await;
        assert_eq!(j["enabled"], enabled, "{word}: {j}");
        assert!(j["next_run_at"].is_string(), "{word}: {j}");
        let confirmation = site
            .smtp
            .wait_for(&format!("confirming {word}"), |s| {
                s.header("In-Reply-To").as_deref() == Some(&format!("<{id}>"))
            })
            .await;
        assert!(
            confirmation.text().starts_with(says),
            "{word}: {}",
            confirmation.text()
        );
        assert_eq!(
            confirmation.text().trim().lines().count(),
            1,
            "{}",
            confirmation.text()
        );
        assert_eq!(confirmation.rcpt, [ME]);
    }
    // No command became a model call: only the digest's run reached the model.
    assert_eq!(site.model.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_now_by_reply_fires_the_job_once() {
    let site = Site::new(&[]).await;
    let mut d = site.start().await;
    let (job, digest) = site.digest(&d, "Prices").await;
    let count = |v: serde_json::Value| v["runs"].as_array().map_or(0, Vec::len);
    assert_eq!(count(d.get(&format!("/v1/jobs/{job}/runs")).await.1), 1);

    let (id, raw) = reply(ME, &digest, "立即运行", "");
    site.arrive(&raw).await;
    let m = d.recorded(&id, |m| m["command_state"] == "done").await;
    assert_eq!(m["command"], "run_now");
    let started = m["task_id"].as_str().expect("the run's task").to_string();
    let (_, r) = d.get(&format!("/v1/jobs/{job}/runs")).await;
    assert_eq!(count(r.clone()), 2, "{r}");
    assert_eq!(r["runs"][0]["task_id"], started.as_str());
    assert_eq!(r["runs"][0]["reason"], "run now");
    site.smtp
        .wait_for("confirming the run", |s| {
            s.header("In-Reply-To").as_deref() == Some(&format!("<{id}>"))
                && s.text().starts_with("Started a run")
        })
        .await;

    // A restart reads nothing again and starts nothing again.
    d.stop().await;
    let d = site.start().await;
    let (_, r) = d.get(&format!("/v1/jobs/{job}/runs")).await;
    assert_eq!(count(r), 2);
    assert_eq!(d.inbox().await.len(), 1);
}
