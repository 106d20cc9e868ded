//! What llama-cpp-python 0.3.36 (`--chat_format chatml-function-calling`, as
//! scripts/local-model.sh starts it) does with a native request that offers tools with
//! `"tool_choice": "auto"`, reproduced with the scripted model. The server renders the tools (its
//! `usage.prompt_tokens` counts them, so `tool_mode: auto` stays native), and:
//!
//! - when the model chooses to answer in words, the answer comes back as `content: ""`: the
//!   follow-up grammar it generates under (`root ::= functions | "<|im_end|>"`) allows only a
//!   function name or the end;
//! - `tool`-role messages are dropped from the prompt (its template has no branch for them).
//!
//! So a native task against it could never end with an answer. `tool_mode: auto` takes the
//! blank reply as evidence that the server ignores tools and asks again in text mode, and
//! `doctor`'s probe asks what fails there (a worded answer with tools offered, a `tool` message)
//! and says `tool_mode: text`, as the README and scripts/local-model.sh do.

use crate::common;

use hermes_config::Config;
use hermes_engine::llm::scripted::{Reply, ScriptedModel};
use hermes_engine::llm::{Gateway, ToolProbe, estimate_tokens};
use hermes_store::TaskState;
use hermes_surfaces::doctor::{Check, Verdict};
use serde_json::{Value, json};

/// The server's answer to a native request whose model chose "message:".
fn blank_answer() -> Reply {
    Reply::Body(json!({
        "id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "smollm2",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": ""}}],
        // prompt_tokens is filled in from the request: the tools are counted, as the real
        // server counts them.
        "usage": {"completion_tokens": 9},
    }))
}

#[tokio::test]
async fn auto_mode_gets_an_answer_from_a_server_that_blanks_answers_when_offered_tools() {
    let model = ScriptedModel::start_with(|req| {
        if req.get("tools").is_some() {
            blank_answer()
        } else {
            Reply::text("Paris.")
        }
    })
    .await;
    let t = common::app(common::settings(&model.base_url()), vec![]).await;
    let r = common::run_task(&t, "What is the capital of France?").await;
    assert_eq!(
        r.task.state,
        TaskState::Succeeded,
        "reason {:?}: {:?}; requests: {}",
        r.task.reason,
        r.task.error,
        model.requests().len()
    );
    assert_eq!(r.task.answer.as_deref(), Some("Paris."));
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one native request, one in text mode");
    assert!(requests[0].get("tools").is_some());
    assert!(requests[1].get("tools").is_none());
}

/// How an imitated server behaves: whether it blanks worded answers when offered tools, and
/// whether it drops `tool`-role messages before building (and counting) the prompt.
#[derive(Clone, Copy)]
struct Server {
    blanks_worded_answers: bool,
    drops_tool_messages: bool,
}

/// llama-cpp-python 0.3.36 with `--chat_format chatml-function-calling`, as scripts/local-model.sh
/// starts it.
const CHATML_FUNCTION_CALLING: Server = Server {
    blanks_worded_answers: true,
    drops_tool_messages: true,
};

/// An answer as `server` would give it: offered tools and asked to call one, it calls it; offered
/// tools otherwise, it answers "" if it blanks worded answers; without tools it answers from what
/// it saw — a word a tool returned only if the tool's message reached the prompt.
fn imitate(server: Server, req: &Value) -> Reply {
    let mut seen = req.clone();
    if server.drops_tool_messages
        && let Some(messages) = seen["messages"].as_array_mut()
    {
        messages.retain(|m| m["role"] != "tool");
    }
    let prompt_tokens = estimate_tokens(&seen.to_string());
    let messages = seen["messages"].as_array().cloned().unwrap_or_default();
    let last = messages.last().cloned().unwrap_or(Value::Null);
    let asked_to_call = last["role"] == "user"
        && last["content"]
            .as_str()
            .is_some_and(|c| c.contains("Call the tool"));
    let offered = req.get("tools").is_some();
    let message = if offered && asked_to_call {
        json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
               "function": {"name": "ping", "arguments": "{\"n\": 1}"}}]})
    } else if offered && server.blanks_worded_answers {
        json!({"role": "assistant", "content": ""})
    } else {
        let returned = messages
            .iter()
            .filter(|m| m["role"] == "tool")
            .filter_map(|m| m["content"].as_str())
            .find_map(|c| c.split("the word is ").nth(1))
            .and_then(|rest| rest.split(['.', ' ']).next())
            .map(str::to_string);
        json!({"role": "assistant", "content": returned.unwrap_or_else(|| "ready".into())})
    };
    Reply::Body(json!({
        "id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "smollm2",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 3},
    }))
}

#[tokio::test]
async fn the_tool_probe_says_text_mode_where_native_calls_come_back_but_tasks_cannot_end() {
    let cases = [
        (CHATML_FUNCTION_CALLING, false),
        (
            Server {
                blanks_worded_answers: true,
                drops_tool_messages: false,
            },
            false,
        ),
        (
            Server {
                blanks_worded_answers: false,
                drops_tool_messages: true,
            },
            false,
        ),
        (
            Server {
                blanks_worded_answers: false,
                drops_tool_messages: false,
            },
            true,
        ),
    ];
    for (server, native) in cases {
        let model = ScriptedModel::start_with(move |req| imitate(server, req)).await;
        let gateway = Gateway::new(&common::settings(&model.base_url()).model).unwrap();
        let probe = gateway.probe_tools("fast").await.expect("probed");
        let advice = probe.advice("fast", hermes_config::ToolMode::Native).words;
        assert_eq!(probe == ToolProbe::Native, native, "{advice}");
        if !native {
            assert!(
                advice.contains("model.profiles.fast.tool_mode: text"),
                "{advice}"
            );
        }
        if server.drops_tool_messages {
            assert!(advice.contains("`tool` messages"), "{advice}");
        }
        model.stop().await;
    }
}

/// `doctor`'s check of the fast profile's tool calling, on the imitation of llama-cpp-python's
/// `chatml-function-calling`, with the profile's `tool_mode` set to `mode`.
async fn doctor_on_chatml_function_calling(mode: hermes_config::ToolMode) -> Check {
    let model = ScriptedModel::start_with(|req| imitate(CHATML_FUNCTION_CALLING, req)).await;
    let dir = tempfile::tempdir().unwrap();
    let mut settings = common::settings(&model.base_url());
    for p in settings.model.profiles.values_mut() {
        p.tool_mode = mode;
    }
    let config = Config::from_settings(settings, dir.path().into());
    let checks = hermes_surfaces::doctor::models(&config, None).await;
    model.stop().await;
    checks
        .into_iter()
        .find(|c| c.what == "model profile fast tools")
        .expect("a check of the profile's tools")
}

#[tokio::test]
async fn doctor_gives_the_docs_verdict_for_llama_cpp_pythons_chatml_function_calling() {
    let tools = doctor_on_chatml_function_calling(hermes_config::ToolMode::Auto).await;
    assert_eq!(tools.verdict, Verdict::Warn, "{}", tools.detail);
    assert!(
        !tools.detail.contains("native tool calls work"),
        "{}",
        tools.detail
    );
    assert!(tools.detail.contains("tool_mode: text"), "{}", tools.detail);
}

#[tokio::test]
async fn doctor_does_not_ask_a_profile_already_in_text_mode_to_set_it() {
    let tools = doctor_on_chatml_function_calling(hermes_config::ToolMode::Text).await;
    assert_eq!(tools.verdict, Verdict::Ok, "{}", tools.detail);
    assert!(
        tools.detail.contains("tool_mode: text is set") && !tools.detail.contains("set model."),
        "{}",
        tools.detail
    );
}
