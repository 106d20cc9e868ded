//! Short-term memory: the message window of ONE task.
//!
//! Owns: which messages a task sends the model at each step — the preamble (system prompt and
//! recalled facts), the goal (the task itself, never dropped), a short summary of older rounds,
//! and the last `max_rounds` rounds verbatim — and the folding of older rounds into that summary,
//! by rules or by a model. Each task owns its own [`ShortTerm`]; nothing here is shared.
//! Must not: call the model except through the [`SummaryModel`] handle it is given, or let the
//! summary grow past `summary_max_chars` whatever the model returns.

use crate::llm::{LlmError, Message, ToolCall};
use futures::future::BoxFuture;
use hermes_store::util::text::{collapse, one_line, prefix};
use std::collections::VecDeque;
use std::sync::Arc;

/// How many "done" notes the rule summariser keeps; older ones could never fit a summary of a
/// few hundred characters anyway, and this keeps a long task's window bounded.
const MAX_DONE_NOTES: usize = 32;

/// Characters of a tool result quoted in a "done" note.
const RESULT_WORDS_CHARS: usize = 16;

/// Characters of each message shown to the model summariser.
const PROMPT_MESSAGE_CHARS: usize = 400;

/// A model that writes a summary from a prompt. The gateway implements it; tests use their own.
pub trait SummaryModel: Send + Sync {
    fn summarise<'a>(&'a self, prompt: String) -> BoxFuture<'a, Result<String, LlmError>>;
}

/// How older rounds are folded into the summary.
#[derive(Clone)]
pub enum Summariser {
    /// No model call: goal, tools called with a few words of their results, and the next step.
    Rules,
    /// Ask a model; on failure or an empty answer, fall back to the rules.
    Model(Arc<dyn SummaryModel>),
}

/// One assistant message (with its tool calls) plus the tool messages answering it.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct Round {
    assistant: Message,
    tool_results: Vec<Message>,
}

impl Round {
    /// The result message answering `call`, if it came back.
    fn result_of(&self, call: &ToolCall) -> Option<&str> {
        self.tool_results
            .iter()
            .find(|m| m.tool_call_id.as_deref() == Some(call.id.as_str()))
            .map(|m| m.content.as_str())
    }
}

/// The short-term memory of one task. Serialisable: a task waiting for a person keeps it in
/// its checkpoint, and continues from it.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct ShortTerm {
    preamble: Vec<Message>,
    goal: Message,
    /// The rounds sent verbatim: at most `max_rounds`.
    rounds: VecDeque<Round>,
    /// Rounds pushed out of the window that [`ShortTerm::compact`] has not folded in yet.
    unsummarised: Vec<Round>,
    /// One note per tool call folded so far, oldest first (what the rule summariser says is done).
    done: VecDeque<String>,
    summary: String,
    max_rounds: usize,
    summary_max_chars: usize,
}

impl ShortTerm {
    /// `preamble`: system prompt and memory messages, always sent first; `goal`: the task as the first user message, never dropped.
    pub fn new(
        preamble: Vec<Message>,
        goal: Message,
        max_rounds: usize,
        summary_max_chars: usize,
    ) -> ShortTerm {
        ShortTerm {
            preamble,
            goal,
            rounds: VecDeque::new(),
            unsummarised: Vec::new(),
            done: VecDeque::new(),
            summary: String::new(),
            max_rounds,
            summary_max_chars,
        }
    }

    /// A round = one assistant message (with its tool calls) plus the tool messages answering it.
    /// Rounds pushed out of the window wait for the next [`ShortTerm::compact`]; call it after
    /// each push so their content reaches the summary.
    pub fn push_round(&mut self, assistant: Message, tool_results: Vec<Message>) {
        self.rounds.push_back(Round {
            assistant,
            tool_results,
        });
        while self.rounds.len() > self.max_rounds {
            if let Some(old) = self.rounds.pop_front() {
                self.unsummarised.push(old);
            }
        }
    }

    /// preamble + goal + (summary as one user message "Progress so far: …" when non-empty) + the last max_rounds rounds verbatim.
    pub fn messages(&self) -> Vec<Message> {
        let mut out = Vec::with_capacity(
            self.preamble.len()
                + 2
                + self
                    .rounds
                    .iter()
                    .map(|r| 1 + r.tool_results.len())
                    .sum::<usize>(),
        );
        out.extend(self.preamble.iter().cloned());
        out.push(self.goal.clone());
        if !self.summary.is_empty() {
            out.push(Message::user(format!("Progress so far: {}", self.summary)));
        }
        for round in &self.rounds {
            out.push(round.assistant.clone());
            out.extend(round.tool_results.iter().cloned());
        }
        out
    }

    pub fn summary(&self) -> &str {
        &self.summary
    }

    /// Fold rounds beyond max_rounds into the summary (≤ summary_max_chars chars: what is done, the goal, what is next).
    pub async fn compact(&mut self, summariser: &Summariser) {
        if self.unsummarised.is_empty() {
            return;
        }
        let folded = std::mem::take(&mut self.unsummarised);
        for round in &folded {
            for note in done_notes(round) {
                if self.done.len() == MAX_DONE_NOTES {
                    self.done.pop_front();
                }
                self.done.push_back(note);
            }
        }
        let next = self.latest_assistant_text(&folded);
        self.done.make_contiguous();
        let rules = || {
            rule_summary(
                &self.goal.content,
                self.done.as_slices().0,
                next.as_deref(),
                self.summary_max_chars,
            )
        };
        // The summary quotes tool results and the model's reading of them: data, made inert
        // like the results themselves before it goes back to the model.
        let summary = match summariser {
            Summariser::Rules => rules(),
            Summariser::Model(model) => {
                let prompt = self.model_prompt(&folded);
                match model.summarise(prompt).await {
                    Ok(text) => {
                        let text = clean_model_summary(&text);
                        if text.is_empty() {
                            tracing::warn!(
                                "the summary model returned nothing; using the rule-based summary"
                            );
                            rules()
                        } else {
                            prefix(&text, self.summary_max_chars).to_string()
                        }
                    }
                    Err(error) => {
                        tracing::warn!(%error, "the summary model failed; using the rule-based summary");
                        rules()
                    }
                }
            }
        };
        let inert = hermes_store::util::inert::neutralise(&summary);
        self.summary = prefix(&inert, self.summary_max_chars).to_string();
    }

    /// The model's latest words: its current plan, the best guess at "what is next".
    fn latest_assistant_text(&self, folded: &[Round]) -> Option<String> {
        self.rounds
            .iter()
            .rev()
            .chain(folded.iter().rev())
            .map(|r| r.assistant.content.trim())
            .find(|t| !t.is_empty())
            .map(str::to_string)
    }

    fn model_prompt(&self, folded: &[Round]) -> String {
        let mut prompt = format!(
            "Summarise the progress of a task in at most {} characters: what is done, the goal, \
             what is next. Keep names, numbers and ids that later steps need. Reply with the \
             summary only, in the language of the task.\n\nTask: {}\n",
            self.summary_max_chars,
            one_line(&collapse(&self.goal.content), PROMPT_MESSAGE_CHARS)
        );
        if !self.summary.is_empty() {
            prompt.push_str(&format!("Summary so far: {}\n", self.summary));
        }
        prompt.push_str("Steps to fold in:\n");
        for round in folded {
            let said = collapse(&round.assistant.content);
            if !said.is_empty() {
                prompt.push_str(&format!(
                    "- assistant: {}\n",
                    one_line(&said, PROMPT_MESSAGE_CHARS)
                ));
            }
            for call in &round.assistant.tool_calls {
                let result = round.result_of(call).map(collapse).unwrap_or_default();
                prompt.push_str(&format!(
                    "- called {}({}) -> {}\n",
                    call.name,
                    one_line(&call.arguments.to_string(), PROMPT_MESSAGE_CHARS / 4),
                    one_line(&result, PROMPT_MESSAGE_CHARS)
                ));
            }
        }
        prompt
    }
}

/// "tool→first words of its result" for each tool call of a round.
fn done_notes(round: &Round) -> Vec<String> {
    round
        .assistant
        .tool_calls
        .iter()
        .map(|call| {
            let result = round.result_of(call).map(few_words).unwrap_or_default();
            if result.is_empty() {
                call.name.clone()
            } else {
                format!("{}→{}", call.name, result)
            }
        })
        .collect()
}

/// The first words of a tool result, JSON punctuation dropped.
fn few_words(text: &str) -> String {
    let plain: String = text
        .chars()
        .filter(|&c| c != '"')
        .map(|c| {
            if matches!(c, '{' | '}' | '[' | ']') {
                ' '
            } else {
                c
            }
        })
        .collect();
    one_line(&collapse(&plain), RESULT_WORDS_CHARS)
}

/// The rule-based summary: "Done: …. Goal: …. Next: …." within `max` characters. The goal and
/// the next step get a bounded share; the done list gets the rest, newest notes kept first.
fn rule_summary(goal: &str, done: &[String], next: Option<&str>, max: usize) -> String {
    let goal = one_line(&first_sentence(goal), (max / 4).max(12));
    let mut tail = format!("Goal: {goal}");
    if let Some(next) = next {
        let next = one_line(&first_sentence(next), max / 5);
        if !next.is_empty() {
            tail.push_str(&format!(". Next: {next}"));
        }
    }
    let budget = max.saturating_sub(char_len(&tail) + "Done: . ".len());
    let mut picked: Vec<&str> = Vec::new();
    let mut used = 0;
    for note in done.iter().rev() {
        let cost = char_len(note) + if picked.is_empty() { 0 } else { 2 };
        // Leave room for the "…; " that says older notes were left out.
        let reserve = if picked.len() + 1 < done.len() { 3 } else { 0 };
        if used + cost + reserve > budget {
            break;
        }
        used += cost;
        picked.push(note);
    }
    picked.reverse();
    let mut picked: Vec<String> = picked.into_iter().map(str::to_string).collect();
    // The newest step matters most: squeeze it in even when it has to be shortened.
    if picked.is_empty()
        && let Some(newest) = done.last()
    {
        let room = budget.saturating_sub(if done.len() > 1 { 3 } else { 0 });
        if room >= 8 {
            picked.push(one_line(newest, room));
        }
    }
    let summary = if picked.is_empty() {
        tail
    } else {
        let ellipsis = if picked.len() < done.len() {
            "…; "
        } else {
            ""
        };
        format!("Done: {ellipsis}{}. {tail}", picked.join("; "))
    };
    prefix(&summary, max).to_string()
}

/// A model's summary as one line, without a "Progress so far:" it may have echoed.
fn clean_model_summary(text: &str) -> String {
    let line = collapse(text);
    let line = line
        .strip_prefix("Progress so far:")
        .map(str::trim_start)
        .unwrap_or(&line);
    line.to_string()
}

/// Text up to the end of its first sentence, whitespace collapsed. A '.' only ends a sentence
/// when followed by a space, so "example.com" and "3.5" stay whole.
fn first_sentence(text: &str) -> String {
    let text = collapse(text);
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let ends = match c {
            '。' | '！' | '？' | '；' => true,
            '.' | '!' | '?' | ';' => chars.peek().is_none_or(|&(_, n)| n.is_whitespace()),
            _ => false,
        };
        if ends {
            return text[..i].to_string();
        }
    }
    text
}

fn char_len(text: &str) -> usize {
    text.chars().count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::{Role, ToolCall};

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall::new(id, name, serde_json::json!({"url": "https://example.com"}))
    }

    #[test]
    fn first_sentence_respects_urls_and_cjk_stops() {
        assert_eq!(
            first_sentence("Fetch example.com and 3.5 more. Then mail it."),
            "Fetch example.com and 3.5 more"
        );
        assert_eq!(first_sentence("查一下天气。然后发邮件"), "查一下天气");
        assert_eq!(first_sentence("  one\n two  "), "one two");
    }

    #[test]
    fn done_notes_pair_calls_with_their_results() {
        let round = Round {
            assistant: Message::assistant("", vec![call("c1", "web_fetch"), call("c2", "recall")]),
            tool_results: vec![
                Message::tool("c2", "{\"facts\": []}"),
                Message::tool(
                    "c1",
                    "{\"title\": \"Rust 1.90 released\", \"text\": \"long body\"}",
                ),
            ],
        };
        assert_eq!(
            done_notes(&round),
            vec!["web_fetch→title: Rust 1.9…", "recall→facts:"]
        );
    }

    #[test]
    fn rule_summary_keeps_newest_notes_and_fits() {
        let done: Vec<String> = (0..10).map(|i| format!("tool{i}→ok")).collect();
        let s = rule_summary(
            "Write the weekly report. Then send it.",
            &done,
            Some("Send it to Alice."),
            100,
        );
        assert!(char_len(&s) <= 100, "{s}");
        assert!(s.starts_with("Done: …; "), "{s}");
        assert!(s.contains("tool9→ok"), "{s}");
        assert!(!s.contains("tool0→"), "{s}");
        assert!(s.contains("Goal: Write the weekly report"), "{s}");
        assert!(s.ends_with("Next: Send it to Alice"), "{s}");
    }

    #[test]
    fn rule_summary_squeezes_in_the_newest_note() {
        let done = vec!["old→x".to_string(), format!("web_fetch→{}", "y".repeat(60))];
        let s = rule_summary("Goal text", &done, None, 40);
        assert!(char_len(&s) <= 40, "{s}");
        assert!(s.starts_with("Done: …; web_fetch→y"), "{s}");
        assert!(s.ends_with(". Goal: Goal text"), "{s}");
    }

    #[test]
    fn rule_summary_without_notes_or_next() {
        assert_eq!(
            rule_summary("Check mail", &[], None, 100),
            "Goal: Check mail"
        );
        assert_eq!(
            char_len(&rule_summary(&"字".repeat(500), &[], None, 10)),
            10
        );
    }

    #[test]
    fn model_output_is_cleaned() {
        assert_eq!(
            clean_model_summary("Progress so far:  fetched\n page "),
            "fetched page"
        );
        assert_eq!(clean_model_summary(" \n "), "");
    }

    #[test]
    fn zero_rounds_keeps_only_preamble_goal_and_summary() {
        let mut st = ShortTerm::new(vec![Message::system("sys")], Message::user("goal"), 0, 50);
        st.push_round(
            Message::assistant("", vec![call("c1", "t")]),
            vec![Message::tool("c1", "r")],
        );
        let roles: Vec<Role> = st.messages().iter().map(|m| m.role).collect();
        assert_eq!(roles, vec![Role::System, Role::User]);
    }
}
