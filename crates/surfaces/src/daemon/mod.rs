//! The daemon's lifecycle: [`serve`] refuses an unsafe bind, binds, locks the data dir and
//! builds the parts; [`run`] starts the worker pool, the scheduler, the outbox sender, the
//! inbox and the API on a listener it is given, and drains them in order when its shutdown
//! future completes.
//!
//! Owns: the start-up order, the data-dir lock (`lock`), writing the address file (its format
//! is the client's, `client::addr`), the shutdown sequence and its time bounds.
//! Must not: parse arguments or print — the CLI does both; this reports through `tracing` and
//! [`DaemonError`].

mod lock;
mod node;
mod run;

pub use crate::client::addr::{ADDR_FILE, AddrFile, AddrFileError, addr_path, read_addr};
pub use lock::lock_data_dir;
pub use run::run;

use crate::app::{App, AppError};
use hermes_config::Config;
use hermes_engine::agent::JobExecution;
use hermes_engine::scheduler::SchedulerError;
use hermes_store::StoreError;
use std::path::PathBuf;
use tokio::net::TcpListener;

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(
        "refusing to listen on {host} without a token: anyone on the network could run tasks. \
         Set server.token (e.g. token: ${{HERMES_TOKEN}}) or use host: 127.0.0.1"
    )]
    PublicWithoutToken { host: String },
    #[error(
        "cannot listen on {addr}: is another hermes-agent running? (change server.port to use \
         another port)"
    )]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot read the address the API listens on: {source}")]
    ListenerAddr { source: std::io::Error },
    #[error("cannot create the data dir {}", path.display())]
    CreateDataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open {}", path.display())]
    OpenLock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "another hermes-agent daemon is already using the data dir {} (it holds {}); stop it \
         first (`systemctl --user stop hermes-agent`) or use another --data-dir",
        data_dir.display(),
        lock.display()
    )]
    Locked { data_dir: PathBuf, lock: PathBuf },
    #[error("cannot lock {}", path.display())]
    Lock {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    AddrFile(#[from] AddrFileError),
    /// Boxed: the parts' build errors are large, and every lifecycle step returns this type.
    #[error(transparent)]
    App(Box<AppError>),
    #[error("cannot write the database {}: {fault}; {}", path.display(), fault.hint())]
    Unwritable {
        path: PathBuf,
        fault: hermes_store::StorageFault,
    },
    #[error(
        "the database {} was {} while the daemon ran, so it stopped: what it would write now no \
         later start could read. {}",
        path.display(),
        lost.as_str(),
        match lost {
            hermes_store::FileLost::Deleted =>
                "Start it again for a new, empty database, or put the file back from a backup first",
            hermes_store::FileLost::Replaced =>
                "Start it again to work on the file now in place",
        }
    )]
    DatabaseLost {
        path: PathBuf,
        lost: hermes_store::FileLost,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Scheduler(#[from] SchedulerError),
}

impl From<AppError> for DaemonError {
    fn from(e: AppError) -> DaemonError {
        DaemonError::App(Box::new(e))
    }
}

/// The daemon as `hermes-agent serve` runs it: on the configured address, until SIGTERM or
/// Ctrl-C. `server.port: 0` binds any free port; [`run`] writes the one it got to
/// `DATA_DIR/daemon.addr`.
pub async fn serve(config: Config) -> Result<(), DaemonError> {
    let s = &config.settings.server;
    if s.token.is_empty() && !hermes_config::is_loopback_host(&s.host) {
        return Err(DaemonError::PublicWithoutToken {
            host: s.host.clone(),
        });
    }
    let addr = format!("{}:{}", s.host, s.port);
    tracing::info!(config = %config.source, data_dir = %config.data_dir.display(), "hermes-agent {} starting", env!("CARGO_PKG_VERSION"));
    let listener = TcpListener::bind(&addr)
        .await
        .map_err(|source| DaemonError::Bind { addr, source })?;
    // Held until this function returns, i.e. for the daemon's whole life.
    let _lock = lock_data_dir(&config.data_dir)?;
    let stop = shutdown_signal();
    let app = App::build(config, JobExecution::Pool).await?;
    run(app, listener, stop).await
}

/// SIGTERM (systemd) or SIGINT (Ctrl-C). The handlers are installed by this call, not when the
/// future is first polled: a SIGTERM that comes while the daemon starts — even right after
/// `/healthz` first answers — stops it with the grace period, instead of killing it.
pub(crate) fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        async move {
            match (term, int) {
                (Ok(mut term), Ok(mut int)) => {
                    tokio::select! {
                        _ = term.recv() => {}
                        _ = int.recv() => {}
                    }
                }
                (Err(e), _) | (_, Err(e)) => {
                    tracing::warn!(error = %e, "cannot listen for SIGTERM and SIGINT; trying Ctrl-C alone");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
