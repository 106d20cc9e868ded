//! Chat channels in the inbox: one node holds a channel, and an event first unreadable is
//! recorded again once read.

use super::tests::task_outcome;
use super::*;
use crate::StoreError;

on_both_engines!(
    Memory,
    tokio::test,
    async fn one_node_holds_a_chat_channel_and_a_node_past_its_lease_records_nothing(store: Store) {
        let (a, b) = crate::testing::two_nodes(&store).await;
        assert!(a.chat().hold_channel(Channel::Matrix).await.unwrap());
        assert!(
            a.chat().hold_channel(Channel::Matrix).await.unwrap(),
            "kept"
        );
        assert!(
            !b.chat().hold_channel(Channel::Matrix).await.unwrap(),
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
        // `event` as `node` takes it in, asking for a task.
        let record = |node: &crate::Store, event: &str| {
            let (node, message) = (node.clone(), chat(event));
            async move {
                let outcome = task_outcome("hi");
                node.inbox().record(account, &message, &outcome).await
            }
        };
        let first = record(&a, "$1").await.unwrap();
        assert!(matches!(first, Recorded::New { .. }));
        // b may not record while a holds the channel.
        let refused = record(&b, "$2").await.unwrap_err();
        assert!(matches!(refused, StoreError::Fenced(_)), "{refused}");
        // a falls silent past its lease and is revoked: b takes over, a's records are refused.
        let since = now() + chrono::Duration::minutes(1);
        assert!(b.nodes().revoke("node-a", since).await.unwrap());
        assert!(
            b.chat().hold_channel(Channel::Matrix).await.unwrap(),
            "taken over"
        );
        let late = record(&a, "$3").await.unwrap_err();
        assert!(matches!(late, StoreError::Fenced(_)), "{late}");
        let second = record(&b, "$2").await.unwrap();
        assert!(matches!(second, Recorded::New { .. }));
        // Chat rows number themselves per account.
        let rows = store
            .inbox()
            .list(&InboxFilter {
                channel: Some(Channel::Matrix),
                ..InboxFilter::default()
            })
            .await
            .unwrap();
        assert_eq!(rows.len(), 2);
        assert!(store.inbox().any(Channel::Matrix).await.unwrap());
        assert!(!store.inbox().any(Channel::Email).await.unwrap());
        // The cursor is per key (device).
        b.chat().set_cursor("matrix/DEV", "s1").await.unwrap();
        b.chat().set_cursor("matrix/DEV", "s2").await.unwrap();
        assert_eq!(
            b.chat().cursor("matrix/DEV").await.unwrap().as_deref(),
            Some("s2")
        );
        assert_eq!(b.chat().cursor("matrix/OTHER").await.unwrap(), None);
        // A new device reads back to where any device of the channel got.
        assert_eq!(
            b.chat().newest_cursor("matrix/").await.unwrap().as_deref(),
            Some("s2")
        );
        assert_eq!(b.chat().newest_cursor("telegram/").await.unwrap(), None);
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
            .inbox()
            .record(account, &event, &undecryptable)
            .await
            .unwrap();
        assert!(matches!(first, Recorded::New { .. }));
        // Seen again still undecryptable: the same record.
        let again = store
            .inbox()
            .record(account, &event, &undecryptable)
            .await
            .unwrap();
        assert!(matches!(again, Recorded::Seen));
        // Read now, it is not known yet: only as undecryptable.
        let inbox = store.inbox();
        assert!(inbox.seen(account, &event).await.unwrap());
        let besides = inbox.seen_besides(account, &event, IgnoreReason::Undecryptable);
        assert!(!besides.await.unwrap());
        // Its key came: the record becomes the task, in one write.
        let read = store
            .inbox()
            .record_replacing(
                account,
                &event,
                &task_outcome("hi"),
                IgnoreReason::Undecryptable,
            )
            .await
            .unwrap();
        assert!(matches!(read, Recorded::New { .. }));
        let rows = store.inbox().list(&InboxFilter::default()).await.unwrap();
        assert_eq!(rows.len(), 1, "{rows:#?}");
        assert_eq!(rows[0].reason, None);
        assert!(rows[0].task_id.is_some());
        let besides = inbox.seen_besides(account, &event, IgnoreReason::Undecryptable);
        assert!(besides.await.unwrap());
        // Once acted on, it is never replaced again.
        let late = store
            .inbox()
            .record(account, &event, &task_outcome("hi"))
            .await
            .unwrap();
        assert!(matches!(late, Recorded::Seen));
    }
);
