//! The part that runs in the child between fork and exec. Only async-signal-safe work:
//! system calls on values prepared by the parent — no allocation, no lock, no logging.

use seccompiler::BpfProgram;
use std::io;

/// The kernel's `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const seccompiler::sock_filter,
}

/// The limits to set, as (resource, value); prepared in the parent.
pub(super) type Limits = [(libc::__rlimit_resource_t, libc::rlim_t); 5];

/// The kernel's `struct landlock_path_beneath_attr`.
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: libc::c_int,
}

/// `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: libc::c_int = 1;
/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;
/// Above every capability number a kernel has (40 in 6.x); PR_CAPBSET_DROP of one it lacks
/// answers EINVAL, which is ignored.
const CAPABILITY_BOUND: libc::c_ulong = 64;

/// Apply, in this order: rlimits, no capability (root keeps none across exec), no_new_privs
/// (Landlock and unprivileged seccomp need it), the Landlock ruleset `ruleset` (-1: none) with
/// the child's own `/proc/self` added when `own_proc` has access bits, then each seccomp
/// program. (A session of its own, so no terminal, is the caller's: see `new_session`.)
pub(super) fn apply(
    limits: &Limits,
    ruleset: libc::c_int,
    own_proc: u64,
    programs: &[BpfProgram],
) -> io::Result<()> {
    for (resource, value) in limits {
        let limit = libc::rlimit {
            rlim_cur: *value,
            rlim_max: *value,
        };
        // SAFETY: setrlimit on this (child) process with a valid struct.
        if unsafe { libc::setrlimit(*resource, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    drop_capabilities()?;
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if ruleset >= 0 && own_proc != 0 {
        add_own_proc(ruleset, own_proc)?;
    }
    if ruleset >= 0 {
        // SAFETY: the ruleset fd was created by the parent and inherited across the fork.
        if unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset, 0u32) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    for program in programs {
        let Ok(len) = libc::c_ushort::try_from(program.len()) else {
            return Err(io::Error::from_raw_os_error(libc::E2BIG));
        };
        let fprog = SockFprog {
            len,
            filter: program.as_ptr(),
        };
        // SAFETY: a filter program that outlives the call (it is 'static in the parent's
        // copy of memory), installed on this thread, which is about to exec.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                0u32,
                &fprog as *const SockFprog,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Empty the bounding set (root regains only what it holds), the ambient set, then every set
/// of this process: a tool run by root starts with no capability, as one run by anyone else.
fn drop_capabilities() -> io::Result<()> {
    for cap in 0..CAPABILITY_BOUND {
        // SAFETY: prctl with integer arguments. EPERM (no CAP_SETPCAP: not root, nothing to
        // drop) and EINVAL (no such capability) leave the set as it is.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    // SAFETY: prctl with integer arguments; EINVAL on a kernel without ambient sets.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let none = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset of this process with a valid header and two data words, both on the stack.
    if unsafe { libc::syscall(libc::SYS_capset, &header as *const Header, none.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Grant `access` beneath this process's own `/proc/self`: only the child can name it, and
/// after exec it is still this process's.
fn add_own_proc(ruleset: libc::c_int, access: u64) -> io::Result<()> {
    // SAFETY: open of a static NUL-terminated path; the fd is closed below.
    let fd = unsafe { libc::open(c"/proc/self".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: fd,
    };
    // SAFETY: a rule for the ruleset inherited from the parent, read from a struct on the stack.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset,
            RULE_PATH_BENEATH,
            &attr as *const PathBeneathAttr,
            0u32,
        )
    };
    let added = if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    // SAFETY: closing the fd opened above.
    unsafe { libc::close(fd) };
    added
}

/// Make the child the leader of a new session (and process group): it has no controlling
/// terminal, so it cannot open `/dev/tty` to read what the person types or type into their
/// shell (TIOCSTI), and everything it starts can still be ended with its group.
pub fn new_session() -> io::Result<()> {
    // SAFETY: setsid on this (child) process, which leads no process group yet.
    if unsafe { libc::setsid() } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
