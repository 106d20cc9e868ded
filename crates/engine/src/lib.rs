//! The engine of hermes-agent: the model gateway (`llm`), the tools and their guards
//! (`tools`), memory (`memory`), the scheduler, notifications (`notify`), the agent loop
//! (`agent`), conversations (`inbox`), the chat protocols (`channels`), the loop every
//! long-lived connection runs in (`reconnect`), the metrics registry (`metrics`), and the
//! loopback server of the test and regression fixtures (`loopback`).
//!
//! Depends only on the layers below it (`hermes-store`, `hermes-config`); the surfaces (the
//! HTTP API and dashboard, the CLI, MCP, the daemon) build on it and are never imported here.
//! Inside, the parts point one way: `agent` → `tools` / `memory` / `llm`; `scheduler`,
//! `notify`, `inbox` and `channels` are services reached through narrow handles.

pub mod agent;
pub mod channels;
pub mod inbox;
pub mod llm;
pub mod loopback;
pub mod memory;
pub mod metrics;
pub mod notify;
mod reconnect;
pub mod scheduler;
pub mod tools;
