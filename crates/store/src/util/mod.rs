//! Small helpers every part uses alike: cutting text for messages and traces and making it safe
//! to print on a terminal, walking an error's causes, the one backoff arithmetic, and the one
//! policy for poisoned mutexes.
//!
//! Owns: nothing with state. Must not: depend on any other part of the workspace (the store
//! beside it included), so that every part may depend on it.

mod backoff;
pub mod inert;
pub mod text;

pub use backoff::{Backoff, RetryPolicy};

use std::sync::{Mutex, MutexGuard};

/// An error and its causes on one line, `outer: inner: innermost`, skipping a cause whose
/// text the line already carries (many errors quote their source, and printing it again
/// only makes the line longer).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let text = cause.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        source = cause.source();
    }
    line
}

/// The first error of type `T` in `e`'s cause chain (`e` itself included).
pub fn find_cause<'a, T: std::error::Error + 'static>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a T> {
    let mut current = Some(e);
    while let Some(err) = current {
        if let Some(found) = err.downcast_ref::<T>() {
            return Some(found);
        }
        current = err.source();
    }
    None
}

/// Makes glibc's allocator give large blocks back. By default a freed block raises the size
/// from which blocks are mapped on their own (up to 32 MiB), so the next large buffers —
/// tantivy's 15 MB indexing arena for each remembered fact, an embedding answer — come from
/// heaps that keep them: a daemon idle after 1,000 facts remembered held 83 MiB where a
/// restarted one holds 22. A fixed threshold maps every block of 1 MiB or more and unmaps it
/// on free: 29 MiB (BENCHMARKS.md §17). Fewer arenas would keep less still, but two cost 12 %
/// of the pool's throughput at C = 100. Once, at start, before any thread exists.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        const MMAP_FROM_BYTES: libc::c_int = 1 << 20;
        // SAFETY: mallopt takes two integers; called before any other thread runs.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_FROM_BYTES);
        }
    }
}

/// Set up a service's shared state while it is still being built: its `with_*` methods call this
/// before the handle is first cloned. A call after that cannot reach the state the clones share;
/// it is a wiring mistake, caught by a debug assertion in the tests and ignored in a release
/// build (the service keeps what it had) rather than brought down at start.
pub fn configure<T>(inner: &mut std::sync::Arc<T>, set: impl FnOnce(&mut T)) {
    let alone = std::sync::Arc::get_mut(inner).map(set).is_some();
    debug_assert!(alone, "a service configured after its handle was shared");
}

/// Whether a process `pid` exists on this machine (a signal 0 reaches it, or is refused only
/// for want of permission). Off Unix, always true: the caution of not knowing.
pub fn process_alive(pid: u32) -> bool {
    #[cfg(unix)]
    {
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return false;
        };
        // SAFETY: kill with signal 0 sends nothing; it only checks the pid.
        let sent = unsafe { libc::kill(pid, 0) };
        sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
    }
    #[cfg(not(unix))]
    {
        let _ = pid;
        true
    }
}

/// When process `pid` started, in clock ticks since boot (Linux: field 22 of
/// `/proc/PID/stat`): with its pid, what tells it from a later process given the same pid.
/// `None` when it cannot be read — gone, a zombie (dead, not yet reaped), another system.
pub fn process_started(pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) is in parentheses and may hold spaces: count from after its end.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut fields = rest.split_whitespace();
    if matches!(fields.next()?, "Z" | "X") {
        return None;
    }
    fields.nth(18)?.parse().ok()
}

/// Whether the process that recorded itself as `pid` (started at `started`, when known) is
/// still running: the same pid alone would take a program that reused it for the owner.
pub fn owner_alive(pid: i64, started: Option<i64>) -> bool {
    let Ok(pid) = u32::try_from(pid) else {
        return false;
    };
    match started {
        Some(at) => process_started(pid) == Some(at),
        None => process_alive(pid),
    }
}

/// Lock a mutex, taking the data even when another thread panicked while holding it.
///
/// The one policy for poisoned locks in this crate: every mutex here guards plain maps and
/// counters whose updates are single stores, so a panic cannot leave them half-written, and
/// skipping the work instead (the old `if let Ok(..)`) silently lost cancellations.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Read a [`std::sync::RwLock`]'s data, with [`lock`]'s policy for a poisoned lock.
pub fn read<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

/// Write a [`std::sync::RwLock`]'s data, with [`lock`]'s policy for a poisoned lock.
pub fn write<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// A name matching an allowlist pattern: `*` matches any run of characters (`*` alone allows
/// everything, `time__*` every tool of the MCP server `time`); anything else is literal.
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('*') else {
        return pattern == name;
    };
    let Some(mut tail) = name.strip_prefix(head) else {
        return false;
    };
    let parts: Vec<&str> = rest.split('*').collect();
    let (middle, last) = parts.split_at(parts.len() - 1);
    for part in middle {
        match tail.find(part) {
            Some(at) => tail = &tail[at + part.len()..],
            None => return false,
        }
    }
    tail.ends_with(last[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(target_os = "linux")]
    fn an_owner_is_its_pid_and_its_start_not_a_zombie_nor_a_reused_pid() {
        let me = std::process::id();
        let started = process_started(me).expect("this process's start");
        assert!(owner_alive(i64::from(me), Some(started)));
        // The same pid, started at another time: a program that reused it.
        assert!(!owner_alive(i64::from(me), Some(started + 1)));
        assert!(owner_alive(i64::from(me), None));
        // A child that exited and is not reaped yet: a zombie, dead.
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .expect("sleep runs");
        let pid = child.id();
        let recorded = process_started(pid).expect("its start, while it runs");
        assert!(owner_alive(i64::from(pid), Some(recorded)));
        let start = std::time::Instant::now();
        while process_started(pid).is_some() && start.elapsed() < std::time::Duration::from_secs(10)
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(process_alive(pid), "kill(0) still reaches a zombie");
        assert!(!owner_alive(i64::from(pid), Some(recorded)));
        child.wait().expect("reaped");
        assert!(!owner_alive(i64::from(pid), None));
    }

    #[derive(Debug, thiserror::Error)]
    #[error("outer failed")]
    struct Outer(#[source] std::io::Error);

    #[derive(Debug, thiserror::Error)]
    #[error("wrapper: {0}")]
    struct Quoting(#[source] std::io::Error);

    #[test]
    fn chains_causes_once() {
        let io = || std::io::Error::other("disk on fire");
        assert_eq!(error_chain(&Outer(io())), "outer failed: disk on fire");
        assert_eq!(error_chain(&Quoting(io())), "wrapper: disk on fire");
        assert!(find_cause::<std::io::Error>(&Outer(io())).is_some());
        assert!(find_cause::<std::fmt::Error>(&Outer(io())).is_none());
    }

    #[test]
    fn a_poisoned_lock_still_yields_its_data() {
        let m = std::sync::Arc::new(Mutex::new(1));
        let m2 = m.clone();
        let _ = std::thread::spawn(move || {
            let _g = m2.lock();
            panic!("poison it");
        })
        .join();
        assert!(m.is_poisoned());
        *lock(&m) += 1;
        assert_eq!(*lock(&m), 2);
    }

    #[test]
    fn configuring_reaches_the_state_until_it_is_shared() {
        let mut state = std::sync::Arc::new(1);
        configure(&mut state, |n| *n = 2);
        assert_eq!(*state, 2);
    }

    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "configured after its handle was shared")]
    fn configuring_a_shared_state_is_a_wiring_mistake() {
        let mut state = std::sync::Arc::new(1);
        let _clone = state.clone();
        configure(&mut state, |n| *n = 2);
    }

    #[test]
    fn allowlist_patterns() {
        assert!(glob_matches("*", "web_fetch"));
        assert!(glob_matches("web_fetch", "web_fetch"));
        assert!(!glob_matches("web_fetch", "web_fetch2"));
        assert!(glob_matches("time__*", "time__get_current_time"));
        assert!(!glob_matches("time__*", "timer__x"));
        assert!(glob_matches("*__get_*", "time__get_current_time"));
        assert!(glob_matches("a*b*c", "a-x-b-y-c"));
        assert!(!glob_matches("a*b*c", "a-x-c-y-b"));
        assert!(glob_matches("read_*", "read_feed"));
        assert!(!glob_matches("", "x"));
    }
}
