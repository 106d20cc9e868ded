//! An axum app served in the background on `127.0.0.1:0`: the scripted model server of the
//! tests and benchmarks (`llm::scripted`) and the regression runs' fixture server.
//!
//! Owns: the listener and the task serving it. Must not: listen beyond loopback.

use axum::Router;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Room for a thousand simultaneous connects (a benchmark's) without the kernel refusing some.
const LISTEN_BACKLOG: u32 = 4096;
/// How long [`Loopback::stop`] lets requests in flight finish before cutting them off.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// A running loopback server. Dropping it cuts it off; [`Loopback::stop`] lets it finish.
pub struct Loopback {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Loopback {
    /// Serve `app` on a free loopback port; `what` names the server in the log.
    pub fn serve(app: Router, what: &'static str) -> std::io::Result<Loopback> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from(([127, 0, 0, 1], 0)))?;
        let listener = socket.listen(LISTEN_BACKLOG)?;
        let addr = listener.local_addr()?;
        let (shutdown, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!(server = what, error = %e, "a loopback server stopped with an error");
            }
        });
        Ok(Loopback {
            addr,
            shutdown: Some(shutdown),
            task: Some(task),
        })
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop accepting, let the requests in flight finish (a few seconds at most), then return.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(STOP_GRACE, &mut task).await.is_err()
        {
            task.abort();
        }
    }
}

impl Drop for Loopback {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
