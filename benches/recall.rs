//! Long-term recall at scale: builds memories of synthetic facts (mixed English and Chinese,
//! from a seeded generator so every run sees the same data), then times 1,000 recalls. Two
//! parts, each run alone when named, both when none is:
//!
//! `cargo bench --bench recall -- keyword`: at 10k and 100k facts, per size: time to write the
//! facts to SQLite, time to build the index from them (`LongTerm::rebuild`, the same path a
//! start-up repair takes), recall latency p50/p99 in µs (the full call: tokenise, BM25 search,
//! load the facts from the store), hits per query, and the index size on disk.
//!
//! `cargo bench --bench recall -- meaning`: recall by meaning (`memory.embeddings`) through the
//! real embedding model the tests use (wordllama-256 behind `scripts/embed-server.py`, started
//! and stopped here; installed by `bash scripts/ci/embed-deps.sh`), at 1k, 10k and 100k facts:
//! embedding throughput (`LongTerm::embed_all`, batches of 64), hybrid recall latency beside
//! keyword-only recall on the same facts, the query's embedding round trip alone (so the search
//! in the daemon is the difference), and the vectors' bytes per fact on disk and in memory.
//!
//! `cargo bench --bench recall` runs both (several minutes on 2 cores); without the embedding
//! model installed the meaning part is skipped with a note (named, it fails).

use hermes_config::EmbeddingSettings;
use hermes_engine::llm::Embedder;
use hermes_engine::memory::LongTerm;
use hermes_store::Store;
use sqlx::Connection;
use std::io::{BufRead, BufReader, Read, Seek};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

type Error = Box<dyn std::error::Error>;

const SIZES: [usize; 2] = [10_000, 100_000];
const MEANING_SIZES: [usize; 3] = [1_000, 10_000, 100_000];
const QUERIES: usize = 1_000;
const K: usize = 5;
/// The model and floor the recall-by-meaning tests use (tests/it/meaning.rs): wordllama-256's
/// unrelated pairs score a median 0.01, a question and its fact often no more than 0.14.
const EMBED_MODEL: &str = "wordllama-256";
const MIN_SIMILARITY: f32 = 0.1;
/// The embedding model's Python and server, and how to install them.
const EMBED_PYTHON: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/target/test-deps/embed-venv/bin/python"
);
const EMBED_SERVER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/embed-server.py");
const EMBED_INSTALL: &str = "bash scripts/ci/embed-deps.sh";

const EN: &[&str] = &[
    "user",
    "prefers",
    "likes",
    "meeting",
    "report",
    "weekly",
    "monthly",
    "email",
    "Alice",
    "Bob",
    "Carol",
    "project",
    "deadline",
    "budget",
    "travel",
    "flight",
    "hotel",
    "train",
    "morning",
    "evening",
    "coffee",
    "tea",
    "running",
    "swimming",
    "doctor",
    "dentist",
    "birthday",
    "invoice",
    "server",
    "backup",
    "password",
    "manager",
    "team",
    "client",
    "contract",
    "review",
    "release",
    "version",
    "database",
    "kitchen",
    "garden",
    "bicycle",
    "concert",
    "ticket",
    "museum",
    "library",
    "book",
    "novel",
    "language",
    "lesson",
    "piano",
    "guitar",
    "recipe",
    "dinner",
    "lunch",
    "breakfast",
    "vegetarian",
    "allergic",
    "peanuts",
    "cat",
    "dog",
    "weekend",
    "holiday",
    "summer",
    "winter",
    "spring",
    "autumn",
    "Berlin",
    "Shanghai",
    "Tokyo",
    "Paris",
    "office",
    "remote",
    "calendar",
    "reminder",
    "subscription",
    "newsletter",
    "digest",
    "summary",
    "notes",
    "phone",
    "address",
    "parcel",
    "delivery",
    "insurance",
    "tax",
    "salary",
    "bank",
    "account",
    "pension",
    "apartment",
    "rent",
    "landlord",
    "car",
    "repair",
    "parking",
    "gym",
    "yoga",
    "meditation",
    "always",
    "never",
    "usually",
    "every",
    "before",
    "after",
    "during",
    "quickly",
    "quietly",
];

const ZH: &[&str] = &[
    "用户",
    "喜欢",
    "不喜欢",
    "每天",
    "早上",
    "晚上",
    "周报",
    "月报",
    "发给",
    "邮件",
    "会议",
    "项目",
    "截止",
    "预算",
    "出差",
    "航班",
    "酒店",
    "高铁",
    "咖啡",
    "乌龙茶",
    "绿茶",
    "跑步",
    "游泳",
    "医生",
    "牙医",
    "生日",
    "发票",
    "服务器",
    "备份",
    "经理",
    "团队",
    "客户",
    "合同",
    "审核",
    "版本",
    "数据库",
    "厨房",
    "花园",
    "自行车",
    "音乐会",
    "门票",
    "博物馆",
    "图书馆",
    "小说",
    "语言",
    "钢琴",
    "吉他",
    "菜谱",
    "晚饭",
    "午饭",
    "早饭",
    "素食",
    "过敏",
    "花生",
    "猫",
    "狗",
    "周末",
    "假期",
    "夏天",
    "冬天",
    "春天",
    "秋天",
    "上海",
    "北京",
    "东京",
    "巴黎",
    "办公室",
    "远程",
    "日历",
    "提醒",
    "订阅",
    "摘要",
    "笔记",
    "电话",
    "地址",
    "快递",
    "保险",
    "税",
    "工资",
    "银行",
    "账户",
    "公寓",
    "房租",
    "房东",
    "汽车",
    "修理",
    "停车",
    "健身房",
    "瑜伽",
    "总是",
    "从不",
    "通常",
    "之前",
    "之后",
    "安静",
    "重要",
    "紧急",
    "记得",
    "需要",
];

/// xorshift64*: deterministic, dependency-free, plenty for picking words.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, words: &[&'a str]) -> &'a str {
        words[self.below(words.len())]
    }
}

/// A fact of 6–14 words: English, Chinese, or both in one sentence (a third each).
fn fact(rng: &mut Rng) -> String {
    let words = 6 + rng.below(9);
    let style = rng.below(3);
    let mut out = String::new();
    for i in 0..words {
        let chinese = match style {
            0 => false,
            1 => true,
            _ => rng.below(2) == 0,
        };
        let word = if chinese { rng.pick(ZH) } else { rng.pick(EN) };
        // Chinese is written without spaces; Latin words need one.
        if i > 0 && !(chinese && out.chars().last().is_some_and(|c| !c.is_ascii())) {
            out.push(' ');
        }
        out.push_str(word);
    }
    out
}

/// A query of 1–3 words, from either language.
fn query(rng: &mut Rng) -> String {
    let words = 1 + rng.below(3);
    (0..words)
        .map(|_| {
            if rng.below(2) == 0 {
                rng.pick(EN)
            } else {
                rng.pick(ZH)
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn dir_size(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// Resident set size now and at its peak, from /proc (Linux only; "?" elsewhere).
fn rss_mb() -> (String, String) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<f64>().ok())
            .map_or_else(|| "?".to_string(), |kb| format!("{:.1}", kb / 1024.0))
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Keyword recall at one size (the part this bench started with).
async fn run(size: usize) -> Result<(), Error> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path()).await?;
    let memory = LongTerm::open(dir.path(), store.clone()).await?;

    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ size as u64);
    let started = Instant::now();
    for _ in 0..size {
        store.facts().upsert(&fact(&mut rng), &[], "bench").await?;
    }
    let insert = started.elapsed();
    let stored = store.facts().count().await?;

    let started = Instant::now();
    let indexed = memory.rebuild().await?;
    let build = started.elapsed();

    let queries = queries();
    // Warm the page cache and the searcher once, as a running daemon would be.
    for q in queries.iter().take(20) {
        memory.recall(q, K).await?;
    }
    let mut times = Vec::with_capacity(QUERIES);
    let mut hits = 0usize;
    for q in &queries {
        let started = Instant::now();
        hits += memory.recall(q, K).await?.len();
        times.push(started.elapsed());
    }
    times.sort();
    let (rss, peak) = rss_mb();

    println!("facts: {size} generated, {stored} stored (duplicates merged), {indexed} indexed");
    println!("  write to SQLite:   {:>8.2} s", insert.as_secs_f64());
    println!("  build index:       {:>8.2} s", build.as_secs_f64());
    println!(
        "  recall k={K}:       p50 {:.0} µs, p99 {:.0} µs, mean hits {:.2} over {QUERIES} queries",
        percentile(&times, 0.50),
        percentile(&times, 0.99),
        hits as f64 / QUERIES as f64
    );
    println!(
        "  index on disk:     {:>8.2} MB (database {:.2} MB)",
        dir_size(&dir.path().join("memory-index")) as f64 / 1e6,
        dir_size(dir.path()) as f64 / 1e6
    );
    println!("  process RSS:       {rss} MB now, {peak} MB peak (includes building)");
    drop(memory);
    store.close().await;
    Ok(())
}

/// The 1,000 queries every recall timing uses, the same in every run.
fn queries() -> Vec<String> {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    (0..QUERIES).map(|_| query(&mut rng)).collect()
}

/// The keyword part: an idle memory's RSS, then 10k and 100k facts.
fn keyword(runtime: &tokio::runtime::Runtime) -> Result<(), Error> {
    // What an idle daemon pays for long-term memory: an open, empty index and its writer.
    let (before, _) = rss_mb();
    let idle = runtime.block_on(async {
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path()).await?;
        let memory = LongTerm::open(dir.path(), store).await?;
        memory.recall("warm up 预热", K).await?;
        let (after, _) = rss_mb();
        Ok::<_, Error>(after)
    })?;
    println!("process RSS: {before} MB at start, {idle} MB with an empty memory open");
    for size in SIZES {
        runtime.block_on(run(size))?;
    }
    Ok(())
}

/// The embedding model's server (`scripts/embed-server.py` around wordllama), killed on drop.
struct EmbedServer {
    child: Child,
    base_url: String,
}

impl EmbedServer {
    /// Starts it on a free loopback port and waits until it says where it listens; `Ok(None)`
    /// when its Python venv is not installed.
    fn start() -> Result<Option<EmbedServer>, Error> {
        if !Path::new(EMBED_PYTHON).exists() {
            return Ok(None);
        }
        // It logs each request line to stderr: kept in a file, shown if it fails to start.
        let mut log = tempfile::tempfile()?;
        let mut child = Command::new(EMBED_PYTHON)
            .arg(EMBED_SERVER)
            .args(["--host", "127.0.0.1", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(log.try_clone()?)
            .spawn()
            .map_err(|e| format!("cannot start {EMBED_PYTHON} {EMBED_SERVER}: {e}"))?;
        let stdout = child.stdout.take().ok_or("the embedding server's stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let _ = tx.send(reader.read_line(&mut line).map(|_| line));
            // Keep the pipe open for as long as the server runs.
            let _ = std::io::copy(&mut reader, &mut std::io::sink());
        });
        let said = rx.recv_timeout(Duration::from_secs(60));
        let addr = match &said {
            Ok(Ok(line)) => line
                .trim()
                .strip_prefix("listening on ")
                .map(str::to_string),
            _ => None,
        };
        let mut server = EmbedServer {
            child,
            base_url: String::new(),
        };
        let Some(addr) = addr else {
            let _ = server.child.kill();
            let _ = server.child.wait();
            let mut err = String::new();
            let _ = log.rewind();
            let _ = log.read_to_string(&mut err);
            return Err(format!(
                "the embedding server did not start (it said {said:?}; its stderr: {}); \
                 reinstall it with `{EMBED_INSTALL}`",
                err.trim()
            )
            .into());
        };
        server.base_url = format!("http://{addr}/v1");
        Ok(Some(server))
    }

    fn settings(&self) -> EmbeddingSettings {
        EmbeddingSettings {
            base_url: self.base_url.clone(),
            model: EMBED_MODEL.to_string(),
            min_similarity: MIN_SIMILARITY,
            ..Default::default()
        }
    }
}

impl Drop for EmbedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// p50 and p99 of a set of timings, in µs.
fn p50_p99(mut times: Vec<Duration>) -> (f64, f64) {
    times.sort();
    (percentile(&times, 0.50), percentile(&times, 0.99))
}

/// The database's size on disk once compacted: `VACUUM`, then the WAL checkpointed into the
/// file and truncated; the file plus what is left of its WAL, in bytes.
async fn vacuumed_size(db: &Path) -> Result<u64, Error> {
    let mut conn = sqlx::sqlite::SqliteConnection::connect_with(
        &sqlx::sqlite::SqliteConnectOptions::new().filename(db),
    )
    .await?;
    sqlx::query("VACUUM").execute(&mut conn).await?;
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await?;
    conn.close().await?;
    let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    Ok(size(db.to_path_buf()) + size(PathBuf::from(wal)))
}

/// What the `fact_vectors` rows take in the file, from SQLite's `dbstat` table: the pages of
/// the table and of its two indexes (the unique (fact_id, model, dims) and the by-model one),
/// and the vectors' own bytes (`SUM(LENGTH(vector))`). `None` when this SQLite has no dbstat.
async fn vector_pages(db: &Path) -> Result<Option<(i64, i64, i64)>, Error> {
    let mut conn = sqlx::sqlite::SqliteConnection::connect_with(
        &sqlx::sqlite::SqliteConnectOptions::new().filename(db),
    )
    .await?;
    let pages: Result<(i64, i64), sqlx::Error> = sqlx::query_as(
        "SELECT COALESCE(SUM(CASE WHEN s.type = 'table' THEN d.pgsize END), 0), \
                COALESCE(SUM(CASE WHEN s.type = 'index' THEN d.pgsize END), 0) \
         FROM dbstat d JOIN sqlite_master s ON d.name = s.name \
         WHERE s.tbl_name = 'fact_vectors'",
    )
    .fetch_one(&mut conn)
    .await;
    let payload: i64 =
        sqlx::query_scalar("SELECT COALESCE(SUM(LENGTH(vector)), 0) FROM fact_vectors")
            .fetch_one(&mut conn)
            .await?;
    conn.close().await?;
    Ok(pages.ok().map(|(table, index)| (table, index, payload)))
}

/// One size's figures of the meaning part.
struct MeaningRow {
    facts: i64,
    embed_s: f64,
    embedded: i64,
    keyword: (f64, f64),
    keyword_hits: f64,
    hybrid: (f64, f64),
    hybrid_hits: f64,
    /// Queries with at least one result found by meaning, and with the first found only by it.
    by_meaning: usize,
    first_by_meaning_only: usize,
    round_trip: (f64, f64),
    disk_file_per_fact: f64,
    /// Table, indexes and vector payload per fact, from dbstat.
    disk_pages_per_fact: Option<(f64, f64, f64)>,
    vectors: usize,
    ram_per_fact: f64,
    dims: Option<u32>,
    server: String,
    rss: String,
}

/// Recall by meaning at one size: facts written, indexed, embedded, and recalled three ways.
async fn meaning_run(size: usize, server: &EmbedServer) -> Result<MeaningRow, Error> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path()).await?;
    let db = store.path().to_path_buf();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ size as u64);
    for _ in 0..size {
        store.facts().upsert(&fact(&mut rng), &[], "bench").await?;
    }
    let facts = store.facts().count().await?;
    // The index built once from the store, as the keyword part does; then let go (its lock is
    // per handle), so the handle with embeddings opens it as it is.
    LongTerm::open(dir.path(), store.clone())
        .await?
        .rebuild()
        .await?;
    let before = vacuumed_size(&db).await?;

    let settings = server.settings();
    let memory = LongTerm::open_with(
        dir.path(),
        store.clone(),
        Some((Embedder::new(&settings)?, settings.min_similarity)),
    )
    .await?;
    let started = Instant::now();
    let embedded = memory.embed_all(|_, _| {}).await?;
    let embed_s = started.elapsed().as_secs_f64();

    let queries = queries();
    for q in queries.iter().take(20) {
        memory.recall(q, K).await?;
    }
    let mut times = Vec::with_capacity(QUERIES);
    let (mut hits, mut by_meaning, mut first_by_meaning_only) = (0, 0, 0);
    for q in &queries {
        let started = Instant::now();
        let found = memory.recall(q, K).await?;
        times.push(started.elapsed());
        hits += found.len();
        by_meaning += usize::from(found.iter().any(|r| r.similarity.is_some()));
        first_by_meaning_only +=
            usize::from(found.first().is_some_and(|r| r.keyword_rank.is_none()));
    }
    let hybrid = p50_p99(times);
    let status = memory.meaning().ok_or("recall by meaning is on")?;
    // The server's state as /healthz shows it (`ok`, or `away` and why).
    let shown = serde_json::to_value(&status)?;
    let server = [&shown["server"], &shown["reason"]]
        .iter()
        .filter_map(|v| v.as_str())
        .collect::<Vec<_>>()
        .join(": ");
    drop(memory);

    // The query's embedding alone, as the recall asks it (one input, its own client).
    let embedder = Embedder::new(&settings)?;
    for q in queries.iter().take(20) {
        embedder
            .embed(&[q.as_str()], Duration::from_secs(5))
            .await?;
    }
    let mut times = Vec::with_capacity(QUERIES);
    for q in &queries {
        let started = Instant::now();
        embedder
            .embed(&[q.as_str()], Duration::from_secs(5))
            .await?;
        times.push(started.elapsed());
    }
    let round_trip = p50_p99(times);

    // Keyword only, on the same facts (and the same database, vectors and all).
    let memory = LongTerm::open(dir.path(), store.clone()).await?;
    for q in queries.iter().take(20) {
        memory.recall(q, K).await?;
    }
    let mut times = Vec::with_capacity(QUERIES);
    let mut keyword_hits = 0;
    for q in &queries {
        let started = Instant::now();
        keyword_hits += memory.recall(q, K).await?.len();
        times.push(started.elapsed());
    }
    let keyword = p50_p99(times);
    let (rss, _) = rss_mb();
    drop(memory);

    let after = vacuumed_size(&db).await?;
    let pages = vector_pages(&db).await?;
    store.close().await;
    let per_fact = |bytes: f64| bytes / facts.max(1) as f64;
    Ok(MeaningRow {
        facts,
        embed_s,
        embedded,
        keyword,
        keyword_hits: keyword_hits as f64 / QUERIES as f64,
        hybrid,
        hybrid_hits: hits as f64 / QUERIES as f64,
        by_meaning,
        first_by_meaning_only,
        round_trip,
        disk_file_per_fact: per_fact(after as f64 - before as f64),
        disk_pages_per_fact: pages.map(|(table, index, payload)| {
            (
                per_fact(table as f64),
                per_fact(index as f64),
                per_fact(payload as f64),
            )
        }),
        vectors: status.vectors,
        ram_per_fact: status.bytes as f64 / status.vectors.max(1) as f64,
        dims: status.dims,
        server,
        rss,
    })
}

/// The meaning part: the embedding server started, each size run, the table printed.
/// `Ok(false)`: the embedding model is not installed.
fn meaning(runtime: &tokio::runtime::Runtime) -> Result<bool, Error> {
    let Some(server) = EmbedServer::start()? else {
        return Ok(false);
    };
    println!(
        "recall by meaning: {EMBED_MODEL} at {} (scripts/embed-server.py), min_similarity \
         {MIN_SIMILARITY}, batch {}, {QUERIES} queries of k={K}",
        server.base_url,
        server.settings().batch
    );
    let mut rows = Vec::new();
    for size in MEANING_SIZES {
        let row = runtime.block_on(meaning_run(size, &server))?;
        println!(
            "facts: {size} generated, {} stored, {} embedded in {:.1} s ({:.0} facts/s), \
             {} vectors of {} dims held; server {}; process RSS {} MB",
            row.facts,
            row.embedded,
            row.embed_s,
            row.embedded as f64 / row.embed_s,
            row.vectors,
            row.dims.map_or("?".to_string(), |d| d.to_string()),
            row.server,
            row.rss
        );
        println!(
            "  hybrid: mean hits {:.2}, {} of {QUERIES} queries with a result by meaning, {} \
             whose first result has none of the query's words; keyword only: mean hits {:.2}",
            row.hybrid_hits, row.by_meaning, row.first_by_meaning_only, row.keyword_hits
        );
        rows.push(row);
    }
    drop(server);

    println!();
    println!(
        "| facts | embed (facts/s) | keyword p50 / p99 µs | hybrid p50 / p99 µs | query embedding \
         round trip p50 / p99 µs | hybrid − round trip p50 / p99 µs | disk B/fact (file) | disk \
         B/fact (dbstat: table + indexes; vector bytes) | RAM B/fact |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &rows {
        let pages = r.disk_pages_per_fact.map_or_else(
            || "no dbstat".to_string(),
            |(table, index, payload)| {
                format!(
                    "{:.0} + {:.0} = {:.0}; {payload:.0}",
                    table,
                    index,
                    table + index
                )
            },
        );
        println!(
            "| {} | {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} | \
             {pages} | {:.0} |",
            r.facts,
            r.embedded as f64 / r.embed_s,
            r.keyword.0,
            r.keyword.1,
            r.hybrid.0,
            r.hybrid.1,
            r.round_trip.0,
            r.round_trip.1,
            r.hybrid.0 - r.round_trip.0,
            r.hybrid.1 - r.round_trip.1,
            r.disk_file_per_fact,
            r.ram_per_fact
        );
    }
    println!(
        "disk B/fact (file): the database file (+ WAL) after VACUUM and a WAL checkpoint, after \
         embedding minus before, per fact; RAM B/fact: MeaningStatus.bytes / vectors (the \
         normalised f32s and the ids). Hybrid includes the HTTP round trip for the query's \
         vector (the keyword search runs meanwhile); the difference of the percentiles is the \
         search in the daemon."
    );
    Ok(true)
}

fn main() -> Result<(), Error> {
    // `cargo bench` passes `--bench`; a part's name (`keyword`, `meaning`) runs only that part,
    // no name both.
    let named: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if let Some(other) = named
        .iter()
        .find(|a| !matches!(a.as_str(), "keyword" | "meaning"))
    {
        return Err(
            format!("unknown part `{other}`: name `keyword`, `meaning`, or none for both").into(),
        );
    }
    let wants = |part: &str| named.is_empty() || named.iter().any(|a| a == part);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    if wants("keyword") {
        keyword(&runtime)?;
    }
    if wants("meaning") && !meaning(&runtime)? {
        let why = format!(
            "the embedding model is not installed ({EMBED_PYTHON} is missing): install it \
             with `{EMBED_INSTALL}` (a venv with wordllama from PyPI, under a minute)"
        );
        if named.is_empty() {
            println!("recall by meaning skipped: {why}");
        } else {
            return Err(why.into());
        }
    }
    Ok(())
}
