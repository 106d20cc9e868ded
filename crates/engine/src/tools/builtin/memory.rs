//! Built-in tools over long-term memory: `remember`, `recall` and `forget`.
//!
//! Owns: what the model is told about long-term memory and the shape of these tools' arguments
//! and results. A remembered fact's source is the calling task (`task:<id>`).
//! Must not: reach the index or the facts table except through the [`LongTerm`] handle.

use crate::memory::longterm::{LongTerm, MAX_FACT_CHARS, MemoryError};
use crate::tools::{IdArgs, Tool, ToolContext, ToolError, ToolInfo, tool_with};
use hermes_store::Upsert;
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// Tags per fact and characters per tag: tags are labels, not a second text.
const MAX_TAGS: usize = 10;
const MAX_TAG_CHARS: usize = 50;
/// Facts per recall: enough to choose from, few enough to keep the prompt small.
const MAX_K: u64 = 20;
const DEFAULT_K: u64 = 5;

/// The three memory tools, sharing one handle.
pub fn tools(memory: LongTerm) -> Vec<Arc<dyn Tool>> {
    let remember = ToolInfo::new(
        "remember",
        "Keep a lasting fact the user stated (preference, contact, standing instruction) for later \
         tasks. Not for intermediate results, secrets or guesses.",
        json!({
            "type": "object",
            "properties": {
                "text": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_FACT_CHARS,
                    "description": "One self-contained sentence."
                },
                "tags": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": MAX_TAG_CHARS},
                    "maxItems": MAX_TAGS
                }
            },
            "required": ["text"],
            "additionalProperties": false
        }),
    );
    let recall = ToolInfo::new(
        "recall",
        "Search long-term memory for facts about the user beyond those in <memory>; best first, \
         with ids. Not for web or current information.",
        json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1},
                "k": {"type": "integer", "minimum": 1, "maximum": MAX_K, "description": "Default 5."}
            },
            "required": ["query"],
            "additionalProperties": false
        }),
    );
    let forget = ToolInfo::new(
        "forget",
        "Delete a fact by the id recall gave, when asked or outdated; never a guessed id.",
        json!({
            "type": "object",
            "properties": {"id": {"type": "string", "minLength": 1}},
            "required": ["id"],
            "additionalProperties": false
        }),
    );
    vec![
        tool_with(
            memory.clone(),
            remember,
            |m, a: RememberArgs, ctx| async move { remember_fact(&m, a, &ctx).await },
        ),
        tool_with(memory.clone(), recall, |m, a: RecallArgs, _| async move {
            recall_facts(&m, a).await
        }),
        tool_with(memory, forget, |m, a: IdArgs, _| async move {
            forget_fact(&m, &a.id).await
        }),
    ]
}

fn tool_error(e: MemoryError) -> ToolError {
    match e {
        MemoryError::EmptyFact | MemoryError::FactTooLong(_) => {
            ToolError::InvalidArguments(e.to_string())
        }
        other => ToolError::Failed(other.to_string()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RememberArgs {
    text: String,
    #[serde(default)]
    tags: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RecallArgs {
    query: String,
    #[serde(default)]
    k: Option<u64>,
}

async fn remember_fact(
    memory: &LongTerm,
    a: RememberArgs,
    ctx: &ToolContext,
) -> Result<Value, ToolError> {
    if a.text.trim().is_empty() {
        return Err(ToolError::InvalidArguments(
            "'text' is empty; give the fact as a sentence".into(),
        ));
    }
    let source = format!("task:{}", ctx.task_id);
    let tags = a.tags.unwrap_or_default();
    let (fact, how) = memory
        .remember(&a.text, &tags, &source)
        .await
        .map_err(tool_error)?;
    Ok(json!({"id": fact.id, "merged": how == Upsert::Merged}))
}

async fn recall_facts(memory: &LongTerm, a: RecallArgs) -> Result<Value, ToolError> {
    let k = a.k.unwrap_or(DEFAULT_K);
    if !(1..=MAX_K).contains(&k) {
        return Err(ToolError::InvalidArguments(format!(
            "'k' must be an integer from 1 to {MAX_K}"
        )));
    }
    let found = memory
        .recall(&a.query, k as usize)
        .await
        .map_err(tool_error)?;
    let facts: Vec<Value> = found
        .into_iter()
        .map(|r| {
            json!({
                "id": r.fact.id,
                "text": r.fact.text,
                "tags": r.fact.tags,
                // Three decimals say all a ranking needs, in fewer tokens.
                "score": (f64::from(r.score) * 1000.0).round() / 1000.0,
            })
        })
        .collect();
    Ok(json!({"facts": facts}))
}

async fn forget_fact(memory: &LongTerm, id: &str) -> Result<Value, ToolError> {
    let id = id.trim();
    if id.is_empty() {
        return Err(ToolError::InvalidArguments(
            "'id' is empty; use an id returned by recall".into(),
        ));
    }
    let forgotten = memory.forget(id).await.map_err(tool_error)?;
    Ok(json!({"forgotten": forgotten}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_store::Store;

    async fn setup() -> (tempfile::TempDir, Store, Vec<Arc<dyn Tool>>) {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = Store::open_in_memory().await.expect("store");
        let memory = LongTerm::open(dir.path(), store.clone())
            .await
            .expect("open");
        (dir, store, tools(memory))
    }

    fn ctx() -> ToolContext {
        ToolContext {
            task_id: "t_42".into(),
            ..ToolContext::default()
        }
    }

    #[tokio::test]
    async fn remember_recall_forget_round_trip() {
        let (_dir, store, tools) = setup().await;
        let [remember, recall, forget] = [&tools[0], &tools[1], &tools[2]];
        assert_eq!(
            tools
                .iter()
                .map(|t| t.info().name.as_str())
                .collect::<Vec<_>>(),
            vec!["remember", "recall", "forget"]
        );
        let ctx = ctx();
        let made = remember
            .call(json!({"text": "用户喜欢喝乌龙茶", "tags": ["偏好"]}), &ctx)
            .await
            .expect("remember");
        assert_eq!(made["merged"], json!(false));
        let id = made["id"].as_str().expect("id").to_string();
        assert_eq!(
            store.facts().get(&id).await.expect("fact").source,
            "task:t_42"
        );

        let again = remember
            .call(
                json!({"text": "用户喜欢喝乌龙茶。", "tags": ["drinks"]}),
                &ctx,
            )
            .await
            .expect("remember again");
        assert_eq!(again, json!({"id": id, "merged": true}));

        let found = recall
            .call(json!({"query": "乌龙茶"}), &ctx)
            .await
            .expect("recall");
        let facts = found["facts"].as_array().expect("facts");
        assert_eq!(facts.len(), 1);
        assert_eq!(facts[0]["id"], json!(id));
        assert_eq!(facts[0]["text"], json!("用户喜欢喝乌龙茶"));
        assert_eq!(facts[0]["tags"], json!(["偏好", "drinks"]));
        assert!(facts[0]["score"].as_f64().expect("score") > 0.0);

        assert_eq!(
            forget.call(json!({"id": id}), &ctx).await.expect("forget"),
            json!({"forgotten": true})
        );
        assert_eq!(
            forget.call(json!({"id": id}), &ctx).await.expect("forget"),
            json!({"forgotten": false})
        );
        let found = recall
            .call(json!({"query": "乌龙茶", "k": 3}), &ctx)
            .await
            .expect("recall");
        assert_eq!(found, json!({"facts": []}));
    }

    #[tokio::test]
    async fn bad_arguments_are_refused_with_a_reason() {
        let (_dir, _store, tools) = setup().await;
        let ctx = ctx();
        let cases = [
            (0, json!({"text": "   "})),
            (0, json!({"text": "x".repeat(MAX_FACT_CHARS + 1)})),
            (0, json!({"text": "ok", "tags": "not-a-list"})),
            (0, json!({"text": "ok", "tags": [1]})),
            (0, json!({})),
            (1, json!({"query": "tea", "k": 0})),
            (1, json!({"query": "tea", "k": 21})),
            (1, json!({"query": "tea", "k": "5"})),
            (2, json!({"id": " "})),
        ];
        for (tool, args) in cases {
            let result = tools[tool].call(args.clone(), &ctx).await;
            assert!(
                matches!(result, Err(ToolError::InvalidArguments(_))),
                "{args}: {result:?}"
            );
        }
    }

    #[test]
    fn schemas_are_objects_with_required_fields() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let (_dir, _store, tools) = rt.block_on(setup());
        for tool in &tools {
            let info = tool.info();
            let p = &info.parameters;
            assert_eq!(p["type"], json!("object"), "{}", info.name);
            assert!(p["required"].as_array().is_some_and(|r| !r.is_empty()));
            assert!(info.description.len() > 40);
        }
    }
}
