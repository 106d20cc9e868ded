//! The inbox against a real IMAP server: an unprivileged Dovecot per test on a free loopback
//! port (Debian's dovecot-imapd, installed on first use), the real `hermes-agent serve` as a
//! process (so it can be killed -9 and restarted), a scripted model and an SMTP server on
//! loopback that receives the digests and the answers. Mail "arrives" by IMAP APPEND.
//!
//! Every wait is a bounded poll on a condition (the API's view of the inbox, a received mail,
//! the daemon's health), never a fixed sleep.

use crate::common::echo_model;
use crate::process::{Daemon, base_command};
use hermes_engine::llm::scripted::ScriptedModel;
use imap_server::Dovecot;
use reqwest::StatusCode;
use serde_json::json;
use smtp::{Sent, Smtp};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

mod approvals;
mod failures;
mod hardening;
mod imap_server;
mod replies;
mod screening;
mod smtp;

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
        let mut cmd = base_command(self.dir.path(), &[("IMAP_PASSWORD", imap_server::PASSWORD)]);
        cmd.arg("--config")
            .arg(self.dir.path().join("settings.yaml"))
            .arg("--data-dir")
            .arg(self.data())
            .args(args);
        cmd
    }

    /// Start the daemon and wait until it answers and its mailbox is connected.
    async fn start(&self) -> Daemon {
        // A daemon killed by SIGKILL leaves its address file behind.
        let _ = std::fs::remove_file(hermes_surfaces::daemon::addr_path(&self.data()));
        let mut d = Daemon::spawn(self.command(&["serve"]), self.dir.path(), &self.data())
            .with_patience(PATIENCE);
        d.ready_when("the mailbox connected", |h| h["inbox"] == "ok")
            .await;
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
