use super::*;
use crate::{NewJob, NewTask, NoticeFilter, Origin, StoreError, TaskOutcome, TaskState};

fn place(uid: u32) -> MailPlace {
    MailPlace {
        mailbox: "agent@imap.test:993/INBOX".into(),
        uid_validity: 7,
        uid,
    }
}

fn mail(message_id: &str) -> NewInboxMessage {
    NewInboxMessage {
        message_id: Some(message_id.into()),
        digest: None,
        sender: "me@example.org".into(),
        subject: "Re: Daily digest".into(),
        refs: Some(format!("d1@x {message_id}")),
        ..NewInboxMessage::default()
    }
}

fn task_outcome(text: &str) -> InboxOutcome {
    InboxOutcome::Task {
        task: NewTask {
            task: text.into(),
            origin: Origin::Email,
            profile: "fast".into(),
            ..NewTask::default()
        },
        context: Some("Subject: Daily digest\n\n- one".into()),
        notice_id: None,
        job_id: None,
    }
}

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

async fn tasks_of(store: &Store) -> Vec<Task> {
    store
        .list_tasks(&crate::TaskFilter::default())
        .await
        .unwrap()
}

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_message_is_recorded_once_with_its_task_and_the_watermark(store: Store) {
        let first = store
            .record_inbox(
                Place::Mail(&place(5)),
                &mail("m1@example.org"),
                &task_outcome("more on item 2"),
            )
            .await
            .unwrap();
        let Recorded::New { id, task_id, reply } = first else {
            panic!("recorded as seen: {first:?}");
        };
        assert_eq!(reply, None);
        let tasks = tasks_of(&store).await;
        assert_eq!(tasks.len(), 1);
        assert_eq!(tasks[0].origin, Origin::Email);
        assert_eq!(tasks[0].state, TaskState::Pending);
        assert_eq!(Some(&tasks[0].id), task_id.as_ref());
        let row = store.inbox_message(id).await.unwrap().unwrap();
        assert_eq!(row.state, InboxState::Acted);
        assert_eq!(row.task_id, task_id);
        assert_eq!(
            store.inbox_context(&tasks[0].id).await.unwrap().as_deref(),
            Some("Subject: Daily digest\n\n- one")
        );
        let marks = store.inbox_watermarks(&place(5).mailbox).await.unwrap();
        assert_eq!((marks[0].uid_validity, marks[0].last_uid), (7, 5));

        // The same UID again (a reconnect), or the same Message-ID under another UID (the
        // mailbox renumbered): nothing new, but the watermark moves on.
        for (uid, id) in [(5, "other@example.org"), (9, "m1@example.org")] {
            let again = store
                .record_inbox(
                    Place::Mail(&place(uid)),
                    &mail(id),
                    &task_outcome("more on item 2"),
                )
                .await
                .unwrap();
            assert!(matches!(again, Recorded::Seen), "{again:?}");
        }
        assert_eq!(tasks_of(&store).await.len(), 1);
        let marks = store.inbox_watermarks(&place(5).mailbox).await.unwrap();
        assert_eq!(marks[0].last_uid, 9);
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn mail_without_a_message_id_is_known_by_its_digest(store: Store) {
        let anonymous = |digest: &str| NewInboxMessage {
            message_id: None,
            digest: Some(digest.into()),
            sender: "me@example.org".into(),
            subject: "run now".into(),
            refs: None,
            ..NewInboxMessage::default()
        };
        let first = store
            .record_inbox(
                Place::Mail(&place(5)),
                &anonymous("d1"),
                &task_outcome("do it"),
            )
            .await
            .unwrap();
        assert!(matches!(first, Recorded::New { .. }), "{first:?}");
        // The server renumbered the mailbox: a new UIDVALIDITY, a new UID, the same mail.
        let renumbered = MailPlace {
            uid_validity: 8,
            uid: 1,
            ..place(5)
        };
        assert!(
            store
                .inbox_seen(Place::Mail(&renumbered), &anonymous("d1"))
                .await
                .unwrap()
        );
        let again = store
            .record_inbox(
                Place::Mail(&renumbered),
                &anonymous("d1"),
                &task_outcome("do it"),
            )
            .await
            .unwrap();
        assert!(matches!(again, Recorded::Seen), "{again:?}");
        assert_eq!(tasks_of(&store).await.len(), 1);
        // Another mail without a Message-ID is another mail.
        let next = MailPlace {
            uid: 2,
            ..renumbered
        };
        assert!(
            !store
                .inbox_seen(Place::Mail(&next), &anonymous("d2"))
                .await
                .unwrap()
        );
        let other = store
            .record_inbox(
                Place::Mail(&next),
                &anonymous("d2"),
                &task_outcome("do that"),
            )
            .await
            .unwrap();
        assert!(matches!(other, Recorded::New { .. }), "{other:?}");
        assert_eq!(tasks_of(&store).await.len(), 2);
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_failure_inside_the_transaction_leaves_no_task_and_no_watermark(store: Store) {
        // The record's last insert fails, after the task's: the task must not survive it.
        let fail: &[&'static str] = if store.is_postgres() {
            &[
                "CREATE FUNCTION fail_record() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'disk trouble'; END $$",
                "CREATE TRIGGER fail_record BEFORE INSERT ON inbox_messages \
             FOR EACH ROW EXECUTE FUNCTION fail_record()",
            ]
        } else {
            &[
                "CREATE TRIGGER fail_record BEFORE INSERT ON inbox_messages \
           BEGIN SELECT RAISE(ABORT, 'disk trouble'); END",
            ]
        };
        for sql in fail {
            query(*sql).execute(&store).await.unwrap();
        }
        let err = store
            .record_inbox(
                Place::Mail(&place(3)),
                &mail("m1@example.org"),
                &task_outcome("do it"),
            )
            .await;
        assert!(err.is_err());
        assert!(tasks_of(&store).await.is_empty());
        assert!(
            store
                .inbox_watermarks(&place(3).mailbox)
                .await
                .unwrap()
                .is_empty()
        );
        query("DROP TRIGGER fail_record")
            .pg("DROP TRIGGER fail_record ON inbox_messages")
            .execute(&store)
            .await
            .unwrap();
        // Read again later, it is recorded.
        let again = store
            .record_inbox(
                Place::Mail(&place(3)),
                &mail("m1@example.org"),
                &task_outcome("do it"),
            )
            .await
            .unwrap();
        assert!(matches!(again, Recorded::New { .. }));
        assert_eq!(tasks_of(&store).await.len(), 1);
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn the_watermark_never_moves_down(store: Store) {
        store.start_inbox_watermark(&place(40)).await.unwrap();
        store.start_inbox_watermark(&place(12)).await.unwrap();
        let marks = store.inbox_watermarks(&place(0).mailbox).await.unwrap();
        assert_eq!(marks.len(), 1);
        assert_eq!(marks[0].last_uid, 40);
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_command_changes_its_job_and_queues_its_confirmation_with_the_record(store: Store) {
        let job = store
            .create_job(&NewJob {
                name: "digest".into(),
                task: "news".into(),
                schedule: "0 8 * * *".into(),
                timezone: "UTC".into(),
                next_run_at: Some(now()),
                ..NewJob::default()
            })
            .await
            .unwrap();
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
        let r = store
            .record_inbox(Place::Mail(&place(1)), &mail("m1@example.org"), &outcome)
            .await
            .unwrap();
        let Recorded::New { id, reply, .. } = r else {
            panic!("{r:?}")
        };
        assert!(!store.job(&job.id).await.unwrap().enabled);
        let notice = store.notice(reply.unwrap()).await.unwrap().unwrap();
        assert_eq!(notice.queued.recipient.as_deref(), Some("me@example.org"));
        assert_eq!(notice.queued.in_reply_to.as_deref(), Some("m1@example.org"));
        let row = store.inbox_message(id).await.unwrap().unwrap();
        assert_eq!(row.command, Some(InboxCommand::Pause));
        assert!(row.answered_at.is_some(), "the confirmation is its answer");
        assert!(store.unanswered_inbox(10).await.unwrap().is_empty());
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn an_answer_is_queued_once_and_only_for_a_finished_task(store: Store) {
        let r = store
            .record_inbox(
                Place::Mail(&place(2)),
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
            store.unanswered_inbox(10).await.unwrap().is_empty(),
            "still pending"
        );
        let done = TaskOutcome {
            state: TaskState::Succeeded,
            answer: Some("hello".into()),
            error: None,
            reason: None,
            parse_failures: 0,
            prompt_tokens: 0,
            completion_tokens: 0,
        };
        store.finish_task(&task_id, &done).await.unwrap();
        let waiting = store.unanswered_inbox(10).await.unwrap();
        assert_eq!(waiting.len(), 1);
        assert_eq!(waiting[0].1.answer.as_deref(), Some("hello"));
        let first = store
            .answer_inbox(id, Some(&reply_to("me@example.org")))
            .await
            .unwrap();
        let second = store
            .answer_inbox(id, Some(&reply_to("me@example.org")))
            .await
            .unwrap();
        assert!(first.is_some());
        assert_eq!(second, None, "a second answer is not queued");
        let notices = store
            .list_notices(&NoticeFilter::oldest_first())
            .await
            .unwrap();
        assert_eq!(notices.len(), 1, "the second attempt left nothing behind");
        assert!(store.unanswered_inbox(10).await.unwrap().is_empty());
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
        let Recorded::New { id, .. } = store
            .record_inbox(Place::Mail(&place(4)), &mail("m4@example.org"), &outcome)
            .await
            .unwrap()
        else {
            panic!("not recorded")
        };
        let requested = store.inbox_commands(CommandState::Requested).await.unwrap();
        assert_eq!(requested.len(), 1);
        let claim = || {
            store.move_inbox_command(
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
        let run = store
            .create_task(&NewTask {
                task: "news".into(),
                origin: Origin::Job,
                profile: "fast".into(),
                ..NewTask::default()
            })
            .await
            .unwrap();
        assert!(
            store
                .move_inbox_command(
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
        let row = store.inbox_message(id).await.unwrap().unwrap();
        assert_eq!(row.command_state, Some(CommandState::Done));
        assert_eq!(row.task_id.as_deref(), Some(run.id.as_str()));
        assert!(row.reply_notice_id.is_some() && row.answered_at.is_some());
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_notice_is_found_by_its_token_and_tokens_differ(store: Store) {
        let a = store.enqueue_notice(&reply_to("a@x")).await.unwrap();
        let b = store.enqueue_notice(&reply_to("b@x")).await.unwrap();
        let ta = store.notice(a).await.unwrap().unwrap().token.unwrap();
        let tb = store.notice(b).await.unwrap().unwrap().token.unwrap();
        assert_ne!(ta, tb);
        assert_eq!(ta.len(), 32);
        assert!(ta.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_eq!(
            store.notice_by_token(&ta).await.unwrap().map(|n| n.id),
            Some(a)
        );
        assert_eq!(
            store
                .notice_by_token("0".repeat(32).as_str())
                .await
                .unwrap(),
            None
        );
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn the_rate_limit_counts_one_senders_tasks_in_the_window(store: Store) {
        for uid in 1..=3 {
            store
                .record_inbox(
                    Place::Mail(&place(uid)),
                    &mail(&format!("m{uid}@x")),
                    &task_outcome("t"),
                )
                .await
                .unwrap();
        }
        let ignored = InboxOutcome::Ignored {
            reason: IgnoreReason::NotAllowed,
            notice_id: None,
            job_id: None,
            reply: None,
        };
        store
            .record_inbox(Place::Mail(&place(9)), &mail("m9@x"), &ignored)
            .await
            .unwrap();
        let hour_ago = now() - chrono::Duration::hours(1);
        assert_eq!(
            store
                .inbox_tasks_since(Channel::Email, "me@example.org", hour_ago)
                .await
                .unwrap(),
            3
        );
        assert_eq!(
            store
                .inbox_tasks_since(Channel::Email, "other@x", hour_ago)
                .await
                .unwrap(),
            0
        );
        assert_eq!(
            store
                .inbox_tasks_since(Channel::Email, "me@example.org", now())
                .await
                .unwrap(),
            0
        );
        let listed = store
            .list_inbox(&InboxFilter {
                state: Some(InboxState::Ignored),
                limit: 0,
                ..InboxFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].reason, Some(IgnoreReason::NotAllowed));
        let json = serde_json::to_value(&listed[0]).unwrap();
        assert_eq!(json["from"], "me@example.org");
        assert_eq!(json["reason"], "not_allowed");
        assert!(json.get("context").is_none() && json.get("mailbox").is_none());
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn one_node_holds_a_chat_channel_and_a_node_past_its_lease_records_nothing(store: Store) {
        let lease = chrono::Duration::seconds(30);
        let a = store.clone().with_node("node-a");
        let b = store.clone().with_node("node-b");
        a.join_cluster("host-a", 1, None, lease).await.unwrap();
        b.join_cluster("host-b", 2, None, lease).await.unwrap();
        assert!(a.hold_channel(Channel::Matrix).await.unwrap());
        assert!(a.hold_channel(Channel::Matrix).await.unwrap(), "kept");
        assert!(
            !b.hold_channel(Channel::Matrix).await.unwrap(),
            "a holds it"
        );
        let chat = |event: &str| NewInboxMessage {
            channel: Channel::Matrix,
            room: Some("!r:x".into()),
            thread_root: Some(event.into()),
            message_id: Some(event.into()),
            sender: "@me:x".into(),
            subject: "hi".into(),
            ..NewInboxMessage::default()
        };
        let account = Place::Chat("matrix:@hermes:x");
        let first = a
            .record_inbox(account, &chat("$1"), &task_outcome("hi"))
            .await
            .unwrap();
        assert!(matches!(first, Recorded::New { .. }));
        // b may not record while a holds the channel.
        let refused = b
            .record_inbox(account, &chat("$2"), &task_outcome("hi"))
            .await
            .unwrap_err();
        assert!(matches!(refused, StoreError::Fenced(_)), "{refused}");
        // a falls silent past its lease and is revoked: b takes over, a's records are refused.
        let since = now() + chrono::Duration::minutes(1);
        assert!(b.revoke_node("node-a", since).await.unwrap());
        assert!(b.hold_channel(Channel::Matrix).await.unwrap(), "taken over");
        let late = a
            .record_inbox(account, &chat("$3"), &task_outcome("hi"))
            .await
            .unwrap_err();
        assert!(matches!(late, StoreError::Fenced(_)), "{late}");
        let second = b
            .record_inbox(account, &chat("$2"), &task_outcome("hi"))
            .await
            .unwrap();
        assert!(matches!(second, Recorded::New { .. }));
        // Chat rows number themselves per account.
        let rows = store
            .list_inbox(&InboxFilter {
                channel: Some(Channel::Matrix),
                ..InboxFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(rows.len(), 2);
        assert!(store.any_inbox_message(Channel::Matrix).await.unwrap());
        assert!(!store.any_inbox_message(Channel::Email).await.unwrap());
        // The cursor is per key (device).
        b.set_channel_cursor("matrix/DEV", "s1").await.unwrap();
        b.set_channel_cursor("matrix/DEV", "s2").await.unwrap();
        assert_eq!(
            b.channel_cursor("matrix/DEV").await.unwrap().as_deref(),
            Some("s2")
        );
        assert_eq!(b.channel_cursor("matrix/OTHER").await.unwrap(), None);
        // A new device reads back to where any device of the channel got.
        assert_eq!(
            b.newest_channel_cursor("matrix/").await.unwrap().as_deref(),
            Some("s2")
        );
        assert_eq!(b.newest_channel_cursor("telegram/").await.unwrap(), None);
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_chat_event_recorded_undecryptable_is_replaced_once_read(store: Store) {
        let event = NewInboxMessage {
            channel: Channel::Matrix,
            room: Some("!r:x".into()),
            thread_root: Some("$e".into()),
            message_id: Some("$e".into()),
            sender: "@me:x".into(),
            subject: "hi".into(),
            ..NewInboxMessage::default()
        };
        let account = Place::Chat("matrix:@hermes:x");
        let undecryptable = InboxOutcome::Ignored {
            reason: IgnoreReason::Undecryptable,
            notice_id: None,
            job_id: None,
            reply: None,
        };
        let first = store
            .record_inbox(account, &event, &undecryptable)
            .await
            .unwrap();
        assert!(matches!(first, Recorded::New { .. }));
        // Seen again still undecryptable: the same record.
        let again = store
            .record_inbox(account, &event, &undecryptable)
            .await
            .unwrap();
        assert!(matches!(again, Recorded::Seen));
        // Its key came: the record becomes the task, in one write.
        let read = store
            .record_inbox(account, &event, &task_outcome("hi"))
            .await
            .unwrap();
        assert!(matches!(read, Recorded::New { .. }));
        let rows = store.list_inbox(&InboxFilter::default()).await.unwrap();
        assert_eq!(rows.len(), 1, "{rows:#?}");
        assert_eq!(rows[0].reason, None);
        assert!(rows[0].task_id.is_some());
        // Once acted on, it is never replaced again.
        let late = store
            .record_inbox(account, &event, &task_outcome("hi"))
            .await
            .unwrap();
        assert!(matches!(late, Recorded::Seen));
    }
);
