//! Working memory (`working_memory`: large intermediate results by key, per task) and page/feed
//! snapshots (`snapshots`), each its own aggregate (`store.working()`, `store.snapshots()`).

use super::aggregates::{Snapshots, Working};
use super::{Result, found, new_id, now};
use super::{query, query_as, query_scalar};
use chrono::{DateTime, Utc};

/// A slice of a working-memory entry, counted in characters (not bytes) so a page boundary
/// never splits a multi-byte character.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct WorkingSlice {
    pub key: String,
    pub offset: usize,
    pub text: String,
    pub total_chars: usize,
    /// Where the next page starts, when there is one.
    pub next_offset: Option<usize>,
}

impl Working<'_> {
    /// Store `content` for `task_id`; returns the key the model can read it back by.
    pub async fn put(self, task_id: &str, content: &str) -> Result<String> {
        let key = format!("wm_{}", new_id());
        query("INSERT INTO working_memory (key, task_id, content, created_at) VALUES (?, ?, ?, ?)")
            .bind(&key)
            .bind(task_id)
            .bind(content)
            .bind(now())
            .execute(self.store)
            .await?;
        Ok(key)
    }

    pub async fn read(self, key: &str, offset: usize, length: usize) -> Result<WorkingSlice> {
        let content: Option<String> =
            query_scalar("SELECT content FROM working_memory WHERE key = ?")
                .bind(key)
                .fetch_optional(self.store)
                .await?;
        let content = found(content, "working-memory key", key)?;
        let total_chars = content.chars().count();
        let text: String = content.chars().skip(offset).take(length).collect();
        let end = offset.saturating_add(text.chars().count());
        Ok(WorkingSlice {
            key: key.to_string(),
            offset,
            text,
            total_chars,
            next_offset: (end < total_chars).then_some(end),
        })
    }

    /// Drop entries created before `before`; returns how many went.
    pub async fn prune(self, before: DateTime<Utc>) -> Result<u64> {
        let done = query("DELETE FROM working_memory WHERE created_at < ?")
            .bind(before)
            .execute(self.store)
            .await?;
        Ok(done)
    }
}

impl Snapshots<'_> {
    pub async fn get(self, key: &str) -> Result<Option<(String, DateTime<Utc>)>> {
        self.store
            .first(query_as("SELECT content, updated_at FROM snapshots WHERE key = ?").bind(key))
            .await
    }

    pub async fn put(self, key: &str, content: &str) -> Result<()> {
        query(
            "INSERT INTO snapshots (key, content, updated_at) VALUES (?, ?, ?) \
             ON CONFLICT(key) DO UPDATE SET content = excluded.content, updated_at = excluded.updated_at",
        )
        .bind(key)
        .bind(content)
        .bind(now())
        .execute(self.store)
        .await?;
        Ok(())
    }

    /// Every snapshot whose key starts with `prefix` (a job's looks: `job:ID:`), to put back
    /// with [`Snapshots::restore`]. Compared by `substr`, not `LIKE`: keys hold URLs, whose
    /// `%` and `_` would be wildcards.
    pub async fn under(self, prefix: &str) -> Result<Vec<SavedSnapshot>> {
        self.store
            .all(
                query_as(
                    "SELECT key, content, updated_at FROM snapshots \
                     WHERE substr(key, 1, length(?)) = ?",
                )
                .bind(prefix)
                .bind(prefix),
            )
            .await
    }

    /// Put the snapshots under `prefix` back as [`Snapshots::under`] read them: those written
    /// since are set back, those first written since are deleted. In one transaction.
    pub async fn restore(self, prefix: &str, saved: &[SavedSnapshot]) -> Result<()> {
        let mut tx = self.store.begin().await?;
        query("DELETE FROM snapshots WHERE substr(key, 1, length(?)) = ?")
            .bind(prefix)
            .bind(prefix)
            .execute(&mut tx)
            .await?;
        for s in saved {
            query("INSERT INTO snapshots (key, content, updated_at) VALUES (?, ?, ?)")
                .bind(&s.key)
                .bind(&s.content)
                .bind(s.updated_at)
                .execute(&mut tx)
                .await?;
        }
        tx.commit().await?;
        Ok(())
    }
}

/// The prefix of job `job_id`'s snapshots (its precheck's and its runs' tasks' looks at pages
/// and feeds), which a failed run puts back ([`Snapshots::restore`]).
pub fn job_snapshots(job_id: &str) -> String {
    format!("job:{job_id}:")
}

/// A snapshot as [`Snapshots::under`] read it.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct SavedSnapshot {
    pub key: String,
    pub content: String,
    pub updated_at: DateTime<Utc>,
}

#[cfg(test)]
#[path = "working_tests.rs"]
mod tests;
