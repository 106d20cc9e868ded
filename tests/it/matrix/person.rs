//! A person on Matrix, for tests: a second, independent `matrix-sdk` client with end-to-end
//! encryption (its own device, its own SQLite stores in a temp dir) that sends what a human
//! would — texts, replies, thread replies, reactions, invites — and keeps everything it
//! receives, decrypted, for the test to wait on.
//!
//! Keys flow both ways without anyone verifying anything: matrix-sdk 0.18 shares room keys with
//! every (unblacklisted) device of the room's joined and invited members by default
//! (`CollectStrategy::AllDevices`) and decrypts from unverified devices by default
//! (`TrustRequirement::Untrusted`), which is what a fresh bot and a fresh person need. (Those two
//! types live in `matrix-sdk-crypto`, which matrix-sdk does not re-export, so they cannot be named
//! here; the defaults are exactly them.)

use super::server::Synapse;
use matrix_sdk::config::{RequestConfig, SyncSettings};
use matrix_sdk::deserialized_responses::EncryptionInfo;
use matrix_sdk::ruma::events::MessageLikeEventContent;
use matrix_sdk::ruma::events::reaction::{OriginalSyncReactionEvent, ReactionEventContent};
use matrix_sdk::ruma::events::relation::{Annotation, InReplyTo, Reply, Thread};
use matrix_sdk::ruma::events::room::encrypted::{
    EncryptedEventScheme, OriginalSyncRoomEncryptedEvent,
};
use matrix_sdk::ruma::events::room::member::MembershipState;
use matrix_sdk::ruma::events::room::message::{
    MessageType, OriginalSyncRoomMessageEvent, Relation, ReplacementMetadata,
    RoomMessageEventContent,
};
use matrix_sdk::ruma::{EventId, OwnedEventId, OwnedRoomId, OwnedUserId, RoomId, UserId};
use matrix_sdk::{Client, Room};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A message as the person's client saw it, after decryption.
#[derive(Clone, Debug)]
pub struct Message {
    pub room_id: OwnedRoomId,
    pub event_id: OwnedEventId,
    pub sender: OwnedUserId,
    /// `m.text`, `m.notice`, `m.emote`, …
    pub msgtype: String,
    /// The plain body; for an edit, the new content's.
    pub body: String,
    /// `formatted_body` (HTML), for texts, notices and emotes that have one.
    pub formatted: Option<String>,
    /// The thread's root, when the message is in a thread (`rel_type: m.thread`).
    pub thread_root: Option<OwnedEventId>,
    /// The event a rich reply answers (`m.in_reply_to`) — inside a thread only when it is a
    /// genuine reply, not the fallback that points at the thread's latest event.
    pub reply_to: Option<OwnedEventId>,
    /// The event this one edits (`rel_type: m.replace`).
    pub replaces: Option<OwnedEventId>,
    /// Whether it arrived end-to-end encrypted (and was decrypted).
    pub encrypted: bool,
}

/// A reaction (`m.reaction`, an annotation) as the person's client saw it.
#[derive(Clone, Debug)]
pub struct Reaction {
    pub room_id: OwnedRoomId,
    pub event_id: OwnedEventId,
    pub sender: OwnedUserId,
    /// The event reacted to.
    pub relates_to: OwnedEventId,
    pub key: String,
    pub encrypted: bool,
}

/// An event the person's client could not decrypt (it is still `m.room.encrypted` when the
/// handlers run): a missing room key, a withheld one, a broken session.
#[derive(Clone, Debug)]
#[allow(dead_code, reason = "shown by Debug in a failing assertion")]
pub struct Undecryptable {
    pub room_id: OwnedRoomId,
    pub event_id: OwnedEventId,
    pub sender: OwnedUserId,
    pub session_id: Option<String>,
}

#[derive(Default)]
struct Seen {
    messages: Vec<Message>,
    reactions: Vec<Reaction>,
    undecryptable: Vec<Undecryptable>,
    /// The last sync's error, when the server was unreachable or refused.
    sync_error: Option<String>,
}

/// What the event handlers fill; `changed` ticks on every addition so waiters wake.
#[derive(Clone)]
struct Inbox {
    seen: Arc<Mutex<Seen>>,
    changed: Arc<watch::Sender<u64>>,
}

impl Inbox {
    fn add(&self, f: impl FnOnce(&mut Seen)) {
        f(&mut self.seen.lock().expect("the person's inbox lock"));
        self.changed.send_modify(|n| *n += 1);
    }
}

/// One person, logged in on their own device, syncing in the background until dropped.
pub struct Person {
    client: Client,
    user_id: OwnedUserId,
    inbox: Inbox,
    sync: tokio::task::JoinHandle<()>,
    _store: tempfile::TempDir,
}

/// Bound on each of the person's own requests (the server is on loopback).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a sync long-polls before the server answers empty.
const SYNC_TIMEOUT: Duration = Duration::from_secs(5);

impl Person {
    /// Log in as `user_id` (full id or localpart) with a password, on a new device, and sync
    /// once — which uploads the device's keys, so others can encrypt to it from now on — before
    /// syncing on in the background.
    pub async fn login(server: &Synapse, user_id: &str, password: &str) -> Person {
        let store = tempfile::tempdir().expect("a temp dir for the person's stores");
        let client = Client::builder()
            .homeserver_url(server.url())
            .sqlite_store(store.path(), None)
            // Retried a little, not forever (the default): a test that stops the server must
            // see the person's request fail, not hang.
            .request_config(RequestConfig::short_retry().timeout(REQUEST_TIMEOUT))
            .build()
            .await
            .expect("build the person's Matrix client");
        let login = client
            .matrix_auth()
            .login_username(user_id, password)
            .initial_device_display_name("test person")
            .await
            .unwrap_or_else(|e| panic!("{user_id} cannot log in to {}: {e}", server.url()));
        let user_id = login.user_id;

        let inbox = Inbox {
            seen: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
        };
        add_handlers(&client, &inbox);
        // No long poll: the first sync only fetches the state, and the keys go up after it.
        client
            .sync_once(SyncSettings::new().timeout(Duration::ZERO))
            .await
            .unwrap_or_else(|e| panic!("{user_id}'s first sync failed: {e}"));
        let sync = tokio::spawn(sync_forever(client.clone(), inbox.clone()));
        Person {
            client,
            user_id,
            inbox,
            sync,
            _store: store,
        }
    }

    pub fn user_id(&self) -> &UserId {
        &self.user_id
    }

    /// The underlying client, for what this type has no method for.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// A direct, end-to-end encrypted room with `other`, who is invited: `m.room.encryption`
    /// in the initial state, `is_direct`, the trusted-private-chat preset, and the room marked
    /// as a DM in the person's `m.direct` (matrix-sdk's `create_dm`).
    pub async fn create_dm(&self, other: &UserId) -> OwnedRoomId {
        let room =
            self.client.create_dm(other).await.unwrap_or_else(|e| {
                panic!("{} cannot create a DM with {other}: {e}", self.user_id)
            });
        room.room_id().to_owned()
    }

    /// A direct room with `other` made without encryption (as some clients and bridges do).
    pub async fn create_plain_dm(&self, other: &UserId) -> OwnedRoomId {
        use matrix_sdk::ruma::api::client::room::create_room::v3::{Request, RoomPreset};
        let mut request = Request::new();
        request.invite = vec![other.to_owned()];
        request.is_direct = true;
        request.preset = Some(RoomPreset::TrustedPrivateChat);
        let room = self.client.create_room(request).await.unwrap_or_else(|e| {
            panic!(
                "{} cannot create a plain DM with {other}: {e}",
                self.user_id
            )
        });
        room.room_id().to_owned()
    }

    /// Join a room the person is invited to (or a public one).
    pub async fn join(&self, room_id: &RoomId) {
        self.client
            .join_room_by_id(room_id)
            .await
            .unwrap_or_else(|e| panic!("{} cannot join {room_id}: {e}", self.user_id));
    }

    #[allow(dead_code, reason = "for the channel's group-room tests")]
    pub async fn invite(&self, room_id: &RoomId, user_id: &UserId) {
        self.room(room_id)
            .invite_user_by_id(user_id)
            .await
            .unwrap_or_else(|e| {
                panic!("{} cannot invite {user_id} to {room_id}: {e}", self.user_id)
            });
    }

    /// Send any message-like content (encrypted, the room being so); returns its event id.
    pub async fn send(
        &self,
        room_id: &RoomId,
        content: impl MessageLikeEventContent,
    ) -> OwnedEventId {
        self.room(room_id)
            .send(content)
            .await
            .unwrap_or_else(|e| panic!("{} cannot send to {room_id}: {e}", self.user_id))
            .response
            .event_id
    }

    /// A plain `m.text` message.
    pub async fn send_text(&self, room_id: &RoomId, text: &str) -> OwnedEventId {
        self.send(room_id, RoomMessageEventContent::text_plain(text))
            .await
    }

    /// A text in the thread rooted at `root`, as Element sends one from the thread panel:
    /// `rel_type: m.thread` with the reply fallback pointing at the root.
    pub async fn send_in_thread(
        &self,
        room_id: &RoomId,
        root: &EventId,
        text: &str,
    ) -> OwnedEventId {
        let mut content = RoomMessageEventContent::text_plain(text);
        content.relates_to = Some(Relation::Thread(Thread::plain(
            root.to_owned(),
            root.to_owned(),
        )));
        self.send(room_id, content).await
    }

    /// A rich reply (`m.in_reply_to`) to `event_id`, outside any thread.
    pub async fn send_reply(
        &self,
        room_id: &RoomId,
        event_id: &EventId,
        text: &str,
    ) -> OwnedEventId {
        let mut content = RoomMessageEventContent::text_plain(text);
        content.relates_to = Some(Relation::Reply(Reply::new(InReplyTo::new(
            event_id.to_owned(),
        ))));
        self.send(room_id, content).await
    }

    /// Edit the person's own message `event_id` to read `text` (`rel_type: m.replace`).
    pub async fn edit(&self, room_id: &RoomId, event_id: &EventId, text: &str) -> OwnedEventId {
        let content = RoomMessageEventContent::text_plain(text)
            .make_replacement(ReplacementMetadata::new(event_id.to_owned(), None));
        self.send(room_id, content).await
    }

    /// React to `event_id` with `key` (an emoji, usually). matrix-sdk sends reactions
    /// unencrypted, even in an encrypted room.
    pub async fn react(&self, room_id: &RoomId, event_id: &EventId, key: &str) -> OwnedEventId {
        let content =
            ReactionEventContent::new(Annotation::new(event_id.to_owned(), key.to_owned()));
        self.send(room_id, content).await
    }

    /// Every message received so far (the person's own included: they come down the sync
    /// too), in arrival order.
    pub fn messages(&self) -> Vec<Message> {
        self.seen(|s| s.messages.clone())
    }

    pub fn reactions(&self) -> Vec<Reaction> {
        self.seen(|s| s.reactions.clone())
    }

    /// Every event received that could not be decrypted; a healthy exchange has none.
    pub fn undecryptable(&self) -> Vec<Undecryptable> {
        self.seen(|s| s.undecryptable.clone())
    }

    /// The first message received (already, or within `timeout`) that matches; panics with
    /// everything received so far when none does.
    pub async fn wait_for(&self, timeout: Duration, matches: impl Fn(&Message) -> bool) -> Message {
        self.wait(timeout, "a matching message", |s| {
            s.messages.iter().find(|m| matches(m)).cloned()
        })
        .await
    }

    /// The first reaction received (already, or within `timeout`) that matches.
    pub async fn wait_for_reaction(
        &self,
        timeout: Duration,
        matches: impl Fn(&Reaction) -> bool,
    ) -> Reaction {
        self.wait(timeout, "a matching reaction", |s| {
            s.reactions.iter().find(|r| matches(r)).cloned()
        })
        .await
    }

    /// Wait until the person's client knows `device` of `user_id` (a device that logged in
    /// since): what they send from then on is encrypted for it too.
    pub async fn wait_for_device(&self, timeout: Duration, user_id: &UserId, device: &str) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(devices) = self.client.encryption().get_user_devices(user_id).await
                && devices.devices().any(|d| d.device_id().as_str() == device)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} never learned {user_id}'s device {device} within {timeout:?}",
                self.user_id
            );
            // Device lists change through the person's own sync loop: poll.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Wait until the person's client knows `user_id` as joined to `room_id` (say, the bot
    /// accepted the invite).
    pub async fn wait_for_join(&self, timeout: Duration, room_id: &RoomId, user_id: &UserId) {
        let deadline = Instant::now() + timeout;
        let mut changed = self.inbox.changed.subscribe();
        loop {
            if let Some(room) = self.client.get_room(room_id)
                && let Ok(Some(member)) = room.get_member_no_sync(user_id).await
                && *member.membership() == MembershipState::Join
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} never saw {user_id} join {room_id} within {timeout:?}",
                self.user_id
            );
            // Membership comes with syncs, which tick `changed` only when they carry a message:
            // poll too.
            let _ = tokio::time::timeout(Duration::from_millis(100), changed.changed()).await;
        }
    }

    fn room(&self, room_id: &RoomId) -> Room {
        self.client.get_room(room_id).unwrap_or_else(|| {
            panic!(
                "{} does not know the room {room_id} (not created, joined or synced yet)",
                self.user_id
            )
        })
    }

    fn seen<T>(&self, f: impl FnOnce(&Seen) -> T) -> T {
        f(&self.inbox.seen.lock().expect("the person's inbox lock"))
    }

    async fn wait<T>(&self, timeout: Duration, what: &str, find: impl Fn(&Seen) -> Option<T>) -> T {
        let deadline = tokio::time::Instant::now() + timeout;
        // Subscribed before looking, so an addition between the look and the wait still wakes.
        let mut changed = self.inbox.changed.subscribe();
        loop {
            if let Some(found) = self.seen(&find) {
                return found;
            }
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                let (messages, reactions, utd, error) = self.seen(|s| {
                    (
                        s.messages.clone(),
                        s.reactions.clone(),
                        s.undecryptable.clone(),
                        s.sync_error.clone(),
                    )
                });
                panic!(
                    "{} received no {what} within {timeout:?}.\nmessages: {messages:#?}\n\
                     reactions: {reactions:#?}\nundecryptable: {utd:#?}\nlast sync error: {error:?}",
                    self.user_id
                );
            }
        }
    }
}

impl Drop for Person {
    fn drop(&mut self) {
        self.sync.abort();
    }
}

/// Sync until aborted. Errors (the server stopped, say) are kept for a failing wait's message
/// and retried shortly: the person comes back when the server does.
async fn sync_forever(client: Client, inbox: Inbox) {
    loop {
        match client
            .sync_once(SyncSettings::new().timeout(SYNC_TIMEOUT))
            .await
        {
            Ok(_) => {
                if inbox.seen.lock().is_ok_and(|s| s.sync_error.is_some()) {
                    inbox.add(|s| s.sync_error = None);
                }
            }
            Err(e) => {
                inbox.add(|s| s.sync_error = Some(e.to_string()));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn add_handlers(client: &Client, inbox: &Inbox) {
    let to = inbox.clone();
    client.add_event_handler(
        move |ev: OriginalSyncRoomMessageEvent, room: Room, enc: Option<EncryptionInfo>| {
            let to = to.clone();
            async move {
                let message = message(ev, room.room_id().to_owned(), enc.is_some());
                to.add(|s| s.messages.push(message));
            }
        },
    );
    let to = inbox.clone();
    client.add_event_handler(
        move |ev: OriginalSyncReactionEvent, room: Room, enc: Option<EncryptionInfo>| {
            let to = to.clone();
            async move {
                let reaction = Reaction {
                    room_id: room.room_id().to_owned(),
                    event_id: ev.event_id,
                    sender: ev.sender,
                    relates_to: ev.content.relates_to.event_id,
                    key: ev.content.relates_to.key,
                    encrypted: enc.is_some(),
                };
                to.add(|s| s.reactions.push(reaction));
            }
        },
    );
    // The SDK hands decrypted events to the handlers of their real type; what is still
    // `m.room.encrypted` here failed to decrypt.
    let to = inbox.clone();
    client.add_event_handler(move |ev: OriginalSyncRoomEncryptedEvent, room: Room| {
        let to = to.clone();
        async move {
            let session_id = match &ev.content.scheme {
                EncryptedEventScheme::MegolmV1AesSha2(c) => Some(c.session_id.clone()),
                _ => None,
            };
            let utd = Undecryptable {
                room_id: room.room_id().to_owned(),
                event_id: ev.event_id,
                sender: ev.sender,
                session_id,
            };
            to.add(|s| s.undecryptable.push(utd));
        }
    });
}

fn message(ev: OriginalSyncRoomMessageEvent, room_id: OwnedRoomId, encrypted: bool) -> Message {
    let (mut thread_root, mut reply_to, mut replaces) = (None, None, None);
    let mut msgtype = ev.content.msgtype;
    match ev.content.relates_to {
        Some(Relation::Thread(t)) => {
            thread_root = Some(t.event_id);
            if !t.is_falling_back {
                reply_to = t.in_reply_to.map(|r| r.event_id);
            }
        }
        Some(Relation::Reply(r)) => reply_to = Some(r.in_reply_to.event_id),
        Some(Relation::Replacement(r)) => {
            replaces = Some(r.event_id);
            msgtype = r.new_content.msgtype;
        }
        _ => {}
    }
    let formatted = match &msgtype {
        MessageType::Text(c) => c.formatted.as_ref(),
        MessageType::Notice(c) => c.formatted.as_ref(),
        MessageType::Emote(c) => c.formatted.as_ref(),
        _ => None,
    }
    .map(|f| f.body.clone());
    Message {
        room_id,
        event_id: ev.event_id,
        sender: ev.sender,
        msgtype: msgtype.msgtype().to_owned(),
        body: msgtype.body().to_owned(),
        formatted,
        thread_root,
        reply_to,
        replaces,
        encrypted,
    }
}
