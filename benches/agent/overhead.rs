//! Framework overhead per agent step: the time the agent itself adds around each model call,
//! with a model that answers instantly and a tool that does nothing.
//!
//! Definition. The scripted server stamps the moment each request reaches its handler. For
//! one task with model calls at a₁…aₙ, started at t₀ (create) and done at t₁ (run returned):
//! - between steps: aₖ₊₁ − aₖ − (time inside the tool in that step) — reading the reply,
//!   recording the model row, validating and running the tool, shaping and recording its
//!   result, windowing, building and sending the next request;
//! - start: a₁ − t₀ (store the task, claim it, recall memory, build the first request);
//! - finish: t₁ − aₙ (read the answer, record it, finish the task, read it back).
//!
//! The model's own time is what its handler takes (a prebuilt reply: ≈ 0). Everything else
//! — including the loopback HTTP round trip and the scripted server's JSON parsing, which a real
//! model server would do on its own cores — is counted against us; the raw HTTP round trip is
//! measured separately so it can be told apart.

use crate::common::{self, Echo, StepScript, figure, percentile};
use anyhow::{Context, Result, bail};
use hermes_engine::agent::JobExecution;
use hermes_engine::agent::{RunOptions, Submit};
use hermes_engine::llm::scripted::ScriptedModel;
use hermes_engine::llm::{Message, ToolCall};
use hermes_store::TaskState;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Model calls per task: three no-op tool rounds, then the answer. With the default window of
/// two rounds, the fourth call also exercises folding a round into the summary.
const STEPS: u32 = 4;
const WARMUP: usize = 30;
const TASKS: usize = 500;
const RAW_CALLS: usize = 500;

type Arrivals = Arc<Mutex<HashMap<String, Vec<Instant>>>>;

pub async fn run() -> Result<()> {
    println!("\n== overhead: framework time per agent step (instant model, no-op tool)");
    let arrivals: Arrivals = Arc::default();
    let script = StepScript {
        steps: STEPS,
        delay: Duration::ZERO,
        tool: "noop".into(),
    };
    let model = {
        let arrivals = arrivals.clone();
        ScriptedModel::start_with(move |req: &Value| {
            let at = Instant::now();
            let goal = req["messages"]
                .as_array()
                .and_then(|m| m.iter().find(|m| m["role"] == "user"))
                .and_then(|m| m["content"].as_str())
                .unwrap_or("");
            if let Ok(mut a) = arrivals.lock() {
                a.entry(common::nonce_of(goal).to_string())
                    .or_default()
                    .push(at);
            }
            script.reply(req)
        })
        .await
    };
    let dir = tempfile::tempdir()?;
    let noop = Echo::new("noop", 0);
    let app = common::build_app(
        common::settings(&model.base_url()),
        dir.path(),
        JobExecution::Direct,
        vec![noop.clone()],
    )
    .await?;

    let mut start = Vec::new();
    let mut between = Vec::new();
    let mut finish = Vec::new();
    let mut per_step = Vec::new();
    let cpu0 = common::cpu_time();
    let wall0 = Instant::now();
    for i in 0..WARMUP + TASKS {
        let nonce = format!("o{i}");
        let t0 = Instant::now();
        let task = app
            .agent
            .create_claimed(Submit {
                task: format!("Benchmark task nonce={nonce}: call noop three times, then answer."),
                origin: hermes_store::Origin::Cli,
                ..Default::default()
            })
            .await?;
        // As `hermes-agent run` does: created running, run in this process.
        let done = app.agent.run_claimed(task, RunOptions::default()).await?;
        let t1 = Instant::now();
        if done.state != TaskState::Succeeded
            || done.answer.as_deref() != Some(&format!("done {nonce}"))
        {
            bail!(
                "overhead task {nonce} ended {} with answer {:?} ({:?})",
                done.state,
                done.answer,
                done.error
            );
        }
        if i < WARMUP {
            continue;
        }
        let at = arrivals
            .lock()
            .ok()
            .and_then(|a| a.get(&nonce).cloned())
            .context("no model requests recorded for a task")?;
        let tool = noop.spent_for(&nonce);
        if at.len() != STEPS as usize || tool.len() != STEPS as usize - 1 {
            bail!(
                "task {nonce}: {} model calls, {} tool calls",
                at.len(),
                tool.len()
            );
        }
        start.push(us(at[0] - t0));
        for k in 1..at.len() {
            between.push(us(at[k] - at[k - 1]) - us(tool[k - 1]));
        }
        finish.push(us(t1 - at[at.len() - 1]));
        let tool_total: Duration = tool.iter().sum();
        per_step.push(us(t1 - t0) / f64::from(STEPS) - us(tool_total) / f64::from(STEPS));
    }
    let cpu = common::cpu_time().saturating_sub(cpu0);
    let wall = wall0.elapsed();

    // The model HTTP call alone: the same kind of request, sent by a bare client and by the
    // gateway, to the same server.
    let bodies = model.requests();
    let sample = bodies
        .iter()
        .rev()
        .find(|b| b["messages"].as_array().is_some_and(|m| m.len() >= 6))
        .cloned()
        .context("no mid-task request to replay")?;
    let raw = raw_http(&model.base_url(), &sample).await?;
    let gw = gateway_calls(&app).await?;

    println!(
        "  {TASKS} tasks × {STEPS} model calls ({} no-op tool calls each), sequential, after {WARMUP} warm-up tasks; \
         info logging formatted into a sink",
        STEPS - 1
    );
    let p = |v: &[f64]| {
        format!(
            "p50 {:>7.0} µs   p99 {:>7.0} µs",
            percentile(v, 50.0),
            percentile(v, 99.0)
        )
    };
    figure(
        "overhead between steps (reply → next request − tool)",
        p(&between),
    );
    figure(
        "overhead per step, whole task ((wall − tool) / calls)",
        p(&per_step),
    );
    figure("task start → first model request", p(&start));
    figure("final reply → task finished", p(&finish));
    figure(
        "  for comparison: raw HTTP call to the model (reqwest)",
        p(&raw),
    );
    figure(
        "  for comparison: Gateway::chat alone (same request)",
        p(&gw),
    );
    let calls = (TASKS + WARMUP) as f64 * f64::from(STEPS);
    figure(
        "process CPU per model call (agent + in-process server)",
        format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / calls),
    );
    figure(
        "steps per second, one task at a time",
        format!("{:.0}", calls / wall.as_secs_f64()),
    );
    model.stop().await;
    Ok(())
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

async fn raw_http(base_url: &str, body: &Value) -> Result<Vec<f64>> {
    let client = reqwest::Client::new();
    let url = format!("{base_url}/chat/completions");
    let text = body.to_string();
    let mut out = Vec::with_capacity(RAW_CALLS);
    for i in 0..RAW_CALLS + 20 {
        let t0 = Instant::now();
        let resp = client
            .post(&url)
            .header("content-type", "application/json")
            .body(text.clone())
            .send()
            .await?;
        let bytes = resp.bytes().await?;
        let _: Value = serde_json::from_slice(&bytes)?;
        if i >= 20 {
            out.push(us(t0.elapsed()));
        }
    }
    Ok(out)
}

async fn gateway_calls(app: &hermes_surfaces::app::App) -> Result<Vec<f64>> {
    let gateway = hermes_engine::llm::Gateway::new(&app.config.settings.model)?;
    let tools = app.agent.registry().offered(None);
    let call = |k: u64| ToolCall {
        id: format!("call_{k}"),
        name: "noop".into(),
        arguments: json!({"nonce": "g", "step": k}),
    };
    let messages = vec![
        Message::system(hermes_engine::agent::prompt::system_prompt("", None)),
        Message::user("Benchmark task nonce=g: call noop three times, then answer."),
        Message::assistant("", vec![call(1)]),
        Message::tool(
            "call_1",
            r#"<tool_result name="noop">{"echo":{"nonce":"g","step":1}}</tool_result>"#,
        ),
        Message::assistant("", vec![call(2)]),
        Message::tool(
            "call_2",
            r#"<tool_result name="noop">{"echo":{"nonce":"g","step":2}}</tool_result>"#,
        ),
    ];
    let mut out = Vec::with_capacity(RAW_CALLS);
    for i in 0..RAW_CALLS + 20 {
        let t0 = Instant::now();
        gateway.chat("fast", &messages, &tools).await?;
        if i >= 20 {
            out.push(us(t0.elapsed()));
        }
    }
    Ok(out)
}
