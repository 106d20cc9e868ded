//! The client over streamable HTTP: server-everything started as its own process on a loopback
//! port, reached through `mcp.servers.NAME.url` with a header.

use super::{Deps, NO_MODEL, PATIENCE, call, common, deps, running, settings_with};
use hermes_config::McpServer;
use hermes_engine::tools::ToolError;
use serde_json::json;
use std::time::{Duration, Instant};

/// server-everything over streamable HTTP on a free loopback port; killed on drop.
struct HttpEverything {
    child: std::process::Child,
    url: String,
}

impl HttpEverything {
    /// Start it and wait (bounded) for the line saying it listens. Its port is picked by
    /// binding port 0 and releasing it (the server takes a number, not a socket); a port taken
    /// in between is tried again.
    fn start(d: &Deps) -> HttpEverything {
        use std::io::BufRead;
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut child = std::process::Command::new("node")
                .arg(&d.everything)
                .arg("streamableHttp")
                .env("PORT", port.to_string())
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("node runs");
            let stderr = child.stderr.take().expect("piped stderr");
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in std::io::BufReader::new(stderr)
                    .lines()
                    .map_while(Result::ok)
                {
                    let _ = tx.send(line);
                }
            });
            let deadline = Instant::now() + PATIENCE;
            while let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                if line.contains("listening on port") {
                    return HttpEverything {
                        child,
                        url: format!("http://127.0.0.1:{port}/mcp"),
                    };
                }
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("server-everything did not start over streamable HTTP");
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn server_everything_over_streamable_http() {
    let d = deps();
    let http = HttpEverything::start(&d);
    let remote = McpServer {
        url: http.url.clone(),
        headers: [("X-Hermes-Test".to_string(), "secret-value".to_string())].into(),
        timeout_s: 1,
        ..Default::default()
    };
    let t = common::app(settings_with(NO_MODEL, vec![("remote", remote)]), vec![]).await;
    let status = running(&t.app, &["remote"]).await;
    assert_eq!(
        (status[0].transport.as_ref(), status[0].pid),
        ("http", None)
    );
    assert!(status[0].tools.contains(&"remote__echo".to_string()));

    let echo = call(&t.app, "remote__echo", json!({"message": "over http"})).await;
    assert_eq!(echo.error, None, "{echo:?}");
    assert!(echo.content.contains("over http"), "{}", echo.content);
    let slow = call(
        &t.app,
        "remote__trigger-long-running-operation",
        json!({"duration": 30, "steps": 1}),
    )
    .await;
    assert_eq!(slow.error, Some(ToolError::Timeout(Duration::from_secs(1))));
    t.app.mcp.stop().await;
}
