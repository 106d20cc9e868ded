//! The daemon's client: where `tasks`, `jobs`, `memory`, `usage` and `hermes-agent mcp` do their
//! work.
//! One [`Backend`] trait with two sides — [`Remote`], the running daemon's HTTP API (it owns
//! the memory index and the live scheduler), and [`Local`], the data dir opened in this process
//! when no daemon answers. Each caller is written once against the trait.
//!
//! Owns: both sides, the typed values they return, their one error type ([`ClientError`]),
//! and the daemon's address file (`addr`: the daemon writes it, [`Remote::detect`] reads it).
//! Must not: print (the CLI does, so output is the same whichever side answered), or build the
//! parts itself — the data-dir side is handed a builder ([`Local::new`]), so this module sits
//! below every entry point (CLI, MCP server) and above the parts.

pub mod addr;
mod error;
mod local;
mod remote;

pub use error::ClientError;
pub use local::{BuildParts, Local, Parts};
pub use remote::Remote;

use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use hermes_engine::agent::Decision;
use hermes_engine::scheduler::{JobRequest, JobView};
use hermes_store::{Approval, ApprovalState, JobRun, Step, Task, TaskRecord, TaskState, Usage};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long a command that ran a task in this process (`run`, `jobs run`) tries to send its
/// notices before it exits; what does not go out stays in the outbox for the daemon to retry.
pub const DELIVER_NOW: Duration = Duration::from_secs(60);

/// What `watch` calls for each trace row.
pub type OnStep = dyn Fn(&Step) + Send + Sync;

/// What a backend call gives back: boxed so the trait can be used as `dyn Backend`.
pub type Reply<'a, T> = BoxFuture<'a, Result<T, ClientError>>;

pub trait Backend: Send + Sync {
    /// The daemon's base URL when the work happens there; `None` in this process.
    fn daemon(&self) -> Option<&str>;

    /// Tasks, newest first.
    fn tasks(&self, state: Option<TaskState>, limit: i64) -> Reply<'_, Vec<Task>>;
    /// One task with its trace; an unambiguous id prefix is enough.
    fn task<'a>(&'a self, id: &'a str) -> Reply<'a, TaskRecord>;
    /// Follow a task to its end: `on_step` sees every trace row — those recorded so far, then
    /// each as it is stored —; returns the task as it ended.
    fn watch<'a>(&'a self, id: &'a str, on_step: &'a OnStep) -> Reply<'a, Task>;

    fn jobs(&self) -> Reply<'_, Vec<JobView>>;
    fn add_job(&self, job: JobRequest) -> Reply<'_, JobView>;
    fn remove_job<'a>(&'a self, id: &'a str) -> Reply<'a, ()>;
    /// Fire a job now, whatever its schedule.
    fn fire_job<'a>(&'a self, id: &'a str) -> Reply<'a, Fired>;
    /// Pause a job (`paused`), or resume it; the job as it is then.
    fn pause_job<'a>(&'a self, id: &'a str, paused: bool) -> Reply<'a, JobView>;

    fn remember<'a>(&'a self, text: &'a str, tags: &'a [String]) -> Reply<'a, Remembered>;
    fn recall<'a>(&'a self, query: &'a str, k: usize) -> Reply<'a, Vec<FoundFact>>;
    fn forget<'a>(&'a self, id: &'a str) -> Reply<'a, ()>;

    /// Approval requests, newest first; `state` `None`: all.
    fn approvals(&self, state: Option<ApprovalState>) -> Reply<'_, Vec<Approval>>;
    /// Answer an open request, as a person at this command (`decided_by` is `cli`).
    fn decide<'a>(&'a self, id: &'a str, decision: Decision) -> Reply<'a, Approval>;

    /// Model calls, tokens and model time over the last `days` days (`1..=366`), per day,
    /// profile and job; days in `scheduler.timezone`.
    fn usage(&self, days: u32) -> Reply<'_, Usage>;

    /// Run a task to its end and return it (`hermes-agent mcp`'s `run_task`): on the daemon's
    /// workers, or in this process with the MCP servers of the config started for it. A task
    /// that waits for a person's approval is returned at once, `waiting`.
    fn run_task<'a>(&'a self, task: &'a str, profile: Option<&'a str>) -> Reply<'a, Task>;

    /// Stop what this backend started in this process (MCP servers); the daemon's stay.
    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// What firing a job did.
#[derive(Debug)]
pub enum Fired {
    /// The daemon took it: its task runs there, to be followed to its end.
    OnDaemon { base: String, task_id: String },
    /// It ran to its end in this process and its notices were sent (`delivered` of them); the
    /// run says which task it ran, or why it did not.
    Here { run: JobRun, delivered: usize },
}

/// A fact as `memory add` reports it.
#[derive(Debug, Deserialize)]
pub struct Remembered {
    pub id: String,
    /// The same fact was stated before; the two became one.
    #[serde(default)]
    pub merged: bool,
}

/// A fact found by `memory search`: the API's shape, so both backends print the same JSON.
#[derive(Debug, Serialize, Deserialize)]
pub struct FoundFact {
    pub id: String,
    pub text: String,
    pub tags: Vec<String>,
    pub score: f64,
    /// Its place in the keyword ranking (1 = first); `None`: no word of the query in it.
    #[serde(default)]
    pub keyword_rank: Option<u32>,
    /// Its cosine similarity to the query by meaning (`memory.embeddings`); `None`: not
    /// found by meaning, or recall by meaning off or waiting for its server.
    #[serde(default)]
    pub similarity: Option<f64>,
    pub created_at: DateTime<Utc>,
}
