//! Reading Bot API updates into [`ChatMessage`]s: only translation, no decision.
//!
//! Identities: a message is `CHAT:MESSAGE` (message ids are numbered per chat), a button press
//! `cb:QUERY`. A private chat addresses the bot; in a group a message does when it mentions
//! `@username` or replies to one of the bot's messages. Bot commands become the inbox's words:
//! `/run_now@hermes_bot` is `run now`, `/pause` is `pause`.

use crate::inbox::{ChatKind, ChatMessage};
use hermes_store::Channel;
use teloxide_core::types::{Message, Update, UpdateKind};

/// What the polling loop takes from an update.
pub(super) enum Read {
    /// A message or a press for the inbox.
    Message(ChatMessage),
    /// A press of one of the bot's buttons: the inbox's message, and the query to answer.
    Pressed {
        message: ChatMessage,
        query: String,
        chat: i64,
        on: i32,
    },
    /// Nothing to record: another kind of update, a bot's message, a message without text.
    Nothing,
}

/// `update` as the inbox reads it; `username` is the bot's own (without `@`).
pub(super) fn read(update: &Update, username: &str) -> Read {
    match &update.kind {
        UpdateKind::Message(m) => message(m, username).map_or(Read::Nothing, Read::Message),
        UpdateKind::CallbackQuery(q) => {
            let (Some(on), Some(data)) = (&q.message, &q.data) else {
                return Read::Nothing;
            };
            let chat = on.chat().id.0;
            Read::Pressed {
                message: ChatMessage {
                    channel: Channel::Telegram,
                    event_id: format!("cb:{}", q.id.0),
                    room: chat.to_string(),
                    sender: q.from.id.0.to_string(),
                    thread_root: None,
                    reply_to: None,
                    addressed: true,
                    plain_in_encrypted_room: false,
                    kind: ChatKind::Pressed {
                        data: data.clone(),
                        to: remote_id(chat, on.id().0),
                    },
                },
                query: q.id.0.clone(),
                chat,
                on: on.id().0,
            }
        }
        _ => Read::Nothing,
    }
}

/// How the bot names a message of its own or of a person: `CHAT:MESSAGE`.
pub(super) fn remote_id(chat: i64, message: i32) -> String {
    format!("{chat}:{message}")
}

fn message(m: &Message, username: &str) -> Option<ChatMessage> {
    let from = m.from.as_ref()?;
    // Other bots' messages are never instructions (and the bot never sees its own).
    if from.is_bot {
        return None;
    }
    // A photo or file comes with its words as a caption: the words are the instruction, and
    // the model is told there was something it cannot see.
    let (text, attached) = match (m.text(), m.caption()) {
        (Some(text), _) => (text, false),
        (None, Some(caption)) => (caption, true),
        (None, None) => return None,
    };
    let chat = m.chat.id.0;
    let mention = format!("@{username}");
    let mentioned = !username.is_empty() && contains_word(text, &mention);
    let reply = m.reply_to_message();
    let replies_to_bot = reply
        .and_then(|r| r.from.as_ref())
        .is_some_and(|u| u.is_bot && u.username.as_deref() == Some(username));
    Some(ChatMessage {
        channel: Channel::Telegram,
        event_id: remote_id(chat, m.id.0),
        room: chat.to_string(),
        sender: from.id.0.to_string(),
        thread_root: None,
        reply_to: reply.map(|r| remote_id(chat, r.id.0)),
        addressed: m.chat.is_private() || mentioned || replies_to_bot,
        plain_in_encrypted_room: false,
        kind: ChatKind::Text(with_attachment(words(text, &mention), attached)),
    })
}

/// The words of a message that came with a photo or a file, saying so.
fn with_attachment(words: String, attached: bool) -> String {
    if attached {
        format!("{words}\n\n[The message came with a photo or a file, which the agent cannot see.]")
    } else {
        words
    }
}

/// Whether `text` has `word` as a whole word (not `@hermes_bot2` for `@hermes_bot`), in any
/// case: Telegram usernames are case-insensitive.
fn contains_word(text: &str, word: &str) -> bool {
    let lower = text.to_lowercase();
    let word = word.to_lowercase();
    lower.match_indices(&word).any(|(at, _)| {
        lower[at + word.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
    })
}

/// `/start` as a task.
const START: &str = "The person just opened this chat with you (Telegram's /start). Greet them in one or two sentences and say what you can do for them.";

/// The text as the inbox reads it: the bot's mention taken out, and a leading bot command
/// (`/run_now@hermes_bot`) written as its words (`run now`).
fn words(text: &str, mention: &str) -> String {
    let text = text.trim();
    let (first, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    let text = match first.strip_prefix('/') {
        // What a Telegram client sends when a person opens the chat: a greeting is wanted, not
        // a task named "start".
        Some(command) if command.split('@').next() == Some("start") && rest.trim().is_empty() => {
            START.to_string()
        }
        Some(command) if !command.is_empty() => {
            let command = command
                .split_once('@')
                .map_or(command, |(c, _)| c)
                .replace('_', " ");
            format!("{command} {rest}")
        }
        _ => text.to_string(),
    };
    remove_ignoring_case(&text, mention).trim().to_string()
}

/// `text` without any `needle`, compared without case (ASCII: usernames are ASCII).
fn remove_ignoring_case(text: &str, needle: &str) -> String {
    if needle.is_empty() {
        return text.to_string();
    }
    let lower = text.to_ascii_lowercase();
    let needle = needle.to_ascii_lowercase();
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for (at, _) in lower.match_indices(&needle) {
        out.push_str(&text[from..at]);
        from = at + needle.len();
    }
    out.push_str(&text[from..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_become_words_and_mentions_go() {
        assert_eq!(words("/pause", "@hermes_bot"), "pause");
        assert_eq!(words("/run_now@hermes_bot", "@hermes_bot"), "run now");
        assert_eq!(words("/deny not today", "@hermes_bot"), "deny not today");
        assert_eq!(
            words("@Hermes_Bot what time is it", "@hermes_bot"),
            "what time is it"
        );
        assert_eq!(words("plain words", "@hermes_bot"), "plain words");
        assert_eq!(words("/", "@hermes_bot"), "/");
        // The first message of a chat asks for a greeting, not a task named "start".
        assert_eq!(words("/start", "@hermes_bot"), START);
        assert_eq!(words("/start@hermes_bot", "@hermes_bot"), START);
    }

    #[test]
    fn a_mention_is_a_whole_word() {
        assert!(contains_word("hi @hermes_bot!", "@hermes_bot"));
        assert!(contains_word("@HERMES_BOT", "@hermes_bot"));
        assert!(!contains_word("hi @hermes_bot2", "@hermes_bot"));
        assert!(!contains_word("hermes_bot", "@hermes_bot"));
    }

    // As the client reads them: from text (teloxide's update parser wants it).
    fn update(json: serde_json::Value) -> Update {
        serde_json::from_str(&json.to_string()).expect("an update")
    }

    fn user(id: i64, bot: bool, username: &str) -> serde_json::Value {
        serde_json::json!({"id": id, "is_bot": bot, "first_name": "X", "username": username})
    }

    #[test]
    fn group_messages_address_the_bot_only_by_mention_or_reply() {
        let group = serde_json::json!({"id": -100123, "type": "supergroup", "title": "Family"});
        let plain = update(serde_json::json!({"update_id": 1, "message": {
            "message_id": 5, "date": 0, "chat": group, "from": user(111, false, "me"),
            "text": "lunch?"}}));
        let Read::Message(m) = read(&plain, "hermes_bot") else {
            panic!("a text message is read");
        };
        assert_eq!(
            (m.event_id.as_str(), m.room.as_str(), m.sender.as_str()),
            ("-100123:5", "-100123", "111")
        );
        assert!(!m.addressed);
        let reply = update(serde_json::json!({"update_id": 2, "message": {
            "message_id": 7, "date": 0, "chat": group, "from": user(111, false, "me"),
            "text": "yes", "reply_to_message": {"message_id": 6, "date": 0, "chat": group,
            "from": user(42, true, "hermes_bot"), "text": "Done."}}}));
        let Read::Message(m) = read(&reply, "hermes_bot") else {
            panic!("a reply is read");
        };
        assert!(m.addressed);
        assert_eq!(m.reply_to.as_deref(), Some("-100123:6"));
        let bot = update(serde_json::json!({"update_id": 3, "message": {
            "message_id": 8, "date": 0, "chat": group, "from": user(9, true, "other_bot"),
            "text": "@hermes_bot hi"}}));
        assert!(matches!(read(&bot, "hermes_bot"), Read::Nothing));
    }

    #[test]
    fn a_press_names_the_message_it_was_on() {
        let chat = serde_json::json!({"id": 111, "type": "private", "first_name": "Me"});
        let press = update(serde_json::json!({"update_id": 4, "callback_query": {
            "id": "q1", "from": user(111, false, "me"), "chat_instance": "c", "data": "approve",
            "message": {"message_id": 9, "date": 0, "chat": chat,
            "from": user(42, true, "hermes_bot"), "text": "May I?"}}}));
        let Read::Pressed {
            message,
            query,
            chat,
            on,
        } = read(&press, "hermes_bot")
        else {
            panic!("a press is read");
        };
        assert_eq!((query.as_str(), chat, on), ("q1", 111, 9));
        assert_eq!(
            message.kind,
            ChatKind::Pressed {
                data: "approve".into(),
                to: "111:9".into()
            }
        );
        assert_eq!(message.event_id, "cb:q1");
    }

    #[test]
    fn a_caption_is_read_and_says_what_came_with_it() {
        let chat = serde_json::json!({"id": 111, "type": "private", "first_name": "Me"});
        let photo = update(serde_json::json!({"update_id": 5, "message": {
            "message_id": 10, "date": 0, "chat": chat, "from": user(111, false, "me"),
            "photo": [{"file_id": "f", "file_unique_id": "u", "width": 1, "height": 1}],
            "caption": "what is this plant?"}}));
        let Read::Message(m) = read(&photo, "hermes_bot") else {
            panic!("a captioned photo is read");
        };
        let ChatKind::Text(text) = m.kind else {
            panic!("as text");
        };
        assert!(text.starts_with("what is this plant?"), "{text}");
        assert!(text.contains("cannot see"), "{text}");
        let sticker = update(serde_json::json!({"update_id": 6, "message": {
            "message_id": 11, "date": 0, "chat": chat, "from": user(111, false, "me"),
            "sticker": {"file_id": "s", "file_unique_id": "v", "type": "regular", "width": 1,
                        "height": 1, "is_animated": false, "is_video": false}}}));
        assert!(matches!(read(&sticker, "hermes_bot"), Read::Nothing));
    }
}
