//! The `inbox` section: the mailbox the agent reads (`inbox.email`), with its defaults.
//! Its password is redacted from `Debug` with the other secrets (`settings.rs`).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct InboxSettings {
    /// An IMAP mailbox whose mail from `allow_from` becomes tasks and commands; `None`: the
    /// agent reads no mail.
    pub email: Option<ImapSettings>,
}

/// How the IMAP connection is secured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum ImapSecurity {
    /// TLS from the first byte (port 993).
    #[default]
    Tls,
    /// Plain, upgraded with STARTTLS before the login (port 143).
    Starttls,
    /// No encryption: only for a server on loopback.
    None,
}

#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ImapSettings {
    pub imap_host: String,
    pub imap_port: u16,
    pub security: ImapSecurity,
    pub username: String,
    pub password: String,
    pub mailbox: String,
    /// Who may instruct the agent by mail (addresses, compared without regard to case);
    /// empty: nobody. Answers go only to these addresses.
    pub allow_from: Vec<String>,
    /// When set: act only on mail whose `Authentication-Results` header from this server id
    /// says `dkim=pass` (for the From domain) or `dmarc=pass` — the receiving server's verdict.
    pub trusted_authserv_id: String,
    /// Tasks one sender may start by mail per hour; past it mail is recorded and ignored.
    pub max_tasks_per_hour: u32,
    /// How often a server without IDLE is asked for new mail.
    pub poll_s: u64,
}

impl Default for ImapSettings {
    fn default() -> Self {
        ImapSettings {
            imap_host: String::new(),
            imap_port: 993,
            security: ImapSecurity::Tls,
            username: String::new(),
            password: String::new(),
            mailbox: "INBOX".into(),
            allow_from: Vec::new(),
            trusted_authserv_id: String::new(),
            max_tasks_per_hour: 20,
            poll_s: 60,
        }
    }
}

impl ImapSettings {
    /// Whether `address` may instruct the agent; the entry of `allow_from` it matches (an
    /// address from the settings: answers go there, never to an address taken from a mail).
    pub fn allowed(&self, address: &str) -> Option<&str> {
        self.allow_from
            .iter()
            .map(|a| a.trim())
            .find(|a| a.eq_ignore_ascii_case(address.trim()))
    }

    /// `host:port (security)`, for logs and `doctor`; never a credential.
    pub fn label(&self) -> String {
        let security = match self.security {
            ImapSecurity::Tls => "tls",
            ImapSecurity::Starttls => "starttls",
            ImapSecurity::None => "no encryption",
        };
        format!("{}:{} ({security})", self.imap_host, self.imap_port)
    }
}
