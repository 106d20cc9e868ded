//! `tasks list`, `tasks show` and `tasks watch`: task history and traces, from whichever
//! backend answered.
//!
//! Must not: reach the daemon or the data dir except through the [`Backend`] it is given.

use super::TasksCmd;
use super::render::{self, print_json};
use hermes_surfaces::client::Backend;
use serde_json::json;
use std::process::ExitCode;

pub async fn tasks(backend: &dyn Backend, cmd: TasksCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        TasksCmd::List { state, limit, json } => {
            let list = backend.tasks(state, limit).await?;
            if json {
                print_json(&json!({ "tasks": list }))?;
            } else if let (true, Some(state)) = (list.is_empty(), state) {
                outln!("no {state} tasks");
            } else {
                out!("{}", render::task_table(&list));
            }
        }
        TasksCmd::Watch { id } => {
            let print = |step: &hermes_store::Step| outln!("{}", render::step_line(step));
            let task = backend.watch(&id, &print).await?;
            // The stream told the end already; a daemon stopping right after it (the end was
            // its shutdown) must not turn that into an error.
            let record = match backend.task(&task.id).await {
                Ok(record) => record,
                Err(e) => {
                    tracing::debug!(error = %e, "cannot read the task back after its end");
                    hermes_store::TaskRecord {
                        task,
                        steps: Vec::new(),
                        notices: Vec::new(),
                    }
                }
            };
            return render::print_outcome(&record, false);
        }
        TasksCmd::Show { id, json } => {
            let record = backend.task(&id).await?;
            if json {
                print_json(&record)?;
            } else {
                out!(
                    "{}",
                    render::task_timeline(&record.task, &record.steps, &record.notices)
                );
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
