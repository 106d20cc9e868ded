//! The tools `hermes-agent mcp` offers, as data: names (a contract with MCP clients), when to
//! use each, and input schemas written like the built-ins' — plain objects, no length, count
//! or pattern bounds (a grammar-constrained model must be able to call them).
//!
//! Owns: the specs and the typed arguments they are read into.
//! Must not: do anything; `server.rs` runs the calls.

use hermes_store::TaskState;
use serde::Deserialize;
use serde_json::{Value, json};

/// One offered tool.
pub(super) struct Spec {
    pub name: &'static str,
    pub description: &'static str,
    pub schema: Value,
}

/// Largest `limit` of `list_tasks` and `k` of `recall`: an assistant reads what it asks for.
pub(super) const MAX_LIST: i64 = 100;

pub(super) fn specs() -> Vec<Spec> {
    let id = |what: &str| {
        json!({"type": "object",
               "properties": {"id": {"type": "string", "description": what}},
               "required": ["id"], "additionalProperties": false})
    };
    vec![
        Spec {
            name: "run_task",
            description: "Give the hermes agent a task in plain language and wait for its answer. Returns the answer, the final state and the task id (for get_task).",
            schema: json!({"type": "object", "properties": {
                "task": {"type": "string", "description": "What to do, self-contained."},
                "profile": {"type": "string", "description": "Model profile (default: the configured default)."}
            }, "required": ["task"], "additionalProperties": false}),
        },
        Spec {
            name: "list_tasks",
            description: "List the agent's tasks, newest first, with state and answer.",
            schema: json!({"type": "object", "properties": {
                "state": {"type": "string", "enum": ["pending", "running", "succeeded", "failed", "cancelled"],
                          "description": "Only tasks in this state."},
                "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "description": "At most this many (default 20)."}
            }, "additionalProperties": false}),
        },
        Spec {
            name: "get_task",
            description: "One task with its full trace (every model and tool step). An unambiguous id prefix is enough.",
            schema: id("The task id (from run_task or list_tasks)."),
        },
        Spec {
            name: "list_jobs",
            description: "List the scheduled jobs with their schedules, next run and last run.",
            schema: json!({"type": "object", "properties": {}, "additionalProperties": false}),
        },
        Spec {
            name: "create_job",
            description: "Schedule a recurring or one-shot task. Its answer is delivered to the named channels.",
            schema: json!({"type": "object", "properties": {
                "task": {"type": "string", "description": "What to do at each run, self-contained."},
                "schedule": {"type": "string", "description": "5-field cron (\"0 8 * * *\"), an interval (\"every 2h\") or a one-shot (\"in 30m\", \"2026-12-01T09:00\")."},
                "name": {"type": "string", "description": "A short name for notice titles."},
                "timezone": {"type": "string", "description": "IANA time zone, e.g. Europe/Berlin (default: the configured one)."},
                "notify": {"type": "array", "items": {"type": "string"}, "description": "Channels for the answer: \"email\" or a webhook's name."},
                "profile": {"type": "string", "description": "Model profile for the runs."}
            }, "required": ["task", "schedule"], "additionalProperties": false}),
        },
        Spec {
            name: "delete_job",
            description: "Delete a scheduled job; it never runs again.",
            schema: id("The job id (from list_jobs)."),
        },
        Spec {
            name: "remember",
            description: "Store a long-term fact the agent will recall in later tasks.",
            schema: json!({"type": "object", "properties": {
                "text": {"type": "string", "description": "The fact, one short statement."},
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Optional tags."}
            }, "required": ["text"], "additionalProperties": false}),
        },
        Spec {
            name: "recall",
            description: "Search the long-term facts (English and Chinese); the best matches first, with ids.",
            schema: json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "Words to look for."},
                "k": {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "description": "At most this many (default 5)."}
            }, "required": ["query"], "additionalProperties": false}),
        },
        Spec {
            name: "forget",
            description: "Delete a long-term fact by id (from recall).",
            schema: id("The fact id (from recall)."),
        },
    ]
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RunTask {
    pub task: String,
    #[serde(default)]
    pub profile: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListTasks {
    #[serde(default)]
    pub state: Option<TaskState>,
    #[serde(default)]
    pub limit: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Remember {
    pub text: String,
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Recall {
    pub query: String,
    #[serde(default)]
    pub k: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_schema_is_a_plain_object_schema_the_grammar_can_take() {
        let specs = specs();
        let names: Vec<&str> = specs.iter().map(|s| s.name).collect();
        assert_eq!(names, super::super::TOOL_NAMES);
        for s in &specs {
            assert_eq!(s.schema["type"], "object", "{}", s.name);
            assert!(
                hermes_engine::tools::schema::is_grammar_friendly(&s.schema),
                "{}",
                s.name
            );
            assert!(jsonschema::validator_for(&s.schema).is_ok(), "{}", s.name);
        }
    }
}
