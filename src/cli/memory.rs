//! `memory add`, `memory search` and `memory forget`: long-term facts, from whichever backend
//! answered (with a daemon up, only it may open the memory index). `memory reindex` works on
//! the data dir's database itself: the keyword index (only with the daemon stopped) or the
//! fact vectors (beside a running daemon too: they live in the database).
//!
//! Must not: reach the daemon except through the [`Backend`] it is given.

use super::MemoryCmd;
use super::render::{self, print_json};
use hermes_config::Config;
use hermes_engine::memory::{LongTerm, MeaningError};
use hermes_store::{Store, StoreOptions};
use hermes_surfaces::client::Backend;
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
        MemoryCmd::Reindex { .. } => {
            anyhow::bail!("memory reindex runs on the data dir, not through a backend")
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `memory reindex [--embeddings]`.
pub async fn reindex(config: &Config, embeddings: bool) -> anyhow::Result<ExitCode> {
    let s = &config.settings;
    let store =
        Store::open_configured(&config.data_dir, &s.storage.url, StoreOptions::default()).await?;
    if !embeddings {
        let memory = LongTerm::open(&config.data_dir, store.clone()).await?;
        let n = memory.rebuild().await?;
        outln!("keyword index rebuilt: {n} fact(s)");
        store.close().await;
        return Ok(ExitCode::SUCCESS);
    }
    let Some((embedder, _)) = hermes_surfaces::app::embeddings(&s.memory)? else {
        anyhow::bail!(MeaningError::Off);
    };
    let mut bar = Progress::new();
    let done =
        LongTerm::embed_missing(store.clone(), embedder, |done, all| bar.show(done, all)).await?;
    outln!("{done} fact(s) embedded; every fact now has a vector of the configured model");
    store.close().await;
    Ok(ExitCode::SUCCESS)
}

/// A progress bar on stderr: a line each time it grows (at most [`Progress::WIDTH`] + 1), so
/// it reads the same in a terminal, a pipe and a log.
struct Progress {
    shown: Option<i64>,
}

impl Progress {
    const WIDTH: i64 = 30;

    fn new() -> Progress {
        Progress { shown: None }
    }

    fn show(&mut self, done: i64, all: i64) {
        let filled = if all > 0 {
            (done * Self::WIDTH / all).clamp(0, Self::WIDTH)
        } else {
            Self::WIDTH
        };
        if self.shown == Some(filled) && done < all {
            return;
        }
        self.shown = Some(filled);
        let bar = format!(
            "{}{}",
            "#".repeat(filled as usize),
            ".".repeat((Self::WIDTH - filled) as usize)
        );
        errln!("embedding facts [{bar}] {done}/{all}");
    }
}
