//! The Bot API methods the stand-in answers, and how it answers: Telegram's result or error
//! JSON with the error code as the HTTP status.

use super::super::html;
use super::{Answered, BotApi, Call, Edit, Fault, Sent, World, chat_of, kind, now};
use axum::body::Bytes;
use axum::extract::State as Shared;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

struct Refusal(u16, String, Option<u64>);

fn bad(what: &str) -> Refusal {
    Refusal(400, format!("Bad Request: {what}"), None)
}

fn unauthorized() -> Refusal {
    Refusal(401, "Unauthorized".into(), None)
}

impl BotApi {
    /// A request: `/bot{token}/{method}`, checked, answered, recorded.
    async fn serve(&self, path: &str, body: Value) -> Response {
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let (token, method) = match parts[..] {
            [bot, method] if bot.starts_with("bot") => (bot[3..].replace("%3A", ":"), method),
            _ => return answer(Err(Refusal(404, "Not Found".into(), None))),
        };
        let index = {
            let mut w = self.world();
            let (method, body, at) = (method.to_string(), body.clone(), Instant::now());
            w.calls.push(Call {
                method,
                body,
                status: 0,
                at,
            });
            w.calls.len() - 1
        };
        let outcome = if token != self.0.token || self.world().revoked {
            Err(unauthorized())
        } else if let Some(fault) = self.fault(method, &body) {
            Err(match fault {
                Fault::TooManyRequests { retry_after: n } => {
                    Refusal(429, format!("Too Many Requests: retry after {n}"), Some(n))
                }
                Fault::CantParseEntities => bad(
                    "can't parse entities: Can't find end of the entity starting at byte offset 0",
                ),
                Fault::Unauthorized => unauthorized(),
                Fault::Conflict => Refusal(
                    409,
                    "Conflict: terminated by other getUpdates request; make sure that only one \
                     bot instance is running"
                        .into(),
                    None,
                ),
            })
        } else if method.eq_ignore_ascii_case("getUpdates") {
            self.get_updates(&body).await
        } else {
            self.call(method, &body)
        };
        let status = outcome.as_ref().map_or_else(|r| r.0, |_| 200);
        self.world().calls[index].status = status;
        answer(outcome)
    }

    /// The fault queued for this call of `method`, taken.
    fn fault(&self, method: &str, body: &Value) -> Option<Fault> {
        let mut w = self.world();
        let queue = w.faults.get_mut(&method.to_ascii_lowercase())?;
        let applies = match queue.front()? {
            Fault::CantParseEntities => !body["parse_mode"].is_null(),
            _ => true,
        };
        if applies { queue.pop_front() } else { None }
    }

    async fn get_updates(&self, body: &Value) -> Result<Value, Refusal> {
        let offset = body["offset"].as_i64().unwrap_or(0);
        let limit = body["limit"].as_u64().unwrap_or(100).clamp(1, 100) as usize;
        let deadline = Instant::now() + Duration::from_secs(body["timeout"].as_u64().unwrap_or(0));
        let mut pushed = self.0.pushed.subscribe();
        if let Some(kinds) = body["allowed_updates"].as_array() {
            let kinds = kinds.iter().filter_map(|k| k.as_str().map(str::to_string));
            let kinds: Vec<String> = kinds.collect();
            self.world().allowed = (!kinds.is_empty()).then_some(kinds);
        }
        loop {
            {
                let mut w = self.world();
                if w.revoked {
                    return Err(unauthorized());
                }
                if offset > 0 {
                    w.queue
                        .retain(|u| u["update_id"].as_i64().is_some_and(|id| id >= offset));
                } else if offset < 0 {
                    let keep = offset.unsigned_abs() as usize;
                    while w.queue.len() > keep {
                        w.queue.pop_front();
                    }
                }
                // Telegram never delivers the kinds a bot did not ask for.
                if let Some(kinds) = w.allowed.clone() {
                    w.queue.retain(|u| kinds.contains(&kind(u)));
                }
                let batch: Vec<Value> = w.queue.iter().take(limit).cloned().collect();
                if !batch.is_empty() || Instant::now() >= deadline {
                    return Ok(Value::Array(batch));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, pushed.changed())
                .await
                .is_ok_and(|r| r.is_err())
            {
                tokio::time::sleep(left).await;
            }
        }
    }

    fn call(&self, method: &str, body: &Value) -> Result<Value, Refusal> {
        let mut w = self.world();
        let chat_id = match &body["chat_id"] {
            Value::String(s) => s.parse().ok(),
            v => v.as_i64(),
        };
        match method.to_ascii_lowercase().as_str() {
            "getme" => {
                let mut me = self.0.bot.clone();
                if let Some(m) = me.as_object_mut() {
                    m.insert("can_join_groups".into(), true.into());
                    m.insert("can_read_all_group_messages".into(), false.into());
                    m.insert("supports_inline_queries".into(), false.into());
                    m.insert("can_connect_to_business".into(), false.into());
                    m.insert("has_main_web_app".into(), false.into());
                }
                Ok(me)
            }
            "deletewebhook" => {
                if body["drop_pending_updates"] == true {
                    w.queue.clear();
                }
                Ok(true.into())
            }
            "sendchataction" => chat_id.map(|_| true.into()).ok_or(bad("chat not found")),
            "sendmessage" => {
                let chat_id = chat_id.ok_or(bad("chat not found"))?;
                self.send_message(&mut w, chat_id, body)
            }
            "editmessagereplymarkup" => {
                let id = body["message_id"].as_i64().unwrap_or(0);
                let bot = &self.0.bot["id"];
                let m = w.messages.get_mut(&id);
                let m = m.filter(|m| chat_id.is_some_and(|c| m["chat"]["id"] == c));
                let m = m.ok_or(bad("message to edit not found"))?;
                if m["from"]["id"] != *bot {
                    return Err(bad("message can't be edited"));
                }
                let markup = buttons(&body["reply_markup"]);
                if m.get("reply_markup") == markup.as_ref() {
                    return Err(bad(
                        "message is not modified: specified new message content and reply markup \
                         are exactly the same as a current content and reply markup of the message",
                    ));
                }
                match (m.as_object_mut(), &markup) {
                    (Some(o), Some(k)) => o.insert("reply_markup".into(), k.clone()),
                    (Some(o), None) => o.remove("reply_markup"),
                    _ => None,
                };
                let edited = m.clone();
                let (chat_id, message_id, reply_markup) = (chat_id.unwrap_or(0), id, markup);
                w.edits.push(Edit {
                    chat_id,
                    message_id,
                    reply_markup,
                });
                Ok(edited)
            }
            "answercallbackquery" => {
                let id = body["callback_query_id"].as_str().unwrap_or("").to_string();
                match w.queries.get_mut(&id) {
                    Some(answered @ false) => *answered = true,
                    _ => {
                        return Err(bad(
                            "query is too old and response timeout expired or query ID is invalid",
                        ));
                    }
                }
                let text = body["text"].as_str().map(str::to_string);
                w.answered.push(Answered { id, text });
                Ok(true.into())
            }
            _ => Err(Refusal(404, "Not Found: method not found".into(), None)),
        }
    }

    fn send_message(&self, w: &mut World, chat_id: i64, body: &Value) -> Result<Value, Refusal> {
        let text = body["text"].as_str().unwrap_or("");
        if text.trim().is_empty() {
            return Err(bad("message text is empty"));
        }
        let parse_mode = body["parse_mode"].as_str().map(str::to_string);
        let shown = match parse_mode
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None => text.to_string(),
            Some("html") => {
                html::parse(text).map_err(|e| bad(&format!("can't parse entities: {e}")))?
            }
            Some("markdown" | "markdownv2") => text.to_string(),
            Some(_) => return Err(bad("unsupported parse_mode")),
        };
        if shown.trim().is_empty() {
            return Err(bad("message text is empty"));
        }
        if html::utf16_len(&shown) > 4096 {
            return Err(bad("message is too long"));
        }
        let reply = &body["reply_parameters"];
        let reply_to = reply["message_id"].as_i64();
        let target = reply_to.and_then(|id| w.messages.get(&id));
        let target = target.filter(|m| m["chat"]["id"] == chat_id).cloned();
        if reply_to.is_some() && target.is_none() && reply["allow_sending_without_reply"] != true {
            return Err(bad("message to be replied not found"));
        }
        let markup = buttons(&body["reply_markup"]);
        let rows = markup
            .iter()
            .flat_map(|k| k["inline_keyboard"].as_array())
            .flatten();
        for b in rows.flat_map(|r| r.as_array()).flatten() {
            let data = b["callback_data"].as_str();
            if data.is_some_and(|d| d.is_empty() || d.len() > 64) {
                return Err(bad("BUTTON_DATA_INVALID"));
            }
        }
        let message_id = w.next_id();
        let mut m = json!({"message_id": message_id, "date": now(), "chat": chat_of(chat_id),
                           "from": self.0.bot, "text": shown});
        if let Some(o) = m.as_object_mut() {
            if let Some(t) = &target {
                o.insert("reply_to_message".into(), t.clone());
            }
            if let Some(k) = &markup {
                o.insert("reply_markup".into(), k.clone());
            }
        }
        w.messages.insert(message_id, m.clone());
        w.sent.push(Sent {
            chat_id,
            message_id,
            text: text.to_string(),
            shown,
            parse_mode,
            reply_to,
            reply_markup: markup,
            at: Instant::now(),
        });
        Ok(m)
    }
}

/// An inline keyboard with at least one row, or None (no buttons).
fn buttons(markup: &Value) -> Option<Value> {
    let rows = markup["inline_keyboard"].as_array()?;
    (!rows.is_empty()).then(|| markup.clone())
}

fn answer(outcome: Result<Value, Refusal>) -> Response {
    let (status, body) = match outcome {
        Ok(result) => (200, json!({"ok": true, "result": result})),
        Err(Refusal(code, description, retry_after)) => {
            let mut body = json!({"ok": false, "error_code": code, "description": description});
            if let (Some(n), Some(o)) = (retry_after, body.as_object_mut()) {
                o.insert("parameters".into(), json!({"retry_after": n}));
            }
            (code, body)
        }
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

pub(super) async fn handle(Shared(api): Shared<BotApi>, uri: Uri, body: Bytes) -> Response {
    let body = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice::<Value>(&body) {
            Ok(v @ Value::Object(_)) => v,
            _ => return answer(Err(bad("request body is not a JSON object"))),
        }
    };
    api.serve(uri.path(), body).await
}
