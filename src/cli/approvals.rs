//! `approvals list`, `approvals approve ID` and `approvals deny ID [--reason TEXT]`: a person
//! answering held tool calls, through the daemon when it runs, else on the data dir.
//!
//! Must not: reach the daemon or the data dir except through the [`Backend`] it is given.

use super::ApprovalsCmd;
use super::render::{self, print_json};
use hermes_engine::agent::Decision;
use hermes_store::ApprovalState;
use hermes_surfaces::client::Backend;
use serde_json::json;
use std::process::ExitCode;

pub async fn approvals(backend: &dyn Backend, cmd: ApprovalsCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        ApprovalsCmd::List { state, all, json } => {
            let state = if all {
                None
            } else {
                Some(state.unwrap_or(ApprovalState::Open))
            };
            let list = backend.approvals(state).await?;
            if json {
                print_json(&json!({ "approvals": list }))?;
            } else {
                out!("{}", render::approval_table(&list));
            }
        }
        ApprovalsCmd::Approve { id } => {
            let a = backend.decide(&id, Decision::Approve).await?;
            outln!("approved {} ({} in task {})", a.id, a.tool, a.task_id);
        }
        ApprovalsCmd::Deny { id, reason } => {
            let a = backend.decide(&id, Decision::Deny { reason }).await?;
            outln!(
                "denied {} ({} in task {}): {}",
                a.id,
                a.tool,
                a.task_id,
                a.reason.unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
