//! `doctor`'s look at the mailbox: connect, log in, open it, and say whether the server
//! offers IDLE — changing nothing.

use super::imap::{self, ImapError};
use hermes_config::ImapSettings;
use serde::Serialize;
use std::time::Duration;

/// The longest the check may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// What the check found.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Probe {
    /// `host:port (security)`; never a credential.
    pub server: String,
    pub mailbox: String,
    /// Messages in the mailbox now.
    pub messages: u32,
    /// Whether the server announces IDLE (else the inbox polls every `poll_s`).
    pub idle: bool,
}

/// Why the mailbox could not be looked at.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error(
        "the IMAP server {server} did not answer within {} s; check inbox.email.imap_host and imap_port, and that the server is up",
        .waited.as_secs()
    )]
    TimedOut { server: String, waited: Duration },
    #[error(transparent)]
    Imap(#[from] ImapError),
}

/// Log in to the mailbox of `s` and open it read-only; what was found, or why it failed (a
/// message naming the setting to change).
pub async fn probe(s: &ImapSettings) -> Result<Probe, ProbeError> {
    let checked = tokio::time::timeout(PROBE_TIMEOUT, imap::open(s)).await;
    match checked {
        Err(_) => Err(ProbeError::TimedOut {
            server: s.label(),
            waited: PROBE_TIMEOUT,
        }),
        Ok(Err(e)) => Err(e.into()),
        Ok(Ok(conn)) => {
            let found = Probe {
                server: s.label(),
                mailbox: s.mailbox.clone(),
                messages: conn.opened.exists,
                idle: conn.idle,
            };
            conn.logout().await;
            Ok(found)
        }
    }
}
