//! What a recorded mail asks for afterwards: a command carried out, an answer queued once,
//! a notice found again by its token.

use super::tests::{mail, place, record_mail, task_outcome};
use super::*;
use crate::{NoticeFilter, Origin, TaskOutcome};

fn reply_to(to: &str) -> NewNotice {
    NewNotice {
        channel: "email".into(),
        title: "Re: Daily digest".into(),
        body: "Paused.".into(),
        recipient: Some(to.into()),
        in_reply_to: Some("m1@example.org".into()),
        ..NewNotice::default()
    }
}

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_command_changes_its_job_and_queues_its_confirmation_with_the_record(store: Store) {
        let job = crate::testing::digest_job(&store, "UTC").await;
        let outcome = InboxOutcome::Command {
            command: InboxCommand::Pause,
            state: CommandState::Done,
            notice_id: 1,
            job_id: Some(job.id.clone()),
            change: Some(JobChange {
                enabled: false,
                next_run_at: job.next_run_at,
            }),
            detail: "Paused “digest”.".into(),
            reply: Some(reply_to("me@example.org")),
        };
        let r = record_mail(&store, &place(1), &mail("m1@example.org"), &outcome)
            .await
            .unwrap();
        let Recorded::New { id, reply, .. } = r else {
            panic!("{r:?}")
        };
        assert!(!store.jobs().get(&job.id).await.unwrap().enabled);
        let notice = store.outbox().get(reply.unwrap()).await.unwrap().unwrap();
        assert_eq!(notice.queued.recipient.as_deref(), Some("me@example.org"));
        assert_eq!(notice.queued.in_reply_to.as_deref(), Some("m1@example.org"));
        let row = store.inbox().get(id).await.unwrap().unwrap();
        assert_eq!(row.command, Some(InboxCommand::Pause));
        assert!(row.answered_at.is_some(), "the confirmation is its answer");
        assert!(store.inbox().unanswered(10).await.unwrap().is_empty());
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn an_answer_is_queued_once_and_only_for_a_finished_task(store: Store) {
        let r = record_mail(
            &store,
            &place(2),
            &mail("m2@example.org"),
            &task_outcome("hi"),
        )
        .await
        .unwrap();
        let Recorded::New {
            id,
            task_id: Some(task_id),
            ..
        } = r
        else {
            panic!("{r:?}")
        };
        assert!(
            store.inbox().unanswered(10).await.unwrap().is_empty(),
            "still pending"
        );
        let done = TaskOutcome::answered("hello");
        store.tasks().finish(&task_id, &done).await.unwrap();
        let waiting = store.inbox().unanswered(10).await.unwrap();
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].1.answer.as_deref(), Some("hello"));
        let first = store
            .inbox()
            .answer(id, Some(&reply_to("me@example.org")))
            .await
            .unwrap();
        let second = store
            .inbox()
            .answer(id, Some(&reply_to("me@example.org")))
            .await
            .unwrap();
        assert!(first.is_some());
        assert_eq!(second, None, "a second answer is not queued");
        let notices = store
            .outbox()
            .list(&NoticeFilter::oldest_first())
            .await
            .unwrap();
        assert_eq!(notices.len(), 1, "the second attempt left nothing behind");
        assert!(store.inbox().unanswered(10).await.unwrap().is_empty());
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_requested_run_is_claimed_once(store: Store) {
        let outcome = InboxOutcome::Command {
            command: InboxCommand::RunNow,
            state: CommandState::Requested,
            notice_id: 1,
            job_id: Some("j_1".into()),
            change: None,
            detail: "asked".into(),
            reply: None,
        };
        let Recorded::New { id, .. } =
            record_mail(&store, &place(4), &mail("m4@example.org"), &outcome)
                .await
                .unwrap()
        else {
            panic!("not recorded")
        };
        let requested = store
            .inbox()
            .commands(CommandState::Requested)
            .await
            .unwrap();
        assert_eq!(requested.len(), 1);
        let claim = || {
            store.inbox().move_command(
                id,
                CommandState::Requested,
                CommandState::Started,
                "starting",
                None,
                None,
            )
        };
        assert!(claim().await.unwrap());
        assert!(!claim().await.unwrap(), "a second claim loses");
        let reply = reply_to("me@example.org");
        let run = crate::testing::new_task(&store, "news", Origin::Job).await;
        assert!(
            store
                .inbox()
                .move_command(
                    id,
                    CommandState::Started,
                    CommandState::Done,
                    "started",
                    Some(&run.id),
                    Some(&reply),
                )
                .await
                .unwrap()
        );
        let row = store.inbox().get(id).await.unwrap().unwrap();
        assert_eq!(row.command_state, Some(CommandState::Done));
        assert_eq!(row.task_id.as_deref(), Some(run.id.as_str()));
        assert!(row.reply_notice_id.is_some() && row.answered_at.is_some());
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_notice_is_found_by_its_token_and_tokens_differ(store: Store) {
        let a = store.outbox().enqueue(&reply_to("a@x")).await.unwrap();
        let b = store.outbox().enqueue(&reply_to("b@x")).await.unwrap();
        let ta = store.outbox().get(a).await.unwrap().unwrap().token.unwrap();
        let tb = store.outbox().get(b).await.unwrap().unwrap().token.unwrap();
        assert_ne!(ta, tb);
        assert_eq!(ta.len(), 32);
        assert!(ta.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            store.outbox().by_token(&ta).await.unwrap().map(|n| n.id),
            Some(a)
        );
        assert_eq!(
            store
                .outbox()
                .by_token("0".repeat(32).as_str())
                .await
                .unwrap(),
            None
        );
    }
);
