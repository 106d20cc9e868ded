use super::*;

async fn memory() -> (tempfile::TempDir, LongTerm) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open_in_memory().await.expect("store");
    let memory = LongTerm::open(dir.path(), store).await.expect("open");
    (dir, memory)
}

#[tokio::test]
async fn empty_and_overlong_facts_are_refused() {
    let (_dir, memory) = memory().await;
    assert!(matches!(
        memory.remember("  \n", &[], "test").await,
        Err(MemoryError::EmptyFact)
    ));
    let long = "字".repeat(MAX_FACT_CHARS + 1);
    assert!(matches!(
        memory.remember(&long, &[], "test").await,
        Err(MemoryError::FactTooLong(n)) if n == MAX_FACT_CHARS + 1
    ));
    assert_eq!(memory.inner.store.facts().count().await.expect("count"), 0);
}

#[tokio::test]
async fn query_syntax_is_just_text() {
    let (_dir, memory) = memory().await;
    memory
        .remember("The API key lives in the vault", &[], "test")
        .await
        .expect("remember");
    for query in ["\"api", "key:", "(vault", "AND OR NOT", "*", "a:b:c \" ]"] {
        memory.recall(query, 5).await.expect(query);
    }
    let found = memory.recall("key: \"vault", 5).await.expect("recall");
    assert_eq!(found.len(), 1);
}

#[tokio::test]
async fn empty_query_or_zero_k_finds_nothing() {
    let (_dir, memory) = memory().await;
    memory.remember("tea", &[], "test").await.expect("remember");
    assert!(memory.recall("", 5).await.expect("recall").is_empty());
    assert!(memory.recall(" ，。!", 5).await.expect("recall").is_empty());
    assert!(memory.recall("tea", 0).await.expect("recall").is_empty());
}

#[tokio::test]
async fn a_fact_sharing_only_function_words_with_the_query_is_not_recalled() {
    let (_dir, memory) = memory().await;
    for fact in [
        "The dentist appointment is on 14 December",
        "The bike lock code is 4711",
        "我的猫叫小白",
        "用户喜欢乌龙茶",
    ] {
        memory.remember(fact, &[], "test").await.expect("remember");
    }
    let texts =
        |found: Vec<Recalled>| -> Vec<String> { found.into_iter().map(|r| r.fact.text).collect() };
    let found = texts(
        memory
            .recall("What is the bike lock code?", 5)
            .await
            .expect("recall"),
    );
    assert_eq!(found, ["The bike lock code is 4711"]);
    let found = texts(memory.recall("我的茶是什么", 5).await.expect("recall"));
    assert_eq!(
        found,
        ["用户喜欢乌龙茶"],
        "'的', '是' and '我' alone find nothing"
    );
    // A query of nothing but function words still searches them: better something than nothing.
    assert_eq!(
        memory.recall("what is it", 5).await.expect("recall").len(),
        2
    );
}

#[tokio::test]
async fn tags_are_searchable() {
    let (_dir, memory) = memory().await;
    memory
        .remember(
            "Prefers aisle seats",
            &["travel".into(), "航班".into()],
            "test",
        )
        .await
        .expect("remember");
    assert_eq!(memory.recall("travel", 5).await.expect("recall").len(), 1);
    assert_eq!(memory.recall("航班", 5).await.expect("recall").len(), 1);
}

#[tokio::test]
async fn a_second_open_of_the_same_index_is_refused_not_wiped() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open_in_memory().await.expect("store");
    let first = LongTerm::open(dir.path(), store.clone())
        .await
        .expect("open");
    first.remember("kept", &[], "test").await.expect("remember");
    let second = LongTerm::open(dir.path(), store).await;
    assert!(matches!(second, Err(MemoryError::Locked { .. })));
    assert_eq!(first.recall("kept", 5).await.expect("recall").len(), 1);
}

/// Set in the child process [`a_second_process_is_refused_the_index`] starts: the data dir
/// whose index the child holds until its stdin closes.
const HOLD_INDEX_ENV: &str = "HERMES_TEST_HOLD_INDEX";
/// What the child prints once it holds the index.
const HOLDING: &str = "holding the memory index";

/// Between writes no tantivy writer (nor its lock file) exists, so only the process lock
/// keeps a second `hermes-agent` out. The test binary runs itself again as that process.
#[tokio::test]
async fn a_second_process_is_refused_the_index() {
    if let Some(dir) = std::env::var_os(HOLD_INDEX_ENV) {
        let store = Store::open(Path::new(&dir)).await.expect("store");
        let memory = LongTerm::open(Path::new(&dir), store).await.expect("open");
        memory
            .remember("held by the first process", &[], "test")
            .await
            .expect("remember");
        println!("{HOLDING}");
        // Held until the parent closes our stdin (or dies): the parent decides, no timer.
        tokio::task::spawn_blocking(|| {
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut Vec::new())
        })
        .await
        .expect("stdin reader")
        .expect("read stdin");
        return;
    }
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = tokio::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "memory::longterm::tests::a_second_process_is_refused_the_index",
            "--nocapture",
        ])
        .env(HOLD_INDEX_ENV, dir.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the holding process");
    let stdout = child.stdout.take().expect("child stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    // A bound, not a wait: the child signals as soon as it holds the index.
    let held = tokio::time::timeout(std::time::Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.expect("child output") {
            if line.contains(HOLDING) {
                return true;
            }
        }
        false
    })
    .await
    .expect("the child to open the index within a minute");
    assert!(held, "the child exited without holding the index");

    let store = Store::open(dir.path()).await.expect("store");
    let second = LongTerm::open(dir.path(), store.clone()).await;
    assert!(
        matches!(second, Err(MemoryError::Locked { .. })),
        "a second process opened a held index: {:?}",
        second.err()
    );

    drop(child.stdin.take());
    let status = child.wait().await.expect("child exit");
    assert!(status.success(), "the holding process failed: {status}");
    // The lock went with the process, and the index was left whole, not wiped.
    let memory = LongTerm::open(dir.path(), store)
        .await
        .expect("open once the first process is gone");
    assert_eq!(
        memory
            .recall("first process", 5)
            .await
            .expect("recall")
            .len(),
        1
    );
}

/// Start a child on another thread whose `pre_exec` (after fork, before exec) lingers for
/// `linger`: the child shares every descriptor the parent has open at the fork, close-on-exec
/// or not, until it execs — as a tool's sandboxed child does for a moment.
fn fork_lingering_child(linger: std::time::Duration) -> std::thread::JoinHandle<()> {
    use std::os::unix::process::CommandExt;
    std::thread::spawn(move || {
        let mut cmd = std::process::Command::new("true");
        // SAFETY: the closure only sleeps, which is async-signal-safe.
        unsafe {
            cmd.pre_exec(move || {
                std::thread::sleep(linger);
                Ok(())
            });
        }
        let _ = cmd.status();
    })
}

/// An flock belongs to the open file, which a child forked meanwhile shares: the index's
/// locks are unlocked when let go, not merely closed, so a child between its fork and its
/// exec does not keep the index from the next open.
#[tokio::test]
async fn a_child_forked_meanwhile_does_not_keep_the_index_locked_after_a_drop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open_in_memory().await.expect("store");
    let memory = LongTerm::open(dir.path(), store.clone())
        .await
        .expect("open");
    memory
        .remember("kept", &[], "test")
        .await
        .expect("remember");
    let child = fork_lingering_child(std::time::Duration::from_millis(800));
    // Long enough for the fork to have happened; the child then lingers for 600 ms more.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        Arc::strong_count(&memory.inner),
        1,
        "no other clone of the handle"
    );
    drop(memory);
    let again = LongTerm::open(dir.path(), store).await;
    assert!(again.is_ok(), "reopen refused: {:?}", again.err());
    child.join().expect("child thread");
}

/// A failed write starts a repair in the background; the repair must not keep the index (and
/// its lock) open once the last handle is dropped.
#[tokio::test]
async fn a_repair_under_way_does_not_keep_the_index_after_a_drop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open_in_memory().await.expect("store");
    let memory = LongTerm::open(dir.path(), store.clone())
        .await
        .expect("open");
    // tantivy's writer lock held elsewhere for a moment.
    let held = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(dir.path().join(INDEX_DIR).join(".tantivy-writer.lock"))
        .expect("writer lock file");
    held.try_lock().expect("take the writer lock");
    memory
        .remember("kept", &[], "test")
        .await
        .expect("the fact is saved");
    assert!(memory.trouble().is_some(), "the index write failed");
    drop(held);
    drop(memory);
    let again = LongTerm::open(dir.path(), store).await;
    assert!(again.is_ok(), "reopen refused: {:?}", again.err());
}
