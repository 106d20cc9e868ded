//! Built-in tools: `schedule_task`, `list_schedules`, `cancel_schedule` — the model's handle on
//! the scheduler. They only translate arguments and errors; every rule (schedule forms, limits,
//! channels, the nesting guard) is the scheduler's.

use crate::scheduler::{JobRequest, Scheduler, SchedulerError};
use crate::tools::{IdArgs, NoArgs, Tool, ToolContext, ToolError, ToolInfo, tool_with};
use hermes_store::Origin;
use serde_json::{Value, json};
use std::sync::Arc;

/// The three schedule tools over one scheduler handle.
pub fn tools(scheduler: Scheduler) -> Vec<Arc<dyn Tool>> {
    let list = ToolInfo::new(
        "list_schedules",
        "List scheduled jobs (ids, schedules, next and last run), e.g. to find one to cancel.",
        json!({"type": "object", "properties": {}, "additionalProperties": false}),
    );
    let cancel = ToolInfo::new(
        "cancel_schedule",
        "Cancel a scheduled job for good, by its id from list_schedules; only if asked.",
        json!({
            "type": "object",
            "properties": {"id": {"type": "string"}},
            "required": ["id"],
            "additionalProperties": false
        }),
    );
    vec![
        tool_with(scheduler.clone(), schedule_info(&scheduler), schedule),
        tool_with(scheduler.clone(), list, |s, _: NoArgs, _| async move {
            let jobs = s.list().await.map_err(failed)?;
            Ok(json!({ "jobs": jobs }))
        }),
        tool_with(scheduler, cancel, |s, a: IdArgs, _| async move {
            let id = a.id.trim();
            if id.is_empty() {
                return Err(ToolError::InvalidArguments("'id' must be a job id".into()));
            }
            if s.remove(id).await.map_err(failed)? {
                Ok(json!({"id": id, "cancelled": true}))
            } else {
                Err(ToolError::Failed(format!(
                    "no job with id '{id}'; list_schedules shows the ids"
                )))
            }
        }),
    ]
}

fn failed(e: SchedulerError) -> ToolError {
    ToolError::Failed(e.to_string())
}

/// Was this call made by a task that a job started (directly or through a sub-agent)?
fn started_by_job(ctx: &ToolContext) -> bool {
    ctx.origin == Origin::Job || ctx.job_id.is_some()
}

/// `schedule_task`'s description and schema name the configured channels and default zone.
/// With no channel configured there is nowhere to send an answer, so `notify` is not offered
/// at all (its words and schema were tokens on every call that no model could use).
fn schedule_info(scheduler: &Scheduler) -> ToolInfo {
    let channels = scheduler.channels();
    let delivery = if channels.is_empty() {
        String::new()
    } else {
        format!(
            " Answers go to notify channels ({}); an answer of exactly [SILENT] sends nothing.",
            channels.join(", ")
        )
    };
    let description = format!(
        "Run a task later, or again and again, as a fresh task knowing nothing of this one: write \
         it in full. Not for now. schedule: cron '0 8 * * *' (a time of day), 'every 30m|2h', \
         'in 45m' or \
         '{}', in timezone (default {}).{delivery}",
        crate::scheduler::example_time(),
        scheduler.settings().timezone
    );
    let mut parameters = json!({
        "type": "object",
        "properties": {
            "task": {"type": "string"},
            "schedule": {"type": "string"},
            "name": {"type": "string"},
            "timezone": {"type": "string", "description": "IANA zone."},
            "profile": {"type": "string"}
        },
        "required": ["task", "schedule"],
        "additionalProperties": false
    });
    if !channels.is_empty() {
        parameters["properties"]["notify"] =
            json!({"type": "array", "items": {"type": "string", "enum": channels}});
    }
    ToolInfo::new("schedule_task", description, parameters)
}

/// `schedule_task`. The schema offers no `precheck`, and arguments are validated against it
/// first.
async fn schedule(
    scheduler: Scheduler,
    req: JobRequest,
    ctx: ToolContext,
) -> Result<Value, ToolError> {
    // A job-started task is refused by `add` unless nesting is allowed; if it is, the
    // job records that a job made it.
    let origin = if started_by_job(&ctx) {
        Origin::Job
    } else {
        Origin::Model
    };
    let job = scheduler.add(req, origin).await.map_err(failed)?;
    let view = scheduler.view(job).await.map_err(failed)?;
    serde_json::to_value(view).map_err(|e| ToolError::Failed(e.to_string()))
}
