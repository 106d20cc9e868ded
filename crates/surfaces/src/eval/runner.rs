//! Running the regression cases: each case in a throwaway data dir of its own (an [`App`] built
//! on a temporary directory from the person's settings, so nothing it does — jobs, facts,
//! notices — touches their data), against a loopback fixture server; the run recorded in the
//! real store with the identity each profile was seen serving. A profile whose every case
//! passed has that identity verified, and the jobs held for a model change on it resume —
//! unless the run was narrowed to chosen cases.
//!
//! Owns: a run's order — identities, cases, record, verification, release. Must not: print
//! (the caller gets each result as it comes), or send a notice (the throwaway outbox is never
//! sent; the watch tells of verdicts).

use super::case::EvalCase;
use super::check;
use super::fixture::FixtureServer;
use super::suite::eval_tools;
use crate::app::{App, BuildOptions};
use hermes_config::{Config, Settings, SubAgent, WebhookSettings};
use hermes_engine::agent::JobExecution;
use hermes_engine::agent::{RunOptions, Submit};
use hermes_engine::llm::{Gateway, Identity};
use hermes_engine::scheduler::Scheduler;
use hermes_store::util::RetryPolicy;
use hermes_store::{
    EvalResult, EvalRun, EvalTrigger, EvalVerdict, Origin, PauseReason, StepKind, Store,
};
use std::collections::BTreeMap;
use std::time::Instant;

/// The sub-agent the starter suite's `delegate` case asks (added when the settings have no
/// agent of that name).
pub const HELPER_AGENT: &str = "eval_helper";

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(
        "unknown model profile '{profile}'{}; defined profiles: {known}",
        case.as_deref().map(|c| format!(" (named by case '{c}')")).unwrap_or_default()
    )]
    UnknownProfile {
        profile: String,
        case: Option<String>,
        known: String,
    },
    #[error(
        "no regression case to run: add one to the evals directory beside settings.yaml, or choose fewer with --case"
    )]
    NoCases,
    #[error("cannot start the eval fixture server on 127.0.0.1: {0}")]
    Fixtures(std::io::Error),
    #[error("the eval manifest tools: {0}")]
    Tools(#[from] hermes_engine::tools::manifest::ManifestError),
    #[error(transparent)]
    Store(#[from] hermes_store::StoreError),
}

/// A run to make.
pub struct EvalRequest<'a> {
    pub config: &'a Config,
    /// Where the run is recorded and identities verified: the person's data dir.
    pub store: &'a Store,
    /// Asked which model each profile serves (the daemon's own, so its record stays whole).
    pub gateway: &'a Gateway,
    /// `--profile`; else `model.default_profile`. A case may name its own.
    pub profile: Option<String>,
    pub cases: Vec<EvalCase>,
    /// The cases are a part of the suite chosen by name (`eval --case`): the run is recorded
    /// but verifies no model and resumes no job. A model that fails the suite must not pass
    /// as verified because the one case someone ran to look into it passed.
    pub narrowed: bool,
    pub trigger: EvalTrigger,
    /// The live scheduler, to resume held jobs through (the daemon); without it they are
    /// resumed in the store, and a running daemon's timer sees them within its rescan.
    pub scheduler: Option<&'a Scheduler>,
    /// The model retry policy of the throwaway apps (tests shorten it).
    pub model_retry: Option<RetryPolicy>,
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct EvalReport {
    pub run: EvalRun,
    /// `(profile, identity)` verified by this run.
    pub verified: Vec<(String, String)>,
    /// Jobs held for a model change that this run resumed.
    pub resumed: Vec<String>,
    /// It ran chosen cases only ([`EvalRequest::narrowed`]), so it verified nothing.
    pub narrowed: bool,
}

impl EvalReport {
    pub fn all_passed(&self) -> bool {
        self.run.failed == 0 && self.run.passed > 0
    }
}

/// Every profile the run would use is defined: `profile` (default: `model.default_profile`) and
/// each case's own. [`run`] checks it first; a caller may too, before it says anything.
pub fn check_profiles(
    settings: &hermes_config::Settings,
    profile: Option<&str>,
    cases: &[EvalCase],
) -> Result<(), EvalError> {
    let main = profile.unwrap_or(&settings.model.default_profile);
    let named = cases
        .iter()
        .map(|c| (c.profile.as_deref().unwrap_or(main), Some(c.name.as_str())));
    for (profile, case) in std::iter::once((main, None)).chain(named) {
        if !settings.model.profiles.contains_key(profile) {
            let known: Vec<&str> = settings.model.profiles.keys().map(String::as_str).collect();
            return Err(EvalError::UnknownProfile {
                profile: profile.to_string(),
                case: case.map(str::to_string),
                known: known.join(", "),
            });
        }
    }
    Ok(())
}

/// Run the cases in order, recording each result as it comes; `on_result` sees each one.
pub async fn run(
    req: EvalRequest<'_>,
    on_result: &(dyn Fn(&EvalResult) + Send + Sync),
) -> Result<EvalReport, EvalError> {
    let settings = &req.config.settings;
    check_profiles(settings, req.profile.as_deref(), &req.cases)?;
    let main = req
        .profile
        .clone()
        .unwrap_or_else(|| settings.model.default_profile.clone());
    let profile_of = |c: &EvalCase| c.profile.clone().unwrap_or_else(|| main.clone());
    if req.cases.is_empty() {
        return Err(EvalError::NoCases);
    }
    let mut identities: BTreeMap<String, Option<Identity>> = BTreeMap::new();
    for c in &req.cases {
        if let std::collections::btree_map::Entry::Vacant(slot) = identities.entry(profile_of(c)) {
            let seen = match req.gateway.check_identity(slot.key()).await {
                Ok(id) => id,
                Err(e) => {
                    tracing::warn!(profile = %slot.key(), error = %e, "cannot tell which model the profile serves");
                    None
                }
            };
            slot.insert(seen);
        }
    }
    let key_of = |p: &str| identities.get(p).cloned().flatten().map(|i| i.key());
    let run_id = req
        .store
        .evals()
        .start_run(&main, key_of(&main).as_deref(), req.trigger)
        .await?;
    let fixtures = FixtureServer::start().map_err(EvalError::Fixtures)?;
    let mut reported: BTreeMap<String, String> = BTreeMap::new();
    for (seq, case) in req.cases.iter().enumerate() {
        let profile = profile_of(case);
        let (mut result, model) = run_case(&req, case, &profile, &fixtures).await;
        if let Some(m) = model {
            reported.entry(profile.clone()).or_insert(m);
        }
        result.identity = key_of(&profile);
        req.store
            .evals()
            .add_result(run_id, seq as i64 + 1, &result)
            .await?;
        on_result(&result);
    }
    fixtures.stop().await;
    let run = req.store.evals().finish_run(run_id).await?;
    // Where the server told nothing before the run, the ids its replies reported are the
    // identity (`model.identity_check_s: 0`).
    for (p, id) in identities.iter_mut() {
        if id.is_none() {
            *id = reported.get(p).map(|m| Identity {
                model: m.clone(),
                told: None,
            });
        }
    }
    let (verified, resumed) = if req.narrowed {
        (Vec::new(), Vec::new())
    } else {
        verify(&req, &run, &identities).await?
    };
    Ok(EvalReport {
        run,
        verified,
        resumed,
        narrowed: req.narrowed,
    })
}

/// Each profile whose every case passed: its identity verified, and the jobs held for a
/// model change on it resumed when it still serves that identity.
async fn verify(
    req: &EvalRequest<'_>,
    run: &EvalRun,
    identities: &BTreeMap<String, Option<Identity>>,
) -> Result<(Vec<(String, String)>, Vec<String>), EvalError> {
    let mut verified = Vec::new();
    let mut resumed = Vec::new();
    let default = &req.config.settings.model.default_profile;
    for (profile, identity) in identities {
        let results: Vec<_> = run
            .results
            .iter()
            .filter(|r| r.profile == *profile)
            .collect();
        let all_passed =
            !results.is_empty() && results.iter().all(|r| r.verdict == EvalVerdict::Passed);
        let Some(identity) = identity.as_ref().filter(|_| all_passed) else {
            continue;
        };
        let key = identity.key();
        req.store
            .models()
            .verify_identity(profile, &key, identity.source(), run.id)
            .await?;
        verified.push((profile.clone(), key.clone()));
        let status = req.store.models().status(profile).await?;
        if status.current.is_some_and(|c| c.identity != key) {
            // It moved on again while the cases ran: what was verified is not what it serves.
            continue;
        }
        let held = req
            .store
            .jobs()
            .paused_for(PauseReason::ModelChanged, profile, profile == default)
            .await?;
        for job in held {
            match req.scheduler {
                Some(s) => {
                    if let Err(e) = s.resume(&job.id).await {
                        tracing::warn!(job = %job.id, error = %e, "cannot resume a held job");
                        continue;
                    }
                }
                None => {
                    let next =
                        hermes_engine::scheduler::next_after_pause(&job, hermes_store::now());
                    req.store.jobs().set_enabled(&job.id, None, next).await?;
                }
            }
            tracing::info!(job = %job.id, profile = %profile, "held job resumed: its model passed the eval");
            resumed.push(job.id);
        }
    }
    Ok((verified, resumed))
}

/// One case in its own throwaway data dir: its result, and the model id the replies reported.
async fn run_case(
    req: &EvalRequest<'_>,
    case: &EvalCase,
    profile: &str,
    fixtures: &FixtureServer,
) -> (EvalResult, Option<String>) {
    let started = Instant::now();
    let mut result = EvalResult {
        case_name: case.name.clone(),
        profile: profile.to_string(),
        identity: None,
        verdict: EvalVerdict::Failed,
        model_calls: 0,
        tokens: 0,
        duration_ms: 0,
        why: None,
        state: None,
        answer: None,
    };
    let case = match &case.fixtures.page {
        Some(page) => case.with_page_url(&fixtures.set_page(&page.path, &page.body)),
        None => {
            fixtures.clear_page();
            case.clone()
        }
    };
    let outcome = run_task(req, &case, profile, fixtures).await;
    result.duration_ms = started.elapsed().as_millis() as i64;
    match outcome {
        Ok(record) => {
            let why = check::judge(&case, &record);
            result.model_calls = check::model_calls(&record);
            result.tokens = record.task.prompt_tokens + record.task.completion_tokens;
            result.state = Some(record.task.state);
            result.answer = record.task.answer.clone();
            if why.is_empty() {
                result.verdict = EvalVerdict::Passed;
            } else {
                result.why = Some(why.join("; "));
            }
            let model = record
                .steps
                .iter()
                .find(|s| s.row.kind == StepKind::Model && s.row.name == profile)
                .and_then(|s| s.row.model.clone());
            (result, model)
        }
        Err(why) => {
            result.why = Some(why);
            (result, None)
        }
    }
}

/// The case's task run to its end in a fresh app on a temporary directory; its record.
async fn run_task(
    req: &EvalRequest<'_>,
    case: &EvalCase,
    profile: &str,
    fixtures: &FixtureServer,
) -> Result<hermes_store::TaskRecord, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("cannot make a temporary data dir: {e}"))?;
    let settings = eval_settings(req.config, fixtures.base());
    let mut config = Config::from_settings(settings, dir.path().to_path_buf());
    config.manifests_dir = req.config.manifests_dir.clone();
    // The person's settings file, so that a model error names the file to change.
    config.source = req.config.source.clone();
    let tools = eval_tools(fixtures.base()).map_err(|e| e.to_string())?;
    let options = BuildOptions {
        model_retry: req.model_retry,
        extra_tools: tools,
        ..Default::default()
    };
    let app = App::build_with(config, JobExecution::Direct, options)
        .await
        .map_err(|e| format!("cannot build the agent for the case: {e}"))?;
    let outcome = drive(&app, case, profile).await;
    app.mcp.stop().await;
    app.store.close().await;
    outcome
}

async fn drive(
    app: &App,
    case: &EvalCase,
    profile: &str,
) -> Result<hermes_store::TaskRecord, String> {
    if !case.fixtures.remember.is_empty() {
        let memory = app
            .memory
            .as_ref()
            .ok_or("the case remembers facts, but long-term memory could not be opened")?;
        for fact in &case.fixtures.remember {
            memory
                .remember(fact, &[], "eval")
                .await
                .map_err(|e| format!("cannot remember the fixture fact: {e}"))?;
        }
    }
    if !app.config.settings.mcp.servers.is_empty() {
        app.mcp.start();
        app.mcp.wait_started(crate::mcp::RUN_START_WAIT).await;
    }
    let submit = Submit::new(case.task.clone(), Origin::Cli, Some(profile.to_string()));
    let claimed = app
        .agent
        .create_claimed(submit)
        .await
        .map_err(|e| e.to_string())?;
    let opts = RunOptions {
        restrict: case.allow.clone(),
        ..Default::default()
    };
    let done = app
        .agent
        .run_claimed(claimed, opts)
        .await
        .map_err(|e| e.to_string())?;
    app.store
        .tasks()
        .record(&done.id)
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("task {} disappeared from the throwaway store", done.id))
}

/// The person's settings, adjusted for a throwaway run: the fixture page on loopback may be
/// fetched, the `eval` channel and the `eval_helper` agent exist.
fn eval_settings(config: &Config, fixtures: &str) -> Settings {
    let mut s = config.settings.clone();
    s.tools.web_fetch.allow_private = true;
    s.storage.data_dir = String::new();
    // The throwaway data dir's own SQLite, not the person's database.
    s.storage.url = String::new();
    s.notify.webhooks.insert(
        "eval".into(),
        WebhookSettings {
            url: format!("{fixtures}/eval/hook"),
            secret: String::new(),
        },
    );
    s.agents.entry(HELPER_AGENT.into()).or_insert(SubAgent {
        description: "Answers general-knowledge and arithmetic questions in one short sentence."
            .into(),
        profile: String::new(),
        tools: Vec::new(),
        system_prompt: "Answer the question in one short sentence.".into(),
        timeout_s: 0,
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A case runs in a throwaway store: never in the person's PostgreSQL database, whose
    /// `storage.url` the settings carry.
    #[test]
    fn a_case_never_runs_on_the_configured_database() {
        let mut settings = Settings::default();
        settings.storage.url = "postgres://me@db.example.org/hermes".into();
        settings.storage.data_dir = "/srv/hermes".into();
        let config = Config::from_settings(settings, std::path::PathBuf::from("/srv/hermes"));
        let s = eval_settings(&config, "http://127.0.0.1:1");
        assert_eq!(
            (s.storage.url.as_str(), s.storage.data_dir.as_str()),
            ("", "")
        );
    }
}
