//! The registry's doors for approvals: [`Registry::execute`], which refuses a tool that needs a
//! person, [`Registry::execute_approved`] with the [`Permit`] without which such a tool never
//! runs, and a result shaped for a call that did not run now (a sub-agent's answer read after a
//! wait).
//!
//! Owns: those doors. The check every call passes (no permit, no gated tool) is the registry's
//! own, in `Registry::run`, with [`Registry::needs_approval`]. Must not: decide whether a
//! person approved — the agent's gate does, and makes the permit.

use super::registry::Registry;
use super::{Permit, ToolContext, ToolError, ToolOutcome, shape};
use crate::llm::{ToolCall, estimate_tokens};
use serde_json::Value;
use std::time::Duration;

impl Registry {
    /// Validate, authorise, run (with timeout, retries and breaker) and shape one call.
    /// Never fails: every problem becomes an error outcome the model can read. A tool that
    /// needs approval is refused here: only [`Registry::execute_approved`] runs it.
    pub async fn execute(
        &self,
        call: &ToolCall,
        ctx: &ToolContext,
        restrict: Option<&[String]>,
    ) -> ToolOutcome {
        self.execute_with(call, ctx, restrict, None).await
    }

    /// Would this task's call pass the checks before running (it exists, is allowed here —
    /// `restrict` is a sub-agent's own list — and its arguments fit)? Only such a call is
    /// worth a person's time.
    pub(crate) fn would_run(
        &self,
        name: &str,
        arguments: &Value,
        restrict: Option<&[String]>,
    ) -> bool {
        self.allowed(name, restrict) && self.check_call(name, arguments).is_ok()
    }

    /// [`Registry::execute`] for a call a person approved (or a job's `pre_approved` covers):
    /// the [`Permit`] is made only by the agent's approval gate.
    pub(crate) async fn execute_approved(
        &self,
        call: &ToolCall,
        ctx: &ToolContext,
        restrict: Option<&[String]>,
        permit: Permit,
    ) -> ToolOutcome {
        self.execute_with(call, ctx, restrict, Some(permit)).await
    }

    /// A result reached without running the tool now (a sub-agent's answer, once it has
    /// finished after waiting for a person), shaped as [`Registry::execute`] would have.
    pub async fn shape(
        &self,
        call: &ToolCall,
        result: Result<Value, ToolError>,
        ctx: &ToolContext,
    ) -> ToolOutcome {
        let name = call.name.as_str();
        let (content, error, working_key) = match (result, self.entry(name)) {
            (Ok(value), Some(entry)) => {
                let (content, key) = self.present(&entry, value, ctx).await;
                (content, None, key)
            }
            (Ok(_), None) => {
                let e = ToolError::Unknown(name.to_string());
                (shape::wrap_error(name, &e.to_string()), Some(e), None)
            }
            (Err(e), _) => (shape::wrap_error(name, &e.to_string()), Some(e), None),
        };
        ToolOutcome {
            result_tokens: estimate_tokens(&content),
            content,
            error,
            attempts: 0,
            duration: Duration::ZERO,
            working_key,
        }
    }
}
