//! Fallback chains: a call to a profile goes to the next profile of its chain
//! (`model.profiles.NAME.fallback`, a fallback's own fallbacks after it) when it fails for a
//! reason another server could fix ([`FailureKind::falls_back`]) — each fallback with its own
//! URL, key, model name and tool mode, since each is called as the profile it is. A failure
//! given on purpose (a content-policy refusal) or a request any server would reject ends the
//! call there. A profile that failed is skipped for `model.fallback_cooldown_s` — asked after
//! its fallbacks instead of before them — then tried first again.
//!
//! Owns: the order of a call's profiles, the cooldown, and the notes that tell the trace what
//! the chain did. Must not: retry within a profile (the profile's own retries are
//! `client.rs`'s) or decide on error text (only on [`FailureKind`](super::FailureKind)).

use super::client::Ask;
use super::{Gateway, LlmError, Message, ModelReply, Toolset};
use hermes_store::util::lock;
use std::time::{Duration, Instant};

/// A profile of the chain, in the order it is asked.
struct Turn {
    name: String,
    /// How long ago it failed, when it is still cooling down (asked after the others).
    cooling: Option<Duration>,
}

impl Gateway {
    /// As [`Gateway::chat`], for a caller with a deadline (a task's time limit): no retry
    /// wait, whether backoff or a server's `Retry-After`, goes past it. The profile's fallback
    /// chain is followed (see the module's doc); the reply's `served` names the profile that
    /// answered and its `notes` what the chain did on the way.
    pub async fn chat_until(
        &self,
        profile_name: &str,
        messages: &[Message],
        tools: &Toolset,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<ModelReply, LlmError> {
        self.profile(profile_name)?;
        let ask = Ask {
            messages,
            tools,
            deadline,
        };
        let turns = self.turns(profile_name);
        let mut notes: Vec<String> = self.skipped_note(&turns).into_iter().collect();
        let mut tried: Vec<String> = Vec::new();
        for (i, turn) in turns.iter().enumerate() {
            let next = turns.get(i + 1).map(|t| t.name.as_str());
            match self.chat_profile(&turn.name, ask).await {
                Ok(mut reply) => {
                    lock(&self.failed_at).remove(&turn.name);
                    reply.served.identity = self.identity(&turn.name).map(|id| id.key());
                    if let Some(ago) = turn.cooling.filter(|_| i == 0) {
                        // Asked first only because every other profile was cooling too.
                        notes.push(format!(
                            "model profile '{}' was asked though it failed {} s ago: no other profile of its chain was ready",
                            turn.name,
                            ago.as_secs()
                        ));
                    }
                    notes.append(&mut reply.notes);
                    reply.notes = notes;
                    return Ok(reply);
                }
                Err(e) => {
                    let kind = e.kind();
                    if kind.falls_back() {
                        lock(&self.failed_at).insert(turn.name.clone(), Instant::now());
                    }
                    match next {
                        Some(next) if kind.falls_back() => {
                            tracing::warn!(profile = %turn.name, fallback = next, error = %e, "model call failed; asking the next profile of the chain");
                            notes.push(format!(
                                "model profile '{}' failed ({}): asking '{next}'{}",
                                turn.name,
                                kind.words(),
                                self.cooldown_note()
                            ));
                            tried.push(format!("{}: {e}", turn.name));
                        }
                        _ if tried.is_empty() => return Err(e),
                        _ => {
                            return Err(LlmError::Exhausted {
                                profile: profile_name.to_string(),
                                tried,
                                last: Box::new(e),
                            });
                        }
                    }
                }
            }
        }
        // `turns` always holds the profile itself; the loop returns on its last turn.
        Err(LlmError::Exhausted {
            profile: profile_name.to_string(),
            tried,
            last: Box::new(LlmError::Setup {
                reason: "the fallback chain was empty".into(),
            }),
        })
    }

    /// The chain of `profile_name` in the order to ask it now: the profiles that are not
    /// cooling down in their chain order, then those that are (the longest cooled first), so
    /// that a call is never refused without a profile being asked.
    fn turns(&self, profile_name: &str) -> Vec<Turn> {
        let chain = self
            .chains
            .get(profile_name)
            .cloned()
            .unwrap_or_else(|| vec![profile_name.to_string()]);
        if chain.len() == 1 {
            return vec![Turn {
                name: profile_name.to_string(),
                cooling: None,
            }];
        }
        let failed = lock(&self.failed_at);
        let mut ready = Vec::new();
        let mut cooling = Vec::new();
        for name in chain {
            match failed.get(&name).map(Instant::elapsed) {
                Some(ago) if ago < self.cooldown => cooling.push(Turn {
                    name,
                    cooling: Some(ago),
                }),
                _ => ready.push(Turn {
                    name,
                    cooling: None,
                }),
            }
        }
        cooling.sort_by_key(|t| std::cmp::Reverse(t.cooling));
        ready.extend(cooling);
        ready
    }

    /// The note for the cooling profiles put after the others, when some other is asked first.
    fn skipped_note(&self, turns: &[Turn]) -> Option<String> {
        if turns.first().is_none_or(|t| t.cooling.is_some()) {
            return None;
        }
        let skipped: Vec<String> = turns
            .iter()
            .filter_map(|t| {
                t.cooling
                    .map(|ago| format!("'{}' ({} s ago)", t.name, ago.as_secs()))
            })
            .collect();
        (!skipped.is_empty()).then(|| {
            format!(
                "asked last for now, having failed recently: {} (model.fallback_cooldown_s: {} s)",
                skipped.join(", "),
                self.cooldown.as_secs()
            )
        })
    }

    fn cooldown_note(&self) -> String {
        if self.cooldown.is_zero() {
            String::new()
        } else {
            format!(
                "; it is asked after its fallbacks for the next {} s",
                self.cooldown.as_secs()
            )
        }
    }

    /// How long `profile` has left to cool down after a failure, if it is cooling.
    pub fn cooling(&self, profile: &str) -> Option<Duration> {
        let failed = lock(&self.failed_at);
        let ago = failed.get(profile)?.elapsed();
        self.cooldown.checked_sub(ago).filter(|d| !d.is_zero())
    }
}
