//! The inbox against a real IMAP server: an unprivileged Dovecot per test on a free loopback
//! port (Debian's dovecot-imapd, installed on first use), the real `hermes-agent serve` as a
//! process (so it can be killed -9 and restarted), a scripted model and an SMTP server on
//! loopback that receives the digests and the answers. Mail "arrives" by IMAP APPEND.
//!
//! Every wait is a bounded poll on a condition (the API's view of the inbox, a received mail,
//! the daemon's health), never a fixed sleep.

use crate::common::echo_model;
use hermes_engine::llm::scripted::ScriptedModel;
use hermes_surfaces::daemon::read_addr;
use imap_server::Dovecot;
use reqwest::StatusCode;
use serde_json::{Value, json};
use smtp::{Sent, Smtp};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod approvals;
mod failures;
mod hardening;
mod imap_server;
mod replies;
mod screening;
mod smtp;

const BIN: &str = env!("CARGO_BIN_EXE_hermes-agent");
/// Upper bound for anything that should take a moment.
const PATIENCE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(25);
/// The allowed sender.
const ME: &str = "me@example.test";

/// Everything one test runs: the IMAP server, the SMTP server, the model, and the daemon's
/// settings and data dir.
struct Site {
    dir: tempfile::TempDir,
    imap: Dovecot,
    smtp: Smtp,
    model: ScriptedModel,
}

impl Site {
    /// A site whose `inbox.email` has `extra` lines too (indented 4 spaces).
    async fn new(extra: &[&str]) -> Site {
        Site::with(true, extra).await
    }

    async fn with(idle: bool, extra: &[&str]) -> Site {
        Site::with_model(idle, extra, ScriptedModel::start_with(echo_model).await).await
    }

    /// A site whose model is `model`.
    async fn with_model(idle: bool, extra: &[&str], model: ScriptedModel) -> Site {
        let imap = Dovecot::start(idle).await;
        let smtp = Smtp::start();
        let dir = tempfile::tempdir().expect("temp dir");
        let url = model.base_url();
        let mut yaml = format!(
            "model:\n  profiles:\n    fast: {{base_url: \"{url}\", model: scripted, timeout_s: 60}}\n    \
             pro: {{base_url: \"{url}\", model: scripted-pro, timeout_s: 60}}\n\
             tools:\n  manifests_dir: /nonexistent-hermes-inbox-test-tools\n\
             context:\n  summary_enabled: false\n\
             scheduler:\n  timezone: UTC\n\
             server:\n  port: 0\n\
             agent:\n  workers: 2\n\
             notify:\n  email:\n    smtp_host: 127.0.0.1\n    smtp_port: {smtp}\n    security: none\n    \
             from: \"Hermes <agent@example.test>\"\n    to: [{ME}]\n\
             inbox:\n  email:\n    imap_host: 127.0.0.1\n    imap_port: {imap}\n    security: none\n    \
             username: {user}\n    password: ${{IMAP_PASSWORD}}\n    allow_from: [{ME}]\n",
            smtp = smtp.addr.port(),
            imap = imap.port,
            user = imap_server::USER,
        );
        for l in extra {
            yaml.push_str(&format!("    {l}\n"));
        }
        std::fs::write(dir.path().join("settings.yaml"), yaml).expect("settings");
        Site {
            dir,
            imap,
            smtp,
            model,
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.current_dir(self.dir.path())
            .env_remove("HERMES_CONFIG")
            .env_remove("HERMES_DATA_DIR")
            .env_remove("HERMES_TOKEN")
            .env("XDG_CONFIG_HOME", self.dir.path().join("xdg-config"))
            .env("RUST_LOG", "info")
            .env("IMAP_PASSWORD", imap_server::PASSWORD)
            .arg("--config")
            .arg(self.dir.path().join("settings.yaml"))
            .arg("--data-dir")
            .arg(self.data())
            .args(args)
            .stdin(Stdio::null());
        cmd
    }

    /// Start the daemon and wait until it answers and its mailbox is connected.
    async fn start(&self) -> Daemon {
        // A daemon killed by SIGKILL leaves its address file behind.
        let _ = std::fs::remove_file(hermes_surfaces::daemon::addr_path(&self.data()));
        let log = self.dir.path().join("daemon.log");
        let file = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let err = file.try_clone().expect("log handle");
        let child = self
            .command(&["serve"])
            .stdout(Stdio::from(file))
            .stderr(Stdio::from(err))
            .spawn()
            .expect("the daemon starts");
        let mut d = Daemon {
            child: Some(child),
            base: String::new(),
            data: self.data(),
            log,
            http: reqwest::Client::new(),
        };
        d.ready().await;
        d
    }

    /// Deliver a message into the mailbox.
    async fn arrive(&self, raw: &str) {
        self.imap.append(raw).await;
    }

    /// A job that mails its result, fired once: its id and the digest as received.
    async fn digest(&self, d: &Daemon, name: &str) -> (String, Sent) {
        let (status, job) = d
            .post(
                "/v1/jobs",
                json!({"task": format!("news for {name}"), "schedule": "0 8 * * *",
                       "name": name, "notify": ["email"]}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{job}");
        let id = job["id"].as_str().expect("a job id").to_string();
        let (status, run) = d.post(&format!("/v1/jobs/{id}/run"), json!({})).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{run}");
        let mail = self
            .smtp
            .wait_for(&format!("for job {name}"), |m| m.subject().contains(name))
            .await;
        (id, mail)
    }
}

/// A unique Message-ID for a test's mail.
fn new_message_id() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "test-{}-{}@example.test",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A person's reply to `to` (a mail the daemon sent): threaded under it, the original quoted
/// below the text as mail clients do. Its Message-ID, and the raw message.
fn reply(from: &str, to: &Sent, text: &str, extra_headers: &str) -> (String, String) {
    let id = new_message_id();
    let answered = to.message_id();
    let quoted: String = to.text().lines().map(|l| format!("> {l}\n")).collect();
    let raw = format!(
        "From: Me <{from}>\nTo: {user}\nSubject: Re: {subject}\nMessage-ID: <{id}>\n\
         In-Reply-To: <{answered}>\nReferences: <{answered}>\nDate: Tue, 1 Dec 2026 09:00:00 +0000\n\
         {extra_headers}MIME-Version: 1.0\nContent-Type: text/plain; charset=utf-8\n\
         Content-Transfer-Encoding: 8bit\n\n{text}\n\nOn Tue, 1 Dec 2026 at 08:00, Hermes <{user}> wrote:\n{quoted}",
        user = imap_server::USER,
        subject = to.subject(),
    );
    (id, raw)
}

/// A fresh message (no thread).
fn fresh(from: &str, subject: &str, text: &str, extra_headers: &str) -> (String, String) {
    let id = new_message_id();
    let raw = format!(
        "From: {from}\nTo: {user}\nSubject: {subject}\nMessage-ID: <{id}>\n\
         Date: Tue, 1 Dec 2026 09:00:00 +0000\n{extra_headers}MIME-Version: 1.0\n\
         Content-Type: text/plain; charset=utf-8\nContent-Transfer-Encoding: 8bit\n\n{text}\n",
        user = imap_server::USER,
    );
    (id, raw)
}

/// A running daemon process; killed (and reaped) on drop.
struct Daemon {
    child: Option<Child>,
    base: String,
    data: PathBuf,
    log: PathBuf,
    http: reqwest::Client,
}

impl Daemon {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("a child").id()
    }

    fn still_running(&mut self) {
        if let Some(status) = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            panic!("the daemon exited early ({status}):\n{}", self.log());
        }
    }

    /// The address, then `/healthz` until it answers with the mailbox connected.
    async fn ready(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        loop {
            self.still_running();
            if let Ok(Some(addr)) = read_addr(&self.data) {
                self.base = format!("http://{addr}");
                let (_, h) = self.get_maybe("/healthz").await;
                if h["inbox"] == "ok" {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "the daemon's inbox was not connected within {PATIENCE:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn get_maybe(&self, path: &str) -> (Option<StatusCode>, Value) {
        match self
            .http
            .get(format!("{}{path}", self.base))
            .timeout(Duration::from_secs(5))
            .send()
            .await
        {
            Ok(r) => {
                let status = r.status();
                (Some(status), r.json().await.unwrap_or(Value::Null))
            }
            Err(_) => (None, Value::Null),
        }
    }

    async fn get(&self, path: &str) -> (StatusCode, Value) {
        let r = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("the daemon answers");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    async fn text(&self, path: &str) -> String {
        self.http
            .get(format!("{}{path}", self.base))
            .header("accept", "text/html")
            .send()
            .await
            .expect("the daemon answers")
            .text()
            .await
            .unwrap_or_default()
    }

    async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("the daemon answers");
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// The inbox as the API lists it, newest first.
    async fn inbox(&self) -> Vec<Value> {
        let (status, v) = self.get("/v1/inbox?limit=1000").await;
        assert_eq!(status, StatusCode::OK, "{v}");
        v["messages"].as_array().cloned().unwrap_or_default()
    }

    /// Wait (bounded) until the message with `message_id` is recorded and satisfies `pred`.
    async fn recorded(&self, message_id: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let found = self
                .inbox()
                .await
                .into_iter()
                .find(|m| m["message_id"] == message_id);
            if let Some(m) = found
                && pred(&m)
            {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "message {message_id} was not recorded as expected within {PATIENCE:?}; inbox: {:#?}\n{}",
                self.inbox().await,
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn task(&self, id: &str) -> Value {
        let (status, t) = self.get(&format!("/v1/tasks/{id}")).await;
        assert_eq!(status, StatusCode::OK, "{t}");
        t
    }

    async fn job(&self, id: &str) -> Value {
        let (_, jobs) = self.get("/v1/jobs").await;
        jobs["jobs"]
            .as_array()
            .and_then(|js| js.iter().find(|j| j["id"] == id).cloned())
            .unwrap_or(Value::Null)
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill {sig} failed");
    }

    /// SIGKILL, and reap it.
    fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and a clean exit.
    async fn stop(&mut self) {
        self.signal("-TERM");
        let deadline = Instant::now() + PATIENCE;
        let child = self.child.as_mut().expect("a child");
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                assert_eq!(status.code(), Some(0), "{}", self.log());
                self.child = None;
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not stop:\n{}",
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// Wait (bounded) until `cond` holds; `what` names it in the failure.
async fn until<F: Future<Output = bool>>(what: &str, mut cond: impl FnMut() -> F) {
    let deadline = Instant::now() + PATIENCE;
    while !cond().await {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(POLL).await;
    }
}

/// The log of a site, for the password check.
fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}
