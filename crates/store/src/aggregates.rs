//! The store's typed handles, one per aggregate: a family of tables that one part of the
//! program owns, reached as `store.tasks()`, `store.jobs()`, … Each is a `Copy` view borrowing
//! the [`Store`]; its methods are that aggregate's queries, written in the file of their
//! tables (an aggregate's queries may sit in several files, e.g. the dashboard's and the
//! take-over's). What is not one aggregate's — opening and migrating, the pool, the node
//! lease, health, the change feed, copying a database — stays on [`Store`] itself.
//!
//! Must not: hold SQL (the queries stay with their tables) or state beyond the borrow.

use super::Store;

/// Declares each handle and its accessor on [`Store`], with the handle's doc on both.
macro_rules! aggregates {
    ($($(#[doc = $doc:literal])* $accessor:ident => $handle:ident;)*) => {$(
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $handle<'s> {
            pub(crate) store: &'s Store,
        }

        impl Store {
            $(#[doc = $doc])*
            pub fn $accessor(&self) -> $handle<'_> {
                $handle { store: self }
            }
        }
    )*};
}

aggregates! {
    /// Tasks and their trace (`tasks`, `task_steps`): creating, claiming, starting and ending
    /// tasks, their steps, the counts and searches over them, the usage and tokens summed from
    /// the model steps, and ending the tasks a silent node was running.
    tasks => Tasks;
    /// Held tasks' checkpoints (`task_holds`): a task waiting for a person or its sub-tasks,
    /// who continues it, and adopting the holds of a silent owner.
    holds => Holds;
    /// Scheduled jobs and their runs (`jobs`, `job_runs`): the job definitions, their run
    /// locks, the runs fired and how they were delivered, the jobs a model change pauses, and
    /// taking over the runs of a silent node.
    jobs => Jobs;
    /// Notices to send (`outbox`): queueing, leasing and marking them, and finding one by the
    /// token or remote id a reply names.
    outbox => Outbox;
    /// Incoming messages (`inbox_messages`, `inbox_watermarks`): recording each once with what
    /// it started, the replies and commands it carried, and how far each mailbox was read.
    inbox => Inbox;
    /// Chat channels' bookkeeping (`channel_holders`, `channel_cursors`, `chat_parts`): which
    /// node reads a channel, where its intake has read up to, what a notice was sent as.
    chat => Chat;
    /// Approval requests (`approvals`, `approval_notices`): asking, deciding, expiring and
    /// using them, and the notices that asked.
    approvals => Approvals;
    /// The daemons sharing the database (`nodes`): joining, beating, leaving, finding the
    /// silent ones and revoking their lease.
    nodes => Nodes;
    /// What each model profile answers as (`model_identities`, `model_changes`): identities
    /// seen and verified, and the changes noticed and told.
    models => Models;
    /// Long-term memory (`facts`, `fact_changes`): the facts and the log of their changes that
    /// followers replay.
    facts => Facts;
    /// The facts' embeddings (`fact_vectors`): what is not embedded yet, the vectors stored
    /// per model and pruning those a new model replaced.
    vectors => Vectors;
    /// Evaluation runs and their results (`eval_runs`, `eval_results`).
    evals => Evals;
    /// Signed-in dashboard sessions (`sessions`), by the hash of their id.
    sessions => Sessions;
    /// Working memory (`working_memory`): large intermediate results of a task, by key.
    working => Working;
    /// Page and feed snapshots (`snapshots`), by key: what a watch compares against.
    snapshots => Snapshots;
}
