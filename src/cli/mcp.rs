//! `mcp`: this binary as an MCP server on stdin/stdout, for MCP clients (desktop assistants,
//! editors). Its tools reach the running daemon through its API, or the data dir when no
//! daemon runs — the same `Backend` as `tasks`, `jobs` and `memory`.
//!
//! Must not: print to stdout (it carries only MCP messages); what it has to say goes to
//! stderr through `tracing`.

use super::backend;
use hermes_config::Config;
use hermes_store::Origin;
use std::process::ExitCode;
use std::sync::Arc;

pub async fn mcp(config: Config) -> anyhow::Result<ExitCode> {
    let backend: Arc<dyn hermes_surfaces::client::Backend> =
        Arc::from(backend::connect_as(config, Origin::Mcp).await);
    match backend.daemon() {
        Some(base) => tracing::info!("MCP on stdio: working through the daemon at {base}"),
        None => tracing::info!("MCP on stdio: no daemon answers; working on the data dir"),
    }
    let served = hermes_surfaces::mcp::serve_stdio(backend.clone()).await;
    backend.close().await;
    served?;
    Ok(ExitCode::SUCCESS)
}
