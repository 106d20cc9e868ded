//! The Matrix channel of the real daemon against a real Synapse: the person is a second
//! `matrix-sdk` client with encryption on (`person.rs`), the agent the `hermes-agent serve`
//! process (so it can be killed -9 and restarted) with a scripted model.
//!
//! Every wait is a bounded poll on a condition (a message the person received, the API's view
//! of the inbox, the daemon's health), never a fixed sleep.

use super::person::{Message, Person};
use super::server::Synapse;
use crate::common::echo_model;
pub(crate) use crate::process::Daemon;
use crate::process::base_command;
use hermes_engine::llm::scripted::ScriptedModel;
use matrix_sdk::ruma::{OwnedRoomId, RoomId, UserId};
use reqwest::StatusCode;
use serde_json::json;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Upper bound for anything that should take a moment (an encrypted round trip is several
/// syncs on both sides).
pub const PATIENCE: Duration = Duration::from_secs(60);
const AGENT_PASSWORD: &str = "agent-pw-7c1e";
const ME_PASSWORD: &str = "me-pw-93ab";

/// One test's world: Synapse, the agent's account, the person `me` in an encrypted direct
/// room with it, the model, and the daemon's settings and data dir.
pub struct Chat {
    pub dir: tempfile::TempDir,
    pub synapse: Synapse,
    pub model: ScriptedModel,
    pub agent: String,
    pub me: Person,
    /// The direct room `me` made with the agent, `matrix:home` in the settings.
    pub room: OwnedRoomId,
}

impl Chat {
    /// A world whose model echoes its task; `extra` is appended to the settings' top level.
    pub async fn new(extra: &str) -> Chat {
        Chat::with_model(ScriptedModel::start_with(echo_model).await, extra).await
    }

    pub async fn with_model(model: ScriptedModel, extra: &str) -> Chat {
        let synapse = Synapse::new().await;
        let agent = synapse.register("hermes", AGENT_PASSWORD).await;
        let me_id = synapse.register("me", ME_PASSWORD).await;
        let me = Person::login(&synapse, &me_id, ME_PASSWORD).await;
        let agent_id = UserId::parse(agent.as_str()).expect("the agent's id");
        let room = me.create_dm(&agent_id).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let url = model.base_url();
        let yaml = format!(
            "model:\n  profiles:\n    fast: {{base_url: \"{url}\", model: scripted, timeout_s: 60}}\n\
             tools:\n  manifests_dir: /nonexistent-hermes-matrix-test-tools\n\
             context:\n  summary_enabled: false\n\
             scheduler:\n  timezone: UTC\n\
             server:\n  port: 0\n\
             agent:\n  workers: 2\n\
             channels:\n  matrix:\n    homeserver: \"{hs}\"\n    user: \"{agent}\"\n    \
             password: ${{MATRIX_PASSWORD}}\n    allow_from: [\"{me}\"]\n    \
             rooms: {{home: \"{room}\"}}\n{extra}",
            hs = synapse.url(),
            me = me.user_id(),
        );
        std::fs::write(dir.path().join("settings.yaml"), yaml).expect("settings");
        Chat {
            dir,
            synapse,
            model,
            agent,
            me,
            room,
        }
    }

    pub fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Put `with` in the settings file where `at` stands (once; the text must be there).
    pub fn edit_settings(&self, at: &str, with: &str) {
        let path = self.dir.path().join("settings.yaml");
        let yaml = std::fs::read_to_string(&path).expect("settings");
        assert!(yaml.contains(at), "no '{at}' in:\n{yaml}");
        std::fs::write(&path, yaml.replacen(at, with, 1)).expect("settings");
    }

    pub fn agent_id(&self) -> &UserId {
        <&UserId>::try_from(self.agent.as_str()).expect("the agent's id")
    }

    pub fn room(&self) -> &RoomId {
        &self.room
    }

    fn command(&self, args: &[&str]) -> Command {
        self.command_in(&self.data(), args)
    }

    fn command_in(&self, data: &std::path::Path, args: &[&str]) -> Command {
        let env = [
            ("RUST_LOG", "info,matrix_sdk=warn,matrix_sdk_crypto=warn"),
            ("MATRIX_PASSWORD", AGENT_PASSWORD),
        ];
        let mut cmd = base_command(self.dir.path(), &env);
        cmd.arg("--config")
            .arg(self.dir.path().join("settings.yaml"))
            .arg("--data-dir")
            .arg(data)
            .args(args);
        cmd
    }

    /// Run the CLI to its end: its exit status and output.
    pub fn cli(&self, args: &[&str]) -> (bool, String) {
        let out = self.command(args).output().expect("the CLI runs");
        (
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// Start the daemon; wait until it answers and the agent has joined the room.
    pub async fn start(&self) -> Daemon {
        let d = self.start_node(&self.data(), true).await;
        self.me
            .wait_for_join(PATIENCE, self.room(), self.agent_id())
            .await;
        d
    }

    /// Start a daemon on data dir `data` (another node on the same database has another);
    /// wait until it answers and, with `connected`, until its Matrix channel is.
    pub async fn start_node(&self, data: &std::path::Path, connected: bool) -> Daemon {
        let _ = std::fs::remove_file(hermes_surfaces::daemon::addr_path(data));
        let cmd = self.command_in(data, &["serve"]);
        let mut d =
            Daemon::spawn_logging_to(cmd, data.with_extension("log"), data).with_patience(PATIENCE);
        d.ready_when("the Matrix channel connected", |h| {
            !connected || h["matrix"]["state"] == "ok"
        })
        .await;
        d
    }

    /// `me` says `text` in the room; the event's id.
    pub async fn say(&self, text: &str) -> String {
        self.me.send_text(self.room(), text).await.to_string()
    }

    /// The first message from the agent (received, or within [`PATIENCE`]) that matches.
    pub async fn agent_says(&self, what: impl Fn(&Message) -> bool) -> Message {
        let agent = self.agent_id().to_owned();
        self.me
            .wait_for(PATIENCE, |m| m.sender == agent && what(m))
            .await
    }

    /// Messages the agent sent that match.
    pub fn count_from_agent(&self, what: impl Fn(&Message) -> bool) -> usize {
        let agent = self.agent_id().to_owned();
        self.me
            .messages()
            .iter()
            .filter(|m| m.sender == agent && what(m))
            .count()
    }
}

/// A job sending its result to `matrix:home`, fired once: its id.
pub async fn job_to_room(d: &Daemon, name: &str) -> String {
    let (status, job) = d
        .post(
            "/v1/jobs",
            json!({"task": format!("news for {name}"), "schedule": "0 8 * * *",
                   "name": name, "notify": ["matrix:home"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let id = job["id"].as_str().expect("a job id").to_string();
    let (status, run) = d.post(&format!("/v1/jobs/{id}/run"), json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_question_is_answered_encrypted_in_its_thread() {
    let chat = Chat::new("").await;
    let d = chat.start().await;
    let asked = chat.say("what is on today").await;
    let answer = chat
        .agent_says(|m| m.thread_root.as_ref().map(|r| r.as_str()) == Some(asked.as_str()))
        .await;
    assert!(answer.encrypted, "the answer came unencrypted: {answer:?}");
    assert!(
        answer.body.contains("answer to: what is on today"),
        "{answer:?}"
    );
    let row = d
        .recorded(&asked, |m| {
            m["state"] == "acted" && m["task_id"].is_string()
        })
        .await;
    assert_eq!(row["channel"], "matrix");
    assert_eq!(row["from"], chat.me.user_id().as_str());
    let task = d.task(row["task_id"].as_str().unwrap_or_default()).await;
    assert_eq!(task["origin"], "matrix", "{task}");
    assert!(
        chat.me.undecryptable().is_empty(),
        "{:?}",
        chat.me.undecryptable()
    );
    let h = d.health().await.unwrap_or_default();
    assert_eq!(h["status"], "ok", "{h}");
    assert_eq!(h["matrix"]["decryption_failing"], false, "{h}");
    // Nothing secret in the log.
    let log = d.log();
    assert!(!log.contains(AGENT_PASSWORD), "the password is in the log");
    assert!(
        !log.contains("what is on today"),
        "a message's text is in the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_result_reaches_the_room_and_a_reply_in_its_thread_continues_the_run() {
    let chat = Chat::new("").await;
    let d = chat.start().await;
    let job = job_to_room(&d, "digest-7").await;
    let notice = chat
        .agent_says(|m| m.body.contains("news for digest-7") && m.thread_root.is_none())
        .await;
    assert!(notice.encrypted, "{notice:?}");
    assert!(
        notice
            .formatted
            .as_deref()
            .unwrap_or("")
            .contains("<strong>"),
        "the title is not bold in HTML: {notice:?}"
    );
    let reply = chat
        .me
        .send_in_thread(chat.room(), &notice.event_id, "tell me more about item 2")
        .await
        .to_string();
    let answer = chat
        .agent_says(|m| {
            m.thread_root.as_ref() == Some(&notice.event_id)
                && m.body.contains("tell me more about item 2")
        })
        .await;
    assert!(answer.encrypted);
    let row = d.recorded(&reply, |m| m["task_id"].is_string()).await;
    assert_eq!(row["job_id"], job.as_str(), "{row}");
    let task = d.task(row["task_id"].as_str().unwrap_or_default()).await;
    assert!(
        task["parent_id"].is_string(),
        "the reply did not continue the run: {task}"
    );

    // `pause` in the notice's thread pauses the job, without the model, and says so.
    let calls = chat.model.request_count();
    let pause = chat
        .me
        .send_in_thread(chat.room(), &notice.event_id, "pause")
        .await
        .to_string();
    chat.agent_says(|m| {
        m.thread_root.as_ref() == Some(&notice.event_id) && m.body.contains("Paused")
    })
    .await;
    let (_, jobs) = d.get("/v1/jobs").await;
    let j = jobs["jobs"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|j| j["id"] == job.as_str())
        .cloned()
        .unwrap_or_default();
    assert_eq!(j["enabled"], false, "{jobs}");
    let row = d.recorded(&pause, |m| m["command"] == "pause").await;
    assert_eq!(row["command_state"], "done", "{row}");
    assert_eq!(
        chat.model.request_count(),
        calls,
        "the model was asked about a command"
    );
}

/// `matrix:NAME` for a person goes to an encrypted direct room they are in: never to a plain
/// one they also have with the agent (a notice can carry an approval request's arguments), nor
/// to one they left (it would reach no one) — a new encrypted one is made instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notices_to_a_person_go_to_an_encrypted_direct_room_they_are_in() {
    let chat = Chat::new("").await;
    chat.edit_settings(
        "rooms: {home: ",
        &format!("rooms: {{me: \"{}\", home: ", chat.me.user_id()),
    );
    let d = chat.start().await;
    let plain = chat.me.create_plain_dm(chat.agent_id()).await;
    chat.me
        .wait_for_join(PATIENCE, &plain, chat.agent_id())
        .await;
    // The person leaves the encrypted one; once the agent answers in the plain room, it has
    // seen everything before (the leave included).
    chat.me
        .client()
        .get_room(chat.room())
        .expect("the encrypted room")
        .leave()
        .await
        .expect("leave");
    chat.me.send_text(&plain, "hello").await;
    chat.agent_says(|m| m.room_id == plain && m.body.contains("hello"))
        .await;

    let (status, job) = d
        .post(
            "/v1/jobs",
            json!({"task": "news for me", "schedule": "0 8 * * *", "notify": ["matrix:me"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{job}");
    let id = job["id"].as_str().expect("a job id");
    let (status, run) = d.post(&format!("/v1/jobs/{id}/run"), json!({})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{run}");
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let (_, sent) = d.get("/v1/deliveries?state=sent").await;
        let to_me = sent["deliveries"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|n| n["channel"] == "matrix:me");
        if to_me {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not sent: {sent}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        d.log().contains("creating an encrypted direct room"),
        "{}",
        d.log()
    );
    assert_eq!(
        chat.count_from_agent(|m| m.room_id == plain && m.body.contains("news for me")),
        0
    );
}
