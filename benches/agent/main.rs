//! The benchmarks of hermes-agent: every performance claim in BENCHMARKS.md is a figure this
//! binary prints. Run them all with
//!
//! ```text
//! cargo build --release && cargo bench --bench agent
//! ```
//!
//! or some sections: `cargo bench --bench agent -- overhead load tokens sched store fallback
//! footprint inbox`. `inbox` needs Dovecot (`sudo bash scripts/ci/imap-deps.sh`) and root, as
//! the inbox's tests do.
//! `footprint quick` skips the 10,000-task soak, the job firings and the 100k-task start.
//! `load` takes the concurrency levels after it, e.g. `-- load 1 10` (default 1 10 100 1000),
//! and which ways of running and waiting to measure: `wait` (the pool + `Agent::wait`), `direct`
//! (no pool), `collector` (the pool + one shared subscriber); default `wait direct`.
//!
//! Everything runs on 127.0.0.1 against the crate's scripted OpenAI-compatible model server;
//! `footprint` starts the real release binary (`target/release/hermes-agent serve`). A section
//! whose checks fail (a task failed, answers crossed between tasks, a job did not fire)
//! prints what it measured and makes the run exit non-zero.

mod common;
mod fallback;
mod footprint;
mod inbox;
mod load;
mod nodes;
mod overhead;
mod sched;
mod tokens;

use std::process::ExitCode;

const SECTIONS: &[&str] = &[
    "overhead",
    "load",
    "tokens",
    "sched",
    "store",
    "fallback",
    "footprint",
    "inbox",
    // Not run by default: it needs a PostgreSQL server (HERMES_BENCH_STORAGE_URL).
    "nodes",
];

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; a filter word selects sections.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let mut levels: Vec<usize> = Vec::new();
    let mut chosen: Vec<&str> = Vec::new();
    let mut modes = Vec::new();
    let mut quick = false;
    for a in &args {
        if a == "quick" {
            quick = true;
        } else if let Ok(n) = a.parse::<usize>() {
            levels.push(n);
        } else if a == "wait" {
            modes.push(load::Waiting::AgentWait);
        } else if a == "collector" {
            modes.push(load::Waiting::Collector);
        } else if a == "direct" {
            modes.push(load::Waiting::Direct);
        } else if let Some(s) = SECTIONS.iter().find(|s| **s == a.as_str()) {
            chosen.push(s);
        } else {
            eprintln!(
                "unknown section '{a}'; sections: {} (load takes concurrency levels and wait|direct|collector; footprint takes quick; nodes, never run by default, takes burst sizes and needs HERMES_BENCH_STORAGE_URL)",
                SECTIONS.join(", ")
            );
            return ExitCode::from(2);
        }
    }
    if chosen.is_empty() {
        chosen = SECTIONS.iter().copied().filter(|s| *s != "nodes").collect();
    }
    let sizes = levels.clone();
    if levels.is_empty() {
        levels = vec![1, 10, 100, 1000];
    }
    if modes.is_empty() {
        modes = vec![load::Waiting::AgentWait, load::Waiting::Direct];
    }
    // Format log lines as the daemon does (info level), into a sink: their cost is part of
    // the framework's, their text is not part of the report. HERMES_BENCH_LOG=1 writes them
    // to stderr instead, to see where a figure's time went (a burst's phases, say).
    let to_stderr = std::env::var_os("HERMES_BENCH_LOG").is_some_and(|v| v == "1");
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(move || -> Box<dyn std::io::Write> {
            if to_stderr {
                Box::new(std::io::stderr())
            } else {
                Box::new(std::io::sink())
            }
        })
        .with_ansi(false)
        .with_target(false)
        .try_init();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    machine();
    let mut failed = Vec::new();
    for section in chosen {
        let r = rt.block_on(async {
            match section {
                "overhead" => overhead::run().await,
                "load" => load::run(&levels, &modes).await,
                "tokens" => tokens::run().await,
                "sched" => sched::run().await,
                "store" => sched::run_store().await,
                "fallback" => fallback::run().await,
                "footprint" => footprint::run(quick).await,
                "inbox" => inbox::run().await,
                "nodes" => nodes::run(&sizes).await,
                _ => Ok(()),
            }
        });
        if let Err(e) = r {
            println!("  !! {section} failed: {e:#}");
            failed.push(section);
        }
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        println!("\nfailed sections: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}

/// The machine the figures come from.
fn machine() {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .map(|kib| format!("{:.1} GiB", kib as f64 / 1048576.0))
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("hermes-agent {} benchmarks", env!("CARGO_PKG_VERSION"));
    println!(
        "machine: {cores} cores, {mem} RAM, {cpu}; load average at start: {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("date: {}", chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"));
}
