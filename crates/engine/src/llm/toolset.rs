//! The tools offered with a model request, in the forms they are sent in, made once per set.
//!
//! Owns: a set of [`ToolSpec`]s with its OpenAI `tools` array as JSON text, that text's token
//! estimate, and text mode's description of the tools. A task's steps offer the same set
//! again and again, so these are built when the set is made, not per request.
//! Must not: decide which tools are offered (the tool registry does), know the rest of a request
//! (`wire.rs` does, taking a set as made here) or send anything.

use super::{ToolSpec, estimate_tokens};
use serde_json::{Map, Value, json};
use std::sync::{Arc, OnceLock};

/// Tools to offer; a cheap clone. The default is no tools (a request without a `tools` field).
/// Dereferences to its specs, in the order they were given.
#[derive(Clone, Default)]
pub struct Toolset(Option<Arc<Offer>>);

struct Offer {
    specs: Vec<ToolSpec>,
    /// The OpenAI `tools` array, serialised.
    json: String,
    /// `estimate_tokens(json)`.
    tokens: u32,
    /// Text mode's block describing the tools: made on first use, as most profiles never
    /// need it.
    prompt: OnceLock<String>,
}

impl Toolset {
    pub fn new(specs: Vec<ToolSpec>) -> Toolset {
        if specs.is_empty() {
            return Toolset(None);
        }
        let json = tools_json(&specs).to_string();
        let tokens = estimate_tokens(&json);
        Toolset(Some(Arc::new(Offer {
            specs,
            json,
            tokens,
            prompt: OnceLock::new(),
        })))
    }

    /// The very same set (one serialisation), not merely one with equal tools.
    pub fn is_same(&self, other: &Toolset) -> bool {
        match (&self.0, &other.0) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        }
    }

    /// The OpenAI `tools` array as JSON text (`[]` when there are none).
    pub fn json(&self) -> &str {
        self.0.as_ref().map_or("[]", |o| o.json.as_str())
    }

    /// Estimated tokens of the `tools` array; 0 when there are none.
    pub fn tokens(&self) -> u32 {
        self.0.as_ref().map_or(0, |o| o.tokens)
    }

    /// Text mode's description of the tools and how to call them; empty when there are none.
    pub(crate) fn prompt(&self) -> &str {
        match &self.0 {
            Some(o) => o.prompt.get_or_init(|| tools_prompt(&o.specs)),
            None => "",
        }
    }
}

impl std::ops::Deref for Toolset {
    type Target = [ToolSpec];

    fn deref(&self) -> &[ToolSpec] {
        self.0.as_ref().map_or(&[], |o| o.specs.as_slice())
    }
}

impl<'a> IntoIterator for &'a Toolset {
    type Item = &'a ToolSpec;
    type IntoIter = std::slice::Iter<'a, ToolSpec>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl From<Vec<ToolSpec>> for Toolset {
    fn from(specs: Vec<ToolSpec>) -> Toolset {
        Toolset::new(specs)
    }
}

impl std::fmt::Debug for Toolset {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|t| &t.name))
            .finish()
    }
}

/// The tools as the OpenAI `tools` field.
pub(super) fn tools_json(tools: &[ToolSpec]) -> Value {
    tools
        .iter()
        .map(|t| {
            json!({"type": "function", "function": {
                "name": t.name, "description": t.description, "parameters": t.parameters,
            }})
        })
        .collect()
}

/// The tools described in a few lines each, and how to call them.
fn tools_prompt(tools: &[ToolSpec]) -> String {
    let mut p = String::from(
        "Tools you can call. To call one, write one block per call and nothing after them:\n\
         <tool_call>{\"name\": \"TOOL\", \"arguments\": {…}}</tool_call>\n\
         Each result comes back in a <tool_result> block.\n",
    );
    for t in tools {
        p.push_str(&format!(
            "- {}({}): {}\n",
            t.name,
            signature(&t.parameters),
            t.description
        ));
    }
    p.trim_end().to_string()
}

/// `url: string, selector?: string` from an object schema's properties.
fn signature(schema: &Value) -> String {
    let empty = Map::new();
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    props
        .iter()
        .map(|(name, p)| {
            let optional = if required.contains(&name.as_str()) {
                ""
            } else {
                "?"
            };
            format!("{name}{optional}: {}", type_of(p))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn type_of(p: &Value) -> String {
    if let Some(options) = p.get("enum").and_then(Value::as_array) {
        return options
            .iter()
            .map(Value::to_string)
            .collect::<Vec<_>>()
            .join("|");
    }
    match p.get("type").and_then(Value::as_str) {
        Some("array") => format!("[{}]", p.get("items").map(type_of).unwrap_or_default()),
        Some(t) => t.to_string(),
        None => "any".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: "Does it.".into(),
            parameters: json!({"type": "object", "properties": {"q": {"type": "string"}}}),
        }
    }

    #[test]
    fn the_serialised_tools_are_what_the_specs_say() {
        let set = Toolset::new(vec![spec("a"), spec("b")]);
        let parsed: Value = serde_json::from_str(set.json()).unwrap();
        assert_eq!(parsed, tools_json(&set));
        assert_eq!(parsed[1]["function"]["name"], "b");
        assert_eq!(set.tokens(), estimate_tokens(set.json()));
        assert!(set.prompt().contains("- a(q?: string): Does it."));
        assert_eq!(set.len(), 2);
    }

    #[test]
    fn no_tools_is_the_default() {
        let none = Toolset::new(Vec::new());
        assert!(none.is_empty() && Toolset::default().is_empty());
        assert_eq!((none.json(), none.tokens(), none.prompt()), ("[]", 0, ""));
    }
}
