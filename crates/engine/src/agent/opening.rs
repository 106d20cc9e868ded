//! A new execution's first messages: the tool sources waited for, the stable system prompt,
//! and one user message with the time (in the zone the task lives in), the facts memory
//! recalls for it, the message it answers when it is a reply, and the task.
//!
//! Owns: what a task is told before its first model call. Must not: call the model, or write
//! anything but its trace notes.

use super::run::Run;
use super::{prompt, trace};
use crate::llm::Message;
use crate::memory::ShortTerm;
use hermes_store::{StoreError, now};

impl Run<'_> {
    /// A new execution's window: the tool sources waited for, then the prompt and recall.
    pub(super) async fn start_window(&self) -> Result<ShortTerm, StoreError> {
        let inner = &self.agent.inner;
        // Tool sources still on their first start (an MCP server the daemon just launched)
        // would be missing from this task's offer: wait for them, bounded, and say so when
        // one is still not up.
        let late = (inner.registry.starting())
            .wait(crate::tools::SOURCE_START_WAIT)
            .await;
        if !late.is_empty() {
            let text = format!(
                "tools of {} still starting after {} s; they are offered once they are up",
                late.join(", "),
                crate::tools::SOURCE_START_WAIT.as_secs()
            );
            self.record(trace::note(0, Some(text), None));
        }
        self.prepare_window().await
    }

    /// The task's message window at its start: the stable system prompt, then one user message
    /// with the time, the facts memory recalls for the task, and the task itself.
    async fn prepare_window(&self) -> Result<ShortTerm, StoreError> {
        let s = &self.agent.inner.settings;
        let tz = self.zone().await;
        let now_local = now()
            .with_timezone(&tz)
            .format("%Y-%m-%d %H:%M %Z (%A)")
            .to_string();
        let system = prompt::system_prompt(
            &s.agent.system_prompt_extra,
            self.opts.agent_prompt.as_deref(),
        );
        let facts = match &self.agent.inner.memory {
            Some(memory) => self.recall(memory).await,
            None => Vec::new(),
        };
        // A reply (by email, in a chat thread) continues what it answers: the notice goes into
        // the first message.
        let earlier = match self.task.origin {
            hermes_store::Origin::Email
            | hermes_store::Origin::Matrix
            | hermes_store::Origin::Telegram => {
                self.agent
                    .inner
                    .store
                    .inbox()
                    .context(&self.task.id)
                    .await?
            }
            _ => None,
        };
        let goal = prompt::task_message(&now_local, &facts, earlier.as_deref(), &self.task.task);
        Ok(ShortTerm::new(
            vec![Message::system(system)],
            Message::user(goal),
            s.context.max_dialog_rounds as usize,
            s.context.summary_max_length as usize,
        ))
    }

    /// The zone the task is told the time in: its job's (the zone its schedule and its notice's
    /// date are in), else `scheduler.timezone`.
    async fn zone(&self) -> chrono_tz::Tz {
        let settings = &self.agent.inner.settings.scheduler.timezone;
        let job_zone = match &self.task.job_id {
            Some(id) => match self.agent.inner.store.jobs().get(id).await {
                Ok(job) => Some(job.timezone),
                // Removed meanwhile, or unreadable: the person's zone is as good a guess.
                Err(_) => None,
            },
            None => None,
        };
        job_zone
            .as_deref()
            .and_then(|z| z.parse().ok())
            .or_else(|| settings.parse().ok())
            .unwrap_or(chrono_tz::UTC)
    }

    /// The facts memory recalls for the task, noted in the trace; none when recall fails
    /// (the task goes on without them, and the trace says why).
    async fn recall(&self, memory: &crate::memory::LongTerm) -> Vec<crate::memory::Recalled> {
        let k = self.agent.inner.settings.memory.recall_top_k as usize;
        match memory.recall(&self.task.task, k).await {
            Ok(facts) => {
                if !facts.is_empty() {
                    let text = format!("recalled {} fact(s) from memory", facts.len());
                    self.record(trace::note(0, Some(text), None));
                }
                facts
            }
            Err(e) => {
                tracing::warn!(task = %self.task.id, error = %e, "memory recall failed; continuing without");
                let error = format!("memory recall failed: {e}");
                self.record(trace::note(0, None, Some(error)));
                Vec::new()
            }
        }
    }
}
