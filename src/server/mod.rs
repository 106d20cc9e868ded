//! The HTTP API (axum): request validation and mapping to the agent, jobs and memory.
//!
//! Must not: hold business logic.
