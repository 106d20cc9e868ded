//! The stand-in itself, over plain HTTP as any Bot API client sees it: Telegram's offsets,
//! long polling, `sendMessage`'s checks, buttons, and the faults it can be told to make.

use super::standin::{BotApi, Fault, Person};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const TOKEN: &str = "123456789:TEST-token_abcdefghijklmnopqrstuvwxyz";

async fn post(api: &BotApi, token: &str, method: &str, body: Value) -> (u16, Value) {
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("an HTTP client");
    let r = client
        .post(format!("{}/bot{token}/{method}", api.url()))
        .json(&body)
        .send()
        .await
        .expect("the stand-in answers");
    let status = r.status().as_u16();
    (status, r.json().await.expect("a JSON answer"))
}

async fn call(api: &BotApi, method: &str, body: Value) -> (u16, Value) {
    post(api, TOKEN, method, body).await
}

/// The update ids a `getUpdates` answer holds.
fn ids(v: &Value) -> Vec<i64> {
    let updates = v["result"].as_array().expect("a list of updates");
    updates
        .iter()
        .filter_map(|u| u["update_id"].as_i64())
        .collect()
}

fn refused(v: &(u16, Value), code: u16, description: &str) {
    assert_eq!(v.0, code, "{}", v.1);
    assert_eq!(v.1["ok"], false, "{}", v.1);
    assert_eq!(v.1["error_code"], code, "{}", v.1);
    let got = v.1["description"].as_str().unwrap_or_default();
    assert!(
        got.starts_with(description),
        "{got:?} is not {description:?}…"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_me_answers_any_case_and_a_wrong_token_or_method_is_refused() {
    let api = BotApi::start(TOKEN).await;
    for method in ["getMe", "GetMe", "getme"] {
        let (status, v) = call(&api, method, json!({})).await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["ok"], true);
        assert_eq!(v["result"]["id"], 123456789);
        assert_eq!(v["result"]["username"], "hermes_bot");
        assert_eq!(v["result"]["is_bot"], true);
    }
    refused(
        &post(&api, "1:other", "getMe", json!({})).await,
        401,
        "Unauthorized",
    );
    let unknown = call(&api, "noSuchMethod", json!({})).await;
    refused(&unknown, 404, "Not Found: method not found");
    assert_eq!(api.calls("getme").len(), 4, "every request is recorded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offset_confirms_the_updates_before_it_and_minus_one_keeps_the_last() {
    let api = BotApi::start(TOKEN).await;
    let me = Person::new(111, "Me");
    let m: Vec<i64> = ["one", "two", "three", "four"]
        .iter()
        .map(|t| api.say(&me, t))
        .collect();
    let u: Vec<i64> = m
        .iter()
        .map(|m| api.update_id(*m).expect("its update"))
        .collect();
    let (_, all) = call(&api, "getUpdates", json!({"timeout": 0})).await;
    assert_eq!(ids(&all), u, "in id order: {all}");
    assert_eq!(all["result"][0]["message"]["text"], "one");
    assert_eq!(all["result"][0]["message"]["chat"]["type"], "private");
    let (_, v) = call(&api, "getUpdates", json!({"offset": u[1], "limit": 2})).await;
    assert_eq!(ids(&v), u[1..3]);
    // Confirmed: the first is gone even without an offset.
    let (_, v) = call(&api, "getUpdates", json!({})).await;
    assert_eq!(ids(&v), u[1..]);
    let (_, v) = call(&api, "getUpdates", json!({"offset": -1})).await;
    assert_eq!(ids(&v), u[3..]);
    let (_, v) = call(&api, "getUpdates", json!({})).await;
    assert_eq!(ids(&v), u[3..], "-1 forgot the earlier ones");
    let (_, v) = call(&api, "getUpdates", json!({"offset": u[3] + 1})).await;
    assert_eq!(ids(&v), Vec::<i64>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_wakes_on_a_push_and_times_out_when_empty() {
    let api = BotApi::start(TOKEN).await;
    let started = Instant::now();
    let (_, v) = call(&api, "getUpdates", json!({"timeout": 0})).await;
    assert_eq!(ids(&v), Vec::<i64>::new());
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "timeout 0 waited"
    );
    let started = Instant::now();
    let (_, v) = call(&api, "getUpdates", json!({"timeout": 1})).await;
    assert_eq!(ids(&v), Vec::<i64>::new());
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(3),
        "{waited:?}"
    );

    let poller = api.clone();
    let poll = tokio::spawn(async move {
        let started = Instant::now();
        let v = call(&poller, "getUpdates", json!({"timeout": 20})).await;
        (v, started.elapsed())
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while api.calls("getUpdates").len() < 3 {
        assert!(Instant::now() < deadline, "the long poll never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let said = api.say(&Person::new(111, "Me"), "wake up");
    let ((status, v), waited) = poll.await.expect("the poll");
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"][0]["message"]["message_id"], said);
    assert!(waited < Duration::from_secs(10), "not woken: {waited:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_checks_html_and_length_as_telegram_does() {
    let api = BotApi::start(TOKEN).await;
    let html = |text: &str| json!({"chat_id": 111, "text": text, "parse_mode": "HTML"});
    let (status, v) = call(
        &api,
        "sendMessage",
        html("<b>bold <i>both</i></b> <a href=\"https://x.test/?a=1&amp;b\">l</a> &lt;tag&gt; &#38; \
              <span class=\"tg-spoiler\">s</span> <pre><code class=\"language-rust\">x</code></pre>"),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["text"], "bold both l <tag> & s x");
    assert_eq!(v["result"]["chat"]["id"], 111);
    assert_eq!(v["result"]["from"]["is_bot"], true);
    let sent = api.sent();
    assert_eq!(
        (sent.len(), sent[0].parse_mode.as_deref()),
        (1, Some("HTML"))
    );

    let bad = "can't parse entities: ";
    let x = call(&api, "sendMessage", html("ok <x>no</x>")).await;
    refused(
        &x,
        400,
        &format!("Bad Request: {bad}Unsupported start tag \"x\" at byte offset 3"),
    );
    for text in [
        "<b>open",
        "<b><i>crossed</b></i>",
        "a & b",
        "&nbsp;",
        "</b>",
        "1 < 2",
        "<a>x</a>",
    ] {
        let v = call(&api, "sendMessage", html(text)).await;
        refused(&v, 400, &format!("Bad Request: {bad}"));
    }
    // The same texts without a parse mode are plain text.
    let (status, v) = call(
        &api,
        "sendMessage",
        json!({"chat_id": 111, "text": "1 < 2 & <x>"}),
    )
    .await;
    assert_eq!((status, &v["result"]["text"]), (200, &json!("1 < 2 & <x>")));

    let empty = call(&api, "sendMessage", json!({"chat_id": 111, "text": ""})).await;
    refused(&empty, 400, "Bad Request: message text is empty");
    let empty = call(&api, "sendMessage", html("<b> </b>")).await;
    refused(&empty, 400, "Bad Request: message text is empty");
    // 4096 UTF-16 units pass, one more does not; an emoji counts two; tags and entities none.
    let ok = call(
        &api,
        "sendMessage",
        html(&format!("<b>{}</b>", "&lt;".repeat(4096))),
    )
    .await;
    assert_eq!(ok.0, 200, "{}", ok.1);
    let ok = call(
        &api,
        "sendMessage",
        json!({"chat_id": 1, "text": "😀".repeat(2048)}),
    )
    .await;
    assert_eq!(ok.0, 200, "{}", ok.1);
    let long = call(
        &api,
        "sendMessage",
        json!({"chat_id": 1, "text": "😀".repeat(2048) + "a"}),
    )
    .await;
    refused(&long, 400, "Bad Request: message is too long");
    let long = call(&api, "sendMessage", html(&"é".repeat(4097))).await;
    refused(&long, 400, "Bad Request: message is too long");
    assert_eq!(api.sent().len(), 4, "refused messages are not sent");
    assert_eq!(
        api.calls("sendMessage").len(),
        16,
        "refused ones are calls too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_buttons_presses_edits_and_answers_follow_telegram() {
    let api = BotApi::start(TOKEN).await;
    let me = Person::new(111, "Me");
    let asked = api.say(&me, "approve this?");
    let keyboard = json!({"inline_keyboard": [[{"text": "Approve", "callback_data": "approve"},
                                              {"text": "Deny", "callback_data": "deny"}]]});
    let (status, v) = call(
        &api,
        "sendMessage",
        json!({"chat_id": 111, "text": "May I?", "reply_parameters": {"message_id": asked},
               "reply_markup": keyboard}),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["result"]["reply_to_message"]["message_id"], asked);
    let request = v["result"]["message_id"].as_i64().expect("a message id");
    let sent = api.sent();
    assert_eq!(
        (sent[0].reply_to, &sent[0].reply_markup),
        (Some(asked), &Some(keyboard.clone()))
    );
    let nowhere = json!({"chat_id": 222, "text": "x", "reply_parameters": {"message_id": asked}});
    let v = call(&api, "sendMessage", nowhere).await;
    refused(&v, 400, "Bad Request: message to be replied not found");
    let too_big = json!({"inline_keyboard": [[{"text": "A", "callback_data": "a".repeat(65)}]]});
    let v = call(
        &api,
        "sendMessage",
        json!({"chat_id": 111, "text": "x", "reply_markup": too_big}),
    )
    .await;
    refused(&v, 400, "Bad Request: BUTTON_DATA_INVALID");

    // A reply carries the message it answers.
    let reply = api.reply(&me, request, "what is this about?");
    let (_, v) = call(&api, "getUpdates", json!({"offset": -1})).await;
    let m = &v["result"][0]["message"];
    assert_eq!(
        (&m["message_id"], &m["reply_to_message"]["message_id"]),
        (&json!(reply), &json!(request))
    );
    assert_eq!(m["reply_to_message"]["from"]["is_bot"], true, "{v}");

    let query = api.press(&me, request, "approve");
    let (_, v) = call(&api, "getUpdates", json!({"offset": -1})).await;
    let cq = &v["result"][0]["callback_query"];
    assert_eq!(
        (&cq["id"], &cq["data"]),
        (&json!(query), &json!("approve")),
        "{v}"
    );
    assert_eq!(cq["message"]["message_id"], request);
    assert_eq!(cq["message"]["reply_markup"], keyboard);
    let answer = json!({"callback_query_id": query, "text": "Approved"});
    assert_eq!(
        call(&api, "answerCallbackQuery", answer.clone()).await.0,
        200
    );
    let again = call(&api, "answerCallbackQuery", answer).await;
    refused(&again, 400, "Bad Request: query is too old");
    let answered = api.answered_callbacks();
    assert_eq!(
        (answered.len(), answered[0].text.as_deref()),
        (1, Some("Approved"))
    );

    let edit = json!({"chat_id": 111, "message_id": request});
    let (status, v) = call(&api, "editMessageReplyMarkup", edit.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert!(v["result"].get("reply_markup").is_none(), "{v}");
    let again = call(&api, "editMessageReplyMarkup", edit).await;
    refused(&again, 400, "Bad Request: message is not modified");
    let theirs = call(
        &api,
        "editMessageReplyMarkup",
        json!({"chat_id": 111, "message_id": asked}),
    )
    .await;
    refused(&theirs, 400, "Bad Request: message can't be edited");
    let edits = api.edits();
    assert_eq!(
        (edits.len(), edits[0].message_id, &edits[0].reply_markup),
        (1, request, &None)
    );
    // A callback query is never delivered to a bot that asked for messages only.
    api.press(&me, request, "deny");
    let only = json!({"offset": -1, "allowed_updates": ["message"]});
    assert_eq!(
        ids(&call(&api, "getUpdates", only).await.1),
        Vec::<i64>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_answer_once_and_a_revoked_token_is_refused() {
    let api = BotApi::start(TOKEN).await;
    let msg = json!({"chat_id": 111, "text": "hi"});
    api.fail_next("sendMessage", Fault::TooManyRequests { retry_after: 3 });
    let v = call(&api, "sendMessage", msg.clone()).await;
    refused(&v, 429, "Too Many Requests: retry after 3");
    assert_eq!(v.1["parameters"]["retry_after"], 3, "{}", v.1);
    assert_eq!(
        call(&api, "sendMessage", msg.clone()).await.0,
        200,
        "only the next one"
    );

    api.fail_next("SendMessage", Fault::CantParseEntities);
    assert_eq!(
        call(&api, "sendMessage", msg.clone()).await.0,
        200,
        "plain text is not parsed"
    );
    let html = json!({"chat_id": 111, "text": "<b>hi</b>", "parse_mode": "HTML"});
    let v = call(&api, "sendMessage", html.clone()).await;
    refused(&v, 400, "Bad Request: can't parse entities: ");
    assert_eq!(call(&api, "sendMessage", html).await.0, 200);

    api.fail_next("getMe", Fault::Unauthorized);
    refused(&call(&api, "getMe", json!({})).await, 401, "Unauthorized");
    assert_eq!(call(&api, "getMe", json!({})).await.0, 200);

    // A revoke ends a long poll in flight too.
    let poller = api.clone();
    let poll =
        tokio::spawn(async move { call(&poller, "getUpdates", json!({"timeout": 20})).await });
    let deadline = Instant::now() + Duration::from_secs(5);
    while api.calls("getUpdates").is_empty() {
        assert!(Instant::now() < deadline, "the long poll never arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    api.revoke();
    let v = tokio::time::timeout(Duration::from_secs(5), poll)
        .await
        .expect("the poll ends on revoke")
        .expect("the poll");
    refused(&v, 401, "Unauthorized");
    refused(&call(&api, "getMe", json!({})).await, 401, "Unauthorized");
    let statuses: Vec<u16> = api.calls("getMe").iter().map(|c| c.status).collect();
    assert_eq!(statuses, [401, 200, 401]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn its_objects_are_read_by_a_strict_client() {
    use teloxide_core::types::{MaybeInaccessibleMessage, Me, Message, Update, UpdateKind};
    let api = BotApi::start(TOKEN).await;
    let me = Person::new(111, "Me");
    let (_, v) = call(&api, "getMe", json!({})).await;
    let bot: Me = serde_json::from_value(v["result"].clone()).expect("getMe is a Me");
    assert_eq!(bot.mention(), "@hermes_bot");

    let asked = api.say(&me, "hello");
    let keyboard = json!({"inline_keyboard": [[{"text": "Approve", "callback_data": "approve"}]]});
    let send = json!({"chat_id": 111, "text": "<b>May I?</b>", "parse_mode": "HTML",
                      "reply_parameters": {"message_id": asked}, "reply_markup": keyboard});
    let (_, v) = call(&api, "sendMessage", send).await;
    let sent: Message = serde_json::from_value(v["result"].clone()).expect("a sent Message");
    assert_eq!(sent.text(), Some("May I?"));
    let request = i64::from(sent.id.0);
    api.reply(&me, request, "why?");
    api.say_in_group(&me, -1001234567890, "what time is it", true);
    api.press(&me, request, "approve");
    let edit = json!({"chat_id": 111, "message_id": request});
    let (_, v) = call(&api, "editMessageReplyMarkup", edit).await;
    let edited: Message = serde_json::from_value(v["result"].clone()).expect("an edited Message");
    assert_eq!(edited.reply_markup(), None);

    let (_, v) = call(&api, "getUpdates", json!({})).await;
    let updates = v["result"].as_array().cloned().unwrap_or_default();
    assert_eq!(updates.len(), 4, "{v}");
    for u in updates {
        // From text, as the client reads it (its updates take borrowed keys only).
        let update: Update = serde_json::from_str(&u.to_string()).expect("an Update");
        match update.kind {
            UpdateKind::Message(m) => assert!(m.text().is_some() && m.from.is_some(), "{u}"),
            UpdateKind::CallbackQuery(q) => {
                assert_eq!(q.data.as_deref(), Some("approve"));
                let on = q.message.expect("the message pressed on");
                assert!(matches!(on, MaybeInaccessibleMessage::Regular(_)), "{u}");
            }
            _ => panic!("not read as a message or a press: {u}"),
        }
    }
}
