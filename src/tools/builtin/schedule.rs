//! Built-in tools: `schedule_task`, `list_schedules`, `cancel_schedule` — the model's handle on
//! the scheduler. They only translate arguments and errors; every rule (schedule forms, limits,
//! channels, the nesting guard) is the scheduler's.

use crate::scheduler::{JobRequest, Scheduler, SchedulerError};
use crate::store::Origin;
use crate::tools::{IdArgs, NoArgs, Tool, ToolContext, ToolError, ToolInfo, TypedTool, tool_fn};
use serde_json::{Value, json};
use std::sync::Arc;

/// The three schedule tools over one scheduler handle.
pub fn tools(scheduler: Scheduler) -> Vec<Arc<dyn Tool>> {
    let list = {
        let scheduler = scheduler.clone();
        tool_fn(
            ToolInfo::new(
                "list_schedules",
                "List scheduled jobs: ids, schedules, next and last run.",
                json!({"type": "object", "properties": {}, "additionalProperties": false}),
            ),
            move |_: NoArgs, _| {
                let scheduler = scheduler.clone();
                async move {
                    let jobs = scheduler.list().await.map_err(failed)?;
                    Ok(json!({ "jobs": jobs }))
                }
            },
        )
    };
    let cancel = {
        let scheduler = scheduler.clone();
        tool_fn(
            ToolInfo::new(
                "cancel_schedule",
                "Cancel a scheduled job for good, by its id from list_schedules.",
                json!({
                    "type": "object",
                    "properties": {"id": {"type": "string"}},
                    "required": ["id"],
                    "additionalProperties": false
                }),
            ),
            move |a: IdArgs, _| {
                let scheduler = scheduler.clone();
                async move {
                    let id = a.id.trim();
                    if id.is_empty() {
                        return Err(ToolError::InvalidArguments("'id' must be a job id".into()));
                    }
                    if scheduler.remove(id).await.map_err(failed)? {
                        Ok(json!({"id": id, "cancelled": true}))
                    } else {
                        Err(ToolError::Failed(format!(
                            "no job with id '{id}'; list_schedules shows the ids"
                        )))
                    }
                }
            },
        )
    };
    vec![Arc::new(ScheduleTask::new(scheduler)), list, cancel]
}

fn failed(e: SchedulerError) -> ToolError {
    ToolError::Failed(e.to_string())
}

/// Was this call made by a task that a job started (directly or through a sub-agent)?
fn started_by_job(ctx: &ToolContext) -> bool {
    ctx.origin == Origin::Job || ctx.job_id.is_some()
}

pub struct ScheduleTask {
    scheduler: Scheduler,
    info: ToolInfo,
}

impl ScheduleTask {
    pub fn new(scheduler: Scheduler) -> ScheduleTask {
        let channels = scheduler.channels();
        let channel_note = if channels.is_empty() {
            "none configured".to_string()
        } else {
            format!("channels: {}", channels.join(", "))
        };
        let description = format!(
            "Run a task later as a fresh task that knows nothing of this one: write it in full. \
             schedule: cron '0 8 * * *' (08:00 daily), 'every 30m|2h|1d', 'in 45m' or '2026-05-01T09:00', in timezone (default {}). \
             Answers go to notify channels ({channel_note}); an answer of exactly [SILENT] sends nothing.",
            scheduler.settings().timezone
        );
        let mut notify_items = json!({"type": "string"});
        if !channels.is_empty() {
            notify_items["enum"] = json!(channels);
        }
        let parameters = json!({
            "type": "object",
            "properties": {
                "task": {"type": "string"},
                "schedule": {"type": "string"},
                "name": {"type": "string", "description": "Short title."},
                "timezone": {"type": "string", "description": "IANA zone."},
                "notify": {"type": "array", "items": notify_items},
                "profile": {"type": "string", "description": "Model profile."}
            },
            "required": ["task", "schedule"],
            "additionalProperties": false
        });
        ScheduleTask {
            scheduler,
            info: ToolInfo::new("schedule_task", description, parameters),
        }
    }
}

impl TypedTool for ScheduleTask {
    /// The schema offers no `precheck`, and arguments are validated against it first.
    type Args = JobRequest;

    fn info(&self) -> &ToolInfo {
        &self.info
    }

    async fn run(&self, req: JobRequest, ctx: &ToolContext) -> Result<Value, ToolError> {
        // A job-started task is refused by `add` unless nesting is allowed; if it is, the
        // job records that a job made it.
        let origin = if started_by_job(ctx) {
            Origin::Job
        } else {
            Origin::Model
        };
        let job = self.scheduler.add(req, origin).await.map_err(failed)?;
        let view = self.scheduler.view(job).await.map_err(failed)?;
        serde_json::to_value(view).map_err(|e| ToolError::Failed(e.to_string()))
    }
}
