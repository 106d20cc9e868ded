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

mod approvals;
mod copy;
mod dashboard;
mod error;
mod evals;
mod facts;
mod feed;
mod inbox;
mod jobs;
mod kinds;
mod lease;
mod models;
mod nodes;
mod outbox;
mod postgres;
mod sessions;
mod sql;
mod tasks;
#[cfg(test)]
pub(crate) mod test_postgres;
mod working;
mod write;

pub use approvals::*;
pub use copy::{Copied, NOT_COPIED};
pub use dashboard::*;
pub use error::*;
pub use evals::*;
pub use facts::*;
pub use feed::{Change, ChangeFeed};
pub(crate) use inbox::*;
pub use jobs::*;
pub use kinds::*;
pub use lease::{Fenced, Lease};
pub use models::*;
pub use nodes::*;
pub use outbox::*;
pub use sessions::*;
pub use tasks::*;

pub use postgres::{DaemonLock, PgUrlError, parse_url, redact_url};
use sql::{Builder, DbRow, Engine, Record, Tx, query, query_as, query_scalar};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// SQLite's schema. The files are never edited once released: sqlx keeps each one's checksum
/// in the database and refuses a database whose applied files changed.
static SQLITE_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/sqlite");
/// PostgreSQL's schema: the same tables and meaning as SQLite's, version for version.
static PG_MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("./migrations/postgres");

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

/// What `/healthz` knows of the database between probes.
#[derive(Debug, Default)]
struct Reading {
    /// The last probe's answer and when it came.
    last: Option<(Health, Instant)>,
    /// A probe that outlived the request that started it, and since when it runs: its answer
    /// is a later request's. Run apart from the request so that a slow first connection (a
    /// debug build's SCRAM handshake on a loaded machine takes longer than [`PROBE_WAIT`]) is
    /// made once and kept, rather than started and abandoned at every request.
    running: Option<(tokio::task::JoinHandle<Result<Health>>, Instant)>,
}

/// How long a request for health waits for the probe, write and count together: well under
/// the 700 ms the CLI gives `/healthz` as a whole, and a round trip on an open connection takes
/// far less. A probe that takes longer goes on; the request answers with what is known.
pub const PROBE_WAIT: Duration = Duration::from_millis(400);
/// A server whose probe has not answered for this long is reported unreachable.
const SILENT_AS_DOWN: Duration = Duration::from_secs(2);
/// A probe gives up after this long (its connection's wait, its statements): the server is
/// then as good as down, and the next request starts a new probe.
pub(crate) const PROBE_GIVE_UP: Duration = Duration::from_secs(5);
/// A reading this recent is answered again without asking the database.
const READING_FRESH: Duration = Duration::from_millis(500);
/// How long a storage fault a request met keeps health `degraded` when the probe cannot
/// prove it over (a full disk takes the probe's one-row write and still refuses a task).
pub const FAULT_MEMORY: Duration = Duration::from_secs(60);

/// What the health probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Health {
    /// Why the database cannot be written now, or was not lately; `None`: it can.
    pub fault: Option<StorageFault>,
    /// Tasks waiting for a worker; `None` when unknown (the database did not answer).
    pub pending: Option<i64>,
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
            .map_err(|source| StoreError::Open {
                path: path.clone(),
                source,
            })?;
        let store = Store::new(Engine::Sqlite(pool), &path);
        store.migrate().await?;
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

    /// Can the database still be written? One tiny write; `Unavailable` says why not.
    pub(crate) async fn check_writable(&self) -> Result<()> {
        match self.write_health_row().await {
            Ok(()) => Ok(()),
            Err(e) => {
                if let StoreError::Unavailable { fault, .. } = &e {
                    self.note_fault(*fault);
                }
                Err(e)
            }
        }
    }

    async fn write_health_row(&self) -> Result<()> {
        query(
            "INSERT INTO health (id, checked_at) VALUES (1, ?) \
             ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at",
        )
        .bind(now())
        .execute(self)
        .await?;
        Ok(())
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

    /// The database's health for `/healthz`, within [`PROBE_WAIT`] (plus the wait for a probe
    /// already running), whatever the server does: one write on the probe's own connection,
    /// then the pending count, an indexed count whatever the history's length.
    pub async fn health(&self) -> Result<Health> {
        let mut reading = self.reading.lock().await;
        if let Some((health, at)) = reading.last
            && at.elapsed() < READING_FRESH
        {
            return Ok(health);
        }
        let (mut probe, started) = match reading.running.take() {
            Some(running) => running,
            None => {
                let me = self.clone();
                (
                    tokio::spawn(async move { me.probe_now().await }),
                    Instant::now(),
                )
            }
        };
        match tokio::time::timeout(PROBE_WAIT, &mut probe).await {
            Ok(joined) => {
                let health = joined
                    .map_err(|e| StoreError::Corrupt(format!("the health probe stopped: {e}")))??;
                reading.last = Some((health, Instant::now()));
                Ok(health)
            }
            Err(_) => {
                let silent = started.elapsed();
                reading.running = Some((probe, started));
                if self.is_postgres() && silent >= SILENT_AS_DOWN {
                    return Ok(Health {
                        fault: Some(StorageFault::Unreachable),
                        pending: None,
                    });
                }
                // Not long enough to call it down: what was known, without a count.
                let fault = reading
                    .last
                    .and_then(|(h, _)| h.fault)
                    .or_else(|| self.recent_fault(FAULT_MEMORY));
                Ok(Health {
                    fault,
                    pending: None,
                })
            }
        }
    }

    async fn probe_now(&self) -> Result<Health> {
        let deadline = tokio::time::Instant::now() + PROBE_GIVE_UP;
        let on = self.probe.as_deref().unwrap_or(self);
        let written = tokio::time::timeout_at(deadline, on.write_health_row()).await;
        let fault = match written {
            Ok(Ok(())) => {
                // The write went through, so the server is reachable and the database
                // writable: a fault of that kind a request noted is over (it would otherwise
                // stay on show for a minute after the server came back). A full disk or an
                // I/O error may still fail bigger writes, so those are kept for a while.
                let mut noted = crate::util::lock(&self.fault);
                if noted.is_some_and(|(f, _)| {
                    matches!(f, StorageFault::Unreachable | StorageFault::ReadOnly)
                }) {
                    *noted = None;
                }
                drop(noted);
                self.recent_fault(FAULT_MEMORY)
            }
            Ok(Err(StoreError::Unavailable { fault, .. })) => {
                self.note_fault(fault);
                Some(fault)
            }
            Ok(Err(e)) => return Err(e),
            // A server that does not take a one-row write in that long is as good as down for
            // whoever asks. SQLite taking that long is a busy writer (it waits its turn): no
            // fault of its own.
            Err(_) if self.is_postgres() => Some(StorageFault::Unreachable),
            Err(_) => self.recent_fault(FAULT_MEMORY),
        };
        let pending = match fault {
            Some(_) => None,
            None => match tokio::time::timeout_at(deadline, on.pending_count()).await {
                Ok(Ok(n)) => Some(n),
                Ok(Err(StoreError::Unavailable { .. })) | Err(_) => None,
                Ok(Err(e)) => return Err(e),
            },
        };
        Ok(Health { fault, pending })
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
            Err(source) => Err(StoreError::Migrate {
                path: self.path.to_path_buf(),
                source,
            }),
        }
    }

    /// The highest schema version this build knows (the same on both engines).
    pub(crate) fn schema_version() -> i64 {
        SQLITE_MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
    }

    /// The highest schema version applied to this database.
    pub(crate) async fn applied_version(&self) -> Result<i64> {
        let v: Option<i64> =
            query_scalar("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
                .fetch_one(self)
                .await?;
        Ok(v.unwrap_or(0))
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
    pub(crate) fn is_closed(&self) -> bool {
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
async fn release_check(
    conn: &mut sqlx::SqliteConnection,
) -> std::result::Result<bool, sqlx::Error> {
    use sqlx::Connection as _;
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

    async fn json_rows<T: WithJson>(&self, sql: &'static str) -> Result<Vec<T>> {
        let rows = query(sql).fetch_all(self).await?;
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
pub(crate) fn new_id() -> String {
    let u = uuid::Uuid::new_v4();
    hex::encode(&u.as_bytes()[..8])
}

#[cfg(test)]
mod tests;
