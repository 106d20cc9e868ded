//! What can go wrong in the store, and which of it means the storage itself failed (a full
//! disk, a read-only database, an I/O error, an unreachable server): those become
//! [`StoreError::Unavailable`] with a [`StorageFault`] that `/healthz` and the API report.

use std::path::PathBuf;

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
    /// SQLite says the file is not a database, or a damaged one.
    #[error(
        "the database {path} is damaged ({source}): stop the daemon, keep a copy of the file, then restore it from a backup, or move it aside to start with an empty database"
    )]
    Damaged { path: PathBuf, source: sqlx::Error },
    #[error(
        "cannot connect to the PostgreSQL database {url}: {source}; check that the server is running and reachable from here, that the database exists, and the user and password (in storage.url as ${{VAR}}, or PGPASSWORD)"
    )]
    Connect { url: String, source: sqlx::Error },
    #[error("{0}")]
    BadUrl(String),
    #[error(
        "a hermes-agent daemon is using the database {url}; stop every daemon on it first (`systemctl --user stop hermes-agent` on each machine)"
    )]
    InUse { url: String },
    #[error(
        "`hermes-agent storage migrate` is copying into the database {url}; start the daemon once it has finished"
    )]
    InMaintenance { url: String },
    /// A write for work this node claimed under a lease it no longer holds.
    #[error(transparent)]
    Fenced(#[from] super::Fenced),
    #[error(
        "node id {node} is in use by another hermes-agent daemon ({holder}, seen {seconds} s ago) on the same database; each daemon needs its own data dir (the node id is kept there in node-id)"
    )]
    NodeInUse {
        node: String,
        holder: String,
        seconds: i64,
    },
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
    #[error("the database {} ({fault}): {detail}; {}", fault.headline(), fault.hint())]
    Unavailable { fault: StorageFault, detail: String },
    #[error("database error: {0}")]
    Sql(sqlx::Error),
    #[error(
        "the database {target} is not empty ({table} has {rows} rows); migrate only into a new, empty database (createdb one)"
    )]
    NotEmpty {
        target: String,
        table: &'static str,
        rows: i64,
    },
    #[error(
        "the copy of {table} does not match: {source_rows} rows in the data dir, {target_rows} in the target; nothing else changed in the data dir, drop the target database and try again"
    )]
    CopyMismatch {
        table: &'static str,
        source_rows: i64,
        target_rows: i64,
    },
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
    /// The database server cannot be reached (PostgreSQL: refused, lost, timed out).
    Unreachable,
}

impl StorageFault {
    /// What failed, as the first words of a message: a server away stops reads as well as
    /// writes.
    pub fn headline(self) -> &'static str {
        match self {
            StorageFault::Unreachable => "cannot be reached",
            StorageFault::DiskFull | StorageFault::ReadOnly | StorageFault::Io => {
                "cannot be written"
            }
        }
    }

    /// What the person can do about it.
    pub fn hint(self) -> &'static str {
        match self {
            StorageFault::DiskFull => "free disk space (or raise the quota) and try again",
            StorageFault::ReadOnly => {
                "make the file and its directory writable by this user, or choose another --data-dir"
            }
            StorageFault::Io => {
                "the disk reported an I/O error; see the daemon's log and the system's"
            }
            StorageFault::Unreachable => {
                "check that the PostgreSQL server in storage.url is running and reachable from \
                 here, and that the user and password are right; the daemon keeps trying"
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
            StorageFault::Unreachable => "database unreachable",
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

/// The SQLite result codes (primary part) and PostgreSQL's SQLSTATEs that mean the storage
/// itself failed, and the connection failures that mean the server cannot be reached.
fn storage_fault(e: &sqlx::Error) -> Option<StorageFault> {
    if let Some(fault) = postgres_fault(e) {
        return Some(fault);
    }
    const SQLITE_READONLY: i64 = 8;
    const SQLITE_IOERR: i64 = 10;
    const SQLITE_FULL: i64 = 13;
    const SQLITE_CANTOPEN: i64 = 14;
    match e {
        sqlx::Error::Database(db) => {
            db.try_downcast_ref::<sqlx::sqlite::SqliteError>()?;
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

/// The PostgreSQL errors that mean the storage failed (SQLSTATE class 53 and 58, a read-only
/// server) or the server cannot be reached.
fn postgres_fault(e: &sqlx::Error) -> Option<StorageFault> {
    match e {
        sqlx::Error::Database(db) => {
            let pg = db.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()?;
            match pg.code() {
                // disk_full, insufficient_resources' disk case
                "53100" => Some(StorageFault::DiskFull),
                // read_only_sql_transaction: a standby, or default_transaction_read_only
                "25006" => Some(StorageFault::ReadOnly),
                // io_error
                "58030" => Some(StorageFault::Io),
                // admin_shutdown, crash_shutdown, cannot_connect_now: the server is going away
                "57P01" | "57P02" | "57P03" => Some(StorageFault::Unreachable),
                code if code.starts_with("08") => Some(StorageFault::Unreachable),
                _ => None,
            }
        }
        sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) => Some(StorageFault::Unreachable),
        sqlx::Error::Io(io) if is_connection_loss(io) => Some(StorageFault::Unreachable),
        _ => None,
    }
}

fn is_connection_loss(io: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        io.kind(),
        ConnectionRefused
            | ConnectionReset
            | ConnectionAborted
            | BrokenPipe
            | UnexpectedEof
            | TimedOut
            | NotConnected
            | HostUnreachable
            | NetworkUnreachable
    )
}

/// The error opening the SQLite database at `path`: [`StoreError::Damaged`] when SQLite says
/// the file is corrupt or no database at all.
pub(crate) fn opening(path: &std::path::Path, source: sqlx::Error) -> StoreError {
    let path = path.to_path_buf();
    if damaged(&source) {
        StoreError::Damaged { path, source }
    } else {
        StoreError::Open { path, source }
    }
}

/// SQLite's "database disk image is malformed" and "file is not a database".
pub(crate) fn damaged(e: &sqlx::Error) -> bool {
    const SQLITE_CORRUPT: i64 = 11;
    const SQLITE_NOTADB: i64 = 26;
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_none() {
        return false;
    }
    let code = db.code().and_then(|c| c.parse::<i64>().ok());
    matches!(code.map(|c| c & 0xff), Some(SQLITE_CORRUPT | SQLITE_NOTADB))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_away_is_not_called_unwritable() {
        for (fault, starts) in [
            (
                StorageFault::Unreachable,
                "the database cannot be reached (database unreachable)",
            ),
            (
                StorageFault::DiskFull,
                "the database cannot be written (disk full)",
            ),
        ] {
            let e = StoreError::Unavailable {
                fault,
                detail: "why".into(),
            };
            assert!(e.to_string().starts_with(starts), "{e}");
        }
    }
}
