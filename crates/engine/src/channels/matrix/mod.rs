//! The Matrix channel (`channels.matrix`): the agent's own Matrix account, end-to-end
//! encrypted, through `matrix-sdk`.
//!
//! Owns: the session (`session`: logged in once with the password, then the access token and
//! device kept in `DATA_DIR/matrix/session.json`, mode 0600, beside the SDK's SQLite store of
//! keys and room state — the same device and keys at every start); the sync loop (`sync`:
//! events since the saved position, invites from `allow_from` accepted and others declined,
//! the position saved after what came before it was recorded); reading events into
//! [`ChatMessage`](crate::inbox::ChatMessage)s (`events`); sending the outbox's notices (`send`: Matrix HTML with a plain
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
pub use absent::probe;
#[cfg(feature = "matrix")]
pub use probe::probe;

use super::Handle;
#[cfg(feature = "matrix")]
use super::Link;
pub use super::{Running, State};
#[cfg(feature = "matrix")]
use crate::inbox::ChatMessage;
#[cfg(feature = "matrix")]
use hermes_config::MatrixSettings;
use hermes_config::Settings;
#[cfg(feature = "matrix")]
use hermes_store::Channel;
use hermes_store::Store;
#[cfg(feature = "matrix")]
use matrix_sdk::Client;
use serde::Serialize;
use std::path::Path;
#[cfg(feature = "matrix")]
use std::path::PathBuf;
#[cfg(feature = "matrix")]
use std::sync::Arc;

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

/// How the channel is doing, for `/healthz`, the dashboard and `doctor`; by default, off.
pub type Status = super::Status<Encryption>;

/// What the Matrix channel's status adds: its device and how decryption goes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct Encryption {
    /// The agent's device (not a secret: other clients show it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// Messages that could not be decrypted since the start.
    pub undecryptable: u64,
    /// The last encrypted message could not be decrypted (cleared by one that could).
    pub decryption_failing: bool,
    /// `channels.matrix.recovery_key` is set but did not restore the key backup (a wrong key,
    /// or a backup made with another).
    #[serde(default)]
    pub recovery_failed: bool,
}

impl Status {
    /// Whether `/healthz` should say `degraded`: the channel is down, messages fail to
    /// decrypt, or the recovery key did not work.
    pub fn degraded(&self) -> bool {
        self.state == State::Down
            || self.protocol.decryption_failing
            || self.protocol.recovery_failed
    }
}

/// The Matrix channel: on when `channels.matrix` is configured; [`Handle::start`] logs in (or
/// restores the session) and syncs; stopped, the client goes after the outbox's last pass.
pub type Matrix = Handle<Status>;

#[cfg(feature = "matrix")]
pub(crate) struct Inner {
    settings: MatrixSettings,
    /// `DATA_DIR/matrix`: the session file and the SDK's store.
    dir: PathBuf,
    store: Store,
    /// The channel's status, and the logged-in client once there is one; senders wait for it.
    link: Arc<Link<Status, Client>>,
    /// Held while a direct room is looked up or created, so two notices never make two; the
    /// rooms created since the start, by user, because the SDK learns a new room is direct
    /// only from a later sync.
    dm: tokio::sync::Mutex<std::collections::HashMap<String, matrix_sdk::ruma::OwnedRoomId>>,
}

impl Matrix {
    /// The channel of `settings` (off without `channels.matrix`), keeping its session under
    /// `data_dir`.
    #[cfg(feature = "matrix")]
    pub fn new(settings: &Settings, data_dir: &Path, store: Store) -> Matrix {
        let Some(m) = settings.channels.matrix.clone() else {
            return Handle::off(NAME);
        };
        let link = Arc::new(Link::new(Channel::Matrix, "Matrix", m.rooms.keys()));
        let looked = (link.clone(), m.clone());
        let inner = Inner {
            settings: m,
            dir: data_dir.join("matrix"),
            store,
            link: link.clone(),
            dm: tokio::sync::Mutex::new(std::collections::HashMap::new()),
        };
        Handle::on(NAME, link, Arc::new(inner), sync::run).with_look(move || {
            let (link, settings) = looked.clone();
            Box::pin(async move {
                let client = link.conn()?;
                Some(probe::rooms(&client, &settings).await)
            })
        })
    }

    /// Without the `matrix` feature the channel is always off (`config check` refuses
    /// `channels.matrix`, so a daemon never gets here with one).
    #[cfg(not(feature = "matrix"))]
    pub fn new(_settings: &Settings, _data_dir: &Path, _store: Store) -> Matrix {
        Handle::off(NAME)
    }
}

#[cfg(feature = "matrix")]
impl Inner {
    /// Count one message taken in; an encrypted one says whether decryption works now.
    fn took_in(&self, m: &ChatMessage, encrypted: bool) {
        let failed = matches!(m.kind, crate::inbox::ChatKind::Undecryptable(_));
        self.link.status.update(|s| {
            s.messages_in += 1;
            if failed {
                s.protocol.undecryptable += 1;
            }
            if encrypted {
                s.protocol.decryption_failing = failed;
            }
        });
    }
}
