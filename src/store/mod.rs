//! The store: one sqlx SQLite pool, the embedded migrations, and typed queries per table.
//!
//! Owns: the database file (`hermes.db` in the data dir), its pragmas (WAL, foreign keys, busy
//! timeout), schema migrations and refusing a database written by a newer schema. Every SQL
//! statement in the program lives under this module; other parts call typed functions.
//! Must not: know about the agent loop, the model, or HTTP.

mod dashboard;
mod facts;
mod jobs;
mod kinds;
mod outbox;
mod tasks;
mod working;

pub use dashboard::*;
pub use facts::*;
pub use jobs::*;
pub use kinds::*;
pub use outbox::*;
pub use tasks::*;
pub use working::*;

use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations");

/// The database file's name inside the data dir.
pub const DB_FILE: &str = "hermes.db";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot create the data directory {path}: {source} (check its permissions, or choose another with --data-dir)"
    )]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the database {path}: {source}")]
    Open { path: PathBuf, source: sqlx::Error },
    #[error(
        "the database {path} was written by a newer hermes-agent (schema version {found}, this build knows up to {known}); upgrade hermes-agent or use another --data-dir"
    )]
    NewerSchema {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("cannot migrate the database {path}: {source}")]
    Migrate {
        path: PathBuf,
        source: sqlx::migrate::MigrateError,
    },
    #[error("{what} '{id}' not found")]
    NotFound { what: &'static str, id: String },
    #[error("{0}")]
    Conflict(String),
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How the database is opened; the defaults suit the daemon.
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
    /// Connections in the pool. Readers run in parallel in WAL mode; writers queue in SQLite's
    /// busy handler. Each connection keeps its own page cache.
    pub max_connections: u32,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { max_connections: 8 }
    }
}

/// A cheap-to-clone handle to the database; clone it into every part that needs storage.
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
}

impl Store {
    /// Open (creating if needed) the database in `data_dir` and bring its schema up to date.
    pub async fn open(data_dir: &Path) -> Result<Store> {
        Store::open_with(data_dir, StoreOptions::default()).await
    }

    /// As [`Store::open`], with chosen options (benchmarks compare pool sizes).
    pub async fn open_with(data_dir: &Path, opts: StoreOptions) -> Result<Store> {
        std::fs::create_dir_all(data_dir).map_err(|source| StoreError::DataDir {
            path: data_dir.to_path_buf(),
            source,
        })?;
        let path = data_dir.join(DB_FILE);
        let options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // NORMAL in WAL mode is durable across process crashes (not power loss); that
            // is the promise we make for SIGKILL.
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(opts.max_connections.max(1))
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Open {
                path: path.clone(),
                source,
            })?;
        let store = Store { pool };
        store.migrate(&path).await?;
        Ok(store)
    }

    /// An in-memory database (unit tests). One connection, since each `:memory:` connection
    /// would otherwise be its own empty database.
    pub async fn open_in_memory() -> Result<Store> {
        let options = SqliteConnectOptions::from_str("sqlite::memory:")
            .map_err(|source| StoreError::Open {
                path: PathBuf::from(":memory:"),
                source,
            })?
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Open {
                path: PathBuf::from(":memory:"),
                source,
            })?;
        let store = Store { pool };
        store.migrate(Path::new(":memory:")).await?;
        Ok(store)
    }

    async fn migrate(&self, path: &Path) -> Result<()> {
        let known = MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0);
        match MIGRATOR.run(&self.pool).await {
            Ok(()) => Ok(()),
            Err(sqlx::migrate::MigrateError::VersionMissing(found)) if found > known => {
                Err(StoreError::NewerSchema {
                    path: path.to_path_buf(),
                    found,
                    known,
                })
            }
            Err(source) => Err(StoreError::Migrate {
                path: path.to_path_buf(),
                source,
            }),
        }
    }

    /// The highest schema version this build knows.
    pub fn schema_version() -> i64 {
        MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
    }

    pub(crate) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Wait for pending writes and release the file (tests reopen the same data dir).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Now, in the form stored in every time column.
pub fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// A fresh random id: 16 hex characters, short enough to type, wide enough not to collide.
pub fn new_id() -> String {
    let u = uuid::Uuid::new_v4();
    hex::encode(&u.as_bytes()[..8])
}

#[cfg(test)]
mod tests;
