//! How many SQL statements a task costs: every statement is a round trip to SQLite's worker
//! thread (≈ 160 µs on the benchmark machine, BENCHMARKS.md §5), or to the PostgreSQL server. A four-call task — three
//! steps that each run a tool, then the answer — is created, claimed, traced and finished in
//! at most seven: one insert per step for the model call and the tool calls it asked for, and
//! every write returns its row instead of reading it back.
//!
//! Counted from sqlx's own statement log (`sqlx::query` events) with a process-wide
//! subscriber, so the test runs in a child process of its own, and only statements made inside
//! this test's span are counted (sqlx's connection thread runs each statement in its caller's
//! span).

use crate::common;

use hermes_engine::agent::{RunOptions, Submit};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::tools::{ToolInfo, tool_fn};
use hermes_store::{Origin, TaskState};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tracing::Instrument as _;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, filter};

/// The span this test's work runs in; statements outside it are other tests'.
const SPAN: &str = "counted_round_trips";

/// Counts the statements sqlx logs inside [`SPAN`] (or, with `anywhere`, in the whole
/// process: the pool's workers run in tasks of their own, outside any caller's span), except a
/// new connection's setup (SQLite's `PRAGMA …`, PostgreSQL's `SET …`): the pool opens
/// connections when it likes, and their cost is not a task's.
struct Statements {
    count: Arc<AtomicUsize>,
    anywhere: bool,
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let ours = self.anywhere
            || ctx
                .event_scope(event)
                .is_some_and(|mut scope| scope.any(|span| span.name() == SPAN));
        if !ours {
            return;
        }
        let mut setup = Setup(false);
        event.record(&mut setup);
        if !setup.0 {
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Whether the statement logged is a connection's setup.
struct Setup(bool);

impl tracing::field::Visit for Setup {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" {
            let summary = format!("{value:?}");
            self.0 = summary.starts_with("\"PRAGMA") || summary.starts_with("\"SET");
        }
    }
}

/// Set in the child that counts on PostgreSQL: the database to count on (made by the parent,
/// whose cluster it is).
const PG_URL: &str = "HERMES_TEST_ROUND_TRIPS_PG";

/// The count needs a process-wide subscriber, and one in the test binary's shared process would
/// change what every other test's own (thread-local) subscriber sees: tracing caches each
/// callsite's interest across all of them. So the test runs itself again, alone, in a child.
#[test]
fn a_four_call_task_takes_at_most_seven_statements() {
    const TEST: &str = "store_round_trips::a_four_call_task_takes_at_most_seven_statements";
    if common::alone_in_child(TEST, &[]) {
        common::block_on(count_statements(None));
    }
}

/// The same count on PostgreSQL: the same statements, so the same bound.
#[test]
fn a_four_call_task_takes_at_most_seven_statements_on_postgres() {
    const TEST: &str =
        "store_round_trips::a_four_call_task_takes_at_most_seven_statements_on_postgres";
    let url = std::env::var(PG_URL).unwrap_or_else(|_| crate::postgres::cluster::fresh_url());
    if common::alone_in_child(TEST, &[(PG_URL, &url)]) {
        common::block_on(count_statements(Some(url)));
    }
}

async fn count_statements(url: Option<String>) {
    let count = Arc::new(AtomicUsize::new(0));
    let only_sqlx = filter::Targets::new()
        .with_target("sqlx::query", tracing::Level::TRACE)
        .with_target(module_path!(), tracing::Level::TRACE);
    let counter = Statements {
        count: count.clone(),
        anywhere: false,
    };
    let subscriber = tracing_subscriber::registry().with(counter.with_filter(only_sqlx));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    counted(count, url)
        .instrument(tracing::info_span!(SPAN))
        .await;
}

/// The test's work, run inside [`SPAN`].
async fn counted(count: Arc<AtomicUsize>, url: Option<String>) {
    // A no-op tool: its own statements (there are none) are not the agent's.
    let noop = tool_fn(
        ToolInfo::new(
            "noop",
            "Does nothing.",
            json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        ),
        |_: Value, _| async move { Ok(Value::Null) },
    );
    let script = || {
        let mut replies: Vec<Reply> = (0..3)
            .map(|n| Reply::tool_calls(&[("noop", json!({ "n": n }))]))
            .collect();
        replies.push(Reply::text("done"));
        replies
    };
    let model = ScriptedModel::start([script(), script(), script()].concat()).await;
    let mut settings = common::settings(&model.base_url());
    settings.storage.url = url.unwrap_or_default();
    let settings_url_empty = settings.storage.url.is_empty();
    let t = common::app(settings, vec![noop]).await;
    assert_eq!(
        t.app.store.is_postgres(),
        !settings_url_empty,
        "counted on the wrong engine"
    );
    let run = |text: &'static str| {
        let agent = t.app.agent.clone();
        async move {
            let task = agent
                .create(Submit::new(text, Origin::Api, None))
                .await
                .unwrap();
            // Run here rather than by a worker: an idle worker's own polling would count too.
            agent
                .execute(&task.id, RunOptions::default())
                .await
                .unwrap()
        }
    };
    // The first task opens the pool's connection (its pragmas are statements too).
    let warm = run("warm up").await;
    assert_eq!(warm.state, TaskState::Succeeded, "{:?}", warm.error);

    let before = count.load(Ordering::Relaxed);
    let done = run("call noop three times").await;
    let statements = count.load(Ordering::Relaxed) - before;
    assert_eq!(done.state, TaskState::Succeeded, "{:?}", done.error);
    assert_eq!(model.request_count(), 8);
    assert!(
        statements <= 7,
        "a four-call task took {statements} statements"
    );
    // Created, started, traced and finished: fewer would mean statements went uncounted.
    assert!(statements >= 4, "only {statements} statements counted");

    // A waiter (`wait: true`, a job's run, a sub-agent) reads the row once, to see whether the
    // task has ended already; the end itself comes with the finished row, not read back.
    let agent = t.app.agent.clone();
    let before = count.load(Ordering::Relaxed);
    let task = agent
        .create(Submit::new("wait for it", Origin::Api, None))
        .await
        .unwrap();
    let created = count.load(Ordering::Relaxed);
    let rx = agent.subscribe();
    let waiter = {
        let (agent, id) = (agent.clone(), task.id.clone());
        let wait = async move {
            agent
                .wait(&id, rx, std::time::Duration::from_secs(30))
                .await
        };
        tokio::spawn(wait.instrument(tracing::Span::current()))
    };
    // The waiter's first read happens before the task runs, or it would not be waiting.
    while count.load(Ordering::Relaxed) == created {
        tokio::task::yield_now().await;
    }
    let ran = agent
        .execute(&task.id, RunOptions::default())
        .await
        .unwrap();
    let waited = waiter.await.unwrap().unwrap();
    assert_eq!(
        (waited.id.as_str(), waited.state),
        (ran.id.as_str(), TaskState::Succeeded)
    );
    assert_eq!(waited.answer, ran.answer);
    let with_wait = count.load(Ordering::Relaxed) - before;
    assert_eq!(
        with_wait,
        statements + 1,
        "creating and running the task took {statements}, waiting for it should add one read"
    );
}

/// The worker pool's own statements per task: a task the pool takes costs what it costs run
/// alone, plus the one read of its waiter and at most one claim that finds nothing when its
/// worker goes back to wait. A look for held tasks before every claim (a write transaction)
/// went into the pool path while every count above stayed the same (with a ping per released
/// connection, 15 % more CPU at C = 100, BENCHMARKS.md §16); this is the check that would have
/// failed.
#[test]
fn the_pool_adds_at_most_a_claim_and_a_read_to_a_task() {
    const TEST: &str = "store_round_trips::the_pool_adds_at_most_a_claim_and_a_read_to_a_task";
    if common::alone_in_child(TEST, &[]) {
        common::block_on(count_pool_statements());
    }
}

/// Tasks compared, each way.
const POOL_TASKS: usize = 20;
/// Workers in the pool: idle ones are woken, and each may claim once for nothing.
const POOL_WORKERS: usize = 4;

async fn count_pool_statements() {
    let count = Arc::new(AtomicUsize::new(0));
    let only_sqlx = filter::Targets::new().with_target("sqlx::query", tracing::Level::TRACE);
    let counter = Statements {
        count: count.clone(),
        anywhere: true,
    };
    let subscriber = tracing_subscriber::registry().with(counter.with_filter(only_sqlx));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");

    let noop = tool_fn(
        ToolInfo::new(
            "noop",
            "Does nothing.",
            json!({"type": "object", "properties": {}}),
        ),
        |_: Value, _| async move { Ok(Value::Null) },
    );
    // One tool round, then the answer, whatever order the tasks' calls come in.
    let model = ScriptedModel::start_with(|req: &Value| {
        let called = req["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
        if called {
            Reply::text("done")
        } else {
            Reply::tool_calls(&[("noop", json!({}))])
        }
    })
    .await;
    let mut settings = common::settings(&model.base_url());
    settings.agent.workers = POOL_WORKERS as u32;
    let t = common::app(settings, vec![noop]).await;
    let agent = t.app.agent.clone();

    // Alone: created, then run here.
    let alone = |text: String| {
        let agent = agent.clone();
        async move {
            let task = agent
                .create(Submit::new(&text, Origin::Api, None))
                .await
                .unwrap();
            agent
                .execute(&task.id, RunOptions::default())
                .await
                .unwrap()
        }
    };
    assert_eq!(alone("warm up".into()).await.state, TaskState::Succeeded);
    let before = count.load(Ordering::Relaxed);
    for i in 0..POOL_TASKS {
        let done = alone(format!("alone {i}")).await;
        assert_eq!(done.state, TaskState::Succeeded, "{:?}", done.error);
    }
    let alone_statements = count.load(Ordering::Relaxed) - before;

    // By the pool: submitted, taken by a worker, waited for — one at a time, so every
    // submission wakes an idle worker, as a quiet daemon's do.
    let tracker = tokio_util::task::TaskTracker::new();
    let stop = tokio_util::sync::CancellationToken::new();
    agent.spawn_workers(POOL_WORKERS, &tracker, stop.clone());
    let pooled = |text: String| {
        let agent = agent.clone();
        async move {
            let rx = agent.subscribe();
            let task = agent
                .submit(Submit::new(&text, Origin::Api, None))
                .await
                .unwrap();
            agent
                .wait(&task.id, rx, std::time::Duration::from_secs(30))
                .await
                .unwrap()
        }
    };
    // The workers' first looks (held tasks left by a last run, the queue) are a start's cost.
    assert_eq!(
        pooled("warm up the pool".into()).await.state,
        TaskState::Succeeded
    );
    let before = count.load(Ordering::Relaxed);
    for i in 0..POOL_TASKS {
        let done = pooled(format!("pooled {i}")).await;
        assert_eq!(done.state, TaskState::Succeeded, "{:?}", done.error);
    }
    let pool_statements = count.load(Ordering::Relaxed) - before;
    stop.cancel();
    tracker.close();
    tracker.wait().await;

    // Per task: its waiter's read and one claim for nothing; the slack is one round of idle
    // workers' own looks (every two seconds), should a slow machine reach one.
    let allowed = alone_statements + 2 * POOL_TASKS + POOL_WORKERS + 2;
    assert!(
        pool_statements <= allowed,
        "{POOL_TASKS} tasks took {pool_statements} statements through the pool, \
         {alone_statements} run alone: more than a claim and a read each ({allowed} allowed)"
    );
    // Created, started, traced and finished each: fewer would mean statements went uncounted.
    assert!(
        alone_statements >= 4 * POOL_TASKS,
        "only {alone_statements} statements counted for {POOL_TASKS} tasks"
    );
}
