//! The sync loop: connect (restore the session or log in), then `/sync` from the saved
//! position, long-polling; every event of a batch handed to the inbox (recorded by its id with
//! what it became), then the position saved. When anything fails the channel is marked down
//! and connects again after a backoff with jitter; nothing here ends the daemon.
//!
//! First start (no saved position): one sync without a position learns where the rooms are
//! now; what was said before is history and is not acted on. A room whose events since the
//! position outnumber one sync's timeline (the agent was away long) is read back page by page
//! to the first event already recorded, so nothing said meanwhile is lost.
//!
//! An event that arrives before its room key is recorded `undecryptable` (shown, never
//! dropped) and tried again after each sync for [`RETRY_DECRYPTION`]: once its key arrives,
//! the record is replaced by what the message really says.

use super::events::{self, RoomFacts};
use super::session::{self, SessionError};
use super::{Inner, State};
use crate::channels::{Feed, Retry};
use crate::inbox::{ChatKind, Inbox};
use hermes_config::MatrixSettings;
use hermes_store::{Channel, StoreError};
use matrix_sdk::config::SyncSettings;
use matrix_sdk::deserialized_responses::{TimelineEvent, TimelineEventKind};
use matrix_sdk::room::MessagesOptions;
use matrix_sdk::ruma::api::client::filter::FilterDefinition;
use matrix_sdk::ruma::api::client::sync::sync_events::v3::Filter;
use matrix_sdk::ruma::{OwnedRoomId, UInt};
use matrix_sdk::store::StateStoreDataKey;
use matrix_sdk::{Client, Room, RoomMemberships};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a sync waits on the server for something to happen.
const LONG_POLL: Duration = Duration::from_secs(30);
/// Events per room one sync brings; more since the position are read back by pages.
const TIMELINE: u32 = 50;
/// Pages read back in one room after a gap, at most (`TIMELINE` events each).
const BACKFILL_PAGES: usize = 20;
/// How long an undecryptable event is tried again, waiting for its key.
const RETRY_DECRYPTION: Duration = Duration::from_secs(600);

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub(super) enum Ended {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("the homeserver: {0}")]
    Sdk(#[from] matrix_sdk::Error),
    /// Recording failed: nothing was lost, the batch is read again.
    #[error("cannot record Matrix messages: {0}")]
    Store(#[from] StoreError),
    /// Another daemon on the same database took the channel over (this one's lease lapsed).
    #[error("another daemon reads the Matrix channel now")]
    Elsewhere,
}

impl Ended {
    fn retry(&self) -> Retry {
        match self {
            // A setting that is wrong will not fix itself.
            Ended::Session(s) if !s.is_transient() => Retry::Late,
            _ => Retry::Soon,
        }
    }
}

/// An event recorded undecryptable, tried again after each sync.
struct Pending {
    room: OwnedRoomId,
    event: TimelineEvent,
    since: Instant,
}

pub(super) async fn run(inner: Arc<Inner>, feed: Feed) {
    tracing::info!(homeserver = %inner.settings.homeserver, user = %inner.settings.user, "Matrix channel started");
    let connect = || connection(&inner, &feed);
    (inner.link)
        .keep_reading(&inner.store, &feed.stop, connect, Ended::retry, |_| false)
        .await;
}

/// One connection (the channel held): log in, then sync until something fails.
async fn connection(inner: &Inner, feed: &Feed) -> Result<std::convert::Infallible, Ended> {
    let (inbox, metrics) = (&feed.inbox, &feed.metrics);
    let client = session::connect(&inner.settings, &inner.dir).await?;
    let recovered = recover(&client, &inner.settings).await;
    inner
        .link
        .status
        .update(|s| s.protocol.recovery_failed = !recovered);
    let device = client.device_id().map(|d| d.to_string());
    let own = client
        .user_id()
        .map(|u| u.to_string())
        .unwrap_or_else(|| inner.settings.user.trim().to_string());
    // The position is the device's: a sync token also says which of this device's
    // to-device messages (room keys) were read.
    let key = format!("matrix/{}", device.as_deref().unwrap_or(""));
    let mut position = match inner.store.chat().cursor(&key).await? {
        Some(p) => p,
        None => first_sync(inner, inbox, metrics, &client, &own, &key).await?,
    };
    let mut pending: Vec<Pending> = Vec::new();
    // The SDK keeps the last sync token it processed and drops a response carrying it again
    // as "received twice". After a run cut short between the SDK's processing of a batch and
    // its records here (a kill -9), a sync from the saved position would come back empty and
    // the rest of that batch be lost: what lies between the two positions is read back first.
    if let Some(sdk) = sdk_position(&client).await
        && sdk != position
    {
        tracing::info!("the last Matrix batch was cut short; reading the rest of it back");
        catch_up(
            inner,
            inbox,
            metrics,
            &client,
            &own,
            (&position, &sdk),
            &mut pending,
        )
        .await?;
        inner.store.chat().set_cursor(&key, &sdk).await?;
        position = sdk;
    }
    inner.link.connected(client.clone());
    // The first sync of a connection does not wait on the server: the channel is ok as soon
    // as it has read what came meanwhile, not one long poll later.
    let mut wait = Duration::ZERO;
    loop {
        let settings = SyncSettings::default()
            .token(position.clone())
            .timeout(wait)
            .filter(filter());
        wait = LONG_POLL;
        let response = client.sync_once(settings).await?;
        if !inner.store.chat().hold_channel(Channel::Matrix).await? {
            return Err(Ended::Elsewhere);
        }
        inner.link.status.update(|s| {
            s.state = State::Ok;
            s.error = None;
            s.protocol.device = device.clone();
        });
        batch(
            inner,
            inbox,
            metrics,
            &client,
            &own,
            &response,
            Some(&position),
            &mut pending,
        )
        .await?;
        retry_decryption(inner, inbox, metrics, &client, &own, &mut pending).await?;
        inner
            .store
            .chat()
            .set_cursor(&key, &response.next_batch)
            .await?;
        position = response.next_batch;
    }
}

/// Every room's events of one sync response handed to the inbox (a room with a gap read back
/// first, to `since`: the position the last batch ended at), and the invites answered. A
/// read-back that fails ends the batch before its position is saved, so it is read again.
#[allow(clippy::too_many_arguments)]
async fn batch(
    inner: &Inner,
    inbox: &Inbox,
    metrics: &crate::metrics::Metrics,
    client: &Client,
    own: &str,
    response: &matrix_sdk::sync::SyncResponse,
    since: Option<&str>,
    pending: &mut Vec<Pending>,
) -> Result<(), Ended> {
    for (room_id, update) in &response.rooms.joined {
        let Some(room) = client.get_room(room_id) else {
            continue;
        };
        let mut timeline = update.timeline.events.clone();
        if update.timeline.limited
            && let Some(prev) = &update.timeline.prev_batch
        {
            let mut earlier = backfill(inner, &room, prev, since).await?;
            earlier.append(&mut timeline);
            timeline = earlier;
        }
        let direct = is_direct(&room).await;
        for event in &timeline {
            take_in(inner, inbox, metrics, &room, direct, own, event, pending).await?;
        }
    }
    for room_id in response.rooms.invited.keys() {
        if let Some(room) = client.get_room(room_id) {
            answer_invite(&inner.settings, &room).await;
        }
    }
    Ok(())
}

/// The first sync of this device: where the rooms are now. When the channel was never read
/// from this database, what was said before is history and is not acted on; when it was (by
/// another daemon, now gone), the rooms are read back to the first event already recorded.
/// Invites waiting are answered.
async fn first_sync(
    inner: &Inner,
    inbox: &Inbox,
    metrics: &crate::metrics::Metrics,
    client: &Client,
    own: &str,
    key: &str,
) -> Result<String, Ended> {
    let response = client
        .sync_once(SyncSettings::default().filter(filter()))
        .await?;
    if inner.store.inbox().any(Channel::Matrix).await? {
        tracing::info!(
            "first Matrix sync of this device: reading back to where the last reader got"
        );
        // Room events are ordered for the whole server, so another device's position bounds
        // what this one must read back.
        let since = inner.store.chat().newest_cursor("matrix/").await?;
        let mut pending = Vec::new();
        batch(
            inner,
            inbox,
            metrics,
            client,
            own,
            &response,
            since.as_deref(),
            &mut pending,
        )
        .await?;
    } else {
        for room_id in response.rooms.invited.keys() {
            if let Some(room) = client.get_room(room_id) {
                answer_invite(&inner.settings, &room).await;
            }
        }
        tracing::info!("first Matrix sync: what was said before now is not acted on");
    }
    inner
        .store
        .chat()
        .set_cursor(key, &response.next_batch)
        .await?;
    Ok(response.next_batch)
}

/// The sync token the SDK processed last (its own store's), if it synced before.
async fn sdk_position(client: &Client) -> Option<String> {
    client
        .state_store()
        .get_kv_data(StateStoreDataKey::SyncToken)
        .await
        .ok()
        .flatten()
        .and_then(|v| v.into_sync_token())
}

/// Every joined room's events between two sync positions (`from`, `to`), read forward through
/// `/messages` and handed to the inbox (those recorded already are known by their ids), at most
/// [`BACKFILL_PAGES`] pages a room. What a page cannot be read for is an error: the caller keeps
/// its position and reads the gap again.
async fn catch_up(
    inner: &Inner,
    inbox: &Inbox,
    metrics: &crate::metrics::Metrics,
    client: &Client,
    own: &str,
    (from, to): (&str, &str),
    pending: &mut Vec<Pending>,
) -> Result<(), Ended> {
    for room in client.joined_rooms() {
        let direct = is_direct(&room).await;
        let mut token = from.to_string();
        for _ in 0..BACKFILL_PAGES {
            let mut options = MessagesOptions::forward().from(Some(token.as_str()));
            options.to = Some(to.to_string());
            let page = room.messages(options).await.inspect_err(|e| {
                tracing::warn!(room = %room.room_id(), error = %e, "cannot read back the rest of a cut-short batch; it is read again");
            })?;
            for event in &page.chunk {
                take_in(inner, inbox, metrics, &room, direct, own, event, pending).await?;
            }
            match page.end {
                Some(end) if !page.chunk.is_empty() => token = end,
                _ => break,
            }
        }
    }
    Ok(())
}

fn filter() -> Filter {
    let mut f = FilterDefinition::default();
    f.room.timeline.limit = Some(UInt::from(TIMELINE));
    Filter::FilterDefinition(f)
}

/// A room of the agent and one person (joined or invited): what is said there is said to the
/// agent. Counted from the member events in the store — the summary's counts can lag behind.
async fn is_direct(room: &Room) -> bool {
    match room.members_no_sync(RoomMemberships::ACTIVE).await {
        Ok(members) if !members.is_empty() => members.len() <= 2,
        _ => room.active_members_count() <= 2,
    }
}

/// The room's facts and the message an event is, handed to the inbox.
#[allow(clippy::too_many_arguments)]
async fn take_in(
    inner: &Inner,
    inbox: &Inbox,
    metrics: &crate::metrics::Metrics,
    room: &Room,
    direct: bool,
    own: &str,
    event: &TimelineEvent,
    pending: &mut Vec<Pending>,
) -> Result<(), StoreError> {
    let room_id = room.room_id().to_string();
    let facts = RoomFacts {
        room: &room_id,
        own,
        direct,
        encrypted: room.encryption_state().is_encrypted(),
    };
    let Some(read) = events::read(event, &facts) else {
        return Ok(());
    };
    if inbox.take_in_chat(&read.message).await? {
        inner.took_in(&read.message, read.encrypted);
        metrics.observe_message_in(Channel::Matrix.as_str());
        if matches!(read.message.kind, ChatKind::Undecryptable(_)) {
            pending.push(Pending {
                room: room.room_id().to_owned(),
                event: event.clone(),
                since: Instant::now(),
            });
        }
    }
    Ok(())
}

/// Events recorded undecryptable whose key may have arrived since: decrypted, their record is
/// replaced by what they say; past [`RETRY_DECRYPTION`], they stay recorded as they are.
async fn retry_decryption(
    inner: &Inner,
    inbox: &Inbox,
    metrics: &crate::metrics::Metrics,
    client: &Client,
    own: &str,
    pending: &mut Vec<Pending>,
) -> Result<(), StoreError> {
    let mut still = Vec::new();
    for p in pending.drain(..) {
        let Some(room) = client.get_room(&p.room) else {
            continue;
        };
        let TimelineEventKind::UnableToDecrypt { event, .. } = &p.event.kind else {
            continue;
        };
        match room.decrypt_event(event.cast_ref_unchecked(), None).await {
            Ok(decrypted)
                if !matches!(decrypted.kind, TimelineEventKind::UnableToDecrypt { .. }) =>
            {
                let event_id = p
                    .event
                    .event_id()
                    .map(|e| e.to_string())
                    .unwrap_or_default();
                tracing::info!(event = %event_id, "a chat message's key arrived; it is read now");
                let mut ignore = Vec::new();
                let direct = is_direct(&room).await;
                take_in(
                    inner,
                    inbox,
                    metrics,
                    &room,
                    direct,
                    own,
                    &decrypted,
                    &mut ignore,
                )
                .await?;
            }
            _ if p.since.elapsed() < RETRY_DECRYPTION => still.push(p),
            _ => {}
        }
    }
    *pending = still;
    Ok(())
}

/// Events of `room` before `prev`, back to `to` (the last position read) or the first one
/// already recorded, at most [`BACKFILL_PAGES`] pages; oldest first. What a page cannot be
/// read for is an error: the caller keeps its position and reads the gap again.
async fn backfill(
    inner: &Inner,
    room: &Room,
    prev: &str,
    to: Option<&str>,
) -> Result<Vec<TimelineEvent>, Ended> {
    let mut found = Vec::new();
    let mut from = prev.to_string();
    for _ in 0..BACKFILL_PAGES {
        let mut options = MessagesOptions::backward().from(Some(from.as_str()));
        options.to = to.map(str::to_string);
        let page = room.messages(options).await.inspect_err(|e| {
            tracing::warn!(room = %room.room_id(), error = %e, "cannot read back a room's messages after a gap; the gap is read again");
        })?;
        let mut reached = false;
        for event in page.chunk {
            let known = match event.event_id() {
                Some(id) => inner
                    .store
                    .inbox()
                    .by_message_id(id.as_str())
                    .await?
                    .is_some(),
                None => false,
            };
            if known {
                reached = true;
                break;
            }
            found.push(event);
        }
        match page.end {
            Some(end) if !reached => from = end,
            _ => break,
        }
    }
    found.reverse();
    Ok(found)
}

/// Join a room a person in `allow_from` invited the agent to; decline any other invite.
async fn answer_invite(settings: &MatrixSettings, room: &Room) {
    let inviter = match room.invite_details().await {
        Ok(d) => d.inviter_id.to_string(),
        Err(e) => {
            tracing::warn!(room = %room.room_id(), error = %e, "cannot see who sent an invite; declining it");
            String::new()
        }
    };
    if settings.allowed(&inviter).is_some() {
        match room.join().await {
            Ok(()) => {
                tracing::info!(room = %room.room_id(), inviter = %inviter, "joined a room on an invite from allow_from")
            }
            Err(e) => tracing::warn!(room = %room.room_id(), error = %e, "cannot join a room"),
        }
    } else {
        tracing::warn!(room = %room.room_id(), inviter = %inviter, "declined an invite: the inviter is not in channels.matrix.allow_from");
        if let Err(e) = room.leave().await {
            tracing::warn!(room = %room.room_id(), error = %e, "cannot decline an invite");
        }
    }
}

/// With `recovery_key`: restore the key backup and cross-sign this device. A failure is
/// logged (never the key) and the channel works on without it, marked degraded. False: the
/// key is set and did not work.
async fn recover(client: &Client, settings: &MatrixSettings) -> bool {
    let key = settings.recovery_key.trim();
    if key.is_empty() {
        return true;
    }
    match client.encryption().recovery().recover(key).await {
        Ok(()) => {
            tracing::info!("Matrix key backup restored with channels.matrix.recovery_key");
            true
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot recover the Matrix keys with channels.matrix.recovery_key; check it");
            false
        }
    }
}
