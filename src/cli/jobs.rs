//! `jobs list`, `jobs add`, `jobs rm` and `jobs run`, from whichever backend answered. `jobs
//! run` follows the fired task to its end, so the person sees its outcome here either way.
//!
//! Must not: reach the daemon or the data dir except through the [`Backend`] it is given.

use super::JobsCmd;
use super::backend::Fired;
use super::render::{self, print_json, print_outcome};
use hermes_engine::scheduler::JobRequest;
use hermes_surfaces::client::Backend;
use serde_json::{Value, json};
use std::process::ExitCode;

/// `jobs add`'s flags: the same fields as the API's job object, checked by the scheduler like
/// every other way in (nothing here checks them again).
#[derive(Debug, clap::Args)]
pub struct JobArgs {
    /// What to do at each firing: a self-contained task (a fresh task runs it each time).
    pub task: String,
    /// 5-field cron ("0 8 * * *"), an interval ("every 2h") or a one-shot ("in 30m", ISO 8601).
    #[arg(long)]
    pub schedule: String,
    /// A short name, used in notice titles (default: the start of the task).
    #[arg(long)]
    pub name: Option<String>,
    /// IANA time zone (default: scheduler.timezone).
    #[arg(long)]
    pub timezone: Option<String>,
    /// Channel to deliver the answer to ("email" or a webhook name); repeatable.
    #[arg(long)]
    pub notify: Vec<String>,
    /// Model profile for the runs (default: model.default_profile).
    #[arg(long)]
    pub profile: Option<String>,
    /// A tool call run before each firing, without the model, as JSON:
    /// '{"tool": "watch_page", "arguments": {"url": "https://…"}}'. When it reports
    /// `"changed": false` the run is skipped and no tokens are spent.
    #[arg(long, value_name = "JSON", value_parser = parse_precheck)]
    pub precheck: Option<Value>,
    /// A tool (or glob, "mail_*") whose calls the firings may make without asking for
    /// approval (tools.approval); repeatable. Only a person sets this.
    #[arg(long = "pre-approved", value_name = "GLOB")]
    pub pre_approved: Vec<String>,
}

impl From<JobArgs> for JobRequest {
    fn from(a: JobArgs) -> JobRequest {
        JobRequest {
            task: a.task,
            schedule: a.schedule,
            name: a.name,
            timezone: a.timezone,
            notify: a.notify,
            profile: a.profile,
            precheck: a.precheck,
            pre_approved: a.pre_approved,
        }
    }
}

/// `--precheck` as JSON; its shape is checked by the scheduler like any other way in.
fn parse_precheck(text: &str) -> Result<Value, String> {
    serde_json::from_str(text).map_err(|e| {
        format!(
            "not valid JSON ({e}); example: '{{\"tool\": \"watch_page\", \"arguments\": {{\"url\": \"https://example.org\"}}}}'"
        )
    })
}

pub async fn jobs(backend: &dyn Backend, cmd: JobsCmd) -> anyhow::Result<ExitCode> {
    match cmd {
        JobsCmd::List { json } => {
            let jobs = backend.jobs().await?;
            if json {
                print_json(&json!({ "jobs": jobs }))?;
            } else {
                out!("{}", render::job_table(&jobs));
            }
        }
        JobsCmd::Add { job, json } => {
            let view = backend.add_job(job.into()).await?;
            if json {
                print_json(&view)?;
            } else {
                outln!("job {} added; next run {}", view.id, next_run(&view));
                if view.notify.is_empty() {
                    // Not an error (a job may only act, or only remember), but easily missed.
                    errln!(
                        "note: the job has no --notify channel: its answers are kept (`tasks list`, the dashboard) but sent nowhere"
                    );
                }
            }
        }
        JobsCmd::Rm { id } => {
            backend.remove_job(&id).await?;
            outln!("job {id} removed");
        }
        JobsCmd::Run { id } => return run(backend, &id).await,
        JobsCmd::Pause { id } => {
            let view = backend.pause_job(&id, true).await?;
            outln!("job {} paused", view.id);
        }
        JobsCmd::Resume { id } => {
            let view = backend.pause_job(&id, false).await?;
            outln!("job {} resumed; next run {}", view.id, next_run(&view));
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// When a job fires next, for a person; `none` for a one-shot that has fired.
fn next_run(job: &hermes_store::Job) -> String {
    job.next_run_at
        .map(render::time)
        .unwrap_or_else(|| "none".into())
}

/// Fire a job now and print its task's outcome; the exit code is the task's.
async fn run(backend: &dyn Backend, id: &str) -> anyhow::Result<ExitCode> {
    if backend.daemon().is_none() {
        // Said before the task runs (it may take minutes), so only of a job that exists.
        if !backend.jobs().await?.iter().any(|j| j.id == id) {
            anyhow::bail!("no job '{id}'; `hermes-agent jobs list` shows the ids");
        }
        errln!("job {id}: firing in this process (no daemon running)");
    }
    let record = match backend.fire_job(id).await? {
        Fired::OnDaemon { base, task_id } => {
            errln!("job {id} fired on the daemon at {base}: task {task_id}");
            // Live, as `run` shows a task: each step on stderr, the outcome below.
            let print = |step: &hermes_store::Step| errln!("{}", render::step_line(step));
            backend.watch(&task_id, &print).await?;
            backend.task(&task_id).await?
        }
        Fired::Here { run, delivered } => {
            if delivered > 0 {
                errln!("delivered {delivered} notice(s)");
            }
            let Some(task_id) = run.task_id else {
                anyhow::bail!(
                    "job {id} did not run: {} ({})",
                    run.outcome.as_str(),
                    run.reason.as_deref().unwrap_or("no reason recorded")
                );
            };
            // The run is over: its task is as final as it will get.
            backend.task(&task_id).await?
        }
    };
    print_outcome(&record, false)
}
