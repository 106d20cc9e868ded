//! The start cost of confinement (BENCHMARKS.md §15): a manifest-style command (`/bin/true`)
//! and an MCP-server-style start (the test venv's python importing `mcp_server_time`), each
//! spawned and waited for, unconfined and confined, alternating; p50 and p99 of each.
//!
//! `cargo bench --bench sandbox` (or `--profile dev` for a quick look); the MCP half needs
//! `scripts/ci/mcp-deps.sh` to have run.

use hermes_engine::tools::sandbox::{Mode, Policy, Widening};
use std::path::Path;
use std::time::{Duration, Instant};

const ROUNDS: usize = 200;
const MCP_ROUNDS: usize = 20;

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

async fn once(program: &str, args: &[&str], policy: Option<&Policy>) -> Duration {
    let start = Instant::now();
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env_clear().kill_on_drop(true);
    let confinement = policy.map(|p| p.prepare(Some(Duration::from_secs(10))));
    let confinement = match confinement {
        Some(Ok(c)) => c,
        Some(Err(e)) => panic!("cannot prepare: {e}"),
        None => None,
    };
    if let Some(c) = &confinement {
        c.install(&mut cmd);
    }
    let status = cmd.status().await;
    assert!(status.is_ok_and(|s| s.success()), "{program} failed");
    drop(confinement);
    start.elapsed()
}

async fn compare(label: &str, program: &str, args: &[&str], rounds: usize, policy: &Policy) {
    let (mut plain, mut boxed) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        plain.push(once(program, args, None).await);
        boxed.push(once(program, args, Some(policy)).await);
    }
    let (p50, p99) = (pct(&mut plain, 0.5), pct(&mut plain, 0.99));
    let (b50, b99) = (pct(&mut boxed, 0.5), pct(&mut boxed, 0.99));
    println!(
        "{label}: unconfined p50 {:.2} ms p99 {:.2} ms; confined p50 {:.2} ms p99 {:.2} ms; added p50 {:+.2} ms ({rounds} rounds)",
        p50.as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        b50.as_secs_f64() * 1e3,
        b99.as_secs_f64() * 1e3,
        (b50.as_secs_f64() - p50.as_secs_f64()) * 1e3,
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let mut tool = Policy::new(Mode::Enforce, &Widening::default(), false, None, "bench");
        tool.own_program("/bin/true", None);
        compare("command (/bin/true)", "/bin/true", &[], ROUNDS, &tool).await;
        let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-deps/venv/bin/python");
        if !python.exists() {
            println!("MCP start: skipped, run scripts/ci/mcp-deps.sh first");
            return;
        }
        let python = python.to_string_lossy().into_owned();
        let mut server = Policy::new(Mode::Enforce, &Widening::default(), false, None, "bench");
        server.own_program(&python, None);
        compare(
            "MCP-style start (venv python, import mcp_server_time)",
            &python,
            &["-c", "import mcp_server_time"],
            MCP_ROUNDS,
            &server,
        )
        .await;
    });
}
