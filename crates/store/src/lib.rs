//! hermes-store, the bottom layer: the database on either engine (a SQLite file, or PostgreSQL
//! shared by several daemons), the embedded migrations, and typed queries grouped by aggregate
//! behind handles (`store.tasks()`, `store.jobs()`, …: see `aggregates.rs`); and [`util`], the
//! small helpers every layer shares.
//!
//! Owns: the database file (`hermes.db` in the data dir), its pragmas (WAL, foreign keys, busy
//! timeout), schema migrations and refusing a database written by a newer schema, the node lease
//! that fences a node's writes. Every SQL statement of the program lives in this crate; the
//! layers above call typed functions. Must not: depend on any other crate of the workspace, or
//! know about the agent loop, the model, or HTTP.

/// The columns each table's row type is read from, in one place for every query that reads
/// whole rows (a column added to a table is added here once).
macro_rules! columns {
    (tasks) => {
        "id, state, origin, parent_id, job_id, profile, task, answer, error, reason, \
         parse_failures, prompt_tokens, completion_tokens, created_at, started_at, finished_at, waiting, \
         node_epoch"
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

/// The condition under which a write for a task (its end, its hold) is taken: it was claimed
/// under no lease, or its node's row still holds the lease it was claimed under (`lease.rs`).
/// On PostgreSQL the node's row is locked (`FOR SHARE`) until the write commits, so a
/// take-over's delete of the row comes after the write, or the write is refused — never a
/// write after the delete.
macro_rules! fenced {
    () => {
        "(tasks.node_epoch IS NULL OR EXISTS (SELECT 1 FROM nodes n \
         WHERE n.id = tasks.node_id AND n.epoch = tasks.node_epoch))"
    };
    (pg) => {
        "(tasks.node_epoch IS NULL OR EXISTS (SELECT 1 FROM nodes n \
         WHERE n.id = tasks.node_id AND n.epoch = tasks.node_epoch FOR SHARE))"
    };
}

/// `SELECT <the table's columns> FROM <table> <rest>`, built at compile time: sqlx takes only
/// static strings as SQL, which keeps values out of statement text.
macro_rules! select {
    ($table:ident, $($rest:tt)*) => {
        concat!("SELECT ", columns!($table), " FROM ", stringify!($table), " ", $($rest)*)
    };
}

#[cfg(test)]
#[macro_use]
pub(crate) mod testing;

mod aggregates;
mod approvals;
mod chat;
mod copy;
mod dashboard;
mod error;
mod evals;
mod facts;
mod feed;
mod file;
mod health;
mod inbox;
mod inbox_kinds;
mod inbox_write;
mod jobs;
mod kinds;
mod lease;
mod models;
mod nodes;
mod outbox;
mod postgres;
mod sessions;
mod sql;
mod steps;
mod tasks;
#[cfg(any(test, feature = "testing"))]
pub mod test_postgres;
mod usage;
mod vectors;
mod working;
pub use working::{SavedSnapshot, job_snapshots};
mod write;

pub mod util;

// What the crates above name, and the types the methods they call return (so that rustdoc
// documents them and a caller may name one); the rest stays inside this crate.
// The handles are named so that their methods are documented and callers may pass one on.
pub use aggregates::{
    Approvals, Chat, Evals, Facts, Holds, Inbox, Jobs, Models, Nodes, Outbox, Sessions, Snapshots,
    Tasks, Vectors, Working,
};
pub use approvals::{Approval, Hold, HoldOwner};
pub use copy::{Copied, NOT_COPIED};
pub use dashboard::{Backlog, TaskSearch, Tokens};
pub use error::{Result, StorageFault, StoreError};
pub use evals::{EvalResult, EvalRun};
pub use facts::{Fact, Upsert};
pub use feed::{Change, ChangeFeed};
pub use file::FileLost;
#[cfg(test)]
use health::FAULT_MEMORY;
pub use health::Health;
use health::{PROBE_GIVE_UP, Reading};
pub use inbox::{
    InboxFilter, InboxMessage, InboxOutcome, JobChange, MailPlace, NewInboxMessage, Place, Recorded,
};
pub use jobs::{BurstClaim, Job, JobRun, NewJob};
pub use kinds::{
    ApprovalState, Channel, CommandState, Delivery, EvalTrigger, EvalVerdict, FailReason,
    IgnoreReason, InboxCommand, InboxState, ModelAction, NoticeState, Origin, PauseReason,
    RunOutcome, StepKind, TaskState, UnknownWord,
};
pub use lease::{Fenced, Lease};
pub use models::{LastModel, ModelChange, ModelStatus, NewModelChange};
pub use nodes::placeholder_prefix;
pub use outbox::{NewNotice, Notice, NoticeFilter};
pub use postgres::{DaemonLock, PgUrlError, parse_url, redact_url};
pub use sessions::StoredSession;
use sql::{Builder, DbRow, Engine, Query, Record, Tx, query, query_as, query_scalar};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
pub use steps::{NewStep, Step};
pub use tasks::{MAX_TASK_CHARS, NewTask, Task, TaskFilter, TaskOutcome, TaskRecord};
pub use usage::{
    DEFAULT_USAGE_DAYS, DayUsage, Figures, JobUsage, MAX_USAGE_DAYS, ProfileUsage, Usage,
    UsageWindow,
};
pub use vectors::{Unembedded, VectorCounts, VectorModel};

/// The capability [`Store::shared`] hands out: this database may have other daemons on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared(());

/// SQLite's schema. The files are never edited once released: sqlx keeps each one's checksum
/// in the database and refuses a database whose applied files changed.
static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");
/// PostgreSQL's schema: the same tables and meaning as SQLite's, version for version.
static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

/// How long a SQLite statement waits for another connection's write lock before it fails
/// with `database is locked`: longer than any one write transaction of the store.
const SQLITE_BUSY: Duration = Duration::from_secs(10);

/// The database file's name inside the data dir.
pub const DB_FILE: &str = "hermes.db";

/// How the database is opened; the defaults suit the daemon.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreOptions {
    /// Connections in the pool; 0: the engine's default. On SQLite readers run in parallel in
    /// WAL mode, writers queue in its busy handler, and each connection has its own worker
    /// thread and page cache (up to 2 MiB).
    pub max_connections: u32,
    /// A hard cap on the database's size, in pages (`PRAGMA max_page_count`); past it writes
    /// fail as on a full disk. `None`: no cap.
    pub max_pages: Option<u32>,
    /// Open without write access (inspection; a stand-in for a read-only file in tests).
    pub read_only: bool,
}

/// A cheap-to-clone handle to the database; clone it into every part that needs storage.
#[derive(Clone, Debug)]
pub struct Store {
    engine: Engine,
    /// The database file, or PostgreSQL's address without its password, for messages.
    path: Arc<PathBuf>,
    /// The SQLite file as opened, to tell when its path leads elsewhere ([`Store::file_lost`]).
    file: Option<Arc<file::Opened>>,
    /// The last storage fault someone noticed, and when: `/healthz` reports it for a while.
    fault: Arc<Mutex<Option<(StorageFault, Instant)>>>,
    /// The node (daemon) this store works for: the tasks it claims and the runs it fires are
    /// recorded as its own, so the others can take them over if it dies (see `nodes.rs`).
    node: Option<Arc<str>>,
    /// The node's lease once it joined a shared database: the fencing token stamped on what it
    /// claims and checked on what it writes for it (`lease.rs`). Shared by every clone.
    lease: Lease,
    /// On PostgreSQL, a pool of one connection for the health probe alone: a probe queued
    /// behind a busy main pool would report a healthy server as down. `None` on SQLite, which
    /// has no server to lose.
    probe: Option<Arc<Store>>,
    /// The last health reading, and the probe still running: a burst of `/healthz` costs one
    /// probe, and requests that come while one runs wait for its answer instead of queueing
    /// more.
    reading: Arc<tokio::sync::Mutex<Reading>>,
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
            .busy_timeout(SQLITE_BUSY);
        if let Some(pages) = opts.max_pages {
            options = options.pragma("max_page_count", pages.to_string());
        }
        let pool = SqlitePoolOptions::new()
            .max_connections(match opts.max_connections {
                // SQLite writes one at a time and the store's statements are short: 4
                // connections write as fast as 8 (BENCHMARKS.md §3) with half the threads and
                // page caches.
                0 => 4,
                n => n,
            })
            .after_release(|conn, _| Box::pin(release_check(conn)))
            .connect_with(options)
            .await
            .map_err(|source| error::opening(&path, source))?;
        let mut store = Store::new(Engine::Sqlite(pool), &path);
        store.migrate().await?;
        // After the migration's writes, so the write-ahead log is there to note.
        store.file = file::Opened::at(&path).map(Arc::new);
        Ok(store)
    }

    /// The store `storage.url` chooses: PostgreSQL at `url` when it is set, else SQLite in
    /// `data_dir`. (Plain values: the store knows nothing of the settings.)
    pub async fn open_configured(data_dir: &Path, url: &str, opts: StoreOptions) -> Result<Store> {
        match url.trim() {
            "" => Store::open_with(data_dir, opts).await,
            url => Store::open_postgres(url, opts).await,
        }
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
        let store = Store::new(Engine::Sqlite(pool), Path::new(":memory:"));
        store.migrate().await?;
        Ok(store)
    }

    fn new(engine: Engine, path: &Path) -> Store {
        Store {
            engine,
            path: Arc::new(path.to_path_buf()),
            file: None,
            fault: Arc::default(),
            node: None,
            lease: Lease::default(),
            probe: None,
            reading: Arc::default(),
        }
    }

    /// The database file (on PostgreSQL: its address, without the password), for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this store is on PostgreSQL.
    pub fn is_postgres(&self) -> bool {
        matches!(self.engine, Engine::Postgres(_))
    }

    /// `Some` when several daemons may share this database (PostgreSQL: each takes work under
    /// a lease, follows the others' changes and polls for their news); `None` when this
    /// process is alone with it (SQLite: one file, one daemon by the data-dir lock). The
    /// domain asks this, never which engine it is.
    pub fn shared(&self) -> Option<Shared> {
        self.is_postgres().then_some(Shared(()))
    }

    fn migrator(&self) -> &'static sqlx::migrate::Migrator {
        match self.engine {
            Engine::Sqlite(_) => &SQLITE_MIGRATOR,
            Engine::Postgres(_) => &PG_MIGRATOR,
        }
    }

    /// Bring the schema up to date. On PostgreSQL sqlx's migrator holds an advisory lock
    /// meanwhile: daemons starting together on a fresh database migrate it once, in turn.
    async fn migrate(&self) -> Result<()> {
        let migrator = self.migrator();
        let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
        let done = match &self.engine {
            Engine::Sqlite(pool) => migrator.run(pool).await,
            Engine::Postgres(pool) => migrator.run(pool).await,
        };
        match done {
            Ok(()) => Ok(()),
            Err(sqlx::migrate::MigrateError::VersionMissing(found)) if found > known => {
                Err(StoreError::NewerSchema {
                    path: self.path.to_path_buf(),
                    found,
                    known,
                })
            }
            Err(sqlx::migrate::MigrateError::Execute(e)) if error::damaged(&e) => {
                Err(error::opening(&self.path, e))
            }
            Err(source) => Err(StoreError::Migrate {
                path: self.path.to_path_buf(),
                source,
            }),
        }
    }

    /// The highest schema version this build knows (the same on both engines).
    pub fn schema_version() -> i64 {
        SQLITE_MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
    }

    /// The highest schema version applied to this database.
    pub async fn applied_version(&self) -> Result<i64> {
        let v: Option<i64> =
            query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(self)
                .await?;
        Ok(v.unwrap_or(0))
    }

    /// SQLite's own check of the file (`PRAGMA quick_check`): the problems it found, none when
    /// the file is sound. PostgreSQL keeps its own: none asked there.
    pub async fn quick_check(&self) -> Result<Vec<String>> {
        if self.is_postgres() {
            return Ok(Vec::new());
        }
        let rows: Vec<String> = query_scalar("PRAGMA quick_check").fetch_all(self).await?;
        Ok(rows.into_iter().filter(|r| r != "ok").collect())
    }

    pub(crate) fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The SQLite pool (tests that reach below the store's functions); `None` on PostgreSQL.
    #[cfg(test)]
    pub(crate) fn sqlite_pool(&self) -> Option<&sqlx::SqlitePool> {
        match &self.engine {
            Engine::Sqlite(p) => Some(p),
            Engine::Postgres(_) => None,
        }
    }

    /// A transaction.
    pub(crate) async fn begin(&self) -> Result<Tx> {
        Ok(match &self.engine {
            Engine::Sqlite(p) => Tx::Sqlite(p.begin().await?),
            Engine::Postgres(p) => Tx::Postgres(p.begin().await?),
        })
    }

    /// A transaction that reads and then writes `table`, holding its write lock from the
    /// start, so what it read is still true when it writes: SQLite's `BEGIN IMMEDIATE`
    /// (the database's one write lock); on PostgreSQL a lock on the table that writers of
    /// it wait for and readers do not.
    pub(crate) async fn begin_writing(&self, table: Locked) -> Result<Tx> {
        Ok(match &self.engine {
            Engine::Sqlite(p) => Tx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
            Engine::Postgres(p) => {
                let mut tx = Tx::Postgres(p.begin().await?);
                query(table.lock_statement()).execute(&mut tx).await?;
                tx
            }
        })
    }

    /// Whether [`Store::close`] was called (nothing can be written through it any more).
    pub fn is_closed(&self) -> bool {
        match &self.engine {
            Engine::Sqlite(p) => p.is_closed(),
            Engine::Postgres(p) => p.is_closed(),
        }
    }

    /// Wait for pending writes and release the database (tests reopen the same data dir).
    pub async fn close(&self) {
        if let Some(probe) = &self.probe {
            Box::pin(probe.close()).await;
        }
        match &self.engine {
            Engine::Sqlite(p) => p.close().await,
            Engine::Postgres(p) => p.close().await,
        }
    }
}

/// Whether a SQLite connection handed back may serve again: not when sqlx still counts a
/// transaction open on it. That happens after a `COMMIT` failed on a full disk: SQLite rolled
/// the transaction back by itself, so the `ROLLBACK` sqlx sends when the transaction is dropped
/// fails too and its count stays at one — and on such a connection sqlx refuses every later
/// `BEGIN IMMEDIATE` (a savepoint instead of a transaction for a plain `BEGIN`). The pool closes
/// it and opens a fresh one. The ping first waits for that queued `ROLLBACK` to have run.
///
/// Only a connection that counts a transaction is pinged: the count drops when the `ROLLBACK`
/// has run, so a count of zero is final, and a ping on every release was a second trip to the
/// connection's worker thread for every statement (BENCHMARKS.md §16).
async fn release_check(
    conn: &mut sqlx::SqliteConnection,
) -> std::result::Result<bool, sqlx::Error> {
    use sqlx::Connection as _;
    if !conn.is_in_transaction() {
        return Ok(true);
    }
    conn.ping().await?;
    if conn.is_in_transaction() {
        tracing::warn!(
            "a database connection still counted a transaction open after its commit failed \
             (a full disk?); closing it, the pool opens a fresh one"
        );
        return Ok(false);
    }
    Ok(true)
}

/// A table a transaction reads and then writes (see [`Store::begin_writing`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Locked {
    Facts,
    Inbox,
}

impl Locked {
    fn lock_statement(self) -> &'static str {
        // SHARE ROW EXCLUSIVE conflicts with itself and with every write, not with reads.
        match self {
            Locked::Facts => "LOCK TABLE facts IN SHARE ROW EXCLUSIVE MODE",
            Locked::Inbox => "LOCK TABLE inbox_messages IN SHARE ROW EXCLUSIVE MODE",
        }
    }
}

/// A write statement with its arguments bound.
type Statement = sql::Query;
/// A statement with its arguments bound, each row read as a `T`: a read, or a write with
/// `RETURNING` (run by `write.rs`).
type Select<T> = sql::QueryAs<T>;

/// A row type with columns held as JSON text: its `FromRow` reads the plain columns and skips
/// those, which [`WithJson::read_json`] then parses from the same row, so a damaged value is
/// reported as [`StoreError::Corrupt`] naming the row rather than as a decoding error.
trait WithJson: Record {
    fn read_json(self, row: &DbRow) -> Result<Self>;

    fn from_json_row(row: &DbRow) -> Result<Self> {
        row.read::<Self>()?.read_json(row)
    }
}

impl Store {
    /// A single number (`SELECT COUNT(*) ...`).
    async fn count(&self, sql: &'static str) -> Result<i64> {
        Ok(query_scalar(sql).fetch_one(self).await?)
    }

    async fn all<T: Record>(&self, select: Select<T>) -> Result<Vec<T>> {
        Ok(select.fetch_all(self).await?)
    }

    /// The first row a read selects. Never for a writing statement (`… RETURNING`): reading
    /// one row stops it before its commit, whose error would be lost (see `write.rs`).
    async fn first<T: Record>(&self, select: Select<T>) -> Result<Option<T>> {
        Ok(select.fetch_optional(self).await?)
    }

    /// The row `sql` selects by the one argument `id`; `what` names it when there is none.
    async fn json_row<T: WithJson>(
        &self,
        sql: &'static str,
        what: &'static str,
        id: &str,
    ) -> Result<T> {
        let row = query(sql).bind(id).fetch_optional(self).await?;
        T::from_json_row(&found(row, what, id)?)
    }

    /// Every row `q` selects, each read with its JSON columns.
    async fn json_rows<T: WithJson>(&self, q: Query) -> Result<Vec<T>> {
        let rows = q.fetch_all(self).await?;
        rows.iter().map(T::from_json_row).collect()
    }

    /// The first row `q` gives, read with its JSON columns. Every row is read, so a writing
    /// statement (`… RETURNING`) runs to its commit (see `write.rs`).
    async fn json_first<T: WithJson>(&self, q: Query) -> Result<Option<T>> {
        let rows = q.fetch_all(self).await?;
        rows.first().map(T::from_json_row).transpose()
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
    row: &DbRow,
    column: &str,
    owner: &str,
) -> Result<T> {
    let text: String = row.get(column)?;
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

/// Now, in the form stored in every time column: to the microsecond, as both engines keep it.
pub fn now() -> chrono::DateTime<chrono::Utc> {
    chrono::SubsecRound::trunc_subsecs(chrono::Utc::now(), 6)
}

/// A fresh unguessable token: 32 hex characters from the operating system's random source
/// (122 random bits). An email notice carries it in its Message-ID, and a reply must name it
/// to act on the notice's job.
pub(crate) fn new_token() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A fresh random id: 16 hex characters, short enough to type, wide enough not to collide.
pub fn new_id() -> String {
    let u = uuid::Uuid::new_v4();
    hex::encode(&u.as_bytes()[..8])
}

#[cfg(test)]
mod tests;
