//! The Matrix channel (`channels.matrix`): the agent's own Matrix account, end-to-end
//! encrypted, through `matrix-sdk`.
//!
//! Owns: the session (`session`: logged in once with the password, then the access token and
//! device kept in `DATA_DIR/matrix/session.json`, mode 0600, beside the SDK's SQLite store of
//! keys and room state — the same device and keys at every start); the sync loop (`sync`:
//! events since the saved position, invites from `allow_from` accepted and others declined,
//! the position saved after what came before it was recorded); reading events into
//! [`ChatMessage`]s (`events`); sending the outbox's notices (`send`: Matrix HTML with a plain
//! body, split below the event size limit, the notice's token as the transaction id, into the
//! room's thread); the channel's health for `/healthz`, the dashboard and `doctor` (`probe`).
//! Must not: decide what a message means (the inbox does); send to a room no one in
//! `allow_from` is in; write a token, a password, a key or a message's text to a log.
//!
//! Exactly once: an event is recorded by its id in one transaction with what it became
//! (`inbox`); the sync position is saved after the whole batch. Killed in between, the batch is
//! read again and every event in it is known. A notice's parts are sent with transaction ids
//! made of its token, so a retry after a lost answer is the same event to the server.
//!
//! Built only with the cargo feature `matrix` (on by default): matrix-sdk is most of the
//! binary's growth (BENCHMARKS.md §18). Without it this module keeps its types — the channel
//! is always off — and `config check` refuses `channels.matrix`.

#[cfg(feature = "matrix")]
mod events;
#[cfg(feature = "matrix")]
mod probe;
#[cfg(feature = "matrix")]
mod send;
#[cfg(feature = "matrix")]
mod session;
#[cfg(feature = "matrix")]
mod sync;

#[cfg(not(feature = "matrix"))]
mod absent;
#[cfg(not(feature = "matrix"))]
pub(crate) use absent::Inner;
#[cfg(not(feature = "matrix"))]
pub use absent::probe;
#[cfg(feature = "matrix")]
pub use probe::probe;

use super::Intake;
#[cfg(feature = "matrix")]
use crate::inbox::ChatMessage;
use crate::inbox::Inbox;
use crate::notify::ChatSend;
#[cfg(feature = "matrix")]
use hermes_config::MatrixSettings;
use hermes_config::Settings;
use hermes_store::Store;
#[cfg(feature = "matrix")]
use matrix_sdk::Client;
use serde::Serialize;
use std::path::Path;
#[cfg(feature = "matrix")]
use std::path::PathBuf;
use std::sync::Arc;
#[cfg(feature = "matrix")]
use std::sync::Mutex;

/// The channel's name in the log.
const NAME: &str = "matrix";

/// What `doctor`'s probe found.
#[derive(Debug, Clone)]
pub struct Probe {
    pub user: String,
    pub device: String,
    /// This device's keys are on the server, and whether the account cross-signed it.
    pub encryption: String,
    /// Per configured room: its name, and what was found or is missing.
    pub rooms: Vec<(String, Result<String, String>)>,
}

/// How the channel is doing, for `/healthz`, the dashboard and `doctor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Status {
    /// `off`, `starting`, `ok` or `down`.
    pub state: State,
    /// Why it is down (never a secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The agent's device (not a secret: other clients show it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Messages that could not be decrypted since the start.
    pub undecryptable: u64,
    /// The last encrypted message could not be decrypted (cleared by one that could).
    pub decryption_failing: bool,
    /// Messages taken in and notices sent since the start.
    pub messages_in: u64,
    pub messages_out: u64,
}

pub use super::State;

impl Status {
    pub(crate) fn off() -> Status {
        Status {
            state: State::Off,
            error: None,
            device: None,
            undecryptable: 0,
            decryption_failing: false,
            messages_in: 0,
            messages_out: 0,
        }
    }

    /// Whether `/healthz` should say `degraded`: the channel is down, or messages fail to
    /// decrypt.
    pub fn degraded(&self) -> bool {
        self.state == State::Down || self.decryption_failing
    }
}

/// The Matrix channel: a cheap-to-clone handle. Built for every app; does nothing unless
/// `channels.matrix` is configured and [`Matrix::start`] is called (by the daemon).
#[derive(Clone)]
pub struct Matrix {
    inner: Option<Arc<Inner>>,
}

#[cfg(feature = "matrix")]
pub(crate) struct Inner {
    settings: MatrixSettings,
    /// `DATA_DIR/matrix`: the session file and the SDK's store.
    dir: PathBuf,
    store: Store,
    /// The logged-in client, once there is one; senders wait for it.
    client: tokio::sync::watch::Sender<Option<Client>>,
    status: Mutex<Status>,
    /// Held while a direct room is looked up or created, so two notices never make two; the
    /// rooms created since the start, by user, because the SDK learns a new room is direct
    /// only from a later sync.
    dm: tokio::sync::Mutex<std::collections::HashMap<String, matrix_sdk::ruma::OwnedRoomId>>,
}

/// The running sync loop, and the client the outbox sends with.
pub struct Running {
    intake: Intake,
    // Read only to log the client out at the stop; a build without the SDK has none.
    #[cfg_attr(not(feature = "matrix"), allow(dead_code))]
    inner: Option<Arc<Inner>>,
}

impl Matrix {
    /// The channel of `settings` (off without `channels.matrix`), keeping its session under
    /// `data_dir`.
    #[cfg(feature = "matrix")]
    pub fn new(settings: &Settings, data_dir: &Path, store: Store) -> Matrix {
        let Some(m) = settings.channels.matrix.clone() else {
            return Matrix::off();
        };
        let (client, _) = tokio::sync::watch::channel(None);
        let mut status = Status::off();
        status.state = State::Starting;
        Matrix {
            inner: Some(Arc::new(Inner {
                settings: m,
                dir: data_dir.join("matrix"),
                store,
                client,
                status: Mutex::new(status),
                dm: tokio::sync::Mutex::new(std::collections::HashMap::new()),
            })),
        }
    }

    /// Without the `matrix` feature the channel is always off (`config check` refuses
    /// `channels.matrix`, so a daemon never gets here with one).
    #[cfg(not(feature = "matrix"))]
    pub fn new(_settings: &Settings, _data_dir: &Path, _store: Store) -> Matrix {
        Matrix::off()
    }

    pub fn off() -> Matrix {
        Matrix { inner: None }
    }

    pub fn is_on(&self) -> bool {
        self.inner.is_some()
    }

    pub fn status(&self) -> Status {
        match &self.inner {
            #[cfg(feature = "matrix")]
            Some(i) => hermes_store::util::lock(&i.status).clone(),
            #[cfg(not(feature = "matrix"))]
            Some(i) => match **i {},
            None => Status::off(),
        }
    }

    /// The outbox's way to send through this account (None when off).
    pub fn sender(&self) -> Option<Arc<dyn ChatSend>> {
        let inner = self.inner.clone()?;
        #[cfg(feature = "matrix")]
        return Some(Arc::new(send::Sender(inner)));
        #[cfg(not(feature = "matrix"))]
        match *inner {}
    }

    /// Log in (or restore the session) and sync in the background, handing messages to
    /// `inbox`. Without `channels.matrix`, nothing.
    pub fn start(&self, inbox: Inbox, metrics: crate::metrics::Metrics) -> Running {
        let Some(inner) = &self.inner else {
            return Running {
                intake: Intake::none(NAME),
                inner: None,
            };
        };
        #[cfg(not(feature = "matrix"))]
        {
            let _ = (inbox, metrics);
            match **inner {}
        }
        #[cfg(feature = "matrix")]
        {
            let synced = inner.clone();
            Running {
                intake: Intake::spawn(NAME, |stop| sync::run(synced, inbox, metrics, stop)),
                inner: Some(inner.clone()),
            }
        }
    }
}

impl Running {
    /// Read no more messages (bounded): the daemon is shutting down. What was recorded stays;
    /// the client stays logged in, so answers of tasks that end in the grace still go out.
    pub async fn stop_intake(&mut self) {
        self.intake.stop().await;
    }

    /// Stop everything: after the outbox's last pass, the client goes too.
    pub async fn stop(mut self) {
        self.stop_intake().await;
        #[cfg(feature = "matrix")]
        if let Some(inner) = self.inner.take() {
            inner.client.send_replace(None);
        }
    }
}

#[cfg(feature = "matrix")]
impl Inner {
    fn update(&self, f: impl FnOnce(&mut Status)) {
        f(&mut hermes_store::util::lock(&self.status));
    }

    fn set_down(&self, error: String) {
        self.update(|s| {
            s.state = State::Down;
            s.error = Some(error);
        });
    }

    /// The client, if logged in now.
    fn client(&self) -> Option<Client> {
        self.client.borrow().clone()
    }

    /// Count one message taken in; an encrypted one says whether decryption works now.
    fn took_in(&self, m: &ChatMessage, encrypted: bool) {
        let failed = matches!(m.kind, crate::inbox::ChatKind::Undecryptable(_));
        self.update(|s| {
            s.messages_in += 1;
            if failed {
                s.undecryptable += 1;
            }
            if encrypted {
                s.decryption_failing = failed;
            }
        });
    }
}
