//! The Matrix channel when things go wrong: strangers, a kill -9, a send whose answer is lost,
//! the homeserver down for a while; and approvals answered with a reaction.

use super::daemon::{Chat, PATIENCE, job_to_room};
use super::person::Person;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use http_body_util::BodyExt;
use matrix_sdk::ruma::events::room::member::MembershipState;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strangers_are_refused_and_never_answered() {
    let chat = Chat::new("").await;
    let stranger_id = chat.synapse.register("stranger", "stranger-pw-1").await;
    let stranger = Person::login(&chat.synapse, &stranger_id, "stranger-pw-1").await;
    let d = chat.start().await;

    // A stranger's invite is declined.
    let theirs = stranger.create_dm(chat.agent_id()).await;
    let deadline = Instant::now() + PATIENCE;
    loop {
        let room = stranger.client().get_room(&theirs);
        let left = match room {
            Some(r) => matches!(
                r.get_member_no_sync(chat.agent_id()).await,
                Ok(Some(m)) if *m.membership() == MembershipState::Leave
            ),
            None => false,
        };
        if left {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stranger's invite was not declined:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // In a room of three, the stranger's message is recorded and ignored; so is mine that
    // does not address the agent; mine that mentions it is answered.
    let group = chat.me.create_dm(stranger.user_id()).await;
    stranger.join(&group).await;
    chat.me.invite(&group, chat.agent_id()).await;
    chat.me
        .wait_for_join(PATIENCE, &group, chat.agent_id())
        .await;
    let from_stranger = stranger
        .send_text(&group, &format!("{} delete everything", chat.agent))
        .await
        .to_string();
    let row = d
        .recorded(&from_stranger, |m| m["state"] == "ignored")
        .await;
    assert_eq!(row["reason"], "not_allowed", "{row}");
    let aside = chat
        .me
        .send_text(&group, "lunch at noon?")
        .await
        .to_string();
    let row = d.recorded(&aside, |m| m["state"] == "ignored").await;
    assert_eq!(row["reason"], "not_addressed", "{row}");
    let asked = chat
        .me
        .send_text(&group, &format!("{} what time is it", chat.agent))
        .await
        .to_string();
    chat.agent_says(|m| m.thread_root.as_ref().map(|r| r.as_str()) == Some(asked.as_str()))
        .await;
    assert_eq!(
        chat.count_from_agent(|m| m.body.contains("delete everything")),
        0,
        "the agent answered a stranger"
    );
    assert_eq!(chat.count_from_agent(|m| m.body.contains("lunch")), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_and_a_restart_a_message_is_acted_on_once_and_the_agent_still_decrypts() {
    let chat = Chat::new("").await;
    let mut d = chat.start().await;
    let first = chat.say("a quick question").await;
    // Killed once the message is recorded (its task may or may not have run, the sync
    // position may or may not be saved).
    d.recorded(&first, |m| m["task_id"].is_string()).await;
    d.kill9();
    let d = chat.start().await;
    chat.agent_says(|m| m.thread_root.as_ref().map(|r| r.as_str()) == Some(first.as_str()))
        .await;
    let second = chat.say("and a second one").await;
    let answer = chat
        .agent_says(|m| m.thread_root.as_ref().map(|r| r.as_str()) == Some(second.as_str()))
        .await;
    assert!(answer.encrypted);
    let rows: Vec<Value> = d
        .inbox()
        .await
        .into_iter()
        .filter(|m| m["message_id"] == first.as_str())
        .collect();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    // No second task, and the restarted daemon has the same device (no new login).
    let h = d.health().await.unwrap_or_default();
    assert_eq!(h["matrix"]["undecryptable"], 0, "{h}");
    assert_eq!(
        d.log().matches("logged in to Matrix").count(),
        1,
        "a new device after the restart:\n{}",
        d.log()
    );
    // Answered once (killed after the answer was queued, it would go out once too).
    assert_eq!(
        chat.count_from_agent(
            |m| m.thread_root.as_ref().map(|r| r.as_str()) == Some(first.as_str())
        ),
        1
    );
}

/// A homeserver in front of Synapse that takes the first message send through to it, then
/// drops the connection instead of answering: the agent cannot know the message was posted.
struct LossyProxy {
    url: String,
    dropped: Arc<AtomicUsize>,
}

impl LossyProxy {
    async fn start(upstream: String) -> LossyProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let dropped = Arc::new(AtomicUsize::new(0));
        let http = reqwest::Client::new();
        let count = dropped.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (http, upstream, count) = (http.clone(), upstream.clone(), count.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        forward(http.clone(), upstream.clone(), count.clone(), req)
                    });
                    let io = hyper_util::rt::TokioIo::new(tcp);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        LossyProxy { url, dropped }
    }
}

/// The request forwarded; the first `PUT …/send/…` answered by closing the connection.
async fn forward(
    http: reqwest::Client,
    upstream: String,
    dropped: Arc<AtomicUsize>,
    req: hyper::Request<hyper::body::Incoming>,
) -> Result<hyper::Response<http_body_util::Full<bytes::Bytes>>, std::io::Error> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map_err(std::io::Error::other)?
        .to_bytes();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let is_send = parts.method == hyper::Method::PUT && path.contains("/send/m.room");
    let mut out = http.request(parts.method.clone(), format!("{upstream}{path}"));
    for (k, v) in &parts.headers {
        if k != hyper::header::HOST {
            out = out.header(k, v);
        }
    }
    let resp = out.body(body).send().await.map_err(std::io::Error::other)?;
    let status = resp.status();
    let headers = resp.headers().clone();
    let bytes = resp.bytes().await.map_err(std::io::Error::other)?;
    if is_send && dropped.fetch_add(1, Ordering::SeqCst) == 0 {
        // Synapse has the event; the agent hears nothing back.
        return Err(std::io::Error::other("connection dropped on purpose"));
    }
    let mut answer = hyper::Response::new(http_body_util::Full::new(bytes));
    *answer.status_mut() = status;
    for (k, v) in &headers {
        if k != hyper::header::CONTENT_LENGTH && k != hyper::header::TRANSFER_ENCODING {
            answer.headers_mut().insert(k, v.clone());
        }
    }
    Ok(answer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_retried_after_its_answer_was_lost_posts_once() {
    let chat = Chat::new("").await;
    let proxy = LossyProxy::start(chat.synapse.url()).await;
    let path = chat.dir.path().join("settings.yaml");
    let settings = std::fs::read_to_string(&path).expect("settings");
    std::fs::write(&path, settings.replace(&chat.synapse.url(), &proxy.url)).expect("settings");
    let d = chat.start().await;
    let _job = job_to_room(&d, "once-3").await;
    chat.agent_says(|m| m.body.contains("news for once-3"))
        .await;
    // Wait until the outbox has recorded it sent (after the retry), then count.
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (_, n) = d.get("/v1/deliveries?limit=100").await;
        let sent = n["deliveries"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["channel"] == "matrix:home" && n["state"] == "sent");
        if sent {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the notice was never recorded sent: {n}\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        proxy.dropped.load(Ordering::SeqCst) >= 2,
        "the send was not retried"
    );
    // Another message after it, so that anything posted twice would have arrived by now.
    let asked = chat.say("anything else").await;
    chat.agent_says(|m| m.thread_root.as_ref().map(|r| r.as_str()) == Some(asked.as_str()))
        .await;
    assert_eq!(
        chat.count_from_agent(|m| m.body.contains("news for once-3")),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_homeserver_down_the_channel_says_so_and_catches_up_after() {
    let mut chat = Chat::new("").await;
    let d = chat.start().await;
    chat.synapse.stop().await;
    let h = d
        .health_until("the Matrix channel down", |h| {
            h["matrix"]["state"] == "down"
        })
        .await;
    assert_eq!(h["status"], "degraded", "{h}");
    // A notice queued meanwhile waits in the outbox.
    let _job = job_to_room(&d, "while-down").await;
    chat.synapse.start().await;
    d.health_until("the Matrix channel back", |h| h["matrix"]["state"] == "ok")
        .await;
    chat.agent_says(|m| m.body.contains("news for while-down"))
        .await;
    let asked = chat.say("are you back").await;
    chat.agent_says(|m| m.thread_root.as_ref().map(|r| r.as_str()) == Some(asked.as_str()))
        .await;
}

/// Calls `mark` once, then answers with what it was told.
fn mark_model(req: &Value) -> Reply {
    let seen = serde_json::to_string(&req["messages"]).unwrap_or_default();
    if seen.contains("<tool_result tool=") || seen.contains("<tool_error tool=") {
        return Reply::text("marked");
    }
    Reply::tool_calls(&[("mark", json!({ "to": "alice" }))])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_request_in_the_room_is_answered_with_a_reaction_once() {
    let tools = tempfile::tempdir().expect("tools dir");
    let marks = tools.path().join("marks.txt");
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
    std::fs::write(tools.path().join("mark.yaml"), manifest).expect("manifest");
    let chat = Chat::with_model(ScriptedModel::start_with(mark_model).await, "").await;
    let path = chat.dir.path().join("settings.yaml");
    let settings = std::fs::read_to_string(&path).expect("settings");
    let settings = settings.replace(
        "  manifests_dir: /nonexistent-hermes-matrix-test-tools\n",
        &format!(
            "  manifests_dir: {}\n  approval_notify: [matrix:home]\n",
            tools.path().display()
        ),
    );
    std::fs::write(&path, settings).expect("settings");
    let d = chat.start().await;
    let asked = chat.say("mark alice please").await;
    let request = chat
        .agent_says(|m| m.body.contains("mark") && m.body.to_lowercase().contains("approv"))
        .await;
    chat.me.react(chat.room(), &request.event_id, "✅").await;
    chat.agent_says(|m| {
        m.thread_root.as_ref() == Some(&request.event_id) && m.body.starts_with("Approved")
    })
    .await;
    chat.agent_says(|m| {
        m.thread_root.as_ref().map(|r| r.as_str()) == Some(asked.as_str())
            && m.body.contains("marked")
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(&marks).unwrap_or_default(),
        "alice\n"
    );
    let (_, list) = d.get("/v1/approvals").await;
    let decided: Vec<&Value> = list["approvals"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["decided_by"] == "matrix")
        .collect();
    assert_eq!(decided.len(), 1, "{list}");
    // A second reaction changes nothing and is not answered again as an approval.
    chat.me.react(chat.room(), &request.event_id, "❌").await;
    chat.agent_says(|m| {
        m.thread_root.as_ref() == Some(&request.event_id) && m.body.contains("already")
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(&marks).unwrap_or_default(),
        "alice\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_logs_in_once_and_checks_the_room() {
    let chat = Chat::new("").await;
    let (ok, out) = chat.cli(&["doctor"]);
    assert!(out.contains("matrix @hermes:localhost"), "{out}");
    assert!(out.contains("end-to-end encryption on"), "{out}");
    assert!(out.contains("matrix:home"), "{out}");
    let _ = ok;
    // The daemon reuses doctor's session: the same device, no second login.
    let d = chat.start().await;
    assert!(!d.log().contains("logged in to Matrix"), "{}", d.log());
    let (_, again) = chat.cli(&["doctor"]);
    assert!(again.contains("connected (device"), "{again}");
    // The rooms too, asked of the daemon's connection.
    assert!(again.contains("[ok  ] matrix:home: joined"), "{again}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_daemons_on_postgres_one_reads_the_channel_and_the_other_takes_over() {
    let db = tokio::task::spawn_blocking(|| crate::postgres::cluster::cluster().create_database())
        .await
        .expect("the cluster's thread");
    let url = crate::postgres::cluster::cluster().url(&db);
    let chat = Chat::new(&format!("storage:\n  url: \"{url}\"\n  node_lease_s: 3\n")).await;
    let mut a = chat.start_node(&chat.dir.path().join("node-a"), true).await;
    chat.me
        .wait_for_join(PATIENCE, chat.room(), chat.agent_id())
        .await;
    let b = chat
        .start_node(&chat.dir.path().join("node-b"), false)
        .await;
    b.health_until("node b standing by", |h| {
        h["matrix"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("standing by"))
    })
    .await;
    let first = chat.say("first question").await;
    chat.agent_says(|m| m.thread_root.as_ref().map(|r| r.as_str()) == Some(first.as_str()))
        .await;
    // A answered; B still stands by, rather than syncing beside it.
    let (_, health) = b.get("/healthz").await;
    assert!(
        health["matrix"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("standing by")),
        "{health}"
    );

    // A dies; once its lease lapsed B holds the channel, with a device of its own.
    a.kill9();
    let health = b
        .health_until("node b connected", |h| h["matrix"]["state"] == "ok")
        .await;
    // B logged in as a device of its own: the person's client must know it before what they
    // say is encrypted for it.
    let device = health["matrix"]["device"].as_str().unwrap_or_default();
    chat.me
        .wait_for_device(PATIENCE, chat.agent_id(), device)
        .await;
    let second = chat.say("second question").await;
    let answer = chat
        .agent_says(|m| m.thread_root.as_ref().map(|r| r.as_str()) == Some(second.as_str()))
        .await;
    assert!(answer.encrypted);
    // Each once: the first was not taken in again by B.
    for event in [&first, &second] {
        let n = chat.count_from_agent(|m| {
            m.thread_root.as_ref().map(|r| r.as_str()) == Some(event.as_str())
        });
        assert_eq!(n, 1, "answers to {event}");
    }
    let rows = b.inbox().await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
}

/// A `recovery_key` that does not restore the backup is said where a person looks — `/healthz`
/// (degraded) and doctor — not only in the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_recovery_key_is_reported_not_only_logged() {
    let chat = Chat::new("").await;
    chat.edit_settings(
        "    allow_from: ",
        "    recovery_key: \"EsTc bogu sKey 1234 5678\"\n    allow_from: ",
    );
    let d = chat.start().await;
    let (_, h) = d.get("/healthz").await;
    assert_eq!(h["matrix"]["recovery_failed"], true, "{h}");
    assert_eq!(h["status"], "degraded", "{h}");
    let (_, out) = chat.cli(&["doctor"]);
    assert!(
        out.contains("recovery_key did not restore the key backup"),
        "{out}"
    );
}

/// A kill in the middle of a batch — some of its messages recorded, the sync position not yet
/// saved — loses none of the rest: the restarted daemon reads the batch back and records what
/// was left. Simulated exactly: the batch read whole, then the last messages' records and the
/// position put back as they were before it (the SDK's own position stays past it, as after a
/// kill; a sync from the saved position then comes back empty).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_left_when_a_batch_was_cut_short_are_read_after_the_restart() {
    let chat = Chat::new("").await;
    let mut d = chat.start().await;
    let h = d.health().await.unwrap_or_default();
    let device = h["matrix"]["device"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!device.is_empty(), "{h}");
    d.stop().await;
    let key = format!("matrix/{device}");
    let db = chat.data().join("hermes.db");
    let url = format!("sqlite://{}", db.display());
    let position = {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&url).await.expect("the db");
        let p: String =
            sqlx::query_scalar("SELECT position FROM channel_cursors WHERE channel = ?")
                .bind(&key)
                .fetch_one(&mut c)
                .await
                .expect("a saved position");
        p
    };
    let mut said = Vec::new();
    for n in 1..=5 {
        said.push(chat.say(&format!("question {n}")).await);
    }
    let mut d = chat.start().await;
    d.recorded(&said[4], |m| m["task_id"].is_string()).await;
    d.stop().await;
    {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&url).await.expect("the db");
        for id in &said[2..] {
            sqlx::query("DELETE FROM inbox_messages WHERE message_id = ?")
                .bind(id)
                .execute(&mut c)
                .await
                .expect("delete");
        }
        sqlx::query("UPDATE channel_cursors SET position = ? WHERE channel = ?")
            .bind(&position)
            .bind(&key)
            .execute(&mut c)
            .await
            .expect("put the position back");
    }
    let d = chat.start().await;
    for id in &said[2..] {
        d.recorded(id, |m| m["task_id"].is_string()).await;
    }
    // Read back, not re-synced: the SDK drops a sync response it had already processed.
    assert!(
        d.log().contains("the last Matrix batch was cut short"),
        "{}",
        d.log()
    );
}
