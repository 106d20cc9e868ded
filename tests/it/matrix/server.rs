//! A real Matrix homeserver for a test: Synapse (from PyPI, under `target/test-deps`) in its own
//! temp dir on a free 127.0.0.1 port, with its own SQLite database, signing key and log. Nothing
//! in its config reaches beyond loopback: no federation listener, no key servers, no presence,
//! no URL previews, no stats. Rate limits are lifted so that a test's burst of logins, rooms and
//! messages is never throttled. Killed when dropped.

use crate::deps;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// Synapse answers after ≈ 3 s here; a loaded 2-core machine running other tests' servers
/// can take several times that.
const START_PATIENCE: Duration = Duration::from_secs(60);
/// A SIGTERM'd Synapse finishes its shutdown in about a second; past this it is killed.
const STOP_PATIENCE: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(50);
/// Every Synapse here is `localhost`: user ids are `@name:localhost`.
const SERVER_NAME: &str = "localhost";

/// One Synapse instance.
pub struct Synapse {
    dir: tempfile::TempDir,
    port: u16,
    python: PathBuf,
    register: PathBuf,
    child: Option<Child>,
}

impl Synapse {
    /// A fresh server with no users, answering on its port when this returns.
    pub async fn new() -> Synapse {
        // The first test in a fresh clone installs it (a minute): off the runtime's threads.
        let progs = match tokio::task::spawn_blocking(|| deps::synapse().clone()).await {
            Ok(p) => p,
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        };
        let dir = tempfile::tempdir().expect("a temp dir for Synapse");
        let root = dir.path();
        std::fs::write(root.join("log.yaml"), log_config(root)).expect("Synapse's log config");
        let mut s = Synapse {
            dir,
            port: 0,
            python: progs.python,
            register: progs.register,
            child: None,
        };
        // The port is free when picked, but something else may take it before Synapse binds
        // it, seconds later: then it says so and exits, and another port is tried.
        for attempt in 1.. {
            s.port = free_port();
            std::fs::write(s.dir.path().join("hs.yaml"), config(s.dir.path(), s.port))
                .expect("Synapse's config");
            match s.launch().await {
                Ok(()) => break,
                Err(why) if attempt < 3 && s.log_tail(5).contains(PORT_TAKEN) => {
                    eprintln!("{why}; trying another port");
                }
                Err(why) => panic!("{why}"),
            }
        }
        s
    }

    /// `http://127.0.0.1:PORT`, the client-server API's base URL.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The server name in its users' and rooms' ids.
    pub fn server_name(&self) -> &str {
        SERVER_NAME
    }

    /// Synapse's own log (`homeserver.log`), then what it wrote to stdout and stderr (where a
    /// crash before its logging is set up ends).
    pub fn log(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.path().join(name));
        format!(
            "{}{}",
            read("homeserver.log").unwrap_or_default(),
            read("console.log").unwrap_or_default()
        )
    }

    /// The last `lines` lines of [`Synapse::log`], for a failure's message.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = self.log();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// A new (non-admin) user with this password; returns its full id, `@name:localhost`.
    /// Through `register_new_matrix_user` and the config's shared secret, the way an operator
    /// makes accounts on a server with registration closed.
    pub async fn register(&self, name: &str, password: &str) -> String {
        let run = Command::new(&self.register)
            .arg("-c")
            .arg(self.dir.path().join("hs.yaml"))
            .args(["-u", name, "-p", password, "--no-admin"])
            .arg(self.url())
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), run)
            .await
            .unwrap_or_else(|_| panic!("register_new_matrix_user {name} took over 30 s"))
            .expect("register_new_matrix_user runs");
        assert!(
            out.status.success(),
            "register_new_matrix_user {name} failed ({}):\n{}{}\nSynapse's log:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            self.log_tail(40)
        );
        format!("@{name}:{SERVER_NAME}")
    }

    /// Start it (again, after [`Synapse::stop`]) on the same port and data; returns once the
    /// client-server API answers.
    pub async fn start(&mut self) {
        if let Err(why) = self.launch().await {
            panic!("{why}");
        }
    }

    async fn launch(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "Synapse is running already");
        let root = self.dir.path();
        let console = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(root.join("console.log"))
            .expect("Synapse's console log");
        let child = Command::new(&self.python)
            .args(["-m", "synapse.app.homeserver", "-c"])
            .arg(root.join("hs.yaml"))
            .current_dir(root)
            .stdin(Stdio::null())
            .stdout(console.try_clone().expect("dup the console log"))
            .stderr(console)
            .kill_on_drop(true)
            .spawn()
            .expect("start Synapse");
        self.child = Some(child);
        let started = Instant::now();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .no_proxy()
            .build()
            .expect("an HTTP client");
        let versions = format!("{}/_matrix/client/versions", self.url());
        loop {
            if let Ok(r) = http.get(&versions).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                self.child = None;
                return Err(format!(
                    "Synapse exited at startup ({status}) on port {}; the end of its log:\n{}",
                    self.port,
                    self.log_tail(60)
                ));
            }
            if started.elapsed() > START_PATIENCE {
                self.kill().await;
                return Err(format!(
                    "Synapse did not answer {versions} within {} s; the end of its log:\n{}",
                    START_PATIENCE.as_secs(),
                    self.log_tail(60)
                ));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Stop it as a service manager would (SIGTERM, SIGKILL if it lingers), keeping its data;
    /// returns once the process is gone. Clients see connections refused until
    /// [`Synapse::start`].
    pub async fn stop(&mut self) {
        let Some(child) = self.child.as_mut() else {
            return;
        };
        if let Some(pid) = child
            .id()
            .and_then(|p| rustix::process::Pid::from_raw(p as i32))
        {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        match tokio::time::timeout(STOP_PATIENCE, child.wait()).await {
            Ok(_) => self.child = None,
            Err(_) => {
                eprintln!(
                    "Synapse on port {} ignored SIGTERM for {} s: killing it",
                    self.port,
                    STOP_PATIENCE.as_secs()
                );
                self.kill().await;
            }
        }
    }

    async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            let _ = tokio::time::timeout(STOP_PATIENCE, child.wait()).await;
        }
    }
}

impl Drop for Synapse {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.start_kill();
            // Reaped here rather than by tokio's orphan queue, so that it no longer writes
            // into the temp dir being removed next. SIGKILL is quick.
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// What Synapse logs, and exits with, when its listener's port is taken.
const PORT_TAKEN: &str = "Failed to listen on TCP port";

/// A port free a moment ago (bound, then released for Synapse to take), and never handed to
/// another Synapse of this process: the tests run in parallel, and one server's port must stay
/// its own across a stop and start.
fn free_port() -> u16 {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        if given.insert(port) {
            return port;
        }
    }
}

/// Every limiter Synapse 1.163 reads (synapse/config/ratelimiting.py), lifted: the tests log
/// in, create rooms, invite and send far faster than a person, and a 429 would only make them
/// slow or flaky.
const RATE_LIMITS: &[&str] = &[
    "rc_message",
    "rc_registration",
    "rc_registration_token_validity",
    "rc_login.address",
    "rc_login.account",
    "rc_login.failed_attempts",
    "rc_admin_redaction",
    "rc_joins.local",
    "rc_joins.remote",
    "rc_joins_per_room",
    "rc_key_requests",
    "rc_3pid_validation",
    "rc_invites.per_room",
    "rc_invites.per_user",
    "rc_invites.per_issuer",
    "rc_third_party_invite",
    "rc_media_create",
    "rc_presence.per_user",
    "rc_delayed_event_mgmt",
    "rc_room_creation",
    "rc_reports",
    "rc_user_directory",
    "rc_profile",
];

/// The homeserver's config. Synapse writes the signing key itself on first start
/// (`signing_key_path`, in this dir), so a restart keeps it.
fn config(dir: &Path, port: u16) -> String {
    let d = dir.display();
    // Secrets of a throwaway server: unique, not secret.
    let secret = || uuid::Uuid::new_v4().simple().to_string();
    let mut limits = String::new();
    let lifted = "{per_second: 100000, burst_count: 1000000}";
    let mut open_section: Option<&str> = None;
    for key in RATE_LIMITS {
        match key.split_once('.') {
            Some((section, sub)) => {
                if open_section != Some(section) {
                    limits.push_str(&format!("{section}:\n"));
                    open_section = Some(section);
                }
                limits.push_str(&format!("  {sub}: {lifted}\n"));
            }
            None => {
                open_section = None;
                limits.push_str(&format!("{key}: {lifted}\n"));
            }
        }
    }
    format!(
        "server_name: \"{SERVER_NAME}\"
pid_file: \"{d}/homeserver.pid\"
listeners:
  - port: {port}
    bind_addresses: ['127.0.0.1']
    type: http
    tls: false
    x_forwarded: false
    resources:
      - names: [client]
        compress: false
database:
  name: sqlite3
  args:
    database: \"{d}/homeserver.db\"
log_config: \"{d}/log.yaml\"
media_store_path: \"{d}/media_store\"
signing_key_path: \"{d}/{SERVER_NAME}.signing.key\"
registration_shared_secret: \"{reg}\"
macaroon_secret_key: \"{mac}\"
form_secret: \"{form}\"
enable_registration: false
report_stats: false
enable_metrics: false
trusted_key_servers: []
suppress_key_server_warning: true
federation_domain_whitelist: []
presence:
  enabled: false
url_preview_enabled: false
# Synapse's own tests' setting: bcrypt's default 12 rounds cost ~0.3 s a login here.
bcrypt_rounds: 4
{limits}",
        reg = secret(),
        mac = secret(),
        form = secret(),
    )
}

/// Plain, unbuffered file logging (Synapse's generated config buffers INFO lines for up to
/// 5 s, so a failure's tail would miss the last ones).
fn log_config(dir: &Path) -> String {
    format!(
        "version: 1
formatters:
  precise:
    format: '%(asctime)s - %(name)s - %(lineno)d - %(levelname)s - %(request)s - %(message)s'
handlers:
  file:
    class: logging.FileHandler
    formatter: precise
    filename: \"{}/homeserver.log\"
    encoding: utf8
loggers:
  synapse.storage.SQL:
    level: INFO
root:
  level: INFO
  handlers: [file]
disable_existing_loggers: false
",
        dir.display()
    )
}
