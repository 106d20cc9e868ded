//! Dashboard sign-ins (`sessions`): kept in the database so a session outlives a restart and
//! works on every node that shares the database. A row holds the SHA-256 of the session's
//! cookie value, never the value itself: whoever reads the table cannot sign in with it.
//!
//! Owns: the rows, their expiry and their bound. Must not: make or see cookie values (the HTTP
//! layer hashes them), or decide how long a session lasts.

use super::aggregates::Sessions;
use super::{Result, Store, now, query, query_as};
use chrono::{DateTime, Utc};

/// A live session as stored.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct StoredSession {
    pub csrf: String,
    pub created_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Rows a prune deletes at most for the bound (a sign-in adds one row, so one is the usual).
const OVER_BOUND_BATCH: i64 = 1000;

impl Store {
    /// How many sessions are stored (live or not yet pruned).
    #[cfg(test)]
    async fn session_count(&self) -> Result<i64> {
        self.count("SELECT COUNT(*) FROM sessions").await
    }
}

impl Sessions<'_> {
    /// Record a new session, after dropping expired ones and, when `max` are kept already,
    /// the oldest, so at most `max` remain.
    pub async fn add(
        self,
        id_hash: &str,
        csrf: &str,
        expires_at: DateTime<Utc>,
        max: i64,
    ) -> Result<()> {
        let t = now();
        // Three statements, no transaction: none depends on another being undone with it, and
        // sign-ins on several nodes at once then never wait on each other's row locks.
        self.store
            .run(query("DELETE FROM sessions WHERE expires_at <= ?").bind(t))
            .await?;
        self.store
            .run(
                query(
                    "INSERT INTO sessions (id_hash, csrf, created_at, expires_at) \
                 VALUES (?, ?, ?, ?)",
                )
                .bind(id_hash)
                .bind(csrf)
                .bind(t)
                .bind(expires_at),
            )
            .await?;
        self.store
            .run(
                query(
                    "DELETE FROM sessions WHERE id_hash IN (SELECT id_hash FROM sessions \
                 ORDER BY created_at DESC, id_hash DESC LIMIT ? OFFSET ?)",
                )
                .bind(OVER_BOUND_BATCH)
                .bind(max.max(1)),
            )
            .await?;
        Ok(())
    }

    /// The live session whose cookie hashes to `id_hash`. An expired one is deleted on the way
    /// and is not returned.
    pub async fn get(self, id_hash: &str) -> Result<Option<StoredSession>> {
        let found: Option<StoredSession> = self
            .store
            .first(
                query_as("SELECT csrf, created_at, expires_at FROM sessions WHERE id_hash = ?")
                    .bind(id_hash),
            )
            .await?;
        match found {
            Some(s) if s.expires_at > now() => Ok(Some(s)),
            Some(_) => {
                let expired = query("DELETE FROM sessions WHERE id_hash = ? AND expires_at <= ?")
                    .bind(id_hash)
                    .bind(now());
                // Tidying only: on a database that cannot be written (a full disk) the answer
                // is the same, and the next sign-in's prune drops the row.
                if let Err(e) = self.store.run(expired).await {
                    tracing::debug!(error = %e, "could not delete an expired session yet");
                }
                Ok(None)
            }
            None => Ok(None),
        }
    }

    /// Sign out: the session is gone for every node at once. False when there was none.
    pub async fn remove(self, id_hash: &str) -> Result<bool> {
        self.store
            .one_row(query("DELETE FROM sessions WHERE id_hash = ?").bind(id_hash))
            .await
    }
}

#[cfg(test)]
mod tests {
    use crate::{now, query};
    use chrono::Duration;

    fn hash(i: usize) -> String {
        format!("{i:064x}")
    }

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_session_is_found_by_its_hash_until_removed_or_expired(store: Store) {
            let week = now() + Duration::days(7);
            store
                .sessions()
                .add(&hash(1), "csrf-1", week, 10)
                .await
                .unwrap();
            let found = store.sessions().get(&hash(1)).await.unwrap().expect("live");
            assert_eq!(found.csrf, "csrf-1");
            assert_eq!(found.expires_at, week);
            assert!(store.sessions().get(&hash(2)).await.unwrap().is_none());
            assert!(store.sessions().remove(&hash(1)).await.unwrap());
            assert!(!store.sessions().remove(&hash(1)).await.unwrap());
            assert!(store.sessions().get(&hash(1)).await.unwrap().is_none());

            // Expired: not returned, and deleted by the lookup.
            store
                .sessions()
                .add(&hash(3), "csrf-3", week, 10)
                .await
                .unwrap();
            query("UPDATE sessions SET expires_at = ? WHERE id_hash = ?")
                .bind(now() - Duration::seconds(1))
                .bind(hash(3))
                .execute(&store)
                .await
                .unwrap();
            assert!(store.sessions().get(&hash(3)).await.unwrap().is_none());
            assert_eq!(store.session_count().await.unwrap(), 0);
        }
    );

    on_both_engines!(
        Memory,
        tokio::test,
        async fn signing_in_drops_expired_sessions_and_the_oldest_past_the_bound(store: Store) {
            let week = now() + Duration::days(7);
            for i in 0..3 {
                store.sessions().add(&hash(i), "c", week, 3).await.unwrap();
            }
            // A fourth: the oldest goes.
            store.sessions().add(&hash(3), "c", week, 3).await.unwrap();
            assert_eq!(store.session_count().await.unwrap(), 3);
            assert!(store.sessions().get(&hash(0)).await.unwrap().is_none());
            for i in 1..4 {
                assert!(
                    store.sessions().get(&hash(i)).await.unwrap().is_some(),
                    "{i}"
                );
            }
            // An expired one goes at the next sign-in even under the bound.
            query("UPDATE sessions SET expires_at = ? WHERE id_hash = ?")
                .bind(now() - Duration::seconds(1))
                .bind(hash(2))
                .execute(&store)
                .await
                .unwrap();
            store.sessions().add(&hash(4), "c", week, 10).await.unwrap();
            assert_eq!(store.session_count().await.unwrap(), 3);
            assert!(store.sessions().get(&hash(2)).await.unwrap().is_none());
        }
    );
}
