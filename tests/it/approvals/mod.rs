//! Approvals end to end, in process: a tool that needs a person is never run before one
//! approves — held calls free their worker, approved calls run once with the approved
//! arguments, denied calls are never run and not asked again — whichever way the call comes
//! (a task, parallel calls, text tool mode, a sub-agent, a job). The daemon process (restart,
//! CLI) is in `process.rs`.

use crate::common;

use hermes_config::{Settings, SubAgent, ToolMode};
use hermes_engine::agent::{Decision, Submit};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::tools::{Tool, ToolInfo, tool_fn};
use hermes_store::{ApprovalState, Origin, StepKind, Task, TaskState};
use hermes_surfaces::app::App;
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

mod dashboard;
mod lifecycle;
pub(crate) mod process;

const PATIENCE: Duration = Duration::from_secs(20);

/// Calls of the gated `send` tool (arguments as run) and of the free `lookup` tool.
#[derive(Clone, Default)]
struct Ran {
    send: Arc<Mutex<Vec<Value>>>,
    lookup: Arc<Mutex<Vec<Value>>>,
}

impl Ran {
    fn sends(&self) -> Vec<Value> {
        self.send.lock().unwrap().clone()
    }
    fn lookups(&self) -> usize {
        self.lookup.lock().unwrap().len()
    }
}

fn tools(ran: &Ran) -> Vec<Arc<dyn Tool>> {
    let send_log = ran.send.clone();
    let send = tool_fn(
        ToolInfo::new(
            "send",
            "Send a message to someone outside.",
            json!({"type": "object", "properties": {"to": {"type": "string"}, "text": {"type": "string"}},
                   "required": ["to", "text"], "additionalProperties": false}),
        ),
        move |args: Value, _| {
            let log = send_log.clone();
            async move {
                log.lock().unwrap().push(args);
                Ok(json!({"sent": true}))
            }
        },
    );
    let lookup_log = ran.lookup.clone();
    let lookup = tool_fn(
        ToolInfo::new(
            "lookup",
            "Look something up.",
            json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"],
                   "additionalProperties": false}),
        ),
        move |args: Value, _| {
            let log = lookup_log.clone();
            async move {
                log.lock().unwrap().push(args);
                Ok(json!({"found": "42"}))
            }
        },
    );
    vec![send, lookup]
}

/// How many tool results (or errors) the model has been shown so far, in either tool mode.
pub(crate) fn results_seen(req: &Value) -> usize {
    let text = serde_json::to_string(&req["messages"]).unwrap_or_default();
    text.matches("<tool_result tool=").count() + text.matches("<tool_error tool=").count()
}

/// The whole conversation as text.
fn conversation(req: &Value) -> String {
    serde_json::to_string(&req["messages"]).unwrap_or_default()
}

/// A model whose behaviour is chosen by a word in its task.
pub(crate) fn model(req: &Value) -> Reply {
    let task = common::task_text(req);
    let seen = results_seen(req);
    let send = ("send", json!({"to": "bob", "text": "hi"}));
    if task.contains("[pair]") {
        return match seen {
            0 => Reply::tool_calls(&[("lookup", json!({"q": "x"})), send]),
            _ => Reply::text(&format!("done: {}", conversation(req))),
        };
    }
    if task.contains("[double]") {
        return match seen {
            0 => Reply::tool_calls(&[send.clone(), send]),
            _ => Reply::text(&format!("done: {}", conversation(req))),
        };
    }
    if task.contains("[twice]") {
        return match seen {
            0 | 1 => Reply::tool_calls(&[send]),
            _ => Reply::text("gave up"),
        };
    }
    if task.contains("[text]") {
        return match seen {
            0 => Reply::content(
                "<tool_call>\n{\"name\": \"send\", \"arguments\": {\"to\": \"bob\", \"text\": \"hi\"}}\n</tool_call>",
            ),
            _ => Reply::text("done"),
        };
    }
    if task.contains("[delegate]") {
        return match seen {
            0 => Reply::tool_calls(&[(
                "delegate",
                json!({"agent": "mailer", "task": "[send] mail bob"}),
            )]),
            _ => Reply::text(&format!("parent done: {}", conversation(req))),
        };
    }
    if task.contains("[send]") {
        return match seen {
            0 => Reply::tool_calls(&[send]),
            _ => Reply::text(&format!("done: {}", conversation(req))),
        };
    }
    Reply::text(&format!("answer to: {task}"))
}

fn gated_settings(model_url: &str) -> Settings {
    let mut s = common::settings(model_url);
    s.tools.approval = vec!["send".into()];
    s.agent.workers = 1;
    s
}

/// An app with `workers` of its own, as the daemon has.
struct Pool {
    t: common::TestApp,
    stop: CancellationToken,
    tracker: TaskTracker,
}

impl Pool {
    async fn start(settings: Settings, ran: &Ran, workers: usize) -> Pool {
        let t = common::app(settings, tools(ran)).await;
        let stop = CancellationToken::new();
        let tracker = TaskTracker::new();
        t.app.agent.spawn_workers(workers, &tracker, stop.clone());
        Pool { t, stop, tracker }
    }

    fn app(&self) -> &App {
        &self.t.app
    }

    async fn submit(&self, text: &str) -> Task {
        self.app()
            .agent
            .submit(Submit::new(text, Origin::Api, None))
            .await
            .expect("submitted")
    }

    /// Wait until the task is finished or waits for a person.
    async fn settled(&self, id: &str) -> Task {
        let rx = self.app().agent.subscribe();
        let t = self
            .app()
            .agent
            .wait_settled(id, rx, PATIENCE)
            .await
            .expect("readable");
        assert!(t.state.is_finished() || t.waiting, "not settled: {t:?}");
        t
    }

    async fn finished(&self, id: &str) -> Task {
        let rx = self.app().agent.subscribe();
        let t = self
            .app()
            .agent
            .wait(id, rx, PATIENCE)
            .await
            .expect("readable");
        assert!(t.state.is_finished(), "not finished: {t:?}");
        t
    }

    /// Approve request `id` as a person would.
    async fn approve(&self, id: &str) {
        self.app()
            .agent
            .approvals()
            .decide(id, Decision::Approve, "test")
            .await
            .expect("approved");
    }

    async fn open(&self) -> Vec<hermes_store::Approval> {
        self.app()
            .agent
            .approvals()
            .list(Some(ApprovalState::Open), 100)
            .await
            .expect("listed")
    }

    async fn stop(self) {
        self.stop.cancel();
        self.tracker.close();
        let _ = tokio::time::timeout(PATIENCE, self.tracker.wait()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_call_frees_its_worker_and_runs_once_with_the_approved_arguments() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let p = Pool::start(gated_settings(&model.base_url()), &ran, 1).await;

    let held = p.submit("[send] tell bob hi").await;
    let t = p.settled(&held.id).await;
    assert_eq!(t.state, TaskState::Running);
    assert!(t.waiting, "{t:?}");
    assert!(ran.sends().is_empty(), "ran before approval");
    let open = p.open().await;
    assert_eq!(open.len(), 1, "{open:?}");
    assert_eq!(open[0].task_id, held.id);
    assert_eq!(open[0].tool, "send");
    assert_eq!(open[0].arguments, json!({"text": "hi", "to": "bob"}));
    let steps = p.app().store.tasks().steps(&held.id).await.unwrap();
    let wait = steps
        .iter()
        .find(|s| s.row.kind == StepKind::Approval)
        .expect("an approval step");
    assert_eq!(wait.row.output.as_deref(), Some("waiting"));
    // No approval id ever reaches the model.
    for req in model.requests() {
        assert!(!conversation(&req).contains(&open[0].id));
    }

    // The only worker is free: another task runs to its end meanwhile.
    let other = p.submit("what is two plus two").await;
    let other = p.finished(&other.id).await;
    assert_eq!(other.state, TaskState::Succeeded);
    assert!(p.app().store.tasks().get(&held.id).await.unwrap().waiting);

    let a = p
        .app()
        .agent
        .approvals()
        .decide(&open[0].id, Decision::Approve, "test")
        .await
        .unwrap();
    assert_eq!(a.state, ApprovalState::Approved);
    let done = p.finished(&held.id).await;
    assert_eq!(done.state, TaskState::Succeeded, "{done:?}");
    assert!(!done.waiting);
    assert_eq!(ran.sends(), vec![json!({"to": "bob", "text": "hi"})]);
    let steps = p.app().store.tasks().steps(&held.id).await.unwrap();
    let kinds: Vec<(StepKind, Option<&str>)> = steps
        .iter()
        .filter(|s| s.row.kind == StepKind::Approval)
        .map(|s| (s.row.kind, s.row.output.as_deref()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (StepKind::Approval, Some("waiting")),
            (StepKind::Approval, Some("approved by test"))
        ]
    );
    assert_eq!(
        steps
            .iter()
            .filter(|s| s.row.kind == StepKind::Tool)
            .count(),
        1
    );
    // Answered once: a second answer is refused.
    let again = p
        .app()
        .agent
        .approvals()
        .decide(&open[0].id, Decision::Approve, "test")
        .await;
    assert!(again.is_err());
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_never_runs_and_its_retry_is_denied_without_asking() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let p = Pool::start(gated_settings(&model.base_url()), &ran, 1).await;
    let held = p.submit("[twice] tell bob hi").await;
    p.settled(&held.id).await;
    let open = p.open().await;
    assert_eq!(open.len(), 1);
    p.app()
        .agent
        .approvals()
        .decide(
            &open[0].id,
            Decision::Deny {
                reason: Some("not today".into()),
            },
            "test",
        )
        .await
        .unwrap();
    let done = p.finished(&held.id).await;
    assert_eq!(done.state, TaskState::Succeeded);
    assert_eq!(done.answer.as_deref(), Some("gave up"));
    assert!(ran.sends().is_empty());
    let all = p.app().agent.approvals().of_task(&held.id).await.unwrap();
    assert_eq!(all.len(), 1, "the retry was asked again: {all:?}");
    // The model was told a person declined, with the reason, twice.
    let last = model.requests().last().cloned().unwrap();
    let text = conversation(&last);
    assert_eq!(
        text.matches("a person declined this call (not today)")
            .count(),
        2,
        "{text}"
    );
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_calls_in_one_reply_all_wait_and_each_runs_once() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let p = Pool::start(gated_settings(&model.base_url()), &ran, 1).await;
    let held = p.submit("[pair] look up and tell bob").await;
    p.settled(&held.id).await;
    assert_eq!(
        ran.lookups(),
        0,
        "a call of the held reply ran before the answer"
    );
    assert!(ran.sends().is_empty());
    let open = p.open().await;
    p.approve(&open[0].id).await;
    let done = p.finished(&held.id).await;
    assert_eq!(done.state, TaskState::Succeeded);
    assert_eq!(ran.lookups(), 1);
    assert_eq!(ran.sends().len(), 1);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_call_twice_in_one_reply_is_asked_once_and_runs_once() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let p = Pool::start(gated_settings(&model.base_url()), &ran, 1).await;
    let held = p.submit("[double] tell bob, twice").await;
    p.settled(&held.id).await;
    let open = p.open().await;
    assert_eq!(open.len(), 1, "one request for one distinct call: {open:?}");
    p.approve(&open[0].id).await;
    let done = p.finished(&held.id).await;
    assert_eq!(done.state, TaskState::Succeeded);
    assert_eq!(ran.sends().len(), 1);
    // The second is told why it did not run, not that nobody can be asked.
    let told = done.answer.unwrap_or_default();
    assert!(
        told.contains("approved this exact call for one run"),
        "{told}"
    );
    assert!(!told.contains("cannot be asked for here"), "{told}");
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_tool_mode_is_gated_too() {
    let model = ScriptedModel::start_with(model).await;
    let ran = Ran::default();
    let mut s = gated_settings(&model.base_url());
    for profile in s.model.profiles.values_mut() {
        profile.tool_mode = ToolMode::Text;
    }
    let p = Pool::start(s, &ran, 1).await;
    let held = p.submit("[text] tell bob hi").await;
    let t = p.settled(&held.id).await;
    assert!(t.waiting, "{t:?}");
    assert!(ran.sends().is_empty());
    let open = p.open().await;
    p.approve(&open[0].id).await;
    assert_eq!(p.finished(&held.id).await.state, TaskState::Succeeded);
    assert_eq!(ran.sends().len(), 1);
    p.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agents_held_call_holds_its_parent_and_both_go_on_once_approved() {
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
    let t = p.settled(&parent.id).await;
    assert!(t.waiting, "the parent does not wait: {t:?}");
    assert!(ran.sends().is_empty());
    let open = p.open().await;
    assert_eq!(open.len(), 1, "{open:?}");
    let sub = p.app().store.tasks().get(&open[0].task_id).await.unwrap();
    assert_eq!(sub.parent_id.as_deref(), Some(parent.id.as_str()));
    assert!(sub.waiting);
    // Both wait without a worker: another task gets the only one.
    let other = p.submit("hello").await;
    assert_eq!(p.finished(&other.id).await.state, TaskState::Succeeded);

    p.approve(&open[0].id).await;
    let done = p.finished(&parent.id).await;
    assert_eq!(done.state, TaskState::Succeeded, "{done:?}");
    assert_eq!(ran.sends().len(), 1);
    let sub = p.app().store.tasks().get(&sub.id).await.unwrap();
    assert_eq!(sub.state, TaskState::Succeeded);
    // The parent saw the sub-agent's answer.
    assert!(done.answer.unwrap_or_default().contains("success"));
    p.stop().await;
}

#[tokio::test]
async fn a_precheck_and_any_other_caller_cannot_run_a_gated_tool() {
    let ran = Ran::default();
    let t = common::app(gated_settings("http://127.0.0.1:9/v1"), tools(&ran)).await;
    let o = t
        .app
        .agent
        .registry()
        .execute(
            &hermes_engine::llm::ToolCall {
                id: "c".into(),
                name: "send".into(),
                arguments: json!({"to": "bob", "text": "hi"}),
            },
            &Default::default(),
            None,
        )
        .await;
    assert!(
        matches!(
            o.error,
            Some(hermes_engine::tools::ToolError::NeedsApproval(_))
        ),
        "{o:?}"
    );
    assert!(ran.sends().is_empty());
    let job = t
        .app
        .scheduler
        .add(
            hermes_engine::scheduler::JobRequest {
                task: "watch".into(),
                schedule: "0 8 * * *".into(),
                precheck: Some(json!({"tool": "send", "arguments": {"to": "bob", "text": "hi"}})),
                ..Default::default()
            },
            Origin::Api,
        )
        .await;
    assert!(job.is_err(), "a gated precheck was accepted");
}
