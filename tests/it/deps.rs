//! The third-party programs some tests drive, installed by the tests on first use, so that a
//! bare `cargo test` passes on a fresh clone: the MCP servers and the Python MCP client
//! (`scripts/ci/mcp-deps.sh`, under `target/test-deps`), a real embedding model, wordllama, for
//! `scripts/embed-server.py` (`scripts/ci/embed-deps.sh`, there too), Debian's chromium and
//! chromium-driver (`scripts/ci/browser-deps.sh`, with apt-get as root), Debian's
//! dovecot-imapd (`scripts/ci/imap-deps.sh`, likewise), Debian's prometheus
//! (`scripts/ci/prometheus-deps.sh`, likewise), Debian's PostgreSQL
//! (`scripts/ci/postgres-deps.sh`, likewise; see [`postgres`]) and a real Matrix homeserver,
//! Synapse from PyPI (`scripts/ci/synapse-deps.sh`, under `target/test-deps`; see [`synapse`]).
//!
//! Each is installed once: the first test to ask installs while the others in this process wait
//! (a `OnceLock`), and a file lock in `target/test-deps` keeps other processes (a second
//! `cargo test`, CI) from installing at the same time. What is installed, why, and how to do it
//! by hand goes to stderr, past the test harness's capture. When it cannot be installed, every
//! test that needs it fails saying what to run — never passes without it.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const MCP_SCRIPT: &str = "scripts/ci/mcp-deps.sh";
const EMBED_SCRIPT: &str = "scripts/ci/embed-deps.sh";
const BROWSER_SCRIPT: &str = "scripts/ci/browser-deps.sh";
const IMAP_SCRIPT: &str = "scripts/ci/imap-deps.sh";
const PROMETHEUS_SCRIPT: &str = "scripts/ci/prometheus-deps.sh";
#[cfg(feature = "matrix")]
const SYNAPSE_SCRIPT: &str = "scripts/ci/synapse-deps.sh";

fn test_deps() -> PathBuf {
    Path::new(ROOT).join("target/test-deps")
}

/// The MCP programs under `target/test-deps`.
#[derive(Clone)]
pub struct Mcp {
    pub python: PathBuf,
    pub time: PathBuf,
    pub everything: PathBuf,
}

impl Mcp {
    fn at(root: &Path) -> Mcp {
        Mcp {
            python: root.join("venv/bin/python"),
            time: root.join("venv/bin/mcp-server-time"),
            everything: root
                .join("node/node_modules/@modelcontextprotocol/server-everything/dist/index.js"),
        }
    }

    fn all_there(&self) -> bool {
        [&self.python, &self.time, &self.everything]
            .iter()
            .all(|p| p.exists())
    }
}

/// The MCP programs, installed first if they are not (or the script changed since).
pub fn mcp() -> &'static Mcp {
    static MCP: OnceLock<Result<Mcp, String>> = OnceLock::new();
    match MCP.get_or_init(install_mcp) {
        Ok(d) => d,
        Err(why) => panic!("{why}"),
    }
}

/// Why an install script under `target/test-deps` must run.
#[derive(Debug, PartialEq, Eq)]
enum Stale {
    /// A program is missing (a fresh clone, or deleted since).
    Missing,
    /// The script changed (new pins) after its last successful run, or never finished one.
    ScriptChanged,
}

/// Whether to run an install script: when something is missing, or the script is newer than
/// its last successful run (it writes a stamp such as `mcp-deps.ok` at the end), so changed
/// pins take effect.
fn deps_stale(
    all_there: bool,
    done: Option<SystemTime>,
    script: Option<SystemTime>,
) -> Option<Stale> {
    match (done, script) {
        _ if !all_there => Some(Stale::Missing),
        (Some(done), Some(script)) if done < script => Some(Stale::ScriptChanged),
        (None, _) => Some(Stale::ScriptChanged),
        _ => None,
    }
}

fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

fn install_mcp() -> Result<Mcp, String> {
    let d = Mcp::at(&test_deps());
    install_by_script(
        &ByScript {
            key: "mcp",
            what: "the MCP test programs",
            plural: true,
            script: MCP_SCRIPT,
            need: "the MCP tests need real MCP servers (mcp-server-time from PyPI, \
                   @modelcontextprotocol/server-everything from npm) and the Python MCP client",
            takes: "a minute or two; needs python3 with venv, node 20+ with npm, and the network",
            requires: "python3 3.10+ with venv, node 20+ with npm, and access to PyPI and the npm \
                       registry",
            otherwise: "",
        },
        || d.all_there(),
    )?;
    Ok(d)
}

/// What one install script under `target/test-deps` installs, in the words said about it.
struct ByScript {
    /// Its lock and its marker (`KEY.lock`, `KEY-deps.ok`).
    key: &'static str,
    /// What it installs, for the log: `the embedding model`.
    what: &'static str,
    plural: bool,
    script: &'static str,
    /// Which tests need what, said before installing.
    need: &'static str,
    /// How long it takes and what it needs, said before installing.
    takes: &'static str,
    /// What the script needs, said when it failed.
    requires: &'static str,
    /// Another way out, said when it failed (`; or skip …`), or nothing.
    otherwise: &'static str,
}

/// Run `dep`'s script unless what it installs is there (`all_there`) and the script has not
/// changed since its last run; one process at a time.
fn install_by_script(dep: &ByScript, all_there: impl Fn() -> bool) -> Result<(), String> {
    let root = test_deps();
    let script = dep.script;
    let stale = || {
        deps_stale(
            all_there(),
            modified(&root.join(format!("{}-deps.ok", dep.key))),
            modified(&Path::new(ROOT).join(script)),
        )
    };
    if stale().is_none() {
        return Ok(());
    }
    let _lock = lock(dep.key, dep.what)?;
    // Another process may have installed it while this one waited.
    let why = match (stale(), dep.plural) {
        (None, _) => return Ok(()),
        (Some(Stale::Missing), true) => "they are not installed yet: installing them now, once,",
        (Some(Stale::Missing), false) => "it is not installed yet: installing it now, once,",
        (Some(Stale::ScriptChanged), _) => {
            "the install script changed since its last run: running it again"
        }
    };
    say(&format!(
        "{}; {why} under {} by `bash {script}` ({}). To do it by hand: bash {script}",
        dep.need,
        root.display(),
        dep.takes
    ));
    let started = Instant::now();
    let status = run_script(&["bash", script]);
    let by_hand = format!(
        "run `bash {script}` in {ROOT} and fix what it reports (it needs {}), then run the \
         tests again{}",
        dep.requires, dep.otherwise
    );
    match status {
        Ok(s) if s.success() && all_there() => {
            say(&format!(
                "{} ready after {} s",
                dep.what,
                started.elapsed().as_secs()
            ));
            Ok(())
        }
        Ok(s) => Err(format!(
            "installing {} failed (`bash {script}` ended with {s}; its output is above): \
             {by_hand}",
            dep.what
        )),
        Err(e) => Err(format!("cannot run `bash {script}`: {e}; {by_hand}")),
    }
}

/// The embedding model's server, `scripts/embed-server.py` (OpenAI's `/v1/embeddings` around
/// wordllama, whose wheel ships its weights), and the Python under `target/test-deps` that has
/// wordllama: `python server --port 0` serves it and prints `listening on HOST:PORT`.
#[derive(Clone)]
pub struct Embed {
    pub python: PathBuf,
    pub server: PathBuf,
}

impl Embed {
    fn at(root: &Path) -> Embed {
        Embed {
            python: root.join("embed-venv/bin/python"),
            server: Path::new(ROOT).join("scripts/embed-server.py"),
        }
    }

    fn all_there(&self) -> bool {
        [&self.python, &self.server].iter().all(|p| p.exists())
    }
}

/// The embedding model, installed first if it is not (or the script changed since).
pub fn embed() -> &'static Embed {
    static EMBED: OnceLock<Result<Embed, String>> = OnceLock::new();
    match EMBED.get_or_init(install_embed) {
        Ok(d) => d,
        Err(why) => panic!("{why}"),
    }
}

fn install_embed() -> Result<Embed, String> {
    let d = Embed::at(&test_deps());
    install_by_script(
        &ByScript {
            key: "embed",
            what: "the embedding model",
            plural: false,
            script: EMBED_SCRIPT,
            need: "the embedding tests need a real embedding model (wordllama from PyPI, whose \
                   wheel ships its weights) for scripts/embed-server.py",
            takes: "under a minute; needs python3 with venv, and the network",
            requires: "python3 3.10+ with venv, and access to PyPI",
            otherwise: "",
        },
        || d.all_there(),
    )?;
    Ok(d)
}

/// Synapse, the Matrix homeserver the Matrix channel's tests run a fresh instance of each
/// (`tests/it/matrix/server.rs`): the venv's Python, which runs `synapse.app.homeserver`, and
/// `register_new_matrix_user`, which makes users through the shared-secret admin API.
#[cfg(feature = "matrix")]
#[derive(Clone)]
pub struct Synapse {
    pub python: PathBuf,
    pub register: PathBuf,
}

#[cfg(feature = "matrix")]
impl Synapse {
    fn at(root: &Path) -> Synapse {
        Synapse {
            python: root.join("synapse-venv/bin/python"),
            register: root.join("synapse-venv/bin/register_new_matrix_user"),
        }
    }

    fn all_there(&self) -> bool {
        [&self.python, &self.register].iter().all(|p| p.exists())
    }
}

/// Synapse, installed first if it is not (or the script changed since). The install takes a
/// minute and blocks: call it off the runtime's threads (`spawn_blocking`) when a test has
/// something running there already.
#[cfg(feature = "matrix")]
pub fn synapse() -> &'static Synapse {
    static SYNAPSE: OnceLock<Result<Synapse, String>> = OnceLock::new();
    match SYNAPSE.get_or_init(install_synapse) {
        Ok(d) => d,
        Err(why) => panic!("{why}"),
    }
}

#[cfg(feature = "matrix")]
fn install_synapse() -> Result<Synapse, String> {
    let d = Synapse::at(&test_deps());
    install_by_script(
        &ByScript {
            key: "synapse",
            what: "Synapse",
            plural: false,
            script: SYNAPSE_SCRIPT,
            need: "the Matrix tests need a real Matrix homeserver (Synapse, matrix-synapse from \
                   PyPI)",
            takes: "about a minute; needs python3 with venv, and the network",
            requires: "python3 3.10+ with venv, and access to PyPI",
            otherwise: "; or skip the Matrix tests with `--skip matrix::`",
        },
        || d.all_there(),
    )?;
    Ok(d)
}

/// Chromium and ChromeDriver, for the dashboard's browser tests.
pub struct Browser {
    pub chromium: PathBuf,
    pub chromedriver: PathBuf,
}

/// Chromium and ChromeDriver, installed first if they are not and this user may. The install
/// takes minutes: it runs off the test's runtime thread, so a daemon the test already started
/// on that runtime keeps running meanwhile.
pub async fn browser() -> &'static Browser {
    static BROWSER: OnceLock<Result<Browser, String>> = OnceLock::new();
    let found = tokio::task::spawn_blocking(|| BROWSER.get_or_init(install_browser).as_ref()).await;
    match found {
        Ok(Ok(b)) => b,
        Ok(Err(why)) => panic!("{why}"),
        Err(e) => panic!("the thread looking for Chromium failed: {e}"),
    }
}

/// What to do about the browser.
#[derive(Debug, PartialEq, Eq)]
enum BrowserPlan {
    Ready(PathBuf, PathBuf),
    /// Run the script, as root already or through `sudo -n`.
    Install {
        sudo: bool,
    },
    /// Not installed and no way to become root without asking: fail with this.
    Cannot(String),
}

fn browser_plan(
    chromium: Option<PathBuf>,
    chromedriver: Option<PathBuf>,
    root: bool,
    sudo: impl FnOnce() -> bool,
) -> BrowserPlan {
    match (chromium, chromedriver) {
        (Some(c), Some(d)) => BrowserPlan::Ready(c, d),
        _ if root => BrowserPlan::Install { sudo: false },
        _ if sudo() => BrowserPlan::Install { sudo: true },
        (c, d) => {
            let missing = match (c, d) {
                (None, None) => "chromium and chromedriver are",
                (None, Some(_)) => "chromium is",
                _ => "chromedriver is",
            };
            BrowserPlan::Cannot(format!(
                "{missing} not installed, and installing them needs root: run \
                 `sudo bash {BROWSER_SCRIPT}` (Debian's chromium and chromium-driver, with \
                 apt-get) in {ROOT}, then run the tests again. Elsewhere, install Chromium and \
                 its matching ChromeDriver so that `chromium` and `chromedriver` are on PATH."
            ))
        }
    }
}

/// `name` on PATH, or where Debian puts it.
pub fn find_program(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([
            PathBuf::from("/usr/bin"),
            PathBuf::from("/usr/lib/chromium"),
        ])
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// Whether `sudo` works without a password (CI runners): never prompts.
fn passwordless_sudo() -> bool {
    Command::new("sudo")
        .args(["-n", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn install_browser() -> Result<Browser, String> {
    let plan = || {
        browser_plan(
            find_program("chromium"),
            find_program("chromedriver"),
            is_root(),
            passwordless_sudo,
        )
    };
    let sudo = match plan() {
        BrowserPlan::Ready(chromium, chromedriver) => {
            return Ok(Browser {
                chromium,
                chromedriver,
            });
        }
        BrowserPlan::Cannot(why) => return Err(format!("the dashboard's browser tests: {why}")),
        BrowserPlan::Install { sudo } => sudo,
    };
    let _lock = lock("browser", "Chromium")?;
    if let BrowserPlan::Ready(chromium, chromedriver) = plan() {
        return Ok(Browser {
            chromium,
            chromedriver,
        });
    }
    let command: &[&str] = if sudo {
        &["sudo", "-n", "bash", BROWSER_SCRIPT]
    } else {
        &["bash", BROWSER_SCRIPT]
    };
    say(&format!(
        "the dashboard's browser tests need Chromium and ChromeDriver; they are not installed, \
         so Debian's chromium and chromium-driver are being installed now, once, system-wide, \
         by `{}` (apt-get; a few minutes). To do it by hand: sudo bash {BROWSER_SCRIPT}",
        command.join(" ")
    ));
    let started = Instant::now();
    let status = run_script(command);
    let by_hand = format!(
        "run `sudo bash {BROWSER_SCRIPT}` in {ROOT} (or `apt-get install chromium \
         chromium-driver` as root) and fix what it reports, then run the tests again"
    );
    match (
        status,
        find_program("chromium"),
        find_program("chromedriver"),
    ) {
        (Ok(s), Some(chromium), Some(chromedriver)) if s.success() => {
            say(&format!(
                "Chromium installed in {} s",
                started.elapsed().as_secs()
            ));
            Ok(Browser {
                chromium,
                chromedriver,
            })
        }
        (Ok(s), ..) if s.success() => Err(format!(
            "`{}` succeeded, yet `chromium` and `chromedriver` are not both found as files on \
             PATH, in /usr/bin or in /usr/lib/chromium: install Chromium and its matching \
             ChromeDriver so that they are, then run the tests again",
            command.join(" ")
        )),
        (Ok(s), ..) => Err(format!(
            "installing Chromium for the browser tests failed (`{}` ended with {s}; its output \
             is above): {by_hand}",
            command.join(" ")
        )),
        (Err(e), ..) => Err(format!(
            "cannot run `{}`: {e}; {by_hand}",
            command.join(" ")
        )),
    }
}

/// Dovecot's programs, for the inbox's tests (an IMAP server each test starts on its own).
pub struct Dovecot {
    pub dovecot: PathBuf,
    pub doveadm: PathBuf,
}

/// Dovecot, installed first if it is not and this user may (root, or passwordless sudo). The
/// install takes a minute: it runs off the test's runtime thread.
pub async fn dovecot() -> &'static Dovecot {
    static DOVECOT: OnceLock<Result<Dovecot, String>> = OnceLock::new();
    let found = tokio::task::spawn_blocking(|| DOVECOT.get_or_init(install_dovecot).as_ref()).await;
    match found {
        Ok(Ok(d)) => d,
        Ok(Err(why)) => panic!("{why}"),
        Err(e) => panic!("the thread looking for Dovecot failed: {e}"),
    }
}

fn find_dovecot() -> Option<Dovecot> {
    let sbin = |name: &str| {
        find_program(name).or_else(|| {
            let p = PathBuf::from("/usr/sbin").join(name);
            p.is_file().then_some(p)
        })
    };
    Some(Dovecot {
        dovecot: sbin("dovecot")?,
        doveadm: sbin("doveadm")?,
    })
}

fn install_dovecot() -> Result<Dovecot, String> {
    if let Some(d) = find_dovecot() {
        return Ok(d);
    }
    let by_hand = format!(
        "run `sudo bash {IMAP_SCRIPT}` in {ROOT} (or `apt-get install dovecot-imapd` as root), \
         then run the tests again"
    );
    let command: &[&str] = if is_root() {
        &["bash", IMAP_SCRIPT]
    } else if passwordless_sudo() {
        &["sudo", "-n", "bash", IMAP_SCRIPT]
    } else {
        return Err(format!(
            "the inbox's tests need a real IMAP server, Dovecot, which is not installed, and \
             installing it needs root: {by_hand}"
        ));
    };
    let _lock = lock("dovecot", "Dovecot")?;
    if let Some(d) = find_dovecot() {
        return Ok(d);
    }
    say(&format!(
        "the inbox's tests need a real IMAP server; Debian's dovecot-imapd is not installed, so \
         it is being installed now, once, system-wide, by `{}` (apt-get; a minute). To do it \
         by hand: sudo bash {IMAP_SCRIPT}",
        command.join(" ")
    ));
    let started = Instant::now();
    match (run_script(command), find_dovecot()) {
        (Ok(s), Some(d)) if s.success() => {
            say(&format!(
                "Dovecot installed in {} s",
                started.elapsed().as_secs()
            ));
            Ok(d)
        }
        (Ok(s), _) => Err(format!(
            "installing Dovecot for the inbox's tests failed (`{}` ended with {s}; its output \
             is above): {by_hand}",
            command.join(" ")
        )),
        (Err(e), _) => Err(format!(
            "cannot run `{}`: {e}; {by_hand}",
            command.join(" ")
        )),
    }
}

/// Prometheus, for the metrics tests (a real scraper each test starts on its own), installed
/// first if it is not and this user may (root, or passwordless sudo). The install takes a
/// minute: it runs off the test's runtime thread.
pub async fn prometheus() -> &'static Path {
    static PROMETHEUS: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let found =
        tokio::task::spawn_blocking(|| PROMETHEUS.get_or_init(install_prometheus).as_deref()).await;
    match found {
        Ok(Ok(p)) => p,
        Ok(Err(why)) => panic!("{why}"),
        Err(e) => panic!("the thread looking for Prometheus failed: {e}"),
    }
}

fn install_prometheus() -> Result<PathBuf, String> {
    if let Some(p) = find_program("prometheus") {
        return Ok(p);
    }
    let by_hand = format!(
        "run `sudo bash {PROMETHEUS_SCRIPT}` in {ROOT} (or `apt-get install prometheus` as \
         root), then run the tests again"
    );
    let command: &[&str] = if is_root() {
        &["bash", PROMETHEUS_SCRIPT]
    } else if passwordless_sudo() {
        &["sudo", "-n", "bash", PROMETHEUS_SCRIPT]
    } else {
        return Err(format!(
            "the metrics tests need a real Prometheus, which is not installed, and installing \
             it needs root: {by_hand}"
        ));
    };
    let _lock = lock("prometheus", "Prometheus")?;
    if let Some(p) = find_program("prometheus") {
        return Ok(p);
    }
    say(&format!(
        "the metrics tests need a real Prometheus; Debian's prometheus is not installed, so it \
         is being installed now, once, system-wide, by `{}` (apt-get; a minute). To do it by \
         hand: sudo bash {PROMETHEUS_SCRIPT}",
        command.join(" ")
    ));
    let started = Instant::now();
    match (run_script(command), find_program("prometheus")) {
        (Ok(s), Some(p)) if s.success() => {
            say(&format!(
                "Prometheus installed in {} s",
                started.elapsed().as_secs()
            ));
            Ok(p)
        }
        (Ok(s), _) => Err(format!(
            "installing Prometheus for the metrics tests failed (`{}` ended with {s}; its \
             output is above): {by_hand}",
            command.join(" ")
        )),
        (Err(e), _) => Err(format!(
            "cannot run `{}`: {e}; {by_hand}",
            command.join(" ")
        )),
    }
}

/// Debian's PostgreSQL programs (`/usr/lib/postgresql/N/bin`), for the PostgreSQL tests,
/// installed first if missing by `scripts/ci/postgres-deps.sh`. The install lives with the
/// test cluster (`crates/store/src/test_postgres.rs`), which the store's unit tests use too.
#[allow(dead_code)]
pub fn postgres() -> PathBuf {
    crate::postgres::cluster::bin_dir().unwrap_or_else(|why| panic!("{why}"))
}

/// Whether this process runs as root (Dovecot's master must, to drop to its own users).
pub fn running_as_root() -> bool {
    is_root()
}

/// An exclusive lock on `target/test-deps/NAME.lock`, held until dropped; says so when another
/// process holds it.
fn lock(name: &str, what: &str) -> Result<File, String> {
    let dir = test_deps();
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(format!("{name}.lock"));
    let file = File::create(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    if file.try_lock().is_err() {
        say(&format!(
            "waiting for another process that is installing {what} (it holds {})",
            path.display()
        ));
        file.lock()
            .map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
    }
    Ok(file)
}

/// Run `command` in the repository with its output on stderr (stdout is the test report).
fn run_script(command: &[&str]) -> std::io::Result<ExitStatus> {
    let (program, args) = command.split_first().expect("a command");
    let stderr = std::io::stderr().as_fd().try_clone_to_owned()?;
    Command::new(program)
        .args(args)
        .current_dir(ROOT)
        .stdin(Stdio::null())
        .stdout(Stdio::from(stderr))
        .status()
}

/// A line on the real stderr: `eprintln!` would be captured by the test harness and shown only
/// if the test fails, but an install is news whatever happens.
fn say(text: &str) {
    let _ = writeln!(std::io::stderr(), "hermes-agent tests: {text}");
}

#[test]
fn mcp_deps_install_when_missing_or_the_script_changed() {
    let t = SystemTime::UNIX_EPOCH;
    let later = t + std::time::Duration::from_secs(60);
    let missing = Some(Stale::Missing);
    let changed = Some(Stale::ScriptChanged);
    // Fresh clone: nothing there; or a program deleted since the last install.
    assert_eq!(deps_stale(false, None, Some(t)), missing);
    assert_eq!(deps_stale(false, Some(later), Some(t)), missing);
    // Installed by hand before the stamp existed, or the last run did not finish.
    assert_eq!(deps_stale(true, None, Some(t)), changed);
    // The script changed (new pins) after the last install.
    assert_eq!(deps_stale(true, Some(t), Some(later)), changed);
    assert_eq!(deps_stale(true, Some(later), Some(t)), None);
    assert_eq!(deps_stale(true, Some(t), Some(t)), None);
}

#[test]
fn the_browser_is_installed_only_by_root_or_passwordless_sudo_else_the_test_says_how() {
    let c = || Some(PathBuf::from("/usr/bin/chromium"));
    let d = || Some(PathBuf::from("/usr/bin/chromedriver"));
    let no_sudo = || false;
    assert_eq!(
        browser_plan(c(), d(), false, || panic!(
            "sudo is not asked when both are there"
        )),
        BrowserPlan::Ready(c().unwrap_or_default(), d().unwrap_or_default())
    );
    assert_eq!(
        browser_plan(None, None, true, || panic!("root needs no sudo")),
        BrowserPlan::Install { sudo: false }
    );
    assert_eq!(
        browser_plan(c(), None, false, || true),
        BrowserPlan::Install { sudo: true }
    );
    for (chromium, driver, names) in [
        (None, None, "chromium and chromedriver are not installed"),
        (None, d(), "chromium is not installed"),
        (c(), None, "chromedriver is not installed"),
    ] {
        match browser_plan(chromium, driver, false, no_sudo) {
            BrowserPlan::Cannot(why) => {
                assert!(why.starts_with(names), "{why}");
                assert!(
                    why.contains("run `sudo bash scripts/ci/browser-deps.sh`"),
                    "{why}"
                );
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
}
