//! Models change under you, against real servers on loopback: fallback chains (a primary that
//! fails, one killed in the middle of a task, a refusal that must stay final), and the daemon's
//! watch noticing a server that starts answering as another model — recorded once, acted on by
//! `model.on_change: hold` — until an eval run verifies the new model and releases the jobs.

use crate::common;
use futures::future::BoxFuture;
use hermes_config::{ModelSettings, OnChange, Profile, WebhookSettings};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::llm::{Gateway, LlmError, Message};
use hermes_engine::scheduler::JobRequest;
use hermes_engine::tools::{Tool, ToolContext, ToolError, ToolInfo};
use hermes_store::util::Backoff;
use hermes_store::util::RetryPolicy;
use hermes_store::{EvalVerdict, ModelAction, NoticeFilter, Origin, PauseReason, StepKind, Store};
use hermes_surfaces::eval::ModelWatch;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

fn profile(base_url: &str, model: &str, key: &str, fallback: &[&str]) -> Profile {
    Profile {
        base_url: base_url.into(),
        api_key: key.into(),
        model: model.into(),
        timeout_s: 5,
        fallback: fallback.iter().map(|s| s.to_string()).collect(),
        ..Profile::default()
    }
}

fn quick_retry() -> RetryPolicy {
    RetryPolicy {
        max_retries: 1,
        backoff: Backoff::new(Duration::from_millis(1), Duration::from_millis(5)),
    }
}

/// `fast` (on `primary`, falling back to `pro`) and `pro` (on `backup`, with its own model
/// name and key).
fn chain(primary: &str, backup: &str) -> ModelSettings {
    let mut s = ModelSettings::default();
    s.profiles.clear();
    s.profiles
        .insert("fast".into(), profile(primary, "primary-m", "", &["pro"]));
    s.profiles.insert(
        "pro".into(),
        profile(backup, "backup-m", "sk-backup-1", &[]),
    );
    s
}

fn overloaded() -> Reply {
    Reply::Status {
        status: 503,
        headers: vec![],
        body: r#"{"error": {"message": "overloaded"}}"#.into(),
    }
}

/// Poll `check` until it holds, for at most 20 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[tokio::test]
async fn a_failing_primary_falls_back_to_the_next_profile_as_itself_then_cools_down() {
    let primary = ScriptedModel::start_with(|_| overloaded()).await;
    let backup = ScriptedModel::start_with(|_| Reply::text("from the backup")).await;
    let gw = Gateway::new(&chain(&primary.base_url(), &backup.base_url()))
        .expect("gateway")
        .with_retry(quick_retry());

    let reply = gw
        .chat("fast", &[Message::user("hello")], &[])
        .await
        .expect("the fallback answers");
    assert_eq!(reply.content, "from the backup");
    assert_eq!(reply.served.profile, "pro");
    assert_eq!(reply.served.requested, "backup-m");
    assert!(
        reply.notes.iter().any(|n| n.contains("'fast' failed")),
        "{:?}",
        reply.notes
    );
    // The fallback is called with its own model name and key, never the primary's.
    let sent = backup.requests();
    assert_eq!(sent[0]["model"], "backup-m");
    assert_eq!(
        backup.authorizations()[0].as_deref(),
        Some("Bearer sk-backup-1")
    );
    let asked_primary = primary.request_count();
    assert_eq!(asked_primary, 2, "the primary's own retries come first");

    // Within model.fallback_cooldown_s the failed primary is not asked first again.
    let reply = gw
        .chat("fast", &[Message::user("again")], &[])
        .await
        .expect("the fallback answers");
    assert_eq!(reply.served.profile, "pro");
    assert_eq!(primary.request_count(), asked_primary);
}

#[tokio::test]
async fn a_refusal_is_final_and_is_not_sent_to_the_fallback() {
    let primary = ScriptedModel::start_with(|_| Reply::Status {
        status: 400,
        headers: vec![],
        body: r#"{"error": {"code": "content_policy_violation", "message": "refused"}}"#.into(),
    })
    .await;
    let backup = ScriptedModel::start_with(|_| Reply::text("should not be asked")).await;
    let gw = Gateway::new(&chain(&primary.base_url(), &backup.base_url()))
        .expect("gateway")
        .with_retry(quick_retry());
    let err = gw
        .chat("fast", &[Message::user("hello")], &[])
        .await
        .expect_err("a refusal is the answer");
    assert!(matches!(err, LlmError::ContentRefused { .. }), "{err}");
    assert_eq!(backup.request_count(), 0);
}

/// A tool that takes the primary model server down when the model calls it: the primary dies
/// between two calls of the same task.
struct PullPlug {
    info: ToolInfo,
    primary: Mutex<Option<ScriptedModel>>,
}

impl Tool for PullPlug {
    fn info(&self) -> &ToolInfo {
        &self.info
    }
    fn call<'a>(&'a self, _: Value, _: &'a ToolContext) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let primary = self.primary.lock().ok().and_then(|mut p| p.take());
            if let Some(p) = primary {
                p.stop().await;
            }
            Ok(json!({"done": true}))
        })
    }
}

#[tokio::test]
async fn a_primary_killed_mid_task_hands_the_rest_of_the_task_to_the_fallback() {
    let primary = ScriptedModel::start(vec![Reply::tool_calls(&[("pull_plug", json!({}))])]).await;
    let backup = ScriptedModel::start_with(|_| Reply::text("finished by the backup")).await;
    primary.report_model("primary-m");
    backup.report_model("backup-m");
    let mut settings = common::settings(&primary.base_url());
    settings.model = chain(&primary.base_url(), &backup.base_url());
    settings.model.default_profile = "fast".into();
    let plug = Arc::new(PullPlug {
        info: ToolInfo::new(
            "pull_plug",
            "Stops the primary model server.",
            json!({"type": "object", "properties": {}}),
        ),
        primary: Mutex::new(Some(primary)),
    });
    let t = common::app(settings, vec![plug as Arc<dyn Tool>]).await;
    let record = common::run_task(&t, "pull the plug, then answer").await;

    assert_eq!(
        record.task.answer.as_deref(),
        Some("finished by the backup"),
        "{record:?}"
    );
    let models: Vec<(&str, Option<&str>)> = record
        .steps
        .iter()
        .filter(|s| s.row.kind == StepKind::Model)
        .map(|s| (s.row.name.as_str(), s.row.model.as_deref()))
        .collect();
    // Each model row names the profile that answered, and the model its server reported.
    assert_eq!(
        models,
        [("fast", Some("primary-m")), ("pro", Some("backup-m"))]
    );
    assert_eq!(backup.requests()[0]["model"], "backup-m");
}

/// The trace row of a task's first model call.
fn first_model_row(record: &hermes_store::TaskRecord) -> &hermes_store::Step {
    record
        .steps
        .iter()
        .find(|s| s.row.kind == StepKind::Model)
        .expect("a model row")
}

/// The identity of a profile as the store has it now.
async fn current(store: &Store, profile: &str) -> Option<String> {
    let status = store.models().status(profile).await.expect("status");
    status.current.map(|c| c.identity)
}

#[tokio::test]
async fn a_server_answering_as_another_model_holds_the_jobs_until_an_eval_passes() {
    // A llama-cpp-python-like server: no /props, no digest, so identity is behavioural.
    let version: Arc<Mutex<&'static str>> = Arc::new(Mutex::new("v1"));
    let v = version.clone();
    let model = ScriptedModel::start_with(move |req| {
        let task = common::task_text(req);
        let v = *v.lock().expect("version");
        if task.contains("capital of France") {
            Reply::text("Paris.")
        } else {
            Reply::text(&format!("{v} says: {task}"))
        }
    })
    .await;
    model.serve_model_file(None);
    let (hook, _received) = common::webhook_receiver().await;
    let mut settings = common::settings(&model.base_url());
    settings.model.identity_check_s = 3600;
    settings.model.on_change = OnChange::Hold;
    settings.model.on_change_notify = vec!["ops".into()];
    settings.notify.webhooks.insert(
        "ops".into(),
        WebhookSettings {
            url: hook,
            secret: String::new(),
        },
    );
    let t = common::app(settings, vec![]).await;
    let app = &t.app;
    let job = app
        .scheduler
        .add(
            JobRequest {
                task: "summarise the news".into(),
                schedule: "every 6h".into(),
                ..JobRequest::default()
            },
            Origin::Cli,
        )
        .await
        .expect("job");

    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    let watch = ModelWatch::new(app, &tracker, stop.clone());
    watch.spawn();
    eventually("the identity checked at start", || async {
        current(&app.store, "fast").await.is_some()
    })
    .await;
    let first = current(&app.store, "fast").await.expect("first identity");
    assert!(first.contains("greedy #"), "{first}");

    // The server is upgraded behind the same name: it now reports another model id.
    *version.lock().expect("version") = "v2";
    model.report_model("smollm2-v2");
    let record = common::run_task(&t, "hello").await;
    let step = first_model_row(&record);
    assert_eq!(step.row.model.as_deref(), Some("smollm2-v2"));

    eventually("the job held for the model change", || async {
        let j = app.store.jobs().get(&job.id).await.expect("job");
        j.pause_reason == Some(PauseReason::ModelChanged)
    })
    .await;
    let status = app.store.models().status("fast").await.expect("status");
    let change = status.change.clone().expect("the change is recorded");
    assert_eq!(change.old_identity, first);
    assert!(change.new_identity.starts_with("smollm2-v2"), "{change:?}");
    assert_eq!(change.action, ModelAction::Hold);
    assert_eq!(change.paused_jobs, std::slice::from_ref(&job.id));
    assert!(status.unverified_change().is_some());

    // Seen again, it is not a second change.
    let again = app
        .agent
        .gateway()
        .check_identity("fast")
        .await
        .expect("check")
        .expect("an identity");
    assert!(
        watch
            .observe("fast", &again)
            .await
            .expect("observe")
            .is_none()
    );
    let notices = app
        .store
        .outbox()
        .list(&NoticeFilter::oldest_first())
        .await
        .expect("notices");
    let changed: Vec<_> = notices
        .iter()
        .filter(|n| n.queued.title == "Model changed: profile fast")
        .collect();
    assert_eq!(changed.len(), 1, "{notices:?}");
    assert_eq!(changed[0].queued.channel, "ops");
    assert!(
        changed[0].queued.body.contains(&job.id),
        "{}",
        changed[0].queued.body
    );

    // The background eval (model.on_change: hold) runs the whole suite: this model only knows
    // capitals, so it fails and the job stays held.
    eventually("the background eval's verdict", || async {
        let n = app
            .store
            .outbox()
            .list(&NoticeFilter::oldest_first())
            .await
            .expect("notices");
        n.iter()
            .any(|n| n.queued.title == "Model not verified: profile fast")
    })
    .await;
    let j = app.store.jobs().get(&job.id).await.expect("job");
    assert_eq!(j.pause_reason, Some(PauseReason::ModelChanged));

    // A run whose every case passes verifies the model and releases the job.
    let report = common::run_evals(
        app,
        Some("fast"),
        &["plain-answer"],
        Some(common::fast_retry()),
        &|_| {},
    )
    .await;
    assert!(report.all_passed(), "{:?}", report.run.results);
    assert_eq!(report.run.results[0].verdict, EvalVerdict::Passed);
    assert_eq!(report.resumed, std::slice::from_ref(&job.id));
    let j = app.store.jobs().get(&job.id).await.expect("job");
    assert!(j.enabled && j.pause_reason.is_none(), "{j:?}");
    let status = app.store.models().status("fast").await.expect("status");
    assert!(status.unverified_change().is_none(), "{status:?}");
    assert_eq!(
        status.verified.map(|v| v.identity),
        current(&app.store, "fast").await
    );
    let runs = app.store.evals().runs(10).await.expect("runs");
    assert_eq!(
        runs.len(),
        2,
        "the background run and this one are recorded"
    );

    // Within the hour, a third model: the verification settled the change before, so this is
    // news of its own (told, the job held again), not that change's flap going on.
    *version.lock().expect("version") = "v3";
    model.report_model("smollm2-v3");
    common::run_task(&t, "hello again").await;
    eventually("the job held again", || async {
        let j = app.store.jobs().get(&job.id).await.expect("job");
        j.pause_reason == Some(PauseReason::ModelChanged)
    })
    .await;
    let status = app.store.models().status("fast").await.expect("status");
    let change = status.change.expect("the change is recorded");
    assert!(change.new_identity.starts_with("smollm2-v3"), "{change:?}");
    assert_eq!(change.flap_of, None, "{change:?}");
    assert_eq!(change.paused_jobs, std::slice::from_ref(&job.id));

    stop.cancel();
    tracker.close();
    tracker.wait().await;
}

#[tokio::test]
async fn with_checks_off_the_first_reply_after_a_restart_is_compared_with_the_verified_model() {
    let model = ScriptedModel::start_with(|req| {
        Reply::text(&format!("Paris, you asked: {}", common::task_text(req)))
    })
    .await;
    model.report_model("m-1");
    let mut settings = common::settings(&model.base_url());
    settings.model.identity_check_s = 0;
    let dir = tempfile::tempdir().expect("data dir");
    {
        let app = common::app_in(settings.clone(), vec![], dir.path()).await;
        let report = common::run_evals(
            &app,
            Some("fast"),
            &["plain-answer"],
            Some(common::fast_retry()),
            &|_| {},
        )
        .await;
        assert!(report.all_passed(), "{:?}", report.run.results);
        let status = app.store.models().status("fast").await.expect("status");
        assert_eq!(status.verified.map(|v| v.identity).as_deref(), Some("m-1"));
    }

    // The next process: the server now answers as another model under the same name.
    model.report_model("m-2");
    let app = common::app_in(settings, vec![], dir.path()).await;
    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    ModelWatch::new(&app, &tracker, stop.clone()).spawn();
    let task = app
        .agent
        .create(hermes_engine::agent::Submit {
            task: "hello".into(),
            origin: Origin::Cli,
            ..Default::default()
        })
        .await
        .expect("task");
    app.agent
        .execute(&task.id, Default::default())
        .await
        .expect("ran");
    eventually("the change from the verified model recorded", || async {
        let status = app.store.models().status("fast").await.expect("status");
        status
            .unverified_change()
            .is_some_and(|c| c.old_identity == "m-1" && c.new_identity == "m-2")
    })
    .await;
    stop.cancel();
    tracker.close();
    tracker.wait().await;
}

#[tokio::test]
async fn a_server_reporting_another_model_id_on_every_reply_is_one_notice_and_one_eval() {
    // Every reply names another model (m-1, m-2, …), as a load balancer over mismatched
    // replicas does; identities are the reported ids (identity_check_s: 0).
    let replies = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let n = replies.clone();
    let model = ScriptedModel::start_with(move |req| {
        let i = n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut reply = Reply::text(&format!("answer to: {}", common::task_text(req)));
        if let Reply::Body(body) = &mut reply {
            body["model"] = json!(format!("m-{i}"));
        }
        reply
    })
    .await;
    let (hook, _received) = common::webhook_receiver().await;
    let mut settings = common::settings(&model.base_url());
    settings.model.identity_check_s = 0;
    settings.model.on_change = OnChange::Eval;
    settings.model.on_change_notify = vec!["ops".into()];
    settings.notify.webhooks.insert(
        "ops".into(),
        WebhookSettings {
            url: hook,
            secret: String::new(),
        },
    );
    let t = common::app(settings, vec![]).await;
    let app = &t.app;
    let tracker = TaskTracker::new();
    let stop = CancellationToken::new();
    let watch = ModelWatch::new(app, &tracker, stop.clone());
    watch.spawn();

    // Each task's reply reports a new id; the watch sees each (the first one it sees is where
    // the record starts) and records every later one as a change.
    // Changes recorded: the ones told (one notice each) and those recorded as their flap.
    let changes = || async {
        let flap = match app
            .store
            .models()
            .last_told_change("fast")
            .await
            .expect("changes")
        {
            Some(c) => app
                .store
                .models()
                .flap_changes(c.id)
                .await
                .expect("flap")
                .len(),
            None => 0,
        };
        let notices = app
            .store
            .outbox()
            .list(&NoticeFilter::oldest_first())
            .await
            .expect("notices");
        let told = notices
            .iter()
            .filter(|n| n.queued.title == "Model changed: profile fast")
            .count();
        flap + told
    };
    for i in 0..7 {
        common::run_task(&t, &format!("task {i}")).await;
        if i >= 2 {
            eventually("the watch to record the change", || async {
                changes().await >= i - 1
            })
            .await;
        }
    }
    let changes = changes().await;
    assert!(changes >= 5, "{changes} changes recorded");
    let told = app
        .store
        .models()
        .last_told_change("fast")
        .await
        .expect("changes")
        .expect("a change told");
    let flap = app
        .store
        .models()
        .flap_changes(told.id)
        .await
        .expect("flap");
    assert!(flap.iter().all(|c| c.flap_of == Some(told.id)), "{flap:?}");

    // One eval for the whole flap, and its verdict: then the notices are all there.
    eventually("the eval's verdict", || async {
        let n = app
            .store
            .outbox()
            .list(&NoticeFilter::oldest_first())
            .await
            .expect("notices");
        n.iter().any(|n| {
            n.queued.title.starts_with("Model verified")
                || n.queued.title.starts_with("Model not verified")
        })
    })
    .await;
    let notices = app
        .store
        .outbox()
        .list(&NoticeFilter::oldest_first())
        .await
        .expect("notices");
    let titles: Vec<&str> = notices.iter().map(|n| n.queued.title.as_str()).collect();
    let changed = titles
        .iter()
        .filter(|t| **t == "Model changed: profile fast")
        .count();
    assert_eq!(changed, 1, "{titles:?}");
    let runs = app.store.evals().runs(100).await.expect("eval runs");
    assert_eq!(runs.len(), 1, "{runs:?}");
    // The verdict tells the flap that came while the eval ran, in no notice of its own.
    let verdict = notices
        .iter()
        .find(|n| n.queued.title.contains("erified: profile fast"))
        .expect("the verdict");
    assert!(
        verdict
            .queued
            .body
            .contains("it answered alternately with **m-"),
        "{}",
        verdict.queued.body
    );
    stop.cancel();
    tracker.close();
    tracker.wait().await;
}

/// An Ollama-like server: the identity is the digest `/api/tags` lists for the profile's model,
/// so weights swapped under the same name are one change, told by the digest; the trace keeps
/// the `system_fingerprint` each reply carried.
#[tokio::test]
async fn an_ollama_server_whose_weights_change_under_one_name_is_told_by_its_digest() {
    let model = ScriptedModel::start_with(|req| {
        Reply::text(&format!("answer to: {}", common::task_text(req)))
    })
    .await;
    let mut settings = common::settings(&model.base_url());
    settings.model.identity_check_s = 3600;
    settings.model.on_change = OnChange::Warn;
    let name = settings.model.profiles["fast"].model.clone();
    model.serve_digest(Some((&name, "sha256:aaaaaaaaaaaaaaaaaaaaaaaa")));
    model.report_fingerprint(Some("fp_first"));
    let t = common::app(settings, vec![]).await;
    let app = &t.app;
    let tracker = TaskTracker::new();
    let watch = ModelWatch::new(app, &tracker, CancellationToken::new());
    let check = || async {
        app.agent
            .gateway()
            .check_identity("fast")
            .await
            .expect("check")
            .expect("an identity")
    };

    let first = check().await;
    assert_eq!(first.key(), format!("{name} · digest sha256:aaaaaaaaaaaa"));
    assert!(
        watch
            .observe("fast", &first)
            .await
            .expect("observe")
            .is_none()
    );
    let record = common::run_task(&t, "hello").await;
    let step = first_model_row(&record);
    assert_eq!(step.row.fingerprint.as_deref(), Some("fp_first"));
    assert_eq!(step.row.identity.as_deref(), Some(first.key().as_str()));

    // Pulled again under the same name: another digest, the same model id in every reply.
    model.serve_digest(Some((&name, "sha256:bbbbbbbbbbbbbbbbbbbbbbbb")));
    let second = check().await;
    let change = watch
        .observe("fast", &second)
        .await
        .expect("observe")
        .expect("the new digest is a change");
    assert_eq!(change.old_identity, first.key());
    assert_eq!(
        change.new_identity,
        format!("{name} · digest sha256:bbbbbbbbbbbb")
    );
    assert_eq!(change.action, ModelAction::Warn);
    // Checked again, the same digest is no second change.
    assert!(
        watch
            .observe("fast", &check().await)
            .await
            .expect("observe")
            .is_none()
    );
}
