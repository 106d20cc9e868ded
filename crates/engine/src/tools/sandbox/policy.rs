//! A tool's box: built once from its declaration ([`Policy`]), prepared for each start
//! ([`Confinement`]: a fresh work dir, a Landlock ruleset, the limits) in the daemon, and
//! installed on the `Command` as a `pre_exec` that only applies it.

use super::{DEFAULT_MEMORY_MB, DEFAULT_PROCESSES, Mode, Widening};
use super::{Support, child, filter};
use hermes_config::sandbox::{is_proc_self, proc_refusal};
use landlock::{
    ABI, Access, AccessFs, AccessNet, NetPort, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope,
};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// System directories every tool may read and execute: programs, libraries, ld.so's cache,
/// resolver and certificate files. Not `/proc`: a rule on `/proc` lets a confined child read
/// the daemon's `/proc/PID/environ` (tests/it/sandbox.rs) — a tool that needs its own entry
/// (`df` reads /proc/self/mountinfo) declares `read: [/proc/self]`, bound in the child.
const SYSTEM_READ: [&str; 8] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt",
];
/// Resolver state some systems link /etc/resolv.conf into.
const RUN_READ: [&str; 1] = ["/run/systemd/resolve"];
/// Devices a tool may read and write. Not `/dev/tty`: a tool has no terminal (it starts in a
/// session of its own), and one it could open would let it read what the person types.
const DEVICES: [&str; 5] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
];
/// What of an install prefix (the directory above a program's `bin/`) a tool may read: its
/// libraries (a venv's site-packages, a node prefix's `node_modules`, pip's `--user` ones) and
/// a venv's marker — never the whole prefix, which for `~/bin` is the home and for
/// `~/.local/bin` holds the data dir.
const PREFIX_PARTS: [&str; 3] = ["lib", "lib64", "pyvenv.cfg"];
/// The largest file a tool may write.
const FILE_SIZE_BYTES: u64 = 256 * 1024 * 1024;
/// The most files a tool may have open.
const OPEN_FILES: u64 = 256;
/// CPU seconds over the call's timeout before the kernel ends the tool (the timeout's own
/// process-group kill normally comes first).
const CPU_GRACE_S: u64 = 5;
/// CPU seconds of a program with no timeout (an MCP server runs for the daemon's lifetime).
const CPU_UNBOUNDED: libc::rlim_t = libc::RLIM_INFINITY;

#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("cannot build the Landlock ruleset: {0}")]
    Landlock(#[from] landlock::RulesetError),
    #[error("cannot open {} for a Landlock rule: {source}", path.display())]
    Path {
        path: PathBuf,
        source: landlock::PathFdError,
    },
    #[error("cannot make the tool's work dir: {0}")]
    WorkDir(std::io::Error),
    #[error(
        "refused to run: the manifest says `sandbox: required` and this kernel lacks {0} (see `hermes-agent doctor`)"
    )]
    Unsupported(String),
    #[error(
        "refused to run: the manifest says `sandbox: required` and tools.sandbox is {0}, which runs it unconfined; set tools.sandbox: enforce"
    )]
    RequiredButOff(&'static str),
    #[error("cannot build the seccomp filter: {0}")]
    Seccomp(String),
}

/// What one tool may do, decided at load time.
#[derive(Debug, Clone)]
pub struct Policy {
    mode: Mode,
    required: bool,
    /// Where the person widens it, for messages: a manifest's path or `mcp.servers.NAME`.
    widen_at: String,
    /// The tool's own files: read and execute.
    own: Vec<PathBuf>,
    read: Vec<PathBuf>,
    write: Vec<PathBuf>,
    /// TCP ports it may connect to; `None`: any.
    ports: Option<Vec<u16>>,
    /// Its own `/proc/self` is readable (`read: [/proc/self]`), bound in the child.
    own_proc: bool,
    /// Widening paths left out because they resolve into another process's `/proc` entry.
    into_proc: Vec<(&'static str, PathBuf)>,
    /// The daemon's home: never the tool's own, nor anything above it.
    home: Option<PathBuf>,
    memory_mb: u64,
    processes: u64,
}

impl Policy {
    /// `home` expands `~/` in the widening's paths.
    pub fn new(
        mode: Mode,
        widening: &Widening,
        required: bool,
        home: Option<&Path>,
        widen_at: impl Into<String>,
    ) -> Policy {
        let expand = |p: &String| -> Option<PathBuf> {
            match (p.strip_prefix("~"), home) {
                (Some(rest), Some(home)) => Some(home.join(rest.trim_start_matches('/'))),
                // `~` without a home to expand it to grants nothing.
                (Some(_), None) => None,
                (None, _) => Some(PathBuf::from(p)),
            }
        };
        // The tool's own /proc entry can only be named in the child (see `child::apply`).
        let own_proc = widening
            .read
            .iter()
            .chain(&widening.write)
            .any(|p| is_proc_self(p));
        let paths = |list: &[String]| -> Vec<PathBuf> {
            list.iter()
                .filter(|p| !is_proc_self(p))
                .filter_map(expand)
                .collect()
        };
        // A path the settings allow may still lead into /proc through a link (the kernel
        // grants what it resolves to): such a one is left out, and named by the warnings.
        let (read, into_proc_read) = split_proc(paths(&widening.read));
        let (write, into_proc_write) = split_proc(paths(&widening.write));
        Policy {
            mode,
            required,
            widen_at: widen_at.into(),
            own: Vec::new(),
            read,
            write,
            into_proc: into_proc_read
                .into_iter()
                .map(|p| ("read", p))
                .chain(into_proc_write.into_iter().map(|p| ("write", p)))
                .collect(),
            ports: widening.ports(),
            own_proc,
            home: home.map(Path::to_path_buf),
            memory_mb: widening.memory_mb.unwrap_or(DEFAULT_MEMORY_MB),
            processes: widening.processes.unwrap_or(DEFAULT_PROCESSES),
        }
    }

    /// Say, in the log, what in the widening will not do what the person likely meant: a path
    /// that does not exist (the kernel can only grant a path that is there, so the tool gets
    /// nothing there until it is, and the daemon restarted), and one that opens the home or the
    /// whole file system (`/`, `~`, a directory holding the home: the SSH keys, the settings and
    /// the data dir with it). Nothing when confinement is off.
    pub fn warn_widening(&self) {
        if self.mode == Mode::Off {
            return;
        }
        let absent = self.absent().map(|(key, path)| {
            (key, path, "names a path that does not exist: the tool gets no access there until it does (create it, then restart)")
        });
        let broad = self.broad().into_iter().map(|(key, path)| {
            (key, path, "opens the home directory (or all of the file system) to the tool: its SSH keys, the settings and the data dir too; name the directories it needs instead")
        });
        let into_proc = self.into_proc.iter().map(|(key, path)| {
            (*key, path.as_path(), "leads into /proc, where it would show other processes' environment: not granted (the tool's own entry is /proc/self)")
        });
        for (key, path, what) in absent.chain(broad).chain(into_proc) {
            tracing::warn!(at = %self.widen_at, path = %path.display(), "sandbox.{key} {what}");
        }
    }

    /// The widening's paths that hold the home, with the field naming each.
    fn broad(&self) -> Vec<(&'static str, &Path)> {
        let Some(home) = self.home.as_deref() else {
            return Vec::new();
        };
        let read = self.read.iter().map(|p| ("read", p.as_path()));
        let write = self.write.iter().map(|p| ("write", p.as_path()));
        read.chain(write)
            .filter(|(_, p)| home.starts_with(p))
            .collect()
    }

    /// The widening's paths that do not exist, with the field naming each.
    fn absent(&self) -> impl Iterator<Item = (&'static str, &Path)> {
        let read = self.read.iter().map(|p| ("read", p.as_path()));
        let write = self.write.iter().map(|p| ("write", p.as_path()));
        read.chain(write).filter(|(_, p)| !p.exists())
    }

    pub(crate) fn set_mode(&mut self, mode: Mode) {
        self.mode = mode;
    }

    pub fn mode(&self) -> Mode {
        self.mode
    }

    pub(crate) fn widen_at(&self) -> &str {
        &self.widen_at
    }

    /// A directory of the tool's own (its manifest's, its script's, an MCP server's cwd): read
    /// and execute. Never the home or a directory above it: that would hand the tool the SSH
    /// keys, the settings and the data dir; a `read:` widening says so on purpose instead.
    pub fn own_dir(&mut self, dir: &Path) {
        if dir.as_os_str().is_empty() || self.own.iter().any(|d| d == dir) {
            return;
        }
        // Compared as resolved: `~/.ssh/..` and a link to the home are the home.
        let resolved = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let holds_home = |home: &Path| {
            let home = std::fs::canonicalize(home).unwrap_or_else(|_| home.to_path_buf());
            home.starts_with(&resolved)
        };
        if self.home.as_deref().is_some_and(holds_home) {
            tracing::warn!(
                at = %self.widen_at,
                dir = %dir.display(),
                "not made readable for the tool: it is the home directory or holds it; widen `sandbox.read` with the paths it needs"
            );
            return;
        }
        self.own.push(dir.to_path_buf());
    }

    /// The program's directory, found on `path` (a `PATH` value) when it has no slash; and,
    /// when that directory is a `bin/`, its install prefix's libraries ([`PREFIX_PARTS`]).
    pub fn own_program(&mut self, program: &str, path: Option<&str>) {
        let found = if program.contains('/') {
            Some(PathBuf::from(program))
        } else {
            path.into_iter()
                .flat_map(|p| p.split(':'))
                .map(|d| Path::new(d).join(program))
                .find(|p| p.is_file())
        };
        let Some(found) = found else { return };
        // A script's interpreter is the program's too (a venv's console script names the
        // venv's python, which links to an install elsewhere, e.g. pyenv's under $HOME).
        let interpreter = shebang(&found);
        // The real file: a venv's `bin/python` links to the system's.
        let candidates = [Some(found.clone()), std::fs::canonicalize(&found).ok()]
            .into_iter()
            .chain(
                interpreter
                    .iter()
                    .flat_map(|i| [Some(i.clone()), std::fs::canonicalize(i).ok()]),
            )
            .flatten()
            .collect::<Vec<_>>();
        for p in candidates {
            let Some(dir) = p.parent() else { continue };
            self.own_dir(dir);
            if dir.file_name().is_some_and(|n| n == "bin")
                && let Some(prefix) = dir.parent()
                && prefix != Path::new("/")
                && prefix != Path::new("/usr")
            {
                for part in PREFIX_PARTS {
                    let path = prefix.join(part);
                    if path.exists() {
                        self.own_dir(&path);
                    }
                }
            }
        }
    }

    /// What is missing for this tool to be confined as declared (empty: nothing).
    fn missing(&self, support: Support) -> Vec<&'static str> {
        support.missing()
    }

    /// Prepare one start. `None`: not confined (`warn`, `off`). `timeout`: the call's,
    /// for the CPU limit.
    pub fn prepare(&self, timeout: Option<Duration>) -> Result<Option<Confinement>, SandboxError> {
        match self.mode {
            Mode::Enforce => {}
            Mode::Warn if self.required => return Err(SandboxError::RequiredButOff("warn")),
            Mode::Off if self.required => return Err(SandboxError::RequiredButOff("off")),
            Mode::Warn | Mode::Off => return Ok(None),
        }
        let support = Support::get();
        let missing = self.missing(support);
        if self.required && !missing.is_empty() {
            return Err(SandboxError::Unsupported(missing.join("; ")));
        }
        // No network at all: no datagram or raw socket either (Landlock filters TCP only). A
        // tool that may reach a port keeps UDP, which its name lookups need.
        let offline = self.ports.as_ref().is_some_and(Vec::is_empty);
        let programs = if support.seccomp {
            filter::programs(offline).map_err(SandboxError::Seccomp)?
        } else {
            &[]
        };
        let workdir = tempfile::Builder::new()
            .prefix("hermes-tool-")
            .tempdir()
            .map_err(SandboxError::WorkDir)?;
        let ruleset = self.ruleset(support.landlock_abi, workdir.path())?;
        let cpu = timeout
            .map(|t| t.as_secs() + 1 + CPU_GRACE_S)
            .unwrap_or(CPU_UNBOUNDED);
        let limits = [
            (libc::RLIMIT_CPU, clamp(libc::RLIMIT_CPU, cpu)),
            (
                libc::RLIMIT_AS,
                clamp(libc::RLIMIT_AS, self.memory_mb.saturating_mul(1024 * 1024)),
            ),
            (
                libc::RLIMIT_NPROC,
                clamp(libc::RLIMIT_NPROC, nproc_limit(self.processes)),
            ),
            (
                libc::RLIMIT_FSIZE,
                clamp(libc::RLIMIT_FSIZE, FILE_SIZE_BYTES),
            ),
            (libc::RLIMIT_NOFILE, clamp(libc::RLIMIT_NOFILE, OPEN_FILES)),
        ];
        let own_proc = if self.own_proc && support.landlock_abi >= 1 {
            AccessFs::from_read(ABI::from(support.landlock_abi)).bits()
        } else {
            0
        };
        Ok(Some(Confinement {
            workdir,
            ruleset,
            own_proc,
            programs,
            limits,
        }))
    }

    fn ruleset(&self, abi: i32, workdir: &Path) -> Result<Option<OwnedFd>, SandboxError> {
        if abi < 1 {
            return Ok(None);
        }
        let abi = ABI::from(abi);
        let read = AccessFs::from_read(abi);
        let all = AccessFs::from_all(abi);
        let file = AccessFs::from_file(abi);
        let mut ruleset = Ruleset::default().handle_access(all)?;
        // Not handling TCP leaves it open: only when the tool may connect anywhere.
        if self.ports.is_some() {
            ruleset = ruleset.handle_access(AccessNet::from_all(abi))?;
        }
        ruleset = ruleset.scope(Scope::from_all(abi))?;
        let mut created = ruleset.create()?;
        let reads = SYSTEM_READ
            .iter()
            .chain(RUN_READ.iter())
            .map(PathBuf::from)
            .chain(self.own.iter().cloned())
            .chain(self.read.iter().cloned());
        for p in reads {
            created = add_path(created, &p, read)?;
        }
        for p in DEVICES {
            created = add_path(created, Path::new(p), file)?;
        }
        for p in self.write.iter().map(PathBuf::as_path).chain([workdir]) {
            created = add_path(created, p, all)?;
        }
        for port in self.ports.iter().flatten() {
            created = created.add_rule(NetPort::new(*port, AccessNet::ConnectTcp))?;
        }
        Ok(created.into())
    }
}

/// `paths` split into those to grant and those that resolve (through a link, or `..`) into a
/// `/proc` entry the settings refuse.
fn split_proc(paths: Vec<PathBuf>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    paths.into_iter().partition(|p| {
        let resolved = std::fs::canonicalize(p).unwrap_or_else(|_| p.clone());
        proc_refusal(&resolved.to_string_lossy()).is_none()
    })
}

/// The interpreter a `#!` line names, if the file starts with one.
fn shebang(program: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    line.split_whitespace().next().map(PathBuf::from)
}

/// A rule for `path` when it exists (a system without `/lib64` has nothing to allow there).
fn add_path(
    created: landlock::RulesetCreated,
    path: &Path,
    access: landlock::BitFlags<AccessFs>,
) -> Result<landlock::RulesetCreated, SandboxError> {
    let fd = match PathFd::new(path) {
        Ok(fd) => fd,
        Err(_) if !path.exists() => return Ok(created),
        Err(source) => {
            return Err(SandboxError::Path {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    // A rule on a file may only carry file rights.
    let access = if path.is_dir() {
        access
    } else {
        access & AccessFs::from_file(ABI::V7)
    };
    Ok(created.add_rule(PathBeneath::new(fd, access))?)
}

/// Never raise a limit above the daemon's own hard limit (an unprivileged setrlimit cannot).
fn clamp(resource: libc::__rlimit_resource_t, value: libc::rlim_t) -> libc::rlim_t {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit into a valid struct.
    if unsafe { libc::getrlimit(resource, &mut current) } != 0 {
        return value;
    }
    value.min(current.rlim_max)
}

/// RLIMIT_NPROC counts every process of the user, not the tool's: the limit is the user's
/// current count plus the tool's allowance. Root is not bound by it at all (the kernel
/// exempts CAP_SYS_RESOURCE/CAP_SYS_ADMIN), so the count is skipped there.
fn nproc_limit(processes: u64) -> u64 {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    if uid == 0 {
        return processes;
    }
    let count = std::fs::read_dir("/proc")
        .map(|entries| {
            use std::os::unix::fs::MetadataExt;
            entries
                .filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                })
                .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
                .count() as u64
        })
        .unwrap_or(0);
    count.saturating_add(processes)
}

/// One prepared start: dropped after the spawn (the ruleset fd) and with the process (the
/// work dir, removed then).
pub struct Confinement {
    workdir: tempfile::TempDir,
    ruleset: Option<OwnedFd>,
    /// Access bits for the child's own `/proc/self` (0: none).
    own_proc: u64,
    programs: &'static [seccompiler::BpfProgram],
    limits: child::Limits,
}

impl std::fmt::Debug for Confinement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confinement")
            .field("workdir", &self.workdir.path())
            .finish_non_exhaustive()
    }
}

impl Confinement {
    /// The child's cwd and TMPDIR, readable and writable, removed with this.
    pub fn workdir(&self) -> &Path {
        self.workdir.path()
    }

    /// Make `cmd` start in the box: cwd and TMPDIR the work dir, and the rules applied
    /// between fork and exec. The ruleset must outlive the spawn: keep `self` until then.
    pub fn install(&self, cmd: &mut tokio::process::Command) {
        cmd.current_dir(self.workdir.path())
            .env("TMPDIR", self.workdir.path());
        let ruleset = self.ruleset.as_ref().map_or(-1, |fd| fd.as_raw_fd());
        let programs = self.programs;
        let limits = self.limits;
        let own_proc = self.own_proc;
        // SAFETY: the closure only makes system calls on values copied into it (an fd
        // number, a 'static slice, an array, a number): async-signal-safe, as pre_exec requires.
        unsafe {
            cmd.pre_exec(move || child::apply(&limits, ruleset, own_proc, programs));
        }
    }

    /// The work dir alone, to keep for as long as a long-running child (an MCP server) lives.
    pub fn into_workdir(self) -> tempfile::TempDir {
        self.workdir
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_and_what_holds_it_are_never_the_tools_own() {
        let home = tempfile::tempdir().expect("home");
        let mut policy = Policy::new(
            Mode::Enforce,
            &Widening::default(),
            false,
            Some(home.path()),
            "mcp.servers.x",
        );
        // An MCP server's `cwd: ~`, a program in `~/bin`, `/`.
        policy.own_dir(home.path());
        policy.own_dir(home.path().parent().expect("a parent"));
        policy.own_dir(Path::new("/"));
        policy.own_dir(&home.path().join("project"));
        assert_eq!(policy.own, [home.path().join("project")]);
    }

    #[test]
    fn a_widening_that_holds_the_home_is_named() {
        let home = tempfile::tempdir().expect("home");
        let widening = Widening {
            read: vec!["/".into(), "~/docs".into()],
            write: vec!["~".into()],
            ..Widening::default()
        };
        let policy = Policy::new(Mode::Enforce, &widening, false, Some(home.path()), "t.yaml");
        assert_eq!(
            policy.broad(),
            [("read", Path::new("/")), ("write", home.path())]
        );
    }

    #[test]
    fn a_link_or_dots_do_not_get_round_the_home_and_proc_rules() {
        let home = tempfile::tempdir().expect("home");
        let elsewhere = tempfile::tempdir().expect("elsewhere");
        std::fs::create_dir(home.path().join(".ssh")).expect("mkdir");
        let to_home = elsewhere.path().join("homeln");
        std::os::unix::fs::symlink(home.path(), &to_home).expect("link");
        let to_proc = elsewhere.path().join("procln");
        std::os::unix::fs::symlink("/proc", &to_proc).expect("link");
        let widening = Widening {
            read: vec![to_proc.display().to_string(), "/usr/share".into()],
            ..Widening::default()
        };
        let mut policy = Policy::new(
            Mode::Enforce,
            &widening,
            false,
            Some(home.path()),
            "mcp.servers.x",
        );
        assert_eq!(policy.read, [PathBuf::from("/usr/share")]);
        assert_eq!(policy.into_proc, [("read", to_proc)]);
        policy.own_dir(&to_home);
        policy.own_dir(&home.path().join(".ssh/.."));
        assert!(policy.own.is_empty(), "{:?}", policy.own);
    }

    #[test]
    fn proc_self_is_bound_in_the_child_not_opened_here() {
        let widening = Widening {
            read: vec!["/proc/self".into(), "/usr/share/doc".into()],
            ..Widening::default()
        };
        let policy = Policy::new(Mode::Enforce, &widening, false, None, "t.yaml");
        assert!(policy.own_proc);
        assert_eq!(policy.read, [PathBuf::from("/usr/share/doc")]);
    }

    #[test]
    fn the_widening_paths_that_are_not_there_are_named() {
        let home = tempfile::tempdir().expect("home");
        std::fs::create_dir(home.path().join("here")).expect("dir");
        let widening = Widening {
            read: vec!["~/here".into(), "/nonexistent-hermes-read".into()],
            write: vec!["~/not-yet".into()],
            ..Widening::default()
        };
        let policy = Policy::new(Mode::Enforce, &widening, false, Some(home.path()), "t.yaml");
        let absent: Vec<(&str, PathBuf)> =
            policy.absent().map(|(k, p)| (k, p.to_path_buf())).collect();
        assert_eq!(
            absent,
            [
                ("read", PathBuf::from("/nonexistent-hermes-read")),
                ("write", home.path().join("not-yet")),
            ]
        );
    }
}
