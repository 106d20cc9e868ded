//! Recording mail: once, with what it became and the watermark, in one transaction. The
//! fixtures here serve the other inbox tests too (`inbox_reply_tests.rs`,
//! `inbox_chat_tests.rs`).

use super::*;
use crate::{NewTask, Origin, Store, TaskState};

pub(super) fn place(uid: u32) -> MailPlace {
    MailPlace {
        mailbox: "agent@imap.test:993/INBOX".into(),
        uid_validity: 7,
        uid,
    }
}

pub(super) fn mail(message_id: &str) -> NewInboxMessage {
    NewInboxMessage {
        message_id: Some(message_id.into()),
        digest: None,
        sender: "me@example.org".into(),
        subject: "Re: Daily digest".into(),
        refs: Some(format!("d1@x {message_id}")),
        ..NewInboxMessage::default()
    }
}

pub(super) fn task_outcome(text: &str) -> InboxOutcome {
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

/// `message`, read at `place` in a mailbox, recorded as `outcome`.
pub(super) async fn record_mail(
    store: &Store,
    place: &MailPlace,
    message: &NewInboxMessage,
    outcome: &InboxOutcome,
) -> Result<Recorded> {
    store
        .inbox()
        .record(Place::Mail(place), message, outcome)
        .await
}

async fn tasks_of(store: &Store) -> Vec<Task> {
    store
        .tasks()
        .list(&crate::TaskFilter::default())
        .await
        .unwrap()
}

on_both_engines!(
    Memory,
    tokio::test,
    async fn a_message_is_recorded_once_with_its_task_and_the_watermark(store: Store) {
        let first = record_mail(
            &store,
            &place(5),
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
        let row = store.inbox().get(id).await.unwrap().unwrap();
        assert_eq!(row.state, InboxState::Acted);
        assert_eq!(row.task_id, task_id);
        assert_eq!(
            store
                .inbox()
                .context(&tasks[0].id)
                .await
                .unwrap()
                .as_deref(),
            Some("Subject: Daily digest\n\n- one")
        );
        let marks = store.inbox().watermarks(&place(5).mailbox).await.unwrap();
        assert_eq!((marks[0].uid_validity, marks[0].last_uid), (7, 5));

        // The same UID again (a reconnect), or the same Message-ID under another UID (the
        // mailbox renumbered): nothing new, but the watermark moves on.
        for (uid, id) in [(5, "other@example.org"), (9, "m1@example.org")] {
            let again = record_mail(
                &store,
                &place(uid),
                &mail(id),
                &task_outcome("more on item 2"),
            )
            .await
            .unwrap();
            assert!(matches!(again, Recorded::Seen), "{again:?}");
        }
        assert_eq!(tasks_of(&store).await.len(), 1);
        let marks = store.inbox().watermarks(&place(5).mailbox).await.unwrap();
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
        let first = record_mail(&store, &place(5), &anonymous("d1"), &task_outcome("do it"))
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
                .inbox()
                .seen(Place::Mail(&renumbered), &anonymous("d1"))
                .await
                .unwrap()
        );
        let again = record_mail(
            &store,
            &renumbered,
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
                .inbox()
                .seen(Place::Mail(&next), &anonymous("d2"))
                .await
                .unwrap()
        );
        let other = record_mail(&store, &next, &anonymous("d2"), &task_outcome("do that"))
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
        let err = record_mail(
            &store,
            &place(3),
            &mail("m1@example.org"),
            &task_outcome("do it"),
        )
        .await;
        assert!(err.is_err());
        assert!(tasks_of(&store).await.is_empty());
        assert!(
            store
                .inbox()
                .watermarks(&place(3).mailbox)
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
        let again = record_mail(
            &store,
            &place(3),
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
        store.inbox().start_watermark(&place(40)).await.unwrap();
        store.inbox().start_watermark(&place(12)).await.unwrap();
        let marks = store.inbox().watermarks(&place(0).mailbox).await.unwrap();
        assert_eq!(marks.len(), 1);
        assert_eq!(marks[0].last_uid, 40);
    }
);

on_both_engines!(
    Memory,
    tokio::test,
    async fn the_rate_limit_counts_one_senders_tasks_in_the_window(store: Store) {
        for uid in 1..=3 {
            record_mail(
                &store,
                &place(uid),
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
        record_mail(&store, &place(9), &mail("m9@x"), &ignored)
            .await
            .unwrap();
        let hour_ago = now() - chrono::Duration::hours(1);
        let counts = [
            ("me@example.org", hour_ago, 3),
            ("other@x", hour_ago, 0),
            ("me@example.org", now(), 0),
        ];
        for (sender, since, tasks) in counts {
            let inbox = store.inbox();
            let counted = inbox.tasks_since(Channel::Email, sender, since).await;
            assert_eq!(counted.unwrap(), tasks, "{sender} since {since}");
        }
        let listed = store
            .inbox()
            .list(&InboxFilter {
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
