//! The SMTP server the daemon sends its notices and replies to: mailin-embedded on a loopback
//! port, each message parsed (mail-parser) as it arrives.

use mailin_embedded::{Handler, Response, response};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One message as received: the envelope's recipients and the raw message.
#[derive(Debug, Clone)]
pub struct Sent {
    pub rcpt: Vec<String>,
    pub raw: String,
}

impl Sent {
    pub fn header(&self, name: &str) -> Option<String> {
        let msg = mail_parser::MessageParser::default().parse(self.raw.as_bytes())?;
        msg.header_raw(name)
            .map(|v| v.split_whitespace().collect::<Vec<_>>().join(" "))
    }

    pub fn message_id(&self) -> String {
        let msg = mail_parser::MessageParser::default()
            .parse(self.raw.as_bytes())
            .expect("a parsable mail");
        msg.message_id().expect("a Message-ID").to_string()
    }

    /// The subject, decoded.
    pub fn subject(&self) -> String {
        mail_parser::MessageParser::default()
            .parse(self.raw.as_bytes())
            .and_then(|m| m.subject().map(str::to_string))
            .unwrap_or_default()
    }

    /// The text part.
    pub fn text(&self) -> String {
        let msg = mail_parser::MessageParser::default()
            .parse(self.raw.as_bytes())
            .expect("a parsable mail");
        msg.body_text(0).map(|b| b.into_owned()).unwrap_or_default()
    }
}

#[derive(Clone)]
struct Capture {
    sink: Arc<Mutex<Vec<Sent>>>,
    current: Option<Sent>,
}

impl Handler for Capture {
    fn data_start(&mut self, _domain: &str, _from: &str, _is8bit: bool, to: &[String]) -> Response {
        self.current = Some(Sent {
            rcpt: to.to_vec(),
            raw: String::new(),
        });
        response::OK
    }

    fn data(&mut self, buf: &[u8]) -> std::io::Result<()> {
        if let Some(m) = &mut self.current {
            m.raw.push_str(&String::from_utf8_lossy(buf));
        }
        Ok(())
    }

    fn data_end(&mut self) -> Response {
        if let Some(m) = self.current.take()
            && let Ok(mut all) = self.sink.lock()
        {
            all.push(m);
        }
        response::OK
    }
}

/// The server: its address and everything it received.
pub struct Smtp {
    pub addr: SocketAddr,
    sink: Arc<Mutex<Vec<Sent>>>,
}

impl Smtp {
    /// On its own thread (mailin's error type is not Send); it lives as long as the process
    /// and only ever serves loopback.
    pub fn start() -> Smtp {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind smtp");
        let addr = listener.local_addr().expect("smtp addr");
        let sink: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let handler = Capture {
            sink: sink.clone(),
            current: None,
        };
        std::thread::spawn(move || {
            let mut server = mailin_embedded::Server::new(handler);
            server.with_name("smtp.test").with_tcp_listener(listener);
            let _ = server.serve();
        });
        Smtp { addr, sink }
    }

    pub fn all(&self) -> Vec<Sent> {
        self.sink.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// Wait (bounded) for a received message matching `pred`.
    pub async fn wait_for(&self, what: &str, pred: impl Fn(&Sent) -> bool) -> Sent {
        let deadline = Instant::now() + super::PATIENCE;
        loop {
            if let Some(m) = self.all().into_iter().find(|m| pred(m)) {
                return m;
            }
            assert!(
                Instant::now() < deadline,
                "no mail {what} within {:?}; received: {:#?}",
                super::PATIENCE,
                self.all().iter().map(|m| m.subject()).collect::<Vec<_>>()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}
