//! The API on a real socket, byte by byte: what the server does with connections that idle,
//! stall half-way through a head, crowd past the connection cap, or send what hyper refuses
//! before any handler runs — each answered with the API's JSON error, or closed.

use super::{PATIENCE, api};
use hermes_surfaces::http::{ApiState, Limits};
use serde_json::Value;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Short limits, so a test waits fractions of a second for a timeout.
pub(super) const QUICK: Limits = Limits {
    header_timeout: Duration::from_millis(300),
    idle_timeout: Duration::from_millis(600),
    max_connections: 64,
};

/// Serve the app of `a` with `limits` on a fresh loopback port.
async fn serve(a: &super::Api, limits: Limits) -> SocketAddr {
    serve_state(ApiState::new(&a.t.app), limits).await
}

/// Serve `state` with `limits` on a fresh loopback port, until the test ends.
pub(super) async fn serve_state(state: ApiState, limits: Limits) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(hermes_surfaces::http::serve(
        listener,
        state,
        limits,
        std::future::pending(),
    ));
    addr
}

/// One response read off a kept-alive connection: its head and its body (by Content-Length).
async fn response(s: &mut TcpStream) -> (String, String) {
    let mut buf = Vec::new();
    let read = async {
        loop {
            if let Some(end) = find(&buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]);
                    return (
                        String::from_utf8_lossy(&buf[..end]).into_owned(),
                        body.into(),
                    );
                }
            }
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await.expect("read");
            assert!(
                n > 0,
                "closed before a whole response: {}",
                super::common::text(&buf)
            );
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(PATIENCE, read)
        .await
        .expect("a response in time")
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Everything the server sends until it closes the connection; panics if it does not close
/// within `within`.
async fn until_closed(s: &mut TcpStream, within: Duration) -> String {
    let mut out = Vec::new();
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(within, read)
        .await
        .unwrap_or_else(|_| panic!("the connection was still open after {within:?}"));
    String::from_utf8_lossy(&out).into_owned()
}

/// The JSON error of a whole answer (head and body), with its status line.
fn json_error(answer: &str) -> (String, Value) {
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let status = head.lines().next().unwrap_or("").to_string();
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{answer}"
    );
    let v: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {answer:?}"));
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty())
    );
    (status, v)
}

const HEALTH: &[u8] = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_silent_connections_are_closed_after_their_timeouts() {
    let a = api("").await;
    let addr = serve(&a, QUICK).await;

    // A kept-alive connection: served, then closed once idle past the idle timeout (and not
    // at the shorter header timeout: waiting between requests is not a slow head).
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(HEALTH).await.expect("write");
    let (head, _) = response(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let idle = Instant::now();
    assert_eq!(until_closed(&mut s, PATIENCE).await, "");
    let waited = idle.elapsed();
    assert!(
        waited >= QUICK.header_timeout + Duration::from_millis(100),
        "closed after {waited:?}, before the idle timeout"
    );

    // A connection that never sends a byte is closed after the header timeout, silently.
    let mut s = TcpStream::connect(addr).await.expect("connect");
    assert_eq!(until_closed(&mut s, PATIENCE).await, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_head_gets_a_json_408_and_the_connection_closes() {
    let a = api("").await;
    let addr = serve(&a, QUICK).await;
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: ")
        .await
        .expect("write");
    let answer = until_closed(&mut s, PATIENCE).await;
    let (status, v) = json_error(&answer);
    assert!(status.starts_with("HTTP/1.1 408"), "{answer}");
    assert_eq!(v["error"]["code"], "timeout");

    // A head trickled a byte at a time is as slow as a stalled one.
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let started = Instant::now();
    let mut answer = String::new();
    for b in b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-slow: yes\r\n".repeat(100) {
        if s.write_all(&[b]).await.is_err() {
            break;
        }
        let mut one = [0u8; 512];
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(20), s.read(&mut one)).await {
            answer.push_str(&String::from_utf8_lossy(&one[..n]));
            break;
        }
        assert!(started.elapsed() < PATIENCE, "never refused");
    }
    answer.push_str(&until_closed(&mut s, PATIENCE).await);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_connection_cap_a_client_waits_until_one_closes() {
    let a = api("").await;
    let limits = Limits {
        header_timeout: PATIENCE * 2,
        idle_timeout: PATIENCE * 2,
        max_connections: 4,
    };
    let addr = serve(&a, limits).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(HEALTH).await.expect("write");
        let (head, _) = response(&mut s).await;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        held.push(s);
    }
    // The fifth is not served while four are open...
    let mut fifth = TcpStream::connect(addr).await.expect("connect");
    fifth.write_all(HEALTH).await.expect("write");
    let mut first = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(500), fifth.peek(&mut first)).await;
    assert!(early.is_err(), "served past the cap of 4");
    // ...and is the moment one of them closes.
    drop(held.pop());
    let (head, body) = response(&mut fifth).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("\"status\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_hyper_refuses_is_answered_in_json() {
    let a = api("").await;
    let addr = serve(&a, QUICK).await;
    let send = |bytes: Vec<u8>| async move {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let _ = s.write_all(&bytes).await;
        until_closed(&mut s, PATIENCE).await
    };

    // More header lines than hyper takes.
    let mut many = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n".to_vec();
    for i in 0..120 {
        many.extend_from_slice(format!("x-h{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    let answer = send(many).await;
    let (status, v) = json_error(&answer);
    assert!(status.starts_with("HTTP/1.1 431"), "{answer}");
    assert_eq!(v["error"]["code"], "headers_too_large");

    // A byte that is not allowed in the request line.
    let answer = send(b"GET /he\xFFalthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".to_vec()).await;
    let (status, v) = json_error(&answer);
    assert!(status.starts_with("HTTP/1.1 400"), "{answer}");
    assert_eq!(v["error"]["code"], "bad_request");

    // A header line that is not `name: value`.
    let answer = send(b"GET /healthz HTTP/1.1\r\nhost 127.0.0.1\r\n\r\n".to_vec()).await;
    let (status, _) = json_error(&answer);
    assert!(status.starts_with("HTTP/1.1 400"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_head_guard_keeps_watching_after_a_chunked_body() {
    let a = api("").await;
    let addr = serve(&a, QUICK).await;
    let body = r#"{"task": "a chunked hello"}"#;
    let (one, two) = body.split_at(10);
    let chunked = format!(
        "POST /v1/tasks HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n{:x};ext=1\r\n{one}\r\n{:x}\r\n{two}\r\n0\r\nx-trailer: t\r\n\r\n",
        one.len(),
        two.len()
    );

    // After it, on the same connection: a header line over the guard's limit is refused
    // with the guard's JSON 431 (hyper alone would take a 20 KB line).
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(chunked.as_bytes()).await.expect("write");
    let (head, body) = response(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 202"), "{head}\n{body}");
    let long = format!(
        "GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-long: {}\r\n\r\n",
        "a".repeat(20_000)
    );
    let _ = s.write_all(long.as_bytes()).await;
    let answer = until_closed(&mut s, PATIENCE).await;
    let (status, v) = json_error(&answer);
    assert!(status.starts_with("HTTP/1.1 431"), "{answer}");
    assert_eq!(v["error"]["code"], "headers_too_large");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("16384 bytes"),
        "{v}"
    );

    // And its header timeout still holds for the next head.
    let mut s = TcpStream::connect(addr).await.expect("connect");
    s.write_all(chunked.as_bytes()).await.expect("write");
    let (head, _) = response(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 202"), "{head}");
    s.write_all(b"GET /healthz HTTP/1.1\r\nhost: 1")
        .await
        .expect("write");
    let answer = until_closed(&mut s, PATIENCE).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
}
