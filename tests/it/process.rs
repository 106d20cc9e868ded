//! The real `hermes-agent serve` as a process, as every test that needs one drives it: a
//! clean environment, its log, its address file, its HTTP API and `/healthz`, the inbox and
//! tasks as the API lists them, signals, a kill -9. The suites (the daemon's own, the inbox's,
//! Matrix's, Telegram's, PostgreSQL's) build their commands and wait for what they need on this
//! one harness.
//!
//! Every wait is a bounded poll on a condition, never a fixed sleep; a child is killed and
//! reaped when its guard drops, so a failing test leaves nothing running.

use crate::common::text;
use hermes_surfaces::daemon::{addr_path, read_addr};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_hermes-agent");
/// Upper bound for anything that should take a moment: start-up, a task, a shutdown. A suite
/// whose waits are longer (an encrypted round trip) sets its own ([`Daemon::with_patience`]).
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);
/// How long a starting daemon may take to write its address file, and how often to look.
const ADDR_WAIT: Duration = Duration::from_secs(10);
const ADDR_POLL: Duration = Duration::from_millis(20);
/// How often a condition is looked at again.
const POLL: Duration = Duration::from_millis(20);

/// Wait (bounded) for the address file of `data_dir` to name an address.
pub(crate) async fn wait_for_addr(data_dir: &Path) -> SocketAddr {
    let deadline = Instant::now() + ADDR_WAIT;
    loop {
        if let Some(addr) = read_addr(data_dir).expect("a readable address file") {
            return addr;
        }
        assert!(
            Instant::now() < deadline,
            "no {} within {ADDR_WAIT:?}",
            addr_path(data_dir).display()
        );
        tokio::time::sleep(ADDR_POLL).await;
    }
}

/// The binary with a clean environment: no stray user config or token can leak in.
pub(crate) fn base_command(dir: &Path, env: &[(&str, &str)]) -> Command {
    clean_command(Command::new(BIN), dir, env)
}

/// `cmd` (the binary, or a wrapper that runs it) with a clean environment.
pub(crate) fn clean_command(mut cmd: Command, dir: &Path, env: &[(&str, &str)]) -> Command {
    cmd.current_dir(dir)
        .env_remove("HERMES_CONFIG")
        .env_remove("HERMES_DATA_DIR")
        .env_remove("HERMES_TOKEN")
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

/// A running daemon process; killed (and reaped) on drop.
pub(crate) struct Daemon {
    child: Option<Child>,
    /// `http://ADDR`, known once [`Daemon::ready`] has read the address file.
    base: String,
    data: PathBuf,
    log: PathBuf,
    spawned: Instant,
    http: reqwest::Client,
    token: Option<String>,
    /// The bound of every wait on it.
    patience: Duration,
}

impl Daemon {
    /// Spawn `cmd` (a `serve`) logging to `dir/daemon.log`; it will write its address to
    /// `data`'s address file.
    pub(crate) fn spawn(cmd: Command, dir: &Path, data: &Path) -> Daemon {
        Daemon::spawn_logging_to(cmd, dir.join("daemon.log"), data)
    }

    /// Spawn `cmd` (a `serve`) appending to `log` (each start of the same node to one log, as
    /// journald would); it will write its address to `data`'s address file.
    pub(crate) fn spawn_logging_to(mut cmd: Command, log: PathBuf, data: &Path) -> Daemon {
        let file = File::options()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let err = file.try_clone().expect("log file handle");
        cmd.stdout(Stdio::from(file)).stderr(Stdio::from(err));
        let spawned = Instant::now();
        let child = cmd.spawn().expect("the daemon starts");
        Daemon {
            child: Some(child),
            base: String::new(),
            data: data.to_path_buf(),
            log,
            spawned,
            // Loopback only: a proxy in the environment must not see it.
            http: reqwest::Client::builder()
                .no_proxy()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("http client"),
            token: None,
            patience: PATIENCE,
        }
    }

    pub(crate) fn with_patience(mut self, patience: Duration) -> Daemon {
        self.patience = patience;
        self
    }

    pub(crate) fn with_token(mut self, token: &str) -> Daemon {
        self.token = Some(token.to_string());
        self
    }

    /// `http://ADDR`, once [`Daemon::ready`] has read the address file.
    pub(crate) fn base(&self) -> &str {
        &self.base
    }

    /// The HTTP client the harness talks to it with (no proxy, bounded).
    pub(crate) fn http(&self) -> &reqwest::Client {
        &self.http
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.as_ref().expect("child").id()
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Panic with the log if the process has exited.
    pub(crate) fn still_running(&mut self) {
        if let Some(status) = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
        {
            panic!("the daemon exited early ({status}):\n{}", self.log());
        }
    }

    /// The address the daemon wrote to its address file, once it is there (bounded).
    pub(crate) async fn bound_addr(&mut self) -> SocketAddr {
        let deadline = Instant::now() + ADDR_WAIT;
        loop {
            self.still_running();
            if let Some(addr) = read_addr(&self.data).expect("a readable address file") {
                return addr;
            }
            assert!(
                Instant::now() < deadline,
                "no {} within {ADDR_WAIT:?}:\n{}",
                addr_path(&self.data).display(),
                self.log()
            );
            tokio::time::sleep(ADDR_POLL).await;
        }
    }

    /// Read the bound address, then poll `/healthz` there until it answers `ok`; the time since
    /// spawn. Panics (with the log) if the process exits or a bound passes.
    pub(crate) async fn ready(&mut self) -> Duration {
        self.ready_when("status ok", |h| h["status"] == "ok").await
    }

    /// Read the bound address, then poll `/healthz` there until its answer satisfies `pred`
    /// (`what` names it in the failure); the time since spawn.
    pub(crate) async fn ready_when(
        &mut self,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> Duration {
        self.base = format!("http://{}", self.bound_addr().await);
        let deadline = Instant::now() + self.patience;
        loop {
            self.still_running();
            if let Some(h) = self.health().await
                && pred(&h)
            {
                return self.spawned.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "the daemon was not ready ({what}) within {:?}: {:?}\n{}",
                self.patience,
                self.health().await,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// `/healthz`'s answer, whatever its status; `None` while nothing answers.
    pub(crate) async fn health(&self) -> Option<Value> {
        let r = self
            .http
            .get(format!("{}/healthz", self.base))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        r.json().await.ok()
    }

    /// Wait (bounded) until `/healthz` satisfies `pred`; that answer.
    pub(crate) async fn health_until(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.until(what, || async { self.health().await.filter(|h| pred(h)) })
            .await
    }

    /// Wait (bounded) until `probe` finds something; what it found. The failure names `what`
    /// and shows the log.
    pub(crate) async fn until<T, F>(&self, what: &str, mut probe: impl FnMut() -> F) -> T
    where
        F: std::future::Future<Output = Option<T>>,
    {
        let deadline = Instant::now() + self.patience;
        loop {
            if let Some(found) = probe().await {
                return found;
            }
            assert!(
                Instant::now() < deadline,
                "never {what} within {:?}; /healthz: {:?}\n{}",
                self.patience,
                self.health().await,
                self.log()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Send an HTTP request (with the daemon's token, if any); the status and the JSON body
    /// (`null` when there is none).
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.expect("the daemon answers");
        let status = resp.status();
        let bytes = resp.bytes().await.expect("a body");
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("{path}: not JSON ({e}): {}", text(&bytes)))
        };
        (status, value)
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    /// `GET path`, which must answer 200; its body.
    pub(crate) async fn get_ok(&self, path: &str) -> Value {
        let (status, v) = self.get(path).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {v}");
        v
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    /// Submit a task and return its id.
    pub(crate) async fn submit(&self, task: &str) -> String {
        let (status, v) = self.post("/v1/tasks", json!({ "task": task })).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{v}");
        v["id"].as_str().expect("an id").to_string()
    }

    /// Task `id` as the API shows it.
    pub(crate) async fn task(&self, id: &str) -> Value {
        self.get_ok(&format!("/v1/tasks/{id}")).await
    }

    /// Poll a task until it is finished; its record.
    pub(crate) async fn finished(&self, id: &str) -> Value {
        self.until(&format!("task {id} finished"), || async {
            let t = self.task(id).await;
            let state = t["state"].as_str().unwrap_or("");
            ["succeeded", "failed", "cancelled"]
                .contains(&state)
                .then_some(t)
        })
        .await
    }

    /// Job `id` as `/v1/jobs` lists it (`null` when it is not there).
    pub(crate) async fn job(&self, id: &str) -> Value {
        let (_, jobs) = self.get("/v1/jobs").await;
        jobs["jobs"]
            .as_array()
            .and_then(|js| js.iter().find(|j| j["id"] == id).cloned())
            .unwrap_or(Value::Null)
    }

    /// Every message read from every channel, as the API lists them, newest first.
    pub(crate) async fn inbox(&self) -> Vec<Value> {
        let v = self.get_ok("/v1/inbox?limit=1000").await;
        v["messages"].as_array().cloned().unwrap_or_default()
    }

    /// Wait (bounded) until the inbox satisfies `pred`; its rows.
    // Only the Telegram suite waits on the inbox as a whole.
    #[cfg_attr(not(feature = "telegram"), allow(dead_code))]
    pub(crate) async fn inbox_until(
        &self,
        what: &str,
        pred: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        self.until(what, || async {
            let rows = self.inbox().await;
            pred(&rows).then_some(rows)
        })
        .await
    }

    /// Wait (bounded) until message `id` (a Message-ID, a Matrix event, a Telegram update) is
    /// recorded and satisfies `pred`; its row.
    pub(crate) async fn recorded(&self, id: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let what = format!("message {id} recorded as expected");
        self.until(&what, || async {
            let rows = self.inbox().await;
            rows.into_iter().find(|m| m["message_id"] == id && pred(m))
        })
        .await
    }

    /// A page of the dashboard (or any answer) as text.
    pub(crate) async fn text(&self, path: &str) -> String {
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

    /// Poll the log until it contains `needle`.
    pub(crate) async fn wait_log(&self, needle: &str) {
        let what = format!("the log said {needle:?}");
        self.until(&what, || async {
            self.log().contains(needle).then_some(())
        })
        .await
    }

    pub(crate) fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill {sig} failed");
    }

    /// Wait for the process to exit on its own (bounded); its status.
    pub(crate) async fn exited(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut().expect("child");
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not exit within {within:?}:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Kill -9, reaped: nothing of an orderly stop runs.
    pub(crate) fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM and wait for a clean exit, which removes the address file.
    pub(crate) async fn stop(&mut self) {
        self.signal("-TERM");
        let status = self.exited(self.patience).await;
        assert_eq!(status.code(), Some(0), "{}", self.log());
        assert!(
            !addr_path(&self.data).exists(),
            "the address file outlived a clean exit"
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.kill9();
    }
}
