//! Built-in tool `read_working_memory`: pages through a large result the registry put in
//! working memory instead of showing it whole.
//!
//! Owns: the tool's schema and paging. Reads through `store.working().read` only.
//! Must not: write working memory (the registry does that when it truncates a result).

use crate::tools::{Fit, Tool, ToolContext, ToolError, ToolInfo, TypedTool};
use hermes_store::{Store, StoreError};
use serde::Deserialize;
use serde_json::{Value, json};
use std::sync::Arc;

/// The tool's name; the registry's truncation note tells the model to call it.
pub(crate) const READ_WORKING_MEMORY: &str = "read_working_memory";

const DEFAULT_LENGTH: usize = 2000;
const MAX_LENGTH: usize = 8000;

/// The working-memory tools, sharing `store`.
pub fn tools(store: Store) -> Vec<Arc<dyn Tool>> {
    vec![Arc::new(ReadWorkingMemory::new(store))]
}

pub(crate) struct ReadWorkingMemory {
    store: Store,
    info: ToolInfo,
}

#[derive(Deserialize)]
pub(crate) struct Args {
    key: String,
    #[serde(default)]
    offset: usize,
    #[serde(default)]
    length: Option<usize>,
}

impl ReadWorkingMemory {
    pub(crate) fn new(store: Store) -> ReadWorkingMemory {
        let info = ToolInfo::new(
            READ_WORKING_MEMORY,
            "Read on in a truncated result, if what was shown is not enough: key and offset are in its \
             truncation note.",
            json!({
                "type": "object",
                "properties": {
                    "key": {"type": "string"},
                    "offset": {"type": "integer", "minimum": 0},
                    "length": {"type": "integer", "minimum": 1, "maximum": MAX_LENGTH}
                },
                "required": ["key"],
                "additionalProperties": false
            }),
        );
        ReadWorkingMemory { store, info }
    }
}

impl TypedTool for ReadWorkingMemory {
    type Args = Args;

    fn info(&self) -> &ToolInfo {
        &self.info
    }

    /// A page is cut to fit rather than stored again: re-storing a page of working memory in
    /// working memory would send the model in circles.
    fn fit(&self, value: Value, max_tokens: u32) -> Fit {
        Fit::Fitted(fit_page(value, max_tokens))
    }

    async fn run(&self, a: Args, _ctx: &ToolContext) -> Result<Value, ToolError> {
        let key = a.key.as_str();
        let length = a.length.unwrap_or(DEFAULT_LENGTH).clamp(1, MAX_LENGTH);
        let slice = self
            .store
            .working().read(key, a.offset, length)
            .await
            .map_err(|e| match e {
                StoreError::NotFound { .. } => ToolError::Failed(format!(
                    "no working-memory entry with key '{key}' (it may have expired); use the exact key from a truncation note"
                )),
                other => ToolError::Failed(format!("cannot read working memory: {other}")),
            })?;
        if a.offset > slice.total_chars {
            return Err(ToolError::Failed(format!(
                "offset {} is past the end of '{key}', which has {} characters",
                a.offset, slice.total_chars
            )));
        }
        Ok(page(
            key,
            a.offset,
            &slice.text,
            slice.total_chars,
            slice.next_offset,
        ))
    }
}

fn page(key: &str, offset: usize, text: &str, total: usize, next: Option<usize>) -> Value {
    json!({"key": key, "offset": offset, "total_chars": total, "next_offset": next, "text": text})
}

/// Shrink a page so its rendered form fits `max_tokens`, keeping `next_offset` exact.
/// The registry calls this instead of storing a page again: re-storing a page of working
/// memory in working memory would send the model in circles.
pub(crate) fn fit_page(value: Value, max_tokens: u32) -> Value {
    let (Some(key), Some(offset), Some(total), Some(text)) = (
        value.get("key").and_then(Value::as_str),
        value.get("offset").and_then(Value::as_u64),
        value.get("total_chars").and_then(Value::as_u64),
        value.get("text").and_then(Value::as_str),
    ) else {
        return value;
    };
    if crate::llm::estimate_tokens(&value.to_string()) <= max_tokens {
        return value;
    }
    let (offset, total) = (offset as usize, total as usize);
    // JSON escaping can grow the text (quotes, newlines), so shrink until the whole page fits.
    let mut budget = max_tokens.saturating_sub(40);
    loop {
        let (shown, n) = crate::tools::shape::cut_to_tokens(text, budget);
        let end = offset + n;
        let v = page(key, offset, shown, total, (end < total).then_some(end));
        if budget == 0 || crate::llm::estimate_tokens(&v.to_string()) <= max_tokens {
            return v;
        }
        budget = budget * 9 / 10;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_page_cuts_text_and_keeps_next_offset_exact() {
        let text = "a\"b\n".repeat(1000);
        let v = page("wm_x", 100, &text, 10_000, Some(4100));
        let fitted = fit_page(v, 200);
        assert!(crate::llm::estimate_tokens(&fitted.to_string()) <= 200);
        let shown = fitted["text"].as_str().unwrap_or_default().chars().count();
        assert!(shown > 0);
        assert_eq!(fitted["next_offset"], json!(100 + shown));

        let small = page("wm_x", 0, "hi", 2, None);
        assert_eq!(fit_page(small.clone(), 200), small);
    }
}
