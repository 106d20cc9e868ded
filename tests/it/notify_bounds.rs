//! What a hostile or broken receiver cannot do to the notifier: a webhook answering an error
//! with a body of hundreds of megabytes is read only up to a cap, and the connection dropped.

use hermes_config::{NotifySettings, WebhookSettings};
use hermes_engine::notify::Notifier;
use hermes_store::{NewNotice, NoticeState, Store};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(20);
/// What the receiver announces and tries to send.
const HUGE: u64 = 400 * 1024 * 1024;
/// More than the notifier may take in: its cap plus what loopback socket buffers absorb.
const FAR_LESS: u64 = 16 * 1024 * 1024;

/// A receiver that answers every request `500` with a body of [`HUGE`] bytes, streamed from
/// one small buffer. Its URL, the bytes it managed to send, and how its sending ended (`true`:
/// the other side hung up before the end).
async fn huge_error_receiver() -> (String, Arc<AtomicU64>, tokio::sync::oneshot::Receiver<bool>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let sent = Arc::new(AtomicU64::new(0));
    let (ended, ended_rx) = tokio::sync::oneshot::channel();
    let counter = sent.clone();
    tokio::spawn(async move {
        let Ok((mut socket, _)) = listener.accept().await else {
            return;
        };
        // The request: its head, then as many body bytes as it announced.
        let mut request = Vec::new();
        let mut buf = [0u8; 8192];
        let body_start = loop {
            let Ok(n) = socket.read(&mut buf).await else {
                return;
            };
            if n == 0 {
                return;
            }
            request.extend_from_slice(&buf[..n]);
            if let Some(i) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
        };
        let head = String::from_utf8_lossy(&request[..body_start]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while request.len() - body_start < length {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => request.extend_from_slice(&buf[..n]),
            }
        }
        let answer = format!(
            "HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\ncontent-length: {HUGE}\r\n\r\n"
        );
        if socket.write_all(answer.as_bytes()).await.is_err() {
            let _ = ended.send(true);
            return;
        }
        let chunk = vec![b'E'; 64 * 1024];
        let mut left = HUGE;
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            if socket.write_all(&chunk[..n]).await.is_err() {
                let _ = ended.send(true);
                return;
            }
            counter.fetch_add(n as u64, Ordering::SeqCst);
            left -= n as u64;
        }
        let _ = ended.send(false);
    });
    (url, sent, ended_rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_error_body_is_read_only_up_to_a_cap_and_the_connection_dropped() {
    let (url, sent, ended) = huge_error_receiver().await;
    let store = Store::open_in_memory().await.expect("store");
    let settings = NotifySettings {
        webhooks: BTreeMap::from([(
            "ops".to_string(),
            WebhookSettings {
                url,
                secret: String::new(),
            },
        )]),
        ..NotifySettings::default()
    };
    let notifier = Notifier::new(settings, store.clone()).expect("notifier");
    let id = notifier
        .enqueue(NewNotice {
            channel: "ops".into(),
            title: "t".into(),
            body: "b".into(),
            ..Default::default()
        })
        .await
        .expect("queued");
    let delivered = tokio::time::timeout(WAIT, notifier.deliver_due())
        .await
        .expect("the attempt ends without reading the whole body");
    assert_eq!(delivered, 0);
    let hung_up = tokio::time::timeout(WAIT, ended)
        .await
        .expect("the receiver stops sending")
        .expect("the receiver reports");
    let sent = sent.load(Ordering::SeqCst);
    assert!(hung_up, "the notifier read all {sent} bytes");
    assert!(sent < FAR_LESS, "the receiver got {sent} bytes out");
    let notice = store
        .outbox()
        .get(id)
        .await
        .expect("readable")
        .expect("stored");
    assert_eq!(notice.state, NoticeState::Pending, "a 500 is retried");
    let error = notice.last_error.unwrap_or_default();
    assert!(
        error.contains("HTTP 500") && error.contains("EEEE"),
        "{error}"
    );
    assert!(error.len() < 1024, "{} bytes of error kept", error.len());
}
