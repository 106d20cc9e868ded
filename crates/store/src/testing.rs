//! Stores for tests on either engine, and [`on_both_engines!`], which runs one test body on
//! each: the store's tests are written once, so the engines cannot drift apart untested.

/// A store test run on each engine: `NAME::sqlite` (in memory with `Memory`, in a fresh data
/// dir with `Disk`) and `NAME::postgres` (a fresh database on the test process's PostgreSQL
/// cluster, see `test_postgres.rs`). One body, so the engines cannot drift apart untested.
macro_rules! on_both_engines {
    ($sqlite:ident, $test:meta, async fn $name:ident($store:ident: Store) $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            // A scenario reads best whole: the length cap is the code's, not the tests'.
            #[allow(clippy::too_many_lines)]
            async fn body($store: crate::Store) $body

            #[$test]
            async fn sqlite() {
                let (_dir, store) =
                    crate::testing::sqlite(crate::testing::Sqlite::$sqlite).await;
                body(store).await;
            }

            #[$test]
            async fn postgres() {
                body(crate::testing::postgres().await).await;
            }
        }
    };
}

use super::*;

#[derive(Debug, Clone, Copy)]
pub(crate) enum Sqlite {
    /// One connection to an in-memory database.
    Memory,
    /// A database file in a fresh data dir (a pool of connections, WAL).
    Disk,
}

/// A SQLite store; the data dir, if any, lives as long as the returned guard.
pub(crate) async fn sqlite(kind: Sqlite) -> (Option<tempfile::TempDir>, Store) {
    match kind {
        Sqlite::Memory => (
            None,
            Store::open_in_memory().await.expect("in-memory store"),
        ),
        Sqlite::Disk => {
            let dir = tempfile::tempdir().expect("temp dir");
            let store = Store::open(dir.path()).await.expect("store on disk");
            (Some(dir), store)
        }
    }
}

/// A store on a fresh PostgreSQL database.
pub(crate) async fn postgres() -> Store {
    postgres_with(StoreOptions::default()).await
}

pub(crate) async fn postgres_with(opts: StoreOptions) -> Store {
    let url = tokio::task::spawn_blocking(test_postgres::fresh_url)
        .await
        .expect("the cluster's thread");
    Store::open_postgres(&url, opts)
        .await
        .expect("a store on the test cluster")
}

/// A note row of a trace, the simplest a test can append.
pub(crate) fn note(step: i64, text: impl Into<String>) -> NewStep {
    NewStep {
        output: Some(text.into()),
        ..NewStep::new(step, StepKind::Note, "")
    }
}

/// A pending task of `origin` under the `fast` profile, as most tests need one.
pub(crate) async fn new_task(store: &Store, text: &str, origin: Origin) -> Task {
    store
        .tasks()
        .create(&NewTask {
            task: text.into(),
            origin,
            profile: "fast".into(),
            ..NewTask::default()
        })
        .await
        .expect("a new task")
}

/// The lease of the tests' nodes.
pub(crate) const LEASE: chrono::Duration = chrono::Duration::seconds(30);

/// Nodes a and b of `store`, both joined.
pub(crate) async fn two_nodes(store: &Store) -> (Store, Store) {
    let a = store.clone().with_node("node-a");
    let b = store.clone().with_node("node-b");
    a.nodes()
        .join("host-a", 1, None, LEASE)
        .await
        .expect("a joins");
    b.nodes()
        .join("host-b", 2, None, LEASE)
        .await
        .expect("b joins");
    (a, b)
}

/// The daily digest job at 08:00 in `timezone`, due now.
pub(crate) async fn digest_job(store: &Store, timezone: &str) -> Job {
    let new = NewJob {
        name: "digest".into(),
        task: "summarise my feeds".into(),
        schedule: "0 8 * * *".into(),
        timezone: timezone.into(),
        next_run_at: Some(now()),
        ..NewJob::default()
    };
    store.jobs().create(&new).await.expect("the digest job")
}
