//! Writes: every statement that changes the database runs to its end through these, so the
//! error SQLite reports when a change cannot be committed always reaches the caller.
//!
//! Why it matters: on a full disk SQLite fails a write when it appends to the WAL at commit,
//! which in autocommit mode is the statement's last step — after an `INSERT … RETURNING` has
//! already produced its row. sqlx's `fetch_one`/`fetch_optional` stop at the first row and
//! drop the statement, ignoring the error its reset reports; the change is rolled back, yet
//! the row comes back as if stored (a task answered `202` that never existed). So a writing
//! statement is never read with those: its rows are collected with `fetch_all`, which steps it
//! to the end and returns the commit's error.
//! Must not: hold SQL of its own; the statements stay with their tables.

use super::{Record, Result, Select, Statement, Store, StoreError};

impl Store {
    /// Run a write; how many rows it changed.
    pub(super) async fn rows(&self, statement: Statement) -> Result<u64> {
        Ok(statement.execute(self).await?)
    }

    /// Run a write whose row count does not matter.
    pub(super) async fn run(&self, statement: Statement) -> Result<()> {
        self.rows(statement).await.map(drop)
    }

    /// Run a write meant for one row; false when no row matched (gone, or not in the state
    /// the statement asks for).
    pub(super) async fn one_row(&self, statement: Statement) -> Result<bool> {
        Ok(self.rows(statement).await? == 1)
    }

    /// Run a write with `RETURNING` to its end (its commit included); the rows it returned.
    pub(super) async fn returning<T: Record>(&self, write: Select<T>) -> Result<Vec<T>> {
        Ok(write.fetch_all(self).await?)
    }

    /// [`Store::returning`] for a write that changes one row or none (an `UPDATE … WHERE`):
    /// the row it changed, `None` when no row matched.
    pub(super) async fn returning_one<T: Record>(&self, write: Select<T>) -> Result<Option<T>> {
        Ok(self.returning(write).await?.into_iter().next())
    }

    /// [`Store::returning`] for an insert of one row, which always returns it.
    pub(super) async fn inserted<T: Record>(&self, insert: Select<T>) -> Result<T> {
        self.returning_one(insert)
            .await?
            .ok_or_else(|| StoreError::Corrupt("an inserted row did not come back".into()))
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    /// The one connection of an in-memory store, told to check foreign keys only at commit:
    /// a statement that breaks one then produces its rows and fails when it commits, the way a
    /// full disk fails a write only when the WAL is appended to at commit.
    async fn failing_at_commit() -> Store {
        let store = Store::open_in_memory().await.unwrap();
        sqlx::query("PRAGMA defer_foreign_keys = ON")
            .execute(store.sqlite_pool().expect("sqlite"))
            .await
            .unwrap();
        store
    }

    fn new_task() -> NewTask {
        NewTask {
            task: "t".into(),
            profile: "fast".into(),
            ..Default::default()
        }
    }

    /// The failed write left no task behind.
    async fn assert_no_task(store: &Store) {
        let tasks = store.tasks().list(&TaskFilter::default()).await.unwrap();
        assert!(tasks.is_empty(), "{tasks:?}");
    }

    #[tokio::test]
    async fn a_task_whose_insert_fails_at_commit_is_an_error_not_a_row() {
        let store = failing_at_commit().await;
        let orphan = NewTask {
            parent_id: Some("no-such-parent".into()),
            ..new_task()
        };
        let made = store.tasks().create(&orphan).await;
        assert!(made.is_err(), "{made:?}");
        assert_no_task(&store).await;
    }

    #[tokio::test]
    async fn a_trace_row_whose_insert_fails_at_commit_is_an_error() {
        let store = failing_at_commit().await;
        let step = crate::testing::note(1, "x");
        let added = store.tasks().add_step("no-such-task", &step).await;
        assert!(added.is_err(), "{added:?}");
        assert!(
            store
                .tasks()
                .steps("no-such-task")
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// On PostgreSQL a write can fail at commit too (a deferred constraint): the insert's
    /// row came back, but the error the commit reports must be what the caller gets.
    #[tokio::test]
    async fn on_postgres_a_task_whose_insert_fails_at_commit_is_an_error_not_a_row() {
        let store = crate::testing::postgres().await;
        for sql in [
            "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$",
            "CREATE CONSTRAINT TRIGGER refuse AFTER INSERT ON tasks \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse()",
        ] {
            query(sql).execute(&store).await.unwrap();
        }
        let made = store.tasks().create(&new_task()).await;
        assert!(made.is_err(), "{made:?}");
        let many = store.tasks().create_many(&[new_task()]).await;
        assert!(many.is_err(), "{many:?}");
        assert_no_task(&store).await;
    }

    /// A full disk fails SQLite's `COMMIT` and SQLite rolls the transaction back by itself;
    /// sqlx, told only that the commit failed, still counts a transaction open on that
    /// connection. Here SQLite's own rollback is a `ROLLBACK` sqlx does not see, then the
    /// commit fails as on the full disk. The pool's one connection must not come back with
    /// that count, or every later `BEGIN IMMEDIATE` on it is refused.
    #[tokio::test]
    async fn a_connection_whose_commit_failed_after_sqlite_rolled_back_is_not_reused() {
        let dir = tempfile::tempdir().unwrap();
        let opts = StoreOptions {
            max_connections: 1,
            ..StoreOptions::default()
        };
        let store = Store::open_with(dir.path(), opts).await.unwrap();
        let mut tx = store.begin_writing(Locked::Facts).await.unwrap();
        query("ROLLBACK").execute(&mut tx).await.unwrap();
        let committed = tx.commit().await;
        assert!(committed.is_err(), "{committed:?}");
        for _ in 0..2 {
            let tx = store.begin_writing(Locked::Facts).await;
            let tx = tx.unwrap_or_else(|e| panic!("a later write is refused: {e}"));
            tx.commit().await.unwrap();
        }
        let (fact, _, _) = store
            .facts()
            .upsert_logged("after", &[], "test")
            .await
            .unwrap();
        assert_eq!(store.facts().get(&fact.id).await.unwrap().text, "after");
    }

    #[tokio::test]
    async fn a_job_run_whose_insert_fails_at_commit_is_an_error() {
        let store = failing_at_commit().await;
        let added = store
            .jobs()
            .add_run("no-such-job", now(), RunOutcome::Fired, None, None)
            .await;
        assert!(added.is_err(), "{added:?}");
        assert!(
            store
                .jobs()
                .runs("no-such-job", 10)
                .await
                .unwrap()
                .is_empty()
        );
    }
}
