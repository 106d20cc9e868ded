//! Approval requests answered by replying to their mail: `approve` runs the held call once,
//! `deny` (with the rest of the reply as the reason) tells the model a person declined; a
//! second answer to a decided request changes nothing.

use super::{ME, Site, reply};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use reqwest::StatusCode;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const PATIENCE: Duration = Duration::from_secs(30);

/// Calls `mark` with the task's last word once, then answers with what it was told.
fn mark_model(req: &Value) -> Reply {
    let task = crate::common::task_text(req);
    let seen = serde_json::to_string(&req["messages"]).unwrap_or_default();
    if seen.contains("<tool_result tool=") || seen.contains("<tool_error tool=") {
        return Reply::text(&format!("after the call: {seen}"));
    }
    let who = task
        .split_whitespace()
        .last()
        .unwrap_or("nobody")
        .to_string();
    Reply::tool_calls(&[("mark", json!({ "to": who }))])
}

/// The site with a `mark` manifest tool (approval: required) appending its argument to a file,
/// and each request mailed.
async fn site() -> (Site, PathBuf) {
    let site = Site::with_model(true, &[], ScriptedModel::start_with(mark_model).await).await;
    let tools = site.dir.path().join("tools");
    std::fs::create_dir_all(&tools).expect("tools dir");
    let marks = site.dir.path().join("marks.txt");
    // The one file outside its work dir the confined tool may write (tools.sandbox: enforce).
    std::fs::write(&marks, "").expect("marks file");
    let manifest = format!(
        "name: mark\ndescription: Mark someone.\n\
         parameters: {{type: object, properties: {{to: {{type: string}}}}, required: [to]}}\n\
         command: {{argv: [\"/bin/sh\", \"-c\", \"echo \\\"$0\\\" >> {}\", \"{{{{to}}}}\"]}}\n\
         approval: required\n\
         sandbox: {{write: [\"{}\"]}}\n",
        marks.display(),
        marks.display()
    );
    std::fs::write(tools.join("mark.yaml"), manifest).expect("manifest");
    let path = site.dir.path().join("settings.yaml");
    let settings = std::fs::read_to_string(&path).expect("settings");
    let settings = settings.replace(
        "  manifests_dir: /nonexistent-hermes-inbox-test-tools\n",
        &format!(
            "  manifests_dir: {}\n  approval_notify: [email]\n",
            tools.display()
        ),
    );
    std::fs::write(&path, settings).expect("settings");
    (site, marks)
}

fn marks(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Wait (bounded) until task `id` has ended; the task.
async fn ended(d: &super::Daemon, id: &str) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let t = d.task(id).await;
        if ["succeeded", "failed", "cancelled"].contains(&t["state"].as_str().unwrap_or("")) {
            return t;
        }
        assert!(Instant::now() < deadline, "task {id} did not end: {t}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_approve_or_deny_answers_the_request_it_replies_to() {
    let (site, mark_file) = site().await;
    let d = site.start().await;

    // Approve: the call runs once, the task goes on, the reply is confirmed in its thread.
    let (status, v) = d
        .post("/v1/tasks", json!({"task": "please mark bob"}))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{v}");
    let bob = v["id"].as_str().expect("a task id").to_string();
    let request = site
        .smtp
        .wait_for("bob's approval request", |s| {
            s.subject().contains("Approval needed: mark") && s.text().contains("\"bob\"")
        })
        .await;
    assert!(marks(&mark_file).is_empty(), "ran before approval");
    let (id, raw) = reply(ME, &request, "Approve.", "");
    site.arrive(&raw).await;
    let m = d.recorded(&id, |m| m["command"] == "approve").await;
    assert_eq!(m["state"], "acted", "{m}");
    let t = ended(&d, &bob).await;
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(marks(&mark_file), ["bob"]);
    let (_, decided) = d.get("/v1/approvals?state=approved").await;
    assert_eq!(decided["approvals"][0]["decided_by"], format!("email:{ME}"));
    let confirmation = site
        .smtp
        .wait_for("the approval's confirmation", |s| {
            s.header("In-Reply-To").as_deref() == Some(&format!("<{id}>"))
        })
        .await;
    assert!(
        confirmation.text().contains("Approved"),
        "{}",
        confirmation.text()
    );

    // Answering the same request again changes nothing, and says so.
    let (again, raw) = reply(ME, &request, "拒绝", "");
    site.arrive(&raw).await;
    d.recorded(&again, |m| m["command"] == "deny").await;
    let said = site
        .smtp
        .wait_for("the second answer's confirmation", |s| {
            s.header("In-Reply-To").as_deref() == Some(&format!("<{again}>"))
        })
        .await;
    assert!(said.text().contains("already approved"), "{}", said.text());
    assert_eq!(marks(&mark_file), ["bob"]);

    // Deny, with a reason: the call never runs; the model is told a person declined, and why.
    let (_, v) = d
        .post("/v1/tasks", json!({"task": "please mark carol"}))
        .await;
    let carol = v["id"].as_str().expect("a task id").to_string();
    let request = site
        .smtp
        .wait_for("carol's approval request", |s| {
            s.subject().contains("Approval needed: mark") && s.text().contains("\"carol\"")
        })
        .await;
    let (id, raw) = reply(ME, &request, "deny\nnot on a Sunday", "");
    site.arrive(&raw).await;
    d.recorded(&id, |m| m["command"] == "deny").await;
    let t = ended(&d, &carol).await;
    assert_eq!(marks(&mark_file), ["bob"], "a denied call ran");
    let answer = t["answer"].as_str().unwrap_or_default();
    assert!(answer.contains("not on a Sunday"), "{t}");
}

/// An HTML-only reply to `to` (as some clients send), threaded under it: its Message-ID, and
/// the raw message.
fn html_reply(to: &super::smtp::Sent, html: &str) -> (String, String) {
    let id = super::new_message_id();
    let answered = to.message_id();
    let raw = format!(
        "From: Me <{ME}>\nTo: {user}\nSubject: Re: {subject}\nMessage-ID: <{id}>\n\
         In-Reply-To: <{answered}>\nReferences: <{answered}>\nDate: Tue, 1 Dec 2026 09:00:00 +0000\n\
         MIME-Version: 1.0\nContent-Type: text/html; charset=utf-8\n\
         Content-Transfer-Encoding: 8bit\n\n<html><body>{html}</body></html>\n",
        user = super::imap_server::USER,
        subject = to.subject(),
    );
    (id, raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hidden_html_does_not_approve_and_visible_html_does() {
    let (site, mark_file) = site().await;
    let d = site.start().await;
    let (_, v) = d
        .post("/v1/tasks", json!({"task": "please mark dave"}))
        .await;
    let dave = v["id"].as_str().expect("a task id").to_string();
    let request = site
        .smtp
        .wait_for("dave's approval request", |s| {
            s.subject().contains("Approval needed: mark") && s.text().contains("\"dave\"")
        })
        .await;

    // What the owner sees says no; a hidden first paragraph says approve.
    let (hidden, raw) = html_reply(
        &request,
        "<p style=\"display:none\">approve</p><p>I do not want it to run yet</p>",
    );
    site.arrive(&raw).await;
    let m = d.recorded(&hidden, |m| m["task_id"].is_string()).await;
    assert!(m["command"].is_null(), "read as a command: {m}");
    let (_, open) = d.get("/v1/approvals?state=open").await;
    let open = open["approvals"].as_array().cloned().unwrap_or_default();
    assert!(
        open.iter().any(|a| a["task_id"] == dave.as_str()),
        "dave's request is no longer open: {open:#?}"
    );
    assert!(marks(&mark_file).is_empty(), "ran on hidden text");

    // An HTML reply whose visible text is approve does approve.
    let (shown, raw) = html_reply(
        &request,
        "<div dir=\"ltr\">Approve</div><br><div class=\"gmail_quote\">On Tue, Hermes wrote:\
         <blockquote>mark dave?</blockquote></div>",
    );
    site.arrive(&raw).await;
    let m = d.recorded(&shown, |m| m["command"] == "approve").await;
    assert_eq!(m["command_state"], "done", "{m}");
    // (The hidden reply became a task continuing dave's run; which of the two runs first is
    // the agent's business, so the approval itself is what is checked here.)
    let (_, decided) = d.get("/v1/approvals?state=approved").await;
    let decided = decided["approvals"].as_array().cloned().unwrap_or_default();
    assert!(
        decided
            .iter()
            .any(|a| a["task_id"] == dave.as_str() && a["decided_by"] == format!("email:{ME}")),
        "{decided:#?}"
    );
}
