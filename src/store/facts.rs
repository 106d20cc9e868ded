//! Long-term facts (`facts`): the source of truth the tantivy index is built from.

use super::{Result, Store, StoreError, new_id, now};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Fact {
    pub id: String,
    pub text: String,
    pub tags: Vec<String>,
    pub source: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

#[derive(sqlx::FromRow)]
struct FactRow {
    id: String,
    text: String,
    tags: String,
    source: String,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<FactRow> for Fact {
    type Error = StoreError;
    fn try_from(r: FactRow) -> Result<Fact> {
        let tags = serde_json::from_str(&r.tags)
            .map_err(|e| StoreError::Corrupt(format!("tags of fact {}: {e}", r.id)))?;
        Ok(Fact {
            id: r.id,
            text: r.text,
            tags,
            source: r.source,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

/// The key two facts are "the same" by: case, spacing and trailing punctuation ignored.
pub fn normalise_fact(text: &str) -> String {
    let collapsed: Vec<String> = text.split_whitespace().map(str::to_lowercase).collect();
    collapsed
        .join(" ")
        .trim_end_matches(['.', '。', '!', '！', '?', '？'])
        .to_string()
}

/// Whether [`Store::upsert_fact`] made a new fact or merged into an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upsert {
    Created,
    Merged,
}

impl Store {
    /// Add a fact, or merge it into the same fact stated before (tags are unioned).
    pub async fn upsert_fact(
        &self,
        text: &str,
        tags: &[String],
        source: &str,
    ) -> Result<(Fact, Upsert)> {
        let norm = normalise_fact(text);
        let mut tx = self.pool().begin().await?;
        let existing: Option<FactRow> = sqlx::query_as(
            "SELECT id, text, tags, source, created_at, updated_at FROM facts WHERE norm = ?",
        )
        .bind(&norm)
        .fetch_optional(&mut *tx)
        .await?;
        let (id, how) = match existing {
            Some(row) => {
                let mut fact = Fact::try_from(row)?;
                for t in tags {
                    if !fact.tags.contains(t) {
                        fact.tags.push(t.clone());
                    }
                }
                sqlx::query("UPDATE facts SET tags = ?, updated_at = ? WHERE id = ?")
                    .bind(serde_json::to_string(&fact.tags).unwrap_or_else(|_| "[]".into()))
                    .bind(now())
                    .bind(&fact.id)
                    .execute(&mut *tx)
                    .await?;
                (fact.id, Upsert::Merged)
            }
            None => {
                let id = format!("f_{}", new_id());
                let t = now();
                sqlx::query(
                    "INSERT INTO facts (id, text, norm, tags, source, created_at, updated_at) \
                     VALUES (?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(&id)
                .bind(text.trim())
                .bind(&norm)
                .bind(serde_json::to_string(tags).unwrap_or_else(|_| "[]".into()))
                .bind(source)
                .bind(t)
                .bind(t)
                .execute(&mut *tx)
                .await?;
                (id, Upsert::Created)
            }
        };
        tx.commit().await?;
        Ok((self.fact(&id).await?, how))
    }

    pub async fn fact(&self, id: &str) -> Result<Fact> {
        let row: Option<FactRow> = sqlx::query_as(
            "SELECT id, text, tags, source, created_at, updated_at FROM facts WHERE id = ?",
        )
        .bind(id)
        .fetch_optional(self.pool())
        .await?;
        row.ok_or_else(|| StoreError::NotFound {
            what: "fact",
            id: id.to_string(),
        })?
        .try_into()
    }

    /// Every fact, oldest first (rebuilding the index).
    pub async fn all_facts(&self) -> Result<Vec<Fact>> {
        let rows: Vec<FactRow> = sqlx::query_as(
            "SELECT id, text, tags, source, created_at, updated_at FROM facts ORDER BY created_at, id",
        )
        .fetch_all(self.pool())
        .await?;
        rows.into_iter().map(Fact::try_from).collect()
    }

    pub async fn fact_count(&self) -> Result<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM facts")
            .fetch_one(self.pool())
            .await?)
    }

    /// Returns false when there was no such fact.
    pub async fn delete_fact(&self, id: &str) -> Result<bool> {
        let done = sqlx::query("DELETE FROM facts WHERE id = ?")
            .bind(id)
            .execute(self.pool())
            .await?;
        Ok(done.rows_affected() == 1)
    }
}
