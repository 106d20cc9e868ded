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

/// Apply, in this order: rlimits, no_new_privs (Landlock and unprivileged seccomp need it),
/// the Landlock ruleset `ruleset` (-1: none), then each seccomp program.
pub(super) fn apply(
    limits: &Limits,
    ruleset: libc::c_int,
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
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
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
