//! Sending the outbox's notices into rooms: `matrix` (a reply, into the room and thread the
//! notice names) and `matrix:NAME` (a configured room, or the direct room with a configured
//! person — created, encrypted, the first time).
//!
//! A notice is Markdown: sent as Matrix HTML with the text as its plain body, split on
//! paragraph (then line, then character) boundaries into parts below the event size limit,
//! in order; the parts after the first go in the first one's thread (or all in the thread
//! the notice answers). Each part's transaction id is made of the notice's random token and
//! the part's number, so a send retried after its answer was lost is the same event to the
//! homeserver — it posts once.

use super::Inner;
use crate::channels::Sends;
use crate::notify::SendError;
use hermes_config::MatrixTarget;
use hermes_store::Notice;
use matrix_sdk::ruma::events::room::member::MembershipState;
use matrix_sdk::ruma::{OwnedTransactionId, RoomId, UserId};
use matrix_sdk::{Client, Room, RoomMemberships};
use serde_json::json;

/// A part's plain text at most, before its content is measured.
const PART_BYTES: usize = 12_000;

/// A part's content as sent (body, HTML, relation; JSON-escaped) at most. Encryption grows it
/// by a third (base64) plus its envelope, and an event must stay under 64 KiB: text full of
/// `&` or `<` escapes to several times its length, so the content is measured, not guessed.
const CONTENT_BYTES: usize = 30_000;

impl Sends for Inner {
    async fn send(&self, notice: &Notice) -> Result<String, SendError> {
        let client = self.link.conn_to_send()?;
        let (room, root) = self.destination(&client, notice).await?;
        let text = crate::channels::compose(&notice.queued.title, &notice.queued.body);
        let token = notice
            .token
            .clone()
            .unwrap_or_else(|| format!("notice{}", notice.id));
        let mut first: Option<String> = None;
        for (i, part) in parts(&text).iter().enumerate() {
            let thread = root.clone().or_else(|| first.clone());
            let txn = OwnedTransactionId::from(format!("hermes-{token}-{i}"));
            let sent = room
                .send_raw("m.room.message", content(part, thread.as_deref()))
                .with_transaction_id(&txn)
                .await
                .map_err(classify)?;
            if first.is_none() {
                first = Some(sent.response.event_id.to_string());
            }
        }
        first.ok_or_else(|| SendError::Permanent("the notice is empty".into()))
    }
}

impl Inner {
    /// The room a notice goes to and the thread it goes in.
    async fn destination(
        &self,
        client: &Client,
        notice: &Notice,
    ) -> Result<(Room, Option<String>), SendError> {
        let q = &notice.queued;
        if q.channel == crate::notify::MATRIX {
            let Some(room_id) = q.recipient.as_deref() else {
                return Err(SendError::Permanent(
                    "a Matrix reply names no room; use matrix:NAME for a configured room".into(),
                ));
            };
            let room = self.joined(client, room_id)?;
            if !self.allowed_member(&room).await? {
                return Err(SendError::Permanent(format!(
                    "no one in channels.matrix.allow_from is in room {room_id} any more; the reply is not sent"
                )));
            }
            return Ok((room, q.in_reply_to.clone()));
        }
        let name = q.channel.strip_prefix("matrix:").unwrap_or_default();
        match self.settings.target(name) {
            Some(MatrixTarget::Room(room_id)) => {
                let room = self.joined(client, room_id)?;
                // Notices carry results and approval requests: never to a room the people
                // of allow_from all left.
                if !self.allowed_member(&room).await? {
                    return Err(SendError::Permanent(format!(
                        "no one in channels.matrix.allow_from is in room {room_id} (matrix:{name}) any more; invite them back and retry the notice"
                    )));
                }
                Ok((room, None))
            }
            Some(MatrixTarget::User(user)) => Ok((self.direct_room(client, user).await?, None)),
            None => Err(SendError::Permanent(format!(
                "channels.matrix.rooms has no room '{name}' any more; add it back and retry the notice"
            ))),
        }
    }

    fn joined(&self, client: &Client, room_id: &str) -> Result<Room, SendError> {
        let id = RoomId::parse(room_id)
            .map_err(|_| SendError::Permanent(format!("'{room_id}' is not a Matrix room id")))?;
        match client.get_room(&id) {
            Some(room) if room.state() == matrix_sdk::RoomState::Joined => Ok(room),
            _ => Err(SendError::Permanent(format!(
                "the agent is not in room {room_id}; invite it from an account in channels.matrix.allow_from"
            ))),
        }
    }

    /// Whether someone of `allow_from` is in `room` (joined or invited).
    async fn allowed_member(&self, room: &Room) -> Result<bool, SendError> {
        let members = room
            .members(RoomMemberships::ACTIVE)
            .await
            .map_err(classify)?;
        Ok(members
            .iter()
            .any(|m| self.settings.allowed(m.user_id().as_str()).is_some()))
    }

    /// The agent's direct room with `user`: an encrypted one they are still in (a notice can
    /// carry an approval request's arguments, and one to a room they left reaches no one), or
    /// a new encrypted one (once: two notices at the same moment wait for each other).
    async fn direct_room(&self, client: &Client, user: &str) -> Result<Room, SendError> {
        let id = UserId::parse(user)
            .map_err(|_| SendError::Permanent(format!("'{user}' is not a Matrix user id")))?;
        let mut made = self.dm.lock().await;
        if let Some(room) = usable_dm(client, &id).await.map_err(classify)? {
            return Ok(room);
        }
        // Made here and not synced yet (not listed as direct): encrypted, as it was made.
        if let Some(room) = made.get(user).and_then(|r| client.get_room(r))
            && still_in(&room, &id).await.map_err(classify)?
        {
            return Ok(room);
        }
        tracing::info!(user = %user, "creating an encrypted direct room");
        let room = client.create_dm(&id).await.map_err(classify)?;
        made.insert(user.to_string(), room.room_id().to_owned());
        Ok(room)
    }
}

/// An encrypted direct room of the agent with `user` that they are in or invited to: where
/// notices to them may go (doctor shows the same one).
pub(super) async fn usable_dm(
    client: &Client,
    user: &UserId,
) -> Result<Option<Room>, matrix_sdk::Error> {
    for room in client.get_dm_rooms(user) {
        if room.encryption_state().is_encrypted() && still_in(&room, user).await? {
            return Ok(Some(room));
        }
    }
    Ok(None)
}

/// Whether `user` is in `room` or invited to it.
async fn still_in(room: &Room, user: &UserId) -> Result<bool, matrix_sdk::Error> {
    let member = room.get_member(user).await?;
    Ok(member.is_some_and(|m| {
        matches!(
            m.membership(),
            MembershipState::Join | MembershipState::Invite
        )
    }))
}

/// How a failed send counts: a server busy, down or unreachable may pass; a refusal will not.
fn classify(e: matrix_sdk::Error) -> SendError {
    match e.as_client_api_error().map(|api| api.status_code.as_u16()) {
        // 401: the token was revoked or soft-logged-out; the sync loop logs in again, and the
        // notice waits for that rather than failing for good.
        Some(401) | Some(429) | Some(500..=599) | None => SendError::Transient(e.to_string()),
        Some(_) => SendError::Permanent(e.to_string()),
    }
}

/// An `m.room.message` of `part` (Markdown): the plain text and its HTML, in `thread` if any.
fn content(part: &str, thread: Option<&str>) -> serde_json::Value {
    let mut c = json!({
        "msgtype": "m.text",
        "body": part,
        "format": "org.matrix.custom.html",
        "formatted_body": crate::notify::render_markdown(part),
        // Nobody is pinged by the agent's notices.
        "m.mentions": {},
    });
    if let Some(root) = thread {
        c["m.relates_to"] = json!({
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": true,
            "m.in_reply_to": { "event_id": root },
        });
    }
    c
}

/// `text` in parts whose content fits an event, in order: [`split`] at [`PART_BYTES`], then
/// each part whose content is still too big split again at half the size.
fn parts(text: &str) -> Vec<String> {
    fn fit(part: String, max: usize, out: &mut Vec<String>) {
        // A thread relation is the most a part carries beside its text.
        let size = serde_json::to_vec(&content(&part, Some("$a-thread-root-event-id")))
            .map_or(usize::MAX, |v| v.len());
        if size <= CONTENT_BYTES || max < 256 {
            out.push(part);
            return;
        }
        for smaller in split(&part, max / 2) {
            fit(smaller, max / 2, out);
        }
    }
    let mut out = Vec::new();
    for part in split(text, PART_BYTES) {
        fit(part, PART_BYTES, &mut out);
    }
    out
}

/// `text` in parts of at most `max` bytes, split at the last paragraph break before the limit,
/// else the last line break, else the last character boundary.
fn split(text: &str, max: usize) -> Vec<String> {
    let mut parts = Vec::new();
    let mut rest = text.trim();
    while rest.len() > max {
        let mut cut = max;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let head = &rest[..cut];
        let at = head
            .rfind("\n\n")
            .or_else(|| head.rfind('\n'))
            .filter(|&i| i > 0)
            .unwrap_or(cut);
        parts.push(rest[..at].trim_end().to_string());
        rest = rest[at..].trim_start();
    }
    if !rest.is_empty() || parts.is_empty() {
        parts.push(rest.to_string());
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_split_on_paragraphs_in_order() {
        let para = "word ".repeat(300).trim_end().to_string();
        let text = format!("{para}\n\n{para}\n\n{para}");
        let parts = split(&text, 2000);
        assert_eq!(parts.len(), 3, "{parts:?}");
        assert!(parts.iter().all(|p| p.len() <= 2000));
        assert_eq!(parts.join("\n\n"), text.trim());
    }

    #[test]
    fn text_that_escapes_long_is_cut_until_each_event_fits() {
        let text = format!("{}\n\n{}", "<&\"".repeat(6000), "plain ".repeat(1000));
        let parts = parts(&text);
        assert!(parts.len() > 2, "{}", parts.len());
        for p in &parts {
            let size = serde_json::to_vec(&content(p, Some("$root")))
                .unwrap()
                .len();
            assert!(size <= CONTENT_BYTES, "{size}");
        }
        assert_eq!(
            parts.concat().replace(char::is_whitespace, ""),
            text.replace(char::is_whitespace, "")
        );
    }

    #[test]
    fn a_paragraph_too_long_is_split_on_lines_then_characters() {
        let text = "一".repeat(2000);
        let parts = split(&text, 1000);
        assert!(parts.iter().all(|p| p.len() <= 1000));
        assert_eq!(parts.concat(), text);
        let lines = format!("{}\n{}", "a".repeat(600), "b".repeat(600));
        assert_eq!(split(&lines, 1000), vec!["a".repeat(600), "b".repeat(600)]);
        assert_eq!(split("short", 1000), vec!["short".to_string()]);
    }

    #[test]
    fn a_thread_part_names_its_root() {
        let c = content("hi", Some("$root"));
        assert_eq!(c["m.relates_to"]["rel_type"], "m.thread");
        assert_eq!(c["m.relates_to"]["event_id"], "$root");
        assert_eq!(
            content("**x**", None)["formatted_body"],
            "<p><strong>x</strong></p>\n"
        );
        assert_eq!(
            crate::channels::compose("Digest", " body "),
            "**Digest**\n\nbody"
        );
        assert_eq!(crate::channels::compose("", "answer"), "answer");
    }
}
