//! Long-term facts (`facts`): the source of truth the tantivy index is built from.

use super::{DbRow, query};
use super::{Result, Store, WithJson, json_column, json_list, new_id, now};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, sqlx::FromRow)]
pub struct Fact {
    pub id: String,
    pub text: String,
    /// JSON text in the table, so `FromRow` skips it and `read_json` parses it.
    #[sqlx(skip)]
    pub tags: Vec<String>,
    pub source: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl WithJson for Fact {
    fn read_json(self, row: &DbRow) -> Result<Fact> {
        let owner = format!("fact {}", self.id);
        Ok(Fact {
            tags: json_column(row, "tags", &owner)?,
            ..self
        })
    }
}

/// The key two facts are "the same" by: case, spacing and trailing punctuation ignored.
pub(crate) fn normalise_fact(text: &str) -> String {
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
        // Read, then write: the write lock is taken up front, or a fact written by another
        // connection after this one's read would fail it with `database is locked` at once.
        let mut tx = self.begin_writing(super::Locked::Facts).await?;
        let existing = query(select!(facts, "WHERE norm = ?"))
            .bind(&norm)
            .fetch_optional(&mut tx)
            .await?;
        let (id, how) = match existing {
            Some(row) => {
                let mut fact = Fact::from_json_row(&row)?;
                for t in tags {
                    if !fact.tags.contains(t) {
                        fact.tags.push(t.clone());
                    }
                }
                query("UPDATE facts SET tags = ?, updated_at = ? WHERE id = ?")
                    .bind(json_list(&fact.tags))
                    .bind(now())
                    .bind(&fact.id)
                    .execute(&mut tx)
                    .await?;
                (fact.id, Upsert::Merged)
            }
            None => {
                let id = format!("f_{}", new_id());
                let t = now();
                query(
                    "INSERT INTO facts (id, text, norm, tags, source, created_at, updated_at) \
                     VALUES (?, ?, ?, ?, ?, ?, ?)",
                )
                .bind(&id)
                .bind(text.trim())
                .bind(&norm)
                .bind(json_list(tags))
                .bind(source)
                .bind(t)
                .bind(t)
                .execute(&mut tx)
                .await?;
                (id, Upsert::Created)
            }
        };
        tx.commit().await?;
        Ok((self.fact(&id).await?, how))
    }

    pub async fn fact(&self, id: &str) -> Result<Fact> {
        self.json_row(select!(facts, "WHERE id = ?"), "fact", id)
            .await
    }

    /// Every fact, oldest first (rebuilding the index).
    pub async fn all_facts(&self) -> Result<Vec<Fact>> {
        self.json_rows(select!(facts, "ORDER BY created_at, id"))
            .await
    }

    pub async fn fact_count(&self) -> Result<i64> {
        self.count("SELECT COUNT(*) FROM facts").await
    }

    /// Returns false when there was no such fact.
    pub(crate) async fn delete_fact(&self, id: &str) -> Result<bool> {
        self.one_row(query("DELETE FROM facts WHERE id = ?").bind(id))
            .await
    }
}
