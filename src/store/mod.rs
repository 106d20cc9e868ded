//! The store: one sqlx SQLite pool, the embedded migrations, and typed queries per table.
//!
//! Owns: the database file (`hermes.db` in the data dir), its pragmas (WAL, foreign keys, busy
//! timeout), schema migrations and refusing a database written by a newer schema. Every SQL
//! statement in the program lives under this module; other parts call typed functions.
//! Must not: know about the agent loop, the model, or HTTP.

/// The columns each table's row type is read from, in one place for every query that reads
/// whole rows (a column added to a table is added here once).
macro_rules! columns {
    (tasks) => {
        "id, state, origin, parent_id, job_id, profile, task, answer, error, reason, \
         parse_failures, prompt_tokens, completion_tokens, created_at, started_at, finished_at, waiting"
    };
    (jobs) => {
        "id, name, task, schedule, timezone, notify, profile, origin, precheck, \
         enabled, next_run_at, running_task_id, created_at, pause_reason, pre_approved"
    };
    (job_runs) => {
        "id, job_id, scheduled_at, fired_at, outcome, task_id, reason, delivery"
    };
    (outbox) => {
        "id, channel, title, body, task_id, job_id, run_id, state, attempts, \
         last_error, next_attempt_at, created_at, sent_at, token, recipient, in_reply_to, refs"
    };
    (approvals) => {
        "id, task_id, tool, arguments, state, reason, created_at, expires_at, decided_at, \
         decided_by, used_at"
    };
    (facts) => {
        "id, text, tags, source, created_at, updated_at"
    };
    (eval_runs) => {
        "id, profile, identity, trigger, started_at, finished_at, passed, failed"
    };
}

/// `SELECT <the table's columns> FROM <table> <rest>`, built at compile time: sqlx takes only
/// static strings as SQL, which keeps values out of statement text.
macro_rules! select {
    ($table:ident, $($rest:tt)*) => {
        concat!("SELECT ", columns!($table), " FROM ", stringify!($table), " ", $($rest)*)
    };
}

mod approvals;
mod dashboard;
mod evals;
mod facts;
mod inbox;
mod jobs;
mod kinds;
mod models;
mod outbox;
mod tasks;
mod working;
mod write;

pub use approvals::*;
pub use dashboard::*;
pub use evals::*;
pub use facts::*;
pub(crate) use inbox::*;
pub use jobs::*;
pub use kinds::*;
pub use models::*;
pub use outbox::*;
pub use tasks::*;

use sqlx::sqlite::{
    SqliteArguments, SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{Row as _, SqlitePool};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
    /// The database cannot be written: a full disk, a read-only file, an I/O failure. The
    /// write did not happen (its transaction was rolled back).
    #[error("the database cannot be written ({fault}): {detail}; {}", fault.hint())]
    Unavailable { fault: StorageFault, detail: String },
    #[error("database error: {0}")]
    Sql(sqlx::Error),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Why the database cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageFault {
    DiskFull,
    ReadOnly,
    Io,
}

impl StorageFault {
    /// What the person can do about it.
    pub(crate) fn hint(self) -> &'static str {
        match self {
            StorageFault::DiskFull => "free disk space (or raise the quota) and try again",
            StorageFault::ReadOnly => {
                "make the file and its directory writable by this user, or choose another --data-dir"
            }
            StorageFault::Io => {
                "the disk reported an I/O error; see the daemon's log and the system's"
            }
        }
    }
}

impl std::fmt::Display for StorageFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StorageFault::DiskFull => "disk full",
            StorageFault::ReadOnly => "read-only",
            StorageFault::Io => "I/O error",
        })
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> StoreError {
        match storage_fault(&e) {
            Some(fault) => StoreError::Unavailable {
                fault,
                detail: e.to_string(),
            },
            None => StoreError::Sql(e),
        }
    }
}

/// The SQLite result codes (primary part) that mean the storage itself failed.
fn storage_fault(e: &sqlx::Error) -> Option<StorageFault> {
    const SQLITE_READONLY: i64 = 8;
    const SQLITE_IOERR: i64 = 10;
    const SQLITE_FULL: i64 = 13;
    const SQLITE_CANTOPEN: i64 = 14;
    match e {
        sqlx::Error::Database(db) => {
            let code = db.code()?.parse::<i64>().ok()? & 0xff;
            match code {
                SQLITE_FULL => Some(StorageFault::DiskFull),
                SQLITE_READONLY => Some(StorageFault::ReadOnly),
                SQLITE_IOERR | SQLITE_CANTOPEN => Some(StorageFault::Io),
                _ => None,
            }
        }
        sqlx::Error::Io(_) => Some(StorageFault::Io),
        _ => None,
    }
}

/// How the database is opened; the defaults suit the daemon.
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
    /// Connections in the pool. Readers run in parallel in WAL mode; writers queue in SQLite's
    /// busy handler. Each connection has its own worker thread and page cache (up to 2 MiB).
    pub max_connections: u32,
    /// A hard cap on the database's size, in pages (`PRAGMA max_page_count`); past it writes
    /// fail as on a full disk. `None`: no cap.
    pub max_pages: Option<u32>,
    /// Open without write access (inspection; a stand-in for a read-only file in tests).
    pub read_only: bool,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            // SQLite writes one at a time and the store's statements are short: 4 connections
            // write as fast as 8 (BENCHMARKS.md §3) with half the threads and page caches.
            max_connections: 4,
            max_pages: None,
            read_only: false,
        }
    }
}

/// A cheap-to-clone handle to the database; clone it into every part that needs storage.
#[derive(Clone, Debug)]
pub struct Store {
    pool: SqlitePool,
    /// The database file, for messages.
    path: Arc<PathBuf>,
    /// The last storage fault someone noticed, and when: `/healthz` reports it for a while.
    fault: Arc<Mutex<Option<(StorageFault, Instant)>>>,
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
        let mut options = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(!opts.read_only)
            .read_only(opts.read_only)
            .journal_mode(SqliteJournalMode::Wal)
            // NORMAL in WAL mode is durable across process crashes (not power loss); that
            // is the promise we make for SIGKILL.
            .synchronous(SqliteSynchronous::Normal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        if let Some(pages) = opts.max_pages {
            options = options.pragma("max_page_count", pages.to_string());
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(opts.max_connections.max(1))
            .connect_with(options)
            .await
            .map_err(|source| StoreError::Open {
                path: path.clone(),
                source,
            })?;
        let store = Store::new(pool, &path);
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
        let store = Store::new(pool, Path::new(":memory:"));
        store.migrate(Path::new(":memory:")).await?;
        Ok(store)
    }

    fn new(pool: SqlitePool, path: &Path) -> Store {
        Store {
            pool,
            path: Arc::new(path.to_path_buf()),
            fault: Arc::default(),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Can the database still be written? One tiny write; `Unavailable` says why not.
    pub(crate) async fn check_writable(&self) -> Result<()> {
        let done = sqlx::query(
            "INSERT INTO health (id, checked_at) VALUES (1, ?) \
             ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
        )
        .bind(now())
        .execute(self.pool())
        .await;
        match done {
            Ok(_) => Ok(()),
            Err(e) => {
                let e = StoreError::from(e);
                if let StoreError::Unavailable { fault, .. } = &e {
                    self.note_fault(*fault);
                }
                Err(e)
            }
        }
    }

    /// Remember that a write failed for want of storage (so health reports it).
    pub(crate) fn note_fault(&self, fault: StorageFault) {
        *crate::util::lock(&self.fault) = Some((fault, Instant::now()));
    }

    /// A storage fault noticed within `within`, if any.
    pub(crate) fn recent_fault(&self, within: Duration) -> Option<StorageFault> {
        crate::util::lock(&self.fault)
            .filter(|(_, at)| at.elapsed() < within)
            .map(|(fault, _)| fault)
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
    pub(crate) fn schema_version() -> i64 {
        MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
    }

    pub(crate) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Whether [`Store::close`] was called (nothing can be written through it any more).
    pub(crate) fn is_closed(&self) -> bool {
        self.pool.is_closed()
    }

    /// Wait for pending writes and release the file (tests reopen the same data dir).
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// A write statement with its arguments bound.
type Statement<'q> = sqlx::query::Query<'q, sqlx::Sqlite, SqliteArguments>;
/// A statement with its arguments bound, each row read as a `T`: a read, or a write with
/// `RETURNING` (run by `write.rs`).
type Select<'q, T> = sqlx::query::QueryAs<'q, sqlx::Sqlite, T, SqliteArguments>;

/// A type `query_as` can read rows into (spelled once; the bound is long).
trait Record: for<'r> sqlx::FromRow<'r, SqliteRow> + Send + Unpin {}
impl<T: for<'r> sqlx::FromRow<'r, SqliteRow> + Send + Unpin> Record for T {}

/// A row type with columns held as JSON text: its `FromRow` reads the plain columns and skips
/// those, which [`WithJson::read_json`] then parses from the same row, so a damaged value is
/// reported as [`StoreError::Corrupt`] naming the row rather than as a decoding error.
trait WithJson: Record {
    fn read_json(self, row: &SqliteRow) -> Result<Self>;

    fn from_json_row(row: &SqliteRow) -> Result<Self> {
        Self::from_row(row)?.read_json(row)
    }
}

impl Store {
    /// A single number (`SELECT COUNT(*) ...`).
    async fn count(&self, sql: &'static str) -> Result<i64> {
        Ok(sqlx::query_scalar(sql).fetch_one(self.pool()).await?)
    }

    async fn all<T: Record>(&self, select: Select<'_, T>) -> Result<Vec<T>> {
        Ok(select.fetch_all(self.pool()).await?)
    }

    /// The first row a read selects. Never for a writing statement (`… RETURNING`): reading
    /// one row stops it before its commit, whose error would be lost (see `write.rs`).
    async fn first<T: Record>(&self, select: Select<'_, T>) -> Result<Option<T>> {
        Ok(select.fetch_optional(self.pool()).await?)
    }

    /// The row `sql` selects by the one argument `id`; `what` names it when there is none.
    async fn json_row<T: WithJson>(
        &self,
        sql: &'static str,
        what: &'static str,
        id: &str,
    ) -> Result<T> {
        let row = sqlx::query(sql)
            .bind(id)
            .fetch_optional(self.pool())
            .await?;
        T::from_json_row(&found(row, what, id)?)
    }

    async fn json_rows<T: WithJson>(&self, sql: &'static str) -> Result<Vec<T>> {
        let rows = sqlx::query(sql).fetch_all(self.pool()).await?;
        rows.iter().map(T::from_json_row).collect()
    }
}

/// `item`, or [`StoreError::NotFound`] for the `what` called `id`.
fn found<T>(item: Option<T>, what: &'static str, id: impl ToString) -> Result<T> {
    item.ok_or_else(|| StoreError::NotFound {
        what,
        id: id.to_string(),
    })
}

/// A JSON text column of `row`, parsed; `owner` names the row in the error.
fn json_column<T: serde::de::DeserializeOwned>(
    row: &SqliteRow,
    column: &str,
    owner: &str,
) -> Result<T> {
    let text: String = row.try_get(column)?;
    from_json(&text, column, owner)
}

/// A list limit as asked, or `default` when none (0 or less) was asked for.
fn limit_or(limit: i64, default: i64) -> i64 {
    if limit <= 0 { default } else { limit }
}

/// A list of words as the JSON text stored in list columns.
fn json_list<T: serde::Serialize>(items: &[T]) -> String {
    // A list of strings always serialises; the fallback only keeps this infallible.
    serde_json::to_string(items).unwrap_or_else(|_| "[]".into())
}

/// A JSON column read back; text that does not parse means the row was damaged outside us.
fn from_json<T: serde::de::DeserializeOwned>(text: &str, what: &str, owner: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| StoreError::Corrupt(format!("{what} of {owner}: {e}")))
}

/// Now, in the form stored in every time column.
pub fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// A fresh unguessable token: 32 hex characters from the operating system's random source
/// (122 random bits). An email notice carries it in its Message-ID, and a reply must name it
/// to act on the notice's job.
pub(crate) fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A fresh random id: 16 hex characters, short enough to type, wide enough not to collide.
pub(crate) fn new_id() -> String {
    let u = uuid::Uuid::new_v4();
    hex::encode(&u.as_bytes()[..8])
}

#[cfg(test)]
mod tests;
