//! The JSON API, one file per resource — the same resources, and file names, as the
//! dashboard's pages in `pages`: tasks (with their live `events`), jobs, deliveries (the
//! outbox), the mail read (inbox), the regression runs (`evals`), memory, health (with the
//! MCP servers' status), model calls and tokens per day, profile and job (`usage`), and the
//! Prometheus `metrics`.
//!
//! Must not: hold business logic — each handler validates its input, calls one part, and
//! shapes the answer.

pub(super) mod approvals;
pub(super) mod deliveries;
pub(super) mod evals;
pub(super) mod events;
pub(super) mod health;
pub(super) mod inbox;
pub(super) mod jobs;
pub(super) mod memory;
pub(super) mod metrics;
pub(super) mod tasks;
pub(super) mod usage;
