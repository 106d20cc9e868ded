//! hermes-agent: a personal-automation agent daemon. The model thinks, the code acts.
//!
//! Parts and their one-way dependencies (`docs/ARCHITECTURE.md` has the map, a task's path
//! through them, and where each behaviour lives):
//! `cli`/`daemon`/`http` (entry) → `eval` (regression runs, the model watch) → `app` →
//! `agent` → `tools` / `memory` / `llm`; `scheduler`, `notify` and `inbox` are services
//! reached through narrow handles; `store` holds all SQL; `config` all settings.

pub mod app;
pub mod cli;
pub mod client;
pub mod daemon;
pub mod doctor;
pub mod eval;
pub mod http;
pub mod mcp;
