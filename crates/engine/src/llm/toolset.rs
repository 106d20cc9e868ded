//! The tools offered with a model request, in the forms they are sent in, made once per set.
//!
//! Owns: a set of [`ToolSpec`]s with its OpenAI `tools` array as JSON text, that text's token
//! estimate, and text mode's description of the tools. A task's steps offer the same set
//! again and again, so these are built when the set is made, not per request.
//! Must not: decide which tools are offered (the tool registry does) or send anything.

use super::{ToolSpec, estimate_tokens, wire};
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
        let json = wire::tools_json(&specs).to_string();
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
            Some(o) => o.prompt.get_or_init(|| wire::tools_prompt(&o.specs)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

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
        assert_eq!(parsed, wire::tools_json(&set));
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
