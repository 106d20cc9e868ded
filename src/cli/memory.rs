//! `memory add`, `memory search` and `memory forget`: long-term facts, from whichever backend
//! answered (with a daemon up, only it may open the memory index).
//!
//! Must not: reach the daemon or the data dir except through the [`Backend`] it is given.

use super::MemoryCmd;
use super::render::{self, print_json};
use crate::client::Backend;
use serde_json::json;
use std::process::ExitCode;

pub async fn memory(backend: &dyn Backend, cmd: MemoryCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        MemoryCmd::Add { text, tags } => {
            let fact = backend.remember(&text, &tags).await?;
            let merged = if fact.merged {
                " (merged with the same fact)"
            } else {
                ""
            };
            outln!("{}{merged}", fact.id);
        }
        MemoryCmd::Search { query, k, json } => {
            let facts = backend.recall(&query, k).await?;
            if json {
                print_json(&json!({ "facts": facts }))?;
            } else {
                out!("{}", render::fact_list(&facts));
            }
        }
        MemoryCmd::Forget { id } => {
            backend.forget(&id).await?;
            outln!("forgot {id}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
