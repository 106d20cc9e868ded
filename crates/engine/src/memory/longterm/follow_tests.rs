//! Catching up with the fact change sequence: two nodes on one PostgreSQL database (each its
//! own data dir and index), an index reopened after changes it missed, and the cases where only
//! a rebuild can be trusted.

use super::index::open_writer;
use super::*;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A second store on the same database as the first: another node.
async fn two_stores() -> (Store, Store) {
    let url = tokio::task::spawn_blocking(hermes_store::test_postgres::fresh_url)
        .await
        .expect("the cluster's thread");
    let open = || hermes_store::Store::open_postgres(&url, hermes_store::StoreOptions::default());
    (
        open().await.expect("store of node A"),
        open().await.expect("store of node B"),
    )
}

/// Nodes A and B of one database, each on its own data dir. The fields drop in order: the
/// indexes close before their dirs go.
struct TwoNodes {
    a: LongTerm,
    b: LongTerm,
    /// B's store, to reopen B on.
    store_b: Store,
    _dir_a: tempfile::TempDir,
    dir_b: tempfile::TempDir,
}

async fn two_nodes() -> TwoNodes {
    let (store_a, store_b) = two_stores().await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    TwoNodes {
        a: LongTerm::open(dir_a.path(), store_a).await.unwrap(),
        b: LongTerm::open(dir_b.path(), store_b.clone()).await.unwrap(),
        store_b,
        _dir_a: dir_a,
        dir_b,
    }
}

/// Documents in the index (recall skips a document whose fact is gone, so only this shows a
/// stale one).
fn documents(memory: &LongTerm) -> u64 {
    memory.inner.lock_index().reader.searcher().num_docs()
}

async fn ids(memory: &LongTerm, query: &str) -> Vec<String> {
    let found = memory.recall(query, 10).await.expect("recall");
    found.into_iter().map(|r| r.fact.id).collect()
}

/// Wait (bounded) until `check` holds for `memory`.
async fn until(
    memory: &LongTerm,
    within: Duration,
    what: &str,
    check: impl AsyncFn(&LongTerm) -> bool,
) {
    let deadline = Instant::now() + within;
    while !check(memory).await {
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_fact_remembered_or_forgotten_through_one_node_is_caught_up_by_the_other() {
    let n = two_nodes().await;
    let (a, b) = (&n.a, &n.b);

    let (fact, _) = a
        .remember("The user's dentist is Dr. Ng", &[], "test")
        .await
        .unwrap();
    // B's index has not seen it yet.
    assert!(ids(b, "dentist").await.is_empty());
    assert_eq!(b.catch_up().await.unwrap(), 1);
    assert_eq!(ids(b, "dentist").await, vec![fact.id.clone()]);
    assert_eq!(b.applied_seq(), a.applied_seq());

    // A new tag is a change too.
    a.remember("the user's dentist is Dr. Ng.", &["health".into()], "test")
        .await
        .unwrap();
    assert!(ids(b, "health").await.is_empty());
    assert_eq!(b.catch_up().await.unwrap(), 1);
    assert_eq!(ids(b, "health").await, vec![fact.id.clone()]);
    assert_eq!(documents(b), 1);

    assert!(a.forget(&fact.id).await.unwrap());
    assert_eq!(
        documents(b),
        1,
        "B still holds the document until it catches up"
    );
    assert_eq!(b.catch_up().await.unwrap(), 1);
    assert_eq!(documents(b), 0);
    assert!(ids(b, "dentist").await.is_empty());
    // Nothing new: nothing applied, and no rebuild on either side.
    assert_eq!(b.catch_up().await.unwrap(), 0);
    assert_eq!((a.rebuilds(), b.rebuilds()), (1, 1), "only each first open");
}

#[tokio::test]
async fn a_following_node_recalls_another_nodes_fact_within_two_seconds_and_stops_when_told() {
    let n = two_nodes().await;
    let (a, b) = (&n.a, &n.b);
    let stop = CancellationToken::new();
    let follower = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move { b.follow_changes(stop).await })
    };

    let (fact, _) = a.remember("喜欢喝乌龙茶", &[], "test").await.unwrap();
    let wanted = vec![fact.id.clone()];
    until(b, Duration::from_secs(2), "B recalls A's fact", async |b| {
        ids(b, "乌龙茶").await == wanted
    })
    .await;
    assert!(a.forget(&fact.id).await.unwrap());
    until(
        b,
        Duration::from_secs(2),
        "B drops A's forgotten fact",
        async |b| documents(b) == 0,
    )
    .await;

    stop.cancel();
    tokio::time::timeout(Duration::from_secs(5), follower)
        .await
        .expect("the follower stops when told")
        .expect("the follower did not panic");
}

#[tokio::test]
async fn a_wake_catches_up_at_once() {
    let n = two_nodes().await;
    let (a, b) = (&n.a, &n.b);
    // The loop's first look, then a long wait that only a wake cuts short.
    let stop = CancellationToken::new();
    let follower = {
        let (b, stop) = (b.clone(), stop.clone());
        tokio::spawn(async move { b.follow_every(Duration::from_secs(3600), stop).await })
    };
    a.remember("the cat is called Miso", &[], "test")
        .await
        .unwrap();
    b.wake();
    until(
        b,
        Duration::from_secs(20),
        "B catches up when woken",
        async |b| ids(b, "Miso").await.len() == 1,
    )
    .await;
    stop.cancel();
    follower.await.unwrap();
}

#[tokio::test]
async fn a_node_reopened_after_changes_it_missed_catches_up_without_a_rebuild() {
    let n = two_nodes().await;
    let (a, store_b) = (&n.a, &n.store_b);
    let (kept, _) = a.remember("tea is oolong", &[], "test").await.unwrap();
    let (gone, _) = a.remember("coffee is black", &[], "test").await.unwrap();
    n.b.catch_up().await.unwrap();
    drop(n.b);

    // While B is closed: a new fact, a new tag, a forgotten fact.
    let (new, _) = a
        .remember("the cat is called Miso", &[], "test")
        .await
        .unwrap();
    a.remember("Tea is oolong", &["drink".into()], "test")
        .await
        .unwrap();
    assert!(a.forget(&gone.id).await.unwrap());

    let b = LongTerm::open(n.dir_b.path(), store_b.clone())
        .await
        .unwrap();
    assert_eq!(b.rebuilds(), 0, "caught up from the changes, not rebuilt");
    assert_eq!(b.applied_seq(), store_b.facts().change_seq().await.unwrap());
    assert_eq!(documents(&b), 2);
    assert_eq!(ids(&b, "Miso").await, vec![new.id]);
    assert_eq!(ids(&b, "drink").await, vec![kept.id]);
    assert!(ids(&b, "coffee").await.is_empty());
    drop(b);

    // Changes B missed pruned away meanwhile: it cannot know what they were, so it rebuilds.
    a.remember("the dog is called Rex", &[], "test")
        .await
        .unwrap();
    a.remember("the bird is called Kiwi", &[], "test")
        .await
        .unwrap();
    let future = hermes_store::now() + chrono::Duration::days(1);
    assert!(store_b.facts().prune_changes(future).await.unwrap() > 0);
    let b = LongTerm::open(n.dir_b.path(), store_b.clone())
        .await
        .unwrap();
    assert_eq!(b.rebuilds(), 1);
    assert_eq!(documents(&b), 4);
    assert_eq!(ids(&b, "Rex").await.len(), 1);
}

/// On one SQLite data dir (one daemon, or the CLI while it is stopped): the index's own
/// writes just move its mark on; a reopen applies only what changed while it was closed.
#[tokio::test]
async fn own_writes_move_the_mark_and_a_reopen_applies_what_was_missed() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let memory = LongTerm::open(dir.path(), store.clone()).await.unwrap();
    let (fact, _) = memory.remember("tea is oolong", &[], "test").await.unwrap();
    memory
        .remember("tea is oolong", &["drink".into()], "test")
        .await
        .unwrap();
    assert!(memory.forget(&fact.id).await.unwrap());
    let (kept, _) = memory
        .remember("the cat is Miso", &[], "test")
        .await
        .unwrap();
    assert_eq!(memory.applied_seq(), 4);
    assert_eq!(
        memory.catch_up().await.unwrap(),
        0,
        "nothing to apply again"
    );
    drop(memory);

    // Written while the index was closed (a crash between the store and the index).
    let (late, _) = store
        .facts()
        .upsert("the dog is Rex", &[], "test")
        .await
        .unwrap();
    assert_eq!(store.facts().delete(&kept.id).await.unwrap(), Some(6));
    let memory = LongTerm::open(dir.path(), store.clone()).await.unwrap();
    assert_eq!(memory.rebuilds(), 0);
    assert_eq!(memory.applied_seq(), 6);
    assert_eq!(ids(&memory, "Rex").await, vec![late.id]);
    assert_eq!(documents(&memory), 1);
}

#[tokio::test]
async fn an_index_without_a_readable_mark_or_marked_by_another_database_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let memory = LongTerm::open(dir.path(), store.clone()).await.unwrap();
    memory.remember("tea is oolong", &[], "test").await.unwrap();
    // A commit whose record is not ours (an older build wrote none; damage).
    {
        let index = memory.inner.lock_index().index.clone();
        let mut writer = open_writer(&index).unwrap();
        let mut commit = writer.prepare_commit().unwrap();
        commit.set_payload("not a mark");
        commit.commit().unwrap();
    }
    drop(memory);
    let memory = LongTerm::open(dir.path(), store).await.unwrap();
    assert_eq!(memory.rebuilds(), 1);
    assert_eq!(ids(&memory, "oolong").await.len(), 1);
    drop(memory);

    // The same index opened on another database: its mark counts in another sequence.
    let other = tempfile::tempdir().unwrap();
    let store = Store::open(other.path()).await.unwrap();
    store
        .facts()
        .upsert("the cat is Miso", &[], "test")
        .await
        .unwrap();
    let memory = LongTerm::open(dir.path(), store).await.unwrap();
    assert_eq!(memory.rebuilds(), 1);
    assert!(ids(&memory, "oolong").await.is_empty());
    assert_eq!(ids(&memory, "Miso").await.len(), 1);
}
