//! Recall by meaning against a real embedding model: wordllama (its weights ship in its PyPI
//! wheel) behind a small OpenAI-compatible `/v1/embeddings` server (`scripts/embed-server.py`),
//! on real on-disk stores and indexes. The recall set in `tests/data/recall_set.json` (facts
//! told to an assistant, and questions that share no content word with their fact, in English
//! and Chinese) is scored keyword-only and hybrid; and the server dead, slow, replaced by
//! another model, and a fact forgotten.

use crate::deps;
use hermes_config::EmbeddingSettings;
use hermes_engine::llm::Embedder;
use hermes_engine::memory::LongTerm;
use hermes_store::{Store, VectorModel};
use serde::Deserialize;
use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The floor for wordllama-256: its unrelated English pairs score a median 0.01 (p95 0.14),
/// but a question and its fact often no more than 0.14 (p25); at 0.1, English recall@3 by
/// meaning is 0.80, at 0.15 0.73.
const FLOOR: f32 = 0.1;
/// The longest the background worker may take to embed a few facts, or to notice the server.
// Generous: a fresh machine building and installing beside the tests is slow to embed.
const PATIENCE: Duration = Duration::from_secs(60);

/// The embedding server, stopped on drop.
pub(crate) struct EmbedServer {
    child: Child,
    pub(crate) base_url: String,
}

impl EmbedServer {
    pub(crate) fn start(extra: &[&str]) -> EmbedServer {
        EmbedServer::start_on(0, extra)
    }

    pub(crate) fn start_on(port: u16, extra: &[&str]) -> EmbedServer {
        let d = deps::embed();
        let port = port.to_string();
        let mut child = Command::new(&d.python)
            .arg(&d.server)
            .args(["--host", "127.0.0.1", "--port", &port])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the embedding server starts");
        let stdout = child.stdout.take().expect("its stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .expect("the embedding server says where it listens");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("the embedding server said {line:?}"))
            .to_string();
        EmbedServer {
            child,
            base_url: format!("http://{addr}/v1"),
        }
    }
}

impl Drop for EmbedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn settings(base_url: &str, model: &str) -> EmbeddingSettings {
    EmbeddingSettings {
        base_url: base_url.to_string(),
        model: model.to_string(),
        min_similarity: FLOOR,
        ..Default::default()
    }
}

async fn open(dir: &Path, store: &Store, embeddings: Option<&EmbeddingSettings>) -> LongTerm {
    let embedder = embeddings.map(|e| (Embedder::new(e).expect("an embedder"), e.min_similarity));
    LongTerm::open_with(dir, store.clone(), embedder)
        .await
        .expect("memory opens")
}

/// Wait (bounded) until `memory` holds `n` vectors of the current model.
async fn holds(memory: &LongTerm, n: usize) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let status = memory.meaning().expect("meaning is on");
        if status.vectors == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "not {n} vectors within {PATIENCE:?}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[derive(Deserialize)]
struct RecallSet {
    facts: Vec<SetFact>,
    questions: Vec<Question>,
}

#[derive(Deserialize)]
struct SetFact {
    key: String,
    text: String,
}

#[derive(Deserialize)]
struct Question {
    q: String,
    fact: String,
    kind: String,
    lang: String,
}

fn recall_set() -> RecallSet {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/recall_set.json");
    let text = std::fs::read_to_string(&path).expect("the recall set");
    serde_json::from_str(&text).expect("the recall set parses")
}

/// Where `id` is in `memory`'s recall of `q` (1 = first), if among the first 3.
async fn place(memory: &LongTerm, q: &str, id: &str) -> Option<usize> {
    let found = memory.recall(q, 3).await.expect("recall");
    found.iter().position(|r| r.fact.id == id).map(|i| i + 1)
}

#[derive(Default, Debug, Clone, Copy)]
struct Score {
    asked: usize,
    at1: usize,
    at3: usize,
}

impl Score {
    fn add(&mut self, place: Option<usize>) {
        self.asked += 1;
        self.at1 += usize::from(place == Some(1));
        self.at3 += usize::from(place.is_some());
    }

    fn show(&self) -> String {
        let of = |n: usize| n as f64 / self.asked.max(1) as f64;
        format!(
            "@1 {:.2}  @3 {:.2}  (n = {})",
            of(self.at1),
            of(self.at3),
            self.asked
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hybrid_recall_finds_by_meaning_what_keywords_miss_and_loses_nothing_they_find() {
    let server = EmbedServer::start(&[]);
    let set = recall_set();
    let (words_dir, hybrid_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let words_store = Store::open(words_dir.path()).await.unwrap();
    let hybrid_store = Store::open(hybrid_dir.path()).await.unwrap();
    let words = open(words_dir.path(), &words_store, None).await;
    let embeddings = settings(&server.base_url, "wordllama-256");
    let hybrid = open(hybrid_dir.path(), &hybrid_store, Some(&embeddings)).await;
    let mut ids: HashMap<&str, (String, String)> = HashMap::new();
    for f in &set.facts {
        let (a, _) = words.remember(&f.text, &[], "test").await.unwrap();
        let (b, _) = hybrid.remember(&f.text, &[], "test").await.unwrap();
        ids.insert(&f.key, (a.id, b.id));
    }
    // No worker here: a fact is found by its words the moment it is stored, by its meaning
    // once embedded.
    assert_eq!(hybrid.meaning().unwrap().vectors, 0);
    let embedded = hybrid.embed_all(|_, _| {}).await.expect("embedded");
    assert_eq!(embedded as usize, set.facts.len());
    assert_eq!(hybrid.meaning().unwrap().vectors, set.facts.len());

    let mut table: HashMap<(String, String, &str), Score> = HashMap::new();
    let mut lost = Vec::new();
    for q in &set.questions {
        let (w_id, h_id) = &ids[q.fact.as_str()];
        let by_words = place(&words, &q.q, w_id).await;
        let by_both = place(&hybrid, &q.q, h_id).await;
        for (how, got) in [("keyword", by_words), ("hybrid", by_both)] {
            table
                .entry((q.kind.clone(), q.lang.clone(), how))
                .or_default()
                .add(got);
        }
        // Never worse where keyword recall answers: what it puts first, hybrid puts first.
        if by_words == Some(1) && by_both != Some(1) {
            lost.push(format!(
                "{:?}: keyword {by_words:?}, hybrid {by_both:?}",
                q.q
            ));
        }
        // Lower down, keyword recall finds facts by function words too ("the", "is", "for"),
        // which the hybrid ranking leaves out; said, not failed.
        if by_words.is_some() && by_both.is_none() {
            eprintln!(
                "recall set: keyword found {:?} at {by_words:?}, hybrid not in 3",
                q.q
            );
        }
    }
    let mut keys: Vec<_> = table.keys().cloned().collect();
    keys.sort();
    for key in &keys {
        eprintln!(
            "recall set {:8} {} {:8} {}",
            key.0,
            key.1,
            key.2,
            table[key].show()
        );
    }
    assert!(
        lost.is_empty(),
        "hybrid recall lost what keywords found first: {lost:#?}"
    );
    let score = |kind: &str, lang: &str, how| table[&(kind.to_string(), lang.to_string(), how)];
    let (words_en, hybrid_en) = (
        score("meaning", "en", "keyword"),
        score("meaning", "en", "hybrid"),
    );
    // The set's questions share no content word with their facts: keywords find a few, by
    // function words ("the", "is") alone.
    assert!(words_en.at3 * 3 <= words_en.asked, "{words_en:?}");
    assert!(
        hybrid_en.at3 * 10 >= hybrid_en.asked * 7
            && hybrid_en.at1 >= words_en.at1 + hybrid_en.asked / 3,
        "hybrid is not clearly better by meaning in English: {hybrid_en:?} against {words_en:?}"
    );
    // wordllama's tokenizer cuts most Chinese characters into bytes that unrelated ones share,
    // so its Chinese vectors are near chance: hybrid is held only to doing no worse there.
    let (words_zh, hybrid_zh) = (
        score("meaning", "zh", "keyword"),
        score("meaning", "zh", "hybrid"),
    );
    assert!(
        hybrid_zh.at1 >= words_zh.at1 && hybrid_zh.at3 >= words_zh.at3,
        "{hybrid_zh:?} against {words_zh:?}"
    );
    for lang in ["en", "zh"] {
        let (w, h) = (
            score("keyword", lang, "keyword"),
            score("keyword", lang, "hybrid"),
        );
        assert_eq!(
            w.at1, w.asked,
            "keyword questions in {lang} are answered by keyword"
        );
        assert_eq!(h.at1, w.at1, "and by hybrid recall just as well, in {lang}");
    }
    // Each result says what found it.
    let car = &ids["car"].1;
    let found = hybrid
        .recall("what colour is my automobile?", 3)
        .await
        .unwrap();
    let hit = found
        .iter()
        .find(|r| &r.fact.id == car)
        .expect("the car, by meaning");
    assert_eq!(hit.keyword_rank, None);
    assert!(hit.similarity.is_some_and(|s| s >= FLOOR), "{hit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_then_slow_server_never_slows_recall_and_facts_are_embedded_once_it_answers() {
    // A port nobody listens on yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let embeddings = settings(&format!("http://127.0.0.1:{port}/v1"), "wordllama-256");
    let memory = open(dir.path(), &store, Some(&embeddings)).await;
    let (tracker, stop) = (TaskTracker::new(), CancellationToken::new());
    memory.spawn_meaning(&tracker, stop.clone());
    let (car, _) = memory
        .remember("My car is a red Volvo", &[], "test")
        .await
        .unwrap();
    memory
        .remember("We hike in the Alps each August", &[], "test")
        .await
        .unwrap();
    // By its words at once, whatever the embedding server does.
    let started = Instant::now();
    let found = memory.recall("Volvo", 5).await.unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].fact.id, car.id);
    assert_eq!(found[0].keyword_rank, Some(1));
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    let deadline = Instant::now() + PATIENCE;
    while memory.meaning_trouble().is_none() {
        assert!(
            Instant::now() < deadline,
            "the dead server is never noticed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let why = memory.meaning_trouble().unwrap();
    assert!(why.contains("cannot be reached"), "{why}");

    // The server comes up where it was configured: the worker notices, embeds both facts.
    let server = EmbedServer::start_on(port, &[]);
    holds(&memory, 2).await;
    assert_eq!(memory.meaning_trouble(), None);
    let found = memory
        .recall("what colour is my automobile?", 5)
        .await
        .unwrap();
    assert_eq!(
        found.first().map(|r| &r.fact.id),
        Some(&car.id),
        "{found:?}"
    );
    assert!(found[0].similarity.is_some());

    // Forgotten: its vector goes with it, and meaning no longer finds it.
    assert!(memory.forget(&car.id).await.unwrap());
    assert_eq!(memory.meaning().unwrap().vectors, 1);
    assert_eq!(store.vectors().rows().await.unwrap(), 1);
    let found = memory
        .recall("what colour is my automobile?", 5)
        .await
        .unwrap();
    assert!(found.iter().all(|r| r.fact.id != car.id), "{found:?}");
    drop(server);

    // Slow: a recall waits at most about a second for its query's vector, then the server
    // counts as away and recalls do not wait at all until it answers again.
    let slow = EmbedServer::start_on(port, &["--delay-ms", "5000"]);
    memory
        .remember("Biscuit is our golden retriever", &[], "test")
        .await
        .unwrap();
    let started = Instant::now();
    let found = memory.recall("Biscuit", 5).await.unwrap();
    assert_eq!(found.len(), 1);
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    let started = Instant::now();
    memory.recall("golden retriever", 5).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    drop(slow);
    stop.cancel();
    tracker.close();
    tracker.wait().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_model_re_embeds_beside_the_old_vectors_and_deletes_them_only_once_replaced() {
    let server = EmbedServer::start(&["--delay-ms", "150"]);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let facts = [
        "My car is a red Volvo",
        "Emma is allergic to peanuts",
        "The dentist is Dr Patel",
        "Our dog Biscuit is a golden retriever",
        "I work as a data analyst at Northwind",
        "We hike in the Alps each August",
    ];
    {
        let memory = open(
            dir.path(),
            &store,
            Some(&settings(&server.base_url, "wordllama-256")),
        )
        .await;
        for f in facts {
            memory.remember(f, &[], "test").await.unwrap();
        }
        memory.embed_all(|_, _| {}).await.unwrap();
    }
    let old = VectorModel {
        model: "wordllama-256".into(),
        dims: 256,
    };
    let new = VectorModel {
        model: "wordllama-128".into(),
        dims: 128,
    };
    assert_eq!(store.vectors().counts(&old).await.unwrap().embedded, 6);

    // The model changes, one fact a request: recall is by keyword and the vectors the new
    // model has made so far, and no old vector is deleted before its replacement exists.
    let mut changed = settings(&server.base_url, "wordllama-128");
    changed.batch = 1;
    changed.min_similarity = 0.2;
    let memory = open(dir.path(), &store, Some(&changed)).await;
    let found = memory.recall("Volvo", 3).await.unwrap();
    assert_eq!(
        found.len(),
        1,
        "by its words, while nothing is embedded by the new model"
    );
    let (tracker, stop) = (TaskTracker::new(), CancellationToken::new());
    memory.spawn_meaning(&tracker, stop.clone());
    let deadline = Instant::now() + PATIENCE;
    loop {
        // The old first: a prune comes only after the last new vector, so an old count read
        // before a new count of less than all must still be whole.
        let kept = store.vectors().counts(&old).await.unwrap().embedded;
        let made = store.vectors().counts(&new).await.unwrap().embedded;
        if made == 6 {
            break;
        }
        assert_eq!(
            kept, 6,
            "an old vector went before the new model replaced them all ({made} made)"
        );
        assert!(Instant::now() < deadline, "re-embedding stalled at {made}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    holds(&memory, 6).await;
    let deadline = Instant::now() + PATIENCE;
    while store.vectors().counts(&old).await.unwrap().embedded > 0 {
        assert!(
            Instant::now() < deadline,
            "the replaced vectors are never deleted"
        );
        memory.wake_meaning();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(store.vectors().rows().await.unwrap(), 6);
    let found = memory
        .recall("what colour is my automobile?", 3)
        .await
        .unwrap();
    assert_eq!(
        found.first().map(|r| r.fact.text.as_str()),
        Some(facts[0]),
        "{found:?}"
    );
    let status = memory.meaning().unwrap();
    assert_eq!(
        (status.model.as_str(), status.dims),
        ("wordllama-128", Some(128))
    );
    stop.cancel();
    tracker.close();
    tracker.wait().await;
}

/// `site`'s settings with recall by meaning through `base_url`.
pub(crate) fn with_embeddings(site: &crate::daemon::Site, base_url: &str) {
    let mut yaml = std::fs::read_to_string(site.config()).expect("settings");
    yaml.push_str(&format!(
        "memory:\n  embeddings:\n    base_url: \"{base_url}\"\n    model: wordllama-256\n    \
         min_similarity: {FLOOR}\n"
    ));
    std::fs::write(site.config(), yaml).expect("settings written");
}

/// `d`'s recall of `q` over the API, until its first fact is found by meaning (bounded).
pub(crate) async fn found_by_meaning(d: &crate::process::Daemon, q: &str) -> serde_json::Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (status, v) = d
            .get(&format!("/v1/memory?q={}", q.replace(' ', "%20")))
            .await;
        assert_eq!(status, reqwest::StatusCode::OK, "{v}");
        if !v["facts"][0]["similarity"].is_null() {
            return v["facts"][0].clone();
        }
        assert!(
            Instant::now() < deadline,
            "{q:?} is never found by meaning: {v}\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait (bounded) until the daemon's `/healthz` counts `n` vectors; returns that answer.
async fn vectors_in_healthz(d: &crate::process::Daemon, n: u64) -> serde_json::Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (_, health) = d.get("/healthz").await;
        if health["embeddings"]["vectors"].as_u64() == Some(n) {
            return health;
        }
        assert!(
            Instant::now() < deadline,
            "not {n} vectors within {PATIENCE:?}: {health}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_recalls_by_meaning_through_the_api_the_cli_and_healthz_says_how() {
    let model =
        hermes_engine::llm::scripted::ScriptedModel::start_with(crate::common::echo_model).await;
    let server = EmbedServer::start(&[]);
    let port = server
        .base_url
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches("/v1").parse::<u16>().ok())
        .expect("a port");
    let site = crate::daemon::Site::new(&model.base_url(), &[], &[]);
    with_embeddings(&site, &server.base_url);
    let mut d = site.start(&[]);
    d.ready().await;
    for text in [
        "My car is a red Volvo",
        "Emma is allergic to peanuts",
        "We hike in the Alps each August",
    ] {
        let (status, v) = d
            .post("/v1/memory", serde_json::json!({ "text": text }))
            .await;
        assert_eq!(status, reqwest::StatusCode::CREATED, "{v}");
    }
    let car = found_by_meaning(&d, "what colour is my automobile?").await;
    assert_eq!(car["text"], "My car is a red Volvo");
    assert!(car["keyword_rank"].is_null(), "{car}");
    // The worker embeds in batches as facts arrive: one fact found by meaning says nothing of
    // the other two, which a loaded machine may not have embedded yet.
    let health = vectors_in_healthz(&d, 3).await;
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["embeddings"]["server"], "ok", "{health}");
    assert_eq!(health["embeddings"]["vectors"], 3, "{health}");
    assert_eq!(health["embeddings"]["dims"], 256, "{health}");

    // The CLI shows what found each fact (through the daemon).
    let out = site.cli(&["memory", "search", "which food must Emma avoid"], &[]);
    let shown = crate::common::text(&out.stdout);
    assert!(out.status.success(), "{}", crate::common::text(&out.stderr));
    assert!(
        shown
            .lines()
            .next()
            .is_some_and(|l| l.contains("peanuts") && l.contains("meaning 0.")),
        "{shown}"
    );

    // The server goes away: recall carries on by keyword, and /healthz says why.
    drop(server);
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (status, v) = d.get("/v1/memory?q=Volvo").await;
        assert_eq!(status, reqwest::StatusCode::OK, "{v}");
        assert_eq!(v["facts"][0]["text"], "My car is a red Volvo", "{v}");
        let (_, health) = d.get("/healthz").await;
        if health["embeddings"]["server"] == "away" {
            assert_eq!(health["status"], "degraded", "{health}");
            let reason = health["embeddings"]["reason"].as_str().unwrap_or_default();
            assert!(reason.contains("cannot be reached"), "{health}");
            assert!(
                !reason.contains("Volvo"),
                "no fact text in what health says: {reason}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the server's absence is never noticed: {health}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // `memory reindex --embeddings` beside the daemon: a clear error while the server is away,
    // then (the server back) it embeds what is missing, which the daemon picks up.
    let out = site.cli(&["memory", "reindex", "--embeddings"], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        crate::common::text(&out.stderr).contains("cannot be reached"),
        "{}",
        crate::common::text(&out.stderr)
    );
    let _back = EmbedServer::start_on(port, &[]);
    let (status, v) = d
        .post(
            "/v1/memory",
            serde_json::json!({ "text": "Biscuit is our golden retriever" }),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{v}");
    let out = site.cli(&["memory", "reindex", "--embeddings"], &[]);
    let (stdout, stderr) = (
        crate::common::text(&out.stdout),
        crate::common::text(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("fact(s) embedded"), "{stdout}");
    assert!(
        stderr.contains("embedding facts ["),
        "a progress bar: {stderr}"
    );
    let dog = found_by_meaning(&d, "what kind of pet do we have").await;
    assert_eq!(dog["text"], "Biscuit is our golden retriever");
    let log = d.log();
    for secret in ["Volvo", "peanuts", "Biscuit"] {
        assert!(
            !log.contains(secret),
            "a fact's text in the daemon's log:\n{log}"
        );
    }
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_the_server_refuses_is_cut_until_taken_and_a_fact_refused_even_so_is_recorded() {
    let server = EmbedServer::start(&["--max-chars", "300"]);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let memory = open(
        dir.path(),
        &store,
        Some(&settings(&server.base_url, "wordllama-256")),
    )
    .await;
    let long = "My car is a red Volvo, bought used in Leeds in 2019. ".repeat(30);
    assert!(long.chars().count() > 1500);
    memory.remember(&long, &[], "test").await.unwrap();
    memory
        .remember("Emma is allergic to peanuts", &[], "test")
        .await
        .unwrap();
    assert_eq!(memory.embed_all(|_, _| {}).await.unwrap(), 2);
    let model = VectorModel {
        model: "wordllama-256".into(),
        dims: 256,
    };
    let counts = store.vectors().counts(&model).await.unwrap();
    assert_eq!((counts.embedded, counts.refused), (2, 0));
    let found = memory
        .recall("what colour is my automobile?", 1)
        .await
        .unwrap();
    assert!(found[0].fact.text.starts_with("My car"), "{found:?}");
    drop(memory);
    drop(server);

    // A server that takes almost nothing: the fact is recorded as refused, not sent again,
    // and still found by its words.
    let tiny = EmbedServer::start(&["--max-chars", "10"]);
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let memory = open(
        dir.path(),
        &store,
        Some(&settings(&tiny.base_url, "wordllama-256")),
    )
    .await;
    memory
        .remember("My car is a red Volvo", &[], "test")
        .await
        .unwrap();
    assert_eq!(memory.embed_all(|_, _| {}).await.unwrap(), 1);
    let counts = store.vectors().counts(&model).await.unwrap();
    assert_eq!((counts.embedded, counts.refused), (0, 1));
    assert_eq!(
        memory.embed_all(|_, _| {}).await.unwrap(),
        0,
        "not asked again"
    );
    assert_eq!(memory.recall("Volvo", 3).await.unwrap().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_names_an_away_embedding_server_only_to_who_has_the_token() {
    let model =
        hermes_engine::llm::scripted::ScriptedModel::start_with(crate::common::echo_model).await;
    let server = EmbedServer::start(&[]);
    let port = server
        .base_url
        .trim_end_matches("/v1")
        .rsplit(':')
        .next()
        .unwrap_or_default()
        .to_string();
    let site = crate::daemon::Site::new(&model.base_url(), &[], &["token: meaning-test-token"]);
    with_embeddings(&site, &server.base_url);
    let mut d = site.start(&[]).with_token("meaning-test-token");
    d.ready().await;
    let (status, v) = d
        .post(
            "/v1/memory",
            serde_json::json!({ "text": "My car is a red Volvo" }),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::CREATED, "{v}");
    found_by_meaning(&d, "automobile").await;
    // Gone: the next recall finds out.
    drop(server);
    let deadline = Instant::now() + PATIENCE;
    loop {
        d.get("/v1/memory?q=automobile").await;
        let (_, health) = d.get("/healthz").await;
        if health["embeddings"]["server"] == "away" {
            assert_eq!(health["status"], "degraded", "{health}");
            let reason = health["embeddings"]["reason"].as_str().unwrap_or_default();
            assert!(
                reason.contains(&format!("127.0.0.1:{port}")),
                "with the token: {health}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "never away: {health}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let http = reqwest::Client::new();
    let anonymous: serde_json::Value = http
        .get(format!("{}/healthz", d.base()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(anonymous["status"], "degraded", "{anonymous}");
    let reason = anonymous["embeddings"]["reason"]
        .as_str()
        .unwrap_or_default();
    assert!(reason.contains("doctor"), "{anonymous}");
    assert!(
        !anonymous.to_string().contains("127.0.0.1"),
        "where, without the token: {anonymous}"
    );
    d.stop().await;
}

/// llama-cpp-python's own `/v1/embeddings`, once, for the protocol (SmolLM2 is no embedding
/// model, so its vectors are weak: only the exchange and its bookkeeping are checked):
///
/// ```sh
/// HERMES_LOCAL_MODEL_EMBEDDING=1 scripts/local-model.sh -- \
///     cargo test --test it meaning::llama_cpp -- --ignored --nocapture
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs HERMES_REAL_MODEL_URL from HERMES_LOCAL_MODEL_EMBEDDING=1 scripts/local-model.sh"]
async fn llama_cpp_python_serves_the_embeddings_protocol() {
    let url = std::env::var("HERMES_REAL_MODEL_URL").unwrap_or_default();
    assert!(!url.trim().is_empty(), "needs HERMES_REAL_MODEL_URL");
    let name = std::env::var("HERMES_REAL_MODEL_NAME").unwrap_or_else(|_| "smollm2".into());
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    let mut embeddings = settings(url.trim(), &name);
    embeddings.timeout_s = 120;
    embeddings.batch = 2;
    embeddings.min_similarity = -1.0;
    let memory = open(dir.path(), &store, Some(&embeddings)).await;
    for f in [
        "My car is a red Volvo",
        "Emma is allergic to peanuts",
        "We hike in the Alps",
    ] {
        memory.remember(f, &[], "test").await.unwrap();
    }
    let started = Instant::now();
    assert_eq!(memory.embed_all(|_, _| {}).await.expect("embedded"), 3);
    let status = memory.meaning().unwrap();
    eprintln!(
        "llama-cpp-python: 3 facts in {:?}, {status:?}",
        started.elapsed()
    );
    assert_eq!(status.vectors, 3);
    assert!(status.dims.is_some_and(|d| d >= 64), "{status:?}");
    // A recall waits at most a second for its question's vector; a CPU model may take longer.
    let embedder = Embedder::new(&embeddings).unwrap();
    let asked = Instant::now();
    embedder
        .embed(&["automobile colour"], Duration::from_secs(60))
        .await
        .unwrap();
    let took = asked.elapsed();
    eprintln!("llama-cpp-python: one question's vector in {took:?}");
    let found = memory.recall("automobile colour", 3).await.unwrap();
    if took < Duration::from_millis(700) {
        assert_eq!(
            found.len(),
            3,
            "every fact, by meaning (no floor): {found:?}"
        );
        assert!(found.iter().all(|r| r.similarity.is_some()), "{found:?}");
    } else {
        assert!(
            found.is_empty(),
            "too slow to wait for: by keyword, none: {found:?}"
        );
        assert!(memory.meaning_trouble().is_some());
    }
}
