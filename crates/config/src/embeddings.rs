//! `memory.embeddings`: the server recall by meaning gets its vectors from (see
//! `memory/longterm/meaning.rs`).

use serde::{Deserialize, Serialize};

/// `memory.embeddings`: where fact vectors come from. Configured like a model profile.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmbeddingSettings {
    /// The server's OpenAI-compatible base, e.g. `http://127.0.0.1:11434/v1` (Ollama).
    pub base_url: String,
    /// The embedding model's name; every vector is stored with it (and its dimensions), so
    /// another model here re-embeds the facts in the background.
    pub model: String,
    /// Empty: no Authorization header.
    pub api_key: String,
    /// Facts sent in one request.
    pub batch: u32,
    /// The longest a background request may take; a recall's own request waits far less.
    pub timeout_s: u64,
    /// Input longer than this (characters) is cut before it is sent; cut further, by half,
    /// when the server refuses it.
    pub max_input_chars: u32,
    /// A vector match below this cosine similarity is not counted as a match: without it,
    /// recall by meaning always returns the nearest facts, however unrelated.
    pub min_similarity: f32,
}

impl Default for EmbeddingSettings {
    fn default() -> Self {
        EmbeddingSettings {
            base_url: String::new(),
            model: String::new(),
            api_key: String::new(),
            batch: 64,
            timeout_s: 30,
            max_input_chars: 2000,
            min_similarity: 0.3,
        }
    }
}
