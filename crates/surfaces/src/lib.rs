//! The surfaces of hermes-agent, over the engine: the HTTP API and the dashboard (`http`), the
//! CLI's backends (`client`), MCP both ways (`mcp`), the regression runs and the model watch
//! (`eval`), the checks of `doctor`, the daemon's process (`daemon`), and the wiring that builds
//! every part of the engine from a configuration and connects them (`app`).
//!
//! Depends on the engine and the layers below it; only the `hermes-agent` binary's CLI (the root
//! package) builds on it. Inside, nothing imports `daemon` or `http` but `daemon`.

pub mod app;
pub mod client;
pub mod daemon;
pub mod doctor;
pub mod eval;
pub mod http;
pub mod mcp;
