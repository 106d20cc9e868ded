//! Notifier tests against real servers on loopback: an SMTP server (mailin-embedded, or a
//! mailin session loop where AUTH over plain TCP is needed) and webhook receivers (axum).
//! Retry delays are milliseconds and passes are driven with `deliver_due`; every wait is
//! bounded and ends on an event.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use base64::Engine;
use hermes_config::{EmailSettings, NotifySettings, SmtpSecurity, WebhookSettings};
use hermes_engine::notify::{Notifier, NotifyError};
use hermes_engine::tools::builtin::notify::tools;
use hermes_engine::tools::{ToolContext, ToolError};
use hermes_store::Origin;
use hermes_store::util::Backoff;
use hermes_store::util::RetryPolicy;
use hermes_store::{NewNotice, NewTask, NoticeState, Store};
use hmac::{Hmac, KeyInit, Mac};
use mailin_embedded::{AuthMechanism, Handler, Response, response};
use serde_json::{Value, json};
use sha2::Sha256;
use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// SMTP server

/// One message as the SMTP server received it.
#[derive(Debug, Clone)]
struct Mail {
    from: String,
    rcpt: Vec<String>,
    data: String,
}

/// Captures each message into a channel; accepts one username/password when AUTH is on.
#[derive(Clone)]
struct Capture {
    tx: UnboundedSender<Mail>,
    current: Option<Mail>,
    login: Option<(String, String)>,
    auth_attempts: Arc<AtomicUsize>,
    /// A recipient refused at RCPT (550), as for a mailbox that does not exist.
    refuse: Option<String>,
}

impl Capture {
    fn check_login(&self, user: &str, password: &str) -> Response {
        self.auth_attempts.fetch_add(1, Ordering::SeqCst);
        match &self.login {
            Some((u, p)) if u == user && p == password => response::AUTH_OK,
            _ => response::INVALID_CREDENTIALS,
        }
    }
}

impl Handler for Capture {
    fn rcpt(&mut self, to: &str) -> Response {
        if self.refuse.as_deref() == Some(to) {
            response::NO_MAILBOX
        } else {
            response::OK
        }
    }

    fn data_start(&mut self, _domain: &str, from: &str, _is8bit: bool, to: &[String]) -> Response {
        self.current = Some(Mail {
            from: from.to_string(),
            rcpt: to.to_vec(),
            data: String::new(),
        });
        response::OK
    }

    fn data(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if let Some(mail) = &mut self.current {
            mail.data.push_str(&String::from_utf8_lossy(buf));
        }
        Ok(())
    }

    fn data_end(&mut self) -> Response {
        if let Some(mail) = self.current.take() {
            let _ = self.tx.send(mail);
        }
        response::OK
    }

    fn auth_plain(&mut self, _authz: &str, user: &str, password: &str) -> Response {
        self.check_login(user, password)
    }

    fn auth_login(&mut self, user: &str, password: &str) -> Response {
        self.check_login(user, password)
    }
}

struct Smtp {
    addr: SocketAddr,
    mail: UnboundedReceiver<Mail>,
    auth_attempts: Arc<AtomicUsize>,
}

fn capture() -> (Capture, UnboundedReceiver<Mail>, Arc<AtomicUsize>) {
    let (tx, rx) = unbounded_channel();
    let attempts = Arc::new(AtomicUsize::new(0));
    let handler = Capture {
        tx,
        current: None,
        login: None,
        auth_attempts: attempts.clone(),
        refuse: None,
    };
    (handler, rx, attempts)
}

/// mailin-embedded on `listener`, on its own thread (its error type is not Send). The thread
/// lives as long as the test process; it only ever serves loopback.
fn start_smtp_on(listener: TcpListener) -> Smtp {
    start_smtp_refusing(listener, None)
}

/// [`start_smtp_on`], refusing `refuse` at RCPT.
fn start_smtp_refusing(listener: TcpListener, refuse: Option<&str>) -> Smtp {
    let addr = listener.local_addr().unwrap();
    let (mut handler, mail, auth_attempts) = capture();
    handler.refuse = refuse.map(str::to_string);
    std::thread::spawn(move || {
        let mut server = mailin_embedded::Server::new(handler);
        server.with_name("test.local").with_tcp_listener(listener);
        let _ = server.serve();
    });
    Smtp {
        addr,
        mail,
        auth_attempts,
    }
}

fn start_smtp() -> Smtp {
    start_smtp_on(TcpListener::bind("127.0.0.1:0").unwrap())
}

/// An SMTP server that offers AUTH PLAIN/LOGIN on a plain connection. mailin-embedded offers
/// AUTH only after STARTTLS, and a test certificate would not be trusted by the notifier
/// (which uses the public roots, as it must); mailin's session does allow plaintext AUTH, so
/// this drives mailin sessions over loopback TCP, one thread per connection.
fn start_auth_smtp(user: &str, password: &str) -> Smtp {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (mut handler, mail, auth_attempts) = capture();
    handler.login = Some((user.to_string(), password.to_string()));
    let mut builder = mailin::SessionBuilder::new("test.local");
    builder
        .enable_auth(AuthMechanism::Plain)
        .enable_auth(AuthMechanism::Login)
        .insecure_enable_plaintext_auth();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut session = builder.build(IpAddr::from([127, 0, 0, 1]), handler.clone());
            std::thread::spawn(move || {
                let Ok(mut writer) = stream.try_clone() else {
                    return;
                };
                let mut reader = BufReader::new(stream);
                if session.greeting().write_to(&mut writer).is_err() {
                    return;
                }
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    let res = session.process(&line);
                    match res.action {
                        mailin::Action::NoReply => continue,
                        mailin::Action::Reply => {
                            if res.write_to(&mut writer).is_err() {
                                return;
                            }
                        }
                        mailin::Action::Close | mailin::Action::UpgradeTls => {
                            let _ = res.write_to(&mut writer);
                            let _ = writer.flush();
                            return;
                        }
                    }
                    let _ = writer.flush();
                }
            });
        }
    });
    Smtp {
        addr,
        mail,
        auth_attempts,
    }
}

fn email_settings(addr: SocketAddr, to: &[&str]) -> EmailSettings {
    EmailSettings {
        smtp_host: addr.ip().to_string(),
        smtp_port: addr.port(),
        security: SmtpSecurity::None,
        username: String::new(),
        password: String::new(),
        from: "Hermes <hermes@example.com>".into(),
        to: to.iter().map(|s| s.to_string()).collect(),
    }
}

async fn next_mail(rx: &mut UnboundedReceiver<Mail>) -> Mail {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("no mail within the timeout")
        .expect("SMTP server gone")
}

// A little MIME reading, enough to see what a mail client would show.

/// The value of a header in a header block (first match, unfolded).
fn header(block: &str, name: &str) -> Option<String> {
    let mut lines = block.split("\r\n").peekable();
    while let Some(line) = lines.next() {
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case(name)
        {
            let mut value = v.trim().to_string();
            while let Some(next) = lines.peek() {
                if next.starts_with(' ') || next.starts_with('\t') {
                    value.push(' ');
                    value.push_str(next.trim());
                    lines.next();
                } else {
                    break;
                }
            }
            return Some(value);
        }
    }
    None
}

/// Decode RFC 2047 encoded words (`=?utf-8?b?…?=` / `?q?`), as lettre writes a non-ASCII
/// subject. Space between two encoded words is dropped; any other space is kept.
fn decode_words(value: &str) -> String {
    let mut out: Vec<u8> = Vec::new();
    let mut prev_encoded = false;
    for (i, word) in value.split(' ').enumerate() {
        let parts: Vec<&str> = word.split('?').collect();
        let encoded = parts.len() == 5 && parts[0] == "=" && parts[4] == "=";
        if i > 0 && !(encoded && prev_encoded) {
            out.push(b' ');
        }
        if encoded {
            out.extend(match parts[2].to_ascii_lowercase().as_str() {
                "b" => base64::engine::general_purpose::STANDARD
                    .decode(parts[3])
                    .unwrap(),
                _ => quoted_printable::decode(
                    parts[3].replace('_', " "),
                    quoted_printable::ParseMode::Robust,
                )
                .unwrap(),
            });
        } else {
            out.extend(word.as_bytes());
        }
        prev_encoded = encoded;
    }
    String::from_utf8(out).unwrap()
}

/// The decoded body of the part with this content type.
fn part(data: &str, content_type: &str) -> String {
    let (head, _) = data.split_once("\r\n\r\n").unwrap();
    let ct = header(head, "Content-Type").unwrap();
    let boundary = ct
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))
        .unwrap()
        .trim_matches('"')
        .to_string();
    for chunk in data.split(&format!("--{boundary}")).skip(1) {
        let Some((head, body)) = chunk.split_once("\r\n\r\n") else {
            continue;
        };
        let Some(ct) = header(head, "Content-Type") else {
            continue;
        };
        if !ct.starts_with(content_type) {
            continue;
        }
        let body = body.trim_end_matches("\r\n");
        let cte = header(head, "Content-Transfer-Encoding")
            .unwrap_or_default()
            .to_ascii_lowercase();
        let decoded = match cte.as_str() {
            "base64" => base64::engine::general_purpose::STANDARD
                .decode(body.replace("\r\n", ""))
                .unwrap(),
            "quoted-printable" => {
                quoted_printable::decode(body, quoted_printable::ParseMode::Robust).unwrap()
            }
            _ => body.as_bytes().to_vec(),
        };
        return String::from_utf8(decoded).unwrap();
    }
    panic!("no {content_type} part in:\n{data}");
}

// ---------------------------------------------------------------------------------------------
// Webhook receiver

#[derive(Debug)]
struct Hit {
    headers: HeaderMap,
    body: Bytes,
}

#[derive(Clone)]
struct Receiver {
    hits: UnboundedSender<Hit>,
    /// Statuses to answer in turn; the last one repeats.
    statuses: Arc<Mutex<VecDeque<u16>>>,
}

async fn receive(
    State(r): State<Receiver>,
    headers: HeaderMap,
    body: Bytes,
) -> (StatusCode, String) {
    let status = {
        let mut q = r.statuses.lock().unwrap();
        if q.len() > 1 {
            q.pop_front().unwrap()
        } else {
            q[0]
        }
    };
    let _ = r.hits.send(Hit { headers, body });
    let status = StatusCode::from_u16(status).unwrap();
    (status, format!("receiver says {}", status.as_u16()))
}

struct Hook {
    url: String,
    hits: UnboundedReceiver<Hit>,
}

async fn start_hook(statuses: &[u16]) -> Hook {
    let (tx, hits) = unbounded_channel();
    let state = Receiver {
        hits: tx,
        statuses: Arc::new(Mutex::new(statuses.iter().copied().collect())),
    };
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Hook {
        url: format!("http://{addr}/hook"),
        hits,
    }
}

async fn next_hit(rx: &mut UnboundedReceiver<Hit>) -> Hit {
    tokio::time::timeout(WAIT, rx.recv())
        .await
        .expect("no webhook request within the timeout")
        .expect("receiver gone")
}

fn webhooks(list: &[(&str, &str, &str)]) -> NotifySettings {
    NotifySettings {
        email: None,
        webhooks: list
            .iter()
            .map(|(name, url, secret)| {
                (
                    name.to_string(),
                    WebhookSettings {
                        url: url.to_string(),
                        secret: secret.to_string(),
                    },
                )
            })
            .collect::<BTreeMap<_, _>>(),
        ..NotifySettings::default()
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers

fn fast_retry(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries: max_attempts - 1,
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(5)),
    }
}

fn notice(channel: &str, title: &str, body: &str) -> NewNotice {
    NewNotice {
        channel: channel.into(),
        title: title.into(),
        body: body.into(),
        ..NewNotice::default()
    }
}

/// Run passes until the notice leaves `pending` (retry delays are milliseconds).
async fn deliver_until_settled(n: &Notifier, store: &Store, id: i64) -> hermes_store::Notice {
    tokio::time::timeout(WAIT, async {
        loop {
            n.deliver_due().await;
            let row = store.outbox().get(id).await.unwrap().unwrap();
            if row.state != NoticeState::Pending {
                return row;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("the notice never settled")
}

const DIGEST: &str = "# Morning digest\n\n## Weather\n\n- sunny, 21 °C\n- light wind\n\n\
                      Read [the forecast](https://weather.example.com/today).\n\n\
                      ![radar](https://tracker.example/pixel.gif?u=42)\n\n\
                      <script>alert('x')</script>\n";

// ---------------------------------------------------------------------------------------------
// Email

#[tokio::test]
async fn a_digest_reaches_every_recipient_as_text_and_html() {
    let mut smtp = start_smtp();
    let store = Store::open_in_memory().await.unwrap();
    let to = ["ann@example.com", "bob@example.org", "cy@example.net"];
    let settings = NotifySettings {
        email: Some(email_settings(smtp.addr, &to)),
        webhooks: BTreeMap::new(),
        ..NotifySettings::default()
    };
    let n = Notifier::new(settings, store.clone()).unwrap();
    assert_eq!(n.channels(), ["email"]);

    let title = "Daily digest — 2026-11-30";
    let id = n.enqueue(notice("email", title, DIGEST)).await.unwrap();
    assert_eq!(
        store.outbox().get(id).await.unwrap().unwrap().state,
        NoticeState::Pending,
        "stored before any send"
    );
    assert_eq!(n.deliver_due().await, 1);

    let mail = next_mail(&mut smtp.mail).await;
    assert_eq!(mail.from, "hermes@example.com");
    let mut rcpt = mail.rcpt.clone();
    rcpt.sort();
    assert_eq!(rcpt, to, "every recipient in the envelope");
    let (head, _) = mail.data.split_once("\r\n\r\n").unwrap();
    let to_header = header(head, "To").unwrap();
    for addr in to {
        assert!(
            to_header.contains(addr),
            "{addr} missing from To: {to_header}"
        );
    }
    assert_eq!(decode_words(&header(head, "Subject").unwrap()), title);
    assert!(
        header(head, "Content-Type")
            .unwrap()
            .starts_with("multipart/alternative"),
        "{head}"
    );

    let text = part(&mail.data, "text/plain");
    assert!(text.contains("- sunny, 21 °C"), "{text}");
    let html = part(&mail.data, "text/html");
    assert!(html.contains("<h1>Morning digest</h1>"), "{html}");
    assert!(html.contains("<li>sunny, 21 °C</li>"), "{html}");
    assert!(
        html.contains(r#"<a href="https://weather.example.com/today">the forecast</a>"#),
        "{html}"
    );
    assert!(!html.contains("<script"), "raw HTML passed through: {html}");
    // A remote image would be fetched when the mail is opened (a tracking pixel): a link.
    assert!(!html.contains("<img"), "{html}");
    assert!(
        html.contains(r#"<a href="https://tracker.example/pixel.gif?u=42">image: radar</a>"#),
        "{html}"
    );
    assert!(html.contains("&lt;script&gt;"), "{html}");
    assert!(html.contains("Daily digest — 2026-11-30"), "{html}");

    // One message for all recipients, not one each.
    assert!(smtp.mail.try_recv().is_err());
    let row = store.outbox().get(id).await.unwrap().unwrap();
    assert_eq!(row.state, NoticeState::Sent);
    assert_eq!(row.attempts, 1);
    assert!(row.sent_at.is_some());
    assert_eq!(n.deliver_due().await, 0, "a sent notice is not sent again");
}

/// One recipient the server refuses (a mistyped or deleted mailbox) does not cost the others
/// the notice: they get it, and the refused address is named.
#[tokio::test]
async fn a_refused_recipient_does_not_hold_the_notice_back_from_the_others() {
    // A notice to `to` through a server that refuses gone@: its settled row, and the server.
    async fn send_to(to: &[&str]) -> (hermes_store::Notice, Smtp) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let smtp = start_smtp_refusing(listener, Some("gone@example.org"));
        let store = Store::open_in_memory().await.unwrap();
        let settings = NotifySettings {
            email: Some(email_settings(smtp.addr, to)),
            webhooks: BTreeMap::new(),
            ..NotifySettings::default()
        };
        let n = Notifier::new(settings, store.clone())
            .unwrap()
            .with_retry(fast_retry(3));
        let id = n.enqueue(notice("email", "Digest", "news")).await.unwrap();
        (deliver_until_settled(&n, &store, id).await, smtp)
    }
    let (row, mut smtp) = send_to(&["ann@example.com", "gone@example.org"]).await;
    assert_eq!(row.state, NoticeState::Sent, "{row:?}");
    let mail = next_mail(&mut smtp.mail).await;
    assert_eq!(mail.rcpt, ["ann@example.com"]);
    assert!(smtp.mail.try_recv().is_err(), "ann got it once");

    // Every recipient refused: failed, with the server's answer.
    let (row, _) = send_to(&["gone@example.org"]).await;
    assert_eq!(row.state, NoticeState::Failed, "{row:?}");
    let err = row.last_error.unwrap_or_default();
    assert!(err.contains("550"), "{err}");
}

#[tokio::test]
async fn smtp_auth_accepted() {
    let mut smtp = start_auth_smtp("hermes", "right-password");
    let store = Store::open_in_memory().await.unwrap();
    let mut email = email_settings(smtp.addr, &["ann@example.com"]);
    email.username = "hermes".into();
    email.password = "right-password".into();
    let settings = NotifySettings {
        email: Some(email),
        webhooks: BTreeMap::new(),
        ..NotifySettings::default()
    };
    let n = Notifier::new(settings, store.clone()).unwrap();

    let checks = n.check().await;
    assert_eq!(checks.len(), 1);
    assert!(checks[0].ok, "{checks:?}");
    assert!(checks[0].target.contains(&smtp.addr.port().to_string()));

    let id = n
        .enqueue(notice("email", "Logged in", "hello"))
        .await
        .unwrap();
    assert_eq!(n.deliver_due().await, 1);
    let mail = next_mail(&mut smtp.mail).await;
    assert_eq!(mail.rcpt, ["ann@example.com"]);
    assert_eq!(
        store.outbox().get(id).await.unwrap().unwrap().state,
        NoticeState::Sent
    );
    // One login for doctor's check, one for the send.
    assert_eq!(smtp.auth_attempts.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn smtp_auth_rejected_fails_once_with_a_clear_error() {
    let mut smtp = start_auth_smtp("hermes", "right-password");
    let store = Store::open_in_memory().await.unwrap();
    let mut email = email_settings(smtp.addr, &["ann@example.com"]);
    email.username = "hermes".into();
    email.password = "wrong".into();
    let settings = NotifySettings {
        email: Some(email),
        webhooks: BTreeMap::new(),
        ..NotifySettings::default()
    };
    let n = Notifier::new(settings, store.clone())
        .unwrap()
        .with_retry(fast_retry(8));

    let id = n.enqueue(notice("email", "Never", "x")).await.unwrap();
    assert_eq!(n.deliver_due().await, 0);
    let row = store.outbox().get(id).await.unwrap().unwrap();
    assert_eq!(
        row.state,
        NoticeState::Failed,
        "a refused login is not retried"
    );
    assert_eq!(row.attempts, 1);
    let err = row.last_error.unwrap();
    assert!(err.contains("535"), "{err}");
    assert!(err.contains("notify.email.username"), "{err}");
    assert!(err.contains("SMTP_PASSWORD"), "{err}");

    // No retry storm: later passes leave it alone.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(n.deliver_due().await, 0);
    assert_eq!(smtp.auth_attempts.load(Ordering::SeqCst), 1);
    assert!(smtp.mail.try_recv().is_err());

    let checks = n.check().await;
    assert!(!checks[0].ok);
    assert!(checks[0].detail.contains("SMTP_PASSWORD"), "{checks:?}");
}

#[tokio::test]
async fn smtp_down_then_up_delivers_on_a_later_pass() {
    // Reserve a free port, then leave it closed: the relay is "down".
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let store = Store::open_in_memory().await.unwrap();
    let settings = NotifySettings {
        email: Some(email_settings(
            addr,
            &["ann@example.com", "bob@example.org"],
        )),
        webhooks: BTreeMap::new(),
        ..NotifySettings::default()
    };
    let n = Notifier::new(settings, store.clone())
        .unwrap()
        .with_retry(fast_retry(5));

    let checks = n.check().await;
    assert!(!checks[0].ok, "{checks:?}");

    let id = n
        .enqueue(notice("email", "Retry me", "body"))
        .await
        .unwrap();
    assert_eq!(n.deliver_due().await, 0);
    let row = store.outbox().get(id).await.unwrap().unwrap();
    assert_eq!(
        row.state,
        NoticeState::Pending,
        "a relay that is down is retried"
    );
    assert_eq!(row.attempts, 1);
    let err = row.last_error.unwrap();
    assert!(err.contains("cannot reach SMTP server"), "{err}");
    assert!(row.next_attempt_at > row.created_at);

    let mut smtp = start_smtp_on(TcpListener::bind(addr).unwrap());
    let row = deliver_until_settled(&n, &store, id).await;
    assert_eq!(row.state, NoticeState::Sent);
    assert_eq!(row.attempts, 2);
    assert!(row.last_error.is_none());
    let mail = next_mail(&mut smtp.mail).await;
    assert_eq!(mail.rcpt.len(), 2);
}

#[tokio::test]
async fn a_relay_that_stays_down_fails_the_notice_after_max_attempts() {
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let store = Store::open_in_memory().await.unwrap();
    let settings = NotifySettings {
        email: Some(email_settings(addr, &["ann@example.com"])),
        webhooks: BTreeMap::new(),
        ..NotifySettings::default()
    };
    let n = Notifier::new(settings, store.clone())
        .unwrap()
        .with_retry(fast_retry(3));
    let id = n.enqueue(notice("email", "Doomed", "body")).await.unwrap();
    let row = deliver_until_settled(&n, &store, id).await;
    assert_eq!(row.state, NoticeState::Failed);
    assert_eq!(row.attempts, 3);
    let err = row.last_error.unwrap();
    assert!(err.starts_with("gave up after 3 attempts"), "{err}");
    assert!(err.contains("cannot reach SMTP server"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Webhooks

#[tokio::test]
async fn a_webhook_gets_a_signed_json_notice() {
    let mut hook = start_hook(&[200]).await;
    let store = Store::open_in_memory().await.unwrap();
    let task = store
        .tasks()
        .create(&NewTask {
            task: "summarise the news".into(),
            origin: Origin::Job,
            profile: "fast".into(),
            ..NewTask::default()
        })
        .await
        .unwrap();
    let secret = "s3cret-key";
    let n = Notifier::new(webhooks(&[("ops", &hook.url, secret)]), store.clone()).unwrap();
    assert_eq!(n.channels(), ["ops"]);

    let id = n
        .enqueue(NewNotice {
            task_id: Some(task.id.clone()),
            job_id: Some("job42".into()),
            ..notice("ops", "Digest", "**all** good")
        })
        .await
        .unwrap();
    assert_eq!(n.deliver_due().await, 1);
    let hit = next_hit(&mut hook.hits).await;

    let sig = hit
        .headers
        .get("x-hermes-signature")
        .expect("signature header")
        .to_str()
        .unwrap();
    let hex_sig = sig.strip_prefix("sha256=").expect("sha256= prefix");
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(&hit.body);
    mac.verify_slice(&hex::decode(hex_sig).unwrap())
        .expect("the signature verifies over the exact body");
    assert_eq!(hit.headers.get("content-type").unwrap(), "application/json");

    let body: Value = serde_json::from_slice(&hit.body).unwrap();
    assert_eq!(body["notice_id"], json!(id));
    assert_eq!(body["channel"], "ops");
    assert_eq!(body["title"], "Digest");
    assert_eq!(body["text"], "**all** good");
    assert_eq!(body["task_id"], json!(task.id));
    assert_eq!(body["job_id"], "job42");
    assert_eq!(body["state"], "pending");
    assert!(body["created_at"].is_string());
    assert!(body["sent_at"].is_string());

    let row = store.outbox().get(id).await.unwrap().unwrap();
    assert_eq!(row.state, NoticeState::Sent);
    assert_eq!(row.attempts, 1);
}

#[tokio::test]
async fn an_unsigned_webhook_has_no_signature_header() {
    let mut hook = start_hook(&[204]).await;
    let store = Store::open_in_memory().await.unwrap();
    let n = Notifier::new(webhooks(&[("plain", &hook.url, "")]), store.clone()).unwrap();
    n.enqueue(notice("plain", "t", "x")).await.unwrap();
    assert_eq!(n.deliver_due().await, 1);
    let hit = next_hit(&mut hook.hits).await;
    assert!(hit.headers.get("x-hermes-signature").is_none());
    let body: Value = serde_json::from_slice(&hit.body).unwrap();
    assert_eq!(body["task_id"], Value::Null);
    assert_eq!(body["state"], Value::Null);
}

#[tokio::test]
async fn a_webhook_answering_500_then_200_is_delivered_on_the_retry() {
    let mut hook = start_hook(&[500, 200]).await;
    let store = Store::open_in_memory().await.unwrap();
    let n = Notifier::new(webhooks(&[("ops", &hook.url, "k")]), store.clone())
        .unwrap()
        .with_retry(fast_retry(5));
    let id = n.enqueue(notice("ops", "t", "x")).await.unwrap();

    assert_eq!(n.deliver_due().await, 0);
    let row = store.outbox().get(id).await.unwrap().unwrap();
    assert_eq!(row.state, NoticeState::Pending);
    assert!(
        row.last_error.as_deref().unwrap().contains("500"),
        "{row:?}"
    );

    let row = deliver_until_settled(&n, &store, id).await;
    assert_eq!(row.state, NoticeState::Sent);
    assert_eq!(row.attempts, 2);
    let first = next_hit(&mut hook.hits).await;
    let second = next_hit(&mut hook.hits).await;
    let (a, b): (Value, Value) = (
        serde_json::from_slice(&first.body).unwrap(),
        serde_json::from_slice(&second.body).unwrap(),
    );
    assert_eq!(a["notice_id"], b["notice_id"]);
    assert!(hook.hits.try_recv().is_err());
}

#[tokio::test]
async fn a_webhook_answering_404_fails_at_once() {
    let mut hook = start_hook(&[404]).await;
    let store = Store::open_in_memory().await.unwrap();
    let n = Notifier::new(webhooks(&[("ops", &hook.url, "")]), store.clone())
        .unwrap()
        .with_retry(fast_retry(5));
    let id = n.enqueue(notice("ops", "t", "x")).await.unwrap();
    assert_eq!(n.deliver_due().await, 0);
    let row = store.outbox().get(id).await.unwrap().unwrap();
    assert_eq!(row.state, NoticeState::Failed);
    assert_eq!(row.attempts, 1);
    let err = row.last_error.unwrap();
    assert!(err.contains("404"), "{err}");
    assert!(
        err.contains("receiver says 404"),
        "body excerpt missing: {err}"
    );
    assert!(
        !err.contains("/hook"),
        "the URL path stays out of errors: {err}"
    );

    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(n.deliver_due().await, 0);
    next_hit(&mut hook.hits).await;
    assert!(hook.hits.try_recv().is_err(), "not retried");
}

#[tokio::test]
async fn check_reports_each_webhook() {
    let hook = start_hook(&[200]).await;
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let store = Store::open_in_memory().await.unwrap();
    let down_url = format!("http://{closed}/x");
    let n = Notifier::new(
        webhooks(&[("up", &hook.url, ""), ("down", &down_url, "")]),
        store,
    )
    .unwrap();
    let checks = n.check().await;
    assert_eq!(checks.len(), 2);
    let by_name = |name: &str| {
        checks
            .iter()
            .find(|c| c.target.starts_with(&format!("webhook {name} ")))
            .unwrap()
            .clone()
    };
    // HEAD on a POST-only route answers 405: an HTTP answer, so reachable.
    let up = by_name("up");
    assert!(up.ok, "{up:?}");
    assert!(up.detail.contains("405"), "{up:?}");
    let down = by_name("down");
    assert!(!down.ok, "{down:?}");
}

// ---------------------------------------------------------------------------------------------
// Channels, the tool, restarts

#[tokio::test]
async fn an_unknown_channel_is_rejected_naming_the_known_ones() {
    let smtp = start_smtp();
    let store = Store::open_in_memory().await.unwrap();
    let mut settings = webhooks(&[
        ("ops", "http://127.0.0.1:9/x", ""),
        ("chat", "http://127.0.0.1:9/y", ""),
    ]);
    settings.email = Some(email_settings(smtp.addr, &["ann@example.com"]));
    let n = Notifier::new(settings, store.clone()).unwrap();
    assert_eq!(n.channels(), ["email", "chat", "ops"]);

    let err = n.enqueue(notice("sms", "t", "x")).await.unwrap_err();
    assert!(matches!(err, NotifyError::UnknownChannel { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("'sms'"), "{msg}");
    assert!(msg.contains("email, chat, ops"), "{msg}");
    assert!(
        store
            .outbox()
            .due(None, chrono::Utc::now(), 10)
            .await
            .unwrap()
            .is_empty()
    );

    let none = Notifier::new(NotifySettings::default(), store).unwrap();
    let msg = none
        .enqueue(notice("email", "t", "x"))
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.contains("no channels are configured"), "{msg}");
}

#[tokio::test]
async fn the_notify_tool_queues_and_the_notice_is_delivered() {
    let mut hook = start_hook(&[200]).await;
    let store = Store::open_in_memory().await.unwrap();
    let task = store
        .tasks()
        .create(&NewTask {
            task: "check the site".into(),
            origin: Origin::Job,
            profile: "fast".into(),
            job_id: None,
            ..NewTask::default()
        })
        .await
        .unwrap();
    let n = Notifier::new(webhooks(&[("ops", &hook.url, "")]), store.clone()).unwrap();
    assert!(tools(Notifier::new(NotifySettings::default(), store.clone()).unwrap()).is_empty());
    let list = tools(n.clone());
    assert_eq!(list.len(), 1);
    let tool = &list[0];
    assert_eq!(tool.info().name, "notify");
    assert!(
        tool.info().description.contains("ops"),
        "{}",
        tool.info().description
    );
    assert_eq!(
        tool.info().parameters["properties"]["channel"]["enum"],
        json!(["ops"])
    );

    let ctx = ToolContext {
        task_id: task.id.clone(),
        origin: Origin::Job,
        job_id: Some("job7".into()),
        ..ToolContext::default()
    };
    let out = tool
        .call(
            json!({"channel": "ops", "title": "Site changed", "text": "The price dropped."}),
            &ctx,
        )
        .await
        .unwrap();
    assert_eq!(out["queued"], true);
    assert_eq!(out["channel"], "ops");
    let id = out["notice_id"].as_i64().unwrap();
    let queued = store.outbox().for_task(&task.id).await.unwrap();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].id, id);
    assert_eq!(queued[0].queued.job_id.as_deref(), Some("job7"));

    assert_eq!(n.deliver_due().await, 1);
    let body: Value = serde_json::from_slice(&next_hit(&mut hook.hits).await.body).unwrap();
    assert_eq!(body["title"], "Site changed");
    assert_eq!(body["task_id"], json!(task.id));
    assert_eq!(body["job_id"], "job7");

    let err = tool
        .call(
            json!({"channel": "bob@evil.example", "title": "t", "text": "x"}),
            &ctx,
        )
        .await
        .unwrap_err();
    match err {
        ToolError::Failed(msg) => assert!(msg.contains("configured channels: ops"), "{msg}"),
        other => panic!("expected Failed, got {other:?}"),
    }
    let long_title = "x".repeat(201);
    let err = tool
        .call(
            json!({"channel": "ops", "title": long_title, "text": "x"}),
            &ctx,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(_)), "{err:?}");
    let err = tool
        .call(
            json!({"channel": "ops", "title": "t", "text": "y".repeat(20_001)}),
            &ctx,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, ToolError::InvalidArguments(_)), "{err:?}");
    assert_eq!(store.outbox().for_task(&task.id).await.unwrap().len(), 1);
}

#[tokio::test]
async fn pending_notices_survive_a_restart_and_run_sends_them() {
    let mut hook = start_hook(&[200]).await;
    let dir = tempfile::tempdir().unwrap();
    let settings = webhooks(&[("ops", &hook.url, "")]);

    let store = Store::open(dir.path()).await.unwrap();
    let n = Notifier::new(settings.clone(), store.clone()).unwrap();
    let first = n
        .enqueue(notice("ops", "before restart", "x"))
        .await
        .unwrap();
    drop(n);
    store.close().await;

    // A new process: the notice is still a pending row, and `run` sends it.
    let store = Store::open(dir.path()).await.unwrap();
    assert_eq!(
        store.outbox().get(first).await.unwrap().unwrap().state,
        NoticeState::Pending
    );
    let n = Notifier::new(settings, store.clone()).unwrap();
    let cancel = CancellationToken::new();
    let sender = tokio::spawn({
        let n = n.clone();
        let cancel = cancel.clone();
        async move { n.run(cancel).await }
    });
    let hit: Value = serde_json::from_slice(&next_hit(&mut hook.hits).await.body).unwrap();
    assert_eq!(hit["notice_id"], json!(first));
    assert_eq!(hit["title"], "before restart");

    // While running, a new notice wakes the sender (no 60 s idle poll to wait out).
    let second = n
        .enqueue(notice("ops", "while running", "y"))
        .await
        .unwrap();
    let hit: Value = serde_json::from_slice(&next_hit(&mut hook.hits).await.body).unwrap();
    assert_eq!(hit["notice_id"], json!(second));

    cancel.cancel();
    tokio::time::timeout(WAIT, sender)
        .await
        .expect("run stops when cancelled")
        .unwrap();
    for id in [first, second] {
        assert_eq!(
            store.outbox().get(id).await.unwrap().unwrap().state,
            NoticeState::Sent
        );
    }
}

#[tokio::test]
async fn a_notice_for_a_channel_removed_from_the_config_fails_visibly() {
    let store = Store::open_in_memory().await.unwrap();
    let id = store
        .outbox()
        .enqueue(&notice("old-hook", "t", "x"))
        .await
        .unwrap();
    // Waiting for its retry when the channel went: it fails now, not "pending" for good.
    let later = chrono::Utc::now() + chrono::Duration::hours(1);
    store
        .outbox()
        .mark_attempt_failed(id, "500 from the hook", Some(later))
        .await
        .unwrap();
    let n = Notifier::new(
        webhooks(&[("ops", "http://127.0.0.1:9/x", "")]),
        store.clone(),
    )
    .unwrap();
    assert_eq!(n.deliver_due().await, 0);
    let row = store.outbox().get(id).await.unwrap().unwrap();
    assert_eq!(row.state, NoticeState::Failed);
    let err = row.last_error.unwrap();
    assert!(err.contains("'old-hook' is no longer configured"), "{err}");
    assert!(err.contains("ops"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// A stalled SMTP server: accepts, greets, answers EHLO, then never says another word.

async fn start_stalled_smtp() -> SocketAddr {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader as TokioBufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            let (read, mut write) = socket.into_split();
            let _ = write.write_all(b"220 stall.example ESMTP\r\n").await;
            let mut lines = TokioBufReader::new(read).lines();
            if let Ok(Some(_ehlo)) = lines.next_line().await {
                let _ = write.write_all(b"250-stall.example\r\n250 OK\r\n").await;
            }
            // Keep both halves open and say nothing more.
            held.push((lines, write));
        }
    });
    addr
}

#[tokio::test]
async fn a_stalled_smtp_server_never_delays_a_webhook() {
    let smtp = start_stalled_smtp().await;
    let mut hook = start_hook(&[200]).await;
    let store = Store::open_in_memory().await.unwrap();
    let mut settings = webhooks(&[("ops", &hook.url, "")]);
    settings.email = Some(email_settings(smtp, &["me@example.com"]));
    let n = Notifier::new(settings, store.clone()).unwrap();
    let stop = CancellationToken::new();
    let sender = tokio::spawn({
        let n = n.clone();
        let stop = stop.clone();
        async move { n.run(stop).await }
    });
    // The email first: a sender that delivers one notice at a time would sit on it.
    let mail = n.enqueue(notice("email", "Digest", "x")).await.unwrap();
    let hook_id = n.enqueue(notice("ops", "Digest", "x")).await.unwrap();
    next_hit(&mut hook.hits).await;
    tokio::time::timeout(WAIT, async {
        while store.outbox().get(hook_id).await.unwrap().unwrap().state != NoticeState::Sent {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the webhook notice is recorded sent while the email is stuck");
    let stuck = store.outbox().get(mail).await.unwrap().unwrap();
    assert_eq!((stuck.state, stuck.attempts), (NoticeState::Pending, 0));
    // Stopping does not wait out the stuck send; the email stays queued for the next start.
    stop.cancel();
    tokio::time::timeout(WAIT, sender)
        .await
        .expect("the sender stops at once")
        .expect("joined");
    let kept = store.outbox().get(mail).await.unwrap().unwrap();
    assert_eq!((kept.state, kept.attempts), (NoticeState::Pending, 0));
}

#[tokio::test]
async fn a_stalled_smtp_server_is_a_temporary_failure_after_the_send_deadline() {
    let smtp = start_stalled_smtp().await;
    let store = Store::open_in_memory().await.unwrap();
    let settings = NotifySettings {
        email: Some(email_settings(smtp, &["me@example.com"])),
        send_timeout_s: 1,
        ..NotifySettings::default()
    };
    let n = Notifier::new(settings, store.clone()).unwrap();
    let id = n.enqueue(notice("email", "Digest", "x")).await.unwrap();
    let sent = tokio::time::timeout(WAIT, n.deliver_due())
        .await
        .expect("the attempt ends at its deadline");
    assert_eq!(sent, 0);
    let row = store.outbox().get(id).await.unwrap().unwrap();
    assert_eq!(row.state, NoticeState::Pending, "retried later, not failed");
    assert_eq!(row.attempts, 1);
    let err = row.last_error.unwrap_or_default();
    assert!(
        err.contains("1 s") && err.contains("notify.send_timeout_s"),
        "{err}"
    );
    assert!(row.next_attempt_at > chrono::Utc::now(), "backed off");
}

#[tokio::test]
async fn a_slow_webhook_receiver_is_waited_for_up_to_the_send_deadline_and_gets_it_once() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    // A receiver that takes 11 s to answer: longer than a fixed 10 s cut, well within
    // notify.send_timeout_s (60 s by default).
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let _ = conn.read(&mut buf).await;
                tokio::time::sleep(Duration::from_secs(11)).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    let store = Store::open_in_memory().await.unwrap();
    let n = Notifier::new(webhooks(&[("slow", &url, "")]), store.clone()).unwrap();
    let id = n.enqueue(notice("slow", "Digest", "x")).await.unwrap();
    let sent = tokio::time::timeout(Duration::from_secs(30), n.deliver_due())
        .await
        .expect("the attempt ends");
    let row = store.outbox().get(id).await.unwrap().unwrap();
    assert_eq!(sent, 1, "{row:?}");
    assert_eq!((row.state, row.attempts), (NoticeState::Sent, 1));
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn deliveries_and_failed_attempts_are_counted_by_channel_and_kind() {
    use hermes_engine::metrics::{Metrics, Reading};
    // `flaky` fails once then takes the notice; `gone` refuses for good; `down` never answers
    // well, so its notice is given up after two attempts.
    let flaky = start_hook(&[500, 200]).await;
    let gone = start_hook(&[404]).await;
    let down = start_hook(&[503, 503]).await;
    let store = Store::open_in_memory().await.unwrap();
    let metrics = Metrics::default();
    let settings = webhooks(&[
        ("flaky", &flaky.url, ""),
        ("gone", &gone.url, ""),
        ("down", &down.url, ""),
    ]);
    let n = Notifier::new(settings, store.clone())
        .unwrap()
        .with_retry(fast_retry(2))
        .with_metrics(metrics.clone());
    for channel in ["flaky", "gone", "down"] {
        let id = n.enqueue(notice(channel, "t", "x")).await.unwrap();
        deliver_until_settled(&n, &store, id).await;
    }
    let text = metrics.render(&Reading::default());
    let at = |series: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .unwrap_or_else(|| panic!("no {series}:\n{text}"))
            .to_string()
    };
    let failures = "hermes_outbox_delivery_failures_total";
    assert_eq!(at("hermes_outbox_sent_total{channel=\"flaky\"}"), "1");
    assert_eq!(
        at(&format!("{failures}{{channel=\"flaky\",kind=\"retry\"}}")),
        "1"
    );
    assert_eq!(
        at(&format!(
            "{failures}{{channel=\"gone\",kind=\"permanent\"}}"
        )),
        "1"
    );
    assert_eq!(
        at(&format!("{failures}{{channel=\"down\",kind=\"retry\"}}")),
        "1"
    );
    assert_eq!(
        at(&format!("{failures}{{channel=\"down\",kind=\"gave_up\"}}")),
        "1"
    );
    assert!(
        !text.contains("outbox_sent_total{channel=\"gone\""),
        "{text}"
    );
}
