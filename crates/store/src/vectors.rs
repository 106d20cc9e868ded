//! Fact vectors (`fact_vectors`): what an embedding model made of each fact, kept as bytes on
//! both engines, one row per fact and (model, dimensions). They are derived data: the facts
//! are the truth, and a vector is only ever written for a fact that still exists.
//!
//! Owns: the rows and their order (`seq`, in which each daemon's in-memory copy loads them).
//! Must not: interpret the bytes (memory does), or delete a model's vector of a fact before the
//! current model's vector of it exists.

use super::aggregates::Vectors;
use super::{Locked, Result, now, query, query_as, query_scalar};
use chrono::{DateTime, Utc};

/// Which model, at which dimensions, made a vector. A server that starts answering another
/// dimension under the same model name is another model: its vectors do not mix with these.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VectorModel {
    pub model: String,
    pub dims: u32,
}

/// A vector as stored: its place in the order written, its fact and its bytes (empty: the
/// server refused the fact, so it has no vector for this model).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct StoredVector {
    pub seq: i64,
    pub fact_id: String,
    pub vector: Vec<u8>,
}

/// A fact still to be embedded for a model: its id, its text, and where it stands in the
/// order facts are walked in (the cursor of the next batch).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct Unembedded {
    pub id: String,
    pub text: String,
    pub created_at: DateTime<Utc>,
}

/// How many facts a model has a vector of, and how many it refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VectorCounts {
    pub embedded: i64,
    pub refused: i64,
}

impl Vectors<'_> {
    /// Facts `model` has no vector (nor refusal) of yet, oldest first, at most `limit`, after
    /// `after` (a fact's creation time and id, as [`Unembedded`] gives them) when given: a
    /// walk from there reads only what lies beyond it, not every fact again.
    pub async fn unembedded(
        self,
        model: &VectorModel,
        after: Option<(DateTime<Utc>, &str)>,
        limit: i64,
    ) -> Result<Vec<Unembedded>> {
        let missing = "NOT EXISTS (SELECT 1 FROM fact_vectors v \
                       WHERE v.fact_id = f.id AND v.model = ? AND v.dims = ?)";
        let select = match after {
            None => format!(
                "SELECT f.id, f.text, f.created_at FROM facts f WHERE {missing} \
                 ORDER BY f.created_at, f.id LIMIT ?"
            ),
            Some(_) => format!(
                "SELECT f.id, f.text, f.created_at FROM facts f \
                 WHERE (f.created_at > ? OR (f.created_at = ? AND f.id > ?)) AND {missing} \
                 ORDER BY f.created_at, f.id LIMIT ?"
            ),
        };
        let mut q = query_as(select);
        if let Some((at, id)) = after {
            q = q.bind(at).bind(at).bind(id);
        }
        self.store
            .all(q.bind(&model.model).bind(model.dims).bind(limit.max(1)))
            .await
    }

    /// Store `model`'s vectors of these facts (bytes; empty for a refusal), skipping a fact
    /// deleted meanwhile and one that has this model's vector already. How many were added.
    pub async fn put(self, model: &VectorModel, vectors: &[(String, Vec<u8>)]) -> Result<u64> {
        if vectors.is_empty() {
            return Ok(0);
        }
        // The facts table's lock, as a fact's own write takes it: a vector cannot be added for
        // a fact a concurrent `forget` is deleting, and on PostgreSQL `seq` is given out in
        // commit order, so a daemon that has loaded up to N has seen every row before it.
        let mut tx = self.store.begin_writing(Locked::Facts).await?;
        let at = now();
        let mut added = 0;
        for (fact_id, bytes) in vectors {
            added += query(
                "INSERT INTO fact_vectors (fact_id, model, dims, vector, created_at) \
                 SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM facts WHERE id = ?) \
                 ON CONFLICT (fact_id, model, dims) DO NOTHING",
            )
            .bind(fact_id)
            .bind(&model.model)
            .bind(model.dims)
            .bind(bytes)
            .bind(at)
            .bind(fact_id)
            .execute(&mut tx)
            .await?;
        }
        tx.commit().await?;
        Ok(added)
    }

    /// `model`'s vectors written after `seq`, in the order written, at most `limit`.
    pub async fn after(
        self,
        model: &VectorModel,
        seq: i64,
        limit: i64,
    ) -> Result<Vec<StoredVector>> {
        self.store
            .all(
                query_as(
                    "SELECT seq, fact_id, vector FROM fact_vectors \
                 WHERE model = ? AND dims = ? AND seq > ? ORDER BY seq LIMIT ?",
                )
                .bind(&model.model)
                .bind(model.dims)
                .bind(seq)
                .bind(limit.max(1)),
            )
            .await
    }

    /// The dimensions of `model`'s newest vector, if it has any: what this process assumes
    /// until the server answers.
    pub async fn dims(self, model: &str) -> Result<Option<u32>> {
        let dims: Option<i64> =
            query_scalar("SELECT dims FROM fact_vectors WHERE model = ? ORDER BY seq DESC LIMIT 1")
                .bind(model)
                .fetch_optional(self.store)
                .await?;
        Ok(dims.and_then(|d| u32::try_from(d).ok()))
    }

    /// How many facts `model` has embedded, and refused.
    pub async fn counts(self, model: &VectorModel) -> Result<VectorCounts> {
        let (embedded, refused): (Option<i64>, Option<i64>) = query_as(
            "SELECT SUM(CASE WHEN LENGTH(vector) > 0 THEN 1 ELSE 0 END), \
             SUM(CASE WHEN LENGTH(vector) = 0 THEN 1 ELSE 0 END) \
             FROM fact_vectors WHERE model = ? AND dims = ?",
        )
        .bind(&model.model)
        .bind(model.dims)
        .fetch_one(self.store)
        .await?;
        Ok(VectorCounts {
            embedded: embedded.unwrap_or(0),
            refused: refused.unwrap_or(0),
        })
    }

    /// Delete other models' vectors of the facts `model` has a vector (or refusal) of: those
    /// are replaced, the rest are kept until they are. How many rows went.
    pub async fn prune_replaced(self, model: &VectorModel) -> Result<u64> {
        self.store
            .rows(
                query(
                    "DELETE FROM fact_vectors WHERE NOT (model = ? AND dims = ?) AND fact_id IN \
                 (SELECT fact_id FROM fact_vectors WHERE model = ? AND dims = ?)",
                )
                .bind(&model.model)
                .bind(model.dims)
                .bind(&model.model)
                .bind(model.dims),
            )
            .await
    }

    /// Every vector row, any model (tests and `doctor`).
    pub async fn rows(self) -> Result<i64> {
        self.store.count("SELECT COUNT(*) FROM fact_vectors").await
    }
}

#[cfg(test)]
mod tests {
    use crate::VectorModel;
    use crate::vectors::VectorCounts;

    fn wl(dims: u32) -> VectorModel {
        VectorModel {
            model: "wl".into(),
            dims,
        }
    }

    on_both_engines!(
        Memory,
        tokio::test,
        async fn vectors_per_model_replaced_only_once_the_new_exist(store: Store) {
            let (a, _) = store
                .facts()
                .upsert("My car is a red Volvo", &[], "test")
                .await
                .unwrap();
            let (b, _) = store
                .facts()
                .upsert("My wife is allergic to peanuts", &[], "test")
                .await
                .unwrap();
            let old = wl(4);
            let missing = store.vectors().unembedded(&old, None, 10).await.unwrap();
            assert_eq!(missing.len(), 2);
            assert_eq!(missing[0].id, a.id, "oldest first");
            let first = (missing[0].created_at, missing[0].id.as_str());
            let rest = store
                .vectors()
                .unembedded(&old, Some(first), 10)
                .await
                .unwrap();
            assert_eq!(rest.len(), 1, "after the cursor");
            assert_eq!(rest[0].id, b.id);
            let both = [(a.id.clone(), vec![1; 16]), (b.id.clone(), vec![2; 16])];
            assert_eq!(store.vectors().put(&old, &both).await.unwrap(), 2);
            // Written twice (two nodes at once): the second is skipped.
            let again = [(a.id.clone(), vec![9; 16])];
            assert_eq!(store.vectors().put(&old, &again).await.unwrap(), 0);
            assert!(
                store
                    .vectors()
                    .unembedded(&old, None, 10)
                    .await
                    .unwrap()
                    .is_empty()
            );
            assert_eq!(store.vectors().dims("wl").await.unwrap(), Some(4));

            // A new dimension is a new model: nothing of the old is deleted before its
            // replacement exists.
            let new = wl(2);
            assert_eq!(
                store
                    .vectors()
                    .unembedded(&new, None, 10)
                    .await
                    .unwrap()
                    .len(),
                2
            );
            let one = [(a.id.clone(), vec![3; 8])];
            store.vectors().put(&new, &one).await.unwrap();
            assert_eq!(store.vectors().prune_replaced(&new).await.unwrap(), 1);
            let old_left = store.vectors().after(&old, 0, 10).await.unwrap();
            assert_eq!(old_left.len(), 1);
            assert_eq!(old_left[0].fact_id, b.id);
            assert_eq!(old_left[0].vector, vec![2; 16]);
            let after = store.vectors().after(&new, 0, 10).await.unwrap();
            assert_eq!(after.len(), 1);
            let later = store.vectors().after(&new, after[0].seq, 10).await;
            assert!(later.unwrap().is_empty());

            // A refusal counts as done for its model, not as a vector.
            let refused = [(b.id.clone(), Vec::new())];
            store.vectors().put(&new, &refused).await.unwrap();
            assert_eq!(
                store.vectors().counts(&new).await.unwrap(),
                VectorCounts {
                    embedded: 1,
                    refused: 1
                }
            );
        }
    );

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_forgotten_fact_loses_its_vectors_and_gets_none_afterwards(store: Store) {
            let (a, _) = store
                .facts()
                .upsert("My car is a red Volvo", &[], "test")
                .await
                .unwrap();
            let v4 = [(a.id.clone(), vec![1; 16])];
            store.vectors().put(&wl(4), &v4).await.unwrap();
            let v2 = [(a.id.clone(), vec![1; 8])];
            store.vectors().put(&wl(2), &v2).await.unwrap();
            assert_eq!(store.vectors().rows().await.unwrap(), 2);
            store.facts().delete(&a.id).await.unwrap();
            assert_eq!(
                store.vectors().rows().await.unwrap(),
                0,
                "every model's vector goes with the fact"
            );
            // A vector computed while the fact was being forgotten is not stored after it.
            assert_eq!(store.vectors().put(&wl(4), &v4).await.unwrap(), 0);
            assert_eq!(store.vectors().rows().await.unwrap(), 0);
        }
    );
}
