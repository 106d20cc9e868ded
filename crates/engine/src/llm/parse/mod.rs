//! Turning a chat-completion `message` into content and tool calls, repairing what is unambiguous.
//!
//! Owns: reading native `tool_calls` (arguments as a JSON string or an object), the text fallback
//! for servers that put the call in `content` (```json fences, `<tool_call>` tags, a bare JSON
//! object), and the small set of JSON repairs that have exactly one meaning: trailing commas and
//! raw control characters inside strings. Anything else that looks like a call but does not parse
//! is left as a plain answer with a warning, because guessing would execute a call the model did
//! not make. Everything here is a pure function; the gateway does the logging and counting.
//! Must not: know which tools exist or how they run — the tool registry validates arguments.

use serde_json::{Map, Value};

use super::ToolCall;

/// The longest piece of raw model output quoted in a warning.
const EXCERPT_CHARS: usize = 160;

/// What one assistant message amounts to.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct ParsedMessage {
    /// The text content, minus any calls recovered from it.
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    /// One line per piece of output that looked like a call but could not be read as one.
    pub warnings: Vec<String>,
}

/// Reads an OpenAI `choices[0].message` object. Native `tool_calls` win; when there are none and
/// `text_fallback` is set (the caller offered tools), calls written into `content` are recovered.
pub(crate) fn parse_message(message: &Value, text_fallback: bool) -> ParsedMessage {
    let content = match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        // Some servers send content as a list of parts ([{type:"text", text}]).
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    };
    let native = message
        .get("tool_calls")
        .filter(|v| !v.is_null())
        .map(parse_native_calls);
    if let Some((calls, warnings)) = native
        && (!calls.is_empty() || !warnings.is_empty())
    {
        return ParsedMessage {
            content,
            tool_calls: calls,
            warnings,
        };
    }
    if text_fallback {
        extract_text_calls(&content)
    } else {
        ParsedMessage {
            content,
            ..ParsedMessage::default()
        }
    }
}

/// Reads a native `tool_calls` array. A call whose arguments cannot be repaired is KEPT with
/// `arguments: Value::String(raw)`: the tool registry's schema check then rejects it with an
/// error the model can act on, which beats silently dropping what it asked for.
pub(crate) fn parse_native_calls(tool_calls: &Value) -> (Vec<ToolCall>, Vec<String>) {
    let mut calls = Vec::new();
    let mut warnings = Vec::new();
    let Some(items) = tool_calls.as_array() else {
        warnings.push(format!(
            "`tool_calls` is not a list: {}",
            excerpt(&tool_calls.to_string())
        ));
        return (calls, warnings);
    };
    for (index, item) in items.iter().enumerate() {
        // The OpenAI shape nests name and arguments under `function`; a few servers flatten it.
        let function = item.get("function").unwrap_or(item);
        let name = function
            .get("name")
            .and_then(Value::as_str)
            .map(str::trim)
            .unwrap_or("");
        if name.is_empty() {
            warnings.push(format!(
                "tool call #{} has no function name and was dropped: {}",
                index + 1,
                excerpt(&item.to_string())
            ));
            continue;
        }
        let raw_args = function
            .get("arguments")
            .or_else(|| function.get("parameters"))
            .unwrap_or(&Value::Null);
        let arguments = match raw_args {
            Value::Null => Value::Object(Map::new()),
            Value::String(s) if s.trim().is_empty() => Value::Object(Map::new()),
            Value::String(s) => match parse_lenient(s) {
                Ok(v) => v,
                Err(e) => {
                    warnings.push(format!(
                        "arguments of tool call `{name}` are not valid JSON ({e}); passed on as raw text: {}",
                        excerpt(s)
                    ));
                    Value::String(s.clone())
                }
            },
            other => other.clone(),
        };
        let id = call_id(item.get("id"));
        calls.push(ToolCall {
            id,
            name: name.to_string(),
            arguments,
        });
    }
    (calls, warnings)
}

/// Recovers tool calls written as text. Tried in order, the first format present wins:
/// `<tool_call>…</tool_call>` blocks, fenced code blocks (```json or bare ```), then the whole
/// content as one JSON object (or a list of call objects). Recovered calls are cut out of the
/// content. If any candidate looks like a call but cannot be repaired, no call is returned and
/// the content is left exactly as it was, with a warning: acting on half of what the model
/// wrote would be worse than answering.
pub(crate) fn extract_text_calls(content: &str) -> ParsedMessage {
    let outcome = if content.contains(TAG_OPEN) {
        from_tags(content)
    } else if content.contains(FENCE) {
        from_fences(content)
    } else {
        from_bare(content)
    };
    match outcome {
        Outcome::Calls { calls, remaining } => ParsedMessage {
            content: remaining,
            tool_calls: calls,
            warnings: Vec::new(),
        },
        Outcome::Broken(warnings) => ParsedMessage {
            content: content.to_string(),
            tool_calls: Vec::new(),
            warnings,
        },
        Outcome::Nothing => ParsedMessage {
            content: content.to_string(),
            ..ParsedMessage::default()
        },
    }
}

enum Outcome {
    Calls {
        calls: Vec<ToolCall>,
        remaining: String,
    },
    Broken(Vec<String>),
    Nothing,
}

impl Outcome {
    /// What a scan found: broken blocks win (the reply is then read as text), else the calls
    /// with the text around them.
    fn of(calls: Vec<ToolCall>, warnings: Vec<String>, remaining: &str) -> Outcome {
        if !warnings.is_empty() {
            Outcome::Broken(warnings)
        } else if calls.is_empty() {
            Outcome::Nothing
        } else {
            Outcome::Calls {
                calls,
                remaining: tidy(remaining),
            }
        }
    }
}

const TAG_OPEN: &str = "<tool_call>";
const TAG_CLOSE: &str = "</tool_call>";
const FENCE: &str = "```";

/// What a scan of the content for blocks has found so far.
#[derive(Default)]
struct Scan {
    calls: Vec<ToolCall>,
    warnings: Vec<String>,
    /// The content with the blocks that were calls taken out.
    remaining: String,
}

impl Scan {
    fn finish(mut self, rest: &str) -> Outcome {
        self.remaining.push_str(rest);
        Outcome::of(self.calls, self.warnings, &self.remaining)
    }
}

fn from_tags(content: &str) -> Outcome {
    let mut found = Scan::default();
    let mut rest = content;
    while let Some(start) = rest.find(TAG_OPEN) {
        found.remaining.push_str(&rest[..start]);
        let after_open = &rest[start + TAG_OPEN.len()..];
        // A missing closing tag at the very end is common (generation stopped at the stop
        // token); the block then runs to the end of the content.
        let (inner, next) = match after_open.find(TAG_CLOSE) {
            Some(end) => (&after_open[..end], &after_open[end + TAG_CLOSE.len()..]),
            None => (after_open, ""),
        };
        let inner = strip_fence(inner.trim());
        match parse_lenient(inner) {
            Ok(value) => {
                let candidates = match value {
                    Value::Array(items) => items,
                    other => vec![other],
                };
                for candidate in &candidates {
                    match call_from_value(candidate, Mode::Tagged) {
                        Some(Ok(call)) => found.calls.push(call),
                        Some(Err(w)) => found.warnings.push(w),
                        None => found.warnings.push(format!(
                            "a <tool_call> block holds JSON that is not a tool call (no \"name\"): {}",
                            excerpt(&candidate.to_string())
                        )),
                    }
                }
            }
            Err(e) => found.warnings.push(format!(
                "a <tool_call> block is not valid JSON even after repair ({e}): {}",
                excerpt(inner)
            )),
        }
        rest = next;
    }
    found.finish(rest)
}

fn from_fences(content: &str) -> Outcome {
    let mut found = Scan::default();
    let mut rest = content;
    while let Some(start) = rest.find(FENCE) {
        let after_open = &rest[start + FENCE.len()..];
        let Some(line_end) = after_open.find('\n') else {
            break;
        };
        let lang = after_open[..line_end].trim().to_ascii_lowercase();
        let body_and_rest = &after_open[line_end + 1..];
        let Some(end) = body_and_rest.find(FENCE) else {
            break;
        };
        let body = body_and_rest[..end].trim();
        let block_end = &body_and_rest[end + FENCE.len()..];
        let is_json_lang = matches!(lang.as_str(), "" | "json" | "jsonc" | "json5" | "tool_call");
        let mut taken = false;
        if is_json_lang {
            match parse_lenient(body) {
                Ok(value) => match calls_in(&value) {
                    Some(Ok(calls)) => {
                        found.calls.extend(calls);
                        taken = true;
                    }
                    Some(Err(w)) => found.warnings.push(w),
                    None => {}
                },
                Err(e) if looks_like_call(body) => found.warnings.push(format!(
                    "a fenced block looks like a tool call but is not valid JSON even after repair ({e}): {}",
                    excerpt(body)
                )),
                Err(_) => {}
            }
        }
        if !taken {
            found
                .remaining
                .push_str(&rest[..start + FENCE.len() + line_end + 1 + end + FENCE.len()]);
        } else {
            found.remaining.push_str(&rest[..start]);
        }
        rest = block_end;
    }
    found.finish(rest)
}

fn from_bare(content: &str) -> Outcome {
    let text = content.trim();
    let enclosed = (text.starts_with('{') && text.ends_with('}'))
        || (text.starts_with('[') && text.ends_with(']'));
    if !enclosed {
        return Outcome::Nothing;
    }
    match parse_lenient(text) {
        Ok(value) => match calls_in(&value) {
            Some(Ok(calls)) => Outcome::Calls {
                calls,
                remaining: String::new(),
            },
            Some(Err(w)) => Outcome::Broken(vec![w]),
            None => Outcome::Nothing,
        },
        Err(e) if looks_like_call(text) => Outcome::Broken(vec![format!(
            "the reply looks like a tool call but is not valid JSON even after repair ({e}): {}",
            excerpt(text)
        )]),
        Err(_) => Outcome::Nothing,
    }
}

/// The calls in an untagged JSON value: one call object, or a non-empty list made only of call
/// objects. `None` when the value is ordinary data (an answer that happens to be JSON).
fn calls_in(value: &Value) -> Option<Result<Vec<ToolCall>, String>> {
    match value {
        Value::Array(items) if !items.is_empty() => {
            let mut calls = Vec::new();
            for item in items {
                match call_from_value(item, Mode::Untagged)? {
                    Ok(call) => calls.push(call),
                    Err(w) => return Some(Err(w)),
                }
            }
            Some(Ok(calls))
        }
        Value::Object(_) => Some(call_from_value(value, Mode::Untagged)?.map(|c| vec![c])),
        _ => None,
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Inside `<tool_call>`: the model said it is a call, so a name alone is enough.
    Tagged,
    /// A fence or bare JSON: only an object with exactly the keys of a call counts, so that an
    /// answer which is itself JSON is not mistaken for one.
    Untagged,
}

/// `None`: not shaped like a call. `Some(Err)`: shaped like one but its arguments are unusable.
fn call_from_value(value: &Value, mode: Mode) -> Option<Result<ToolCall, String>> {
    let obj = value.as_object()?;
    let (func, outer_allowed): (&Map<String, Value>, &[&str]) = match obj.get("function") {
        Some(Value::Object(f)) => (f, &["function", "id", "type"]),
        _ => (obj, &["name", "arguments", "parameters", "id", "type"]),
    };
    if obj.keys().any(|k| !outer_allowed.contains(&k.as_str())) {
        return None;
    }
    if !std::ptr::eq(func, obj)
        && func
            .keys()
            .any(|k| !["name", "arguments", "parameters"].contains(&k.as_str()))
    {
        return None;
    }
    let name = func.get("name")?.as_str()?.trim();
    if name.is_empty() {
        return None;
    }
    let raw_args = func.get("arguments").or_else(|| func.get("parameters"));
    if raw_args.is_none() && mode == Mode::Untagged {
        return None;
    }
    let arguments = match raw_args.unwrap_or(&Value::Null) {
        Value::Null => Value::Object(Map::new()),
        v @ Value::Object(_) => v.clone(),
        Value::String(s) if s.trim().is_empty() => Value::Object(Map::new()),
        Value::String(s) => match parse_lenient(s) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) | Err(_) => {
                return Some(Err(format!(
                    "tool call `{name}` has arguments that are not a JSON object: {}",
                    excerpt(s)
                )));
            }
        },
        other if mode == Mode::Tagged => {
            return Some(Err(format!(
                "tool call `{name}` has arguments that are not a JSON object: {}",
                excerpt(&other.to_string())
            )));
        }
        _ => return None,
    };
    let id = call_id(obj.get("id"));
    Some(Ok(ToolCall {
        id,
        name: name.to_string(),
        arguments,
    }))
}

/// A cheap test for "the model meant this as a call", used only on text that did not parse.
fn looks_like_call(text: &str) -> bool {
    let has =
        |key: &str| text.contains(&format!("\"{key}\"")) || text.contains(&format!("'{key}'"));
    (has("name") && (has("arguments") || has("parameters"))) || (has("function") && has("name"))
}

/// Parses JSON strictly, then once more after [`repair_json`].
fn parse_lenient(text: &str) -> Result<Value, String> {
    let text = text.trim().trim_start_matches('\u{feff}');
    match serde_json::from_str(text) {
        Ok(v) => Ok(v),
        Err(strict) => match repair_json(text) {
            Some(fixed) => serde_json::from_str(&fixed).map_err(|e| e.to_string()),
            None => Err(strict.to_string()),
        },
    }
}

/// The call's own `id`, or a fresh one when it has none (small models often leave it out).
fn call_id(id: Option<&Value>) -> String {
    id.and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_string)
        .unwrap_or_else(new_call_id)
}

/// Applies the repairs that have one possible meaning: a comma directly before `}` or `]` is
/// dropped, and a raw newline, tab or other control character inside a string is escaped.
/// Returns `None` when nothing needed changing. Quotes, brackets and anything else are left
/// alone — a missing quote has many possible fixes, and picking one would be a guess.
pub(crate) fn repair_json(text: &str) -> Option<String> {
    let mut out = String::with_capacity(text.len() + 16);
    let mut changed = false;
    let mut in_string = false;
    let mut escaped = false;
    let chars: Vec<char> = text.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        // Each arm says whether it wrote or dropped `c` itself; if not, `c` is copied.
        let replaced = match (in_string, c) {
            (true, _) if escaped => {
                escaped = false;
                false
            }
            (true, '\\') => {
                escaped = true;
                false
            }
            (_, '"') => {
                in_string = !in_string;
                false
            }
            (true, c) if (c as u32) < 0x20 => {
                match c {
                    '\n' => out.push_str("\\n"),
                    '\r' => out.push_str("\\r"),
                    '\t' => out.push_str("\\t"),
                    c => out.push_str(&format!("\\u{:04x}", c as u32)),
                }
                true
            }
            (false, ',') => {
                let next = chars[i + 1..].iter().find(|ch| !ch.is_whitespace());
                matches!(next, Some('}') | Some(']'))
            }
            _ => false,
        };
        if replaced {
            changed = true;
        } else {
            out.push(c);
        }
    }
    changed.then_some(out)
}

/// The body of a fenced block if `text` is exactly one, else `text` itself.
fn strip_fence(text: &str) -> &str {
    let Some(after) = text.strip_prefix(FENCE) else {
        return text;
    };
    let Some(body) = after.strip_suffix(FENCE) else {
        return text;
    };
    match body.find('\n') {
        Some(nl) => body[nl + 1..].trim(),
        None => body.trim(),
    }
}

/// Collapses the blank lines left where calls were cut out.
fn tidy(text: &str) -> String {
    let mut out = String::new();
    let mut blank_run = 0;
    for line in text.trim().lines() {
        if line.trim().is_empty() {
            blank_run += 1;
            if blank_run > 1 {
                continue;
            }
        } else {
            blank_run = 0;
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.trim_end().to_string()
}

fn excerpt(text: &str) -> String {
    let flat = hermes_store::util::text::collapse(text);
    hermes_store::util::text::cut(&flat, EXCERPT_CHARS).into_owned()
}

/// Some servers omit call ids; the agent needs one to pair each tool result with its call.
pub(crate) fn new_call_id() -> String {
    format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..16])
}

#[cfg(test)]
mod tests;
