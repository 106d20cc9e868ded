//! Presenting a successful tool result to the model: fitted by the tool, rendered, and — when
//! it is over `tools.result_max_tokens` — cut with a note, the whole kept in working memory
//! under a key the model can read back.
//!
//! Owns: that shaping decision per result. Must not: run tools or judge calls (the registry's
//! `run` did that before a result gets here).

use super::{Entry, Registry};
use crate::llm::estimate_tokens;
use crate::tools::shape::{self, Rest};
use crate::tools::{Fit, ToolContext};
use serde_json::Value;

impl Registry {
    /// Shape a successful result; store it whole when it is over the cap. Returns the
    /// content for the model and the working-memory key, if one was made.
    pub(in crate::tools) async fn present(
        &self,
        entry: &Entry,
        value: Value,
        ctx: &ToolContext,
    ) -> (String, Option<String>) {
        let name = entry.spec.name.as_str();
        let cap = self.0.settings.result_max_tokens;
        let value = match entry.tool.fit(value, cap) {
            Fit::Store(value) => value,
            Fit::Fitted(fitted) => {
                let text = shape::render(&fitted);
                let body = if estimate_tokens(&text) > cap {
                    shape::cut_with_note(&text, cap, &Rest::Dropped)
                } else {
                    text
                };
                return (shape::wrap_result(name, &body), None);
            }
        };
        let keep = entry.tool.keep_fields();
        let (shown, unfiltered) = if keep.is_empty() {
            (shape::render(&value), None)
        } else {
            (
                shape::render(&shape::keep_fields(value.clone(), keep)),
                Some(value),
            )
        };
        if estimate_tokens(&shown) <= cap {
            return (shape::wrap_result(name, &shown), None);
        }
        let full = unfiltered.as_ref().map(shape::render);
        let full_text = full.as_deref().unwrap_or(&shown);
        let kept = &full_text[..full_text.floor_char_boundary(self.0.working_max_bytes)];
        let (body, key) = match self.0.store.working().put(&ctx.task_id, kept).await {
            Ok(key) => {
                let rest = Rest::Stored {
                    key: &key,
                    aligned: full.is_none(),
                    total: full_text.chars().count(),
                    kept: kept.chars().count(),
                };
                (shape::cut_with_note(&shown, cap, &rest), Some(key))
            }
            Err(e) => {
                tracing::warn!(tool = name, task = %ctx.task_id, error = %e, "cannot store an over-cap tool result");
                let why = e.to_string();
                (
                    shape::cut_with_note(&shown, cap, &Rest::NotStored(&why)),
                    None,
                )
            }
        };
        (shape::wrap_result(name, &body), key)
    }
}
