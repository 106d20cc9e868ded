//! Reading a room's timeline event into a [`ChatMessage`]: text messages (`m.room.message`),
//! reactions (`m.reaction`) and encrypted events the agent could not decrypt. Everything else
//! (state, edits, redactions, receipts, notices from bots, the agent's own messages) is no
//! message.
//!
//! The event's JSON is read directly, after the SDK has decrypted it: only the few fields the
//! inbox needs, so an unusual event is at worst no message, never an error.

use crate::inbox::{ChatKind, ChatMessage};
use hermes_store::Channel;
use matrix_sdk::deserialized_responses::{TimelineEvent, TimelineEventKind};
use serde::Deserialize;

#[derive(Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    event_id: String,
    sender: String,
    #[serde(default)]
    content: Content,
}

#[derive(Deserialize, Default)]
struct Content {
    #[serde(default)]
    msgtype: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    formatted_body: Option<String>,
    #[serde(rename = "m.relates_to", default)]
    relates_to: Option<RelatesTo>,
    #[serde(rename = "m.mentions", default)]
    mentions: Option<Mentions>,
    /// An edit's replacement content: an edit is not a new instruction.
    #[serde(rename = "m.new_content", default)]
    new_content: Option<serde_json::Value>,
}

#[derive(Deserialize, Default)]
struct RelatesTo {
    #[serde(default)]
    rel_type: Option<String>,
    #[serde(default)]
    event_id: Option<String>,
    #[serde(default)]
    key: Option<String>,
    #[serde(rename = "m.in_reply_to", default)]
    in_reply_to: Option<InReplyTo>,
}

#[derive(Deserialize, Default)]
struct InReplyTo {
    #[serde(default)]
    event_id: Option<String>,
}

#[derive(Deserialize, Default)]
struct Mentions {
    #[serde(default)]
    user_ids: Vec<String>,
}

/// Facts about the room the event came in, from the SDK's state.
pub(super) struct RoomFacts<'a> {
    pub room: &'a str,
    /// The agent's own user id.
    pub own: &'a str,
    /// At most two members (the agent and one person): what is said there is said to it.
    pub direct: bool,
    /// The room is encrypted: a message in it must be too.
    pub encrypted: bool,
}

/// What an event is, for the inbox: a message, or nothing. `encrypted`: it came encrypted.
pub(super) struct Read {
    pub message: ChatMessage,
    pub encrypted: bool,
}

/// The message an event is, if it is one (never the agent's own).
pub(super) fn read(event: &TimelineEvent, facts: &RoomFacts<'_>) -> Option<Read> {
    let (raw, encrypted, undecryptable) = match &event.kind {
        TimelineEventKind::Decrypted(d) => (d.event.json().get(), true, None),
        TimelineEventKind::PlainText { event } => (event.json().get(), false, None),
        TimelineEventKind::UnableToDecrypt { event, utd_info } => (
            event.json().get(),
            true,
            Some(format!("{:?}", utd_info.reason)),
        ),
    };
    let ev: Event = serde_json::from_str(raw).ok()?;
    if ev.sender == facts.own {
        return None;
    }
    let c = &ev.content;
    let rel = c.relates_to.as_ref();
    let thread_root = rel
        .filter(|r| r.rel_type.as_deref() == Some("m.thread"))
        .and_then(|r| r.event_id.clone());
    let reply_to = rel
        .and_then(|r| r.in_reply_to.as_ref())
        .and_then(|r| r.event_id.clone());
    let kind = if let Some(why) = undecryptable {
        ChatKind::Undecryptable(why)
    } else {
        match ev.kind.as_str() {
            "m.room.message" => {
                let replaces = rel.is_some_and(|r| r.rel_type.as_deref() == Some("m.replace"));
                if replaces || c.new_content.is_some() {
                    return None;
                }
                // `m.notice` is what bots send (the spec asks that no automated message answer
                // one): obeying it would let another bot's output start tasks, or two agents
                // answer each other for ever.
                match c.msgtype.as_deref() {
                    Some("m.text" | "m.emote") => {}
                    _ => return None,
                }
                // A person's message, without the quote of the message it answers that older
                // clients put in front of the body.
                ChatKind::Text(strip_reply_fallback(c.body.as_deref().unwrap_or_default()))
            }
            "m.reaction" => {
                let r = rel?;
                if r.rel_type.as_deref() != Some("m.annotation") {
                    return None;
                }
                ChatKind::Reaction {
                    key: r.key.clone()?,
                    to: r.event_id.clone()?,
                }
            }
            _ => return None,
        }
    };
    let mentioned = c
        .mentions
        .as_ref()
        .is_some_and(|m| m.user_ids.iter().any(|u| u == facts.own))
        || c.body.as_deref().is_some_and(|b| b.contains(facts.own))
        || c.formatted_body
            .as_deref()
            .is_some_and(|b| b.contains(&format!("matrix.to/#/{}", facts.own)));
    Some(Read {
        message: ChatMessage {
            channel: Channel::Matrix,
            event_id: ev.event_id,
            room: facts.room.to_string(),
            sender: ev.sender,
            thread_root,
            reply_to,
            addressed: facts.direct || mentioned,
            // Reactions are exempt: clients (matrix-sdk among them) never encrypt them.
            plain_in_encrypted_room: facts.encrypted
                && !encrypted
                && !matches!(kind, ChatKind::Reaction { .. }),
            kind,
        },
        encrypted,
    })
}

/// A body without the `> <@user> quoted` lines a reply's fallback puts before it.
fn strip_reply_fallback(body: &str) -> String {
    if !body.starts_with("> ") {
        return body.trim().to_string();
    }
    let rest: Vec<&str> = body.lines().skip_while(|l| l.starts_with('>')).collect();
    rest.join("\n").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_event(msgtype: &str) -> TimelineEvent {
        let json = serde_json::json!({
            "type": "m.room.message",
            "event_id": "$e1",
            "sender": "@person:x",
            "origin_server_ts": 1,
            "content": {"msgtype": msgtype, "body": "pause the digest"},
        });
        let raw =
            serde_json::value::to_raw_value(&json).map(matrix_sdk::ruma::serde::Raw::from_json);
        TimelineEvent::from_plaintext(raw.unwrap())
    }

    #[test]
    fn a_notice_is_no_instruction_but_text_and_emote_are() {
        let facts = RoomFacts {
            room: "!r:x",
            own: "@hermes:x",
            direct: true,
            encrypted: false,
        };
        assert!(read(&text_event("m.notice"), &facts).is_none());
        for msgtype in ["m.text", "m.emote"] {
            let read = read(&text_event(msgtype), &facts);
            assert!(
                matches!(read.map(|r| r.message.kind), Some(ChatKind::Text(t)) if t == "pause the digest"),
                "{msgtype}"
            );
        }
    }

    #[test]
    fn a_reply_fallback_is_dropped() {
        assert_eq!(
            strip_reply_fallback("> <@hermes:x> Daily digest\n> item 2\n\npause"),
            "pause"
        );
        assert_eq!(strip_reply_fallback(" hello \n"), "hello");
    }
}
