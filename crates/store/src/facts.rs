//! Long-term facts (`facts`): the source of truth the tantivy index is built from, and their
//! change sequence (`fact_changes`): every insert, change of tags and delete of a fact adds a
//! row in the same transaction, numbered in commit order, so each node's index can catch up
//! with what any node wrote ([`Facts::changes_after`]).
//! Must not: know about the index, or write a fact without its change row.

use super::aggregates::Facts;
use super::{DbRow, Tx, query, query_as, query_scalar};
use super::{Result, WithJson, json_column, json_list, new_id, now};
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

/// Whether [`Facts::upsert`] made a new fact or merged into an existing one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Upsert {
    Created,
    Merged,
}

/// One change of a fact: its place in the sequence and the fact it touched (whose state now is
/// in `facts`, or nowhere when it was deleted).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct FactChange {
    pub seq: i64,
    pub fact_id: String,
    pub changed_at: DateTime<Utc>,
}

/// The change sequence's extent: the oldest and newest `seq` it still holds (`None` while it
/// is empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChangeRange {
    pub oldest: Option<i64>,
    pub newest: Option<i64>,
}

impl Facts<'_> {
    /// Add a fact, or merge it into the same fact stated before (tags are unioned).
    pub async fn upsert(self, text: &str, tags: &[String], source: &str) -> Result<(Fact, Upsert)> {
        let (fact, how, _) = self.upsert_logged(text, tags, source).await?;
        Ok((fact, how))
    }

    /// [`Facts::upsert`], and the `seq` of the change it logged: `None` when the fact was
    /// stated before with no new tag (nothing an index holds changed).
    pub async fn upsert_logged(
        self,
        text: &str,
        tags: &[String],
        source: &str,
    ) -> Result<(Fact, Upsert, Option<i64>)> {
        let norm = normalise_fact(text);
        // Read, then write: the write lock is taken up front, or a fact written by another
        // connection after this one's read would fail it with `database is locked` at once.
        // On PostgreSQL the same lock makes the change sequence's order the commit order (see
        // `log_change`).
        let mut tx = self.store.begin_writing(super::Locked::Facts).await?;
        let existing = query(select!(facts, "WHERE norm = ?"))
            .bind(&norm)
            .fetch_optional(&mut tx)
            .await?;
        let (id, how, seq) = match existing {
            Some(row) => {
                let mut fact = Fact::from_json_row(&row)?;
                let before = fact.tags.len();
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
                let seq = if fact.tags.len() > before {
                    Some(log_change(&mut tx, &fact.id).await?)
                } else {
                    None
                };
                (fact.id, Upsert::Merged, seq)
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
                let seq = log_change(&mut tx, &id).await?;
                (id, Upsert::Created, Some(seq))
            }
        };
        tx.commit().await?;
        Ok((self.get(&id).await?, how, seq))
    }

    pub async fn get(self, id: &str) -> Result<Fact> {
        self.store
            .json_row(select!(facts, "WHERE id = ?"), "fact", id)
            .await
    }

    /// Every fact, oldest first (rebuilding the index).
    pub async fn all(self) -> Result<Vec<Fact>> {
        self.store
            .json_rows(query(select!(facts, "ORDER BY created_at, id")))
            .await
    }

    pub async fn count(self) -> Result<i64> {
        self.store.count("SELECT COUNT(*) FROM facts").await
    }

    /// Delete a fact; the `seq` of the change it logged, `None` when there was no such fact
    /// (nothing changed).
    pub async fn delete(self, id: &str) -> Result<Option<i64>> {
        // Not `begin_writing`: on SQLite the delete is the first statement, so a plain BEGIN
        // takes the write lock with it. On PostgreSQL the facts table's lock is taken as
        // `begin_writing` takes it.
        let mut tx = self.store.begin().await?;
        if self.store.is_postgres() {
            query(super::Locked::Facts.lock_statement())
                .execute(&mut tx)
                .await?;
        }
        let deleted = query("DELETE FROM facts WHERE id = ?")
            .bind(id)
            .execute(&mut tx)
            .await?;
        if deleted == 0 {
            // Nothing was changed, so nothing to log; ending it is all that is left.
            tx.commit().await?;
            return Ok(None);
        }
        // Its vectors go with it, every model's: derived from it, meaningless without it.
        query("DELETE FROM fact_vectors WHERE fact_id = ?")
            .bind(id)
            .execute(&mut tx)
            .await?;
        let seq = log_change(&mut tx, id).await?;
        tx.commit().await?;
        Ok(Some(seq))
    }

    /// The changes after `seq`, oldest first, at most `limit` (a bounded batch: a node far
    /// behind catches up batch by batch).
    pub async fn changes_after(self, seq: i64, limit: i64) -> Result<Vec<FactChange>> {
        self.store
            .all(
                query_as(
                    "SELECT seq, fact_id, changed_at FROM fact_changes WHERE seq > ? \
                 ORDER BY seq LIMIT ?",
                )
                .bind(seq)
                .bind(limit.max(1)),
            )
            .await
    }

    /// The newest change's `seq`, 0 while there has been none.
    pub async fn change_seq(self) -> Result<i64> {
        Ok(self.change_range().await?.newest.unwrap_or(0))
    }

    /// The oldest and newest `seq` the sequence still holds: a follower whose last applied
    /// change is older than the oldest one kept may have missed pruned changes.
    pub async fn change_range(self) -> Result<ChangeRange> {
        let (oldest, newest): (Option<i64>, Option<i64>) =
            query_as("SELECT MIN(seq), MAX(seq) FROM fact_changes")
                .fetch_one(self.store)
                .await?;
        Ok(ChangeRange { oldest, newest })
    }

    /// Drop changes older than `before`, keeping the newest of those as the mark of where the
    /// sequence now starts (see [`Facts::change_range`]); how many rows went.
    pub async fn prune_changes(self, before: DateTime<Utc>) -> Result<u64> {
        self.store
            .rows(
                query(
                    "DELETE FROM fact_changes WHERE seq < \
                 (SELECT MAX(seq) FROM fact_changes WHERE changed_at < ?)",
                )
                .bind(before),
            )
            .await
    }

    /// The newest fact's creation time and id: where a walk in age order ends.
    pub async fn newest(self) -> Result<Option<(DateTime<Utc>, String)>> {
        Ok(
            query_as("SELECT created_at, id FROM facts ORDER BY created_at DESC, id DESC LIMIT 1")
                .fetch_optional(self.store)
                .await?,
        )
    }
}

/// Log a change of fact `id` inside the transaction that made it; its `seq`. The transaction
/// holds the facts table's write lock ([`Store::begin_writing`]), so on PostgreSQL no other
/// change can take a number until this one has committed: the sequence's order is the commit
/// order, and a follower that has seen change N has seen every change before it.
async fn log_change(tx: &mut Tx, id: &str) -> Result<i64> {
    Ok(
        query_scalar("INSERT INTO fact_changes (fact_id, changed_at) VALUES (?, ?) RETURNING seq")
            .bind(id)
            .bind(now())
            .fetch_one(tx)
            .await?,
    )
}

#[cfg(test)]
mod tests {
    use crate::facts::{ChangeRange, FactChange};
    use crate::{Upsert, query};

    /// The fact ids of the changes after `seq`, in order.
    async fn changed(store: &crate::Store, seq: i64) -> Vec<String> {
        let changes = store.facts().changes_after(seq, 100).await.unwrap();
        changes.into_iter().map(|c| c.fact_id).collect()
    }

    on_both_engines!(
        Memory,
        tokio::test,
        async fn every_insert_new_tag_and_delete_of_a_fact_is_logged_in_order(store: Store) {
            assert_eq!(store.facts().change_seq().await.unwrap(), 0);
            assert_eq!(
                store.facts().change_range().await.unwrap(),
                ChangeRange::default()
            );
            let (a, how, s1) = store
                .facts()
                .upsert_logged("tea is oolong", &[], "test")
                .await
                .unwrap();
            assert_eq!(how, Upsert::Created);
            let (b, _, s2) = store
                .facts()
                .upsert_logged("the cat is Miso", &[], "test")
                .await
                .unwrap();
            // Said again, nothing new: nothing an index holds changed, so nothing is logged.
            let (_, how, same) = store
                .facts()
                .upsert_logged("Tea is oolong.", &[], "test")
                .await
                .unwrap();
            assert_eq!((how, same), (Upsert::Merged, None));
            let (_, how, s3) = store
                .facts()
                .upsert_logged("tea is oolong", &["drink".into()], "test")
                .await
                .unwrap();
            assert_eq!(how, Upsert::Merged);
            let s4 = store.facts().delete(&b.id).await.unwrap();
            assert_eq!(store.facts().delete(&b.id).await.unwrap(), None);
            let seqs: Vec<i64> = [s1, s2, s3, s4].into_iter().map(Option::unwrap).collect();
            assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
            assert_eq!(
                changed(&store, 0).await,
                vec![a.id.clone(), b.id.clone(), a.id.clone(), b.id.clone()]
            );
            assert_eq!(store.facts().change_seq().await.unwrap(), seqs[3]);
            assert_eq!(
                store.facts().change_range().await.unwrap(),
                ChangeRange {
                    oldest: Some(seqs[0]),
                    newest: Some(seqs[3])
                }
            );
            // After a seq, bounded, in order.
            let after: Vec<FactChange> = store.facts().changes_after(seqs[0], 2).await.unwrap();
            let got: Vec<i64> = after.iter().map(|c| c.seq).collect();
            assert_eq!(got, seqs[1..3]);
            assert!(
                store
                    .facts()
                    .changes_after(seqs[3], 10)
                    .await
                    .unwrap()
                    .is_empty()
            );
            // The plain upsert logs too.
            let (c, _) = store.facts().upsert("new", &[], "test").await.unwrap();
            assert_eq!(changed(&store, seqs[3]).await, vec![c.id]);
        }
    );

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_change_that_cannot_be_logged_is_not_made(store: Store) {
            let (kept, _) = store.facts().upsert("kept", &[], "test").await.unwrap();
            // From now on every change row is refused: the fact's own write must go with it.
            query(
                "CREATE TRIGGER refuse BEFORE INSERT ON fact_changes \
                 BEGIN SELECT RAISE(ABORT, 'refused'); END",
            )
            .pg(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'refused'; END $$",
            )
            .execute(&store)
            .await
            .unwrap();
            if store.is_postgres() {
                query(
                    "CREATE TRIGGER refuse BEFORE INSERT ON fact_changes \
                     FOR EACH ROW EXECUTE FUNCTION refuse()",
                )
                .execute(&store)
                .await
                .unwrap();
            }
            let before = store.facts().change_seq().await.unwrap();
            assert!(store.facts().upsert("lost", &[], "test").await.is_err());
            assert!(
                store
                    .facts()
                    .upsert("kept", &["tag".into()], "test")
                    .await
                    .is_err()
            );
            assert!(store.facts().delete(&kept.id).await.is_err());
            assert_eq!(store.facts().count().await.unwrap(), 1);
            assert_eq!(
                store.facts().get(&kept.id).await.unwrap().tags,
                Vec::<String>::new()
            );
            assert_eq!(store.facts().change_seq().await.unwrap(), before);
        }
    );

    on_both_engines!(
        Memory,
        tokio::test,
        async fn pruning_keeps_the_newest_old_change_as_the_start_mark(store: Store) {
            let mut seqs = Vec::new();
            for text in ["one", "two", "three"] {
                let (_, _, seq) = store
                    .facts()
                    .upsert_logged(text, &[], "test")
                    .await
                    .unwrap();
                seqs.push(seq.unwrap());
            }
            let cut = crate::now() + chrono::Duration::seconds(1);
            let (_, _, late) = store
                .facts()
                .upsert_logged("four", &[], "test")
                .await
                .unwrap();
            // Back-date the last change past the cut, as if it came later.
            query("UPDATE fact_changes SET changed_at = ? WHERE seq = ?")
                .bind(cut + chrono::Duration::seconds(1))
                .bind(late.unwrap())
                .execute(&store)
                .await
                .unwrap();
            assert_eq!(store.facts().prune_changes(cut).await.unwrap(), 2);
            assert_eq!(
                store.facts().change_range().await.unwrap(),
                ChangeRange {
                    oldest: Some(seqs[2]),
                    newest: late
                }
            );
            // Nothing older than the cut is left but the mark: pruning again changes nothing.
            assert_eq!(store.facts().prune_changes(cut).await.unwrap(), 0);
        }
    );

    on_both_engines!(
        Disk,
        tokio::test(flavor = "multi_thread", worker_threads = 4),
        async fn a_follower_never_sees_a_change_appear_behind_one_it_has_read(store: Store) {
            // Writers change facts from many connections while a follower reads the sequence
            // after the last change it saw. Were a change numbered before another but committed
            // after it, the follower would step past it and never see it.
            let writers: Vec<_> = (0..8)
                .map(|i| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let mut seqs = Vec::new();
                        for round in 0..10 {
                            let text = format!("fact {i}-{round}");
                            let (fact, _, seq) = store
                                .facts()
                                .upsert_logged(&text, &[], "test")
                                .await
                                .unwrap();
                            seqs.push(seq.unwrap());
                            if round % 3 == 0 {
                                let gone = store.facts().delete(&fact.id).await.unwrap();
                                seqs.push(gone.unwrap());
                            }
                        }
                        seqs
                    })
                })
                .collect();
            let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let follower = {
                let (store, done) = (store.clone(), done.clone());
                tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut applied = 0;
                    loop {
                        // Read before looking at `done`: an empty read after the writers
                        // finished means everything committed has been read.
                        let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                        let batch = store.facts().changes_after(applied, 7).await.unwrap();
                        for c in &batch {
                            seen.push(c.seq);
                            applied = c.seq;
                        }
                        if batch.is_empty() {
                            if finished {
                                return seen;
                            }
                            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                        }
                    }
                })
            };
            let mut written = Vec::new();
            for w in writers {
                written.extend(w.await.unwrap());
            }
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            let seen = tokio::time::timeout(std::time::Duration::from_secs(60), follower)
                .await
                .expect("the follower reads to the end within a minute")
                .unwrap();
            written.sort_unstable();
            assert_eq!(seen, written, "the follower missed or reordered changes");
        }
    );
}
