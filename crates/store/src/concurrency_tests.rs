//! The store under concurrent use, on both engines: writers sharing the pool, claimers
//! racing for pending tasks, facts upserted at the same moment.

use super::*;

on_both_engines!(
    Disk,
    tokio::test,
    async fn concurrent_writers_share_the_pool_without_losing_rows(store: Store) {
        let written = in_parallel(&store, 16, |store, w| async move {
            for i in 0..25 {
                let t = store
                    .tasks()
                    .create(&NewTask {
                        task: format!("writer {w} task {i}"),
                        origin: Origin::Api,
                        profile: "fast".into(),
                        ..Default::default()
                    })
                    .await?;
                for s in 0..3 {
                    store
                        .tasks()
                        .add_step(&t.id, &crate::testing::note(s, format!("{s}")))
                        .await?;
                }
            }
            Ok::<_, StoreError>(())
        })
        .await;
        for w in written {
            w.unwrap();
        }
        let total: i64 = query_scalar("SELECT COUNT(*) FROM tasks")
            .fetch_one(&store)
            .await
            .unwrap();
        let steps: i64 = query_scalar("SELECT COUNT(*) FROM task_steps")
            .fetch_one(&store)
            .await
            .unwrap();
        assert_eq!(total, 400);
        assert_eq!(steps, 1200);
    }
);

on_both_engines!(
    Disk,
    tokio::test,
    async fn workers_claim_pending_tasks_oldest_first_and_each_once(store: Store) {
        let mut ids = Vec::new();
        for _ in 0..20 {
            ids.push(task(&store).await.id);
        }
        let first = store.tasks().claim_next_pending().await.unwrap().unwrap();
        assert_eq!(first.id, ids[0]);
        assert_eq!(first.state, TaskState::Running);
        // Concurrent claimers take the rest, each task exactly once.
        let taken = in_parallel(&store, 8, |store, _| async move {
            let mut got = Vec::new();
            while let Some(t) = store.tasks().claim_next_pending().await.unwrap() {
                got.push(t.id);
            }
            got
        })
        .await;
        let mut claimed = vec![first.id];
        claimed.extend(taken.into_iter().flatten());
        claimed.sort();
        ids.sort();
        assert_eq!(claimed, ids);
        assert!(store.tasks().claim_next_pending().await.unwrap().is_none());
    }
);

// Facts added at the same time from many connections are all kept: the read-then-write
// transaction of an upsert takes the write lock first, so none of them finds its snapshot
// stale (SQLite's `database is locked`, which no busy timeout waits out; PostgreSQL's unique
// violation on `norm`).
on_both_engines!(
    Disk,
    tokio::test(flavor = "multi_thread", worker_threads = 4),
    async fn facts_upserted_at_once_from_many_connections_all_succeed(store: Store) {
        for round in 0..5 {
            let adds = (0..16).map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    let text = format!("fact {round}-{i}");
                    store.facts().upsert(&text, &[], "test").await
                })
            });
            for (i, add) in futures::future::join_all(adds)
                .await
                .into_iter()
                .enumerate()
            {
                let added = add.expect("the task ran");
                assert!(added.is_ok(), "round {round}, add {i}: {added:?}");
            }
        }
    }
);

// Claimers at the same moment each take a task while tasks are pending: none comes back empty
// for having picked the row another claimer took (PostgreSQL runs them truly in parallel).
on_both_engines!(
    Disk,
    tokio::test(flavor = "multi_thread", worker_threads = 4),
    async fn simultaneous_claimers_each_get_a_task_while_tasks_are_pending(store: Store) {
        for _ in 0..40 {
            task(&store).await;
        }
        for round in 0..4 {
            let got = at_once(&store, |store| async move {
                store
                    .tasks()
                    .claim_next_pending()
                    .await
                    .unwrap()
                    .map(|t| t.id)
            })
            .await;
            each_got_another(got, &format!("round {round}: a task"));
        }
    }
);

// Workers taking held tasks that can continue at the same moment each get one while any is
// ready, as with pending tasks.
on_both_engines!(
    Disk,
    tokio::test(flavor = "multi_thread", worker_threads = 4),
    async fn simultaneous_takers_each_get_a_ready_hold(store: Store) {
        for _ in 0..16 {
            let t = task(&store).await;
            assert!(store.tasks().start(&t.id).await.unwrap());
            store.holds().hold(&t.id, "{}", None).await.unwrap();
        }
        for round in 0..2 {
            let got = at_once(&store, |store| async move {
                store
                    .holds()
                    .take_ready(HoldOwner::Pool)
                    .await
                    .unwrap()
                    .map(|h| h.task_id)
            })
            .await;
            each_got_another(got, &format!("round {round}: a hold"));
        }
        assert!(
            store
                .holds()
                .take_ready(HoldOwner::Pool)
                .await
                .unwrap()
                .is_none()
        );
    }
);

/// How many takers start at the same moment in [`at_once`].
const TAKERS: usize = 8;

/// `take` run by [`TAKERS`] callers released together, so their statements meet in the store.
async fn at_once<Fut>(store: &Store, take: impl Fn(Store) -> Fut) -> Vec<Option<String>>
where
    Fut: std::future::Future<Output = Option<String>> + Send + 'static,
{
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(TAKERS));
    let take = &take;
    in_parallel(store, TAKERS, |store, _| {
        let barrier = barrier.clone();
        let took = take(store);
        async move {
            barrier.wait().await;
            took.await
        }
    })
    .await
}

/// Every taker got one, and no two the same.
fn each_got_another(got: Vec<Option<String>>, what: &str) {
    assert!(got.iter().all(Option::is_some), "{what}: {got:?}");
    let mut ids: Vec<String> = got.into_iter().flatten().collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), TAKERS, "{what} was taken twice");
}
