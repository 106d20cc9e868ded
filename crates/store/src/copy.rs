//! Moving up: every row of one store copied into another, empty one (`hermes-agent storage
//! migrate --to postgres://…` copies a SQLite data dir into PostgreSQL), in one transaction on
//! the target, then counted on both sides.
//!
//! Owns: the list of tables in the order their references allow, each column's type, the
//! numbered ids' sequences on PostgreSQL after the copy, and the tables left behind, with why.
//! Must not: change the source (it is only read), or write into a target that has rows.

use super::sql::{Arg, Builder, DbRow};
use super::{Engine, Result, Store, StoreError, query, query_scalar};
use chrono::{DateTime, Utc};

/// How a column is read from the source and bound on the target.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Text,
    Int,
    Bool,
    Time,
    Bytes,
}

use Kind::{Bool, Bytes, Int, Text, Time};

/// A table, its columns and the order its rows are copied in (a sub-agent's task after its
/// parent, which it references).
struct Table {
    name: &'static str,
    columns: &'static [(&'static str, Kind)],
    order: &'static str,
    /// Its numbered id column, whose sequence must continue after the copied ids (PostgreSQL).
    identity: Option<&'static str>,
}

/// Every table, each after those it references.
#[rustfmt::skip]
const TABLES: &[Table] = &[
    Table {
        name: "tasks",
        columns: &[
            ("id", Text), ("state", Text), ("origin", Text), ("parent_id", Text),
            ("job_id", Text), ("profile", Text), ("task", Text), ("answer", Text),
            ("error", Text), ("reason", Text), ("parse_failures", Int), ("prompt_tokens", Int),
            ("completion_tokens", Int), ("created_at", Time), ("started_at", Time),
            ("finished_at", Time), ("waiting", Bool),
        ],
        order: "created_at, id",
        identity: None,
    },
    Table {
        name: "task_steps",
        columns: &[
            ("task_id", Text), ("seq", Int), ("step", Int), ("kind", Text), ("name", Text),
            ("request_tokens", Int), ("result_tokens", Int), ("arguments", Text),
            ("output", Text), ("error", Text), ("duration_ms", Int), ("created_at", Time),
            ("model", Text), ("fingerprint", Text), ("identity", Text),
        ],
        order: "task_id, seq",
        identity: None,
    },
    Table {
        name: "working_memory",
        columns: &[("key", Text), ("task_id", Text), ("content", Text), ("created_at", Time)],
        order: "key",
        identity: None,
    },
    Table {
        name: "jobs",
        columns: &[
            ("id", Text), ("name", Text), ("task", Text), ("schedule", Text),
            ("timezone", Text), ("notify", Text), ("profile", Text), ("origin", Text),
            ("precheck", Text), ("enabled", Bool), ("next_run_at", Time),
            ("running_task_id", Text), ("created_at", Time), ("pause_reason", Text),
            ("pre_approved", Text),
        ],
        order: "created_at, id",
        identity: None,
    },
    Table {
        name: "job_runs",
        columns: &[
            ("id", Int), ("job_id", Text), ("scheduled_at", Time), ("fired_at", Time),
            ("outcome", Text), ("task_id", Text), ("reason", Text), ("delivery", Text),
        ],
        order: "id",
        identity: Some("id"),
    },
    Table {
        name: "outbox",
        columns: &[
            ("id", Int), ("channel", Text), ("title", Text), ("body", Text), ("task_id", Text),
            ("job_id", Text), ("run_id", Int), ("state", Text), ("attempts", Int),
            ("last_error", Text), ("next_attempt_at", Time), ("created_at", Time),
            ("sent_at", Time), ("token", Text), ("recipient", Text), ("in_reply_to", Text),
            ("refs", Text), ("remote_id", Text),
        ],
        order: "id",
        identity: Some("id"),
    },
    Table {
        name: "chat_parts",
        columns: &[
            ("notice_id", Int), ("part", Int), ("remote_id", Text), ("sent_at", Time),
        ],
        order: "notice_id, part",
        identity: None,
    },
    Table {
        name: "facts",
        columns: &[
            ("id", Text), ("text", Text), ("norm", Text), ("tags", Text), ("source", Text),
            ("created_at", Time), ("updated_at", Time),
        ],
        order: "created_at, id",
        identity: None,
    },
    Table {
        name: "fact_vectors",
        columns: &[
            ("seq", Int), ("fact_id", Text), ("model", Text), ("dims", Int), ("vector", Bytes),
            ("created_at", Time),
        ],
        order: "seq",
        identity: Some("seq"),
    },
    Table {
        name: "snapshots",
        columns: &[("key", Text), ("content", Text), ("updated_at", Time)],
        order: "key",
        identity: None,
    },
    Table {
        name: "health",
        columns: &[("id", Int), ("checked_at", Time)],
        order: "id",
        identity: None,
    },
    Table {
        name: "inbox_messages",
        columns: &[
            ("id", Int), ("mailbox", Text), ("uid_validity", Int), ("uid", Int),
            ("message_id", Text), ("sender", Text), ("subject", Text), ("received_at", Time),
            ("state", Text), ("reason", Text), ("command", Text), ("command_state", Text),
            ("detail", Text), ("notice_id", Int), ("job_id", Text), ("task_id", Text),
            ("context", Text), ("refs", Text), ("reply_notice_id", Int), ("answered_at", Time),
            ("digest", Text), ("channel", Text), ("room", Text), ("thread_root", Text),
        ],
        order: "id",
        identity: Some("id"),
    },
    Table {
        name: "channel_cursors",
        columns: &[("channel", Text), ("position", Text), ("updated_at", Time)],
        order: "channel",
        identity: None,
    },
    Table {
        name: "inbox_watermarks",
        columns: &[
            ("mailbox", Text), ("uid_validity", Int), ("last_uid", Int), ("updated_at", Time),
        ],
        order: "mailbox, uid_validity",
        identity: None,
    },
    Table {
        name: "approvals",
        columns: &[
            ("id", Text), ("task_id", Text), ("tool", Text), ("arguments", Text),
            ("state", Text), ("reason", Text), ("created_at", Time), ("expires_at", Time),
            ("decided_at", Time), ("decided_by", Text), ("used_at", Time),
        ],
        order: "created_at, id",
        identity: None,
    },
    Table {
        name: "approval_notices",
        columns: &[("approval_id", Text), ("notice_id", Int)],
        order: "approval_id, notice_id",
        identity: None,
    },
    Table {
        name: "task_holds",
        columns: &[
            ("task_id", Text), ("checkpoint", Text), ("owner", Text), ("created_at", Time),
        ],
        order: "task_id",
        identity: None,
    },
    Table {
        name: "model_identities",
        columns: &[
            ("profile", Text), ("identity", Text), ("source", Text), ("first_seen_at", Time),
            ("last_seen_at", Time), ("verified_at", Time), ("verified_run", Int),
        ],
        order: "profile, identity",
        identity: None,
    },
    Table {
        name: "model_changes",
        columns: &[
            ("id", Int), ("profile", Text), ("old_identity", Text), ("new_identity", Text),
            ("old_verified", Bool), ("action", Text), ("paused_jobs", Text),
            ("eval_run_id", Int), ("seen_at", Time), ("flap_of", Int),
        ],
        order: "id",
        identity: Some("id"),
    },
    Table {
        name: "eval_runs",
        columns: &[
            ("id", Int), ("profile", Text), ("identity", Text), ("trigger", Text),
            ("started_at", Time), ("finished_at", Time), ("passed", Int), ("failed", Int),
        ],
        order: "id",
        identity: Some("id"),
    },
    Table {
        name: "eval_results",
        columns: &[
            ("run_id", Int), ("seq", Int), ("case_name", Text), ("profile", Text),
            ("identity", Text), ("verdict", Text), ("model_calls", Int), ("tokens", Int),
            ("duration_ms", Int), ("why", Text), ("state", Text), ("answer", Text),
        ],
        order: "run_id, seq",
        identity: None,
    },
];

/// The tables not copied, each with what the first start on the target does instead: none of
/// them holds anything a person made, and each starts afresh there.
pub const NOT_COPIED: &[(&str, &str)] = &[
    (
        "nodes",
        "the daemons sharing a database; each daemon joins afresh when it starts",
    ),
    (
        "fact_changes",
        "the memory change feed restarts on the target; each node's memory index rebuilds from \
         the facts once",
    ),
    (
        "sessions",
        "dashboard sign-ins; dashboard users sign in again",
    ),
    (
        "channel_holders",
        "which daemon reads a chat channel; the first daemon on the target takes it",
    ),
];

/// Rows a copy statement carries at most (the widest table binds 23 values a row: well under
/// PostgreSQL's 65,535 parameters).
const CHUNK: usize = 500;

/// One table's rows on each side after a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Copied {
    pub table: &'static str,
    pub source: i64,
    pub target: i64,
}

impl Store {
    /// The first table of this store that has rows, with its count: `None` when it is empty.
    pub(crate) async fn first_nonempty_table(&self) -> Result<Option<(&'static str, i64)>> {
        for t in TABLES {
            let n = self.rows_in(t.name).await?;
            if n > 0 {
                return Ok(Some((t.name, n)));
            }
        }
        Ok(None)
    }

    async fn rows_in(&self, table: &str) -> Result<i64> {
        Ok(query_scalar(format!("SELECT COUNT(*) FROM {table}"))
            .fetch_one(self)
            .await?)
    }

    /// Copy every row of this store into `target`, which must be empty, in one transaction
    /// on the target (a failure leaves it empty); then count each table on both sides.
    pub async fn copy_into(&self, target: &Store) -> Result<Vec<Copied>> {
        if let Some((table, n)) = target.first_nonempty_table().await? {
            return Err(StoreError::NotEmpty {
                target: target.path().display().to_string(),
                table,
                rows: n,
            });
        }
        let mut tx = target.begin().await?;
        for t in TABLES {
            let names: Vec<&str> = t.columns.iter().map(|(c, _)| *c).collect();
            let select = format!(
                "SELECT {} FROM {} ORDER BY {}",
                names.join(", "),
                t.name,
                t.order
            );
            let rows = query(select).fetch_all(self).await?;
            for chunk in rows.chunks(CHUNK) {
                let mut insert =
                    Builder::new(&format!("INSERT INTO {} ({}) ", t.name, names.join(", ")));
                let mut failed = None;
                insert.push_values(chunk, |b, row| {
                    for (column, kind) in t.columns {
                        match read(row, column, *kind) {
                            Ok(v) => {
                                b.push_arg(v);
                            }
                            Err(e) => failed = Some(e),
                        }
                    }
                });
                if let Some(e) = failed {
                    return Err(e);
                }
                insert.build().persistent(false).execute(&mut tx).await?;
            }
            if let (Some(id), Engine::Postgres(_)) = (t.identity, target.engine()) {
                // The next id given out continues after the copied ones.
                let sql = format!(
                    "SELECT setval(pg_get_serial_sequence('{0}', '{1}'), \
                     COALESCE((SELECT MAX({1}) FROM {0}), 0) + 1, false)",
                    t.name, id
                );
                query(sql).execute(&mut tx).await?;
            }
        }
        tx.commit().await?;
        let mut counts = Vec::with_capacity(TABLES.len());
        for t in TABLES {
            counts.push(Copied {
                table: t.name,
                source: self.rows_in(t.name).await?,
                target: target.rows_in(t.name).await?,
            });
        }
        if let Some(c) = counts.iter().find(|c| c.source != c.target) {
            return Err(StoreError::CopyMismatch {
                table: c.table,
                source_rows: c.source,
                target_rows: c.target,
            });
        }
        Ok(counts)
    }
}

/// Column `column` of `row` as a value to bind.
fn read(row: &DbRow, column: &str, kind: Kind) -> Result<Arg> {
    Ok(match kind {
        Text => Arg::Text(row.get::<Option<String>>(column)?),
        Int => Arg::Int(row.get::<Option<i64>>(column)?),
        Bool => Arg::Bool(row.get::<Option<bool>>(column)?),
        Time => Arg::Time(row.get::<Option<DateTime<Utc>>>(column)?),
        Bytes => Arg::Bytes(row.get::<Option<Vec<u8>>>(column)?),
    })
}
