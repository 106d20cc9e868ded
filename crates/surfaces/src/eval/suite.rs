//! The suite a run takes its cases from: the starter cases shipped in the repository's
//! `evals/` (compiled in, so an installed binary has them), then the person's own in the
//! config's evals directory — a case of theirs with a starter case's name takes its place —
//! narrowed by `--case` globs on the names.
//!
//! Owns: finding, reading and choosing cases, and the runner's own manifest tool
//! (`evals/tools/`). Must not: run a case.

use super::case::{CaseError, EvalCase};
use hermes_engine::tools::Tool;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// The starter cases: `evals/*.yaml`, each compiled in (a test checks none is left out).
const STARTER: [(&str, &str); 10] = [
    (
        "plain-answer.yaml",
        include_str!("../../../../evals/plain-answer.yaml"),
    ),
    (
        "web-fetch.yaml",
        include_str!("../../../../evals/web-fetch.yaml"),
    ),
    (
        "read-feed.yaml",
        include_str!("../../../../evals/read-feed.yaml"),
    ),
    (
        "schedule-job.yaml",
        include_str!("../../../../evals/schedule-job.yaml"),
    ),
    (
        "list-schedules.yaml",
        include_str!("../../../../evals/list-schedules.yaml"),
    ),
    ("notify.yaml", include_str!("../../../../evals/notify.yaml")),
    (
        "remember.yaml",
        include_str!("../../../../evals/remember.yaml"),
    ),
    ("recall.yaml", include_str!("../../../../evals/recall.yaml")),
    (
        "manifest-tool.yaml",
        include_str!("../../../../evals/manifest-tool.yaml"),
    ),
    (
        "delegate.yaml",
        include_str!("../../../../evals/delegate.yaml"),
    ),
];

/// The manifest tools only evals have, served by the runner's fixture server.
const EVAL_TOOLS: [(&str, &str); 1] = [(
    "eval_order_status.yaml",
    include_str!("../../../../evals/tools/eval_order_status.yaml"),
)];

/// The variable the eval tools' URLs name the fixture server by.
pub(super) const FIXTURES_VAR: &str = "HERMES_EVAL_FIXTURES";

/// The starter cases, then those in `user_dir` (a missing directory holds none), by name.
pub fn load(user_dir: Option<&Path>) -> Result<Vec<EvalCase>, CaseError> {
    let env = hermes_config::env_map();
    let mut cases: Vec<EvalCase> = Vec::new();
    for (file, text) in STARTER {
        let path = Path::new("evals").join(file);
        cases.push(EvalCase::parse(text, &path, &env)?);
    }
    let starters = cases.len();
    let user_files = match user_dir {
        Some(dir) => hermes_config::yaml_files(dir, "evals directory")?,
        None => Vec::new(),
    };
    for path in user_files {
        let text = hermes_config::read_text(&path, "case")?;
        let case = EvalCase::parse(&text, &path, &env)?;
        match cases.iter().position(|c| c.name == case.name) {
            // The person's own version of a starter case replaces it.
            Some(i) if i < starters => cases[i] = case,
            Some(i) => {
                return Err(CaseError::Duplicate {
                    path,
                    name: case.name,
                    first: cases[i].source.clone(),
                });
            }
            None => cases.push(case),
        }
    }
    Ok(cases)
}

/// The cases whose name matches one of `globs` (`*` matches any run of characters); all of
/// them when none is given.
pub fn choose(cases: Vec<EvalCase>, globs: &[String]) -> Vec<EvalCase> {
    if globs.is_empty() {
        return cases;
    }
    cases
        .into_iter()
        .filter(|c| {
            globs
                .iter()
                .any(|g| hermes_store::util::glob_matches(g, &c.name))
        })
        .collect()
}

/// The eval-only manifest tools, their URLs pointing at the fixture server at `fixtures`.
pub(super) fn eval_tools(
    fixtures: &str,
) -> Result<Vec<Arc<dyn Tool>>, hermes_engine::tools::manifest::ManifestError> {
    let env: HashMap<String, String> =
        HashMap::from([(FIXTURES_VAR.to_string(), fixtures.to_string())]);
    EVAL_TOOLS
        .iter()
        .map(|(file, text)| {
            let path = Path::new("evals/tools").join(file);
            hermes_engine::tools::manifest::parse(text, &path, &env)
                .map(|t| Arc::new(t) as Arc<dyn Tool>)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_starter_case_is_compiled_in_and_valid() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../evals");
        let mut on_disk: Vec<String> = std::fs::read_dir(&dir)
            .expect("evals/")
            .filter_map(Result::ok)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = STARTER.iter().map(|(f, _)| f.to_string()).collect();
        listed.sort();
        assert_eq!(
            on_disk, listed,
            "a case in evals/ must be listed in STARTER"
        );
        let cases = load(None).expect("the starter cases are valid");
        assert!(cases.len() >= 8);
        for family in [
            "web_fetch",
            "read_feed",
            "schedule_task",
            "notify",
            "remember",
            "delegate",
            "eval_order_status",
        ] {
            assert!(
                cases.iter().any(|c| c
                    .expect
                    .tool_called
                    .as_ref()
                    .is_some_and(|t| t.name == family)),
                "no starter case calls {family}"
            );
        }
        assert!(eval_tools("http://127.0.0.1:9").is_ok());
    }

    #[test]
    fn the_person_s_cases_follow_and_may_replace_a_starter_one() {
        let dir = tempfile::tempdir().expect("dir");
        std::fs::write(dir.path().join("a.yaml"), "name: mine\ntask: hello\n").expect("write");
        std::fs::write(
            dir.path().join("b.yaml"),
            "name: plain-answer\ntask: What is 2 + 2?\nexpect: {answer_contains: '4'}\n",
        )
        .expect("write");
        let cases = load(Some(dir.path())).expect("load");
        assert_eq!(cases.last().map(|c| c.name.as_str()), Some("mine"));
        let plain = cases
            .iter()
            .find(|c| c.name == "plain-answer")
            .expect("kept");
        assert_eq!(plain.task, "What is 2 + 2?");
        std::fs::write(dir.path().join("c.yaml"), "name: mine\ntask: again\n").expect("write");
        let err = load(Some(dir.path())).expect_err("two of the person's cases with one name");
        assert!(err.to_string().contains("also used by"), "{err}");
        let chosen = choose(load(None).expect("load"), &["re*".into(), "notify".into()]);
        let names: Vec<&str> = chosen.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["read-feed", "notify", "remember", "recall"]);
    }
}
