//! The daemon's watch over its models: each profile's identity checked at start, every
//! `model.identity_check_s`, and at once when a reply reports another model id; each one seen
//! recorded; one that no passing eval verified, where the profile answered with another before,
//! is a change — recorded once, and acted on by `model.on_change`:
//! `warn` tells the `model.on_change_notify` channels (and the dashboard and doctor show a
//! badge), `eval` also runs the regression cases on the new model in the background and tells
//! their verdict, `hold` also pauses the jobs that use the profile (reason `model_changed`)
//! until that eval, a later one, or a person resumes them.
//!
//! Owns: when identities are checked, what counts as a change, and what is done about it.
//! Must not: check more often than asked (a greedy check costs a model call), or act on a
//! change twice.

use super::runner::{self, EvalRequest};
use super::suite;
use crate::app::App;
use hermes_config::OnChange;
use hermes_engine::llm::Identity;
use hermes_store::{EvalTrigger, ModelAction, ModelChange, NewModelChange, NewNotice, PauseReason};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// With checks off, the loop still wakes this often to see whether it was asked for one.
const IDLE_WAKE: Duration = Duration::from_secs(3600);

/// The watch: cheap to clone; one per daemon.
#[derive(Clone)]
pub struct ModelWatch {
    app: App,
    /// Profiles whose background eval is running: a second change waits for its verdict.
    evaluating: Arc<Mutex<BTreeSet<String>>>,
    tracker: TaskTracker,
    /// The daemon's stop: the loop and background evals end on it.
    stop: CancellationToken,
}

impl ModelWatch {
    /// The watch over `app`'s profiles; it and its background evals run on `tracker` until
    /// `stop`.
    pub fn new(app: &App, tracker: &TaskTracker, stop: CancellationToken) -> ModelWatch {
        ModelWatch {
            app: app.clone(),
            evaluating: Arc::default(),
            tracker: tracker.clone(),
            stop,
        }
    }

    /// Start the watch's loop.
    pub fn spawn(&self) {
        let watch = self.clone();
        self.tracker.spawn(async move { watch.run().await });
    }

    async fn run(self) {
        let stop = self.stop.clone();
        let s = &self.app.config.settings.model;
        let every = Duration::from_secs(s.identity_check_s);
        let gateway = self.app.agent.gateway().clone();
        let mut checked: BTreeMap<String, Instant> = BTreeMap::new();
        loop {
            // Arm the wake-up before taking the list, so a request between the two is kept.
            let wanted = gateway.identity_wanted().notified();
            tokio::pin!(wanted);
            wanted.as_mut().enable();
            let now = Instant::now();
            let mut due: BTreeSet<String> = gateway.take_wanted().into_iter().collect();
            if !every.is_zero() {
                due.extend(
                    s.profiles
                        .keys()
                        .filter(|p| checked.get(*p).is_none_or(|t| now >= *t + every))
                        .cloned(),
                );
            }
            for profile in due {
                if stop.is_cancelled() {
                    return;
                }
                checked.insert(profile.clone(), Instant::now());
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = self.check(&profile) => {}
                }
            }
            let next = checked
                .values()
                .map(|t| *t + every)
                .min()
                .filter(|_| !every.is_zero())
                .unwrap_or_else(|| Instant::now() + IDLE_WAKE);
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = &mut wanted => {}
                _ = tokio::time::sleep_until(next) => {}
            }
        }
    }

    /// Ask the server, and act on what it says.
    async fn check(&self, profile: &str) {
        match self.app.agent.gateway().check_identity(profile).await {
            Ok(Some(identity)) => {
                if let Err(e) = self.observe(profile, &identity).await {
                    tracing::warn!(profile, error = %e, "cannot record the model's identity");
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::info!(profile, error = %e, "cannot tell which model the profile serves now");
            }
        }
    }

    /// `profile` was seen serving `identity`: recorded; a change acted on once. The change,
    /// when this sighting was one.
    pub async fn observe(
        &self,
        profile: &str,
        identity: &Identity,
    ) -> Result<Option<ModelChange>, hermes_store::StoreError> {
        let store = &self.app.store;
        let key = identity.key();
        let before = store.models().status(profile).await?;
        let known = store.models().seen_identity(profile, &key).await?;
        store
            .models()
            .note_identity(profile, &key, identity.source())
            .await?;
        if known.is_some_and(|k| k.verified_at.is_some()) {
            return Ok(None);
        }
        let (old, old_verified) = match (&before.verified, &before.current) {
            (Some(v), _) => (v.identity.clone(), true),
            (None, Some(c)) => (c.identity.clone(), false),
            // The first identity ever seen is where the record starts, not a change.
            (None, None) => return Ok(None),
        };
        if old == key {
            return Ok(None);
        }
        let action = match self.app.config.settings.model.on_change {
            OnChange::Warn => ModelAction::Warn,
            OnChange::Eval => ModelAction::Eval,
            OnChange::Hold => ModelAction::Hold,
        };
        // A change within the window of the last one told is that one's flap going on: recorded
        // as part of it, and nothing told, held or run (a server reporting another id on every
        // reply would otherwise send a notice and start an eval for each).
        // A model verified since the change was told settled it: what comes after is news.
        let told = store.models().last_told_change(profile).await?;
        let window = flap_window(self.app.config.settings.model.identity_check_s);
        let settled_at = before.verified.as_ref().and_then(|v| v.verified_at);
        let within = told.as_ref().filter(|c| {
            let young = (hermes_store::now() - c.seen_at)
                .to_std()
                .is_ok_and(|age| age < window);
            young && settled_at.is_none_or(|at| at < c.seen_at)
        });
        let new = NewModelChange {
            profile: profile.to_string(),
            old_identity: old,
            new_identity: key,
            old_verified,
            action,
            flap_of: within.map(|c| c.id),
        };
        let Some(change) = store.models().record_change(&new).await? else {
            return Ok(None);
        };
        if let Some(head) = within {
            tracing::info!(profile, from = %change.old_identity, to = %change.new_identity, told = head.id, "the model behind a profile changed again: part of the flap already told");
            return Ok(Some(change));
        }
        // The last change told had a flap: this notice says the profile keeps changing.
        let flapped = match &told {
            Some(head) => flap_of(store, head).await?,
            None => None,
        };
        tracing::warn!(profile, from = %change.old_identity, to = %change.new_identity, action = %action, "the model behind a profile changed");
        let paused = match action {
            ModelAction::Hold => self.hold(profile).await,
            _ => Vec::new(),
        };
        store
            .models()
            .set_change_outcome(change.id, &paused, None)
            .await?;
        let change = ModelChange {
            paused_jobs: paused,
            ..change
        };
        self.tell(&change_notice(&change, flapped.as_ref())).await;
        if action != ModelAction::Warn {
            self.evaluate(change.clone());
        }
        Ok(Some(change))
    }

    /// Pause the running jobs that use `profile`; their ids.
    async fn hold(&self, profile: &str) -> Vec<String> {
        let default = &self.app.config.settings.model.default_profile;
        let jobs = match self
            .app
            .store
            .jobs()
            .on_profile(profile, profile == default)
            .await
        {
            Ok(jobs) => jobs,
            Err(e) => {
                tracing::error!(profile, error = %e, "cannot find the jobs to hold");
                return Vec::new();
            }
        };
        let mut paused = Vec::new();
        for job in jobs {
            match self
                .app
                .scheduler
                .pause_for(&job.id, PauseReason::ModelChanged)
                .await
            {
                Ok(_) => paused.push(job.id),
                Err(e) => tracing::error!(job = %job.id, error = %e, "cannot hold the job"),
            }
        }
        paused
    }

    /// Run the suite on the profile in the background and tell its verdict.
    fn evaluate(&self, change: ModelChange) {
        if !hermes_store::util::lock(&self.evaluating).insert(change.profile.clone()) {
            tracing::info!(profile = %change.profile, "an eval of this profile is running already");
            return;
        }
        let watch = self.clone();
        self.tracker.spawn(async move {
            let verdict = tokio::select! {
                v = watch.eval_run(&change) => Some(v),
                // Stopping: the run stays recorded unfinished; a later change or a person
                // runs it again.
                _ = watch.stop.cancelled() => None,
            };
            hermes_store::util::lock(&watch.evaluating).remove(&change.profile);
            if let Some(mut verdict) = verdict {
                // The changes that came while it ran were told in no notice of their own.
                match flap_of(&watch.app.store, &change).await {
                    Ok(Some(flap)) => verdict.1.push_str(&format!(
                        "\n\nMeanwhile the profile kept changing model: it answered alternately with {} ({} changes, told in this notice and the one before); the verdict is about whichever answered each case.",
                        alternately(&flap),
                        flap.changes
                    )),
                    Ok(None) => {}
                    Err(e) => tracing::warn!(error = %e, "cannot read the flap of a model change"),
                }
                watch.tell(&verdict).await;
            }
        });
    }

    async fn eval_run(&self, change: &ModelChange) -> (String, String) {
        let app = &self.app;
        let cases = match suite::load(app.config.evals_dir.as_deref()) {
            Ok(cases) => cases,
            Err(e) => return eval_failed(change, &e.to_string()),
        };
        let request = EvalRequest {
            config: &app.config,
            store: &app.store,
            gateway: app.agent.gateway(),
            profile: Some(change.profile.clone()),
            // A case bound to another profile says nothing about this one.
            cases: cases
                .into_iter()
                .filter(|c| c.profile.as_deref().is_none_or(|p| p == change.profile))
                .collect(),
            narrowed: false,
            trigger: EvalTrigger::ModelChange,
            scheduler: Some(&app.scheduler),
            model_retry: None,
        };
        match runner::run(request, &|_| {}).await {
            Ok(report) => {
                if let Err(e) = app
                    .store
                    .models()
                    .set_change_outcome(change.id, &change.paused_jobs, Some(report.run.id))
                    .await
                {
                    tracing::warn!(error = %e, "cannot link the eval run to its model change");
                }
                verdict_notice(change, &report)
            }
            Err(e) => eval_failed(change, &e.to_string()),
        }
    }

    /// One notice on each `model.on_change_notify` channel.
    async fn tell(&self, (title, body): &(String, String)) {
        for channel in &self.app.config.settings.model.on_change_notify {
            let notice = NewNotice {
                channel: channel.clone(),
                title: title.clone(),
                body: body.clone(),
                task_id: None,
                job_id: None,
                run_id: None,
                ..NewNotice::default()
            };
            if let Err(e) = self.app.notifier.enqueue(notice).await {
                tracing::error!(channel, error = %e, "cannot queue the model-change notice");
            }
        }
    }
}

/// How long after a change is told further changes of the same profile are part of its flap:
/// `model.identity_check_s`, or an hour when checks are off (or more often than that).
fn flap_window(identity_check_s: u64) -> Duration {
    Duration::from_secs(identity_check_s.max(3600))
}

/// The changes recorded as one flap since the last change told.
struct Flap {
    since: chrono::DateTime<chrono::Utc>,
    /// The told change and those recorded as part of it.
    changes: usize,
    /// Every identity seen in it, in the order first seen.
    identities: Vec<String>,
}

/// The flap recorded as part of the told change `head`: `None` when it has none.
async fn flap_of(
    store: &hermes_store::Store,
    head: &ModelChange,
) -> Result<Option<Flap>, hermes_store::StoreError> {
    let members = store.models().flap_changes(head.id).await?;
    if members.is_empty() {
        return Ok(None);
    }
    let mut seen = vec![head.old_identity.clone(), head.new_identity.clone()];
    for m in &members {
        for id in [&m.old_identity, &m.new_identity] {
            if !seen.contains(id) {
                seen.push(id.clone());
            }
        }
    }
    Ok(Some(Flap {
        since: head.seen_at,
        changes: members.len() + 1,
        identities: seen,
    }))
}

/// The flap's identities as words: `**A**, **B** and **C**`.
fn alternately(flap: &Flap) -> String {
    let ids: Vec<String> = flap.identities.iter().map(|i| format!("**{i}**")).collect();
    match ids.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        Some((last, _)) => last.clone(),
        None => String::new(),
    }
}

fn change_notice(change: &ModelChange, flapped: Option<&Flap>) -> (String, String) {
    let paused = &change.paused_jobs;
    let title = format!("Model changed: profile {}", change.profile);
    let was = if change.old_verified {
        "its verified model"
    } else {
        "the model it answered with before (none was verified yet)"
    };
    let mut body = match flapped {
        Some(flap) => {
            format!(
                "Profile **{}** keeps changing model: since {} it answers alternately with {} ({} changes, told once). It now answers with **{}**.\n\nBefore: **{}** — {was}.\n\n",
                change.profile,
                flap.since.format("%Y-%m-%d %H:%M UTC"),
                alternately(flap),
                flap.changes,
                change.new_identity,
                change.old_identity
            )
        }
        None => format!(
            "Profile **{}** now answers with **{}**.\n\nBefore: **{}** — {was}.\n\n",
            change.profile, change.new_identity, change.old_identity
        ),
    };
    match change.action {
        ModelAction::Warn => body.push_str(&format!(
            "Nothing was paused (model.on_change: warn). Run `hermes-agent eval --profile {}` to check the new model against the regression cases; a passing run verifies it.",
            change.profile
        )),
        ModelAction::Eval => body.push_str(
            "The regression cases are running against it now (model.on_change: eval); their verdict follows in another notice.",
        ),
        ModelAction::Hold => {
            if paused.is_empty() {
                body.push_str("No job uses this profile, so none was paused (model.on_change: hold).");
            } else {
                body.push_str(&format!(
                    "Paused until the new model passes the regression cases (model.on_change: hold): {}. They resume on their own when it passes, or when you resume them.",
                    paused.join(", ")
                ));
            }
            body.push_str(" The regression cases are running against it now.");
        }
    }
    (title, body)
}

fn verdict_notice(change: &ModelChange, report: &runner::EvalReport) -> (String, String) {
    let run = &report.run;
    let failed: Vec<String> = run
        .results
        .iter()
        .filter_map(|r| {
            r.why
                .as_ref()
                .map(|why| format!("- {}: {why}", r.case_name))
        })
        .collect();
    if report.all_passed() {
        let resumed = if report.resumed.is_empty() {
            String::new()
        } else {
            format!(" Resumed: {}.", report.resumed.join(", "))
        };
        (
            format!("Model verified: profile {}", change.profile),
            format!(
                "All {} regression cases passed on **{}** (eval run {}): it is verified.{resumed}",
                run.passed, change.new_identity, run.id
            ),
        )
    } else {
        let held = if change.paused_jobs.is_empty() {
            String::new()
        } else {
            format!(
                "\n\nStill paused: {}. Resume them yourself if the new model suits them.",
                change.paused_jobs.join(", ")
            )
        };
        (
            format!("Model not verified: profile {}", change.profile),
            format!(
                "{} of {} regression cases failed on **{}** (eval run {}):\n\n{}{held}",
                run.failed,
                run.passed + run.failed,
                change.new_identity,
                run.id,
                failed.join("\n")
            ),
        )
    }
}

fn eval_failed(change: &ModelChange, why: &str) -> (String, String) {
    (
        format!("Model not verified: profile {}", change.profile),
        format!(
            "The regression cases could not run against **{}**: {why}",
            change.new_identity
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(old: &str, new: &str) -> ModelChange {
        ModelChange {
            id: 7,
            profile: "fast".into(),
            old_identity: old.into(),
            new_identity: new.into(),
            old_verified: false,
            action: ModelAction::Eval,
            paused_jobs: Vec::new(),
            eval_run_id: None,
            seen_at: hermes_store::now(),
            flap_of: None,
        }
    }

    #[test]
    fn a_change_after_a_flap_says_the_profile_answers_alternately() {
        let flap = Flap {
            since: hermes_store::now(),
            changes: 9,
            identities: vec!["A".into(), "B".into()],
        };
        let (_, body) = change_notice(&change("B", "A"), Some(&flap));
        assert!(
            body.contains("answers alternately with **A** and **B** (9 changes, told once)"),
            "{body}"
        );
        let (_, plain) = change_notice(&change("A", "B"), None);
        assert!(
            plain.starts_with("Profile **fast** now answers with **B**"),
            "{plain}"
        );
        assert!(!plain.contains("alternately"), "{plain}");
    }

    #[test]
    fn the_flap_window_is_the_check_interval_and_at_least_an_hour() {
        assert_eq!(flap_window(0), Duration::from_secs(3600));
        assert_eq!(flap_window(60), Duration::from_secs(3600));
        assert_eq!(flap_window(6 * 3600), Duration::from_secs(6 * 3600));
    }
}
