//! Chat channels: the protocols the agent talks to people through, besides mail (Matrix,
//! Telegram).
//!
//! Owns: each channel's connection, its account's session and keys, turning the protocol's
//! events into [`crate::inbox::ChatMessage`]s and the outbox's notices into the protocol's
//! messages.
//! Must not: decide what a message means or who may instruct the agent (the inbox does, the
//! same for every channel); run tools or call the model; import the entry modules (`http`,
//! `cli`, `daemon`), which depend on it.

pub mod matrix;
pub mod telegram;

use hermes_store::util::Backoff;
use hermes_store::{Channel, Store, StoreError};
use std::convert::Infallible;
use std::future::Future;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The longest a stop waits for a channel's intake loop to end.
const STOP_WAIT: Duration = Duration::from_secs(5);
/// Waits between a channel's connection attempts: 1 s doubling to 5 min, jittered.
// Used by the chat channels; a build without any has no caller.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
pub(crate) const RECONNECT: Backoff =
    Backoff::new(Duration::from_secs(1), Duration::from_secs(300)).with_jitter();
/// A connection that lasted this long was healthy: the next failure starts the backoff over.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
const HEALTHY: Duration = Duration::from_secs(60);
/// How often a node that does not hold a channel (another daemon on the same database reads
/// it) looks whether it is free.
// Used by the chat channels; a build without any has no caller.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
const STANDBY_POLL: Duration = Duration::from_secs(5);

pub use matrix::Matrix;
pub use telegram::Telegram;

/// How a chat channel's connection is doing, for `/healthz`, the dashboard and `doctor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Off,
    Starting,
    Ok,
    Down,
}

impl State {
    pub fn word(self) -> &'static str {
        match self {
            State::Off => "off",
            State::Starting => "starting",
            State::Ok => "ok",
            State::Down => "down",
        }
    }
}

/// A notice as one Markdown text: its title (if any) in bold over its body.
// Used by the chat channels; a build without any has no caller.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
pub(crate) fn compose(title: &str, body: &str) -> String {
    let title = title.trim();
    if title.is_empty() {
        body.trim().to_string()
    } else {
        format!("**{title}**\n\n{}", body.trim())
    }
}

/// A channel's intake loop, running in the background until [`Intake::stop`].
pub(crate) struct Intake {
    task: Option<(CancellationToken, JoinHandle<()>)>,
    /// The channel's name, for the log.
    name: &'static str,
}

impl Intake {
    /// No loop: the channel is off.
    pub(crate) fn none(name: &'static str) -> Intake {
        Intake { task: None, name }
    }

    /// Run `body` (given the token that stops it) in the background.
    #[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
    pub(crate) fn spawn<F>(name: &'static str, body: impl FnOnce(CancellationToken) -> F) -> Intake
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let stop = CancellationToken::new();
        let handle = tokio::spawn(body(stop.clone()));
        Intake {
            task: Some((stop, handle)),
            name,
        }
    }

    /// Read no more (bounded): what was recorded stays.
    pub(crate) async fn stop(&mut self) {
        if let Some((stop, handle)) = self.task.take() {
            stop.cancel();
            if tokio::time::timeout(STOP_WAIT, handle).await.is_err() {
                tracing::warn!(channel = self.name, "a chat channel did not stop in time");
            }
        }
    }
}

/// Wait until this node holds `channel`: at once alone; with other daemons on the same
/// database, when no other live one does. `standing_by` is told once, when another holds it.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
pub(crate) async fn hold(
    store: &Store,
    channel: Channel,
    standing_by: impl FnOnce(),
) -> Result<(), StoreError> {
    let mut standing_by = Some(standing_by);
    while !store.hold_channel(channel).await? {
        if let Some(tell) = standing_by.take() {
            tracing::info!(
                %channel,
                "another daemon on this database reads this channel; this one takes over if that one stops"
            );
            tell();
        }
        tokio::time::sleep(STANDBY_POLL).await;
    }
    Ok(())
}

/// Keep a channel connected until `stop`: `connect` runs one connection until it fails; then
/// `ended` is told why and how many failures came before in a row (a connection that lasted
/// [`HEALTHY`] starts the count over), and says how long to wait before the next — or `None`:
/// stop for good (a setting only a person can fix).
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
pub(crate) async fn keep_connected<E, C, F>(
    stop: &CancellationToken,
    mut connect: C,
    mut ended: impl FnMut(&E, u32) -> Option<Duration>,
) where
    C: FnMut() -> F,
    F: Future<Output = Result<Infallible, E>>,
{
    let mut failures: u32 = 0;
    loop {
        let began = Instant::now();
        let Err(e) = tokio::select! {
            _ = stop.cancelled() => return,
            r = connect() => r,
        };
        if began.elapsed() >= HEALTHY {
            failures = 0;
        }
        let Some(wait) = ended(&e, failures) else {
            return;
        };
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
