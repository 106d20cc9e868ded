//! The inbox's side of chat messages, on a real store: what a message becomes when the same
//! event comes again, undecryptable first and readable once its key arrives.

use super::chat::{ChatKind, ChatMessage};
use super::{Finished, Handoff, Inbox};
use crate::agent::{ApprovalError, Decision};
use crate::scheduler::SchedulerError;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::{self, BoxStream};
use hermes_config::{MatrixSettings, Settings};
use hermes_store::{Approval, Channel, InboxState, Job, Store};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const PERSON: &str = "@alice:example.org";
const EVENT: &str = "$late-key";

/// The inbox's hand-over, counting the tasks it is told of; nothing else is asked of it here.
#[derive(Default)]
struct Counted {
    queued: AtomicUsize,
}

impl Handoff for Counted {
    fn task_queued(&self) {
        self.queued.fetch_add(1, Ordering::SeqCst);
    }
    fn jobs_changed(&self) {}
    fn notices_queued(&self) {}
    fn resumed_next_run(&self, _job: &Job) -> Option<DateTime<Utc>> {
        None
    }
    fn run_now<'a>(&'a self, job_id: &'a str) -> BoxFuture<'a, Result<String, SchedulerError>> {
        Box::pin(async move { Err(SchedulerError::NotFound(job_id.to_string())) })
    }
    fn decide_approval<'a>(
        &'a self,
        id: &'a str,
        _decision: Decision,
        _by: &'a str,
    ) -> BoxFuture<'a, Result<Approval, ApprovalError>> {
        Box::pin(async move { Err(ApprovalError::NotFound(id.to_string())) })
    }
    fn finished(&self) -> BoxStream<'static, Finished> {
        Box::pin(stream::empty())
    }
}

async fn matrix_inbox() -> (Inbox, Store, Arc<Counted>) {
    let store = Store::open_in_memory().await.expect("store");
    let mut settings = Settings::default();
    settings.channels.matrix = Some(MatrixSettings {
        homeserver: "http://127.0.0.1:1".into(),
        user: "@hermes:example.org".into(),
        password: "secret".into(),
        allow_from: vec![PERSON.into()],
        ..MatrixSettings::default()
    });
    let handoff = Arc::new(Counted::default());
    let inbox = Inbox::new(&settings, store.clone(), handoff.clone());
    (inbox, store, handoff)
}

fn said(kind: ChatKind) -> ChatMessage {
    ChatMessage {
        channel: Channel::Matrix,
        event_id: EVENT.into(),
        room: "!room:example.org".into(),
        sender: PERSON.into(),
        thread_root: None,
        reply_to: None,
        addressed: true,
        plain_in_encrypted_room: false,
        kind,
    }
}

#[tokio::test]
async fn a_message_read_once_its_key_came_becomes_a_task() {
    let (inbox, store, handoff) = matrix_inbox().await;
    let locked = said(ChatKind::Undecryptable("no key yet".into()));
    assert!(inbox.take_in_chat(&locked).await.expect("take in"));
    // The same event seen again, still without its key: nothing new.
    assert!(!inbox.take_in_chat(&locked).await.expect("take in"));

    let read = said(ChatKind::Text("what is on my calendar today?".into()));
    assert!(
        inbox.take_in_chat(&read).await.expect("take in"),
        "the decrypted event must replace its undecryptable record"
    );
    let row = store
        .inbox()
        .by_message_id(EVENT)
        .await
        .expect("read")
        .expect("recorded");
    assert_eq!(row.state, InboxState::Acted);
    assert!(row.task_id.is_some(), "{row:?}");
    assert_eq!(handoff.queued.load(Ordering::SeqCst), 1);

    // And once read, the event is known: a replay does nothing more.
    assert!(!inbox.take_in_chat(&read).await.expect("take in"));
    assert_eq!(handoff.queued.load(Ordering::SeqCst), 1);
}
