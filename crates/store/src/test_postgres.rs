//! A real PostgreSQL for tests: one cluster per test process, in a temp dir, on a free loopback
//! port, and a fresh database per test. Shared by the unit tests (`crates/store`) and the
//! integration tests (`tests/it`, which include this file).
//!
//! The cluster is stopped and its directory removed when the test process ends, however it
//! ends: a small guard shell started beside it waits on a pipe only this process holds open,
//! and the pipe closes when the process exits (a panic, `exit`, a signal). So no `postgres`
//! outlives a test run.
//!
//! PostgreSQL comes from Debian (`/usr/lib/postgresql/N/bin`); when missing, it is installed
//! by `scripts/ci/postgres-deps.sh` (apt-get, as root or with passwordless sudo). Without it
//! every PostgreSQL test fails saying what to run, never passes.
#![allow(dead_code)]

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

const SCRIPT: &str = "scripts/ci/postgres-deps.sh";
const USER: &str = "hermes";
/// The password of the tests' role: the cluster checks passwords (scram-sha-256) so that the
/// tests exercise the ways a password reaches the daemon.
pub const PASSWORD: &str = "pw-for-tests";

/// A running cluster.
pub struct Cluster {
    pub port: u16,
    pub dir: PathBuf,
    bin: PathBuf,
    /// The server's options (`pg_ctl -o`), to start it again after [`Cluster::stop_server`].
    options: String,
    /// Held open for the life of the process; its closing tells the guard to stop the cluster.
    _guard: Mutex<(Child, ChildStdin)>,
}

static NEXT_DB: AtomicU32 = AtomicU32::new(0);
static NEXT_CLUSTER: AtomicU32 = AtomicU32::new(0);

/// The cluster this process's tests share, started on first use.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();
    match CLUSTER.get_or_init(Cluster::start) {
        Ok(c) => c,
        Err(why) => panic!("{why}"),
    }
}

impl Cluster {
    /// Stop the server (fast shutdown: connections are cut), keeping its data.
    pub fn stop_server(&self) {
        let out = as_owner(&self.bin, "pg_ctl")
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-m", "fast", "-w", "stop"])
            .output()
            .expect("pg_ctl runs");
        assert!(
            out.status.success(),
            "pg_ctl stop: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Start the server again on the same port.
    pub fn start_server(&self) {
        start_server(&self.bin, &self.dir, &self.options).unwrap_or_else(|e| panic!("{e}"));
    }

    /// The URL of database `db` with the password in it.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://{USER}:{PASSWORD}@127.0.0.1:{}/{db}", self.port)
    }

    /// The URL of database `db` without a password (it then comes from the environment).
    pub fn url_without_password(&self, db: &str) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/{db}", self.port)
    }

    /// A new empty database; its name.
    pub fn create_database(&self) -> String {
        let n = NEXT_DB.fetch_add(1, Ordering::Relaxed);
        let name = format!("t{}_{n}", std::process::id());
        let out = self
            .psql("postgres", &format!("CREATE DATABASE {name}"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(out.is_empty() || out.contains("CREATE"), "{out}");
        name
    }

    /// Run `sql` in database `db` with psql; its output, or why it failed.
    pub fn psql(&self, db: &str, sql: &str) -> Result<String, String> {
        let out = Command::new(bin_dir()?.join("psql"))
            .args([
                "-X",
                "-q",
                "-t",
                "-A",
                "-v",
                "ON_ERROR_STOP=1",
                "-h",
                "127.0.0.1",
            ])
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                USER,
                "-d",
                db,
                "-c",
                sql,
            ])
            .env("PGPASSWORD", PASSWORD)
            .output()
            .map_err(|e| format!("cannot run psql: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "psql `{sql}` failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }
}

/// A fresh database's URL (password included).
pub fn fresh_url() -> String {
    let c = cluster();
    c.url(&c.create_database())
}

/// The repository's root, where `SCRIPT` lies: this file is compiled both in the store's crate
/// (`crates/store`) and in the root package's integration tests.
fn root() -> PathBuf {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|dir| dir.join(SCRIPT).is_file())
        .map_or_else(|| here.clone(), Path::to_path_buf)
}

/// Debian's PostgreSQL programs, installed first if missing.
pub fn bin_dir() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(dir) = find_bin() {
            return Ok(dir);
        }
        let by_hand = format!(
            "run `sudo bash {SCRIPT}` in {} (or `apt-get install postgresql` as root), then run \
             the tests again",
            root().display()
        );
        let root_user = rustix::process::geteuid().is_root();
        let mut cmd = if root_user {
            Command::new("bash")
        } else {
            let mut c = Command::new("sudo");
            c.args(["-n", "bash"]);
            c
        };
        eprintln!(
            "the PostgreSQL tests need Debian's PostgreSQL, which is not installed; installing it \
             now, once, with {SCRIPT} (apt-get; a minute)"
        );
        let status = cmd
            .arg(SCRIPT)
            .current_dir(root())
            .status()
            .map_err(|e| format!("cannot run {SCRIPT}: {e}; {by_hand}"))?;
        match find_bin() {
            Some(dir) if status.success() => Ok(dir),
            _ => Err(format!(
                "the PostgreSQL tests need PostgreSQL and installing it failed ({status}): {by_hand}"
            )),
        }
    })
    .clone()
}

fn find_bin() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("bin"))
        .filter(|b| b.join("initdb").is_file())
        .collect();
    found.sort();
    found.pop()
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("no free port: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// `program args…`, as the `postgres` user when this process is root (initdb and the server
/// refuse to run as root).
fn as_owner(bin: &Path, program: &str) -> Command {
    if rustix::process::geteuid().is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(bin.join(program));
        c
    } else {
        Command::new(bin.join(program))
    }
}

impl Cluster {
    /// A cluster of its own (a test that stops and starts its server); stopped, and its
    /// directory removed, when the test process ends.
    pub fn start() -> Result<Cluster, String> {
        start()
    }
}

fn start() -> Result<Cluster, String> {
    let bin = bin_dir()?;
    let n = NEXT_CLUSTER.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("hermes-pg-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let pwfile = dir.join("pw");
    std::fs::write(&pwfile, PASSWORD)
        .map_err(|e| format!("cannot write {}: {e}", pwfile.display()))?;
    if rustix::process::geteuid().is_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&dir)
            .status()
            .map_err(|e| format!("cannot run chown: {e}"))?;
        if !status.success() {
            return Err(format!("chown postgres {} failed", dir.display()));
        }
    }
    let data = dir.join("data");
    let out = as_owner(&bin, "initdb")
        .arg("-D")
        .arg(&data)
        .args(["-A", "scram-sha-256", "-U", USER, "--no-sync", "-E", "UTF8"])
        .arg(format!("--pwfile={}", pwfile.display()))
        .output()
        .map_err(|e| format!("cannot run initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let port = free_port()?;
    let opts = format!(
        "-p {port} -k {} -h 127.0.0.1 -c fsync=off -c synchronous_commit=off \
         -c full_page_writes=off -c max_connections=500",
        dir.display()
    );
    start_server(&bin, &dir, &opts)?;
    // The guard: waits until this process's end closes its stdin, then stops the cluster and
    // removes its directory.
    let stop = format!(
        "trap '' INT HUP TERM; read _; {} -D '{}' -m immediate -w stop >/dev/null 2>&1; rm -rf '{}'",
        shell_owner(&bin, "pg_ctl"),
        data.display(),
        dir.display()
    );
    let mut guard = Command::new("sh")
        .args(["-c", &stop])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the cluster's guard: {e}"))?;
    let mut stdin = guard
        .stdin
        .take()
        .ok_or_else(|| "the cluster's guard has no stdin".to_string())?;
    // Nothing is written until the end: an empty write checks the pipe is open.
    let _ = stdin.write_all(b"");
    Ok(Cluster {
        port,
        dir,
        bin,
        options: opts,
        _guard: Mutex::new((guard, stdin)),
    })
}

fn start_server(bin: &Path, dir: &Path, opts: &str) -> Result<(), String> {
    let out = as_owner(bin, "pg_ctl")
        .arg("-D")
        .arg(dir.join("data"))
        .args(["-o", opts, "-l"])
        .arg(dir.join("log"))
        .args(["-w", "-t", "60", "start"])
        .output()
        .map_err(|e| format!("cannot run pg_ctl: {e}"))?;
    if !out.status.success() {
        let log = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        return Err(format!(
            "PostgreSQL did not start: {}{log}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

fn shell_owner(bin: &Path, program: &str) -> String {
    let p = bin.join(program).display().to_string();
    if rustix::process::geteuid().is_root() {
        format!("runuser -u postgres -- {p}")
    } else {
        p
    }
}
