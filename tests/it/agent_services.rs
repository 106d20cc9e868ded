//! The agent together with its services: the model schedules a job through its tool and the job
//! fires fresh; a remembered fact reaches a later job's task; sub-agents report partial failure.

use crate::common;

use hermes_config::{SubAgent, WebhookSettings};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_store::{Delivery, Origin};
use hermes_store::{RunOutcome, TaskState};
use serde_json::{Value, json};
use std::time::Duration;

fn roles(req: &Value) -> Vec<String> {
    req["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_model_schedules_a_job_which_fires_fresh_and_delivers_its_answer() {
    let (hook, received) = common::webhook_receiver().await;
    let model = ScriptedModel::start(vec![
        // The conversation in which the person asks for a daily check.
        Reply::tool_calls(&[(
            "schedule_task",
            json!({"task": "Check the oolong tea price and report it", "schedule": "0 8 * * *",
                   "name": "tea price", "timezone": "Europe/Berlin", "notify": ["ops"]}),
        )]),
        Reply::text("Done: every morning at 8 I will check the price and tell you."),
        // The job's firing.
        Reply::text("Oolong tea costs 12 EUR today."),
    ])
    .await;
    let mut s = common::settings(&model.base_url());
    s.notify.webhooks.insert(
        "ops".into(),
        WebhookSettings {
            url: hook,
            secret: String::new(),
        },
    );
    let t = common::app(s, vec![]).await;
    let record = common::run_task(
        &t,
        "Every morning at 8, check the oolong tea price and send it to ops",
    )
    .await;
    let task = &record.task;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.error);

    let jobs = t.app.scheduler.list().await.unwrap();
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job.origin, Origin::Model);
    assert_eq!(job.timezone, "Europe/Berlin");
    let next = job.next_run_at.expect("a next run time");
    let local = next.with_timezone(&chrono_tz::Europe::Berlin);
    assert_eq!(local.format("%H:%M").to_string(), "08:00");

    // Fire it now, as `jobs run` does without a daemon.
    let run = t.app.scheduler.run_now_wait(&job.id).await.unwrap();
    assert_eq!(run.outcome, RunOutcome::Fired);
    let job_task = t
        .app
        .store
        .tasks()
        .get(run.task_id.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(job_task.origin, Origin::Job);
    assert_eq!(job_task.job_id.as_deref(), Some(job.id.as_str()));
    assert_eq!(
        job_task.answer.as_deref(),
        Some("Oolong tea costs 12 EUR today.")
    );

    // The firing's request holds no earlier conversation: system prompt(s) and the job's text.
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let firing = &requests[2];
    assert!(
        roles(firing).iter().all(|r| r == "system" || r == "user"),
        "{firing}"
    );
    let text = serde_json::to_string(&firing["messages"]).unwrap();
    assert!(text.contains("Check the oolong tea price and report it"));
    assert!(
        !text.contains("Every morning at 8"),
        "the old conversation leaked: {text}"
    );

    // Delivered on the job's channel with a dated title.
    assert_eq!(t.app.notifier.deliver_due().await, 1);
    let got = received.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    // The answer, then the digest footer naming the job and its next run.
    let sent = got[0]["text"].as_str().unwrap();
    assert!(
        sent.starts_with("Oolong tea costs 12 EUR today.\n\n---\n"),
        "{sent}"
    );
    assert!(sent.contains("Job **tea price** · next run"), "{sent}");
    assert!(
        got[0]["title"]
            .as_str()
            .unwrap()
            .starts_with("tea price — ")
    );
    // Once every notice of the run went out, the run says so.
    let runs = t.app.scheduler.runs(&job.id, 10).await.unwrap();
    assert_eq!(runs[0].delivery, Delivery::Sent);
}

#[tokio::test]
async fn a_fact_remembered_in_one_task_reaches_a_later_jobs_task_in_either_language() {
    let model = ScriptedModel::start(vec![
        Reply::tool_calls(&[(
            "remember",
            json!({"text": "用户喜欢喝乌龙茶，不喝咖啡", "tags": ["preference"]}),
        )]),
        Reply::text("记住了。"),
        Reply::tool_calls(&[(
            "remember",
            json!({"text": "The user wants the digest in English, short", "tags": ["preference"]}),
        )]),
        Reply::text("Noted."),
        // The job's firing, days later.
        Reply::text("Here is your short digest."),
    ])
    .await;
    let t = common::app(common::settings(&model.base_url()), vec![]).await;
    for text in [
        "记住：我喜欢喝乌龙茶，不喝咖啡",
        "Remember: digest in English, short",
    ] {
        let done = common::run_task(&t, text).await.task;
        assert_eq!(done.state, TaskState::Succeeded, "{:?}", done.error);
    }
    let job = t
        .app
        .scheduler
        .add(
            hermes_engine::scheduler::JobRequest {
                task: "Write the morning digest; suggest a drink (乌龙茶 or coffee?)".into(),
                schedule: "0 8 * * *".into(),
                ..Default::default()
            },
            Origin::Cli,
        )
        .await
        .unwrap();
    let run = t.app.scheduler.run_now_wait(&job.id).await.unwrap();
    assert_eq!(run.outcome, RunOutcome::Fired);
    let firing = serde_json::to_string(&model.requests()[4]["messages"]).unwrap();
    assert!(firing.contains("<memory>"), "{firing}");
    assert!(
        firing.contains("用户喜欢喝乌龙茶"),
        "the Chinese fact is recalled: {firing}"
    );
    assert!(
        firing.contains("digest in English"),
        "the English fact is recalled: {firing}"
    );
}

#[tokio::test]
async fn delegate_parallel_reports_success_failure_and_timeout_per_sub_agent() {
    // A dead port for the broken sub-agent's model profile.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}/v1", dead.local_addr().unwrap());
    drop(dead);
    let model = ScriptedModel::start_with(|req: &Value| {
        let msgs = req["messages"].as_array().cloned().unwrap_or_default();
        let user = common::task_text(req);
        let has_tool = msgs.iter().any(|m| m["role"] == "tool");
        match user.as_str() {
            "find the tea price" => Reply::text("12 EUR"),
            "think for a long time" => {
                Reply::Delay(Duration::from_secs(5), Box::new(Reply::text("too late")))
            }
            _ if !has_tool => Reply::tool_calls(&[(
                "delegate_parallel",
                json!({"tasks": [
                    {"agent": "researcher", "task": "find the tea price"},
                    {"agent": "broken", "task": "anything"},
                    {"agent": "slow", "task": "think for a long time"}
                ]}),
            )]),
            _ => Reply::text("One sub-agent answered: 12 EUR; one failed and one timed out."),
        }
    })
    .await;
    let mut s = common::settings(&model.base_url());
    let mut dead_profile = s.model.profiles["fast"].clone();
    dead_profile.base_url = dead_url;
    s.model.profiles.insert("dead".into(), dead_profile);
    let agent = |profile: &str, timeout_s: u64| SubAgent {
        description: "test agent".into(),
        profile: profile.into(),
        tools: vec![],
        system_prompt: "You are a sub-agent.".into(),
        timeout_s,
    };
    s.agents.insert("researcher".into(), agent("fast", 30));
    s.agents.insert("broken".into(), agent("dead", 30));
    s.agents.insert("slow".into(), agent("fast", 1));
    let t = common::app(s, vec![]).await;
    let record = common::run_task(&t, "split this across the sub-agents").await;
    let task = &record.task;
    assert_eq!(task.state, TaskState::Succeeded, "{:?}", task.error);
    let tool = record
        .steps
        .iter()
        .find(|s| s.row.name == "delegate_parallel")
        .expect("the delegation is traced");
    let out = tool.row.output.as_deref().unwrap();
    assert!(out.contains("\"status\":\"success\""), "{out}");
    assert!(out.contains("\"status\":\"failed\""), "{out}");
    assert!(out.contains("\"status\":\"timeout\""), "{out}");
    assert!(out.contains("12 EUR"), "{out}");

    // Each sub-agent ran as its own task, linked to the parent, with its own trace.
    let subs = t
        .app
        .store
        .tasks()
        .list(&hermes_store::TaskFilter {
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap();
    let children: Vec<_> = subs
        .iter()
        .filter(|c| c.parent_id.as_deref() == Some(task.id.as_str()))
        .collect();
    assert_eq!(children.len(), 3);
    assert!(
        children
            .iter()
            .all(|c| c.origin == Origin::Agent && c.state.is_finished())
    );
    // The sub-agents were offered no tools: their own allowlist is empty.
    for req in model.requests() {
        let user = serde_json::to_string(&req["messages"]).unwrap();
        if user.contains("find the tea price") && !user.contains("split this") {
            assert!(req.get("tools").is_none(), "{req}");
        }
    }
}

#[tokio::test]
async fn one_task_runs_at_most_eight_sub_agents_at_once() {
    // One reply, three delegate_parallel calls of eight: 24 sub-agents asked for at once.
    let model = ScriptedModel::start_with(|req: &Value| {
        let user = common::task_text(req);
        let has_tool = req["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if user.starts_with("part ") {
            // Long enough that every call of the reply starts while the first eight run.
            return Reply::Delay(Duration::from_millis(800), Box::new(Reply::text("done")));
        }
        if has_tool {
            return Reply::text("all parts handled");
        }
        let call = |c: usize| {
            let tasks: Vec<Value> = (0..8)
                .map(|i| json!({"agent": "worker", "task": format!("part {c}.{i}")}))
                .collect();
            ("delegate_parallel", json!({ "tasks": tasks }))
        };
        Reply::tool_calls(&[call(0), call(1), call(2)])
    })
    .await;
    let mut s = common::settings(&model.base_url());
    s.agents.insert(
        "worker".into(),
        SubAgent {
            description: "does a part".into(),
            profile: "fast".into(),
            tools: vec![],
            system_prompt: "You are a sub-agent.".into(),
            timeout_s: 30,
        },
    );
    let t = common::app(s, vec![]).await;
    let record = common::run_task(&t, "split this into 24 parts").await;
    assert_eq!(
        record.task.state,
        TaskState::Succeeded,
        "{:?}",
        record.task.error
    );
    let children = t
        .app
        .store
        .tasks()
        .list(&hermes_store::TaskFilter {
            limit: 100,
            ..Default::default()
        })
        .await
        .expect("tasks")
        .into_iter()
        .filter(|c| c.parent_id.as_deref() == Some(record.task.id.as_str()))
        .count();
    assert_eq!(children, 8, "only eight sub-agents were started");
    let outputs: Vec<&str> = record
        .steps
        .iter()
        .filter(|s| s.row.name == "delegate_parallel")
        .filter_map(|s| s.row.output.as_deref())
        .collect();
    assert_eq!(outputs.len(), 3, "{outputs:?}");
    let refused = outputs
        .iter()
        .map(|o| o.matches("already has 8 sub-agents running").count())
        .sum::<usize>();
    assert_eq!(refused, 16, "the rest told why: {outputs:?}");
}

#[tokio::test]
async fn a_job_naming_an_unknown_profile_is_refused_when_made() {
    let model = ScriptedModel::start(vec![]).await;
    let t = common::app(common::settings(&model.base_url()), vec![]).await;
    let err = t
        .app
        .scheduler
        .add(
            hermes_engine::scheduler::JobRequest {
                task: "digest".into(),
                schedule: "0 8 * * *".into(),
                profile: Some("turbo".into()),
                ..Default::default()
            },
            Origin::Api,
        )
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("turbo") && text.contains("fast"), "{text}");
    assert_eq!(
        hermes_surfaces::http::ApiError::from(err).status.as_u16(),
        400
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_task_stops_the_sub_agent_it_is_waiting_on() {
    let model = ScriptedModel::start_with(|req: &Value| {
        let has_tool = req["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        match common::task_text(req).as_str() {
            "think for a long time" => {
                Reply::Delay(Duration::from_secs(30), Box::new(Reply::text("too late")))
            }
            _ if !has_tool => Reply::tool_calls(&[(
                "delegate",
                json!({"agent": "slow", "task": "think for a long time"}),
            )]),
            _ => Reply::text("done"),
        }
    })
    .await;
    let mut s = common::settings(&model.base_url());
    s.agents.insert(
        "slow".into(),
        SubAgent {
            description: "test agent".into(),
            profile: "fast".into(),
            tools: vec![],
            system_prompt: "You are a sub-agent.".into(),
            timeout_s: 120,
        },
    );
    let t = common::app(s, vec![]).await;
    let agent = t.app.agent.clone();
    let parent = agent
        .create(hermes_engine::agent::Submit {
            task: "ask the slow one".into(),
            origin: Origin::Cli,
            ..Default::default()
        })
        .await
        .unwrap();
    let running = tokio::spawn({
        let (agent, id) = (agent.clone(), parent.id.clone());
        async move { agent.execute(&id, Default::default()).await }
    });
    // The sub-agent's model call is in flight.
    assert!(model.wait_for_requests(2, Duration::from_secs(10)).await);
    let cancelled = std::time::Instant::now();
    let done = agent.cancel(&parent.id).await.expect("cancel");
    assert_eq!(done.state, TaskState::Cancelled);
    let child = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let tasks = t.app.store.tasks().list(&Default::default()).await.unwrap();
            let child = tasks
                .into_iter()
                .find(|c| c.parent_id.as_deref() == Some(parent.id.as_str()));
            match child {
                Some(c) if c.state.is_finished() => return c,
                _ => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    })
    .await
    .expect("the sub-agent ends with its parent");
    assert!(cancelled.elapsed() < Duration::from_secs(10));
    assert_eq!(child.state, TaskState::Cancelled, "{child:?}");
    assert!(
        child
            .error
            .as_deref()
            .unwrap_or_default()
            .contains("delegated it ended"),
        "{child:?}"
    );
    let _ = running.await;
    assert_eq!(
        model.request_count(),
        2,
        "nothing more was asked of the model"
    );
}
