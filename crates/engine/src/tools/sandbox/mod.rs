//! Confinement of the programs the agent runs for the model: every manifest command call and
//! every stdio MCP server starts in a box — Landlock (filesystem, TCP, signal and
//! abstract-socket scoping), a seccomp filter, no_new_privs and rlimits — prepared in the
//! daemon before the fork and applied in the child between fork and exec.
//!
//! Owns: what the kernel supports ([`Support`]), turning a tool's declaration into a [`Policy`], preparing a
//! per-start [`Confinement`] (work dir, ruleset, filter, limits) and installing it on a
//! `Command`, and wording refusals. What a person may write about the box ([`Mode`],
//! [`Widening`]) is settings, owned by `config::sandbox` and re-exported here.
//! Must not: confine the daemon itself (nothing here runs outside a `pre_exec` in a child),
//! allocate, lock or log in the child, or decide which programs run (the callers do).

mod child;
mod filter;
mod policy;

pub use child::new_session;
pub use policy::{Confinement, Policy, SandboxError};
// What a person writes about the box is settings, so it lives in `config`, below this part.
pub use hermes_config::sandbox::{DEFAULT_MEMORY_MB, DEFAULT_PROCESSES, Mode, Network, Widening};

use std::sync::OnceLock;

/// What this kernel can enforce, asked of it once (the syscalls, not securityfs, which is
/// often not mounted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Support {
    /// 0: no Landlock (not built, or not enabled at boot).
    pub landlock_abi: i32,
    /// seccomp filters (and an architecture whose syscall table we know).
    pub seccomp: bool,
}

/// The Landlock ABI that brought TCP rules.
const ABI_NET: i32 = 4;
/// The Landlock ABI that brought signal and abstract-socket scoping.
const ABI_SCOPE: i32 = 6;

impl Support {
    /// This kernel's, asked once per process.
    pub fn get() -> Support {
        static SUPPORT: OnceLock<Support> = OnceLock::new();
        *SUPPORT.get_or_init(|| Support {
            landlock_abi: landlock_abi(),
            seccomp: filter::programs(false).is_ok() && seccomp_available(),
        })
    }

    /// What the kernel cannot enforce, in words; empty when all of it.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut missing = Vec::new();
        if self.landlock_abi < 1 {
            missing.push("Landlock filesystem rules (Linux 5.13+, `lsm=...,landlock`)");
        }
        if self.landlock_abi < ABI_NET {
            missing.push("Landlock network rules (Landlock ABI 4, Linux 6.7+)");
        }
        if self.landlock_abi < ABI_SCOPE {
            missing
                .push("Landlock signal and abstract-socket scoping (Landlock ABI 6, Linux 6.12+)");
        }
        if !self.seccomp {
            missing.push("seccomp filters");
        }
        missing
    }
}

fn landlock_abi() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: the documented version query: no ruleset, size 0, only the flag.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    i32::try_from(v).unwrap_or(0).max(0)
}

fn seccomp_available() -> bool {
    // PR_GET_SECCOMP answers 0 (not in a mode) when seccomp is built in, EINVAL when not.
    // SAFETY: a read-only query of this thread's own state.
    unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) >= 0 }
}

/// Say once, at start, how tools will be confined, and what the kernel lacks.
pub fn announce(mode: Mode) {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let support = Support::get();
        match mode {
            Mode::Off => tracing::warn!(
                "tools.sandbox is off: manifest commands and MCP servers run unconfined, with the daemon's access"
            ),
            Mode::Warn => tracing::warn!(
                "tools.sandbox is warn: manifest commands and MCP servers run unconfined (each named below)"
            ),
            Mode::Enforce => {
                let missing = support.missing();
                if missing.is_empty() {
                    tracing::info!(
                        landlock_abi = support.landlock_abi,
                        "tools are confined (Landlock, seccomp, rlimits)"
                    );
                } else {
                    tracing::warn!(
                        landlock_abi = support.landlock_abi,
                        "tools are confined only partly; this kernel lacks: {}; tools with `sandbox: required` will not run",
                        missing.join("; ")
                    );
                }
            }
        }
    });
}

/// The end of a tool error when the sandbox may be why it failed: what refused it and where
/// to widen it. `None` when the output shows no refusal.
pub(crate) fn refusal_note(output: &str, signal: Option<i32>, widen_at: &str) -> Option<String> {
    // A shell reports its child's signal in words and as exit 128+N, not as its own signal.
    let signal = match signal {
        None if output.contains("File size limit exceeded") => Some(libc::SIGXFSZ),
        None if output.contains("CPU time limit exceeded") => Some(libc::SIGXCPU),
        s => s,
    };
    let what = match signal {
        Some(libc::SIGXCPU) => "its CPU time limit ended it",
        Some(libc::SIGXFSZ) => "it went over the file size limit",
        Some(libc::SIGSYS) => "a refused system call ended it",
        _ => {
            let refused = [
                "Permission denied",
                "Operation not permitted",
                "EACCES",
                "EPERM",
                "PermissionError",
                "Cannot allocate memory",
                "MemoryError",
                "Resource temporarily unavailable",
            ];
            if !refused.iter().any(|r| output.contains(r)) {
                return None;
            }
            "the sandbox may have refused what it tried (access, a system call or a limit)"
        }
    };
    Some(format!(
        "[{what}; to allow more, widen `sandbox:` (network, read, write, memory_mb, processes) in {widen_at}, or set tools.sandbox]"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_names_the_setting_to_widen() {
        let note = refusal_note("cat: /root/x: Permission denied", None, "tools/cat.yaml");
        assert!(
            note.as_deref()
                .is_some_and(|n| n.contains("tools/cat.yaml")),
            "{note:?}"
        );
        assert!(refusal_note("no such file", None, "x").is_none());
        assert!(refusal_note("", Some(libc::SIGXFSZ), "x").is_some());
    }

    #[test]
    fn this_kernel_is_asked_not_guessed() {
        let s = Support::get();
        // Whatever the kernel, a missing piece is named, and a full one names none.
        assert_eq!(
            s.missing().is_empty(),
            s.landlock_abi >= ABI_SCOPE && s.seccomp
        );
    }
}
