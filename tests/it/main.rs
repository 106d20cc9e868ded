//! The integration tests, in one binary: each module drives the real parts against real
//! servers on 127.0.0.1:0 (the daemon, a scripted model, SMTP, webhooks, MCP servers, a
//! browser, an IMAP server). One binary links the crate once instead of once per file.
//!
//! `cargo test --test it MODULE::` runs one module, e.g. `cargo test --test it web::`.

mod common;
/// Third-party programs some modules drive, installed on first use.
mod deps;
mod process;

mod agent;
mod agent_services;
mod api;
mod approvals;
mod cli;
mod daemon;
mod evals;
mod inbox;
mod llamacpp_native;
mod llm_gateway;
#[cfg(feature = "matrix")]
mod matrix;
mod mcp;
mod meaning;
mod memory;
mod models;
mod notify;
mod notify_bounds;
mod postgres;
mod real_model;
mod real_model_identity;
mod sandbox;
mod scheduler;
/// The code's shape: no two files of a crate import each other.
mod shape;
mod storage_faults;
mod store_round_trips;
#[cfg(feature = "telegram")]
mod telegram;
mod timezone;
mod tools_registry;
mod web;
mod web_tools;
