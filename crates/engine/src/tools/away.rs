//! Tools of a source that is away: an MCP server that ended and is being started again, or
//! that then failed to start. Its tools leave the registry at once (no call may reach a dead
//! peer), but the model may still name one it was offered a step ago; it is told the server is
//! away, not that the tool does not exist, which reads as "never call it again".
//!
//! Owns: per source, the names its tools had and why they are gone.
//! Must not: hold a source's names once it offers tools again, or once it was stopped (the
//! daemon going down is no outage to report).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

/// Why a source's tools were withdrawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdrawn {
    /// It ended; it is being started again.
    Restarting,
    /// Starting it again failed; it is retried with backoff.
    Failed,
    /// It was stopped on purpose (the daemon is stopping).
    Stopped,
}

impl std::fmt::Display for Withdrawn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Withdrawn::Restarting => "is restarting",
            Withdrawn::Failed => "is down and being started again",
            Withdrawn::Stopped => "was stopped",
        })
    }
}

#[derive(Default)]
pub(crate) struct Away(Mutex<BTreeMap<String, (Withdrawn, BTreeSet<String>)>>);

impl Away {
    /// `source` withdrew `tools` for `why`; names it withdrew before stay known (a failed
    /// restart after an end still owns the tools offered before the end).
    pub(crate) fn withdrawn(&self, source: &str, why: Withdrawn, tools: Vec<String>) {
        let mut away = self.lock();
        if why == Withdrawn::Stopped {
            away.remove(source);
            return;
        }
        let (was, names) = away
            .entry(source.to_string())
            .or_insert_with(|| (why, BTreeSet::new()));
        *was = why;
        names.extend(tools);
    }

    /// `source` offers tools again.
    pub(crate) fn back(&self, source: &str) {
        self.lock().remove(source);
    }

    /// The source that offered `tool` and why it is away, if it is.
    pub(crate) fn of(&self, tool: &str) -> Option<(String, Withdrawn)> {
        self.lock()
            .iter()
            .find(|(_, (_, names))| names.contains(tool))
            .map(|(source, (why, _))| (source.clone(), *why))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (Withdrawn, BTreeSet<String>)>> {
        // Each change is one map operation, so a poisoned map is still consistent.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kept_across_a_failed_restart_and_dropped_when_back_or_stopped() {
        let away = Away::default();
        away.withdrawn("time", Withdrawn::Restarting, vec!["time__now".into()]);
        assert_eq!(
            away.of("time__now"),
            Some(("time".into(), Withdrawn::Restarting))
        );
        away.withdrawn("time", Withdrawn::Failed, vec![]);
        assert_eq!(
            away.of("time__now"),
            Some(("time".into(), Withdrawn::Failed))
        );
        away.back("time");
        assert_eq!(away.of("time__now"), None);
        away.withdrawn("time", Withdrawn::Restarting, vec!["time__now".into()]);
        away.withdrawn("time", Withdrawn::Stopped, vec![]);
        assert_eq!(away.of("time__now"), None);
        assert_eq!(away.of("echo"), None);
    }
}
