//! Flash messages: what a form just did, named in the redirect after it by a key
//! (`?done=job_added`) and shown in words from this fixed set. Text in the URL is never shown:
//! a link cannot make the dashboard say what it did not (content spoofing), and an unknown key
//! shows nothing.
//!
//! Must not: carry data — a notice names what happened, the page itself shows what it was.

use maud::{Markup, html};

/// Everything a form can report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flash {
    JobAdded,
    JobPaused,
    JobResumed,
    JobRunStarted,
    JobDeleted,
    NoticeDue,
    FactRemembered,
    FactMerged,
    FactForgotten,
    Approved,
    Denied,
    AlreadyAnswered,
    Expired,
}

const ALL: [Flash; 13] = [
    Flash::JobAdded,
    Flash::JobPaused,
    Flash::JobResumed,
    Flash::JobRunStarted,
    Flash::JobDeleted,
    Flash::NoticeDue,
    Flash::FactRemembered,
    Flash::FactMerged,
    Flash::FactForgotten,
    Flash::Approved,
    Flash::Denied,
    Flash::AlreadyAnswered,
    Flash::Expired,
];

impl Flash {
    /// Its name in the URL.
    pub(super) fn key(self) -> &'static str {
        match self {
            Flash::JobAdded => "job_added",
            Flash::JobPaused => "job_paused",
            Flash::JobResumed => "job_resumed",
            Flash::JobRunStarted => "job_run_started",
            Flash::JobDeleted => "job_deleted",
            Flash::NoticeDue => "notice_due",
            Flash::FactRemembered => "fact_remembered",
            Flash::FactMerged => "fact_merged",
            Flash::FactForgotten => "fact_forgotten",
            Flash::Approved => "approved",
            Flash::Denied => "denied",
            Flash::AlreadyAnswered => "already_answered",
            Flash::Expired => "expired",
        }
    }

    /// What the page says.
    pub(super) fn words(self) -> &'static str {
        match self {
            Flash::JobAdded => "Job added.",
            Flash::JobPaused => "Paused: it will not fire until resumed.",
            Flash::JobResumed => "Resumed.",
            Flash::JobRunStarted => "Run started: its task is the newest row under Runs.",
            Flash::JobDeleted => "Job deleted.",
            Flash::NoticeDue => "The notice is due now: the sender tries it again within seconds.",
            Flash::FactRemembered => "Remembered.",
            Flash::FactMerged => "Merged into a fact already known.",
            Flash::FactForgotten => "Forgotten.",
            Flash::Approved => "Approved: the call runs once and the task goes on.",
            Flash::Denied => "Denied: the call does not run; the task is told a person declined.",
            Flash::AlreadyAnswered => "That request was already answered.",
            Flash::Expired => {
                "That request had expired: the call does not run; the task is told it expired."
            }
        }
    }

    pub(crate) fn from_key(key: &str) -> Option<Flash> {
        ALL.into_iter().find(|f| f.key() == key)
    }
}

/// The notice of a page's `?done=` key, announced to screen readers; nothing for an unknown
/// key.
pub(super) fn flash(done: Option<&str>) -> Markup {
    html! {
        @if let Some(f) = done.and_then(Flash::from_key) {
            p.flash role="status" { (f.words()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_text_is_never_shown() {
        for f in ALL {
            assert_eq!(Flash::from_key(f.key()), Some(f));
            assert!(flash(Some(f.key())).into_string().contains(f.words()));
        }
        for not in ["Job added.", "JOB_ADDED", "", "<b>hi</b>"] {
            assert_eq!(flash(Some(not)).into_string(), "", "{not}");
        }
        assert_eq!(flash(None).into_string(), "");
    }
}
