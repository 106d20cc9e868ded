//! One IMAP connection (async-imap on tokio): TCP, TLS or STARTTLS (rustls with the public
//! roots), the login, the mailbox opened read-only, the UIDs of new mail, one message's bytes,
//! and waiting in IDLE for the next change.
//!
//! Owns: every IMAP command the inbox sends and the bound on each.
//! Must not: decide what a message means, or write anything (the mailbox is opened with
//! EXAMINE and bodies are fetched with BODY.PEEK: the person's flags are left as they were).

use async_imap::extensions::idle::IdleResponse;
use async_imap::types::UnsolicitedResponse;
use async_imap::{Client, Session};
use futures::TryStreamExt;
use hermes_config::{ImapSecurity, ImapSettings};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore};
use tokio_util::sync::CancellationToken;

/// Connecting, TLS and the greeting together.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Any one command and its answer (a message's fetch included).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// LOGOUT on the way out: a courtesy to the server, never worth holding a shutdown for.
const LOGOUT_PATIENCE: Duration = Duration::from_secs(2);
/// RFC 2177: a server may drop a client idle for 30 minutes; IDLE is ended and issued again
/// well before that, whatever keep-alives the server sends meanwhile.
pub(crate) const IDLE_RENEW: Duration = Duration::from_secs(25 * 60);
/// The most of one message fetched: enough for any text a person writes and the names of
/// its attachments; the rest of a huge message is never downloaded.
pub(crate) const MAX_FETCH: usize = 1024 * 1024;

/// The byte stream under a session: TCP, or TLS over TCP.
pub(crate) trait Io: AsyncRead + AsyncWrite + Unpin + Send + std::fmt::Debug {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + std::fmt::Debug> Io for T {}

type Stream = Box<dyn Io>;

/// Why the mailbox could not be used. The password is never part of a message.
#[derive(Debug, thiserror::Error)]
pub enum ImapError {
    #[error("cannot connect to the IMAP server {label}: {detail}")]
    Connect { label: String, detail: String },
    #[error(
        "TLS with the IMAP server {label} failed ({detail}); check inbox.email.security and imap_port (tls is usually 993, starttls 143)"
    )]
    Tls { label: String, detail: String },
    #[error(
        "the IMAP server {label} refused the login ({detail}); check inbox.email.username and the password (IMAP_PASSWORD in the environment)"
    )]
    Login { label: String, detail: String },
    #[error(
        "the IMAP server {label} has no mailbox '{mailbox}' ({detail}); check inbox.email.mailbox"
    )]
    Mailbox {
        label: String,
        mailbox: String,
        detail: String,
    },
    #[error("the IMAP server {label} did not answer within {secs} s")]
    Timeout { label: String, secs: u64 },
    #[error("the IMAP connection to {label} failed: {detail}")]
    Protocol { label: String, detail: String },
}

/// The mailbox as opened: its UIDVALIDITY and the UID the next message will get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Opened {
    pub uid_validity: u32,
    pub uid_next: Option<u32>,
    pub exists: u32,
}

/// How a wait for new mail ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Woken {
    /// The server said something changed (or may have): look for new mail.
    Changed,
    /// The renewal time passed: look anyway, then wait again.
    Renew,
    /// The daemon is stopping.
    Stopped,
}

/// A logged-in session with the mailbox open.
pub(crate) struct Connection {
    session: Option<Session<Stream>>,
    label: String,
    pub idle: bool,
    pub opened: Opened,
}

/// Connect, log in, and open `s.mailbox` read-only.
pub(crate) async fn open(s: &ImapSettings) -> Result<Connection, ImapError> {
    let label = s.label();
    let client = within(CONNECT_TIMEOUT, &label, connect(s, &label)).await??;
    let (mut session, caps) = match within(
        COMMAND_TIMEOUT,
        &label,
        client.login_with_capabilities(&s.username, &s.password),
    )
    .await?
    {
        Ok(ok) => ok,
        Err((e, _)) => {
            return Err(ImapError::Login {
                label,
                detail: e.to_string(),
            });
        }
    };
    let idle = match caps {
        Some(c) if c.has_str("IDLE") => true,
        _ => {
            let caps = within(COMMAND_TIMEOUT, &label, session.capabilities())
                .await?
                .map_err(|e| protocol(&label, e))?;
            caps.has_str("IDLE")
        }
    };
    let mailbox = match within(COMMAND_TIMEOUT, &label, session.examine(&s.mailbox)).await? {
        Ok(m) => m,
        Err(e) => {
            return Err(ImapError::Mailbox {
                label,
                mailbox: s.mailbox.clone(),
                detail: e.to_string(),
            });
        }
    };
    let Some(uid_validity) = mailbox.uid_validity else {
        return Err(ImapError::Protocol {
            label,
            detail:
                "the server gives the mailbox no UIDVALIDITY, so mail cannot be read exactly once"
                    .into(),
        });
    };
    Ok(Connection {
        session: Some(session),
        label,
        idle,
        opened: Opened {
            uid_validity,
            uid_next: mailbox.uid_next,
            exists: mailbox.exists,
        },
    })
}

async fn connect(s: &ImapSettings, label: &str) -> Result<Client<Stream>, ImapError> {
    let tcp = TcpStream::connect((s.imap_host.as_str(), s.imap_port))
        .await
        .map_err(|e| ImapError::Connect {
            label: label.to_string(),
            detail: e.to_string(),
        })?;
    let stream: Stream = match s.security {
        ImapSecurity::None => Box::new(tcp),
        ImapSecurity::Tls => Box::new(tls(&s.imap_host, tcp, label).await?),
        ImapSecurity::Starttls => {
            let mut plain = Client::new(tcp);
            greeting(&mut plain, label).await?;
            plain
                .run_command_and_check_ok("STARTTLS", None)
                .await
                .map_err(|e| ImapError::Tls {
                    label: label.to_string(),
                    detail: format!("STARTTLS refused: {e}"),
                })?;
            Box::new(tls(&s.imap_host, plain.into_inner(), label).await?)
        }
    };
    let mut client = Client::new(stream);
    if s.security != ImapSecurity::Starttls {
        greeting(&mut client, label).await?;
    }
    Ok(client)
}

async fn greeting<T: Io>(client: &mut Client<T>, label: &str) -> Result<(), ImapError> {
    match client.read_response().await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(protocol(label, "the server closed the connection at once")),
        Err(e) => Err(protocol(label, e)),
    }
}

async fn tls(
    host: &str,
    tcp: TcpStream,
    label: &str,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, ImapError> {
    let fail = |detail: String| ImapError::Tls {
        label: label.to_string(),
        detail,
    };
    let roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    // The provider named here, not the process default: the other crates that use rustls
    // (reqwest, lettre) leave none installed.
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| fail(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_string()).map_err(|e| fail(e.to_string()))?;
    TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| fail(hermes_store::util::error_chain(&e)))
}

fn protocol(label: &str, e: impl std::fmt::Display) -> ImapError {
    ImapError::Protocol {
        label: label.to_string(),
        detail: e.to_string(),
    }
}

/// `fut` within `bound`, or [`ImapError::Timeout`].
async fn within<F: Future>(bound: Duration, label: &str, fut: F) -> Result<F::Output, ImapError> {
    tokio::time::timeout(bound, fut)
        .await
        .map_err(|_| ImapError::Timeout {
            label: label.to_string(),
            secs: bound.as_secs(),
        })
}

impl Connection {
    fn session(&mut self) -> Result<&mut Session<Stream>, ImapError> {
        self.session
            .as_mut()
            .ok_or_else(|| protocol(&self.label, "the session was lost in IDLE"))
    }

    /// The UIDs above `after`, in order (mail that arrived since).
    pub(crate) async fn uids_after(&mut self, after: u32) -> Result<Vec<u32>, ImapError> {
        let label = self.label.clone();
        let session = self.session()?;
        // Changes noticed so far are about to be looked at: only later ones matter now.
        while session.unsolicited_responses.try_recv().is_ok() {}
        let query = format!("UID {}:*", after.saturating_add(1));
        let found = within(COMMAND_TIMEOUT, &label, session.uid_search(query))
            .await?
            .map_err(|e| protocol(&label, e))?;
        // `N:*` always matches the last message, even below N (RFC 3501 §6.4.8).
        let mut uids: Vec<u32> = found.into_iter().filter(|u| *u > after).collect();
        uids.sort_unstable();
        Ok(uids)
    }

    /// The UIDs of mail that arrived on or after `day` (`1-Dec-2026`), in order.
    pub(crate) async fn uids_since(&mut self, day: &str) -> Result<Vec<u32>, ImapError> {
        let label = self.label.clone();
        let session = self.session()?;
        let found = within(
            COMMAND_TIMEOUT,
            &label,
            session.uid_search(format!("SINCE {day}")),
        )
        .await?
        .map_err(|e| protocol(&label, e))?;
        let mut uids: Vec<u32> = found.into_iter().collect();
        uids.sort_unstable();
        Ok(uids)
    }

    /// The highest UID in the mailbox (0 when empty), for a server that sends no UIDNEXT.
    pub(crate) async fn last_uid(&mut self) -> Result<u32, ImapError> {
        if self.opened.exists == 0 {
            return Ok(0);
        }
        let label = self.label.clone();
        let session = self.session()?;
        let found = within(COMMAND_TIMEOUT, &label, session.uid_search("ALL"))
            .await?
            .map_err(|e| protocol(&label, e))?;
        Ok(found.into_iter().max().unwrap_or(0))
    }

    /// One message's bytes (at most [`MAX_FETCH`]) and its whole size; `None` when it is gone
    /// (expunged meanwhile).
    pub(super) async fn fetch(&mut self, uid: u32) -> Result<Option<(Vec<u8>, usize)>, ImapError> {
        let label = self.label.clone();
        let session = self.session()?;
        let query = format!("(UID RFC822.SIZE BODY.PEEK[]<0.{MAX_FETCH}>)");
        let fetched = within(COMMAND_TIMEOUT, &label, async {
            let stream = session.uid_fetch(uid.to_string(), query).await?;
            stream.try_collect::<Vec<_>>().await
        })
        .await?
        .map_err(|e| protocol(&label, e))?;
        let Some(f) = fetched.into_iter().find(|f| f.uid == Some(uid)) else {
            return Ok(None);
        };
        let body = f.body().map(<[u8]>::to_vec).unwrap_or_default();
        let size = f.size.map_or(body.len(), |s| s as usize);
        Ok(Some((body, size)))
    }

    /// Ask the server for news (a server without IDLE reports new mail on a command).
    pub(super) async fn noop(&mut self) -> Result<(), ImapError> {
        let label = self.label.clone();
        let session = self.session()?;
        within(COMMAND_TIMEOUT, &label, session.noop())
            .await?
            .map_err(|e| protocol(&label, e))
    }

    /// Wait in IDLE until the server reports a change, [`IDLE_RENEW`] passes, or `stop`.
    /// A change reported while IDLE was being started counts: nothing falls between the last
    /// look and the wait.
    pub(super) async fn idle(&mut self, stop: &CancellationToken) -> Result<Woken, ImapError> {
        let label = self.label.clone();
        let session = self
            .session
            .take()
            .ok_or_else(|| protocol(&label, "the session was lost in IDLE"))?;
        let news = session.unsolicited_responses.clone();
        // Whether the server reported new mail since the channel was last drained.
        let arrived = || {
            let mut any = false;
            while let Ok(r) = news.try_recv() {
                any |= matches!(
                    r,
                    UnsolicitedResponse::Exists(_) | UnsolicitedResponse::Recent(_)
                );
            }
            any
        };
        let mut handle = session.idle();
        within(COMMAND_TIMEOUT, &label, handle.init())
            .await?
            .map_err(|e| protocol(&label, e))?;
        let mut woken = if arrived() {
            Woken::Changed
        } else {
            let (wait, interrupt) = handle.wait_with_timeout(IDLE_RENEW);
            let mut interrupt = Some(interrupt);
            tokio::pin!(wait);
            let mut why = None;
            let outcome = loop {
                tokio::select! {
                    r = &mut wait => break r,
                    _ = tokio::time::sleep(IDLE_RENEW), if why.is_none() => {
                        why = Some(Woken::Renew);
                        drop(interrupt.take());
                    }
                    _ = stop.cancelled(), if why.is_none() => {
                        why = Some(Woken::Stopped);
                        drop(interrupt.take());
                    }
                }
            };
            match outcome.map_err(|e| protocol(&label, e))? {
                IdleResponse::NewData(_) => Woken::Changed,
                IdleResponse::Timeout => Woken::Renew,
                IdleResponse::ManualInterrupt => why.unwrap_or(Woken::Renew),
            }
        };
        if woken == Woken::Stopped {
            // The connection is dropped with the handle; there is nothing to finish.
            return Ok(woken);
        }
        let session = within(COMMAND_TIMEOUT, &label, handle.done())
            .await?
            .map_err(|e| protocol(&label, e))?;
        if woken == Woken::Renew && arrived() {
            woken = Woken::Changed;
        }
        self.session = Some(session);
        Ok(woken)
    }

    /// Log out politely, briefly; the connection closes either way.
    pub(super) async fn logout(mut self) {
        if let Some(mut s) = self.session.take() {
            let _ = tokio::time::timeout(LOGOUT_PATIENCE, s.logout()).await;
        }
    }
}
