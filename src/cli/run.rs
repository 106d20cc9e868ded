//! `run`: one task in this process, always — a live timeline on stderr, the answer on stdout.
//! A running daemon is only asked whether it is there, to leave the sending of notices to it.
//! The config's MCP servers are started for the task; the first model call waits for them at
//! most `mcp::RUN_START_WAIT` (a slower one's tools join from the next step on).
//!
//! Must not: hand the task to the daemon — its live timeline only exists in this process.

use super::RunArgs;
use super::backend::DELIVER_NOW;
use super::render::{self, print_outcome};
use hermes_config::Config;
use hermes_engine::agent::JobExecution;
use hermes_engine::agent::{RunOptions, Submit};
use hermes_store::Origin;
use hermes_surfaces::app::App;
use hermes_surfaces::client::Remote;
use std::process::ExitCode;
use std::time::Duration;
use tokio::sync::mpsc;

pub async fn run(config: Config, args: RunArgs) -> anyhow::Result<ExitCode> {
    let daemon_up = Remote::detect(&config).await.is_some();
    let app = App::build(config, JobExecution::Direct).await?;
    app.mcp.start();
    app.mcp
        .wait_started(hermes_surfaces::mcp::RUN_START_WAIT)
        .await;
    let outcome = run_task(&app, args, daemon_up).await;
    app.mcp.stop().await;
    outcome
}

async fn run_task(app: &App, args: RunArgs, daemon_up: bool) -> anyhow::Result<ExitCode> {
    let claimed = app
        .agent
        .create_claimed(Submit::new(args.task, Origin::Cli, args.profile))
        .await?;
    let task = claimed.task().clone();
    errln!("task {} ({} profile)", task.id, task.profile);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let printer = tokio::spawn(async move {
        while let Some(step) = rx.recv().await {
            errln!("{}", render::step_line(&step));
        }
    });
    let opts = RunOptions {
        observer: Some(tx.clone()),
        // This process continues its task after a person's answer, with its timeline.
        resumer: Some(task.id.clone()),
        ..Default::default()
    };
    let timeout = args.approval_timeout.map(Duration::from_secs);
    let exec = async {
        let done = app.agent.run_claimed(claimed, opts).await?;
        if !done.waiting {
            return Ok::<_, hermes_engine::agent::AgentError>(done);
        }
        let on_ask = |a: &hermes_store::Approval| {
            errln!(
                "waiting for approval: {} ({} {}) — answer with `hermes-agent approvals approve|deny {}`, the dashboard or the API",
                a.id,
                a.tool,
                a.arguments,
                a.id
            );
        };
        app.agent
            .continue_own(&task.id, Some(tx), timeout, &on_ask)
            .await
    };
    tokio::pin!(exec);
    let interrupted = interrupted();
    let done = tokio::select! {
        r = &mut exec => r?,
        _ = interrupted => {
            errln!("interrupted: cancelling task {}", task.id);
            // Both at once: the cancel waits for the task's end, which only the task's own
            // future, polled here, can reach.
            let (cancelled, done) = tokio::join!(app.agent.cancel(&task.id), &mut exec);
            let done = done?;
            if let Err(e) = cancelled
                && !done.state.is_finished()
            {
                return Err(e.into());
            }
            done
        }
    };
    let _ = printer.await;
    // Notices the task queued: with no daemon to send them, send them now (they stay queued
    // in the outbox, and are retried by the daemon, if this fails).
    if !daemon_up && !app.store.outbox().for_task(&done.id).await?.is_empty() {
        let sent = tokio::time::timeout(DELIVER_NOW, app.notifier.deliver_due())
            .await
            .unwrap_or(0);
        errln!("delivered {sent} notice(s)");
    }
    let record = app
        .store
        .tasks()
        .record(&done.id)
        .await?
        .ok_or_else(|| anyhow::anyhow!("task {} disappeared from the store", done.id))?;
    print_outcome(&record, args.json)
}

/// Ctrl-C, SIGTERM (a `kill`, a service manager) or SIGHUP (the terminal closed): each ends the
/// task as cancelled, rather than leave it `running` in the store with nobody to finish it.
/// Installed by this call, before the task starts.
fn interrupted() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let int = signal(SignalKind::interrupt());
        let term = signal(SignalKind::terminate());
        let hup = signal(SignalKind::hangup());
        async move {
            match (int, term, hup) {
                (Ok(mut int), Ok(mut term), Ok(mut hup)) => {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                        _ = hup.recv() => {}
                    }
                }
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    tracing::warn!(error = %e, "cannot listen for SIGTERM and SIGHUP; Ctrl-C alone cancels the task");
                    let _ = tokio::signal::ctrl_c().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
