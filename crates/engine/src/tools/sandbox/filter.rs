//! The seccomp programs, compiled once in the daemon: system calls a tool has no business
//! making (tracing, mounting, namespaces, kernel modules and keys, BPF, io_uring) answer
//! EPERM — not a kill, so the tool reports a clear error — and `clone3` answers ENOSYS so
//! libc falls back to `clone`, whose namespace flags the first program can inspect
//! (`clone3` passes them in memory, out of a filter's reach).

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
    ];
    calls.sort_unstable();
    calls
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn refused() -> Vec<libc::c_long> {
    Vec::new()
}

/// The programs to install, in order; an error when this architecture has none.
pub(super) fn programs() -> Result<&'static [BpfProgram], String> {
    static PROGRAMS: OnceLock<Result<Vec<BpfProgram>, String>> = OnceLock::new();
    PROGRAMS
        .get_or_init(build)
        .as_ref()
        .map(|v| v.as_slice())
        .map_err(|e| e.clone())
}

fn build() -> Result<Vec<BpfProgram>, String> {
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
        let p = super::programs();
        #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
        assert!(p.is_ok_and(|p| p.len() == 2 && p.iter().all(|f| !f.is_empty())));
    }
}
