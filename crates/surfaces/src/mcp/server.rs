//! `hermes-agent mcp`: an MCP server on stdin/stdout, so MCP clients (desktop assistants,
//! editors) can run tasks and manage jobs and memory. Every call goes through the CLI's
//! `Backend` — the running daemon's API when it is up, the data dir when it is not — so it
//! does exactly what the CLI would.
//!
//! Owns: the MCP side of those calls — tool listing, argument checks against the published
//! schemas, results as JSON (structured and as text), failures as `isError` results a model
//! can read.
//! Must not: write to stdout itself (rmcp, through `serve_io.rs`, owns it; logs go to stderr),
//! or hold business logic.

use super::catalog::{self, MAX_LIST, Spec};
use crate::client::{Backend, ClientError};
use hermes_engine::scheduler::JobRequest;
use hermes_engine::tools::{IdArgs, NoArgs, parse_args};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::sync::Arc;

/// The tools offered, in the order listed: a contract with MCP clients.
pub const TOOL_NAMES: [&str; 9] = [
    "run_task",
    "list_tasks",
    "get_task",
    "list_jobs",
    "create_job",
    "delete_job",
    "remember",
    "recall",
    "forget",
];

/// Why `hermes-agent mcp` stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the MCP client did not complete the handshake on stdin/stdout: {0}")]
    Handshake(String),
    #[error("the MCP session ended abnormally: {0}")]
    Session(String),
}

/// Serve MCP on stdin/stdout through `backend` until the client closes stdin.
pub async fn serve_stdio(backend: Arc<dyn Backend>) -> Result<(), ServeError> {
    let io = super::serve_io::ServeIo::new(tokio::io::stdin(), tokio::io::stdout());
    let session = Hermes::new(backend)
        .serve(io)
        .await
        .map_err(|e| ServeError::Handshake(hermes_store::util::error_chain(&e)))?;
    session
        .waiting()
        .await
        .map_err(|e| ServeError::Session(e.to_string()))?;
    Ok(())
}

/// The MCP server's state: the backend and the published tools with their validators.
struct Hermes {
    backend: Arc<dyn Backend>,
    tools: Vec<Tool>,
    validators: Vec<(&'static str, jsonschema::Validator)>,
}

impl Hermes {
    fn new(backend: Arc<dyn Backend>) -> Hermes {
        let specs = catalog::specs();
        let tools = specs.iter().map(as_tool).collect();
        let validators = specs
            .iter()
            .filter_map(|s| Some((s.name, jsonschema::validator_for(&s.schema).ok()?)))
            .collect();
        Hermes {
            backend,
            tools,
            validators,
        }
    }

    /// Whether `args` fit the published schema of `name`: every violation, with its pointer.
    fn check(&self, name: &str, args: &Value) -> Result<(), CallError> {
        let Some((_, v)) = self.validators.iter().find(|(n, _)| *n == name) else {
            return Ok(());
        };
        let problems: Vec<String> = v
            .iter_errors(args)
            .take(8)
            .map(|e| {
                let at = e.instance_path().as_str().to_string();
                format!("{}: {e}", if at.is_empty() { "(root)" } else { &at })
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(CallError::Arguments(problems.join("; ")))
        }
    }

    /// Run one call; the result as a JSON object, or a message for the caller.
    async fn dispatch(&self, name: &str, args: Value) -> Result<Value, CallError> {
        self.check(name, &args)?;
        let b = self.backend.as_ref();
        let value = match name {
            "run_task" => {
                let a: catalog::RunTask = parse(args)?;
                let t = b.run_task(&a.task, a.profile.as_deref()).await?;
                let mut v = json!({"task_id": t.id, "state": t.state, "answer": t.answer,
                       "error": t.error, "reason": t.reason});
                if t.waiting {
                    // Returned at once: a person must answer first, which may take hours.
                    v["waiting"] = json!(
                        "waiting for approval: a person must approve a tool call; get_task shows the task when it ends"
                    );
                }
                v
            }
            "list_tasks" => {
                let a: catalog::ListTasks = parse(args)?;
                let limit = a.limit.unwrap_or(20).clamp(1, MAX_LIST);
                json!({"tasks": b.tasks(a.state, limit).await?})
            }
            "get_task" => {
                let a: IdArgs = parse(args)?;
                json!({"task": b.task(&a.id).await?})
            }
            "list_jobs" => {
                let _: NoArgs = parse(args)?;
                json!({"jobs": b.jobs().await?})
            }
            "create_job" => {
                let job: JobRequest = parse(args)?;
                json!({"job": b.add_job(job).await?})
            }
            "delete_job" => {
                let a: IdArgs = parse(args)?;
                b.remove_job(&a.id).await?;
                json!({"id": a.id, "deleted": true})
            }
            "remember" => {
                let a: catalog::Remember = parse(args)?;
                let r = b.remember(&a.text, &a.tags).await?;
                json!({"id": r.id, "merged": r.merged})
            }
            "recall" => {
                let a: catalog::Recall = parse(args)?;
                let k = a.k.unwrap_or(5).clamp(1, MAX_LIST) as usize;
                json!({"facts": b.recall(&a.query, k).await?})
            }
            "forget" => {
                let a: IdArgs = parse(args)?;
                b.forget(&a.id).await?;
                json!({"id": a.id, "forgotten": true})
            }
            other => return Err(CallError::UnknownTool(other.to_string())),
        };
        Ok(value)
    }
}

impl ServerHandler for Hermes {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "hermes-agent",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(
                "hermes-agent is a personal-automation agent: run_task gives it a task and \
                 returns its answer; jobs run tasks on a schedule; remember/recall/forget manage \
                 its long-term facts.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools.clone()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools.iter().find(|t| t.name == name).cloned()
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.as_ref();
        if !TOOL_NAMES.contains(&name) {
            return Err(ErrorData::invalid_params(
                format!(
                    "unknown tool '{name}'; the tools are: {}",
                    TOOL_NAMES.join(", ")
                ),
                None,
            ));
        }
        let args = Value::Object(request.arguments.unwrap_or_default());
        let result = match self.dispatch(name, args).await {
            Ok(value) => CallToolResult::structured(value),
            Err(e) => CallToolResult::error(vec![ContentBlock::text(e.to_string())]),
        };
        Ok(result.into())
    }
}

fn as_tool(spec: &Spec) -> Tool {
    let schema = match &spec.schema {
        Value::Object(map) => map.clone(),
        _ => Default::default(),
    };
    Tool::new(spec.name, spec.description, Arc::new(schema))
}

fn parse<A: DeserializeOwned>(args: Value) -> Result<A, CallError> {
    parse_args(args).map_err(|e| CallError::Arguments(e.to_string()))
}

/// Why a tool call failed, as its `isError` result says it.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("invalid arguments: {0}")]
    Arguments(String),
    #[error("unknown tool '{0}'")]
    UnknownTool(String),
    #[error("{}", hermes_store::util::error_chain(.0))]
    Backend(#[from] ClientError),
}
