//! hermes-agent: a personal-automation agent daemon. The model thinks, the code acts.
//!
//! This package is the top layer: the `hermes-agent` binary and its CLI (`cli`: clap, printing,
//! exit codes). The layers below are crates of their own, each depending only on those under it
//! (`docs/ARCHITECTURE.md` has the map, a task's path through them, and where each behaviour
//! lives): `hermes-surfaces` (the HTTP API and dashboard, the CLI's backends, MCP, the
//! regression runs, doctor, the daemon, the wiring) → `hermes-engine` (the agent, tools, memory,
//! the model gateway, scheduler, notifications, conversations, chat channels, metrics) →
//! `hermes-config` (all settings) → `hermes-store` (all SQL, and the helpers every layer shares).

pub mod cli;
