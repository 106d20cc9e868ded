//! PostgreSQL as the store's engine: opening it from `storage.url` (the password from the
//! environment), which of its errors mean the storage failed, and the lock that keeps daemons
//! and a `storage migrate` copying into the database apart.
//!
//! Must not: hold the SQL of any table (that is with the tables, shared with SQLite).

use super::{Engine, Result, Store, StoreError, StoreOptions};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

/// `storage.url` cannot be used as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PgUrlError {
    #[error(
        "storage.url '{url}' is not a PostgreSQL URL: {why} (expected postgres://USER@HOST:PORT/DATABASE; a password with characters such as @ : / must be percent-encoded)"
    )]
    Invalid { url: String, why: String },
}

/// `url` from the settings (its `${VAR}`s already expanded from the environment when they were
/// read, an unset one reported there), checked: what it connects to, or why it cannot be used.
pub fn parse_url(url: &str) -> std::result::Result<PgConnectOptions, PgUrlError> {
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(PgUrlError::Invalid {
            url: redact_url(url),
            why: "it must start with postgres://".into(),
        });
    }
    let (supported, _) = supported_only(url);
    PgConnectOptions::from_str(&supported).map_err(|e| PgUrlError::Invalid {
        url: redact_url(url),
        why: e.to_string(),
    })
}

/// The query parameters sqlx reads; it logs any other one with its value, which for a libpq
/// parameter such as `sslpassword` is a secret.
const SUPPORTED: [&str; 18] = [
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "host",
    "hostaddr",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "options",
];

/// `url` without the query parameters sqlx does not read, and their names (never their
/// values): those are dropped here, said once by [`Store::open_postgres`] without the value,
/// instead of logged by sqlx with it.
fn supported_only(url: &str) -> (String, Vec<String>) {
    let Some((base, query)) = url.split_once('?') else {
        return (url.to_string(), Vec::new());
    };
    let (query, fragment) = match query.split_once('#') {
        Some((q, f)) => (q, Some(f)),
        None => (query, None),
    };
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let key = decoded(pair.split_once('=').map_or(pair, |(k, _)| k));
        // `options[NAME]` is matched by its prefix.
        let known = SUPPORTED.contains(&key.as_str()) || key.starts_with("options[");
        if known {
            kept.push(pair);
        } else {
            dropped.push(key);
        }
    }
    let mut out = base.to_string();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    (out, dropped)
}

/// The connection string for messages: every credential it can carry replaced by `***` — the
/// URL's `user:password@`, and query parameters such as `?password=` or `?sslpassword=` (any
/// name with a secret word in it, see [`is_secret_parameter`]); a libpq `key=value` string
/// likewise. Text that parses as neither is not shown at all: a connection string mistyped
/// could still hold a password somewhere a lenient reader would miss.
pub fn redact_url(url: &str) -> String {
    let url = url.trim();
    if url.contains("://") {
        return redact_uri(url);
    }
    redact_key_values(url).unwrap_or_else(|| HIDDEN.to_string())
}

/// What [`redact_url`] shows for text it cannot read as a connection string.
const HIDDEN: &str = "(connection string not shown: it does not parse)";

/// Whether a connection parameter's value is a secret: `password`, `sslpassword` and any other
/// name with `password`, `passwd`, `pwd`, `token`, `secret` or `key` in it except the paths
/// libpq reads keys from (`sslkey`, `sslrootcert` and such are file names, worth showing).
pub(crate) fn is_secret_parameter(name: &str) -> bool {
    let name = name.trim().to_ascii_lowercase();
    const PATHS: [&str; 4] = ["sslkey", "sslcert", "sslrootcert", "passfile"];
    if PATHS.contains(&name.as_str()) {
        return false;
    }
    ["password", "passwd", "pwd", "token", "secret", "key"]
        .iter()
        .any(|word| name.contains(word))
}

fn redact_uri(url: &str) -> String {
    let Ok(mut u) = url::Url::parse(url) else {
        // Show the scheme, which says what was meant, and nothing a password could be in.
        let scheme = url.split("://").next().unwrap_or_default();
        return format!("{scheme}://{HIDDEN}");
    };
    if u.password().is_some() {
        // Only fails for URLs that cannot have a password, and this one has one.
        let _ = u.set_password(Some("***"));
    }
    // Rewritten piece by piece on the text as written, so what is shown reads as configured;
    // a name is compared decoded (`pass%77ord` is `password` to libpq).
    if let Some(query) = u.query().map(str::to_string) {
        let shown = query
            .split('&')
            .map(|piece| match piece.split_once('=') {
                Some((name, _)) if is_secret_parameter(&decoded(name)) => format!("{name}=***"),
                None if is_secret_parameter(&decoded(piece)) => format!("{piece}=***"),
                _ => piece.to_string(),
            })
            .collect::<Vec<_>>()
            .join("&");
        u.set_query(Some(&shown));
    }
    // A fragment has no meaning to libpq; it is only somewhere for a secret to hide.
    u.set_fragment(None);
    u.to_string()
}

/// A query parameter's name as libpq reads it: percent-decoded, `+` as a space.
fn decoded(name: &str) -> String {
    url::form_urlencoded::parse(name.as_bytes())
        .next()
        .map(|(k, _)| k.into_owned())
        .unwrap_or_default()
}

/// A libpq `key=value …` string (values optionally in single quotes, with `\'` and `\\`
/// escapes) with its secret values replaced; `None` when it is not one.
fn redact_key_values(dsn: &str) -> Option<String> {
    let mut out = Vec::new();
    let mut chars = dsn.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            break;
        }
        let mut key = String::new();
        while let Some(&c) = chars.peek() {
            if c == '=' || c.is_whitespace() {
                break;
            }
            key.push(c);
            chars.next();
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        if key.is_empty() || chars.next() != Some('=') {
            return None;
        }
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let mut value = String::new();
        if chars.peek() == Some(&'\'') {
            chars.next();
            loop {
                match chars.next()? {
                    '\'' => break,
                    '\\' => value.push(chars.next()?),
                    c => value.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                value.push(c);
                chars.next();
            }
        }
        let shown = if is_secret_parameter(&key) {
            "***".to_string()
        } else if value.is_empty() || value.contains(|c: char| c.is_whitespace() || c == '\'') {
            format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
        } else {
            value
        };
        out.push(format!("{key}={shown}"));
    }
    (!out.is_empty()).then(|| out.join(" "))
}

/// The connections a daemon keeps to PostgreSQL by default (the server's default limit is 100,
/// so five daemons fit with room for psql and backups).
const PG_CONNECTIONS: u32 = 16;
/// How long a statement waits for a connection: an unreachable server fails a request in
/// seconds, not after sqlx's default 30 s.
pub(crate) const PG_ACQUIRE: Duration = Duration::from_secs(5);

impl Store {
    /// Open the PostgreSQL database at `url` (without a password in it, libpq's `PGPASSWORD`
    /// and `~/.pgpass` are used, as by psql) and bring its schema up to date.
    pub async fn open_postgres(url: &str, opts: StoreOptions) -> Result<Store> {
        let shown = PathBuf::from(redact_url(url));
        let options = parse_url(url).map_err(|e| StoreError::BadUrl(e.to_string()))?;
        let (_, ignored) = supported_only(url);
        if !ignored.is_empty() {
            tracing::warn!(
                parameters = %ignored.join(", "),
                "storage.url: connection parameters the PostgreSQL driver does not support are ignored"
            );
        }
        let options = options.application_name("hermes-agent");
        let pool = PgPoolOptions::new()
            // A server takes many connections, and reads and writes run in parallel there:
            // SQLite's 4 would make a burst of firings queue for a connection.
            .max_connections(match opts.max_connections {
                0 => PG_CONNECTIONS,
                n => n,
            })
            .acquire_timeout(PG_ACQUIRE)
            .connect_with(options.clone())
            .await
            .map_err(|source| StoreError::Connect {
                url: shown.display().to_string(),
                source,
            })?;
        // Lazy: a doctor or a migration that never asks for health never opens it.
        let probe = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(super::PROBE_GIVE_UP)
            .connect_lazy_with(options.application_name("hermes-agent health"));
        let mut store = Store::new(Engine::Postgres(pool), &shown);
        store.probe = Some(std::sync::Arc::new(Store::new(
            Engine::Postgres(probe),
            &shown,
        )));
        store.migrate().await?;
        Ok(store)
    }

    /// Hold the database as one of the daemons using it, for as long as the lock lives:
    /// PostgreSQL's session advisory lock, shared, on a connection of its own. Daemons share
    /// it with each other; only a `storage migrate` copying into the database holds it alone.
    /// SQLite needs none (the data dir's lock file covers its database).
    pub async fn lock_for_daemon(&self) -> Result<Option<DaemonLock>> {
        self.lock_database(Hold::Daemon).await
    }

    /// Hold the database with no daemon on it (a `storage migrate` copying into it): refused
    /// while any daemon uses it, and no daemon starts until this is dropped.
    pub async fn lock_for_maintenance(&self) -> Result<Option<DaemonLock>> {
        self.lock_database(Hold::Maintenance).await
    }

    async fn lock_database(&self, hold: Hold) -> Result<Option<DaemonLock>> {
        let Engine::Postgres(pool) = &self.engine else {
            return Ok(None);
        };
        let url = self.path().display().to_string();
        let conn = match take_lock(pool, hold).await? {
            Some(conn) => conn,
            None => {
                return Err(match hold {
                    Hold::Daemon => StoreError::InMaintenance { url },
                    Hold::Maintenance => StoreError::InUse { url },
                });
            }
        };
        let keeper = tokio::spawn(keep_lock(pool.clone(), conn, url, hold));
        Ok(Some(DaemonLock { keeper }))
    }
}

/// Which hold on the database lock.
#[derive(Debug, Clone, Copy)]
enum Hold {
    /// One daemon among others: shared.
    Daemon,
    /// No daemon at all: exclusive.
    Maintenance,
}

/// The lock on a connection of its own, if it can be had now.
async fn take_lock(pool: &sqlx::PgPool, hold: Hold) -> Result<Option<sqlx::PgConnection>> {
    let mut conn = pool.acquire().await?.detach();
    let sql = match hold {
        Hold::Daemon => "SELECT pg_try_advisory_lock_shared($1)",
        Hold::Maintenance => "SELECT pg_try_advisory_lock($1)",
    };
    let (got,): (bool,) = sqlx::query_as(sql)
        .bind(DAEMON_LOCK_KEY)
        .fetch_one(&mut conn)
        .await?;
    Ok(got.then_some(conn))
}

/// How often the lock's connection is checked. A server restart ends the session and frees
/// its advisory lock: this is how soon it is taken again.
const LOCK_CHECK: Duration = Duration::from_secs(2);

/// Hold the lock for as long as this runs: check its connection, and when the session was
/// lost (the server restarted or cut it), take the lock again on a new one.
async fn keep_lock(pool: sqlx::PgPool, mut conn: sqlx::PgConnection, url: String, hold: Hold) {
    loop {
        tokio::time::sleep(LOCK_CHECK).await;
        if sqlx::query("SELECT 1").execute(&mut conn).await.is_ok() {
            continue;
        }
        // Lost: the server freed the lock with the session. Take it again once it answers.
        loop {
            match take_lock(&pool, hold).await {
                Ok(Some(again)) => {
                    tracing::info!(database = %url, "database lock taken again after the connection was lost");
                    conn = again;
                    break;
                }
                Ok(None) => {
                    tracing::error!(database = %url, ?hold, "the database lock was taken by a daemon or a `storage migrate` while the connection was lost; stop the migrate or the daemons");
                }
                Err(e) => {
                    tracing::debug!(database = %url, error = %e, "cannot take the database lock yet");
                }
            }
            tokio::time::sleep(LOCK_CHECK).await;
        }
    }
}

/// The advisory lock key of "daemons use this database" (any fixed number; sqlx's migrator
/// derives its own from the database's name).
const DAEMON_LOCK_KEY: i64 = 0x6865_726d_6573_0001;

/// A hold on the PostgreSQL database's lock, kept (taken again after a lost connection) until
/// dropped; then the connection closes and the server frees the lock at once — also when the
/// process dies.
#[derive(Debug)]
pub struct DaemonLock {
    keeper: tokio::task::JoinHandle<()>,
}

impl Drop for DaemonLock {
    fn drop(&mut self) {
        self.keeper.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_password_is_never_shown() {
        assert_eq!(
            redact_url("postgres://me:hunter2@db:5432/hermes"),
            "postgres://me:***@db:5432/hermes"
        );
        assert_eq!(
            redact_url("postgres://me@db/hermes"),
            "postgres://me@db/hermes"
        );
    }

    #[test]
    fn every_credential_a_connection_string_carries_is_masked() {
        let cases = [
            (
                "postgres://hermes@db/hermes?password=hunter2",
                "postgres://hermes@db/hermes?password=***",
            ),
            (
                "postgresql://me@db:5432/x?sslmode=require&sslpassword=hunter2&application_name=a",
                "postgresql://me@db:5432/x?sslmode=require&sslpassword=***&application_name=a",
            ),
            // Percent-encoded names are the same parameter to libpq.
            (
                "postgres://db/x?pass%77ord=hunter2",
                "postgres://db/x?pass%77ord=***",
            ),
            (
                "postgres://me:hunter2@db/x?PASSWORD=hunter2&auth_token=hunter2",
                "postgres://me:***@db/x?PASSWORD=***&auth_token=***",
            ),
            // Paths to keys are not secrets, and say which key is meant.
            (
                "postgres://db/x?sslkey=/etc/k.pem&passfile=/p",
                "postgres://db/x?sslkey=/etc/k.pem&passfile=/p",
            ),
            ("postgres://db/x#hunter2", "postgres://db/x"),
            (
                "host=db port=5432 user=me password=hunter2 dbname=x",
                "host=db port=5432 user=me password=*** dbname=x",
            ),
            (
                "host = db password = 'hunter 2 \\' x' sslpassword=hunter2",
                "host=db password=*** sslpassword=***",
            ),
        ];
        for (url, shown) in cases {
            let got = redact_url(url);
            assert_eq!(got, shown, "{url}");
            assert!(!got.contains("hunter"), "{url} shown as {got}");
        }
        // Text that is no connection string is not shown: it may still hold a password.
        for url in [
            "postgres://me:hunter2@[db/x",
            "hunter2",
            "password='hunter2",
        ] {
            let got = redact_url(url);
            assert!(!got.contains("hunter"), "{url} shown as {got}");
            assert!(got.contains("not shown"), "{got}");
        }
    }

    #[test]
    fn parameters_the_driver_does_not_read_are_dropped_by_name_never_shown() {
        let (kept, dropped) = supported_only(
            "postgres://me@db:5432/x?sslmode=require&sslpassword=hunter2&options[search_path]=a&x#f",
        );
        assert_eq!(
            kept,
            "postgres://me@db:5432/x?sslmode=require&options[search_path]=a#f"
        );
        assert_eq!(dropped, ["sslpassword", "x"]);
        // Keys as sqlx reads them: percent-escapes decoded.
        let escaped = "postgres://me@db/x?options%5Bsynchronous_commit%5D=local&ssl%70assword=y";
        let (kept, dropped) = supported_only(escaped);
        assert_eq!(
            (kept.as_str(), dropped.as_slice()),
            (
                "postgres://me@db/x?options%5Bsynchronous_commit%5D=local",
                &["sslpassword".to_string()][..]
            )
        );
        assert!(parse_url("postgres://me@db/x?sslpassword=hunter2").is_ok());
        let (kept, dropped) = supported_only("postgres://me@db/x?sslpassword=hunter2");
        assert_eq!((kept.as_str(), dropped.len()), ("postgres://me@db/x", 1));
    }

    #[test]
    fn a_url_that_is_not_postgres_is_refused_with_the_form_expected() {
        let err = parse_url("mysql://me@db/x").unwrap_err().to_string();
        assert!(err.contains("postgres://USER@HOST"), "{err}");
    }
}
