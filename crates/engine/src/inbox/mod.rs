//! The inbox: messages the agent reads and acts on — mail (`inbox.email`) and chat
//! (`channels.matrix`, read by `channels::matrix` and handed in through [`Inbox::take_in_chat`]).
//!
//! Owns: the IMAP connection (`imap`: TLS or STARTTLS, the login, the mailbox opened
//! read-only, IDLE re-issued every 25 minutes, polling every `poll_s` on a server without
//! IDLE), the loop that keeps it (`service`: reconnects with backoff and jitter, never stops
//! the daemon), reading a message (`parse`, with mail-parser: the headers first, an allowed
//! sender's body after `scan` bounds its shape, on a thread of its own; an HTML body's visible
//! text from `html`; quotes and signature off in `quote`), deciding what it becomes (`classify`, `intake`): a task continuing the run it
//! answers, a command on that run's job, or nothing — and recording it exactly once with what
//! it became (one transaction, `store.inbox().record`, or `record_replacing` for an event read once its key came); answering a finished email task once
//! and carrying out a `run now` (`answer`); the replies' words (`reply`); doctor's check
//! (`probe`).
//! Must not: run tools or call the model — tasks are stored `pending` for the workers and
//! commands go through [`Handoff`]; import the surfaces (`http`, `cli`, `daemon`), which
//! depend on it; answer anyone but an address of `allow_from`.
//!
//! Exactly once: a message's record, the task or job change it made, its confirmation and the
//! mailbox's watermark (the highest UID read) are one SQLite transaction. Killed before the
//! commit, the message is read again at the next connection; after it, never again (the UID,
//! or under another UID the Message-ID — or a digest of what it says for mail without one — is
//! known). On the first connection only mail arriving
//! from then on is read: the watermark starts at the mailbox's UIDNEXT. An answer is queued in
//! one transaction with the mark that it was, so it goes out once; a task that finished while
//! the daemon was down is answered at the next start.

mod answer;
mod chat;
#[cfg(test)]
mod chat_tests;
mod classify;
mod converse;
mod html;
mod imap;
mod intake;
mod parse;
mod probe;
mod quote;
mod reply;
mod scan;
mod service;

pub use chat::{ChatKind, ChatMessage};
pub use probe::{Probe, ProbeError, probe};

use crate::metrics::Metrics;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use hermes_config::{ImapSettings, MatrixSettings, Settings, TelegramSettings};
use hermes_store::util::configure;
use hermes_store::{Channel, Job, Store};
use serde::Serialize;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What the inbox hands over and how it hears back: the only ways it reaches the rest of the
/// daemon. Implemented in `app.rs` over the agent, the scheduler and the notifier.
pub trait Handoff: Send + Sync {
    /// A task was stored pending: wake a worker.
    fn task_queued(&self);
    /// A job's schedule was changed in the store: let the scheduler look again.
    fn jobs_changed(&self);
    /// A reply was queued in the outbox: send it.
    fn notices_queued(&self);
    /// The next due time of `job` if it were resumed now (as `POST /v1/jobs/{id}/resume`).
    fn resumed_next_run(&self, job: &Job) -> Option<DateTime<Utc>>;
    /// Fire `job_id` now (as `POST /v1/jobs/{id}/run`): the run's task id, or why not.
    fn run_now<'a>(
        &'a self,
        job_id: &'a str,
    ) -> BoxFuture<'a, Result<String, crate::scheduler::SchedulerError>>;
    /// Answer approval request `id` as a person did by mail (`by`: who), through the same
    /// door as the API and the dashboard; the held task goes on.
    fn decide_approval<'a>(
        &'a self,
        id: &'a str,
        decision: crate::agent::Decision,
        by: &'a str,
    ) -> BoxFuture<'a, Result<hermes_store::Approval, crate::agent::ApprovalError>>;
    /// Announcements of finished tasks (subscribed at the call).
    fn finished(&self) -> BoxStream<'static, Finished>;
}

/// A task ended, as [`Handoff::finished`] announces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finished {
    /// This task.
    Task(String),
    /// Announcements were missed: look at every task that may have ended.
    Missed,
}

/// How the mailbox is doing, for `/healthz`, the dashboard and the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "lowercase")]
pub enum Health {
    /// `inbox.email` is not configured.
    Off,
    /// Configured; the first connection is being made.
    Starting,
    /// Connected and waiting for mail (`idle`: in IDLE; else polling every `poll_s`).
    Ok { idle: bool },
    /// Not connected: why, and it is being retried.
    Down { error: String },
}

impl Health {
    /// The word `/healthz` shows: `off`, `starting`, `ok` or `down`.
    pub fn word(&self) -> &'static str {
        match self {
            Health::Off => "off",
            Health::Starting => "starting",
            Health::Ok { .. } => "ok",
            Health::Down { .. } => "down",
        }
    }
}

/// The inbox service: a cheap-to-clone handle. Built for every app; does nothing unless
/// `inbox.email` is configured and [`Inbox::start`] is called (by the daemon).
#[derive(Clone)]
pub struct Inbox {
    inner: Option<Arc<Inner>>,
}

pub(crate) struct Inner {
    /// `inbox.email`, or its defaults (nobody allowed) when only a chat channel is set up.
    settings: ImapSettings,
    /// Whether `inbox.email` is configured: only then is a mailbox read.
    email_on: bool,
    /// `channels.matrix`, whose messages come in through [`Inbox::take_in_chat`].
    matrix: Option<MatrixSettings>,
    /// `channels.telegram`, whose messages come in through [`Inbox::take_in_chat`] too.
    telegram: Option<TelegramSettings>,
    store: Store,
    handoff: Arc<dyn Handoff>,
    /// The account and folder, as recorded with each message: `user@host:port/FOLDER`.
    mailbox: String,
    /// Mail from these is the agent's own: never acted on.
    own: Vec<String>,
    /// The profile email tasks run on.
    profile: String,
    /// The dashboard's address from outside (`server.public_url`), for links in answers.
    public_url: String,
    health: Mutex<Health>,
    /// Where mail read and recorded is counted (chat messages are counted by their channel).
    metrics: Metrics,
}

/// The running service: the intake (IMAP) and the answers, stopped separately — the intake
/// first, so no mail becomes a task during the shutdown; the answers after the tasks' grace,
/// so a task that ends in it is still answered.
pub struct Running {
    intake: Option<(CancellationToken, JoinHandle<()>)>,
    answers: Option<(CancellationToken, JoinHandle<()>)>,
}

/// The longest a stop waits for a loop to end.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

impl Inbox {
    /// The inbox of `settings` (off without `inbox.email` and a chat channel), recording
    /// into `store` and handing over through `handoff`.
    pub fn new(settings: &Settings, store: Store, handoff: Arc<dyn Handoff>) -> Inbox {
        let matrix = settings.channels.matrix.clone();
        let telegram = settings.channels.telegram.clone();
        let email_on = settings.inbox.email.is_some();
        if !email_on && matrix.is_none() && telegram.is_none() {
            return Inbox::off();
        }
        let s = settings.inbox.email.clone().unwrap_or_default();
        let mut own = Vec::new();
        if s.username.contains('@') {
            own.push(s.username.trim().to_lowercase());
        }
        if let Some(e) = &settings.notify.email
            && let Some(addr) = address_in(&e.from)
        {
            own.push(addr);
        }
        let mailbox = format!(
            "{}@{}:{}/{}",
            s.username.trim(),
            s.imap_host.trim(),
            s.imap_port,
            s.mailbox.trim()
        );
        Inbox {
            inner: Some(Arc::new(Inner {
                email_on,
                matrix,
                telegram,
                mailbox,
                own,
                profile: settings.model.default_profile.clone(),
                public_url: settings.server.public_url.trim_end_matches('/').to_string(),
                settings: s,
                store,
                handoff,
                health: Mutex::new(Health::Starting),
                metrics: Metrics::default(),
            })),
        }
    }

    /// Count mail read and recorded in `metrics`. Call right after construction.
    pub fn with_metrics(mut self, metrics: Metrics) -> Inbox {
        if let Some(inner) = self.inner.as_mut() {
            configure(inner, |inner| inner.metrics = metrics);
        }
        self
    }

    /// No inbox.
    pub fn off() -> Inbox {
        Inbox { inner: None }
    }

    /// How the mailbox is doing (`off` without `inbox.email`).
    pub fn health(&self) -> Health {
        match &self.inner {
            Some(i) if i.email_on => hermes_store::util::lock(&i.health).clone(),
            _ => Health::Off,
        }
    }

    /// Start reading mail and answering messages of every channel, in the background. Without
    /// `inbox.email` no mail is read; without any channel, nothing runs.
    pub fn start(&self) -> Running {
        let Some(inner) = &self.inner else {
            return Running {
                intake: None,
                answers: None,
            };
        };
        let spawn = |f: fn(Arc<Inner>, CancellationToken) -> BoxFuture<'static, ()>| {
            let stop = CancellationToken::new();
            let handle = tokio::spawn(f(inner.clone(), stop.clone()));
            Some((stop, handle))
        };
        Running {
            answers: spawn(|i, s| Box::pin(answer::run(i, s))),
            intake: if inner.email_on {
                spawn(|i, s| Box::pin(service::run(i, s)))
            } else {
                None
            },
        }
    }
}

impl Running {
    /// Read no more mail (bounded): the daemon is shutting down.
    pub async fn stop_intake(&mut self) {
        if let Some((stop, handle)) = self.intake.take() {
            stop.cancel();
            if tokio::time::timeout(STOP_WAIT, handle).await.is_err() {
                tracing::warn!("the inbox did not stop reading in time");
            }
        }
    }

    /// Stop everything (bounded); the answers get one last look first, so a task that ended
    /// during the shutdown is answered by the outbox's last pass.
    pub async fn stop(mut self) {
        self.stop_intake().await;
        if let Some((stop, handle)) = self.answers.take() {
            stop.cancel();
            if tokio::time::timeout(STOP_WAIT, handle).await.is_err() {
                tracing::warn!("the inbox's answers did not stop in time");
            }
        }
    }
}

impl Inner {
    /// Tasks one sender may start per hour on `channel`.
    fn max_tasks_per_hour(&self, channel: Channel) -> u32 {
        match channel {
            Channel::Email => self.settings.max_tasks_per_hour,
            Channel::Matrix => self.matrix.as_ref().map_or(0, |m| m.max_tasks_per_hour),
            Channel::Telegram => self.telegram.as_ref().map_or(0, |t| t.max_tasks_per_hour),
        }
    }

    fn set_health(&self, h: Health) {
        let mut current = hermes_store::util::lock(&self.health);
        if *current != h {
            *current = h;
        }
    }
}

/// The bare address in `text` (`Name <a@b>` or `a@b`), lower case.
fn address_in(text: &str) -> Option<String> {
    let t = text.trim();
    let inner = match (t.rfind('<'), t.rfind('>')) {
        (Some(a), Some(b)) if a < b => &t[a + 1..b],
        _ => t,
    };
    let inner = inner.trim();
    inner.contains('@').then(|| inner.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_found_in_names() {
        assert_eq!(
            address_in("Hermes <Hermes@Example.org>").as_deref(),
            Some("hermes@example.org")
        );
        assert_eq!(address_in("a@b").as_deref(), Some("a@b"));
        assert_eq!(address_in("nobody"), None);
    }

    #[test]
    fn health_words() {
        assert_eq!(Health::Off.word(), "off");
        assert_eq!(Health::Ok { idle: true }.word(), "ok");
        let down = Health::Down { error: "x".into() };
        assert_eq!(down.word(), "down");
        let json = serde_json::to_value(Health::Ok { idle: false }).unwrap_or_default();
        assert_eq!(json, serde_json::json!({"state": "ok", "idle": false}));
    }
}
