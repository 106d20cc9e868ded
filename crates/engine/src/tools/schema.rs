//! What of a tool's JSON Schema the model is sent.
//!
//! llama.cpp (and servers built on it) compile each offered schema into a grammar; length,
//! count and pattern bounds become repetition rules, and a `maxLength` of a few hundred or a
//! `maxItems` of ten already exceeds its limits and can take the server down. So the schema
//! *sent* carries none of them; the registry still validates every call against the full
//! schema, so the bounds hold all the same.
//!
//! `"additionalProperties": false` is left out too, and so are numeric bounds (`minimum`,
//! `maximum` and their exclusive forms): validation enforces them, and on every call they cost
//! tokens that do not help a model choose a tool; a call out of bounds gets a precise error.
//!
//! Owns: stripping those keywords (only where they are keywords: a property that happens to be
//! called `format` stays); the words of one violation of the full schema.
//! Must not: change what validation enforces.

use serde_json::{Map, Value};

/// A single violation message is cut here (a huge wrong value would be echoed whole).
const MAX_VIOLATION_CHARS: usize = 300;

/// One schema violation as `POINTER: message`, the pointer telling the model which
/// argument to fix; cut to a bounded length.
pub(super) fn violation(e: &jsonschema::ValidationError<'_>) -> String {
    let path = e.instance_path().as_str();
    let path = if path.is_empty() { "(root)" } else { path };
    let msg = format!("{path}: {e}");
    hermes_store::util::text::cut(&msg, MAX_VIOLATION_CHARS).into_owned()
}

/// Keywords left out of the schema the model sees; validation keeps them.
pub(crate) const GRAMMAR_UNFRIENDLY: [&str; 6] = [
    "maxLength",
    "minLength",
    "maxItems",
    "minItems",
    "pattern",
    "format",
];

/// Numeric bounds: left out of what the model is sent (not out of a grammar check: a grammar
/// compiler copes with them); validation keeps them.
const NUMERIC_BOUNDS: [&str; 4] = ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"];

/// Keywords whose value is one schema.
const ONE_SCHEMA: [&str; 7] = [
    "items",
    "additionalProperties",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
];
/// Keywords whose value is a list of schemas.
const SCHEMA_LISTS: [&str; 4] = ["anyOf", "oneOf", "allOf", "prefixItems"];
/// Keywords whose value maps names to schemas.
const SCHEMA_MAPS: [&str; 4] = ["properties", "patternProperties", "$defs", "definitions"];

/// The schema as sent to the model: the same shape without the keywords a grammar compiler
/// chokes on.
pub(crate) fn for_model(schema: &Value) -> Value {
    walk(schema, Strip::ForModel)
}

/// What [`walk`] leaves out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Strip {
    /// The grammar-unfriendly keywords only.
    Grammar,
    /// Those, and `"additionalProperties": false`.
    ForModel,
}

fn walk(schema: &Value, how: Strip) -> Value {
    match schema {
        Value::Object(map) => Value::Object(strip(map, how)),
        other => other.clone(),
    }
}

fn strip(schema: &Map<String, Value>, how: Strip) -> Map<String, Value> {
    let for_model = |v: &Value| walk(v, how);
    let mut out = Map::with_capacity(schema.len());
    for (key, value) in schema {
        let k = key.as_str();
        if GRAMMAR_UNFRIENDLY.contains(&k) {
            continue;
        }
        // "No other keys" is enforced by validation and costs tokens on every call; a model
        // that adds a key gets a precise error instead.
        if how == Strip::ForModel
            && (NUMERIC_BOUNDS.contains(&k)
                || (k == "additionalProperties" && *value == Value::Bool(false)))
        {
            continue;
        }
        let value = if ONE_SCHEMA.contains(&k) || k == "else" {
            for_model(value)
        } else if SCHEMA_LISTS.contains(&k) {
            match value {
                Value::Array(items) => Value::Array(items.iter().map(for_model).collect()),
                other => for_model(other),
            }
        } else if SCHEMA_MAPS.contains(&k) {
            match value {
                Value::Object(named) => Value::Object(
                    named
                        .iter()
                        .map(|(n, s)| (n.clone(), for_model(s)))
                        .collect(),
                ),
                other => other.clone(),
            }
        } else {
            value.clone()
        };
        out.insert(key.clone(), value);
    }
    out
}

/// Whether no keyword of `GRAMMAR_UNFRIENDLY` is left anywhere a keyword can be.
pub fn is_grammar_friendly(schema: &Value) -> bool {
    walk(schema, Strip::Grammar) == *schema
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn strips_bounds_but_keeps_properties_with_those_names() {
        let full = json!({
            "type": "object",
            "properties": {
                "text": {"type": "string", "minLength": 1, "maxLength": 2000, "description": "d"},
                "format": {"type": "string", "pattern": "^[a-z]+$", "format": "email"},
                "tags": {"type": "array", "maxItems": 10, "minItems": 1,
                         "items": {"type": "string", "maxLength": 50}},
                "pick": {"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]},
                "k": {"type": "integer", "minimum": 1, "maximum": 20},
                "minimum": {"type": "number", "exclusiveMinimum": 0}
            },
            "required": ["text"],
            "additionalProperties": false
        });
        let sent = for_model(&full);
        assert_eq!(
            sent,
            json!({
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "d"},
                    "format": {"type": "string"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "pick": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                    "k": {"type": "integer"},
                    "minimum": {"type": "number"}
                },
                "required": ["text"]
            })
        );
        assert!(is_grammar_friendly(&sent));
        assert!(!is_grammar_friendly(&full));
    }
}
