//! `/jobs`: every job with its schedule in words, and a form to add one whose schedule is
//! checked and previewed as you type (`GET /v1/schedule`); `/jobs/{id}`: one job — its next
//! five firings, pause/resume, run now, delete (confirmed) — and its runs linked to their
//! tasks, each with its delivery.
//!
//! Must not: check or fire a job itself — everything goes through the `Scheduler`, as the
//! API does; jobs made here have origin `web`.

use super::flash::{Flash, flash};
use super::guard::{CsrfForm, PageQuery, see_other};
use super::layout::{
    Ctx, PageError, PageResult, Shown, badge, firing, long_text, render, render_in, when,
};
use crate::doctor::Verdict;
use crate::http::extract::Id;
use crate::http::{ApiError, ApiState};
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use hermes_engine::scheduler::{JobRequest, PREVIEW_FIRINGS, describe_job, example_time, upcoming};
use hermes_store::{Notice, NoticeFilter, Origin, PauseReason};
use maud::{Markup, html};
use serde::Deserialize;

#[derive(Deserialize, Default)]
pub(crate) struct Done {
    #[serde(default)]
    done: Option<String>,
}

pub(crate) async fn list(ctx: Ctx, PageQuery(q): PageQuery<Done>) -> PageResult {
    let _s = &ctx.state;
    let body = jobs_body(&ctx, &JobForm::default(), None, q.done.as_deref()).await?;
    Ok(render(&ctx, "Jobs", body).into_response())
}

async fn jobs_body(
    ctx: &Ctx,
    form: &JobForm,
    error: Option<&str>,
    done: Option<&str>,
) -> Result<Markup, PageError> {
    let tz = ctx.tz();
    let jobs = ctx.state.scheduler.list().await?;
    Ok(html! {
        (flash(done))
        @if jobs.is_empty() {
            p.muted { "No jobs yet: add one below." }
        } @else {
            div.scroll { table.rows {
                thead { tr { th { "Job" } th { "Schedule" } th { "Next run" } th { "Last run" } } }
                tbody { @for j in &jobs {
                    tr {
                        td data-label="Job" {
                            a href={"/jobs/" (j.id)} { (j.name) }
                            @if !j.enabled { " " (badge(Shown::Job { enabled: false })) }
                        }
                        td data-label="Schedule" { (describe_job(&j.job)) }
                        td data-label="Next run" { @if let (true, Some(t)) = (j.enabled, j.next_run_at) { (firing(t, tz)) } @else if j.enabled { span.muted { "—" } } @else { span.muted { "paused" } } }
                        td data-label="Last run" { @match &j.last_run {
                            Some(r) => { (badge(Shown::Run(r.outcome))) " " (when(r.fired_at, tz)) }
                            None => { span.muted { "never" } }
                        } }
                    }
                } }
            } }
        }
        (create_form(ctx, form, error))
    })
}

fn create_form(ctx: &Ctx, f: &JobForm, error: Option<&str>) -> Markup {
    let settings = ctx.state.agent.settings();
    let zone = if f.timezone.is_empty() {
        settings.scheduler.timezone.as_str()
    } else {
        f.timezone.as_str()
    };
    let channels = ctx.state.scheduler.channels();
    html! {
        section.card aria-labelledby="h-add" {
            h2 #h-add { "Add a job" }
            form.stack #job-form method="post" action="/jobs" {
                (ctx.csrf())
                @if let Some(e) = error { p.error role="alert" #job-error { (e) } }
                label for="job-name" { "Name" }
                input #job-name name="name" value=(f.name) placeholder="Morning digest";
                label for="job-task" { "Task at each firing" }
                textarea #job-task name="task" rows="3" required { (f.task) }
                div.row {
                    div.field.grow {
                        label for="job-schedule" { "Schedule" }
                        input #job-schedule name="schedule" value=(f.schedule) required
                            placeholder="0 8 * * *" aria-describedby="schedule-help schedule-preview" autocomplete="off" spellcheck="false";
                    }
                    div.field {
                        label for="job-timezone" { "Time zone" }
                        input #job-timezone name="timezone" value=(zone) required autocomplete="off" spellcheck="false";
                    }
                }
                p.hint #schedule-help { "Cron (" code { "0 8 * * *" } " = 08:00 daily), an interval (" code { "every 2h" } "), or once (" code { "in 30m" } ", " code { (example_time()) } ")." }
                div.preview #schedule-preview aria-live="polite" data-count=(PREVIEW_FIRINGS) {}
                @if !channels.is_empty() {
                    fieldset {
                        legend { "Deliver the answer to" }
                        @for c in &channels {
                            label.check { input type="checkbox" name="notify" value=(c) checked[f.notify.contains(c)]; " " (c) }
                        }
                    }
                }
                div.field {
                    label for="job-profile" { "Model profile" }
                    select #job-profile name="profile" {
                        option value="" { "default (" (settings.model.default_profile) ")" }
                        @for p in settings.model.profiles.keys() { option value=(p) selected[f.profile == *p] { (p) } }
                    }
                }
                div.field {
                    label for="job-pre-approved" { "Pre-approved tools" }
                    input #job-pre-approved name="pre_approved" value=(f.pre_approved) placeholder="mail_send, crm__*" aria-describedby="pre-approved-help";
                    p.hint #pre-approved-help { "Tools that need approval (tools.approval) which this job's firings may call without asking; names or globs, comma-separated." }
                }
                button type="submit" { "Add the job" }
            }
        }
    }
}

/// The add form as posted. `notify` repeats (one field per ticked channel), which a plain
/// form decoder reads as a list only from pairs, so the fields are taken from the pairs.
#[derive(Default)]
pub(crate) struct JobForm {
    name: String,
    task: String,
    schedule: String,
    timezone: String,
    profile: String,
    notify: Vec<String>,
    pre_approved: String,
}

impl<'de> Deserialize<'de> for JobForm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs = Vec::<(String, String)>::deserialize(d)?;
        let mut f = JobForm::default();
        for (k, v) in pairs {
            match k.as_str() {
                "name" => f.name = v,
                "task" => f.task = v,
                "schedule" => f.schedule = v,
                "timezone" => f.timezone = v,
                "profile" => f.profile = v,
                "notify" => f.notify.push(v),
                "pre_approved" => f.pre_approved = v,
                _ => {}
            }
        }
        Ok(f)
    }
}

pub(crate) async fn create(ctx: Ctx, CsrfForm(f): CsrfForm<JobForm>) -> PageResult {
    let s = &ctx.state;
    let opt = |v: &str| Some(v.trim().to_string()).filter(|v| !v.is_empty());
    let req = JobRequest {
        task: f.task.clone(),
        schedule: f.schedule.clone(),
        name: opt(&f.name),
        timezone: opt(&f.timezone),
        notify: f.notify.clone(),
        profile: opt(&f.profile),
        precheck: None,
        pre_approved: f
            .pre_approved
            .split([',', ' ', '\n'])
            .map(str::trim)
            .filter(|g| !g.is_empty())
            .map(String::from)
            .collect(),
    };
    match s.scheduler.add(req, Origin::Web).await {
        Ok(job) => Ok(see_other(&format!(
            "/jobs/{}?done={}",
            job.id,
            Flash::JobAdded.key()
        ))),
        Err(e) => {
            let e = ApiError::from(e);
            let body = jobs_body(&ctx, &f, Some(&e.message), None).await?;
            Ok((e.status, render(&ctx, "Jobs", body)).into_response())
        }
    }
}

pub(crate) async fn show(ctx: Ctx, Id(id): Id, PageQuery(q): PageQuery<Done>) -> PageResult {
    let s = &ctx.state;
    let view = s.scheduler.get(&id).await?;
    let runs = s.scheduler.runs(&id, 50).await?;
    let notices = s
        .agent
        .store()
        .outbox()
        .list(&NoticeFilter {
            job_id: Some(id.clone()),
            ..NoticeFilter::oldest_first()
        })
        .await?;
    let last_model = s.agent.store().jobs().last_model(&id).await?;
    // Its times are in its own zone, which the footer names.
    let tz: chrono_tz::Tz = view.timezone.parse().unwrap_or(ctx.tz());
    let j = &view.job;
    let body = html! {
        (flash(q.done.as_deref()))
        div.task-text { (long_text(&j.task, "task")) }
        dl.facts {
            dt { "Schedule" } dd { (describe_job(j)) " " code { (j.schedule) } }
            dt { "State" } dd #job-state {
                (badge(Shown::Job { enabled: j.enabled }))
                @match j.pause_reason {
                    Some(PauseReason::ModelChanged) => {
                        " " span #pause-reason data-reason="model_changed" {
                            "held: its profile's model changed and no eval has verified the new one ("
                            a href="/evals" { "evals" } "); a passing eval or Resume releases it"
                        }
                    }
                    Some(PauseReason::Person) => { " " span.muted #pause-reason data-reason="person" { "by a person" } }
                    None => {}
                }
            }
            dt { "Last model" } dd #last-model { (last_model_cell(last_model.as_ref(), tz)) }
            dt { "Delivers to" } dd { @if j.notify.is_empty() { span.muted { "nobody" } } @else { (j.notify.join(", ")) } }
            dt { "Profile" } dd { (j.profile.as_deref().unwrap_or("default")) }
            dt { "Origin" } dd { (j.origin) }
            dt { "Created" } dd { (when(j.created_at, tz)) }
            @if let Some(p) = &j.precheck { dt { "Precheck" } dd { code { (p) } } }
            @if !j.pre_approved.is_empty() { dt { "Pre-approved" } dd { code { (j.pre_approved.join(", ")) } } }
        }
        section aria-labelledby="h-next" {
            h2 #h-next { "Next firings" }
            @let next = upcoming(j, PREVIEW_FIRINGS);
            @if next.is_empty() {
                p.muted { @if j.enabled { "No further firing." } @else { "Paused: resume to see the next firings." } }
            } @else {
                ol.firings #firings { @for t in &next { li { (firing(*t, tz)) } } }
            }
        }
        div.actions {
            @let toggle = if j.enabled { "pause" } else { "resume" };
            (action(&ctx, &j.id, toggle, if j.enabled { "Pause" } else { "Resume" }))
            (action(&ctx, &j.id, "run", "Run now"))
            details.confirm {
                summary { "Delete…" }
                p { "This removes the job and its run history; its tasks stay." }
                (action(&ctx, &j.id, "delete", "Delete this job"))
            }
        }
        section aria-labelledby="h-runs" {
            h2 #h-runs { "Runs" }
            (runs_table(&runs, &notices, tz))
        }
    };
    let zone = html! { (tz.name()) " (the job's zone)" };
    Ok(render_in(&ctx, &j.name, zone, body).into_response())
}

fn action(ctx: &Ctx, id: &str, what: &str, label: &str) -> Markup {
    html! {
        form.inline method="post" action={"/jobs/" (id) "/" (what)} {
            (ctx.csrf())
            button class=(if what == "delete" { "danger" } else { "" }) type="submit" { (label) }
        }
    }
}

/// The model the job's last run was answered by, and whether an eval verified it.
fn last_model_cell(last: Option<&hermes_store::LastModel>, tz: chrono_tz::Tz) -> Markup {
    html! {
        @if let Some(m) = last {
            (m.profile) " · " code { (m.model.as_deref().unwrap_or("not reported")) }
            " "
            @if m.verified {
                (badge(Shown::Check(Verdict::Ok))) " verified"
            } @else {
                (badge(Shown::Check(Verdict::Warn))) " not verified"
            }
            " · " a href={"/tasks/" (m.task_id)} { (when(m.at, tz)) }
            @if let Some(i) = &m.identity { div.muted { "identity: " code { (i) } } }
        } @else { span.muted { "no run yet" } }
    }
}

fn runs_table(runs: &[hermes_store::JobRun], notices: &[Notice], tz: chrono_tz::Tz) -> Markup {
    html! {
        @if runs.is_empty() {
            p.muted { "No runs yet." }
        } @else {
            div.scroll { table.rows #runs {
                thead { tr { th { "Fired" } th { "Outcome" } th { "Task" } th { "Delivery" } } }
                tbody { @for r in runs {
                    tr {
                        td data-label="Fired" { (when(r.fired_at, tz)) }
                        td data-label="Outcome" { (badge(Shown::Run(r.outcome))) @if let Some(why) = &r.reason { " " span.muted { (why) } } }
                        td data-label="Task" { @match &r.task_id { Some(t) => { a href={"/tasks/" (t)} { (t) } } None => { span.muted { "—" } } } }
                        td data-label="Delivery" {
                            span.muted { (r.delivery) }
                            @for n in notices.iter().filter(|n| n.queued.run_id == Some(r.id)) {
                                div.delivery {
                                    (badge(Shown::Notice(n.state))) " " (n.queued.channel)
                                    @if let Some(e) = &n.last_error { " — " span.error-text { (e) } }
                                }
                            }
                        }
                    }
                } }
            } }
        }
    }
}

/// What a job's page can do to it (`POST /jobs/{id}/{action}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobAction {
    Pause,
    Resume,
    Run,
    Delete,
}

/// The actions by the word in their path.
const JOB_ACTIONS: [(&str, JobAction); 4] = [
    ("pause", JobAction::Pause),
    ("resume", JobAction::Resume),
    ("run", JobAction::Run),
    ("delete", JobAction::Delete),
];

pub(crate) async fn act(
    State(s): State<ApiState>,
    Path((id, action)): Path<(String, String)>,
    CsrfForm(_): CsrfForm,
) -> PageResult {
    let back = |done: Flash| see_other(&format!("/jobs/{id}?done={}", done.key()));
    let Some(&(_, action)) = JOB_ACTIONS.iter().find(|(word, _)| *word == action) else {
        return Err(ApiError::not_found(format!(
            "'{action}' is not something a job can do; use pause, resume, run or delete"
        ))
        .into());
    };
    Ok(match action {
        JobAction::Pause => {
            s.scheduler.pause(&id).await?;
            back(Flash::JobPaused)
        }
        JobAction::Resume => {
            s.scheduler.resume(&id).await?;
            back(Flash::JobResumed)
        }
        JobAction::Run => {
            s.scheduler.run_now(&id).await?;
            back(Flash::JobRunStarted)
        }
        JobAction::Delete => {
            if !s.scheduler.remove(&id).await? {
                return Err(ApiError::not_found(format!("job '{id}' not found")).into());
            }
            see_other(&format!("/jobs?done={}", Flash::JobDeleted.key()))
        }
    })
}
