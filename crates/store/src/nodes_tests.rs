//! Tests of `nodes.rs`: membership, leases, take-overs and fencing, on both engines.

use super::*;
use crate::testing::LEASE;
use crate::{NewJob, NewTask, Origin, RunOutcome, TaskState};
use chrono::Duration;

async fn claimed_task(node: &Store) -> String {
    let new = NewTask {
        task: "t".into(),
        origin: Origin::Api,
        profile: "fast".into(),
        ..Default::default()
    };
    let t = node.tasks().create(&new).await.unwrap();
    assert_eq!(
        node.tasks().start_row(&t.id).await.unwrap().unwrap().id,
        t.id
    );
    t.id
}

async fn job(store: &Store, name: &str) -> String {
    let new = NewJob {
        name: name.into(),
        task: "say hello".into(),
        schedule: "0 8 * * *".into(),
        timezone: "UTC".into(),
        ..NewJob::default()
    };
    store.jobs().create(&new).await.unwrap().id
}

/// A job whose run a fired and follows: its run id.
async fn followed_by(a: &Store, store: &Store) -> i64 {
    let followed = job(store, "followed").await;
    let job_task = claimed_task(a).await;
    assert!(a.jobs().lock(&followed, &job_task).await.unwrap());
    a.jobs()
        .add_run(&followed, now(), RunOutcome::Fired, Some(&job_task), None)
        .await
        .unwrap()
}

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_node_restarted_after_a_crash_rejoins_but_a_live_copy_is_refused(store: Store) {
        let a = store.clone().with_node("node-a");
        // A pid no process has: the run before this one, killed (systemd restarts it
        // within a second, well inside the lease).
        let dead = dead_pid();
        a.nodes().join("host-a", dead, None, LEASE).await.unwrap();
        a.nodes()
            .join("host-a", std::process::id(), None, LEASE)
            .await
            .unwrap();
        // The same node id in a live process on this host (a data dir copied beside the
        // first) is still refused, as on another host.
        let copy = a.nodes().join("host-a", 1, None, LEASE).await.unwrap_err();
        assert!(matches!(copy, StoreError::NodeInUse { .. }), "{copy}");
    }
);

/// A pid that names no process now.
fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_silent_node_leaves_its_tasks_locks_and_runs_to_the_others(store: Store) {
        let a = store.clone().with_node("node-a");
        let b = store.clone().with_node("node-b");
        a.nodes()
            .join("host-a", 1, Some("127.0.0.1:1"), LEASE)
            .await
            .unwrap();
        b.nodes().join("host-b", 2, None, LEASE).await.unwrap();
        assert_eq!(store.nodes().list().await.unwrap().len(), 2);
        // The same node id from another process, while it beats: refused.
        let copy = a.nodes().join("host-c", 3, None, LEASE).await.unwrap_err();
        assert!(matches!(copy, StoreError::NodeInUse { .. }), "{copy}");

        let on_a = claimed_task(&a).await;
        let on_b = claimed_task(&b).await;
        let waiting = job(&store, "placeholder").await;
        assert!(
            a.jobs()
                .lock(&waiting, &format!("{}x", placeholder_prefix(a.node())))
                .await
                .unwrap()
        );
        let of_b = job(&store, "b's placeholder").await;
        assert!(
            b.jobs()
                .lock(&of_b, &format!("{}y", placeholder_prefix(b.node())))
                .await
                .unwrap()
        );
        let followed = job(&store, "followed").await;
        let job_task = claimed_task(&a).await;
        assert!(a.jobs().lock(&followed, &job_task).await.unwrap());
        let run = a
            .jobs()
            .add_run(&followed, now(), RunOutcome::Fired, Some(&job_task), None)
            .await
            .unwrap();

        // Seen from b, a minute on: a is silent, b is not among the silent.
        let since = now() + Duration::minutes(1);
        assert_eq!(
            b.nodes().silent(since).await.unwrap(),
            vec!["node-a".to_string()]
        );
        // Revoked first: from here on a's lease fences everything it still tries.
        assert!(b.nodes().revoke("node-a", since).await.unwrap());
        assert!(!b.nodes().revoke("node-a", since).await.unwrap(), "once");
        assert_eq!(
            b.tasks()
                .fail_running_on("node-a", FailReason::Interrupted, &[])
                .await
                .unwrap(),
            2
        );
        let t = store.tasks().get(&on_a).await.unwrap();
        assert_eq!(
            (t.state, t.reason),
            (TaskState::Failed, Some(FailReason::Interrupted))
        );
        assert_eq!(
            store.tasks().get(&on_b).await.unwrap().state,
            TaskState::Running
        );
        assert_eq!(b.jobs().release_placeholders_of("node-a").await.unwrap(), 1);
        assert_eq!(
            store.jobs().get(&waiting).await.unwrap().running_task_id,
            None
        );
        assert!(
            store
                .jobs()
                .get(&of_b)
                .await
                .unwrap()
                .running_task_id
                .is_some()
        );

        let open = b.jobs().open_runs_of("node-a").await.unwrap();
        assert_eq!(open.len(), 1);
        assert_eq!(
            (open[0].run_id, open[0].task_id.as_str()),
            (run, job_task.as_str())
        );
        assert!(b.jobs().take_run(&open[0], "node-a").await.unwrap());
        assert!(
            !b.jobs().take_run(&open[0], "node-a").await.unwrap(),
            "taken once"
        );
        assert_eq!(b.jobs().open_runs_of("node-b").await.unwrap().len(), 1);
        // a's next beat finds its row gone: it was taken for dead, and knows it.
        let epoch = t.node_epoch.clone().expect("claimed under a lease");
        assert!(a.lease().holds(&epoch));
        assert!(!a.nodes().beat().await.unwrap());
        assert!(!a.lease().holds(&epoch));
        assert!(b.nodes().beat().await.unwrap());
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn nothing_is_written_or_claimed_under_a_lease_taken_over(store: Store) {
        let (a, b) = crate::testing::two_nodes(&store).await;
        let mine = claimed_task(&a).await;
        let task = store.tasks().get(&mine).await.unwrap();
        let epoch = task.node_epoch.clone().expect("claimed under a's lease");
        let row = |seq| crate::testing::note(1, "a note").into_step(seq, now());
        // Under its lease a's steps are taken.
        a.tasks()
            .add_steps(&mine, Some(&epoch), &[row(1)])
            .await
            .unwrap();
        // b declares a dead (a stopped process): a does not know yet.
        assert!(
            b.nodes()
                .revoke("node-a", now() + Duration::minutes(1))
                .await
                .unwrap()
        );
        let refused = a.tasks().add_steps(&mine, Some(&epoch), &[row(2)]).await;
        assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
        let end = crate::TaskOutcome::answered("done twice");
        assert_eq!(
            a.tasks()
                .finish_row(&mine, &end)
                .await
                .unwrap()
                .map(|t| t.id),
            None
        );
        let hold = a.holds().hold(&mine, "{}", None).await;
        assert!(hold.is_err(), "held under a lost lease");
        // Nor is anything new claimed by it.
        let pending = crate::testing::new_task(&a, "queued", Origin::Api).await;
        assert!(a.tasks().claim_next_pending().await.unwrap().is_none());
        assert!(a.tasks().start_row(&pending.id).await.unwrap().is_none());
        assert_eq!(store.tasks().steps(&mine).await.unwrap().len(), 1);
        assert_eq!(
            store.tasks().get(&mine).await.unwrap().state,
            TaskState::Running
        );
        // The sweep ends it; a joins again under a new lease and its new work is its own,
        // while the old task stays fenced.
        assert_eq!(
            b.tasks()
                .fail_orphaned(FailReason::Interrupted)
                .await
                .unwrap(),
            1
        );
        assert!(!a.nodes().beat().await.unwrap());
        a.nodes().join("host-a", 1, None, LEASE).await.unwrap();
        let again = a
            .tasks()
            .claim_next_pending()
            .await
            .unwrap()
            .expect("claimed again");
        assert_ne!(again.node_epoch.as_deref(), Some(epoch.as_str()));
        assert_eq!(
            b.tasks()
                .fail_orphaned(FailReason::Interrupted)
                .await
                .unwrap(),
            0
        );
        let refused = a.tasks().add_steps(&mine, Some(&epoch), &[row(2)]).await;
        assert!(matches!(refused, Err(StoreError::Fenced(_))), "{refused:?}");
        assert!(
            a.tasks()
                .finish_row(&again.id, &end)
                .await
                .unwrap()
                .is_some()
        );
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_restart_racing_a_take_over_follows_each_run_once(store: Store) {
        let (a, b) = crate::testing::two_nodes(&store).await;
        followed_by(&a, &store).await;
        let open = b.jobs().open_runs_of("node-a").await.unwrap();
        // a restarts (a new lease) while b, which read the run before, takes it over.
        let restarted = store.clone().with_node("node-a");
        restarted
            .nodes()
            .join("host-a", 1, None, LEASE)
            .await
            .unwrap();
        let own = restarted.jobs().open_runs_of("node-a").await.unwrap();
        let by_restart = restarted.jobs().take_run(&own[0], "node-a").await.unwrap();
        let by_b = b.jobs().take_run(&open[0], "node-a").await.unwrap();
        assert!(by_restart, "the restarted node follows its own run");
        assert!(!by_b, "and nobody else does");
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_node_that_beat_keeps_its_runs_one_that_left_is_silent(store: Store) {
        let (a, b) = crate::testing::two_nodes(&store).await;
        let run = followed_by(&a, &store).await;
        // Taken for silent since a moment ago, but a beat since: it keeps its run.
        let since = now() - Duration::seconds(1);
        assert!(a.nodes().beat().await.unwrap());
        let open = b.jobs().open_runs_of("node-a").await.unwrap();
        assert_eq!(open.first().map(|r| r.run_id), Some(run));
        assert!(!b.nodes().revoke("node-a", since).await.unwrap());
        assert!(
            !b.jobs().take_run(&open[0], "node-a").await.unwrap(),
            "a holds its lease"
        );
        // A graceful stop: silent for anyone at once.
        a.nodes().leave().await.unwrap();
        assert_eq!(
            b.nodes().silent(now() - LEASE).await.unwrap(),
            vec!["node-a".to_string()]
        );
        assert!(b.nodes().revoke("node-a", now() - LEASE).await.unwrap());
        assert!(b.jobs().take_run(&open[0], "node-a").await.unwrap());
    }
);
