//! A real IMAP server for a test: an unprivileged Dovecot instance in a temp dir, on a free
//! loopback port, with one passwd-file user; mail "arrives" by IMAP APPEND from the test.
//! Stopped (and its processes gone) when dropped.

use crate::deps;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;

pub const USER: &str = "agent@example.test";
pub const PASSWORD: &str = "imap-secret-4711";

/// One Dovecot instance.
pub struct Dovecot {
    dir: tempfile::TempDir,
    pub port: u16,
    doveadm: PathBuf,
    dovecot: PathBuf,
    running: bool,
}

impl Dovecot {
    /// Start a fresh instance with an empty mailbox. `idle: false` hides IDLE from the
    /// capabilities, as a server without it would.
    pub async fn start(idle: bool) -> Dovecot {
        let progs = deps::dovecot().await;
        assert!(
            deps::running_as_root(),
            "the inbox's tests start Dovecot, whose master process must run as root (it drops \
             to its own users): run the tests as root, or skip them with `--skip inbox::`"
        );
        let dir = tempfile::tempdir().expect("temp dir");
        // Dovecot's own users read the config and the passwd file under it.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("chmod the temp dir");
        let port = free_port();
        let root = dir.path();
        for d in ["run", "state", "mail"] {
            std::fs::create_dir_all(root.join(d)).expect("dovecot dirs");
        }
        let chown = Command::new("chown")
            .args(["dovenull", &root.join("mail").display().to_string()])
            .status()
            .expect("chown runs");
        assert!(chown.success(), "chown dovenull of the mail dir failed");
        std::fs::write(root.join("users"), format!("{USER}:{{PLAIN}}{PASSWORD}\n"))
            .expect("users file");
        std::fs::write(root.join("dovecot.conf"), config(root, port, idle)).expect("config");
        let mut d = Dovecot {
            port,
            doveadm: progs.doveadm.clone(),
            dovecot: progs.dovecot.clone(),
            dir,
            running: false,
        };
        d.up().await;
        d
    }

    fn conf(&self) -> PathBuf {
        self.dir.path().join("dovecot.conf")
    }

    /// Start the server again on the same port and mail store (after [`Dovecot::down`]).
    pub async fn up(&mut self) {
        let status = Command::new(&self.dovecot)
            .arg("-c")
            .arg(self.conf())
            .status()
            .expect("dovecot runs");
        assert!(status.success(), "dovecot did not start:\n{}", self.log());
        self.running = true;
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).await.is_err() {
            assert!(
                Instant::now() < deadline,
                "dovecot never listened on {}:\n{}",
                self.port,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop the server (its connections close); wait until the port is free.
    pub async fn down(&mut self) {
        let status = Command::new(&self.doveadm)
            .arg("-c")
            .arg(self.conf())
            .arg("stop")
            .status()
            .expect("doveadm runs");
        assert!(status.success(), "doveadm stop failed:\n{}", self.log());
        self.running = false;
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", self.port)).await.is_ok() {
            assert!(
                Instant::now() < deadline,
                "dovecot kept listening after stop"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("dovecot.log")).unwrap_or_default()
    }

    /// Deliver `raw` while the server is down, as a local delivery agent does: a file in the
    /// user's `Maildir/new`, which the server numbers when it next looks.
    pub fn deliver_offline(&self, raw: &str) {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let new = self.dir.path().join("mail").join(USER).join("Maildir/new");
        assert!(
            new.is_dir(),
            "no {} (the user never logged in)",
            new.display()
        );
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let file = new.join(format!("1764580000.P{}Q{n}.test", std::process::id()));
        std::fs::write(&file, raw.replace("\r\n", "\n")).expect("write the mail file");
        let chown = Command::new("chown")
            .args(["dovenull:nogroup", &file.display().to_string()])
            .status()
            .expect("chown runs");
        assert!(chown.success(), "chown of the delivered mail failed");
    }

    /// Give the INBOX a new UIDVALIDITY, as a server does when it rebuilds a mailbox: every
    /// message is there still, under a numbering a client must not trust.
    pub fn renumber(&self, uid_validity: u32) {
        let status = Command::new(&self.doveadm)
            .arg("-c")
            .arg(self.conf())
            .args(["mailbox", "update", "-u", USER, "--uid-validity"])
            .arg(uid_validity.to_string())
            .arg("INBOX")
            .status()
            .expect("doveadm runs");
        assert!(
            status.success(),
            "doveadm mailbox update failed:\n{}",
            self.log()
        );
    }

    /// Put `raw` (an RFC 5322 message) into the INBOX, as a delivery would.
    pub async fn append(&self, raw: &str) {
        let tcp = TcpStream::connect(("127.0.0.1", self.port))
            .await
            .expect("connect to dovecot");
        let mut client = async_imap::Client::new(tcp);
        client
            .read_response()
            .await
            .expect("a greeting")
            .expect("a greeting line");
        let mut session = client
            .login(USER, PASSWORD)
            .await
            .map_err(|(e, _)| e)
            .expect("test login");
        let raw = raw.replace("\r\n", "\n").replace('\n', "\r\n");
        session
            .append("INBOX", None, None, raw.as_bytes())
            .await
            .expect("append");
        let _ = session.logout().await;
    }
}

impl Drop for Dovecot {
    fn drop(&mut self) {
        if self.running {
            let _ = Command::new(&self.doveadm)
                .arg("-c")
                .arg(self.conf())
                .arg("stop")
                .status();
        }
    }
}

/// A port free a moment ago (bound, then released for Dovecot to take).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The instance's configuration (unprivileged: its own run, state and mail dirs, a passwd
/// file, plain text on loopback); `idle: false` announces capabilities without IDLE.
fn config(dir: &Path, port: u16, idle: bool) -> String {
    let d = dir.display();
    let caps = if idle {
        String::new()
    } else {
        "imap_capability = IMAP4rev1 LITERAL+ SASL-IR ID ENABLE\n".to_string()
    };
    format!(
        "base_dir = {d}/run
state_dir = {d}/state
log_path = {d}/dovecot.log
protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
{caps}passdb {{
  driver = passwd-file
  args = scheme=PLAIN username_format=%u {d}/users
}}
userdb {{
  driver = static
  args = uid=dovenull gid=nogroup home={d}/mail/%u
}}
mail_location = maildir:~/Maildir
first_valid_uid = 1
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
"
    )
}
