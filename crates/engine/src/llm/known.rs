//! What is known of each profile's model: an [`Identity`] (the model id and what the server
//! told beyond it) and the gateway's per-profile record ([`Tracker`]) of the last identity a
//! check established and the model id the replies report. A leaf: the gateway holds a
//! tracker, and the checks (`identity.rs`) fill it.

use hermes_store::util::lock;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use tokio::sync::Notify;

/// What a server told about the model behind a name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", content = "value", rename_all = "snake_case")]
pub enum Told {
    /// Ollama's digest of the model's weights.
    Digest(String),
    /// llama.cpp's loaded model file (its name and a hash of its path and chat template).
    ModelFile(String),
    /// The hash of the greedy answer to the fixed prompt.
    Greedy(String),
}

/// A profile's model as far as its server lets us know it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// The model id: as the replies report it for a greedy or reported-only identity, the
    /// profile's model name where the server names the weights themselves.
    pub model: String,
    /// `None`: only the reported id is known (`model.identity_check_s: 0`).
    pub told: Option<Told>,
}

impl Identity {
    /// The identity in one short line, the same every time for the same model: what is stored,
    /// compared and shown.
    pub fn key(&self) -> String {
        match &self.told {
            None => self.model.clone(),
            Some(Told::Digest(d)) => format!("{} · digest {}", self.model, short(d, 19)),
            Some(Told::ModelFile(f)) => format!("{} · file {f}", self.model),
            Some(Told::Greedy(h)) => format!("{} · greedy #{h}", self.model),
        }
    }

    /// Where the identity came from, in words.
    pub fn source(&self) -> &'static str {
        match &self.told {
            None => "the model id the server reports",
            Some(Told::Digest(_)) => "Ollama's digest of the weights (/api/tags)",
            Some(Told::ModelFile(_)) => "llama.cpp's loaded model file (/props)",
            Some(Told::Greedy(_)) => "the greedy answer to a fixed prompt",
        }
    }
}

fn short(s: &str, n: usize) -> &str {
    hermes_store::util::text::prefix(s, n)
}

/// The first 12 hex digits of the SHA-256 of `parts`, each followed by a NUL.
pub(super) fn hash(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0]);
    }
    hex::encode(&h.finalize()[..6])
}

/// What the gateway knows per profile.
#[derive(Debug, Default)]
struct Known {
    /// The last identity a check established.
    identity: Option<Identity>,
    /// The model id the latest reply reported.
    reported: Option<String>,
}

/// The per-profile record, shared by the gateway's clones.
#[derive(Debug, Default)]
pub(super) struct Tracker {
    known: Mutex<BTreeMap<String, Known>>,
    /// Profiles whose replies reported another model id than before: a check is wanted.
    wanted: Mutex<BTreeSet<String>>,
    notify: Notify,
}

impl Tracker {
    /// A reply of `profile` reported `model`: a different id than the last one asks for a
    /// check, and so does the first one while no check established the profile's identity
    /// (checks off, or the check at start failed): it must still be compared with the model
    /// an eval verified before this process started.
    pub(super) fn reported(&self, profile: &str, model: Option<&str>) {
        let Some(model) = model.filter(|m| !m.trim().is_empty()) else {
            return;
        };
        let (changed, first) = {
            let mut known = lock(&self.known);
            let k = known.entry(profile.to_string()).or_default();
            let changed = k.reported.as_deref().is_some_and(|m| m != model);
            let first = k.reported.is_none() && k.identity.is_none();
            k.reported = Some(model.to_string());
            (changed, first)
        };
        if changed {
            tracing::info!(profile, model, "the model server reports another model id");
        }
        if changed || first {
            lock(&self.wanted).insert(profile.to_string());
            self.notify.notify_waiters();
        }
    }

    pub(super) fn set(&self, profile: &str, identity: Identity) {
        lock(&self.known)
            .entry(profile.to_string())
            .or_default()
            .identity = Some(identity);
    }

    pub(super) fn current(&self, profile: &str) -> Option<Identity> {
        lock(&self.known).get(profile)?.identity.clone()
    }

    /// Woken when a check is wanted.
    pub(super) fn wanted_signal(&self) -> &Notify {
        &self.notify
    }

    /// The profiles whose check was asked for since the last call.
    pub(super) fn take_wanted(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.wanted))
            .into_iter()
            .collect()
    }

    pub(super) fn last_reported(&self, profile: &str) -> Option<String> {
        lock(&self.known).get(profile)?.reported.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_short_and_name_their_source() {
        let id = |told| Identity {
            model: "qwen2.5:7b".into(),
            told,
        };
        assert_eq!(id(None).key(), "qwen2.5:7b");
        assert_eq!(
            id(Some(Told::Digest("sha256:0123456789abcdef0123".into()))).key(),
            "qwen2.5:7b · digest sha256:0123456789ab"
        );
        assert_eq!(
            id(Some(Told::Greedy("0a1b2c3d4e5f".into()))).key(),
            "qwen2.5:7b · greedy #0a1b2c3d4e5f"
        );
        assert_eq!(hash(&["a"]).len(), 12);
        assert_ne!(hash(&["a", "b"]), hash(&["ab"]));
    }

    #[test]
    fn a_different_reported_id_asks_for_a_check_and_so_does_a_first_unchecked_one() {
        let taken = |t: &Tracker| std::mem::take(&mut *lock(&t.wanted));
        let t = Tracker::default();
        t.set(
            "fast",
            Identity {
                model: "a".into(),
                told: None,
            },
        );
        t.reported("fast", Some("a"));
        assert!(
            taken(&t).is_empty(),
            "a checked profile's first id is only noted"
        );
        t.reported("fast", Some("a"));
        t.reported("fast", None);
        assert!(taken(&t).is_empty());
        t.reported("fast", Some("b"));
        assert_eq!(taken(&t).into_iter().collect::<Vec<_>>(), ["fast"]);

        // Never checked (checks off): the first id is compared with the verified one too.
        let t = Tracker::default();
        t.reported("fast", Some("a"));
        assert_eq!(taken(&t).into_iter().collect::<Vec<_>>(), ["fast"]);
        t.reported("fast", Some("a"));
        assert!(taken(&t).is_empty());
    }
}
