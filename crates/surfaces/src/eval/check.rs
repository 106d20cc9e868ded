//! Whether a finished task did what its case expects: its state, the tool it was to call (with
//! at least the given arguments), its answer, and how many model calls it took. Each unmet
//! expectation is one reason, in words a person can act on.
//!
//! Owns: judging one task record against one case. Must not: run anything.

use super::case::{EvalCase, ToolExpect};
use hermes_store::{StepKind, TaskRecord, TaskState};
use serde_json::Value;

/// The reasons the task did not meet the case; empty when it did.
pub fn judge(case: &EvalCase, record: &TaskRecord) -> Vec<String> {
    let mut why = Vec::new();
    let t = &record.task;
    let expected = case.expect.state.unwrap_or(TaskState::Succeeded);
    if t.state != expected {
        let detail = match (&t.reason, &t.error) {
            (Some(r), Some(e)) => format!(" ({r}: {})", hermes_store::util::text::one_line(e, 160)),
            (Some(r), None) => format!(" ({r})"),
            _ => String::new(),
        };
        why.push(format!("ended {}{detail}, expected {expected}", t.state));
    }
    if let Some(tool) = &case.expect.tool_called
        && let Some(missing) = tool_missing(tool, record)
    {
        why.push(missing);
    }
    let answer = t.answer.as_deref().unwrap_or("");
    if let Some(text) = &case.expect.answer_contains
        && !answer.to_lowercase().contains(&text.to_lowercase())
    {
        why.push(format!(
            "the answer does not contain '{text}'{}",
            quoted(answer)
        ));
    }
    if let Some(re) = &case.expect.answer_matches {
        // Checked when the case was read; a pattern that still fails to build fails the case.
        let matched = regex::Regex::new(re).is_ok_and(|re| re.is_match(answer));
        if !matched {
            why.push(format!(
                "the answer does not match /{re}/{}",
                quoted(answer)
            ));
        }
    }
    let calls = model_calls(record);
    if let Some(max) = case.expect.max_model_calls
        && calls > i64::from(max)
    {
        why.push(format!("took {calls} model calls, at most {max} expected"));
    }
    why
}

/// The model calls the task made (its own, not its sub-agents').
pub(super) fn model_calls(record: &TaskRecord) -> i64 {
    record
        .steps
        .iter()
        .filter(|s| s.row.kind == StepKind::Model)
        .count() as i64
}

fn quoted(answer: &str) -> String {
    if answer.trim().is_empty() {
        " (there is no answer)".into()
    } else {
        format!(": \"{}\"", hermes_store::util::text::one_line(answer, 120))
    }
}

/// Why the expected call is not in the trace, if it is not.
fn tool_missing(expect: &ToolExpect, record: &TaskRecord) -> Option<String> {
    let calls: Vec<(&str, Value)> = record
        .steps
        .iter()
        .filter(|s| s.row.kind == StepKind::Tool)
        .map(|s| {
            let args = s
                .row
                .arguments
                .as_deref()
                .and_then(|a| serde_json::from_str(a).ok())
                .unwrap_or(Value::Null);
            (s.row.name.as_str(), args)
        })
        .collect();
    let wanted = Value::Object(expect.arguments.clone());
    let same_tool: Vec<&Value> = calls
        .iter()
        .filter(|(n, _)| *n == expect.name)
        .map(|(_, a)| a)
        .collect();
    if same_tool.iter().any(|a| contains(a, &wanted)) {
        return None;
    }
    if let Some(args) = same_tool.first() {
        return Some(format!(
            "called {} with {args}, not with {wanted}",
            expect.name
        ));
    }
    let names: Vec<&str> = calls.iter().map(|(n, _)| *n).collect();
    Some(if names.is_empty() {
        format!("never called {} (no tool was called)", expect.name)
    } else {
        format!(
            "never called {} (called: {})",
            expect.name,
            names.join(", ")
        )
    })
}

/// `actual` has everything `wanted` has: each key of an object (others may be there too),
/// each element of an array in order, equal scalars — a number equal to the same number
/// written as text, as small models write them.
fn contains(actual: &Value, wanted: &Value) -> bool {
    match (actual, wanted) {
        (Value::Object(a), Value::Object(w)) => w
            .iter()
            .all(|(k, wv)| a.get(k).is_some_and(|av| contains(av, wv))),
        (Value::Array(a), Value::Array(w)) => {
            a.len() == w.len() && a.iter().zip(w).all(|(av, wv)| contains(av, wv))
        }
        (Value::Number(a), Value::Number(w)) => a.as_f64() == w.as_f64(),
        (Value::String(a), Value::Number(w)) | (Value::Number(w), Value::String(a)) => {
            a.trim().parse::<f64>().ok() == w.as_f64()
        }
        (Value::String(a), Value::String(w)) => a.trim() == w.trim(),
        (a, w) => a == w,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_store::{FailReason, NewStep, Origin, Step, Task};
    use serde_json::json;

    fn case(yaml: &str) -> EvalCase {
        EvalCase::parse(yaml, std::path::Path::new("c.yaml"), &Default::default()).expect("case")
    }

    fn row(kind: StepKind, name: &str, args: Option<Value>) -> Step {
        NewStep {
            arguments: args.map(|a| a.to_string()),
            ..NewStep::new(1, kind, name)
        }
        .into_step(1, chrono::Utc::now())
    }

    /// A model call, a `web_fetch` call with `args`, and the model call that answered.
    fn fetched(args: Value) -> Vec<Step> {
        vec![
            row(StepKind::Model, "fast", None),
            row(StepKind::Tool, "web_fetch", Some(args)),
            row(StepKind::Model, "fast", None),
        ]
    }

    fn record(state: TaskState, answer: Option<&str>, steps: Vec<Step>) -> TaskRecord {
        TaskRecord {
            task: Task {
                id: "t".into(),
                state,
                origin: Origin::Cli,
                parent_id: None,
                job_id: None,
                profile: "fast".into(),
                task: "x".into(),
                answer: answer.map(str::to_string),
                error: (state == TaskState::Failed).then(|| "no answer".into()),
                reason: (state == TaskState::Failed).then_some(FailReason::MaxSteps),
                parse_failures: 0,
                prompt_tokens: 0,
                completion_tokens: 0,
                created_at: chrono::Utc::now(),
                started_at: None,
                finished_at: None,
                waiting: false,
                node_epoch: None,
            },
            steps,
            notices: vec![],
        }
    }

    #[test]
    fn a_task_that_did_it_all_passes() {
        let c = case(
            "name: a\ntask: t\nexpect:\n  tool_called: {name: web_fetch, arguments: {url: http://x/a, n: 2}}\n  answer_contains: paris\n  answer_matches: '(?i)^the'\n  max_model_calls: 2\n",
        );
        let steps = fetched(json!({"url": "http://x/a", "n": "2", "selector": "h1"}));
        let r = record(TaskState::Succeeded, Some("The capital is Paris."), steps);
        assert_eq!(judge(&c, &r), Vec::<String>::new());
    }

    #[test]
    fn each_unmet_expectation_is_a_reason() {
        let c = case(
            "name: a\ntask: t\nexpect:\n  tool_called: {name: web_fetch, arguments: {url: http://x/a}}\n  answer_contains: Paris\n  max_model_calls: 1\n",
        );
        let steps = fetched(json!({"url": "http://x/b"}));
        let why = judge(&c, &record(TaskState::Failed, None, steps));
        assert_eq!(why.len(), 4, "{why:?}");
        assert!(
            why[0].starts_with("ended failed (max_steps: no answer), expected succeeded"),
            "{why:?}"
        );
        assert!(
            why[1].contains("called web_fetch with {\"url\":\"http://x/b\"}"),
            "{why:?}"
        );
        assert!(why[2].contains("(there is no answer)"), "{why:?}");
        assert_eq!(why[3], "took 2 model calls, at most 1 expected");
        let none = judge(
            &c,
            &record(
                TaskState::Succeeded,
                Some("Paris"),
                vec![row(StepKind::Model, "fast", None)],
            ),
        );
        assert_eq!(none, ["never called web_fetch (no tool was called)"]);
    }

    #[test]
    fn an_expected_failure_passes_when_the_task_fails() {
        let c = case("name: a\ntask: t\nexpect: {state: failed}\n");
        assert!(judge(&c, &record(TaskState::Failed, None, vec![])).is_empty());
    }
}
