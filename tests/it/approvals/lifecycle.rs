//! Approvals over a task's life, in process: a job's firing (and its person's
//! `pre_approved`), expiry (an answer after it refused), the one notice per request, cancelling
//! a waiting task.

use super::{PATIENCE, Pool, Ran, gated_settings, model};
use hermes_config::SubAgent;
use hermes_engine::agent::{ApprovalError, Decision};
use hermes_engine::llm::scripted::ScriptedModel;
use hermes_store::{ApprovalState, Origin, TaskState};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_firing_waits_unless_its_person_pre_approved_the_tool() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let p = Pool::start(gated_settings(&model.base_url()), &ran, 1).await;
    let sched = &p.app().scheduler;
    let plain = sched
        .add(
            hermes_engine::scheduler::JobRequest {
                task: "[send] the daily note".into(),
                schedule: "0 8 * * *".into(),
                ..Default::default()
            },
            Origin::Api,
        )
        .await
        .unwrap();
    let firing = {
        let sched = sched.clone();
        let id = plain.id.clone();
        tokio::spawn(async move { sched.run_now_wait(&id).await })
    };
    let open = loop {
        let open = p.open().await;
        if !open.is_empty() {
            break open;
        }
        assert!(!firing.is_finished(), "the firing ended without asking");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(ran.sends().is_empty());
    p.approve(&open[0].id).await;
    let run = tokio::time::timeout(PATIENCE, firing)
        .await
        .expect("the firing ends")
        .unwrap()
        .unwrap();
    assert_eq!(run.outcome, hermes_store::RunOutcome::Fired);
    assert_eq!(ran.sends().len(), 1);

    // The model cannot pre-approve: schedule_task offers no such field, and the scheduler
    // refuses it from a model; a person can.
    let offered = p.app().agent.registry().offered(None);
    let schedule = offered
        .iter()
        .find(|t| t.name == "schedule_task")
        .expect("schedule_task is offered");
    assert!(
        !schedule.parameters.to_string().contains("pre_approved"),
        "{}",
        schedule.parameters
    );
    let refused = sched
        .add(
            hermes_engine::scheduler::JobRequest {
                task: "[send] x".into(),
                schedule: "0 8 * * *".into(),
                pre_approved: vec!["send".into()],
                ..Default::default()
            },
            Origin::Model,
        )
        .await;
    assert!(refused.is_err());
    let trusted = sched
        .add(
            hermes_engine::scheduler::JobRequest {
                task: "[send] the trusted note".into(),
                schedule: "0 8 * * *".into(),
                pre_approved: vec!["se*".into()],
                ..Default::default()
            },
            Origin::Api,
        )
        .await
        .unwrap();
    let run = tokio::time::timeout(PATIENCE, sched.run_now_wait(&trusted.id))
        .await
        .expect("ends")
        .unwrap();
    assert_eq!(run.outcome, hermes_store::RunOutcome::Fired);
    assert_eq!(ran.sends().len(), 2);
    assert_eq!(p.open().await.len(), 0);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_request_expires_as_a_denial() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let mut s = gated_settings(&model.base_url());
    s.tools.approval_expire_s = 1;
    let p = Pool::start(s, &ran, 1).await;
    let held = p.submit("[send] tell bob").await;
    p.settled(&held.id).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        p.app().agent.approvals().expire_due().await.unwrap();
        if p.open().await.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let done = p.finished(&held.id).await;
    assert_eq!(done.state, TaskState::Succeeded);
    assert!(ran.sends().is_empty());
    let a = p.app().agent.approvals().of_task(&held.id).await.unwrap();
    assert_eq!(a[0].state, ApprovalState::Expired);
    assert_eq!(a[0].reason.as_deref(), Some("expired"));
    // The model hears that nobody answered, not that a person declined.
    let told = serde_json::to_string(&model.requests().last().unwrap()["messages"]).unwrap();
    assert!(told.contains("nobody answered the request"), "{told}");
    assert!(!told.contains("a person declined"), "{told}");
    p.stop().await;
}

/// No sweep runs here: the answer itself finds the request past its time, records it expired
/// and is refused; the task goes on without the call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_after_the_request_expired_is_refused_and_the_task_goes_on_without_the_call() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let mut s = gated_settings(&model.base_url());
    s.tools.approval_expire_s = 1;
    let p = Pool::start(s, &ran, 1).await;
    let held = p.submit("[send] tell bob").await;
    p.settled(&held.id).await;
    let approvals = p.app().agent.approvals();
    let request = approvals.of_task(&held.id).await.unwrap().remove(0);
    let wait = (request.expires_at - chrono::Utc::now())
        .to_std()
        .unwrap_or_default();
    assert!(wait < PATIENCE, "expires in {wait:?}");
    tokio::time::sleep(wait + Duration::from_millis(50)).await;

    match approvals
        .decide(&request.id, Decision::Approve, "api")
        .await
    {
        Err(ApprovalError::Expired { id, expires_at }) => {
            assert_eq!((id, expires_at), (request.id.clone(), request.expires_at));
        }
        other => panic!("an answer after the expiry was not refused: {other:?}"),
    }
    let done = p.finished(&held.id).await;
    assert_eq!(done.state, TaskState::Succeeded, "{done:?}");
    assert!(ran.sends().is_empty(), "the expired call ran");
    let a = approvals.get(&request.id).await.unwrap();
    assert_eq!(
        (a.state, a.reason.as_deref(), a.decided_by.as_deref()),
        (ApprovalState::Expired, Some("expired"), Some("expiry"))
    );
    let deny = Decision::Deny { reason: None };
    let again = approvals.decide(&request.id, deny, "api").await;
    assert!(
        matches!(again, Err(ApprovalError::Expired { .. })),
        "{again:?}"
    );
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_request_is_noticed_once_with_goal_tool_arguments_and_link_and_a_reply_can_find_it() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let mut s = gated_settings(&model.base_url());
    s.notify.webhooks.insert(
        "ops".into(),
        hermes_config::WebhookSettings {
            url: "http://127.0.0.1:9/hook".into(),
            secret: String::new(),
        },
    );
    s.server.public_url = "https://hermes.example.org".into();
    let mut unknown = s.clone();
    unknown.tools.approval_notify = vec!["pager".into()];
    let bad = unknown.validate().expect_err("an unknown channel");
    assert_eq!(bad.key, "tools.approval_notify");
    s.tools.approval_notify = vec!["ops".into()];
    s.validate().expect("valid");

    let p = Pool::start(s, &ran, 1).await;
    let held = p.submit("[send] tell bob the news").await;
    p.settled(&held.id).await;
    let open = p.open().await;
    let notices = p.app().store.outbox().for_task(&held.id).await.unwrap();
    assert_eq!(notices.len(), 1, "{notices:?}");
    let n = &notices[0];
    assert_eq!(n.queued.channel, "ops");
    assert_eq!(n.queued.title, "Approval needed: send");
    for part in [
        "tell bob the news",
        "Tool: send",
        "\"to\": \"bob\"",
        &format!("https://hermes.example.org/tasks/{}", held.id),
    ] {
        assert!(
            n.queued.body.contains(part),
            "{part} not in {}",
            n.queued.body
        );
    }
    // The inbox's way back from a reply to the request it answers.
    let found = p.app().agent.approvals().for_notice(n.id).await.unwrap();
    assert_eq!(found.map(|a| a.id), Some(open[0].id.clone()));
    // Decisions are not noticed.
    p.approve(&open[0].id).await;
    p.finished(&held.id).await;
    assert_eq!(
        p.app()
            .store
            .outbox()
            .for_task(&held.id)
            .await
            .unwrap()
            .len(),
        1
    );
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_waiting_task_closes_its_requests_and_those_of_its_sub_agents() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let mut s = gated_settings(&model.base_url());
    s.agents.insert(
        "mailer".into(),
        SubAgent {
            description: "Sends mail.".into(),
            tools: vec!["send".into()],
            profile: String::new(),
            system_prompt: String::new(),
            timeout_s: 0,
        },
    );
    let p = Pool::start(s, &ran, 1).await;
    let parent = p.submit("[delegate] have bob told").await;
    p.settled(&parent.id).await;
    let open = p.open().await;
    assert_eq!(open.len(), 1);
    let t = p.app().agent.cancel(&parent.id).await.unwrap();
    assert_eq!(t.state, TaskState::Cancelled);
    assert!(!t.waiting);
    let sub = p.app().store.tasks().get(&open[0].task_id).await.unwrap();
    assert_eq!(sub.state, TaskState::Cancelled, "{sub:?}");
    assert!(p.open().await.is_empty());
    let a = p.app().agent.approvals().get(&open[0].id).await.unwrap();
    assert_eq!(a.state, ApprovalState::Denied);
    let late = p
        .app()
        .agent
        .approvals()
        .decide(&open[0].id, Decision::Approve, "test")
        .await;
    assert!(late.is_err());
    assert!(ran.sends().is_empty());
    p.stop().await;
}
