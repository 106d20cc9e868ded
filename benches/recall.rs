//! Long-term recall at scale: builds memories of 10k and 100k synthetic facts (mixed English and
//! Chinese, from a seeded generator so every run sees the same data), then times 1,000 recalls.
//!
//! Prints, per size: time to write the facts to SQLite, time to build the index from them
//! (`LongTerm::rebuild`, the same path a start-up repair takes), recall latency p50/p99 in µs
//! (the full call: tokenise, BM25 search, load the facts from the store), hits per query, and
//! the index size on disk. Run with `cargo bench --bench recall` (a few minutes on 2 cores).

use hermes_agent::memory::LongTerm;
use hermes_agent::store::Store;
use std::path::Path;
use std::time::{Duration, Instant};

const SIZES: [usize; 2] = [10_000, 100_000];
const QUERIES: usize = 1_000;
const K: usize = 5;

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

async fn run(size: usize) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path()).await?;
    let memory = LongTerm::open(dir.path(), store.clone()).await?;

    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ size as u64);
    let started = Instant::now();
    for _ in 0..size {
        store.upsert_fact(&fact(&mut rng), &[], "bench").await?;
    }
    let insert = started.elapsed();
    let stored = store.fact_count().await?;

    let started = Instant::now();
    let indexed = memory.rebuild().await?;
    let build = started.elapsed();

    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let queries: Vec<String> = (0..QUERIES).map(|_| query(&mut rng)).collect();
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

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `cargo bench` passes `--bench`; a filter argument, if any, is ignored.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // What an idle daemon pays for long-term memory: an open, empty index and its writer.
    let (before, _) = rss_mb();
    let idle = runtime.block_on(async {
        let dir = tempfile::tempdir()?;
        let store = Store::open(dir.path()).await?;
        let memory = LongTerm::open(dir.path(), store).await?;
        memory.recall("warm up 预热", K).await?;
        let (after, _) = rss_mb();
        Ok::<_, Box<dyn std::error::Error>>(after)
    })?;
    println!("process RSS: {before} MB at start, {idle} MB with an empty memory open");
    for size in SIZES {
        runtime.block_on(run(size))?;
    }
    Ok(())
}
