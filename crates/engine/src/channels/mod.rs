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

use crate::inbox::Inbox;
use crate::metrics::Metrics;
use crate::notify::ChatSend;
use futures::future::BoxFuture;
use hermes_store::util::{Backoff, lock};
use hermes_store::{Channel, Store, StoreError};
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    #[default]
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

/// What every chat channel's status has, whatever its protocol adds to it. Its default is a
/// channel that is off: nothing configured, nothing counted.
pub(crate) trait Health: Clone + Default {
    /// Say how the connection is doing, and why it is not `ok` (never a secret).
    fn set_state(&mut self, state: State, error: Option<String>);
}

/// A channel's status: written by its intake loop and its sender, read through its handle.
pub(crate) struct StatusCell<S>(Mutex<S>);

impl<S: Clone> StatusCell<S> {
    pub(crate) fn get(&self) -> S {
        lock(&self.0).clone()
    }
}

// A build without any chat channel never makes one.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
impl<S: Health> StatusCell<S> {
    /// Configured, not connected yet.
    pub(crate) fn starting() -> StatusCell<S> {
        let mut status = S::default();
        status.set_state(State::Starting, None);
        StatusCell(Mutex::new(status))
    }

    pub(crate) fn update(&self, f: impl FnOnce(&mut S)) {
        f(&mut lock(&self.0));
    }

    pub(crate) fn set_down(&self, error: String) {
        self.update(|s| s.set_state(State::Down, Some(error)));
    }
}

/// A configured chat channel's protocol, as its handle drives it; `S` is its status.
// A build without any chat channel has no protocol.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
pub(crate) trait Protocol<S>: Send + Sync + 'static {
    fn status(&self) -> &StatusCell<S>;
    /// The outbox's way to send through the channel.
    fn sender(self: Arc<Self>) -> Arc<dyn ChatSend>;
    /// The intake loop: connect, hand messages to `inbox`, until `stop`.
    fn intake(
        self: Arc<Self>,
        inbox: Inbox,
        metrics: Metrics,
        stop: CancellationToken,
    ) -> BoxFuture<'static, ()>;
    /// Forget the connection the outbox sends with: the channel is stopping.
    fn disconnect(&self);
}

/// A chat channel (`S` is its status), cheap to clone: off, or its configured protocol's
/// state, shared with the intake loop and the outbox's sender. Built for every app, and for a
/// channel built without its cargo feature too (always off then); does nothing until the
/// daemon calls [`Handle::start`].
pub struct Handle<S> {
    /// The channel's name, for the log.
    name: &'static str,
    protocol: Option<Arc<dyn Protocol<S>>>,
}

impl<S> Clone for Handle<S> {
    fn clone(&self) -> Self {
        Handle {
            name: self.name,
            protocol: self.protocol.clone(),
        }
    }
}

impl<S: 'static> Handle<S> {
    pub(crate) fn off(name: &'static str) -> Handle<S> {
        Handle {
            name,
            protocol: None,
        }
    }

    // A build without any chat channel never makes one.
    #[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
    pub(crate) fn on(name: &'static str, protocol: impl Protocol<S>) -> Handle<S> {
        Handle {
            name,
            protocol: Some(Arc::new(protocol)),
        }
    }

    /// Whether the channel is configured (and built).
    pub fn is_on(&self) -> bool {
        self.protocol.is_some()
    }

    /// The outbox's way to send through the channel (None when off).
    pub fn sender(&self) -> Option<Arc<dyn ChatSend>> {
        self.protocol.clone().map(|p| p.sender())
    }

    /// Connect and read in the background, handing messages to `inbox` (nothing when off).
    /// Stopped, the connection goes after the outbox's last pass.
    pub fn start(&self, inbox: Inbox, metrics: Metrics) -> Running {
        let Some(protocol) = &self.protocol else {
            return Running {
                intake: Intake::none(self.name),
                disconnect: None,
            };
        };
        let looped = protocol.clone();
        let kept = protocol.clone();
        Running {
            intake: Intake::spawn(self.name, |stop| looped.intake(inbox, metrics, stop)),
            disconnect: Some(Box::new(move || kept.disconnect())),
        }
    }
}

impl<S: Clone + Default + 'static> Handle<S> {
    /// What `/healthz`, doctor and the dashboard show of the channel; a channel that is off
    /// (not configured, or built without its feature) shows its status's default, off.
    pub fn status(&self) -> S {
        self.protocol
            .as_ref()
            .map_or_else(S::default, |p| p.status().get())
    }
}

/// A chat channel's running intake loop, and the connection the outbox sends with.
pub struct Running {
    intake: Intake,
    /// Forgets that connection (none when the channel is off).
    disconnect: Option<Box<dyn FnOnce() + Send + Sync>>,
}

impl Running {
    /// Read no more messages (bounded): the daemon is shutting down. What was recorded stays;
    /// the connection stays, so answers of tasks that end in the grace still go out.
    pub async fn stop_intake(&mut self) {
        self.intake.stop().await;
    }

    /// Stop everything: after the outbox's last pass, the connection goes too.
    pub async fn stop(mut self) {
        self.stop_intake().await;
        if let Some(disconnect) = self.disconnect.take() {
            disconnect();
        }
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
/// database, when no other live one does. Meanwhile `status` says it stands by.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
pub(crate) async fn hold<S: Health>(
    store: &Store,
    channel: Channel,
    status: &StatusCell<S>,
) -> Result<(), StoreError> {
    let mut told = false;
    while !store.chat().hold_channel(channel).await? {
        if !told {
            tracing::info!(
                %channel,
                "another daemon on this database reads this channel; this one takes over if that one stops"
            );
            status.update(|s| {
                s.set_state(
                    State::Starting,
                    Some("standing by: another daemon on this database reads the channel".into()),
                )
            });
            told = true;
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
