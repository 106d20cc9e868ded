//! A stand-in for the Telegram Bot API (<https://core.telegram.org/bots/api>) on 127.0.0.1:0:
//! `POST /bot{TOKEN}/{method}` with a JSON body, method names case-insensitive, every answer
//! `{"ok":true,"result":…}` or `{"ok":false,"error_code":N,"description":…}` with HTTP status N.
//! Long polling (`getUpdates`) with Telegram's offset rules; `sendMessage` checked as Telegram
//! checks it (empty, HTML that does not parse, over 4096 UTF-16 units, a reply to a message that
//! is not there); buttons, their presses, edits and answers. Tests push what people say and
//! press, read what the bot did, and make the next call of a method fail.
//!
//! The methods themselves are in `standin/methods.rs`.

#[path = "standin/methods.rs"]
mod methods;

use super::html;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;

pub const BOT_USERNAME: &str = "hermes_bot";
const POLL: Duration = Duration::from_millis(20);

/// A Telegram user who talks to the bot; their private chat with it has their id.
#[derive(Debug, Clone)]
pub struct Person {
    pub id: i64,
    pub first_name: String,
    pub username: Option<String>,
}

impl Person {
    pub fn new(id: i64, first_name: &str) -> Person {
        let username = Some(first_name.to_lowercase());
        let first_name = first_name.to_string();
        Person {
            id,
            first_name,
            username,
        }
    }

    fn user(&self) -> Value {
        json!({"id": self.id, "is_bot": false, "first_name": self.first_name,
               "username": self.username})
    }
}

/// What the next call of a method answers instead of its result.
#[derive(Debug, Clone)]
pub enum Fault {
    TooManyRequests {
        retry_after: u64,
    },
    /// The next `sendMessage` that has a `parse_mode`.
    CantParseEntities,
    Unauthorized,
    /// 409: another `getUpdates` took over (a second poller of the same bot).
    Conflict,
}

/// An accepted `sendMessage`.
#[derive(Debug, Clone)]
pub struct Sent {
    pub chat_id: i64,
    pub message_id: i64,
    /// As sent (with its tags, under `parse_mode`).
    pub text: String,
    /// As the person sees it: tags removed, entities decoded.
    pub shown: String,
    pub parse_mode: Option<String>,
    /// `reply_parameters.message_id`.
    pub reply_to: Option<i64>,
    pub reply_markup: Option<Value>,
    pub at: Instant,
}

/// A request, refused or not: its method as sent, body, HTTP status (0 while in flight).
#[derive(Debug, Clone)]
pub struct Call {
    pub method: String,
    pub body: Value,
    pub status: u16,
    pub at: Instant,
}

/// An accepted `editMessageReplyMarkup`: the message's new buttons (None: removed).
#[derive(Debug, Clone)]
pub struct Edit {
    pub chat_id: i64,
    pub message_id: i64,
    pub reply_markup: Option<Value>,
}

/// An accepted `answerCallbackQuery`.
#[derive(Debug, Clone)]
pub struct Answered {
    pub id: String,
    pub text: Option<String>,
}

#[derive(Default)]
struct World {
    revoked: bool,
    last_id: i64,
    queue: VecDeque<Value>,
    allowed: Option<Vec<String>>,
    /// Every message, the people's and the bot's, by id (one counter for all chats).
    messages: HashMap<i64, Value>,
    update_of: HashMap<i64, i64>,
    /// Callback query ids, and whether each was answered.
    queries: HashMap<String, bool>,
    faults: HashMap<String, VecDeque<Fault>>,
    sent: Vec<Sent>,
    calls: Vec<Call>,
    edits: Vec<Edit>,
    answered: Vec<Answered>,
}

impl World {
    fn next_id(&mut self) -> i64 {
        self.last_id += 1;
        self.last_id
    }
}

struct Inner {
    token: String,
    bot: Value,
    url: String,
    world: Mutex<World>,
    pushed: watch::Sender<u64>,
}

/// The stand-in; clones share one server.
#[derive(Clone)]
pub struct BotApi(Arc<Inner>);

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn chat_of(id: i64) -> Value {
    if id < 0 {
        json!({"id": id, "type": "supergroup", "title": "Hermes test group"})
    } else {
        json!({"id": id, "type": "private", "first_name": format!("User {id}")})
    }
}

/// Update kinds as `allowed_updates` names them.
fn kind(update: &Value) -> String {
    let mut keys = update.as_object().into_iter().flat_map(|o| o.keys());
    keys.find(|k| *k != "update_id")
        .cloned()
        .unwrap_or_default()
}

impl BotApi {
    /// Serve on a free loopback port; `token` (`123456789:…`) is the one accepted, its part
    /// before the colon the bot's id.
    pub async fn start(token: &str) -> BotApi {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("the stand-in's address");
        let bot_id: i64 = token
            .split_once(':')
            .and_then(|(id, _)| id.parse().ok())
            .expect("a token `ID:SECRET`");
        let bot = json!({"id": bot_id, "is_bot": true, "first_name": "Hermes",
                         "username": BOT_USERNAME});
        let api = BotApi(Arc::new(Inner {
            token: token.to_string(),
            bot,
            url: format!("http://{addr}"),
            world: Mutex::default(),
            pushed: watch::Sender::new(0),
        }));
        let app = axum::Router::new()
            .fallback(methods::handle)
            .with_state(api.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        api
    }

    /// The base URL (`channels.telegram.api_url`).
    pub fn url(&self) -> String {
        self.0.url.clone()
    }

    fn world(&self) -> MutexGuard<'_, World> {
        // A panic elsewhere while holding it leaves the data usable for the report.
        self.0.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push(&self, w: &mut World, key: &str, content: Value) -> i64 {
        let update_id = 700_000 + w.next_id();
        w.queue
            .push_back(json!({"update_id": update_id, key: content}));
        self.0.pushed.send_modify(|n| *n += 1);
        update_id
    }

    fn message(&self, from: &Person, chat: Value, text: &str, extra: Value) -> i64 {
        let mut w = self.world();
        let id = w.next_id();
        let mut m = json!({"message_id": id, "date": now(), "chat": chat, "from": from.user(),
                           "text": text});
        if let (Some(m), Value::Object(extra)) = (m.as_object_mut(), extra) {
            m.extend(extra);
        }
        w.messages.insert(id, m.clone());
        let update = self.push(&mut w, "message", m);
        w.update_of.insert(id, update);
        id
    }

    /// `from` writes to the bot in their private chat; the message's id.
    pub fn say(&self, from: &Person, text: &str) -> i64 {
        let chat = json!({"id": from.id, "type": "private", "first_name": from.first_name,
                          "username": from.username});
        self.message(from, chat, text, json!({}))
    }

    /// `from` replies to message `to` in its chat; the reply's id.
    pub fn reply(&self, from: &Person, to: i64, text: &str) -> i64 {
        let mut target = self
            .world()
            .messages
            .get(&to)
            .cloned()
            .expect("a known message");
        if let Some(t) = target.as_object_mut() {
            t.remove("reply_to_message");
        }
        let chat = target["chat"].clone();
        self.message(from, chat, text, json!({"reply_to_message": target}))
    }

    /// `from` writes in group `chat` (negative); `mention_bot`: the text's `@hermes_bot` (put
    /// first when missing) is a `mention` entity.
    pub fn say_in_group(&self, from: &Person, chat: i64, text: &str, mention_bot: bool) -> i64 {
        let at = format!("@{BOT_USERNAME}");
        let mut text = text.to_string();
        let mut extra = json!({});
        if mention_bot {
            if !text.contains(&at) {
                text = format!("{at} {text}");
            }
            let before = text.find(&at).map_or(0, |i| html::utf16_len(&text[..i]));
            extra = json!({"entities": [{"type": "mention", "offset": before,
                                         "length": html::utf16_len(&at)}]});
        }
        self.message(from, chat_of(chat), &text, extra)
    }

    /// `from` presses the button with `data` on the bot's message; the callback query's id.
    pub fn press(&self, from: &Person, bot_message_id: i64, data: &str) -> String {
        let mut w = self.world();
        let message = w.messages.get(&bot_message_id).cloned();
        let message = message
            .filter(|m| m["from"]["id"] == self.0.bot["id"])
            .expect("a message of the bot's to press a button on");
        let id = format!("{}{}", 4_382_000_000_000u64, w.next_id());
        w.queries.insert(id.clone(), false);
        let query = json!({"id": id, "from": from.user(), "message": message,
                           "chat_instance": "-5071290337158231", "data": data});
        self.push(&mut w, "callback_query", query);
        id
    }

    /// The update that carried message `message_id`.
    pub fn update_id(&self, message_id: i64) -> Option<i64> {
        self.world().update_of.get(&message_id).copied()
    }

    pub fn sent(&self) -> Vec<Sent> {
        self.world().sent.clone()
    }

    /// Every request of `method` (any case), in arrival order.
    pub fn calls(&self, method: &str) -> Vec<Call> {
        let w = self.world();
        let calls = w
            .calls
            .iter()
            .filter(|c| c.method.eq_ignore_ascii_case(method));
        calls.cloned().collect()
    }

    pub fn edits(&self) -> Vec<Edit> {
        self.world().edits.clone()
    }

    pub fn answered_callbacks(&self) -> Vec<Answered> {
        self.world().answered.clone()
    }

    pub fn fail_next(&self, method: &str, fault: Fault) {
        let mut w = self.world();
        let queue = w.faults.entry(method.to_ascii_lowercase()).or_default();
        queue.push_back(fault);
    }

    /// Refuse the token from now on (as after /revoke in @BotFather).
    pub fn revoke(&self) {
        self.world().revoked = true;
        self.0.pushed.send_modify(|n| *n += 1);
    }

    /// The first accepted message matching `pred` (waiting up to `timeout`).
    pub async fn wait_sent(&self, pred: impl Fn(&Sent) -> bool, timeout: Duration) -> Sent {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(s) = self.sent().into_iter().find(&pred) {
                return s;
            }
            assert!(
                Instant::now() < deadline,
                "no such message was sent within {timeout:?}; sent: {:#?}",
                self.sent()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// The messages sent to `chat`, once there are at least `n` (waiting up to `timeout`).
    pub async fn wait_sent_count(&self, chat: i64, n: usize, timeout: Duration) -> Vec<Sent> {
        let deadline = Instant::now() + timeout;
        loop {
            let to: Vec<Sent> = self
                .sent()
                .into_iter()
                .filter(|s| s.chat_id == chat)
                .collect();
            if to.len() >= n {
                return to;
            }
            assert!(
                Instant::now() < deadline,
                "{} of {n} messages to chat {chat} within {timeout:?}: {to:#?}",
                to.len()
            );
            tokio::time::sleep(POLL).await;
        }
    }
}
