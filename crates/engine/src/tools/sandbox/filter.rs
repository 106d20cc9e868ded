//! The seccomp programs, compiled once in the daemon: system calls a tool has no business
//! making (tracing, mounting, namespaces, kernel modules and keys, BPF, io_uring, the clock,
//! the hostname, rebooting) and typing into a terminal (`ioctl` TIOCSTI, TIOCLINUX) answer
//! EPERM — not a kill, so the tool reports a clear error — and `clone3` answers ENOSYS so
//! libc falls back to `clone`, whose namespace flags the first program can inspect
//! (`clone3` passes them in memory, out of a filter's reach). A tool without network also
//! gets no datagram, raw or packet socket: Landlock filters TCP only.

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use std::collections::BTreeMap;
use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
const ARCH: Option<TargetArch> = Some(TargetArch::x86_64);
#[cfg(target_arch = "aarch64")]
const ARCH: Option<TargetArch> = Some(TargetArch::aarch64);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const ARCH: Option<TargetArch> = None;

/// The namespace flags a `clone` may not carry.
const NAMESPACE_FLAGS: [libc::c_int; 7] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWUSER,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWCGROUP,
];

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn refused() -> Vec<libc::c_long> {
    let mut calls = vec![
        libc::SYS_ptrace,
        libc::SYS_process_vm_readv,
        libc::SYS_process_vm_writev,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_chroot,
        libc::SYS_bpf,
        libc::SYS_kexec_load,
        libc::SYS_kexec_file_load,
        libc::SYS_keyctl,
        libc::SYS_add_key,
        libc::SYS_request_key,
        libc::SYS_perf_event_open,
        libc::SYS_userfaultfd,
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
        libc::SYS_init_module,
        libc::SYS_finit_module,
        libc::SYS_delete_module,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsmount,
        libc::SYS_reboot,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
        libc::SYS_settimeofday,
        libc::SYS_clock_settime,
        libc::SYS_clock_adjtime,
        libc::SYS_acct,
        libc::SYS_swapon,
        libc::SYS_swapoff,
        libc::SYS_vhangup,
        libc::SYS_fanotify_init,
        libc::SYS_open_by_handle_at,
        libc::SYS_quotactl,
    ];
    calls.sort_unstable();
    calls
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn refused() -> Vec<libc::c_long> {
    Vec::new()
}

/// The programs to install, in order, for a tool with network or without (`offline`); an
/// error when this architecture has none.
pub(super) fn programs(offline: bool) -> Result<&'static [BpfProgram], String> {
    static ONLINE: OnceLock<Result<Vec<BpfProgram>, String>> = OnceLock::new();
    static OFFLINE: OnceLock<Result<Vec<BpfProgram>, String>> = OnceLock::new();
    let programs = if offline {
        OFFLINE.get_or_init(|| build(true))
    } else {
        ONLINE.get_or_init(|| build(false))
    };
    programs
        .as_ref()
        .map(|v| v.as_slice())
        .map_err(|e| e.clone())
}

/// A condition on argument `arg` (32 bits): `value` under `mask`.
fn masked(arg: u8, mask: u64, value: u64) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(
        arg,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(mask),
        value,
    )
}

/// A condition on argument `arg` (32 bits): equal to `value`.
fn equal(arg: u8, value: u64) -> Result<SeccompCondition, seccompiler::BackendError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, value)
}

/// `ioctl`s that act on a terminal for someone else: pushing bytes into its input (TIOCSTI)
/// and the Linux console's selection paste (TIOCLINUX).
fn terminal_rules() -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    // An ioctl request is a c_ulong on the Linux targets with a seccomp table (x86_64, aarch64).
    [libc::TIOCSTI, libc::TIOCLINUX]
        .into_iter()
        .map(|request| SeccompRule::new(vec![equal(1, request)?]))
        .collect()
}

/// `socket` calls of a tool without network: IPv4 and IPv6 datagrams, any raw socket, any
/// packet socket. The type's low bits are the type; the rest are flags (`SOCK_CLOEXEC`).
fn offline_socket_rules() -> Result<Vec<SeccompRule>, seccompiler::BackendError> {
    const TYPE_MASK: u64 = 0xf;
    let domain = |d: libc::c_int| equal(0, d as u64);
    let kind = |t: libc::c_int| masked(1, TYPE_MASK, t as u64);
    Ok(vec![
        SeccompRule::new(vec![domain(libc::AF_INET)?, kind(libc::SOCK_DGRAM)?])?,
        SeccompRule::new(vec![domain(libc::AF_INET6)?, kind(libc::SOCK_DGRAM)?])?,
        SeccompRule::new(vec![kind(libc::SOCK_RAW)?])?,
        SeccompRule::new(vec![domain(libc::AF_PACKET)?])?,
    ])
}

fn build(offline: bool) -> Result<Vec<BpfProgram>, String> {
    let arch = ARCH.ok_or("no seccomp syscall table for this architecture")?;
    let err = |e: seccompiler::BackendError| e.to_string();
    let mut eperm: BTreeMap<i64, Vec<SeccompRule>> =
        refused().into_iter().map(|nr| (nr, Vec::new())).collect();
    // Any one namespace flag in clone's first argument matches (rules of one call are or-ed).
    let namespace_rules = NAMESPACE_FLAGS
        .iter()
        .map(|f| {
            let flag = *f as u32 as u64;
            SeccompCondition::new(
                0,
                SeccompCmpArgLen::Dword,
                SeccompCmpOp::MaskedEq(flag),
                flag,
            )
            .and_then(|c| SeccompRule::new(vec![c]))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    eperm.insert(libc::SYS_clone, namespace_rules);
    eperm.insert(libc::SYS_ioctl, terminal_rules().map_err(err)?);
    if offline {
        eperm.insert(libc::SYS_socket, offline_socket_rules().map_err(err)?);
    }
    let first = SeccompFilter::new(
        eperm,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(err)?;
    let clone3 = SeccompFilter::new(
        BTreeMap::from([(libc::SYS_clone3, Vec::new())]),
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(err)?;
    let mut out = Vec::new();
    for f in [first, clone3] {
        out.push(BpfProgram::try_from(f).map_err(err)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_programs_compile_for_this_machine() {
        for offline in [false, true] {
            let p = super::programs(offline);
            #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
            assert!(p.is_ok_and(|p| p.len() == 2 && p.iter().all(|f| !f.is_empty())));
        }
    }
}
