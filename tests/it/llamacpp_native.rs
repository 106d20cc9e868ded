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
//! blank reply as evidence that the server ignores tools and asks again in text mode.

use crate::common;

use hermes_agent::llm::scripted::{Reply, ScriptedModel};
use hermes_agent::store::TaskState;
use serde_json::json;

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
