//! The Telegram channel of the real daemon against the Bot API stand-in: the person is user
//! 111 (whose private chat with the bot is chat 111), a stranger is 222, the agent the
//! `hermes-agent serve` process (so it can be killed -9 and restarted) with a scripted model.
//!
//! A test says nothing until `/healthz` shows the channel `ok`; every wait is a bounded poll on
//! a condition (what the stand-in was sent, the API's view of the inbox and tasks, the health).

use super::standin::{BotApi, Fault, Person, Sent};
use crate::common::{echo_model, task_text, text};
use crate::process::{Daemon, base_command};
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_surfaces::daemon::addr_path;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const TOKEN: &str = "123456789:TEST-token_abcdefghijklmnopqrstuvwxyz";
/// The token's secret half: in no log and no API answer.
const SECRET: &str = "TEST-token_abcdefghijklmnopqrstuvwxyz";
const PATIENCE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);
const ME: i64 = 111;
const GROUP: i64 = -1001234567890;
const NO_TOOLS: &str = "  manifests_dir: /nonexistent-hermes-telegram-test-tools\n";

fn me() -> Person {
    Person::new(ME, "Me")
}

/// Wait (bounded) until `cond` holds.
async fn until(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(POLL).await;
    }
}

/// One test's world: the Bot API stand-in, the model, the settings and data dir.
struct World {
    dir: tempfile::TempDir,
    bot: BotApi,
    model: ScriptedModel,
}

impl World {
    /// A world whose model echoes its task.
    async fn new() -> World {
        World::with(ScriptedModel::start_with(echo_model).await, NO_TOOLS).await
    }

    /// A world whose model is `model`; `tools`: the lines under `tools:`.
    async fn with(model: ScriptedModel, tools: &str) -> World {
        World::with_extra(model, tools, "").await
    }

    /// [`World::with`], `extra` appended to the settings' top level.
    async fn with_extra(model: ScriptedModel, tools: &str, extra: &str) -> World {
        let bot = BotApi::start(TOKEN).await;
        let dir = tempfile::tempdir().expect("temp dir");
        let yaml = format!(
            "model:\n  profiles:\n    fast: {{base_url: \"{model}\", model: scripted, timeout_s: 60}}\n\
             tools:\n{tools}\
             context:\n  summary_enabled: false\n\
             scheduler:\n  timezone: UTC\n\
             server:\n  port: 0\n\
             agent:\n  workers: 2\n\
             channels:\n  telegram:\n    bot_token: ${{TELEGRAM_BOT_TOKEN}}\n    \
             allow_from: [111]\n    chats: {{me: 111}}\n    api_url: \"{api}\"\n{extra}",
            model = model.base_url(),
            api = bot.url(),
        );
        std::fs::write(dir.path().join("settings.yaml"), yaml).expect("settings");
        World { dir, bot, model }
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn command(&self, args: &[&str]) -> Command {
        self.command_on(&self.data(), args)
    }

    fn command_on(&self, data: &Path, args: &[&str]) -> Command {
        let mut cmd = base_command(self.dir.path(), &[("TELEGRAM_BOT_TOKEN", TOKEN)]);
        cmd.arg("--config")
            .arg(self.dir.path().join("settings.yaml"))
            .arg("--data-dir")
            .arg(data)
            .args(args);
        cmd
    }

    fn cli(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("the CLI runs")
    }

    /// Start the daemon; wait until it answers and its Telegram channel is `ok`.
    async fn start(&self) -> Daemon {
        self.start_on(self.data(), true).await
    }

    /// Start a daemon on data dir `data` (another node on the same database has another);
    /// wait until it answers and, with `polling`, until its Telegram channel is `ok`.
    async fn start_on(&self, data: PathBuf, polling: bool) -> Daemon {
        let _ = std::fs::remove_file(addr_path(&data));
        let cmd = self.command_on(&data, &["serve"]);
        let mut d = Daemon::spawn_logging_to(cmd, data.with_extension("log"), &data)
            .with_patience(PATIENCE);
        d.ready_when("the Telegram channel ok", |h| {
            !polling || h["telegram"]["state"] == "ok"
        })
        .await;
        d
    }

    /// Messages the bot sent to chat 111 replying to `to`.
    fn replies_to(&self, to: i64) -> Vec<Sent> {
        let sent = self.bot.sent().into_iter();
        sent.filter(|s| s.chat_id == ME && s.reply_to == Some(to))
            .collect()
    }

    /// The first message the bot sent to chat 111 replying to `to`.
    async fn answer_to(&self, to: i64) -> Sent {
        let replies = |s: &Sent| s.chat_id == ME && s.reply_to == Some(to);
        self.bot.wait_sent(replies, PATIENCE).await
    }

    /// Every task text the model was asked about.
    fn asked(&self) -> Vec<String> {
        self.model.requests().iter().map(task_text).collect()
    }
}

/// Wait (bounded) until the outbox has a notice recorded sent: a kill -9 before that may send
/// it again after the restart, as at-least-once delivery must.
async fn recorded_sent(d: &Daemon) {
    d.until("an answer recorded as sent", || async {
        let v = d.get_ok("/v1/deliveries?state=sent").await;
        v["deliveries"]
            .as_array()
            .is_some_and(|n| !n.is_empty())
            .then_some(())
    })
    .await;
}

/// The tasks whose origin is Telegram.
async fn telegram_tasks(d: &Daemon) -> Vec<Value> {
    let v = d.get_ok("/v1/tasks?limit=1000").await;
    let tasks = v["tasks"].as_array().cloned().unwrap_or_default();
    tasks
        .into_iter()
        .filter(|t| t["origin"] == "telegram")
        .collect()
}

/// Rows that became a task.
fn with_task(rows: &[Value]) -> Vec<&Value> {
    rows.iter().filter(|r| r["task_id"].is_string()).collect()
}

/// A model answering every task with `answer`.
async fn answering(answer: &'static str) -> ScriptedModel {
    ScriptedModel::start_with(move |_| Reply::text(answer)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_message_becomes_a_task_answered_in_html_as_a_reply_to_it() {
    let w = World::new().await;
    let d = w.start().await;
    let said = w.bot.say(&me(), "what is on today");
    let answer = w.answer_to(said).await;
    assert_eq!(answer.parse_mode.as_deref(), Some("HTML"), "{answer:?}");
    assert!(
        answer.shown.contains("answer to: what is on today"),
        "{answer:?}"
    );
    let rows = d
        .inbox_until("a row with a task", |r| !with_task(r).is_empty())
        .await;
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let row = &rows[0];
    assert_eq!(
        (&row["channel"], &row["from"]),
        (&json!("telegram"), &json!("111")),
        "{row}"
    );
    let task = d.task(row["task_id"].as_str().unwrap_or_default()).await;
    assert_eq!(task["origin"], "telegram", "{task}");
    d.inbox_until("the row acted on", |r| {
        r.first().is_some_and(|r| r["state"] == "acted")
    })
    .await;
    let h = d
        .health_until("a message in and out", |h| {
            h["telegram"]["messages_in"].as_u64() >= Some(1)
                && h["telegram"]["messages_out"].as_u64() >= Some(1)
        })
        .await;
    assert_eq!(h["telegram"]["bot"], "@hermes_bot", "{h}");
    // A webhook left on the bot would refuse polling: cleared once, at the connection.
    assert_eq!(w.bot.calls("deleteWebhook").len(), 1);
    assert!(!d.log().contains(SECRET), "the bot token is in the log");
    assert!(
        !h.to_string().contains(SECRET),
        "the bot token is in /healthz"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_from_before_the_first_start_is_never_acted_on() {
    let w = World::new().await;
    let old = w.bot.say(&me(), "old news from the backlog");
    let d = w.start().await;
    let said = w.bot.say(&me(), "a question after the start");
    w.answer_to(said).await;
    let rows = d
        .inbox_until("the new message's task", |r| !with_task(r).is_empty())
        .await;
    assert_eq!(with_task(&rows).len(), 1, "{rows:#?}");
    assert_eq!(telegram_tasks(&d).await.len(), 1);
    assert!(w.replies_to(old).is_empty(), "{:?}", w.replies_to(old));
    let asked = w.asked();
    assert!(!asked.iter().any(|t| t.contains("old news")), "{asked:?}");
}

/// Ten distinct paragraphs of 990 characters: `P00 alpha…`, `P01 …`.
fn paragraphs() -> Vec<String> {
    let words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima ";
    (0..10)
        .map(|i| {
            let p = format!("P{i:02} {}", words.repeat(20));
            p[..990].trim_end().to_string() + "."
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ten_thousand_character_answer_arrives_whole_in_order_in_three_messages() {
    let long = paragraphs().join("\n\n");
    let model = ScriptedModel::start_with(move |_| Reply::text(&long)).await;
    let w = World::with(model, NO_TOOLS).await;
    let _d = w.start().await;
    let said = w.bot.say(&me(), "the long report please");
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    let joined = || {
        let to_me = w.bot.sent().into_iter().filter(|s| s.chat_id == ME);
        squeeze(&to_me.map(|s| s.shown).collect::<Vec<_>>().join(" "))
    };
    w.bot.wait_sent_count(ME, 3, PATIENCE).await;
    until("the last paragraph", || {
        joined().contains(&squeeze(&paragraphs()[9]))
    })
    .await;
    let to_me: Vec<Sent> = w
        .bot
        .sent()
        .into_iter()
        .filter(|s| s.chat_id == ME)
        .collect();
    assert_eq!(to_me.len(), 3, "{to_me:#?}");
    assert_eq!(to_me[0].reply_to, Some(said), "{:?}", to_me[0]);
    for s in &to_me {
        assert!(s.shown.encode_utf16().count() <= 4096, "{s:?}");
    }
    let all = joined();
    let mut from = 0;
    for (i, p) in paragraphs().iter().enumerate() {
        let at = all[from..].find(&squeeze(p));
        let at = at.unwrap_or_else(|| panic!("paragraph {i} missing or out of order: {to_me:#?}"));
        from += at + squeeze(p).len();
    }
}

/// Calls `mark` with the task's last word once, then answers with what it was told.
fn mark_model(req: &Value) -> Reply {
    let seen = serde_json::to_string(&req["messages"]).unwrap_or_default();
    if seen.contains("<tool_result tool=") || seen.contains("<tool_error tool=") {
        return Reply::text("marked as asked");
    }
    let task = task_text(req);
    let who = task
        .split_whitespace()
        .last()
        .unwrap_or("nobody")
        .to_string();
    Reply::tool_calls(&[("mark", json!({ "to": who }))])
}

/// A world with a `mark` manifest tool (approval: required) appending its argument to a file,
/// each request sent to `telegram:me`; the file.
async fn world_with_mark() -> (World, PathBuf) {
    let w = World::with(ScriptedModel::start_with(mark_model).await, NO_TOOLS).await;
    let tools = w.dir.path().join("tools");
    std::fs::create_dir_all(&tools).expect("tools dir");
    let marks = w.dir.path().join("marks.txt");
    // The one file outside its work dir the confined tool may write.
    std::fs::write(&marks, "").expect("marks file");
    let manifest = format!(
        "name: mark\ndescription: Mark someone.\n\
         parameters: {{type: object, properties: {{to: {{type: string}}}}, required: [to]}}\n\
         command: {{argv: [\"/bin/sh\", \"-c\", \"echo \\\"$0\\\" >> {m}\", \"{{{{to}}}}\"]}}\n\
         approval: required\n\
         sandbox: {{write: [\"{m}\"]}}\n",
        m = marks.display(),
    );
    std::fs::write(tools.join("mark.yaml"), manifest).expect("manifest");
    let lines = format!(
        "  manifests_dir: {}\n  approval_notify: [\"telegram:me\"]\n",
        tools.display()
    );
    let path = w.dir.path().join("settings.yaml");
    let settings = std::fs::read_to_string(&path).expect("settings");
    std::fs::write(&path, settings.replace(NO_TOOLS, &lines)).expect("settings");
    (w, marks)
}

fn marks(path: &Path) -> Vec<String> {
    let all = std::fs::read_to_string(path).unwrap_or_default();
    all.lines().map(str::to_string).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approve_by_button_runs_the_tool_once_and_a_second_press_changes_nothing() {
    let (w, mark_file) = world_with_mark().await;
    let d = w.start().await;
    let said = w.bot.say(&me(), "please mark bob");
    let asks = |s: &Sent| s.chat_id == ME && s.reply_markup.is_some();
    let request = w.bot.wait_sent(asks, PATIENCE).await;
    let keyboard = json!({"inline_keyboard": [[{"text": "Approve", "callback_data": "approve"},
                                              {"text": "Deny", "callback_data": "deny"}]]});
    assert_eq!(
        request.reply_markup.as_ref(),
        Some(&keyboard),
        "{request:?}"
    );
    assert!(request.shown.contains("mark"), "{request:?}");
    assert!(marks(&mark_file).is_empty(), "ran before approval");

    // A stranger's press (the request in a group, say) is recorded and changes nothing: no
    // answer, the buttons stay, the request stays open.
    let stranger = w
        .bot
        .press(&Person::new(222, "Eve"), request.message_id, "deny");
    d.inbox_until("the stranger's press recorded", |r| {
        r.iter()
            .any(|m| m["from"] == "222" && m["reason"] == "not_allowed")
    })
    .await;
    assert!(
        !w.bot.answered_callbacks().iter().any(|a| a.id == stranger),
        "a stranger's press was answered"
    );
    assert!(
        w.bot.edits().is_empty(),
        "a stranger's press took the buttons"
    );
    let open = d.get_ok("/v1/approvals?state=open").await;
    assert_eq!(
        open["approvals"].as_array().map(Vec::len),
        Some(1),
        "{open}"
    );

    let query = w.bot.press(&me(), request.message_id, "approve");
    let answered = |q: &str| w.bot.answered_callbacks().iter().any(|a| a.id == q);
    until("the press answered", || answered(&query)).await;
    let removed = || {
        let edits = w.bot.edits();
        edits
            .iter()
            .any(|e| e.message_id == request.message_id && e.reply_markup.is_none())
    };
    until("the buttons removed", removed).await;
    let edit = w
        .bot
        .edits()
        .into_iter()
        .find(|e| e.message_id == request.message_id);
    assert_eq!(edit.map(|e| e.chat_id), Some(ME));
    // The press confirmed, as a reply to the request.
    w.answer_to(request.message_id).await;
    let rows = d
        .inbox_until("the task", |r| !with_task(r).is_empty())
        .await;
    let task = with_task(&rows)[0]["task_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let t = d.finished(&task).await;
    assert_eq!(t["state"], "succeeded", "{t}");
    assert_eq!(marks(&mark_file), ["bob"]);
    let approved = d.get_ok("/v1/approvals?state=approved").await;
    let approved = approved["approvals"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(approved.len(), 1, "{approved:#?}");
    assert_eq!(approved[0]["decided_by"], "telegram", "{approved:#?}");
    let done = |s: &Sent| s.reply_to == Some(said) && s.shown.contains("marked as asked");
    w.bot.wait_sent(done, PATIENCE).await;

    // Pressed again (a stale client): answered, and nothing else changes.
    let again = w.bot.press(&me(), request.message_id, "approve");
    until("the second press answered", || answered(&again)).await;
    let approved = d.get_ok("/v1/approvals?state=approved").await;
    assert_eq!(
        approved["approvals"].as_array().map(Vec::len),
        Some(1),
        "{approved}"
    );
    let open = d.get_ok("/v1/approvals?state=open").await;
    assert_eq!(
        open["approvals"].as_array().map(Vec::len),
        Some(0),
        "{open}"
    );
    assert_eq!(marks(&mark_file), ["bob"], "the tool ran again");
    assert_eq!(telegram_tasks(&d).await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stranger_is_recorded_as_not_allowed_and_never_answered() {
    let w = World::new().await;
    let d = w.start().await;
    w.bot
        .say(&Person::new(222, "Stranger"), "hello, do what I say");
    let rows = d
        .inbox_until("the stranger's row", |r| {
            r.iter().any(|m| m["from"] == "222")
        })
        .await;
    let row = rows
        .iter()
        .find(|m| m["from"] == "222")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (&row["state"], &row["reason"]),
        (&json!("ignored"), &json!("not_allowed")),
        "{row}"
    );
    assert!(row["task_id"].is_null(), "{row}");
    // What the person asks after it is answered: the stranger's turn has passed.
    let said = w.bot.say(&me(), "anything for me");
    w.answer_to(said).await;
    let to_stranger: Vec<_> = w
        .bot
        .calls("sendMessage")
        .into_iter()
        .filter(|c| c.body["chat_id"] == 222 || c.body["chat_id"] == "222")
        .collect();
    assert!(to_stranger.is_empty(), "{to_stranger:#?}");
    assert_eq!(telegram_tasks(&d).await.len(), 1);
    assert!(!w.asked().iter().any(|t| t.contains("do what I say")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_group_only_a_message_mentioning_the_bot_becomes_a_task() {
    let w = World::new().await;
    let d = w.start().await;
    w.bot
        .say_in_group(&me(), GROUP, "what time is it, anyone", false);
    let not_addressed = |r: &Value| r["state"] == "ignored" && r["reason"] == "not_addressed";
    d.inbox_until("the unaddressed row", |r| r.iter().any(not_addressed))
        .await;
    assert!(telegram_tasks(&d).await.is_empty());
    let mention = w
        .bot
        .say_in_group(&me(), GROUP, "@hermes_bot what time is it", true);
    let answer = w
        .bot
        .wait_sent(
            |s| s.chat_id == GROUP && s.reply_to == Some(mention),
            PATIENCE,
        )
        .await;
    assert!(answer.shown.contains("what time is it"), "{answer:?}");
    let rows = d
        .inbox_until("the mention's task", |r| !with_task(r).is_empty())
        .await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(with_task(&rows).len(), 1, "{rows:#?}");
    assert_eq!(telegram_tasks(&d).await.len(), 1);
    let to_group = w
        .bot
        .sent()
        .into_iter()
        .filter(|s| s.chat_id == GROUP)
        .count();
    assert_eq!(to_group, 1, "{:#?}", w.bot.sent());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_kill_9_a_message_said_while_down_is_acted_on_once_and_none_twice() {
    let w = World::new().await;
    let mut d = w.start().await;
    let a = w.bot.say(&me(), "message A before the crash");
    d.inbox_until("A's row", |r| !r.is_empty()).await;
    // Killed once A's answer is out and recorded: a kill between Telegram taking a send and the
    // outbox marking it sent would send it again after the restart (delivery is at least once,
    // and the Bot API has no way to ask whether a message went out), which is not what this
    // test is about — that A is not taken in and acted on again.
    w.answer_to(a).await;
    recorded_sent(&d).await;
    d.kill9();
    let b = w.bot.say(&me(), "message B while down");
    let restarted = Instant::now();
    let d = w.start().await;
    w.answer_to(b).await;
    let rows = d.inbox_until("B's task", |r| with_task(r).len() >= 2).await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    let tasks = telegram_tasks(&d).await;
    assert_eq!(tasks.len(), 2, "{tasks:#?}");
    assert_ne!(rows[0]["task_id"], rows[1]["task_id"]);
    assert_eq!(w.replies_to(a).len(), 1, "{:#?}", w.replies_to(a));
    assert_eq!(w.replies_to(b).len(), 1, "{:#?}", w.replies_to(b));
    let a_update = w.bot.update_id(a).expect("A's update");
    let polls = w.bot.calls("getUpdates");
    let first = polls
        .iter()
        .find(|c| c.at >= restarted)
        .expect("a poll after the restart");
    let offset = first.body["offset"].as_i64().unwrap_or(0);
    assert!(
        offset > a_update,
        "first poll after the restart: {} (A was {a_update})",
        first.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_is_honoured_before_the_answer_is_sent_again() {
    let w = World::new().await;
    let _d = w.start().await;
    w.bot
        .fail_next("sendMessage", Fault::TooManyRequests { retry_after: 2 });
    let said = w.bot.say(&me(), "are you rate limited");
    let answer = w.answer_to(said).await;
    let calls = w.bot.calls("sendMessage");
    let refused = calls
        .iter()
        .find(|c| c.status == 429)
        .expect("the refused send");
    let waited = answer.at.duration_since(refused.at);
    assert!(
        waited >= Duration::from_secs(2),
        "sent again after {waited:?}: {calls:#?}"
    );
    assert!(answer.shown.contains("are you rate limited"), "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_on_getupdates_is_retried_soon_and_answers_go_out_meanwhile() {
    let model = ScriptedModel::start_with(|req: &Value| {
        let task = task_text(req);
        if task.contains("slow one") {
            Reply::Delay(
                Duration::from_secs(2),
                Box::new(Reply::text("the slow answer")),
            )
        } else {
            Reply::text(&format!("echo: {task}"))
        }
    })
    .await;
    let w = World::with(model, NO_TOOLS).await;
    let d = w.start().await;
    let slow = w.bot.say(&me(), "the slow one");
    d.until("the slow task to start", || async {
        (!telegram_tasks(&d).await.is_empty()).then_some(())
    })
    .await;
    // Another poller of the same bot (or the old long poll of a restart) takes the updates
    // three times in a row; a stranger's message makes the current long poll return.
    for _ in 0..3 {
        w.bot.fail_next("getUpdates", Fault::Conflict);
    }
    w.bot.say(&Person::new(999, "Stranger"), "poke");
    let answer = w.answer_to(slow).await;
    assert!(answer.shown.contains("the slow answer"), "{answer:?}");
    d.health_until("the channel down for the conflict", |h| {
        h["telegram"]["state"] == "down"
            || w.bot.calls("getUpdates").iter().any(|c| c.status == 409)
    })
    .await;
    // Reading comes back after a short backoff, not the longest wait.
    let later = w.bot.say(&me(), "are you back");
    let answer = w.answer_to(later).await;
    assert!(answer.shown.contains("are you back"), "{answer:?}");
    let conflicts = w.bot.calls("getUpdates");
    assert_eq!(conflicts.iter().filter(|c| c.status == 409).count(), 3);
}

const MALFORMED: &str = "**bold _nested `code <tag> & [link](javascript:x)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_markdown_still_arrives_with_its_text() {
    let w = World::with(answering(MALFORMED).await, NO_TOOLS).await;
    let _d = w.start().await;
    let said = w.bot.say(&me(), "say something odd");
    let answer = w.answer_to(said).await;
    for part in ["bold", "code", "<tag>", "&"] {
        assert!(
            answer.shown.contains(part),
            "{part:?} is missing: {answer:?}"
        );
    }
    assert!(!answer.text.contains("href=\"javascript"), "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_telegram_cannot_parse_is_sent_again_as_plain_text() {
    let w = World::with(answering("**Bold** claim: 1 < 2 & 3 > 2").await, NO_TOOLS).await;
    let _d = w.start().await;
    w.bot.fail_next("sendMessage", Fault::CantParseEntities);
    let said = w.bot.say(&me(), "compare the numbers");
    let answer = w.answer_to(said).await;
    assert_eq!(answer.parse_mode, None, "{answer:?}");
    for part in ["Bold", "1 < 2 & 3 > 2"] {
        assert!(
            answer.text.contains(part),
            "{part:?} is missing: {answer:?}"
        );
    }
    for tag in ["<b>", "<strong>", "&amp;", "&lt;"] {
        assert!(
            !answer.text.contains(tag),
            "{tag} in the plain text: {answer:?}"
        );
    }
    let calls = w.bot.calls("sendMessage");
    let refused: Vec<_> = calls.iter().filter(|c| c.status == 400).collect();
    assert_eq!(refused.len(), 1, "{calls:#?}");
    assert_eq!(refused[0].body["parse_mode"], "HTML", "{calls:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_turns_the_channel_down_and_polling_stops() {
    let w = World::new().await;
    let d = w.start().await;
    w.bot.revoke();
    let h = d
        .health_until("telegram down", |h| h["telegram"]["state"] == "down")
        .await;
    let error = h["telegram"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(error.contains("401") || error.contains("revoked"), "{h}");
    assert!(
        !h.to_string().contains(SECRET),
        "the token is in /healthz: {h}"
    );
    let seen = w.bot.calls("getUpdates").len();
    let window = Instant::now() + Duration::from_secs(3);
    while Instant::now() < window {
        let now = w.bot.calls("getUpdates").len();
        assert_eq!(now, seen, "still polling after down:\n{}", d.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!d.log().contains(SECRET), "the bot token is in the log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_check_accepts_the_settings_and_refuses_a_name_in_allow_from() {
    let w = World::new().await;
    let out = w.cli(&["config", "check"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let path = w.dir.path().join("settings.yaml");
    let yaml = std::fs::read_to_string(&path).expect("settings");
    let bad = yaml.replace("allow_from: [111]", "allow_from: [\"me\"]");
    assert_ne!(bad, yaml);
    std::fs::write(&path, bad).expect("settings");
    let out = w.cli(&["config", "check"]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("channels.telegram.allow_from"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_asks_the_bot_api_whose_token_it_is_or_the_daemon_how_it_polls() {
    let w = World::new().await;
    let out = w.cli(&["doctor"]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        said.contains("telegram bot 123456789") && said.contains("the bot @hermes_bot"),
        "{said}"
    );
    assert!(
        !said.contains(SECRET),
        "the bot token is in doctor's output"
    );
    let d = w.start().await;
    let out = w.cli(&["doctor"]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(said.contains("polling as @hermes_bot"), "{said}");
    drop(d);
    w.bot.revoke();
    let out = w.cli(&["doctor"]);
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(
        said.contains("401") && said.contains("@BotFather"),
        "{said}"
    );
    // No daemon runs: nothing stopped, nothing to restart.
    assert!(!said.contains("restart the daemon"), "{said}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_two_daemons_on_postgres_one_polls_and_the_other_takes_over_once_its_lease_lapsed() {
    let db = tokio::task::spawn_blocking(|| crate::postgres::cluster::cluster().create_database())
        .await
        .expect("the cluster's thread");
    let url = crate::postgres::cluster::cluster().url(&db);
    let model = ScriptedModel::start_with(echo_model).await;
    let storage = format!("storage:\n  url: \"{url}\"\n  node_lease_s: 3\n");
    let w = World::with_extra(model, NO_TOOLS, &storage).await;
    let mut a = w.start_on(w.dir.path().join("node-a"), true).await;
    let b = w.start_on(w.dir.path().join("node-b"), false).await;
    let standing_by = |h: &Value| {
        h["telegram"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("standing by"))
    };
    b.health_until("node b standing by", standing_by).await;
    let first = w.bot.say(&me(), "first question");
    w.answer_to(first).await;
    // A answered; B still stands by rather than polling beside it (two pollers of one bot
    // are a 409 on Telegram).
    let h = b.health().await.expect("node b answers");
    assert!(standing_by(&h), "{h}");

    // A dies — once the answer is recorded sent, or B would rightly send it again (delivery is
    // at least once); once its lease lapsed B holds the channel and polls from the saved offset.
    recorded_sent(&a).await;
    a.kill9();
    b.health_until("node b polling", |h| h["telegram"]["state"] == "ok")
        .await;
    let second = w.bot.say(&me(), "second question");
    w.answer_to(second).await;
    // Each once: the first was not taken in again by B.
    for said in [first, second] {
        assert_eq!(w.replies_to(said).len(), 1, "answers to {said}");
    }
    let rows = b.inbox().await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
}
