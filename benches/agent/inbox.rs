//! The inbox: how long a mail takes from its arrival to the start of the task it becomes,
//! with the mailbox in IDLE — the release daemon (`hermes-agent serve`) reading a real
//! Dovecot on loopback, a scripted model that answers at once, answers sent to an SMTP sink —
//! and what keeping the mailbox connected costs the idle daemon in memory.
//!
//! Latency, per mail (50, one after another): t₀ = just before the test's IMAP APPEND is
//! sent, t₁ = when the server acknowledged it, and the task's `started_at` as the daemon
//! recorded it (a worker took it). "APPEND → task start" is `started_at − t₀`: the server
//! storing the mail, telling the idle connection, the daemon fetching, parsing and recording it
//! with its task in one transaction, and a worker taking the task. The APPEND's own time
//! (t₁ − t₀) is shown apart.
//!
//! Memory: VmRSS of the idle daemon 2 s after it is ready, with no `inbox` section and with the
//! mailbox connected (IDLE), and again after the 50 mails. Needs Dovecot and root
//! (`sudo bash scripts/ci/imap-deps.sh`), as the inbox's tests do.

use crate::common::{figure, percentile};
use crate::footprint::{self, Daemon, memory_parts};
use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use serde_json::Value;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const MAILS: usize = 50;
const USER: &str = "agent@example.test";
const PASSWORD: &str = "bench-imap-password";
const ME: &str = "me@example.test";

pub async fn run() -> Result<()> {
    println!(
        "\n== inbox: a mail's arrival to its task's start (IDLE), and the idle daemon with a mailbox"
    );
    let bin = footprint::binary();
    if !bin.exists() {
        bail!(
            "{} is missing: build it first with `cargo build --release`",
            bin.display()
        );
    }
    let root = tempfile::tempdir()?;
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755))?;
    let imap = Dovecot::start(root.path())?;
    let smtp = smtp_sink()?;
    let model = ScriptedModel::start_unrecorded(|_| Reply::text("done")).await;
    let client = reqwest::Client::new();
    let mib = |kib: u64| format!("{:.1}", kib as f64 / 1024.0);

    // The same settings with and without the mailbox.
    let without = config(root.path(), "without", &model.base_url(), smtp, None)?;
    let with = config(
        root.path(),
        "with",
        &model.base_url(),
        smtp,
        Some(imap.port),
    )?;

    let d = Daemon::spawn(
        &bin,
        &without,
        &root.path().join("data-without"),
        root.path(),
    )?;
    let (d, _) = d.ready(&client).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let off = d.rss()?;
    let off_parts = memory_parts(d.pid())?;
    d.stop().await?;

    let d = Daemon::spawn(&bin, &with, &root.path().join("data-with"), root.path())?;
    let (d, _) = d.ready(&client).await?;
    connected(&client, &d).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let on = d.rss()?;
    let on_parts = memory_parts(d.pid())?;

    // One logged-in session delivers every mail: t₀ is the APPEND command itself.
    let mut session = imap.login().await?;
    let mut total = Vec::with_capacity(MAILS);
    let mut append = Vec::with_capacity(MAILS);
    for i in 0..MAILS {
        let id = format!("bench-{i}-{}@example.test", std::process::id());
        let raw = format!(
            "From: {ME}\r\nTo: {USER}\r\nSubject: bench {i}\r\nMessage-ID: <{id}>\r\n\
             Date: Tue, 1 Dec 2026 09:00:00 +0000\r\n\r\nWhat is {i} plus one?\r\n"
        );
        let t0 = Utc::now();
        let sent = Instant::now();
        session.append("INBOX", None, None, raw.as_bytes()).await?;
        append.push(sent.elapsed().as_secs_f64() * 1e3);
        let started = task_started(&client, &d, &id).await?;
        total.push((started - t0).num_microseconds().unwrap_or(0) as f64 / 1e3);
    }
    let _ = session.logout().await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = d.rss()?;
    d.stop().await?;
    imap.stop();

    figure(
        &format!("APPEND → task start, {MAILS} mails one at a time"),
        format!(
            "p50 {:.1} ms, p99 {:.1} ms (min {:.1}, max {:.1})",
            percentile(&total, 50.0),
            percentile(&total, 99.0),
            percentile(&total, 0.0),
            percentile(&total, 100.0)
        ),
    );
    figure(
        "  of which the APPEND itself (the server storing it)",
        format!(
            "p50 {:.1} ms, p99 {:.1} ms",
            percentile(&append, 50.0),
            percentile(&append, 99.0)
        ),
    );
    figure("idle RSS, no inbox section", format!("{} MiB", mib(off)));
    figure(
        "  anonymous + file-backed; threads",
        format!(
            "{} + {} MiB; {}",
            mib(off_parts.anon_kib),
            mib(off_parts.file_kib),
            off_parts.threads
        ),
    );
    figure(
        "idle RSS, mailbox connected (IDLE)",
        format!("{} MiB", mib(on)),
    );
    figure(
        "  anonymous + file-backed; threads",
        format!(
            "{} + {} MiB; {}",
            mib(on_parts.anon_kib),
            mib(on_parts.file_kib),
            on_parts.threads
        ),
    );
    let delta = on as f64 - off as f64;
    figure(
        "  connected − without (goal ≤ 1 MiB)",
        format!(
            "{:+.2} MiB: {}",
            delta / 1024.0,
            if delta <= 1024.0 { "met" } else { "NOT met" }
        ),
    );
    figure(
        &format!("idle RSS after the {MAILS} mails"),
        format!("{} MiB", mib(after)),
    );
    Ok(())
}

/// Wait until `/healthz` says the mailbox is connected.
async fn connected(client: &reqwest::Client, d: &Daemon) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let h: Value = client.get(d.url("/healthz")).send().await?.json().await?;
        if h["inbox"] == "ok" {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the mailbox did not connect within 30 s: {h}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// When the task the mail `message_id` became was started, as the daemon recorded it.
async fn task_started(
    client: &reqwest::Client,
    d: &Daemon,
    message_id: &str,
) -> Result<DateTime<Utc>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let inbox: Value = client
            .get(d.url("/v1/inbox?limit=5"))
            .send()
            .await?
            .json()
            .await?;
        let task = inbox["messages"].as_array().and_then(|ms| {
            ms.iter()
                .find(|m| m["message_id"] == message_id)
                .and_then(|m| m["task_id"].as_str())
        });
        if let Some(task) = task {
            let t: Value = client
                .get(d.url(&format!("/v1/tasks/{task}")))
                .send()
                .await?
                .json()
                .await?;
            if let Some(at) = t["started_at"].as_str() {
                return Ok(at.parse()?);
            }
            if t["state"] == "failed" {
                bail!("the mail's task failed: {t}");
            }
        }
        if Instant::now() > deadline {
            bail!("mail {message_id} did not become a started task within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn config(
    dir: &Path,
    name: &str,
    model_url: &str,
    smtp: u16,
    imap: Option<u16>,
) -> Result<PathBuf> {
    let port = crate::common::free_port()?;
    let mut text = format!(
        "# written by benches/agent/inbox.rs
model:
  profiles:
    fast: {{base_url: \"{model_url}\", model: scripted, timeout_s: 60}}
    pro: {{base_url: \"{model_url}\", model: scripted, timeout_s: 60}}
tools:
  manifests_dir: /nonexistent-hermes-bench-tools
scheduler:
  timezone: UTC
server:
  port: {port}
notify:
  email:
    smtp_host: 127.0.0.1
    smtp_port: {smtp}
    security: none
    from: {USER}
    to: [{ME}]
"
    );
    if let Some(imap) = imap {
        text.push_str(&format!(
            "inbox:
  email:
    imap_host: 127.0.0.1
    imap_port: {imap}
    security: none
    username: {USER}
    password: {PASSWORD}
    allow_from: [{ME}]
    max_tasks_per_hour: 1000
"
        ));
    }
    let path = dir.join(format!("settings-{name}.yaml"));
    std::fs::write(&path, text)?;
    Ok(path)
}

/// An SMTP server that accepts and drops every message (answers must go somewhere).
fn smtp_sink() -> Result<u16> {
    #[derive(Clone)]
    struct Drop;
    impl mailin_embedded::Handler for Drop {}
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    std::thread::spawn(move || {
        let mut server = mailin_embedded::Server::new(Drop);
        server.with_name("bench.test").with_tcp_listener(listener);
        let _ = server.serve();
    });
    Ok(port)
}

/// An unprivileged Dovecot in `dir` on a free loopback port (the inbox's tests use the same).
struct Dovecot {
    conf: PathBuf,
    port: u16,
}

impl Dovecot {
    fn start(dir: &Path) -> Result<Dovecot> {
        let sbin = |name: &str| {
            let p = PathBuf::from("/usr/sbin").join(name);
            if p.is_file() { p } else { PathBuf::from(name) }
        };
        let root = dir.join("dovecot");
        for d in ["run", "state", "mail"] {
            std::fs::create_dir_all(root.join(d))?;
        }
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755))?;
        let ok = Command::new("chown")
            .arg("dovenull")
            .arg(root.join("mail"))
            .status()
            .context("chown")?
            .success();
        if !ok {
            bail!(
                "cannot chown the mail dir to dovenull: run as root with Dovecot installed (sudo bash scripts/ci/imap-deps.sh)"
            );
        }
        std::fs::write(root.join("users"), format!("{USER}:{{PLAIN}}{PASSWORD}\n"))?;
        let port = crate::common::free_port()?;
        let d = root.display();
        let conf = root.join("dovecot.conf");
        std::fs::write(
            &conf,
            format!(
                "base_dir = {d}/run\nstate_dir = {d}/state\nlog_path = {d}/dovecot.log\n\
                 protocols = imap\nlisten = 127.0.0.1\nssl = no\ndisable_plaintext_auth = no\n\
                 auth_mechanisms = plain login\n\
                 passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN username_format=%u {d}/users\n}}\n\
                 userdb {{\n  driver = static\n  args = uid=dovenull gid=nogroup home={d}/mail/%u\n}}\n\
                 mail_location = maildir:~/Maildir\nfirst_valid_uid = 1\n\
                 service imap-login {{\n  chroot =\n  inet_listener imap {{\n    address = 127.0.0.1\n    port = {port}\n  }}\n  inet_listener imaps {{\n    port = 0\n  }}\n}}\n\
                 service anvil {{\n  chroot =\n}}\n"
            ),
        )?;
        let ok = Command::new(sbin("dovecot"))
            .arg("-c")
            .arg(&conf)
            .status()
            .context("dovecot is not installed: sudo bash scripts/ci/imap-deps.sh")?
            .success();
        if !ok {
            bail!("dovecot did not start (see {d}/dovecot.log)");
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                bail!("dovecot did not listen on {port}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Dovecot { conf, port })
    }

    async fn login(&self) -> Result<async_imap::Session<tokio::net::TcpStream>> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.port)).await?;
        let mut client = async_imap::Client::new(tcp);
        client.read_response().await?.context("no greeting")?;
        client
            .login(USER, PASSWORD)
            .await
            .map_err(|(e, _)| e.into())
    }

    fn stop(&self) {
        let doveadm = PathBuf::from("/usr/bin/doveadm");
        let _ = Command::new(if doveadm.is_file() {
            doveadm
        } else {
            PathBuf::from("doveadm")
        })
        .arg("-c")
        .arg(&self.conf)
        .arg("stop")
        .status();
    }
}

impl std::ops::Drop for Dovecot {
    fn drop(&mut self) {
        self.stop();
    }
}
