//! The JSON API, one file per resource — the same resources, and file names, as the
//! dashboard's pages in `pages`: tasks (with their live `events`), jobs, deliveries (the
//! outbox), memory, and health (with the MCP servers' status).
//!
//! Must not: hold business logic — each handler validates its input, calls one part, and
//! shapes the answer.

pub(super) mod approvals;
pub(super) mod deliveries;
pub(super) mod events;
pub(super) mod health;
pub(super) mod jobs;
pub(super) mod memory;
pub(super) mod tasks;
