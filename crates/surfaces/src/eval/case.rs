//! One regression case as data (`evals/NAME.yaml`): a task, the profile and tools it may use,
//! what is set up before it (a page served on loopback, facts remembered), and what must hold
//! afterwards. Read with `file:line: field: message` errors, checked before any case runs.
//!
//! Owns: the case format, its checks, and filling `{page_url}`. Must not: run anything.

use hermes_config::{InvalidAt, ReadError};
use hermes_store::TaskState;
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// What `{page_url}` in a case's task and expectations is replaced with.
pub(super) const PAGE_URL: &str = "{page_url}";

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalCase {
    /// A short name, unique in the suite; `--case` globs match it.
    pub name: String,
    /// The task, as a person would give it; `{page_url}` is the fixture page's address.
    pub task: String,
    /// The profile to run on; else `--profile`, else `model.default_profile`.
    #[serde(default)]
    pub profile: Option<String>,
    /// Only these tools are offered (within `tools.allowlist`); else all of them.
    #[serde(default)]
    pub allow: Option<Vec<String>>,
    #[serde(default)]
    pub fixtures: Fixtures,
    #[serde(default)]
    pub expect: Expect,
    /// Where the case was read from (set by the loader), for messages.
    #[serde(skip)]
    pub source: PathBuf,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fixtures {
    /// A page the runner serves on loopback while the case runs.
    #[serde(default)]
    pub page: Option<Page>,
    /// Facts in memory before the task starts.
    #[serde(default)]
    pub remember: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Page {
    /// Its path, e.g. `/news`.
    pub path: String,
    /// Its body (HTML, or RSS/Atom when it starts with `<?xml`, `<rss` or `<feed`).
    pub body: String,
}

/// What must hold once the task has ended. Every field is optional; `state` is `succeeded`
/// unless given.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// A tool the model called, with at least these arguments.
    #[serde(default)]
    pub tool_called: Option<ToolExpect>,
    /// Text the answer contains (case does not matter).
    #[serde(default)]
    pub answer_contains: Option<String>,
    /// A regular expression the answer matches (`(?i)` for any case).
    #[serde(default)]
    pub answer_matches: Option<String>,
    #[serde(default)]
    pub state: Option<TaskState>,
    /// The most model calls the task may take.
    #[serde(default)]
    pub max_model_calls: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolExpect {
    pub name: String,
    /// A subset of the call's arguments: each key given must be there with this value.
    #[serde(default)]
    pub arguments: serde_json::Map<String, Value>,
}

/// A case file that cannot be used, naming the file and, where known, its line and field.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error(transparent)]
    Invalid(InvalidAt),
    #[error(
        "{}: the case name '{name}' is also used by {}; names must be unique in a suite",
        path.display(), first.display()
    )]
    Duplicate {
        path: PathBuf,
        name: String,
        first: PathBuf,
    },
}

impl EvalCase {
    /// Read and check one case; `env` expands `${VAR}` as in settings.yaml.
    pub fn parse(
        text: &str,
        path: &Path,
        env: &HashMap<String, String>,
    ) -> Result<EvalCase, CaseError> {
        let mut case: EvalCase =
            hermes_config::read_yaml(text, env).map_err(|e| CaseError::Invalid(e.at(path)))?;
        case.source = path.to_path_buf();
        case.check().map_err(|(field, message)| {
            CaseError::Invalid(InvalidAt {
                path: path.to_path_buf(),
                line: hermes_config::line_of_key(text, &field.split('.').collect::<Vec<_>>()),
                key: Some(field.to_string()),
                message,
            })
        })?;
        Ok(case)
    }

    /// What cannot work: the field and why.
    fn check(&self) -> Result<(), (&'static str, String)> {
        let name_ok = !self.name.is_empty()
            && self.name.len() <= 64
            && self
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !name_ok {
            return Err((
                "name",
                "1 to 64 of a-z, A-Z, 0-9, '-', '_' and '.'".to_string(),
            ));
        }
        if self.task.trim().is_empty() {
            return Err(("task", "say what the agent should do".into()));
        }
        if let Some(page) = &self.fixtures.page
            && !page.path.starts_with('/')
        {
            return Err((
                "fixtures.page.path",
                format!("'{}' must start with '/' (e.g. /news)", page.path),
            ));
        }
        if self.fixtures.page.is_none() && self.mentions_page_url() {
            return Err((
                "fixtures.page",
                format!("{PAGE_URL} is used, but no page is served: add fixtures.page"),
            ));
        }
        if let Some(re) = &self.expect.answer_matches
            && let Err(e) = regex::Regex::new(re)
        {
            return Err((
                "expect.answer_matches",
                format!("not a regular expression: {e}"),
            ));
        }
        if let Some(t) = &self.expect.tool_called
            && t.name.trim().is_empty()
        {
            return Err(("expect.tool_called.name", "name the tool".into()));
        }
        if self.expect.max_model_calls == Some(0) {
            return Err(("expect.max_model_calls", "must be at least 1".into()));
        }
        if self.fixtures.remember.iter().any(|f| f.trim().is_empty()) {
            return Err(("fixtures.remember", "a fact is empty".into()));
        }
        Ok(())
    }

    fn mentions_page_url(&self) -> bool {
        let in_args = self.expect.tool_called.as_ref().is_some_and(|t| {
            Value::Object(t.arguments.clone())
                .to_string()
                .contains(PAGE_URL)
        });
        self.task.contains(PAGE_URL)
            || in_args
            || [&self.expect.answer_contains, &self.expect.answer_matches]
                .iter()
                .any(|t| t.as_deref().is_some_and(|t| t.contains(PAGE_URL)))
    }

    /// The case with `{page_url}` replaced by `url` everywhere it may appear.
    pub fn with_page_url(&self, url: &str) -> EvalCase {
        let mut c = self.clone();
        c.task = c.task.replace(PAGE_URL, url);
        if let Some(t) = &mut c.expect.tool_called {
            for v in t.arguments.values_mut() {
                fill(v, url);
            }
        }
        for text in [&mut c.expect.answer_contains, &mut c.expect.answer_matches]
            .into_iter()
            .flatten()
        {
            *text = text.replace(PAGE_URL, url);
        }
        c
    }
}

fn fill(v: &mut Value, url: &str) {
    match v {
        Value::String(s) => *s = s.replace(PAGE_URL, url),
        Value::Array(items) => items.iter_mut().for_each(|i| fill(i, url)),
        Value::Object(map) => map.values_mut().for_each(|i| fill(i, url)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<EvalCase, CaseError> {
        EvalCase::parse(text, Path::new("c.yaml"), &HashMap::new())
    }

    #[test]
    fn the_issue_s_example_reads_and_fills_its_page_url() {
        let text = r#"
name: capital-city
task: "What is the capital of France? See {page_url}"
profile: fast
allow: [web_fetch]
fixtures:
  page: {path: /news, body: "<h1>Headline</h1>"}
  remember: ["The dentist appointment is on 14 December."]
expect:
  tool_called: {name: web_fetch, arguments: {url: "{page_url}"}}
  answer_contains: Paris
  answer_matches: "(?i)paris"
  state: succeeded
  max_model_calls: 3
"#;
        let case = parse(text).expect("the example is a valid case");
        assert_eq!(case.expect.state, Some(TaskState::Succeeded));
        let filled = case.with_page_url("http://127.0.0.1:9/news");
        assert_eq!(
            filled.task,
            "What is the capital of France? See http://127.0.0.1:9/news"
        );
        let args = &filled.expect.tool_called.expect("tool").arguments;
        assert_eq!(args["url"], "http://127.0.0.1:9/news");
    }

    #[test]
    fn a_bad_case_names_its_line_and_field() {
        let err = |text: &str| parse(text).expect_err(text).to_string();
        let e = err("name: x\ntask: t\nexpect:\n  answer_matchez: a\n");
        assert!(e.starts_with("c.yaml:4: expect.answer_matchez:"), "{e}");
        let e = err("name: x\ntask: t\nexpect:\n  answer_matches: \"(\"\n");
        assert!(
            e.starts_with("c.yaml:4: expect.answer_matches: not a regular"),
            "{e}"
        );
        let e = err("name: x\ntask: \"fetch {page_url}\"\n");
        assert!(e.contains("fixtures.page: {page_url} is used"), "{e}");
        let e = err("name: a b\ntask: t\n");
        assert!(e.starts_with("c.yaml:1: name:"), "{e}");
        let e = err("name: x\ntask: t\nexpect: {state: done}\n");
        assert!(e.contains("unknown state 'done'"), "{e}");
    }
}
