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
use crate::notify::{ChatSend, SendError};
use crate::reconnect::{self, RECONNECT};
use futures::future::BoxFuture;
use hermes_store::util::lock;
use hermes_store::{Channel, Notice, Store, StoreError};
use std::convert::Infallible;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The longest a stop waits for a channel's intake loop to end.
const STOP_WAIT: Duration = Duration::from_secs(5);
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

/// How a chat channel is doing, for `/healthz`, the dashboard and `doctor`: what every channel
/// has, and what its protocol adds (`P`, beside the rest in JSON). By default, off: nothing
/// configured, nothing counted.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Status<P> {
    /// `off`, `starting`, `ok` or `down`.
    pub state: State,
    /// Why it is down, or standing by (never a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Messages taken in and notices sent since the start.
    pub messages_in: u64,
    pub messages_out: u64,
    #[serde(flatten)]
    pub protocol: P,
}

/// What the code shared by every channel writes into its status.
pub(crate) trait Health: Clone + Default {
    /// Say how the connection is doing, and why it is not `ok` (never a secret).
    fn set_state(&mut self, state: State, error: Option<String>);
    /// Count one notice sent.
    fn count_sent(&mut self);
}

impl<P: Clone + Default> Health for Status<P> {
    fn set_state(&mut self, state: State, error: Option<String>) {
        self.state = state;
        self.error = error;
    }

    fn count_sent(&mut self) {
        self.messages_out += 1;
    }
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

/// What a chat channel's intake loop and its outbox sender share: how the channel is doing,
/// and its live connection (`C`: Matrix's client, Telegram's bot) once this daemon has one.
// A build without any chat channel never makes one.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
pub(crate) struct Link<S, C> {
    channel: Channel,
    /// The channel's name in messages (`Matrix`).
    title: &'static str,
    /// The delivery targets' lanes (`matrix:NAME`).
    targets: Vec<String>,
    pub(crate) status: StatusCell<S>,
    conn: watch::Sender<Option<C>>,
}

#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
impl<S: Health, C: Clone> Link<S, C> {
    /// Starting, not connected; `targets` are the names of the configured destinations.
    pub(crate) fn new<'a>(
        channel: Channel,
        title: &'static str,
        targets: impl IntoIterator<Item = &'a String>,
    ) -> Link<S, C> {
        Link {
            channel,
            title,
            targets: targets
                .into_iter()
                .map(|name| format!("{channel}:{name}"))
                .collect(),
            status: StatusCell::starting(),
            conn: watch::channel(None).0,
        }
    }

    /// The connection, if this daemon has one now.
    pub(crate) fn conn(&self) -> Option<C> {
        self.conn.borrow().clone()
    }

    /// The connection a notice is sent with; without one the notice waits.
    pub(crate) fn conn_to_send(&self) -> Result<C, SendError> {
        self.conn().ok_or_else(|| {
            SendError::Transient(format!(
                "the {} channel is not connected (see /healthz); the notice waits",
                self.title
            ))
        })
    }

    pub(crate) fn connected(&self, conn: C) {
        self.conn.send_replace(Some(conn));
    }

    /// Forget the connection: senders wait for the next one.
    pub(crate) fn lost(&self) {
        self.conn.send_replace(None);
    }

    /// Read the channel until `stop`: hold it (one daemon at a time), run `connect`'s
    /// connection until it fails, then say so and wait as `retry` says of the failure. The
    /// outbox keeps sending with the connection meanwhile when `sends_on` says the failure
    /// leaves it usable (Telegram's sends do not depend on its polling).
    pub(crate) async fn keep_reading<E, F>(
        &self,
        store: &Store,
        stop: &CancellationToken,
        mut connect: impl FnMut() -> F,
        mut retry: impl FnMut(&E) -> Retry,
        sends_on: fn(&E) -> bool,
    ) where
        E: From<StoreError> + std::fmt::Display,
        F: Future<Output = Result<Infallible, E>>,
    {
        let held = || {
            let connection = connect();
            async move {
                self.hold(store).await?;
                connection.await
            }
        };
        reconnect::keep_connected(stop, held, |e: &E, failures| {
            if !sends_on(e) {
                self.lost();
            }
            let wait = match retry(e) {
                Retry::Soon => RECONNECT.delay(failures),
                Retry::After(wait) => wait,
                Retry::Late => RECONNECT.delay(u32::MAX),
                Retry::Never => return None,
            };
            let error = e.to_string();
            tracing::warn!(error = %error, retry = failures + 1, "{} channel down; connecting again", self.title);
            self.status.set_down(error);
            Some(wait)
        })
        .await;
        tracing::info!("{} channel stopped reading", self.title);
    }

    /// Wait until this node holds the channel: at once alone; with other daemons on the same
    /// database, when no other live one does. Meanwhile the status says it stands by.
    async fn hold(&self, store: &Store) -> Result<(), StoreError> {
        let mut told = false;
        while !store.chat().hold_channel(self.channel).await? {
            if !told {
                tracing::info!(
                    channel = %self.channel,
                    "another daemon on this database reads this channel; this one takes over if that one stops"
                );
                self.status.update(|s| {
                    s.set_state(
                        State::Starting,
                        Some(
                            "standing by: another daemon on this database reads the channel".into(),
                        ),
                    )
                });
                told = true;
            }
            tokio::time::sleep(STANDBY_POLL).await;
        }
        Ok(())
    }
}

/// What a failed connection calls for; the link turns it into a wait.
// A build without any chat channel has no connection to fail.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Retry {
    /// Connect again after the backoff: the server or the network may be back by then.
    Soon,
    /// After as long as the server asked.
    After(Duration),
    /// A setting is wrong and will not fix itself: try again only after the longest wait.
    Late,
    /// Stop until a person acts (the protocol has said why).
    Never,
}

/// Sending one notice through a protocol; the rest of being the outbox's sender (lanes,
/// waiting for the connection, counting) is the same for every channel.
// A build without any chat channel has no protocol.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
pub(crate) trait Sends: Send + Sync + 'static {
    /// Send `notice` (retried with the same transaction ids or recorded parts, so the server
    /// posts it once): the server's id of its first message.
    fn send(&self, notice: &Notice) -> impl Future<Output = Result<String, SendError>> + Send;
}

/// Where an intake loop hands what it reads, and what stops it.
// A build without any chat channel has no intake loop to read it.
#[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
pub(crate) struct Feed {
    pub(crate) inbox: Inbox,
    pub(crate) metrics: Metrics,
    pub(crate) stop: CancellationToken,
}

/// The outbox's sender of a channel: its protocol's `send`, behind the channel's link.
struct Sender<S, C, P> {
    link: Arc<Link<S, C>>,
    protocol: Arc<P>,
}

impl<S, C, P> ChatSend for Sender<S, C, P>
where
    S: Health + Send + 'static,
    C: Clone + Send + Sync + 'static,
    P: Sends,
{
    fn lanes(&self) -> Vec<String> {
        std::iter::once(self.link.channel.to_string())
            .chain(self.targets())
            .collect()
    }

    fn targets(&self) -> Vec<String> {
        self.link.targets.clone()
    }

    fn ready(&self) -> BoxFuture<'_, ()> {
        let mut conn = self.link.conn.subscribe();
        Box::pin(async move {
            // The sender lives as long as `self`: an error here cannot happen.
            let _ = conn.wait_for(Option::is_some).await;
        })
    }

    fn send<'a>(&'a self, notice: &'a Notice) -> BoxFuture<'a, Result<String, SendError>> {
        Box::pin(async move {
            let id = self.protocol.send(notice).await?;
            self.link.status.update(|s| s.count_sent());
            Ok(id)
        })
    }
}

/// A channel's link, as its handle reads and ends it whatever its connection's type.
trait Linked<S>: Send + Sync {
    fn status(&self) -> S;
    fn lost(&self);
}

impl<S: Health + Send, C: Clone + Send + Sync> Linked<S> for Link<S, C> {
    fn status(&self) -> S {
        self.status.get()
    }

    fn lost(&self) {
        Link::lost(self);
    }
}

/// Each configured destination of a channel as its live connection finds it: its name, and
/// what was found or what is missing.
pub type Targets = Vec<(String, Result<String, String>)>;

/// A look at a channel's destinations through its connection (None: not connected now).
type Look = Box<dyn Fn() -> BoxFuture<'static, Option<Targets>> + Send + Sync>;

/// A configured channel, as its handle drives it.
struct On<S> {
    link: Arc<dyn Linked<S>>,
    sender: Arc<dyn ChatSend>,
    intake: Box<dyn Fn(Feed) -> BoxFuture<'static, ()> + Send + Sync>,
    /// How its destinations are looked at, where the protocol can (Matrix's rooms).
    look: Option<Look>,
}

/// A chat channel (`S` is its status), cheap to clone: off, or its configured protocol's
/// state, shared with the intake loop and the outbox's sender. Built for every app, and for a
/// channel built without its cargo feature too (always off then); does nothing until the
/// daemon calls [`Handle::start`].
pub struct Handle<S> {
    /// The channel's name, for the log.
    name: &'static str,
    on: Option<Arc<On<S>>>,
}

impl<S> Clone for Handle<S> {
    fn clone(&self) -> Self {
        Handle {
            name: self.name,
            on: self.on.clone(),
        }
    }
}

impl<S: 'static> Handle<S> {
    pub(crate) fn off(name: &'static str) -> Handle<S> {
        Handle { name, on: None }
    }

    /// The channel of `protocol`, reading with `intake` (its loop, given the protocol's state
    /// and the feed) and sending through `link` once connected.
    // A build without any chat channel never makes one.
    #[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
    pub(crate) fn on<C, P, F>(
        name: &'static str,
        link: Arc<Link<S, C>>,
        protocol: Arc<P>,
        intake: fn(Arc<P>, Feed) -> F,
    ) -> Handle<S>
    where
        S: Health + Send,
        C: Clone + Send + Sync + 'static,
        P: Sends,
        F: Future<Output = ()> + Send + 'static,
    {
        let sender = Arc::new(Sender {
            link: link.clone(),
            protocol: protocol.clone(),
        });
        Handle {
            name,
            on: Some(Arc::new(On {
                link,
                sender,
                intake: Box::new(move |feed| Box::pin(intake(protocol.clone(), feed))),
                look: None,
            })),
        }
    }

    /// The channel, its destinations looked at through its connection by `look` (`doctor`
    /// with a daemon up asks it).
    #[cfg_attr(not(feature = "matrix"), allow(dead_code))]
    pub(crate) fn with_look(
        mut self,
        look: impl Fn() -> BoxFuture<'static, Option<Targets>> + Send + Sync + 'static,
    ) -> Handle<S> {
        if let Some(on) = self.on.as_mut().and_then(Arc::get_mut) {
            on.look = Some(Box::new(look));
        }
        self
    }

    /// Its destinations as the live connection finds them: None when the channel is off,
    /// cannot tell, or is not connected now.
    pub async fn look(&self) -> Option<Targets> {
        let look = self.on.as_ref()?.look.as_ref()?;
        look().await
    }

    /// Whether the channel is configured (and built).
    pub fn is_on(&self) -> bool {
        self.on.is_some()
    }

    /// The outbox's way to send through the channel (None when off).
    pub fn sender(&self) -> Option<Arc<dyn ChatSend>> {
        self.on.as_ref().map(|on| on.sender.clone())
    }

    /// Connect and read in the background, handing messages to `inbox` (nothing when off).
    /// Stopped, the connection goes after the outbox's last pass.
    pub fn start(&self, inbox: Inbox, metrics: Metrics) -> Running {
        let Some(on) = &self.on else {
            return Running {
                intake: Intake::none(self.name),
                disconnect: None,
            };
        };
        let looped = on.clone();
        let kept = on.link.clone();
        Running {
            intake: Intake::spawn(self.name, move |stop| {
                (looped.intake)(Feed {
                    inbox,
                    metrics,
                    stop,
                })
            }),
            disconnect: Some(Box::new(move || kept.lost())),
        }
    }
}

impl<S: Clone + Default + 'static> Handle<S> {
    /// What `/healthz`, doctor and the dashboard show of the channel; a channel that is off
    /// (not configured, or built without its feature) shows its status's default, off.
    pub fn status(&self) -> S {
        self.on
            .as_ref()
            .map_or_else(S::default, |on| on.link.status())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `/healthz` shows a channel's status as one flat object (the contract's names): what a
    /// protocol adds sits beside what every channel has, and reads back the same.
    #[test]
    fn a_status_is_one_flat_object_both_ways() {
        let mut status = matrix::Status::default();
        status.set_state(State::Down, Some("the homeserver is away".into()));
        status.protocol.undecryptable = 2;
        let json = serde_json::to_value(&status).expect("serialises");
        assert_eq!(
            json,
            serde_json::json!({
                "state": "down",
                "error": "the homeserver is away",
                "messages_in": 0,
                "messages_out": 0,
                "undecryptable": 2,
                "decryption_failing": false,
                "recovery_failed": false,
            })
        );
        let back: matrix::Status = serde_json::from_value(json).expect("reads back");
        assert_eq!(back, status);

        let telegram = telegram::Status::default();
        let json = serde_json::to_value(&telegram).expect("serialises");
        assert_eq!(json["state"], "off");
        assert_eq!(json["revoked"], false);
    }
}
