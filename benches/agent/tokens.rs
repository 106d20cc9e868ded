//! Token economy: the fixed part of every model request (system prompt + tool schemas) with
//! the default toolset, what the scripted server counts for a first request, and the size of
//! each request of a 6-call task whose tool results are ≈ 3,000 tokens each, with the
//! short-term window on (2 rounds) and effectively off (100 rounds).
//!
//! Token counts are `estimate_tokens` (≈ 4 ASCII bytes per token) everywhere: of the prompt
//! and schemas here, and of the whole request body at the scripted server.

use crate::common::{self, Echo, StepScript, figure};
use anyhow::{Result, bail};
use hermes_config::Settings;
use hermes_engine::agent::JobExecution;
use hermes_engine::agent::prompt::{fixed_overhead_tokens, system_prompt};
use hermes_engine::agent::{RunOptions, Submit};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::llm::{Toolset, estimate_tokens};
use hermes_store::{StepKind, TaskState};
use std::time::Duration;

/// Model calls of the large-result task: five tool rounds, then the answer.
const BIG_STEPS: u32 = 6;
/// ≈ 3,000 tokens of tool result per call.
const BIG_RESULT_CHARS: usize = 12_000;

pub async fn run() -> Result<()> {
    println!("\n== tokens: the fixed part of a request, and tokens per model call");
    fixed_part().await?;
    println!(
        "\n  6-call task, each tool result ≈ {} tokens; prompt tokens per model call as the server counts them:",
        BIG_RESULT_CHARS / 4
    );
    let cases: [(&str, u32, u32, bool); 5] = [
        ("window on (2 rounds), result cap 4000", 2, 4000, false),
        ("window off (100 rounds), result cap 4000", 100, 4000, false),
        (
            "window on, cap 4000, model summaries (default)",
            2,
            4000,
            true,
        ),
        ("window on (2 rounds), default cap 800", 2, 800, false),
        ("window off (100 rounds), default cap 800", 100, 800, false),
    ];
    for (label, rounds, cap, summary) in cases {
        let (series, extra) = big_task(rounds, cap, summary).await?;
        let total: i64 = series.iter().sum::<i64>() + extra.iter().sum::<i64>();
        let list: Vec<String> = series.iter().map(|t| t.to_string()).collect();
        let mut line = format!("[{}]  total {}", list.join(", "), total);
        if !extra.is_empty() {
            let e: Vec<String> = extra.iter().map(|t| t.to_string()).collect();
            line.push_str(&format!("  (incl. summary calls [{}])", e.join(", ")));
        }
        figure(label, line);
    }
    Ok(())
}

async fn fixed_part() -> Result<()> {
    let model = ScriptedModel::start(vec![Reply::text("391")]).await;
    let dir = tempfile::tempdir()?;
    // The default settings, manifests from the repository's tools/ (the default
    // `tools.manifests_dir: ./tools`, resolved against the working directory of `cargo bench`,
    // which is the package root).
    let mut s = Settings::default();
    for p in s.model.profiles.values_mut() {
        p.base_url = model.base_url();
    }
    let app = common::build_app(s, dir.path(), JobExecution::Direct, vec![]).await?;
    let offered = app.agent.registry().offered(None);
    let system = system_prompt("", None);
    let fixed = fixed_overhead_tokens(&system, &offered);
    let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
    figure(
        "tools offered by default",
        format!("{} ({})", offered.len(), names.join(", ")),
    );
    figure("system prompt tokens", estimate_tokens(&system));
    figure("tool schema tokens", fixed - estimate_tokens(&system));
    figure("fixed part of every request (fixed_overhead_tokens)", fixed);
    let builtin_only: Toolset = offered
        .iter()
        .filter(|t| {
            !std::path::Path::new("tools")
                .join(format!("{}.yaml", t.name))
                .exists()
        })
        .cloned()
        .collect::<Vec<_>>()
        .into();
    figure(
        "  of which built-ins only",
        format!(
            "{} tools, {} tokens",
            builtin_only.len(),
            fixed_overhead_tokens(&system, &builtin_only)
        ),
    );

    let task = app
        .agent
        .create_claimed(Submit {
            task: "What is 17 * 23? Answer with the number.".into(),
            origin: hermes_store::Origin::Cli,
            ..Default::default()
        })
        .await?;
    let done = app.agent.run_claimed(task, RunOptions::default()).await?;
    if done.state != TaskState::Succeeded {
        bail!(
            "the first-request task ended {}: {:?}",
            done.state,
            done.error
        );
    }
    let steps = app.store.tasks().steps(&done.id).await?;
    let first = steps
        .iter()
        .find(|s| s.row.kind == StepKind::Model)
        .map(|s| s.row.request_tokens)
        .unwrap_or(0);
    let body = model
        .requests()
        .first()
        .map(|b| b.to_string())
        .unwrap_or_default();
    figure(
        "first request: prompt_tokens counted by the server",
        format!("{first} (whole JSON body, {} bytes)", body.len()),
    );
    model.stop().await;
    Ok(())
}

/// Runs the large-result task; returns the prompt tokens of each agent model call (from the
/// trace) and of each summary call (from the server's record, summary calls carry no tools).
async fn big_task(rounds: u32, cap: u32, summary: bool) -> Result<(Vec<i64>, Vec<i64>)> {
    let script = StepScript {
        steps: BIG_STEPS,
        delay: Duration::ZERO,
        tool: "big_report".into(),
    };
    let model = ScriptedModel::start_with(move |req| script.reply(req)).await;
    let dir = tempfile::tempdir()?;
    let mut s = common::settings(&model.base_url());
    s.context.max_dialog_rounds = rounds;
    s.context.summary_enabled = summary;
    s.tools.result_max_tokens = cap;
    s.agent.max_steps = BIG_STEPS + 2;
    let app = common::build_app(
        s,
        dir.path(),
        JobExecution::Direct,
        vec![Echo::new("big_report", BIG_RESULT_CHARS)],
    )
    .await?;
    let task = app
        .agent
        .create_claimed(Submit {
            task: "Benchmark task nonce=big: read the quarterly report five times, then answer."
                .into(),
            origin: hermes_store::Origin::Cli,
            ..Default::default()
        })
        .await?;
    let done = app.agent.run_claimed(task, RunOptions::default()).await?;
    if done.state != TaskState::Succeeded || done.answer.as_deref() != Some("done big") {
        bail!(
            "large-result task ended {} with {:?} ({:?})",
            done.state,
            done.answer,
            done.error
        );
    }
    let series: Vec<i64> = app
        .store
        .tasks()
        .steps(&done.id)
        .await?
        .iter()
        .filter(|s| s.row.kind == StepKind::Model)
        .map(|s| s.row.request_tokens)
        .collect();
    if series.len() != BIG_STEPS as usize {
        bail!(
            "expected {BIG_STEPS} model calls, the trace has {}",
            series.len()
        );
    }
    let extra = model
        .requests()
        .iter()
        .filter(|b| b["tools"].as_array().is_none_or(|t| t.is_empty()))
        .map(|b| i64::from(estimate_tokens(&b.to_string())))
        .collect();
    model.stop().await;
    Ok((series, extra))
}
