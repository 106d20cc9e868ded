//! The loop guard: small models ask for the same call again and again until `max_steps`
//! (a real one spent 142 s of CPU on a question it could answer). An identical call — the same
//! tool with the same arguments, in any key order — beyond `agent.max_identical_calls` in one
//! task is not run: the model is told it already has that result and should answer or change
//! course. Asking for it once more anyway ends the task with reason `loop`.
//!
//! Owns: counting calls per task and the verdicts. Must not: run tools or judge their results.

use crate::llm::ToolCall;
use serde_json::Value;
use std::collections::HashMap;

/// What to do with one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    Run,
    /// Not run; the model is told why (it was made `times` times already).
    Refuse {
        times: u32,
    },
    /// Not run, and the task stops: the model repeated the call after being refused.
    Stop {
        error: String,
    },
}

/// Serialisable: a task waiting for a person keeps its counts in its checkpoint.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct LoopGuard {
    max: u32,
    seen: HashMap<String, u32>,
}

impl LoopGuard {
    pub(super) fn new(max_identical_calls: u32) -> LoopGuard {
        LoopGuard {
            max: max_identical_calls.max(1),
            seen: HashMap::new(),
        }
    }

    pub(super) fn check(&mut self, call: &ToolCall) -> Verdict {
        let key = format!("{}\u{0}{}", call.name, canonical(&call.arguments));
        let n = self.seen.entry(key).or_default();
        *n += 1;
        if *n <= self.max {
            Verdict::Run
        } else if *n == self.max + 1 {
            Verdict::Refuse { times: self.max }
        } else {
            Verdict::Stop {
                error: format!(
                    "the model asked for {} with the same arguments {} times, after being told it already had the result (agent.max_identical_calls is {}); stopped",
                    call.name, *n, self.max
                ),
            }
        }
    }
}

/// JSON with object keys sorted at every level: the same arguments, written in any order, are
/// one call.
pub(super) fn canonical(v: &Value) -> String {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .into_iter()
                .map(|k| format!("{}:{}", Value::String(k.clone()), canonical(&map[k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(canonical).collect();
            format!("[{}]", parts.join(","))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: Value) -> ToolCall {
        ToolCall::new("c", name, args)
    }

    #[test]
    fn the_same_call_runs_twice_is_refused_once_then_stops() {
        let mut g = LoopGuard::new(2);
        let a = call("lookup", json!({"q": "tea", "n": 1}));
        let same = call("lookup", json!({"n": 1, "q": "tea"}));
        assert_eq!(g.check(&a), Verdict::Run);
        assert_eq!(g.check(&same), Verdict::Run);
        assert_eq!(g.check(&a), Verdict::Refuse { times: 2 });
        assert!(matches!(g.check(&a), Verdict::Stop { .. }));
        // Other arguments, another tool: counted apart.
        assert_eq!(
            g.check(&call("lookup", json!({"q": "coffee"}))),
            Verdict::Run
        );
        assert_eq!(
            g.check(&call("other", json!({"q": "tea", "n": 1}))),
            Verdict::Run
        );
    }
}
