//! Memory, end to end: the short-term window with each summariser, and long-term recall over a
//! real on-disk store and index (Chinese, English, mixed), its repair and its persistence.

use futures::future::BoxFuture;
use hermes_engine::llm::{LlmError, Message, Role, ToolCall};
use hermes_engine::memory::{LongTerm, ShortTerm, Summariser, SummaryModel};
use hermes_store::{Store, Upsert};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

// ---------- short-term window ----------

const GOAL: &str =
    "Collect this week's Rust release notes and mail a digest to Alice. Keep it short.";

fn round(i: usize) -> (Message, Vec<Message>) {
    let id = format!("call_{i}");
    let assistant = Message::assistant(
        format!("Step {i}: fetching page {i} next."),
        vec![ToolCall {
            id: id.clone(),
            name: "web_fetch".into(),
            arguments: serde_json::json!({"url": format!("https://example.com/{i}")}),
        }],
    );
    let result = Message::tool(
        id,
        format!(
            "{{\"title\": \"Page {i} title\", \"text\": \"{}\"}}",
            "body ".repeat(50)
        ),
    );
    (assistant, vec![result])
}

fn window(max_rounds: usize, max_chars: usize) -> ShortTerm {
    ShortTerm::new(
        vec![
            Message::system("You are hermes."),
            Message::system("Facts: the user is Alice's colleague."),
        ],
        Message::user(GOAL),
        max_rounds,
        max_chars,
    )
}

/// Checks the window's shape: preamble, goal, optional summary, then exactly the last
/// `max_rounds` rounds pushed so far (`pushed` rounds in total).
fn assert_window(st: &ShortTerm, max_rounds: usize, max_chars: usize, pushed: usize) {
    let msgs = st.messages();
    assert_eq!(msgs[0].content, "You are hermes.");
    assert_eq!(msgs[1].role, Role::System);
    assert_eq!(msgs[2], Message::user(GOAL), "the goal is never dropped");
    let mut rest = &msgs[3..];
    if !st.summary().is_empty() {
        assert_eq!(rest[0].role, Role::User);
        assert_eq!(
            rest[0].content,
            format!("Progress so far: {}", st.summary())
        );
        rest = &rest[1..];
    }
    assert!(
        st.summary().chars().count() <= max_chars,
        "summary too long: {}",
        st.summary()
    );
    let kept = pushed.min(max_rounds);
    assert_eq!(rest.len(), kept * 2, "never more than {max_rounds} rounds");
    for (n, pair) in rest.chunks(2).enumerate() {
        let i = pushed - kept + n;
        assert_eq!(pair[0].role, Role::Assistant);
        assert_eq!(
            pair[0].content,
            format!("Step {i}: fetching page {i} next.")
        );
        assert_eq!(
            pair[1].tool_call_id.as_deref(),
            Some(format!("call_{i}").as_str())
        );
    }
}

#[tokio::test]
async fn rule_summariser_keeps_the_window_bounded_over_20_rounds() {
    let (max_rounds, max_chars) = (2, 100);
    let mut st = window(max_rounds, max_chars);
    assert_window(&st, max_rounds, max_chars, 0);
    assert!(st.summary().is_empty());
    for i in 0..20 {
        let (a, r) = round(i);
        st.push_round(a, r);
        st.compact(&Summariser::Rules).await;
        assert_window(&st, max_rounds, max_chars, i + 1);
    }
    let s = st.summary();
    assert!(s.contains("Goal: Collect this week"), "{s}");
    assert!(
        s.contains("web_fetch→title: Page 17"),
        "the newest folded round is named: {s}"
    );
    assert!(s.contains("Next: Step 19"), "{s}");
    assert!(
        s.starts_with("Done: …; "),
        "older steps are marked as left out: {s}"
    );
}

#[tokio::test]
async fn summary_waits_for_compact_and_short_tasks_have_none() {
    let mut st = window(2, 100);
    for i in 0..2 {
        let (a, r) = round(i);
        st.push_round(a, r);
        st.compact(&Summariser::Rules).await;
    }
    assert!(
        st.summary().is_empty(),
        "nothing folded yet: {}",
        st.summary()
    );
    let (a, r) = round(2);
    st.push_round(a, r);
    assert!(st.summary().is_empty());
    assert_window(&st, 2, 100, 3);
    st.compact(&Summariser::Rules).await;
    assert!(
        st.summary().contains("web_fetch→title: Page 0"),
        "{}",
        st.summary()
    );
}

#[tokio::test]
async fn chinese_goal_summary_is_cut_on_characters() {
    let goal = "每天早上八点抓取天气预报并整理成简报，发送到我的邮箱，如果下雨要特别提醒带伞，还要附上空气质量。";
    let mut st = ShortTerm::new(vec![], Message::user(goal), 1, 30);
    for i in 0..5 {
        let (a, r) = round(i);
        st.push_round(a, r);
        st.compact(&Summariser::Rules).await;
    }
    assert!(st.summary().chars().count() <= 30, "{}", st.summary());
    assert!(st.summary().contains("每天早上"), "{}", st.summary());
}

struct FixedModel {
    reply: String,
    prompts: AtomicUsize,
    last_prompt: std::sync::Mutex<String>,
}

impl SummaryModel for FixedModel {
    fn summarise<'a>(&'a self, prompt: String) -> BoxFuture<'a, Result<String, LlmError>> {
        Box::pin(async move {
            self.prompts.fetch_add(1, Ordering::SeqCst);
            if let Ok(mut last) = self.last_prompt.lock() {
                *last = prompt;
            }
            Ok(self.reply.clone())
        })
    }
}

struct FailingModel {
    calls: AtomicUsize,
    empty: bool,
}

impl SummaryModel for FailingModel {
    fn summarise<'a>(&'a self, _prompt: String) -> BoxFuture<'a, Result<String, LlmError>> {
        Box::pin(async move {
            self.calls.fetch_add(1, Ordering::SeqCst);
            if self.empty {
                Ok("  \n ".to_string())
            } else {
                Err(LlmError::Setup {
                    reason: "connection refused".into(),
                })
            }
        })
    }
}

#[tokio::test]
async fn model_summary_is_cut_to_the_limit() {
    let model = Arc::new(FixedModel {
        reply: format!(
            "Progress so far: {}",
            "已完成抓取，下一步发送邮件。".repeat(40)
        ),
        prompts: AtomicUsize::new(0),
        last_prompt: std::sync::Mutex::new(String::new()),
    });
    let summariser = Summariser::Model(model.clone());
    let mut st = window(2, 100);
    for i in 0..20 {
        let (a, r) = round(i);
        st.push_round(a, r);
        st.compact(&summariser).await;
        assert_window(&st, 2, 100, i + 1);
    }
    assert_eq!(st.summary().chars().count(), 100);
    assert!(
        st.summary().starts_with("已完成抓取"),
        "echoed label dropped: {}",
        st.summary()
    );
    // One model call per compaction that had something to fold: rounds 3..=20.
    assert_eq!(model.prompts.load(Ordering::SeqCst), 18);
    let prompt = model
        .last_prompt
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default();
    assert!(prompt.contains("at most 100 characters"), "{prompt}");
    assert!(
        prompt.contains("Collect this week's Rust release notes"),
        "{prompt}"
    );
    assert!(prompt.contains("Summary so far: 已完成抓取"), "{prompt}");
    assert!(
        prompt.contains("web_fetch") && prompt.contains("Page 17 title"),
        "{prompt}"
    );
}

#[tokio::test]
async fn failing_or_empty_model_falls_back_to_rules() {
    for empty in [false, true] {
        let model = Arc::new(FailingModel {
            calls: AtomicUsize::new(0),
            empty,
        });
        let summariser = Summariser::Model(model.clone());
        let mut st = window(2, 100);
        let mut rules = window(2, 100);
        for i in 0..20 {
            let (a, r) = round(i);
            st.push_round(a.clone(), r.clone());
            rules.push_round(a, r);
            st.compact(&summariser).await;
            rules.compact(&Summariser::Rules).await;
            assert_window(&st, 2, 100, i + 1);
        }
        assert!(model.calls.load(Ordering::SeqCst) > 0);
        assert!(!st.summary().is_empty());
        assert_eq!(st.summary(), rules.summary(), "empty={empty}");
    }
}

// ---------- long-term memory ----------

async fn open(dir: &Path) -> (Store, LongTerm) {
    let store = Store::open(dir).await.expect("store");
    let memory = LongTerm::open(dir, store.clone())
        .await
        .expect("long-term memory");
    (store, memory)
}

/// The memory of `dir` opened again after its last handle was dropped: the index's locks go
/// with it, whatever children were forked meanwhile (unit tests in `longterm/tests.rs`).
async fn reopen(dir: &Path, store: Store) -> Result<LongTerm, hermes_engine::memory::MemoryError> {
    LongTerm::open(dir, store).await
}

async fn ids(memory: &LongTerm, query: &str) -> Vec<String> {
    memory
        .recall(query, 10)
        .await
        .expect("recall")
        .into_iter()
        .map(|r| r.fact.id)
        .collect()
}

async fn add(memory: &LongTerm, text: &str) -> String {
    memory
        .remember(text, &[], "test")
        .await
        .expect("remember")
        .0
        .id
}

/// A handful of facts that share words, so a search that matched everything would be noticed.
async fn seed(memory: &LongTerm) -> Vec<String> {
    let mut out = Vec::new();
    for text in [
        "用户喜欢喝乌龙茶",
        "用户不喝咖啡",
        "The user prefers running in the morning",
        "The user's cat is called Miso",
        "周报 weekly report 发给 Alice",
        "月报发给财务部",
        "Meetings on Friday afternoons are to be declined",
    ] {
        out.push(add(memory, text).await);
    }
    out
}

#[tokio::test]
async fn recall_in_chinese_english_and_mixed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_store, memory) = open(dir.path()).await;
    let f = seed(&memory).await;

    let tea = ids(&memory, "乌龙茶").await;
    assert_eq!(
        tea,
        vec![f[0].clone()],
        "only the tea fact has these characters"
    );

    let run = ids(&memory, "runs morning").await;
    assert_eq!(
        run.first(),
        Some(&f[2]),
        "stemming: runs ~ running: {run:?}"
    );
    assert!(!run.contains(&f[0]));

    let report = ids(&memory, "weekly 周报").await;
    assert_eq!(report.first(), Some(&f[4]), "{report:?}");

    let found = memory.recall("乌龙茶", 5).await.expect("recall");
    assert_eq!(found[0].fact.text, "用户喜欢喝乌龙茶");
    assert_eq!(found[0].fact.source, "test");
    assert!(found[0].score > 0.0);

    assert!(
        ids(&memory, "penguin 企鹅").await.is_empty(),
        "no shared term, no hit"
    );
}

#[tokio::test]
async fn any_query_word_is_enough() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_store, memory) = open(dir.path()).await;
    let f = seed(&memory).await;
    let hits = ids(&memory, "what is the name of my cat zyxwvut").await;
    assert_eq!(hits.first(), Some(&f[3]), "{hits:?}");
    let hits = ids(&memory, "乌龙茶 xylophone").await;
    assert_eq!(hits.first(), Some(&f[0]), "{hits:?}");
}

#[tokio::test]
async fn the_more_relevant_fact_ranks_first() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (_store, memory) = open(dir.path()).await;
    let weak = add(
        &memory,
        "The user visited Berlin once, and the trip was long",
    )
    .await;
    let strong = add(
        &memory,
        "The user's favourite city is Berlin; Berlin trips every spring",
    )
    .await;
    let other = add(&memory, "The user owns a red bicycle").await;
    let hits = memory.recall("Berlin trip", 5).await.expect("recall");
    let order: Vec<&str> = hits.iter().map(|r| r.fact.id.as_str()).collect();
    assert_eq!(order, vec![strong.as_str(), weak.as_str()]);
    assert!(hits[0].score > hits[1].score);
    assert!(!order.contains(&other.as_str()));

    let tea = add(&memory, "用户喜欢喝乌龙茶").await;
    let tea_shop = add(&memory, "楼下新开了一家茶店").await;
    let hits = ids(&memory, "乌龙茶").await;
    assert_eq!(
        hits,
        vec![tea, tea_shop],
        "the bigram match beats a lone 茶"
    );

    assert_eq!(
        memory.recall("user", 2).await.expect("recall").len(),
        2,
        "k bounds the answer"
    );
}

#[tokio::test]
async fn forget_removes_from_store_and_index() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, memory) = open(dir.path()).await;
    let f = seed(&memory).await;
    assert!(memory.forget(&f[0]).await.expect("forget"));
    assert!(ids(&memory, "乌龙茶").await.is_empty());
    assert!(!memory.forget(&f[0]).await.expect("forget again"));
    assert!(
        !memory
            .forget("f_nonexistent")
            .await
            .expect("forget unknown")
    );
    assert_eq!(store.facts().count().await.expect("count"), 6);
    assert_eq!(
        ids(&memory, "咖啡").await,
        vec![f[1].clone()],
        "other facts stay"
    );
}

#[tokio::test]
async fn duplicates_merge_into_one_document() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, memory) = open(dir.path()).await;
    let (a, how) = memory
        .remember("The user prefers oolong tea", &["drinks".into()], "task:1")
        .await
        .expect("remember");
    assert_eq!(how, Upsert::Created);
    let (b, how) = memory
        .remember(
            "  the user prefers   OOLONG tea. ",
            &["preference".into(), "drinks".into()],
            "task:2",
        )
        .await
        .expect("remember again");
    assert_eq!(how, Upsert::Merged);
    assert_eq!(a.id, b.id);
    assert_eq!(b.tags, vec!["drinks".to_string(), "preference".to_string()]);
    assert_eq!(store.facts().count().await.expect("count"), 1);

    let hits = memory.recall("oolong tea", 10).await.expect("recall");
    assert_eq!(hits.len(), 1, "one document per fact: {hits:?}");
    assert_eq!(hits[0].fact.tags, b.tags);
    assert_eq!(
        ids(&memory, "preference").await,
        vec![a.id.clone()],
        "the merged tag is indexed"
    );
    // Reopening recounts documents against rows: still one, so no rebuild is needed.
    drop(memory);
    let reopened = reopen(dir.path(), store).await.expect("reopen");
    assert_eq!(
        reopened.recall("oolong", 10).await.expect("recall").len(),
        1
    );
}

async fn answers(memory: &LongTerm) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for q in [
        "乌龙茶",
        "runs morning",
        "weekly 周报",
        "cat",
        "发给",
        "user",
    ] {
        out.push(ids(memory, q).await);
    }
    out
}

#[tokio::test]
async fn a_deleted_index_is_rebuilt_with_the_same_answers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, memory) = open(dir.path()).await;
    seed(&memory).await;
    let before = answers(&memory).await;
    drop(memory);
    std::fs::remove_dir_all(dir.path().join("memory-index")).expect("delete index");
    let memory = reopen(dir.path(), store).await.expect("reopen");
    assert!(dir.path().join("memory-index").join("meta.json").exists());
    assert_eq!(answers(&memory).await, before);
}

#[tokio::test]
async fn a_corrupt_index_is_rebuilt_with_the_same_answers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, memory) = open(dir.path()).await;
    seed(&memory).await;
    let before = answers(&memory).await;
    drop(memory);
    let meta = dir.path().join("memory-index").join("meta.json");
    std::fs::write(&meta, b"{ this is not json \x00\xff").expect("corrupt meta.json");
    let memory = LongTerm::open(dir.path(), store.clone())
        .await
        .expect("reopen after corruption");
    assert_eq!(answers(&memory).await, before);
    drop(memory);

    // Damage the segment files instead: truncate every one of them.
    for entry in std::fs::read_dir(dir.path().join("memory-index")).expect("list index") {
        let path = entry.expect("entry").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if !name.starts_with('.') && name != "meta.json" {
            std::fs::write(&path, b"junk").expect("truncate segment file");
        }
    }
    let memory = reopen(dir.path(), store)
        .await
        .expect("reopen after damaged segments");
    assert_eq!(answers(&memory).await, before);
}

#[tokio::test]
async fn an_index_that_missed_writes_is_rebuilt() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, memory) = open(dir.path()).await;
    seed(&memory).await;
    drop(memory);
    // Written to the store while the index was not looking (a crash between the two writes).
    let (late, _) = store
        .facts()
        .upsert("The user's dentist is Dr. Ng", &[], "test")
        .await
        .expect("upsert");
    let memory = reopen(dir.path(), store).await.expect("reopen");
    assert_eq!(ids(&memory, "dentist").await, vec![late.id]);
    assert_eq!(memory.rebuild().await.expect("rebuild"), 8);
    assert_eq!(ids(&memory, "dentist").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_parallel_remembers_are_all_findable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, memory) = open(dir.path()).await;
    let mut handles = Vec::new();
    for i in 0..20 {
        let memory = memory.clone();
        handles.push(tokio::spawn(async move {
            let text = format!("Parallel fact number{i} about 项目{i}");
            memory
                .remember(&text, &[format!("tag{i}")], &format!("task:{i}"))
                .await
        }));
    }
    let mut made = Vec::new();
    for h in handles {
        made.push(h.await.expect("join").expect("remember").0);
    }
    assert_eq!(store.facts().count().await.expect("count"), 20);
    for (i, fact) in made.iter().enumerate() {
        assert_eq!(
            ids(&memory, &format!("number{i}")).await,
            vec![fact.id.clone()]
        );
        assert_eq!(
            ids(&memory, &format!("tag{i}")).await,
            vec![fact.id.clone()]
        );
    }
    assert_eq!(
        memory.recall("parallel", 20).await.expect("recall").len(),
        20
    );
}

#[tokio::test]
async fn facts_survive_a_reopen() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (store, memory) = open(dir.path()).await;
    let f = seed(&memory).await;
    let before = answers(&memory).await;
    drop(memory);
    store.close().await;

    let (store, memory) = open(dir.path()).await;
    assert_eq!(store.facts().count().await.expect("count"), f.len() as i64);
    assert_eq!(answers(&memory).await, before);
    assert_eq!(ids(&memory, "乌龙茶").await, vec![f[0].clone()]);
}
