//! Notifiers: email (lettre SMTP), webhooks and chat rooms (through [`ChatSend`]), fed by the
//! durable outbox in the store.
//!
//! Owns: the channels built from `notify` in the settings (`email`, and one per
//! `notify.webhooks.NAME`), queuing notices ([`Notifier::enqueue`]), the sender loop that
//! drains the outbox ([`Notifier::run`], [`Notifier::deliver_due`]), and the SMTP and webhook
//! checks for `doctor` ([`Notifier::check`]).
//! Must not: send to any address or URL that is not in the configuration — callers (and the
//! model, through the `notify` tool) name a channel, never an address; log secrets or a
//! webhook's full URL; run SQL of its own (the outbox queries live in `store::outbox`).
//!
//! # Delivery and retries
//!
//! A notice is a row in the `outbox` table before anything is sent, so a crash or restart
//! loses nothing: pending rows are sent by the next [`Notifier::run`]. Each channel has its own
//! lane, so a stalled SMTP server never holds up a webhook, and every attempt has a total
//! deadline (`notify.send_timeout_s`: connect, TLS and the whole dialogue), past which it is a
//! transient failure. Each attempt ends in one of three ways:
//!
//! - **sent** — SMTP accepted the message for every recipient, or the webhook answered 2xx.
//! - **transient failure** — the SMTP relay could not be reached, timed out or answered 4xx;
//!   the webhook could not be reached, timed out, or answered 408, 429 or 5xx. The notice
//!   stays pending, its attempt count and last error are recorded, and it is retried after
//!   `backoff.base · 2^(attempt−1)`, capped at `backoff.max`. The default ([`DEFAULT_RETRY`]) is 8
//!   attempts at 30 s, 1, 2, 4, 8, 16 and 32 min: about an hour in all. After the last
//!   attempt the notice is `failed` with its last error (and a warning in the log). There is
//!   no jitter: one person's notices are few, and retries bunching up harms no one.
//! - **permanent failure** — SMTP 5xx (535: the login was refused; the error says to check
//!   `notify.email.username` and `SMTP_PASSWORD`), a TLS failure, a webhook 3xx or other 4xx.
//!   The notice is `failed` at once with the reason: retrying would not help and would only
//!   hammer the server.
//!
//! Delivery is at least once: a notice sent but not recorded (the database failing at that
//! instant) is sent again. Failed notices stay visible in the outbox with their error.

mod email;
mod markdown;
mod sender;
pub mod thread;
mod webhook;

use hermes_store::util::RetryPolicy;
pub use markdown::render_markdown;
pub use sender::SendError;
pub use webhook::signature;

use email::EmailChannel;
use futures::future::{BoxFuture, join_all};
use hermes_config::NotifySettings;
use hermes_store::util::Backoff;
use hermes_store::{NewNotice, Notice, Store, StoreError};
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use webhook::WebhookChannel;

/// The email channel's name.
pub(crate) const EMAIL: &str = "email";
/// The Matrix account's own lane: replies in the room and thread a person wrote in (the
/// notice names the room); `matrix:NAME` are the configured rooms.
pub(crate) const MATRIX: &str = "matrix";
/// The Telegram bot's own lane: replies in the chat a person wrote in, to their message (the
/// notice names the chat); `telegram:NAME` are the configured chats.
pub(crate) const TELEGRAM: &str = "telegram";

/// Longest a `doctor` check of the SMTP server may take.
const SMTP_CHECK_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("unknown notify channel '{channel}'; {}", known_channels_hint(.known))]
    UnknownChannel { channel: String, known: Vec<String> },
    #[error("{key}: {message}")]
    Config { key: String, message: String },
    #[error("cannot queue the notice: {0}")]
    Store(#[from] StoreError),
}

fn known_channels_hint(known: &[String]) -> String {
    if known.is_empty() {
        "no channels are configured (add notify.email or notify.webhooks to settings.yaml)".into()
    } else {
        format!("configured channels: {}", channel_list(known))
    }
}

fn channel_list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// A chat account the outbox sends through (Matrix, Telegram): implemented by the channel,
/// handed to the notifier when it is built — the notifier never reaches into the channel.
pub trait ChatSend: Send + Sync {
    /// The outbox lanes this account serves: its reply lane (`matrix`, the room named by each
    /// notice) and one per delivery target (`matrix:NAME`).
    fn lanes(&self) -> Vec<String>;
    /// The names notices may be queued to by anyone (`matrix:NAME`); replies are the inbox's.
    fn targets(&self) -> Vec<String>;
    /// Resolves once this daemon can send through the account (logged in here). With
    /// several daemons only the one that reads the channel logs in, so the others leave its
    /// notices alone rather than spend attempts on them.
    fn ready(&self) -> BoxFuture<'_, ()>;
    /// Send `notice` (retried with the same transaction ids, so the server posts it once):
    /// the server's id of its first event, which replies and reactions name.
    fn send<'a>(&'a self, notice: &'a Notice) -> BoxFuture<'a, Result<String, SendError>>;
}

/// How a transiently failing notice is retried by default: 8 attempts in all, waiting 30 s
/// and doubling up to an hour (see the module doc). No jitter: one person's notices are few.
pub const DEFAULT_RETRY: RetryPolicy = RetryPolicy {
    max_retries: 7,
    backoff: Backoff::new(Duration::from_secs(30), Duration::from_secs(3600)),
};

/// One `doctor` verdict.
#[derive(Debug, Clone, Serialize)]
pub struct CheckResult {
    /// What was checked, e.g. `smtp smtp.example.com:587 (starttls)`; never a secret.
    pub target: String,
    pub ok: bool,
    pub detail: String,
}

/// The notification service: a cheap-to-clone handle shared by the daemon, the scheduler and
/// the `notify` tool.
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
    /// Outside `inner` so [`Notifier::with_retry`] needs no rebuild; set once at start.
    retry: RetryPolicy,
    /// Where deliveries and failed attempts are counted; set once at start, like `retry`.
    metrics: crate::metrics::Metrics,
}

struct Inner {
    /// The outbox lives here: every notice is written before it is sent.
    store: Store,
    /// `None` when `notify.email` is not configured; then `email` is not a channel.
    email: Option<EmailChannel>,
    /// Webhook channels by name (sorted, so channel lists read the same every time).
    webhooks: BTreeMap<String, WebhookChannel>,
    /// The chat accounts configured (Matrix, Telegram), each serving its own lanes.
    chats: Vec<Arc<dyn ChatSend>>,
    /// One lane per channel, so a stalled SMTP server never delays a webhook and a slow
    /// webhook never delays email.
    lanes: BTreeMap<String, Lane>,
    /// The whole of one delivery attempt (`notify.send_timeout_s`).
    send_timeout: Duration,
}

/// A channel's sending state.
#[derive(Default)]
struct Lane {
    /// `enqueue` wakes the lane so a new notice goes out now, not at the next poll. A
    /// `Notify` keeps one permit, so a wake-up during a pass is not lost.
    wake: tokio::sync::Notify,
    /// Serialises the lane's passes: two at once would send the same due notice twice.
    pass: tokio::sync::Mutex<()>,
}

impl Inner {
    /// The chat account whose lane `channel` is, if any.
    fn chat_of(&self, channel: &str) -> Option<&Arc<dyn ChatSend>> {
        self.chats
            .iter()
            .find(|c| c.lanes().iter().any(|l| l == channel))
    }

    fn channel_names(&self) -> Vec<String> {
        self.email
            .as_ref()
            .map(|_| EMAIL.to_string())
            .into_iter()
            .chain(self.webhooks.keys().cloned())
            .chain(self.chats.iter().flat_map(|c| c.targets()))
            .collect()
    }
}

impl Notifier {
    /// Build the channels from the settings. An address or URL that cannot be used is an
    /// error naming its key, so a bad config shows at start, not at the first digest.
    pub fn new(settings: NotifySettings, store: Store) -> Result<Notifier, NotifyError> {
        Notifier::answering(settings, store, &[])
    }

    /// [`Notifier::new`], letting email notices also go to `reply_to` — the inbox's allowed
    /// senders, whom replies answer — as well as to `notify.email.to`.
    pub fn answering(
        settings: NotifySettings,
        store: Store,
        reply_to: &[String],
    ) -> Result<Notifier, NotifyError> {
        Notifier::with_chat(settings, store, reply_to, Vec::new())
    }

    /// [`Notifier::answering`], sending chat notices (`matrix`, `matrix:NAME`, `telegram`,
    /// `telegram:NAME`) through the accounts in `chats`.
    pub fn with_chat(
        settings: NotifySettings,
        store: Store,
        reply_to: &[String],
        chats: Vec<Arc<dyn ChatSend>>,
    ) -> Result<Notifier, NotifyError> {
        let mut email = settings.email.as_ref().map(EmailChannel::new).transpose()?;
        if let Some(e) = &mut email {
            e.allow_replies_to(reply_to);
        }
        let mut webhooks = BTreeMap::new();
        if !settings.webhooks.is_empty() {
            let client = reqwest::Client::builder()
                // The configured URL is the only destination; a redirect could lead anywhere.
                .redirect(reqwest::redirect::Policy::none())
                .user_agent(concat!("hermes-agent/", env!("CARGO_PKG_VERSION")))
                .build()
                .map_err(|e| NotifyError::Config {
                    key: "notify.webhooks".into(),
                    message: format!("cannot set up the HTTP client: {e}"),
                })?;
            for (name, hook) in &settings.webhooks {
                webhooks.insert(
                    name.clone(),
                    WebhookChannel::new(name, hook, client.clone())?,
                );
            }
        }
        let lanes = email
            .iter()
            .map(|_| EMAIL.to_string())
            .chain(webhooks.keys().cloned())
            .chain(chats.iter().flat_map(|c| c.lanes()))
            .map(|name| (name, Lane::default()))
            .collect();
        Ok(Notifier {
            inner: Arc::new(Inner {
                store,
                email,
                webhooks,
                chats,
                lanes,
                send_timeout: Duration::from_secs(settings.send_timeout_s.max(1)),
            }),
            retry: DEFAULT_RETRY,
            metrics: Default::default(),
        })
    }

    /// Count deliveries and failed attempts, by channel, in `metrics`.
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Notifier {
        self.metrics = metrics;
        self
    }

    pub fn with_retry(mut self, policy: RetryPolicy) -> Notifier {
        self.retry = policy;
        self
    }

    /// `email` (if configured) and the webhook names.
    pub fn channels(&self) -> Vec<String> {
        self.inner.channel_names()
    }

    /// Store first (durable), then wake the sender. Unknown channel → error naming the known
    /// channels.
    pub async fn enqueue(&self, notice: NewNotice) -> Result<i64, NotifyError> {
        let known = self.channels();
        if !known.contains(&notice.channel) {
            return Err(NotifyError::UnknownChannel {
                channel: notice.channel,
                known,
            });
        }
        let id = self.inner.store.outbox().enqueue(&notice).await?;
        tracing::debug!(notice = id, channel = %notice.channel, "notice queued");
        if let Some(lane) = self.inner.lanes.get(&notice.channel) {
            lane.wake.notify_one();
        }
        Ok(id)
    }

    /// Send what is due on `channel` now: a notice was queued in the store directly (the
    /// inbox queues a reply in the transaction that records the mail it answers).
    pub fn wake(&self, channel: &str) {
        if let Some(lane) = self.inner.lanes.get(channel) {
            lane.wake.notify_one();
        }
    }

    /// Send what is due on every channel now (replies on any channel were queued).
    pub fn wake_all(&self) {
        for lane in self.inner.lanes.values() {
            lane.wake.notify_one();
        }
    }

    /// "Retry now": a pending or failed notice becomes due at once (its attempts stay
    /// counted) and the sender is woken. A sent notice is a conflict.
    pub async fn retry(&self, id: i64) -> Result<Notice, StoreError> {
        let notice = self.inner.store.outbox().retry(id).await?;
        tracing::info!(notice = id, "notice retry requested");
        if let Some(lane) = self.inner.lanes.get(&notice.queued.channel) {
            lane.wake.notify_one();
        }
        Ok(notice)
    }

    /// doctor: SMTP connect + TLS + AUTH without sending, and each webhook URL reachable (any
    /// HTTP answer to a HEAD counts). The checks run concurrently.
    pub async fn check(&self) -> Vec<CheckResult> {
        let email = async {
            let email = self.inner.email.as_ref()?;
            let target = format!("smtp {}", email.label());
            let verdict = match tokio::time::timeout(SMTP_CHECK_TIMEOUT, email.check()).await {
                Ok(v) => v,
                Err(_) => Err(CheckError::Timeout(SMTP_CHECK_TIMEOUT.as_secs())),
            };
            Some(to_check(target, verdict))
        };
        let hooks = join_all(self.inner.webhooks.values().map(|hook| async move {
            to_check(
                format!("webhook {} ({})", hook.name, hook.label()),
                hook.check().await,
            )
        }));
        let (email, hooks) = tokio::join!(email, hooks);
        email.into_iter().chain(hooks).collect()
    }
}

/// Why doctor's check of a channel failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CheckError {
    /// The SMTP server took the connection but not the NOOP.
    #[error("connected, but the server did not answer NOOP")]
    NoNoop,
    /// No answer within the check's bound.
    #[error("no answer within {0} s")]
    Timeout(u64),
    /// The connection, TLS or login failed; the words say which and what to change.
    #[error("{0}")]
    Refused(String),
    /// The address could not be reached at all.
    #[error("unreachable: {0}")]
    Unreachable(String),
}

fn to_check(target: String, verdict: Result<String, CheckError>) -> CheckResult {
    match verdict {
        Ok(detail) => CheckResult {
            target,
            ok: true,
            detail,
        },
        Err(e) => CheckResult {
            target,
            ok: false,
            detail: e.to_string(),
        },
    }
}
