//! `jobs list`, `jobs add`, `jobs rm` and `jobs run`, from whichever backend answered. `jobs
//! run` follows the fired task to its end, so the person sees its outcome here either way.
//!
//! Must not: reach the daemon or the data dir except through the [`Backend`] it is given.

use super::JobsCmd;
use super::backend::Fired;
use super::render::{self, print_json, print_outcome};
use crate::client::Backend;
use serde_json::json;
use std::process::ExitCode;

pub async fn jobs(backend: &dyn Backend, cmd: JobsCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        JobsCmd::List { json } => {
            let jobs = backend.jobs().await?;
            if json {
                print_json(&json!({ "jobs": jobs }))?;
            } else {
                out!("{}", render::job_table(&jobs));
            }
        }
        JobsCmd::Add { job, json } => {
            let view = backend.add_job(job).await?;
            if json {
                print_json(&view)?;
            } else {
                outln!(
                    "job {} added; next run {}",
                    view.id,
                    view.next_run_at
                        .map(render::time)
                        .unwrap_or_else(|| "none".into())
                );
            }
        }
        JobsCmd::Rm { id } => {
            backend.remove_job(&id).await?;
            outln!("job {id} removed");
        }
        JobsCmd::Run { id } => return run(backend, &id).await,
    }
    Ok(ExitCode::SUCCESS)
}

/// Fire a job now and print its task's outcome; the exit code is the task's.
async fn run(backend: &dyn Backend, id: &str) -> anyhow::Result<ExitCode> {
    if backend.daemon().is_none() {
        errln!("job {id}: firing in this process (no daemon running)");
    }
    let record = match backend.fire_job(id).await? {
        Fired::OnDaemon { base, task_id } => {
            errln!("job {id} fired on the daemon at {base}: task {task_id}");
            // Live, as `run` shows a task: each step on stderr, the outcome below.
            let print = |step: &crate::store::Step| errln!("{}", render::step_line(step));
            backend.watch(&task_id, &print).await?;
            backend.task(&task_id).await?
        }
        Fired::Here { run, delivered } => {
            if delivered > 0 {
                errln!("delivered {delivered} notice(s)");
            }
            let Some(task_id) = run.task_id else {
                anyhow::bail!(
                    "job {id} did not run: {} ({})",
                    render::word(&run.outcome),
                    run.reason.as_deref().unwrap_or("no reason recorded")
                );
            };
            // The run is over: its task is as final as it will get.
            backend.task(&task_id).await?
        }
    };
    print_outcome(&record, false)
}
