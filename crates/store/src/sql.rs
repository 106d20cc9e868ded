//! The seam between the store's statements and its two engines, SQLite and PostgreSQL.
//!
//! Owns: the engine a store runs on, statements with their values bound in a form neither
//! engine owns ([`Arg`]), running them on either engine's pool or transaction, and rows read
//! back from either. A statement is written once, with SQLite's `?` / `?NNN` placeholders;
//! PostgreSQL runs the same text renumbered `$N` ([`numbered`], SQLite's own numbering rule).
//! Where the dialects differ, a statement carries PostgreSQL's text beside it ([`Query::pg`]).
//! Why not `sqlx::Any`: PostgreSQL rejects its `?` placeholders, and it has no time type.
//! Must not: hold the SQL of any table; the statements stay with their tables.

use chrono::{DateTime, SubsecRound as _, Utc};
use sqlx::postgres::{PgArguments, PgPool, PgRow};
use sqlx::sqlite::{SqliteArguments, SqlitePool, SqliteRow};
use sqlx::{AssertSqlSafe, Postgres, Row as _, Sqlite};
use std::borrow::Cow;
use std::marker::PhantomData;

/// The database a store runs on.
#[derive(Clone, Debug)]
pub(crate) enum Engine {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// A bound value, in the few types the store binds; `None` is SQL NULL of that type
/// (PostgreSQL wants a type even for NULL).
#[derive(Debug, Clone)]
pub(crate) enum Arg {
    Text(Option<String>),
    Int(Option<i64>),
    Real(Option<f64>),
    Bool(Option<bool>),
    Time(Option<DateTime<Utc>>),
    Bytes(Option<Vec<u8>>),
}

/// A Rust value a statement can bind.
pub(crate) trait Bind {
    fn arg(&self) -> Arg;
    /// NULL of this type.
    fn null() -> Arg;
}

macro_rules! bind_as {
    ($variant:ident: $($t:ty => |$v:ident| $e:expr),+ $(,)?) => {
        $(impl Bind for $t {
            fn arg(&self) -> Arg {
                let $v = self;
                Arg::$variant(Some($e))
            }
            fn null() -> Arg {
                Arg::$variant(None)
            }
        })+
    };
}

bind_as!(Text: String => |v| v.clone(), str => |v| v.to_string());
bind_as!(Int: i64 => |v| *v, i32 => |v| i64::from(*v), u32 => |v| i64::from(*v));
bind_as!(Real: f64 => |v| *v);
bind_as!(Bool: bool => |v| *v);
bind_as!(Bytes: Vec<u8> => |v| v.clone(), [u8] => |v| v.to_vec());
// Times are kept to the microsecond on both engines (PostgreSQL's precision): a time read back
// equals the time written, whichever engine stored it.
bind_as!(Time: DateTime<Utc> => |v| v.trunc_subsecs(6));

impl<T: Bind + ?Sized> Bind for &T {
    fn arg(&self) -> Arg {
        (**self).arg()
    }
    fn null() -> Arg {
        T::null()
    }
}

impl<T: Bind> Bind for Option<T> {
    fn arg(&self) -> Arg {
        match self {
            Some(v) => v.arg(),
            None => T::null(),
        }
    }
    fn null() -> Arg {
        T::null()
    }
}

/// A value a column can be read as on both engines.
pub(crate) trait Value:
    for<'r> sqlx::Decode<'r, Sqlite>
    + sqlx::Type<Sqlite>
    + for<'r> sqlx::Decode<'r, Postgres>
    + sqlx::Type<Postgres>
    + Send
    + Unpin
{
}
impl<T> Value for T where
    T: for<'r> sqlx::Decode<'r, Sqlite>
        + sqlx::Type<Sqlite>
        + for<'r> sqlx::Decode<'r, Postgres>
        + sqlx::Type<Postgres>
        + Send
        + Unpin
{
}

/// A type rows can be read into on both engines (`#[derive(sqlx::FromRow)]` gives both).
pub(crate) trait Record:
    for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin
{
}
impl<T> Record for T where
    T: for<'r> sqlx::FromRow<'r, SqliteRow> + for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin
{
}

/// A row as either engine returned it.
pub(crate) enum DbRow {
    Sqlite(SqliteRow),
    Postgres(PgRow),
}

impl DbRow {
    /// The column `name`, decoded.
    pub(crate) fn get<T: Value>(&self, name: &str) -> Result<T, sqlx::Error> {
        match self {
            DbRow::Sqlite(r) => r.try_get(name),
            DbRow::Postgres(r) => r.try_get(name),
        }
    }

    fn get_at<T: Value>(&self, index: usize) -> Result<T, sqlx::Error> {
        match self {
            DbRow::Sqlite(r) => r.try_get(index),
            DbRow::Postgres(r) => r.try_get(index),
        }
    }

    /// The whole row as a `T`.
    pub(crate) fn read<T: Record>(&self) -> Result<T, sqlx::Error> {
        match self {
            DbRow::Sqlite(r) => T::from_row(r),
            DbRow::Postgres(r) => T::from_row(r),
        }
    }
}

/// An open transaction on either engine; dropped without [`Tx::commit`], it rolls back.
pub(crate) enum Tx {
    Sqlite(sqlx::Transaction<'static, Sqlite>),
    Postgres(sqlx::Transaction<'static, Postgres>),
}

impl Tx {
    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(t) => t.commit().await,
            Tx::Postgres(t) => t.commit().await,
        }
    }

    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(t) => t.rollback().await,
            Tx::Postgres(t) => t.rollback().await,
        }
    }
}

/// Where a statement runs: on the pool (a connection of its own, autocommit) or inside a
/// transaction.
pub(crate) enum On<'a> {
    Pool(&'a Engine),
    Tx(&'a mut Tx),
}

impl<'a> From<&'a Engine> for On<'a> {
    fn from(e: &'a Engine) -> On<'a> {
        On::Pool(e)
    }
}

impl<'a> From<&'a super::Store> for On<'a> {
    fn from(s: &'a super::Store) -> On<'a> {
        On::Pool(s.engine())
    }
}

impl<'a> From<&'a mut Tx> for On<'a> {
    fn from(t: &'a mut Tx) -> On<'a> {
        On::Tx(t)
    }
}

/// A statement and its bound values.
#[derive(Debug, Clone)]
pub(crate) struct Query {
    sql: Cow<'static, str>,
    /// PostgreSQL's own text, where the dialects differ (with `$N` placeholders).
    pg: Option<Cow<'static, str>>,
    args: Vec<Arg>,
    persistent: bool,
}

/// A statement written once for both engines (SQLite's placeholders).
pub(crate) fn query(sql: impl Into<Cow<'static, str>>) -> Query {
    Query {
        sql: sql.into(),
        pg: None,
        args: Vec::new(),
        persistent: true,
    }
}

/// A statement whose rows are read as `T`.
pub(crate) fn query_as<T>(sql: impl Into<Cow<'static, str>>) -> QueryAs<T> {
    QueryAs {
        query: query(sql),
        row: PhantomData,
    }
}

/// A statement whose rows are one value each.
pub(crate) fn query_scalar<T>(sql: impl Into<Cow<'static, str>>) -> QueryScalar<T> {
    QueryScalar {
        query: query(sql),
        value: PhantomData,
    }
}

impl Query {
    pub(crate) fn bind(self, value: impl Bind) -> Query {
        self.bind_arg(value.arg())
    }

    /// A value already in its neutral form (see [`Values::push_arg`]).
    pub(crate) fn bind_arg(mut self, value: Arg) -> Query {
        self.args.push(value);
        self
    }

    /// PostgreSQL's text of this statement, where the dialects differ.
    pub(crate) fn pg(mut self, sql: impl Into<Cow<'static, str>>) -> Query {
        self.pg = Some(sql.into());
        self
    }

    /// Whether the connection keeps the statement prepared (not for statements sized by data).
    pub(crate) fn persistent(mut self, keep: bool) -> Query {
        self.persistent = keep;
        self
    }

    fn on_sqlite(
        self,
    ) -> Result<sqlx::query::Query<'static, Sqlite, SqliteArguments>, sqlx::Error> {
        let args: SqliteArguments = arguments(self.args)?;
        Ok(sqlx::query_with(AssertSqlSafe(self.sql), args).persistent(self.persistent))
    }

    fn on_pg(self) -> Result<sqlx::query::Query<'static, Postgres, PgArguments>, sqlx::Error> {
        let args: PgArguments = arguments(self.args)?;
        let sql = match self.pg {
            Some(pg) => pg,
            None => Cow::Owned(numbered(&self.sql)),
        };
        Ok(sqlx::query_with(AssertSqlSafe(sql), args).persistent(self.persistent))
    }

    /// Run it; how many rows it changed.
    pub(crate) async fn execute(self, on: impl Into<On<'_>>) -> Result<u64, sqlx::Error> {
        Ok(match on.into() {
            On::Pool(Engine::Sqlite(p)) => self.on_sqlite()?.execute(p).await?.rows_affected(),
            On::Pool(Engine::Postgres(p)) => self.on_pg()?.execute(p).await?.rows_affected(),
            On::Tx(Tx::Sqlite(t)) => self.on_sqlite()?.execute(&mut **t).await?.rows_affected(),
            On::Tx(Tx::Postgres(t)) => self.on_pg()?.execute(&mut **t).await?.rows_affected(),
        })
    }

    /// Run it to its end; every row it returned.
    pub(crate) async fn fetch_all(self, on: impl Into<On<'_>>) -> Result<Vec<DbRow>, sqlx::Error> {
        Ok(match on.into() {
            On::Pool(Engine::Sqlite(p)) => {
                wrap(self.on_sqlite()?.fetch_all(p).await?, DbRow::Sqlite)
            }
            On::Pool(Engine::Postgres(p)) => {
                wrap(self.on_pg()?.fetch_all(p).await?, DbRow::Postgres)
            }
            On::Tx(Tx::Sqlite(t)) => {
                wrap(self.on_sqlite()?.fetch_all(&mut **t).await?, DbRow::Sqlite)
            }
            On::Tx(Tx::Postgres(t)) => {
                wrap(self.on_pg()?.fetch_all(&mut **t).await?, DbRow::Postgres)
            }
        })
    }

    /// The first row, if any. A read only (see `write.rs`).
    pub(crate) async fn fetch_optional(
        self,
        on: impl Into<On<'_>>,
    ) -> Result<Option<DbRow>, sqlx::Error> {
        Ok(match on.into() {
            On::Pool(Engine::Sqlite(p)) => self
                .on_sqlite()?
                .fetch_optional(p)
                .await?
                .map(DbRow::Sqlite),
            On::Pool(Engine::Postgres(p)) => {
                self.on_pg()?.fetch_optional(p).await?.map(DbRow::Postgres)
            }
            On::Tx(Tx::Sqlite(t)) => self
                .on_sqlite()?
                .fetch_optional(&mut **t)
                .await?
                .map(DbRow::Sqlite),
            On::Tx(Tx::Postgres(t)) => self
                .on_pg()?
                .fetch_optional(&mut **t)
                .await?
                .map(DbRow::Postgres),
        })
    }
}

/// A value each engine can bind.
trait Encodes<DB: sqlx::Database>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB> {}
impl<DB: sqlx::Database, T: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>> Encodes<DB> for T {}

/// The bound values as one engine's arguments.
fn arguments<A>(values: Vec<Arg>) -> Result<A, sqlx::Error>
where
    A: sqlx::Arguments,
    Option<String>: Encodes<A::Database>,
    Option<i64>: Encodes<A::Database>,
    Option<f64>: Encodes<A::Database>,
    Option<bool>: Encodes<A::Database>,
    Option<DateTime<Utc>>: Encodes<A::Database>,
    Option<Vec<u8>>: Encodes<A::Database>,
{
    let mut args = A::default();
    for a in values {
        match a {
            Arg::Text(v) => args.add(v),
            Arg::Int(v) => args.add(v),
            Arg::Real(v) => args.add(v),
            Arg::Bool(v) => args.add(v),
            Arg::Time(v) => args.add(v),
            Arg::Bytes(v) => args.add(v),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    Ok(args)
}

fn wrap<R>(rows: Vec<R>, f: fn(R) -> DbRow) -> Vec<DbRow> {
    rows.into_iter().map(f).collect()
}

/// A statement whose rows are read as `T`.
pub(crate) struct QueryAs<T> {
    query: Query,
    row: PhantomData<fn() -> T>,
}

impl<T: Record> QueryAs<T> {
    pub(crate) fn bind(self, value: impl Bind) -> Self {
        QueryAs {
            query: self.query.bind(value),
            row: PhantomData,
        }
    }

    pub(crate) fn bind_arg(self, value: Arg) -> Self {
        QueryAs {
            query: self.query.bind_arg(value),
            row: PhantomData,
        }
    }

    pub(crate) fn pg(self, sql: impl Into<Cow<'static, str>>) -> Self {
        QueryAs {
            query: self.query.pg(sql),
            row: PhantomData,
        }
    }

    pub(crate) fn persistent(self, keep: bool) -> Self {
        QueryAs {
            query: self.query.persistent(keep),
            row: PhantomData,
        }
    }

    pub(crate) async fn fetch_all(self, on: impl Into<On<'_>>) -> Result<Vec<T>, sqlx::Error> {
        self.query
            .fetch_all(on)
            .await?
            .iter()
            .map(DbRow::read)
            .collect()
    }

    pub(crate) async fn fetch_optional(
        self,
        on: impl Into<On<'_>>,
    ) -> Result<Option<T>, sqlx::Error> {
        self.query
            .fetch_optional(on)
            .await?
            .as_ref()
            .map(DbRow::read)
            .transpose()
    }

    pub(crate) async fn fetch_one(self, on: impl Into<On<'_>>) -> Result<T, sqlx::Error> {
        self.fetch_optional(on)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }
}

/// A statement whose rows are one value each.
pub(crate) struct QueryScalar<T> {
    query: Query,
    value: PhantomData<fn() -> T>,
}

impl<T: Value> QueryScalar<T> {
    pub(crate) fn bind(self, value: impl Bind) -> Self {
        QueryScalar {
            query: self.query.bind(value),
            value: PhantomData,
        }
    }

    /// PostgreSQL's text of this statement, where the dialects differ.
    pub(crate) fn pg(self, sql: impl Into<Cow<'static, str>>) -> Self {
        QueryScalar {
            query: self.query.pg(sql),
            value: PhantomData,
        }
    }

    pub(crate) async fn fetch_all(self, on: impl Into<On<'_>>) -> Result<Vec<T>, sqlx::Error> {
        let rows = self.query.fetch_all(on).await?;
        rows.iter().map(|r| r.get_at(0)).collect()
    }

    pub(crate) async fn fetch_optional(
        self,
        on: impl Into<On<'_>>,
    ) -> Result<Option<T>, sqlx::Error> {
        let row = self.query.fetch_optional(on).await?;
        row.as_ref().map(|r| r.get_at(0)).transpose()
    }

    pub(crate) async fn fetch_one(self, on: impl Into<On<'_>>) -> Result<T, sqlx::Error> {
        self.fetch_optional(on)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }
}

/// A statement put together from pieces, with a `VALUES` list of many rows (a burst).
///
/// Its placeholders are bare `?`, numbered by position (and as `$N` on PostgreSQL by
/// [`numbered`]): SQLite keeps the names of numbered ones (`?N`) in a list it searches from the
/// start for every `sqlite3_bind_parameter_name`, which sqlx calls once per value — quadratic
/// in a 5,500-value burst insert, where it was most of the time a burst of 1,000 jobs took to
/// fire (BENCHMARKS.md §16).
pub(crate) struct Builder {
    sql: String,
    args: Vec<Arg>,
}

impl Builder {
    pub(crate) fn new(sql: &str) -> Builder {
        Builder {
            sql: sql.to_string(),
            args: Vec::new(),
        }
    }

    pub(crate) fn push(&mut self, sql: &str) -> &mut Builder {
        self.sql.push_str(sql);
        self
    }

    /// One bound value outside a `VALUES` list (a condition after it).
    pub(crate) fn push_bind(&mut self, value: impl Bind) -> &mut Builder {
        self.args.push(value.arg());
        self.sql.push('?');
        self
    }

    /// `VALUES (…), (…)`: one row per item, its values bound by `row`.
    pub(crate) fn push_values<I: IntoIterator>(
        &mut self,
        items: I,
        mut row: impl FnMut(&mut Values<'_>, I::Item),
    ) -> &mut Builder {
        self.sql.push_str("VALUES ");
        for (i, item) in items.into_iter().enumerate() {
            if i > 0 {
                self.sql.push_str(", ");
            }
            self.sql.push('(');
            let mut values = Values {
                builder: self,
                first: true,
            };
            row(&mut values, item);
            self.sql.push(')');
        }
        self
    }

    pub(crate) fn build(self) -> Query {
        Query {
            sql: Cow::Owned(self.sql),
            pg: None,
            args: self.args,
            persistent: true,
        }
    }

    pub(crate) fn build_query_as<T>(self) -> QueryAs<T> {
        QueryAs {
            query: self.build(),
            row: PhantomData,
        }
    }
}

/// The values of one row of [`Builder::push_values`].
pub(crate) struct Values<'a> {
    builder: &'a mut Builder,
    first: bool,
}

impl Values<'_> {
    pub(crate) fn push_bind(&mut self, value: impl Bind) -> &mut Self {
        self.push_arg(value.arg())
    }

    /// A value already in its neutral form (a row copied from one engine to the other).
    pub(crate) fn push_arg(&mut self, value: Arg) -> &mut Self {
        if !self.first {
            self.builder.sql.push_str(", ");
        }
        self.first = false;
        self.builder.args.push(value);
        self.builder.sql.push('?');
        self
    }
}

/// SQLite's placeholders as PostgreSQL's: `?NNN` → `$NNN`, and a bare `?` → one more than the
/// highest number so far (SQLite's rule). Quoted text and identifiers are left alone.
pub(crate) fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut highest = 0u32;
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => {
                quote = None;
                out.push(c);
            }
            (Some(_), c) => out.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                out.push(c);
            }
            (None, '?') => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                let n = match digits.parse::<u32>() {
                    Ok(n) => n,
                    Err(_) => highest + 1,
                };
                highest = highest.max(n);
                out.push('$');
                out.push_str(&n.to_string());
            }
            (None, c) => out.push(c),
        }
    }
    out
}

#[cfg(test)]
#[path = "sql_tests.rs"]
mod tests;
