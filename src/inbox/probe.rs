//! `doctor`'s look at the mailbox: connect, log in, open it, and say whether the server
//! offers IDLE — changing nothing.

use super::imap;
use crate::config::ImapSettings;
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

/// Log in to the mailbox of `s` and open it read-only; what was found, or why it failed (a
/// message naming the setting to change).
pub async fn probe(s: &ImapSettings) -> Result<Probe, String> {
    let checked = tokio::time::timeout(PROBE_TIMEOUT, imap::open(s)).await;
    match checked {
        Err(_) => Err(format!(
            "the IMAP server {} did not answer within {} s",
            s.label(),
            PROBE_TIMEOUT.as_secs()
        )),
        Ok(Err(e)) => Err(e.to_string()),
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
