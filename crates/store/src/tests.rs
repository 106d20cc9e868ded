use super::*;
use crate::health::Health;
use crate::{Delivery, FailReason, Origin};
use chrono::{Duration as ChronoDuration, Utc};

async fn task(store: &Store) -> Task {
    crate::testing::new_task(store, "check the weather", Origin::Cli).await
}

/// A database in a fresh data dir, which lives as long as the returned guard.
async fn on_disk() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).await.unwrap();
    (dir, store)
}

/// Queue a notice on `channel`; its id.
pub(super) async fn notice(store: &Store, channel: &str) -> i64 {
    store
        .outbox()
        .enqueue(&NewNotice {
            channel: channel.into(),
            title: "Daily digest".into(),
            body: "# Hello".into(),
            ..Default::default()
        })
        .await
        .unwrap()
}

/// `work(store, i)` for each `i` below `n`, all running at once on their own tasks; what each
/// returned, in the order of `i`.
async fn in_parallel<T, Fut>(store: &Store, n: usize, work: impl Fn(Store, usize) -> Fut) -> Vec<T>
where
    T: Send + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
{
    let handles: Vec<_> = (0..n)
        .map(|i| tokio::spawn(work(store.clone(), i)))
        .collect();
    let mut done = Vec::new();
    for h in handles {
        done.push(h.await.unwrap());
    }
    done
}

#[tokio::test]
async fn migrations_apply_to_an_empty_database_and_again_idempotently() {
    let (dir, store) = on_disk().await;
    assert_eq!(store.tasks().counts().await.unwrap(), vec![]);
    store.close().await;
    // A second open finds the schema current and changes nothing.
    let store = Store::open(dir.path()).await.unwrap();
    assert!(dir.path().join(DB_FILE).is_file());
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.sqlite_pool().unwrap())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
}

/// A row a newer build's migration would have left.
async fn add_future_migration(store: &Store) {
    query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', 1, x'00', 0)",
    )
    .pg(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from the future', TRUE, '\\x00'::bytea, 0)",
    )
    .execute(store)
    .await
    .unwrap();
}

#[tokio::test]
async fn a_postgres_database_from_a_newer_schema_is_refused_and_migrations_are_idempotent() {
    let url = tokio::task::spawn_blocking(test_postgres::fresh_url)
        .await
        .unwrap();
    // Two daemons starting at once on a fresh database: the migrator's advisory lock lets one
    // migrate while the other waits, and both open.
    let (a, b) = tokio::join!(
        Store::open_postgres(&url, StoreOptions::default()),
        Store::open_postgres(&url, StoreOptions::default())
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.applied_version().await.unwrap(), Store::schema_version());
    b.close().await;
    add_future_migration(&a).await;
    a.close().await;
    let err = Store::open_postgres(&url, StoreOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 9999, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade hermes-agent"), "{err}");
    assert!(!err.to_string().contains(test_postgres::PASSWORD), "{err}");
}

/// README "PostgreSQL" tells a person to choose the commit's durability in `storage.url`; the
/// store must hand the URL's session options to every connection, not drop them.
#[tokio::test]
async fn session_options_in_a_postgres_url_reach_the_connections() {
    let url = tokio::task::spawn_blocking(test_postgres::fresh_url)
        .await
        .unwrap();
    // "local": neither the server's default nor the test cluster's "off".
    let url = format!("{url}?options%5Bsynchronous_commit%5D=local");
    let store = Store::open_postgres(&url, StoreOptions::default())
        .await
        .unwrap();
    let shown: Vec<String> = futures::future::try_join_all((0..3).map(|_| {
        query_scalar::<String>("SELECT 'unused'")
            .pg("SELECT current_setting('synchronous_commit')")
            .fetch_one(&store)
    }))
    .await
    .unwrap();
    assert_eq!(shown, ["local", "local", "local"]);
    store.close().await;
}

#[tokio::test]
async fn a_database_from_a_newer_schema_is_refused() {
    let (dir, store) = on_disk().await;
    add_future_migration(&store).await;
    store.close().await;
    let err = Store::open(dir.path()).await.unwrap_err();
    assert!(
        matches!(err, StoreError::NewerSchema { found: 9999, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("upgrade hermes-agent"), "{err}");
}

on_both_engines!(
    Memory,
    tokio::test,
    async fn tasks_and_steps_round_trip(store: Store) {
        let t = task(&store).await;
        assert_eq!(t.state, TaskState::Pending);
        assert!(store.tasks().start(&t.id).await.unwrap());
        assert!(
            !store.tasks().start(&t.id).await.unwrap(),
            "a task starts once"
        );
        for (i, kind) in [StepKind::Model, StepKind::Tool].into_iter().enumerate() {
            let seq = store
                .tasks()
                .add_step(
                    &t.id,
                    &NewStep {
                        request_tokens: 120,
                        result_tokens: 30,
                        arguments: Some(r#"{"url":"https://example.org"}"#.into()),
                        output: Some("天气晴".into()),
                        duration_ms: 42,
                        ..NewStep::new(1, kind, "web_fetch")
                    },
                )
                .await
                .unwrap();
            assert_eq!(seq, i as i64 + 1);
        }
        let won = store
            .tasks()
            .finish(&t.id, &TaskOutcome::answered("sunny").counted(1, 240, 60))
            .await
            .unwrap();
        assert!(won);
        let record = store.tasks().record(&t.id).await.unwrap().unwrap();
        assert_eq!(record.task.state, TaskState::Succeeded);
        assert_eq!(record.task.answer.as_deref(), Some("sunny"));
        assert_eq!(record.task.parse_failures, 1);
        assert!(record.task.finished_at.is_some());
        assert_eq!(record.steps.len(), 2);
        assert_eq!(record.steps[1].row.output.as_deref(), Some("天气晴"));
        // A late cancel does not overwrite the outcome.
        let cancelled = TaskOutcome::ended(TaskState::Cancelled, "late", FailReason::Cancelled);
        assert!(!store.tasks().finish(&t.id, &cancelled).await.unwrap());
        // Lookup by a unique prefix.
        let found = store.tasks().find(&t.id[..6]).await.unwrap().unwrap();
        assert_eq!(found.id, t.id);
        let listed = store
            .tasks()
            .list(&TaskFilter {
                state: Some(TaskState::Succeeded),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn unfinished_tasks_are_marked_failed_with_a_reason(store: Store) {
        let running = task(&store).await;
        store.tasks().start(&running.id).await.unwrap();
        let pending = task(&store).await;
        let n = store
            .tasks()
            .fail_unfinished(&[TaskState::Running], FailReason::Interrupted, &[])
            .await
            .unwrap();
        assert_eq!(n, 1);
        let t = store.tasks().get(&running.id).await.unwrap();
        assert_eq!(t.state, TaskState::Failed);
        assert_eq!(t.reason, Some(FailReason::Interrupted));
        assert_eq!(
            store.tasks().get(&pending.id).await.unwrap().state,
            TaskState::Pending
        );
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_task_claimed_by_a_live_process_is_spared_by_name(store: Store) {
        let claimed = store
            .tasks()
            .create(&NewTask {
                task: "run here".into(),
                origin: Origin::Cli,
                profile: "fast".into(),
                claimed: true,
                ..Default::default()
            })
            .await
            .unwrap();
        // This process owns it, and is never its own "other live process".
        assert_eq!(
            store.tasks().live_owners().await.unwrap(),
            Vec::<i64>::new()
        );
        let me = i64::from(std::process::id());
        let tasks = store.tasks();
        let running = [TaskState::Running];
        let spare = [me, me + 1];
        let spared = tasks.fail_unfinished(&running, FailReason::Interrupted, &spare);
        assert_eq!(spared.await.unwrap(), 0);
        assert_eq!(
            tasks.get(&claimed.id).await.unwrap().state,
            TaskState::Running
        );
        let ended = tasks.fail_unfinished(&running, FailReason::Interrupted, &[]);
        assert_eq!(ended.await.unwrap(), 1);
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn working_memory_round_trips_in_character_pages(store: Store) {
        let t = task(&store).await;
        let content = "乌龙茶".repeat(10) + "x".repeat(70).as_str();
        let key = store.working().put(&t.id, &content).await.unwrap();
        let page = store.working().read(&key, 0, 25).await.unwrap();
        assert_eq!(page.total_chars, 100);
        assert_eq!(page.text.chars().count(), 25);
        assert_eq!(page.next_offset, Some(25));
        let last = store.working().read(&key, 90, 25).await.unwrap();
        assert_eq!(last.text, "x".repeat(10));
        assert_eq!(last.next_offset, None);
        assert!(matches!(
            store.working().read("wm_nope", 0, 10).await,
            Err(StoreError::NotFound { .. })
        ));
        let pruned = store
            .working()
            .prune(Utc::now() + ChronoDuration::seconds(1))
            .await
            .unwrap();
        assert_eq!(pruned, 1);
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn jobs_and_runs_round_trip_and_claims_are_exclusive(store: Store) {
        let due = Utc::now();
        let job = store
        .jobs().create(&NewJob {
            name: "digest".into(),
            task: "summarise my feeds".into(),
            schedule: "0 8 * * *".into(),
            timezone: "Europe/Berlin".into(),
            notify: vec!["email".into()],
            profile: None,
            origin: Origin::Cli,
            precheck: Some(serde_json::json!({"tool": "watch_page", "arguments": {"url": "https://example.org"}})),
            next_run_at: Some(due),
            pre_approved: vec![],
        })
        .await
        .unwrap();
        assert_eq!(store.jobs().list().await.unwrap(), vec![job.clone()]);
        assert_eq!(job.notify, vec!["email".to_string()]);
        let next = due + ChronoDuration::days(1);
        assert!(
            store
                .jobs()
                .claim_run(&job.id, Some(due), Some(next))
                .await
                .unwrap()
        );
        assert!(
            !store
                .jobs()
                .claim_run(&job.id, Some(due), Some(next))
                .await
                .unwrap(),
            "the same due time is claimed once"
        );
        let t = task(&store).await;
        assert!(store.jobs().lock(&job.id, &t.id).await.unwrap());
        assert!(!store.jobs().lock(&job.id, &t.id).await.unwrap());
        assert_eq!(store.jobs().clear_locks().await.unwrap(), 1);
        let run = store
            .jobs()
            .add_run(&job.id, due, RunOutcome::Fired, Some(&t.id), None)
            .await
            .unwrap();
        store
            .jobs()
            .update_run(run, RunOutcome::Failed, Some("timeout"), &Delivery::Queued)
            .await
            .unwrap();
        let runs = store.jobs().runs(&job.id, 10).await.unwrap();
        assert_eq!(runs.len(), 1);
        assert_eq!(runs[0].outcome, RunOutcome::Failed);
        assert_eq!(runs[0].reason.as_deref(), Some("timeout"));
        assert_eq!(runs[0].delivery, Delivery::Queued);
        assert!(store.jobs().delete(&job.id).await.unwrap());
        assert!(
            store.jobs().runs(&job.id, 10).await.unwrap().is_empty(),
            "runs go with their job"
        );
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn outbox_round_trips_through_retry_and_failure(store: Store) {
        let id = notice(&store, "email").await;
        let now = Utc::now() + ChronoDuration::seconds(1);
        assert_eq!(store.outbox().due(None, now, 10).await.unwrap().len(), 1);
        // Stored to the microsecond (see `store::now`).
        let later = chrono::SubsecRound::trunc_subsecs(now + ChronoDuration::minutes(5), 6);
        store
            .outbox()
            .mark_attempt_failed(id, "connection refused", Some(later))
            .await
            .unwrap();
        assert!(store.outbox().due(None, now, 10).await.unwrap().is_empty());
        assert_eq!(store.outbox().next_due(None).await.unwrap(), Some(later));
        store
            .outbox()
            .mark_attempt_failed(id, "535 auth", None)
            .await
            .unwrap();
        let n = store.outbox().get(id).await.unwrap().unwrap();
        assert_eq!(n.state, NoticeState::Failed);
        assert_eq!(n.attempts, 2);
        assert_eq!(n.last_error.as_deref(), Some("535 auth"));
        let id2 = notice(&store, "hook").await;
        store.outbox().mark_sent(id2).await.unwrap();
        assert_eq!(
            store.outbox().get(id2).await.unwrap().unwrap().state,
            NoticeState::Sent
        );
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn facts_round_trip_and_duplicates_merge(store: Store) {
        let (a, how) = store
            .facts()
            .upsert("用户喜欢喝乌龙茶。", &["drink".into()], "cli")
            .await
            .unwrap();
        assert_eq!(how, Upsert::Created);
        let (b, how) = store
            .facts()
            .upsert("  用户喜欢喝乌龙茶 ", &["preference".into()], "task:x")
            .await
            .unwrap();
        assert_eq!(how, Upsert::Merged);
        assert_eq!(a.id, b.id);
        assert_eq!(b.tags, vec!["drink".to_string(), "preference".to_string()]);
        assert_eq!(store.facts().count().await.unwrap(), 1);
        assert_eq!(
            store.facts().all().await.unwrap()[0].text,
            "用户喜欢喝乌龙茶。"
        );
        assert!(store.facts().delete(&a.id).await.unwrap().is_some());
        assert!(store.facts().delete(&a.id).await.unwrap().is_none());
    }
);

/// A burst's statements are as long as the burst: kept in a connection's statement cache,
/// one prepared many-row statement per size seen, up to 100 a connection, they grew the
/// daemon under job firings by megabytes (BENCHMARKS.md §3).
#[tokio::test]
async fn bursts_of_every_size_leave_no_prepared_statements_behind() {
    bursts_leave_no_prepared_statements(Store::open_in_memory().await.unwrap()).await;
}

#[tokio::test]
async fn bursts_of_every_size_leave_no_prepared_statements_behind_on_postgres() {
    let one = StoreOptions {
        max_connections: 1,
        ..StoreOptions::default()
    };
    bursts_leave_no_prepared_statements(testing::postgres_with(one).await).await;
}

async fn bursts_leave_no_prepared_statements(store: Store) {
    use sqlx::Connection;
    let due = Utc::now();
    let mut jobs = Vec::new();
    for i in 0..36 {
        let new = NewJob {
            name: format!("job {i}"),
            task: "fire".into(),
            schedule: "0 8 * * *".into(),
            timezone: "UTC".into(),
            origin: Origin::Cli,
            next_run_at: Some(due),
            ..NewJob::default()
        };
        jobs.push(store.jobs().create(&new).await.unwrap());
    }
    let cached = || async {
        match store.engine() {
            Engine::Sqlite(p) => p.acquire().await.unwrap().cached_statements_size(),
            Engine::Postgres(p) => p.acquire().await.unwrap().cached_statements_size(),
        }
    };
    let before = cached().await;
    let mut rest = jobs.as_slice();
    for n in 1..=8 {
        let (burst, left) = rest.split_at(n);
        rest = left;
        let claims: Vec<BurstClaim> = burst
            .iter()
            .map(|j| BurstClaim {
                job_id: j.id.clone(),
                due,
                next: Some(due + ChronoDuration::days(1)),
                holder: format!("firing {}", j.id),
            })
            .collect();
        assert_eq!(store.jobs().claim_burst(&claims).await.unwrap().len(), n);
        let new: Vec<NewTask> = (0..n)
            .map(|_| NewTask {
                task: "fire".into(),
                origin: Origin::Job,
                profile: "fast".into(),
                ..NewTask::default()
            })
            .collect();
        let tasks = store.tasks().create_many(&new).await.unwrap();
        let started: Vec<(BurstClaim, String)> = claims
            .into_iter()
            .zip(tasks.into_iter().map(|t| t.id))
            .collect();
        assert_eq!(store.jobs().start_burst(&started).await.unwrap().len(), n);
    }
    assert_eq!(
        cached().await,
        before,
        "each burst size left a prepared statement in the cache"
    );
}

on_both_engines!(
    Disk,
    tokio::test,
    async fn tasks_are_counted_by_state_and_origin(store: Store) {
        task(&store).await;
        task(&store).await;
        crate::testing::new_task(&store, "a digest", Origin::Job).await;
        let mut counts = store.tasks().counts_by_origin().await.unwrap();
        counts.sort_by_key(|&(_, origin, _)| origin.as_str());
        assert_eq!(
            counts,
            vec![
                (TaskState::Pending, Origin::Cli, 2),
                (TaskState::Pending, Origin::Job, 1)
            ]
        );
    }
);

/// A migration added to one engine needs its twin on the other, under the same number: the
/// newer-schema refusal compares numbers, and both engines must mean the same schema by them.
#[test]
fn both_engines_know_the_same_schema_version() {
    let last = |m: &sqlx::migrate::Migrator| m.iter().map(|m| m.version).max();
    assert_eq!(
        last(&SQLITE_MIGRATOR),
        last(&PG_MIGRATOR),
        "add the PostgreSQL twin of the new SQLite migration to migrations/postgres (or the reverse)"
    );
}

#[path = "concurrency_tests.rs"]
mod concurrency;

#[tokio::test]
async fn the_pending_count_of_healthz_reads_the_index_and_never_scans_the_tasks() {
    let (_dir, store) = on_disk().await;
    for _ in 0..3 {
        task(&store).await;
    }
    let pool = store.sqlite_pool().unwrap();
    let plan = |sql: String| async move {
        let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .fetch_all(pool)
            .await
            .unwrap();
        rows.into_iter().map(|r| r.3).collect::<Vec<_>>().join("; ")
    };
    let pending = plan(format!(
        "EXPLAIN QUERY PLAN {}",
        super::tasks::PENDING_COUNT
    ))
    .await;
    assert!(
        pending.contains("SEARCH tasks USING COVERING INDEX tasks_by_state"),
        "{pending}"
    );
    assert!(!pending.contains("SCAN"), "{pending}");
    // What health read before: a count per state, which visits every task ever run.
    let per_state =
        plan("EXPLAIN QUERY PLAN SELECT state, COUNT(*) FROM tasks GROUP BY state".into()).await;
    assert!(per_state.contains("SCAN"), "{per_state}");
    assert_eq!(store.pending_count().await.unwrap(), 3);
}

#[tokio::test]
async fn a_fault_the_probe_proves_over_stops_being_reported_at_once() {
    let store = Store::open_in_memory().await.unwrap();
    task(&store).await;
    // A request met the server gone a moment ago; it is back, and the probe's write succeeds.
    store.note_fault(StorageFault::Unreachable);
    let h = store.health().await.unwrap();
    assert_eq!(
        h,
        Health {
            fault: None,
            pending: Some(1)
        }
    );
    assert_eq!(store.recent_fault(FAULT_MEMORY), None);
    // A full disk takes the probe's one-row write and still refuses a task: kept for a while.
    store.note_fault(StorageFault::DiskFull);
    store.reading.lock().await.last = None;
    let h = store.health().await.unwrap();
    assert_eq!(
        h,
        Health {
            fault: Some(StorageFault::DiskFull),
            pending: None
        }
    );
}
