//! The email channel: one SMTP transport (lettre) built from `notify.email`.
//!
//! Owns: building the transport (STARTTLS, implicit TLS, or plain for a loopback relay), the
//! multipart message (plain text + rendered HTML) addressed to every configured recipient — or,
//! for a reply, to the one recipient it names, which must be an address of the settings — with
//! its Message-ID (the notice's token inside, see `thread`) and threading headers, sending it
//! to each recipient alone when the server refuses or defers one (and remembering, in memory,
//! whom a deferred notice reached), and sorting SMTP failures into transient (4xx,
//! connection, timeout) and permanent (5xx, TLS, client-side) ones.
//! Must not: take an address from anywhere but the settings; touch the outbox.

use super::NotifyError;
use super::markdown::email_html;
use super::sender::SendError;
use super::thread;
use hermes_config::{EmailSettings, SmtpSecurity};
use hermes_store::Notice;
use hermes_store::util::lock;
use lettre::address::Envelope;
use lettre::message::{Mailbox, Mailboxes, MultiPart, header};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

/// lettre applies this to the connection only, not to the dialogue after it; the sender's
/// `notify.send_timeout_s` bounds the whole attempt.
const SMTP_TIMEOUT: Duration = Duration::from_secs(30);

pub(crate) struct EmailChannel {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    /// Per notice, the recipients it reached while another was deferred, so the retry goes to
    /// the rest only. In memory: after a restart the retry reaches all again (at least once).
    delivered: Mutex<HashMap<i64, BTreeSet<String>>>,
    from: Mailbox,
    to: Mailboxes,
    /// `host:port (security)`, for logs and `doctor`; never contains credentials.
    label: String,
    has_credentials: bool,
    /// The domain of `from`: our Message-IDs end in it.
    domain: String,
    /// The addresses a reply may go to besides `to` (`inbox.email.allow_from`), lower case.
    repliable: Vec<String>,
}

impl EmailChannel {
    pub(crate) fn new(s: &EmailSettings) -> Result<EmailChannel, NotifyError> {
        let bad = |key: &str, msg: String| NotifyError::Config {
            key: format!("notify.email.{key}"),
            message: msg,
        };
        let from: Mailbox = s
            .from
            .parse()
            .map_err(|e| bad("from", format!("'{}' is not a usable address: {e}", s.from)))?;
        if s.to.is_empty() {
            return Err(bad("to", "must list at least one recipient".into()));
        }
        let mut to = Mailboxes::new();
        for addr in &s.to {
            let mb: Mailbox = addr
                .parse()
                .map_err(|e| bad("to", format!("'{addr}' is not a usable address: {e}")))?;
            to.push(mb);
        }
        let builder = match s.security {
            SmtpSecurity::Starttls => {
                AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(&s.smtp_host)
            }
            SmtpSecurity::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(&s.smtp_host),
            SmtpSecurity::None => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(
                s.smtp_host.as_str(),
            )),
        }
        .map_err(|e| {
            bad(
                "smtp_host",
                format!("cannot set up TLS for '{}': {e}", s.smtp_host),
            )
        })?;
        let mut builder = builder.port(s.smtp_port).timeout(Some(SMTP_TIMEOUT));
        let has_credentials = !s.username.is_empty();
        if has_credentials {
            builder = builder.credentials(Credentials::new(s.username.clone(), s.password.clone()));
        }
        let security = match s.security {
            SmtpSecurity::Starttls => "starttls",
            SmtpSecurity::Tls => "tls",
            SmtpSecurity::None => "no encryption",
        };
        let domain = from.email.domain().to_string();
        let repliable = to
            .iter()
            .map(|m| m.email.to_string().to_lowercase())
            .collect();
        Ok(EmailChannel {
            transport: builder.build(),
            delivered: Mutex::default(),
            from,
            to,
            label: format!("{}:{} ({security})", s.smtp_host, s.smtp_port),
            has_credentials,
            domain,
            repliable,
        })
    }

    /// Let replies go to `addresses` as well (the inbox's allowed senders).
    pub(crate) fn allow_replies_to(&mut self, addresses: &[String]) {
        for a in addresses {
            let a = a.trim().to_lowercase();
            if !self.repliable.contains(&a) {
                self.repliable.push(a);
            }
        }
    }

    /// Who gets the notice: its one recipient (a reply), if it is an address of the settings,
    /// else every configured recipient.
    fn recipients(&self, notice: &Notice) -> Result<Mailboxes, SendError> {
        let Some(addr) = notice.queued.recipient.as_deref() else {
            return Ok(self.to.clone());
        };
        let addr = addr.trim();
        if !self.repliable.contains(&addr.to_lowercase()) {
            return Err(SendError::Permanent(format!(
                "'{addr}' is in neither notify.email.to nor inbox.email.allow_from; a notice \
                 goes only to addresses of the settings"
            )));
        }
        let mb: Mailbox = addr
            .parse()
            .map_err(|e| SendError::Permanent(format!("'{addr}' is not a usable address: {e}")))?;
        Ok(Mailboxes::new().with(mb))
    }

    pub(crate) fn label(&self) -> &str {
        &self.label
    }

    /// The message for a notice: subject = title, To = every configured recipient (or the
    /// reply's one), Message-ID = the notice's token, threaded under what it answers.
    pub(crate) fn message(&self, notice: &Notice) -> Result<Message, SendError> {
        // A title is one header line; a stray newline from the model must not split it.
        let subject = one_line(&notice.queued.title);
        let mut builder = Message::builder()
            .from(self.from.clone())
            .mailbox(header::To::from(self.recipients(notice)?));
        if let Some(token) = &notice.token {
            builder = builder.message_id(Some(format!(
                "<{}>",
                thread::message_id(token, &self.domain)
            )));
        }
        let replying = notice.queued.in_reply_to.is_some();
        if let Some(id) = &notice.queued.in_reply_to {
            builder = builder.in_reply_to(format!("<{}>", one_line(id)));
        }
        if let Some(refs) = &notice.queued.refs {
            let refs: Vec<String> = refs.split_whitespace().map(|r| format!("<{r}>")).collect();
            if !refs.is_empty() {
                builder = builder.references(refs.join(" "));
            }
        }
        // RFC 3834: mail sent by a program says so, and auto-responders do not answer it — a
        // vacation notice replying to a digest would otherwise be the start of a loop.
        let auto = if replying {
            "auto-replied"
        } else {
            "auto-generated"
        };
        builder = builder.raw_header(header::HeaderValue::new(
            header::HeaderName::new_from_ascii_str("Auto-Submitted"),
            auto.to_string(),
        ));
        builder
            .subject(subject.trim())
            .multipart(MultiPart::alternative_plain_html(
                notice.queued.body.clone(),
                email_html(subject.trim(), &notice.queued.body),
            ))
            .map_err(|e| SendError::Permanent(format!("cannot build the email: {e}")))
    }

    /// One message to every recipient at once; when the server refuses or defers a recipient
    /// (a mistyped or full mailbox), one to each of the others alone, so they still get it.
    pub(crate) async fn send(&self, notice: &Notice) -> Result<(), SendError> {
        let message = self.message(notice)?;
        let recipients = self.recipients(notice)?;
        // A retry after some recipients got it goes to the rest only.
        if !self.reached(notice.id).is_empty() {
            return self.each_alone(notice.id, &message, &recipients).await;
        }
        match self.transport.send(message.clone()).await {
            Ok(_) => Ok(()),
            Err(e) if recipients.iter().count() > 1 && refuses_a_recipient(&e) => {
                tracing::info!(notice = notice.id, error = %e, "the SMTP server would not take the email for all its recipients at once; sending it to each alone");
                self.each_alone(notice.id, &message, &recipients).await
            }
            Err(e) => Err(classify(&e, &self.label)),
        }
    }

    /// The recipients notice `id` reached already while another was deferred.
    fn reached(&self, id: i64) -> BTreeSet<String> {
        lock(&self.delivered).get(&id).cloned().unwrap_or_default()
    }

    /// `message` to each of `recipients` it has not reached, in a transaction of its own.
    /// Deferred ones make it a transient failure (the retry goes to them only); refused ones
    /// are named in the log when others got it, and are the error when none did.
    async fn each_alone(
        &self,
        id: i64,
        message: &Message,
        recipients: &Mailboxes,
    ) -> Result<(), SendError> {
        let bytes = message.formatted();
        let from = message.envelope().from().cloned();
        let done = self.reached(id);
        let mut refused = Vec::new();
        let mut deferred = Vec::new();
        for mailbox in recipients.iter() {
            let addr = mailbox.email.to_string();
            if done.contains(&addr) {
                continue;
            }
            let envelope =
                Envelope::new(from.clone(), vec![mailbox.email.clone()]).map_err(|e| {
                    SendError::Permanent(format!("cannot address the email to {addr}: {e}"))
                })?;
            match self.transport.send_raw(&envelope, &bytes).await {
                Ok(_) => {
                    lock(&self.delivered).entry(id).or_default().insert(addr);
                }
                Err(e) => match classify(&e, &self.label) {
                    SendError::Permanent(m) => refused.push(format!("{addr}: {m}")),
                    SendError::Transient(m) => deferred.push(format!("{addr}: {m}")),
                },
            }
        }
        if !deferred.is_empty() {
            return Err(SendError::Transient(format!(
                "not delivered yet to {}",
                deferred.join("; ")
            )));
        }
        let reached = lock(&self.delivered).remove(&id).map_or(0, |r| r.len());
        match (refused.is_empty(), reached) {
            (true, _) => Ok(()),
            (false, 0) => Err(SendError::Permanent(refused.join("; "))),
            (false, reached) => {
                tracing::warn!(
                    notice = id,
                    reached,
                    "email sent, but not to {}",
                    refused.join("; ")
                );
                Ok(())
            }
        }
    }

    /// Connect, negotiate TLS, authenticate and NOOP, without sending anything.
    pub(crate) async fn check(&self) -> Result<String, super::CheckError> {
        match self.transport.test_connection().await {
            Ok(true) => Ok(if self.has_credentials {
                "connected, TLS as configured, login accepted".to_string()
            } else {
                "connected (no login configured)".to_string()
            }),
            Ok(false) => Err(super::CheckError::NoNoop),
            Err(e) => Err(super::CheckError::Refused(
                classify(&e, &self.label).into_message(),
            )),
        }
    }
}

/// Whether `e` is the server refusing or deferring one recipient (a reply at RCPT: 45x, 55x),
/// rather than the connection, TLS or the login failing — which sending to each recipient
/// alone would only repeat.
fn refuses_a_recipient(e: &lettre::transport::smtp::Error) -> bool {
    let Some(code) = e.status() else {
        return false;
    };
    matches!(
        code.to_string().as_str(),
        "450" | "451" | "452" | "550" | "551" | "552" | "553"
    )
}

/// `text` with control characters (a newline from the model) turned into spaces: one header line.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// 4xx replies, connection failures and timeouts may pass; 5xx replies, TLS failures and
/// client-side errors (no common AUTH mechanism, bad address) will not without a config change.
fn classify(e: &lettre::transport::smtp::Error, label: &str) -> SendError {
    let code = e.status().map(|c| c.to_string());
    if e.is_permanent() {
        let code = code.unwrap_or_default();
        if code == "535" || code == "534" || code == "530" {
            return SendError::Permanent(format!(
                "SMTP server {label} rejected the login ({e}); check notify.email.username and the \
                 password (SMTP_PASSWORD in the environment)"
            ));
        }
        return SendError::Permanent(format!("SMTP server {label} refused: {e}"));
    }
    if e.is_transient() {
        return SendError::Transient(format!("SMTP server {label} deferred: {e}"));
    }
    if e.is_tls() {
        return SendError::Permanent(format!(
            "TLS with SMTP server {label} failed ({}); check notify.email.security and smtp_port \
             (starttls is usually port 587, tls port 465)",
            hermes_store::util::error_chain(e)
        ));
    }
    if e.is_client() {
        return SendError::Permanent(format!(
            "cannot talk to SMTP server {label}: {}; check notify.email",
            hermes_store::util::error_chain(e)
        ));
    }
    // Connection, network, timeout, a garbled reply: the relay may be back later.
    SendError::Transient(format!(
        "cannot reach SMTP server {label}: {}",
        hermes_store::util::error_chain(e)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_store::{NewNotice, NoticeState};

    fn settings() -> EmailSettings {
        EmailSettings {
            smtp_host: "127.0.0.1".into(),
            smtp_port: 2525,
            security: SmtpSecurity::None,
            from: "Hermes <hermes@example.com>".into(),
            to: vec!["a@example.com".into(), "b@example.org".into()],
            ..EmailSettings::default()
        }
    }

    fn notice(title: &str) -> Notice {
        let t = chrono::Utc::now();
        Notice {
            id: 1,
            queued: NewNotice {
                channel: "email".into(),
                title: title.into(),
                body: "# Hi\n\n- one".into(),
                ..NewNotice::default()
            },
            state: NoticeState::Pending,
            attempts: 0,
            last_error: None,
            next_attempt_at: t,
            created_at: t,
            sent_at: None,
            token: None,
        }
    }

    #[test]
    fn message_goes_to_every_recipient_with_both_parts() {
        let ch = EmailChannel::new(&settings()).unwrap();
        let msg = ch.message(&notice("Daily digest — 2026-11-30")).unwrap();
        let to: Vec<String> = msg.envelope().to().iter().map(|a| a.to_string()).collect();
        assert_eq!(to, ["a@example.com", "b@example.org"]);
        let raw = String::from_utf8(msg.formatted()).unwrap();
        assert!(raw.contains("multipart/alternative"), "{raw}");
        assert!(raw.contains("text/plain"), "{raw}");
        assert!(raw.contains("text/html"), "{raw}");
    }

    #[test]
    fn a_newline_in_the_title_cannot_add_a_header() {
        let ch = EmailChannel::new(&settings()).unwrap();
        let msg = ch.message(&notice("Hi\r\nBcc: evil@example.net")).unwrap();
        let raw = String::from_utf8(msg.formatted()).unwrap();
        assert!(!raw.contains("\r\nBcc:"), "{raw}");
        assert!(
            msg.envelope()
                .to()
                .iter()
                .all(|a| a.domain() != "example.net")
        );
    }

    #[test]
    fn a_notice_carries_its_token_in_its_message_id_and_says_a_program_sent_it() {
        let ch = EmailChannel::new(&settings()).unwrap();
        let mut n = notice("Daily digest");
        n.token = Some("0123456789abcdef0123456789abcdef".into());
        let raw = String::from_utf8(ch.message(&n).unwrap().formatted()).unwrap();
        assert!(
            raw.contains("Message-ID: <hermes.0123456789abcdef0123456789abcdef@example.com>"),
            "{raw}"
        );
        assert!(raw.contains("Auto-Submitted: auto-generated"), "{raw}");
        assert!(!raw.contains("In-Reply-To"), "{raw}");
    }

    #[test]
    fn a_reply_goes_to_its_one_allowed_recipient_threaded() {
        let mut ch = EmailChannel::new(&settings()).unwrap();
        ch.allow_replies_to(&["Me@Example.net".to_string()]);
        let mut n = notice("Re: Daily digest");
        n.queued.recipient = Some("me@example.net".into());
        n.queued.in_reply_to = Some("m1@example.net".into());
        n.queued.refs = Some("d1@example.com m1@example.net".into());
        let msg = ch.message(&n).unwrap();
        let to: Vec<String> = msg.envelope().to().iter().map(|a| a.to_string()).collect();
        assert_eq!(to, ["me@example.net"]);
        let raw = String::from_utf8(msg.formatted()).unwrap();
        assert!(raw.contains("In-Reply-To: <m1@example.net>"), "{raw}");
        assert!(
            raw.contains("References: <d1@example.com> <m1@example.net>"),
            "{raw}"
        );
        assert!(raw.contains("Auto-Submitted: auto-replied"), "{raw}");
        assert!(raw.contains("multipart/alternative"), "{raw}");

        // An address from anywhere but the settings is refused, never sent to.
        n.queued.recipient = Some("attacker@example.org".into());
        match ch.message(&n) {
            Err(SendError::Permanent(why)) => {
                assert!(why.contains("inbox.email.allow_from"), "{why}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_bad_recipient_is_a_config_error_naming_the_key() {
        let mut s = settings();
        s.to.push("not an address".into());
        let err = EmailChannel::new(&s).err().unwrap().to_string();
        assert!(err.contains("notify.email.to"), "{err}");
    }
}
