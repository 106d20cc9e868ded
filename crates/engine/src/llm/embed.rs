//! The embeddings client: any OpenAI-compatible `POST {base_url}/embeddings` (Ollama,
//! llama.cpp's `--embedding`, vLLM, a hosted API), for recall by meaning.
//!
//! Owns: the request and the reading of its answer (one vector per input, in input order, all
//! of one dimension, every value finite), cutting input to what the server accepts, and the
//! key. Must not: retry on its own (the caller decides: a recall does not wait, the background
//! worker backs off), or put an input's text or the key in an error: errors are logged, and a
//! fact's text must not reach a log.

use hermes_config::EmbeddingSettings;
use serde::Deserialize;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How long connecting may take, whatever the request's own timeout.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest answer read: 2,048 inputs of 4,096 dimensions as JSON text fit well inside.
const MAX_ANSWER_BYTES: usize = 256 * 1024 * 1024;
/// How many times one refused input is cut by half and sent again.
const MAX_CUTS: u32 = 4;
/// The shortest input cutting goes down to.
const MIN_INPUT_CHARS: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    #[error(
        "the embedding server at {url} cannot be reached ({reason}); is it running? Check memory.embeddings.base_url. Recall is by keyword meanwhile"
    )]
    Unreachable { url: String, reason: String },
    #[error(
        "the embedding server at {url} did not answer within {secs:.1} s; recall is by keyword meanwhile (raise memory.embeddings.timeout_s if it is only slow)"
    )]
    Timeout { url: String, secs: f64 },
    #[error("the embedding server at {url} answered HTTP {status}: {hint}")]
    Status {
        url: String,
        status: u16,
        hint: String,
    },
    #[error("the embedding server at {url} sent an answer that is not embeddings: {reason}")]
    BadAnswer { url: String, reason: String },
    #[error("cannot set up the embeddings client: {0}")]
    Setup(String),
}

impl EmbedError {
    /// The server refused these inputs (HTTP 4xx other than auth, rate and model problems):
    /// the input, not the server, is what to change.
    pub(crate) fn input_refused(&self) -> bool {
        matches!(self, EmbedError::Status { status, .. }
            if (400..500).contains(status) && !matches!(status, 401 | 403 | 404 | 408 | 429))
    }
}

/// The handle memory embeds through: cheap to clone.
#[derive(Clone)]
pub struct Embedder {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: String,
    timeout: Duration,
    batch: usize,
    /// The longest input sent, in characters: the setting, lowered whenever the server refuses
    /// an input and accepts it cut, so later inputs are cut before they are sent.
    max_chars: Arc<AtomicUsize>,
}

#[derive(Deserialize)]
struct Answer {
    data: Vec<Item>,
}

#[derive(Deserialize)]
struct Item {
    #[serde(default)]
    index: Option<usize>,
    embedding: Embedding,
}

/// One input's embedding as servers send it.
#[derive(Deserialize)]
#[serde(untagged)]
enum Embedding {
    Pooled(Vec<f64>),
    /// One vector per token: llama.cpp's answer for a model without a pooling layer (a chat
    /// model served with `--embedding`). Averaged here, as a pooling layer would.
    PerToken(Vec<Vec<f64>>),
}

impl Embedding {
    /// The input's one vector; empty when there is none to make.
    fn pooled(self) -> Vec<f64> {
        match self {
            Embedding::Pooled(v) => v,
            Embedding::PerToken(tokens) => {
                let Some(dims) = tokens.first().map(Vec::len) else {
                    return Vec::new();
                };
                if tokens.iter().any(|t| t.len() != dims) {
                    return Vec::new();
                }
                let mut mean = vec![0.0; dims];
                for t in &tokens {
                    mean.iter_mut().zip(t).for_each(|(m, x)| *m += x);
                }
                let n = tokens.len() as f64;
                mean.iter_mut().for_each(|m| *m /= n);
                mean
            }
        }
    }
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder")
            .field("url", &self.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Embedder {
    pub fn new(settings: &EmbeddingSettings) -> Result<Embedder, EmbedError> {
        let url = format!(
            "{}/embeddings",
            settings.base_url.trim().trim_end_matches('/')
        );
        reqwest::Url::parse(&url).map_err(|e| {
            EmbedError::Setup(format!(
                "memory.embeddings.base_url '{}' is not a URL: {e}",
                settings.base_url
            ))
        })?;
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| EmbedError::Setup(e.to_string()))?;
        Ok(Embedder {
            client,
            url,
            model: settings.model.trim().to_string(),
            api_key: settings.api_key.clone(),
            timeout: Duration::from_secs(settings.timeout_s.max(1)),
            batch: usize::try_from(settings.batch).unwrap_or(64).max(1),
            max_chars: Arc::new(AtomicUsize::new(
                usize::try_from(settings.max_input_chars)
                    .unwrap_or(usize::MAX)
                    .max(MIN_INPUT_CHARS),
            )),
        })
    }

    /// The model name every vector is stored with.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Inputs per request.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The longest a background request may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Where requests go (for `doctor` and logs; no credential).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// One vector per input, in order, each cut to the longest input the server takes, with
    /// `timeout` for the request.
    pub async fn embed(
        &self,
        inputs: &[&str],
        timeout: Duration,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let limit = self.max_chars.load(Ordering::Relaxed);
        let cut: Vec<&str> = inputs.iter().map(|t| prefix_chars(t, limit)).collect();
        self.request(&cut, timeout).await
    }

    /// [`Embedder::embed`] for one input the server may refuse as too long: cut by half and
    /// sent again, up to [`MAX_CUTS`] times; a cut it accepts becomes the limit for all input.
    pub(crate) async fn embed_one_cutting(&self, input: &str) -> Result<Vec<f32>, EmbedError> {
        let mut limit = self
            .max_chars
            .load(Ordering::Relaxed)
            .min(input.chars().count());
        let mut cuts = 0;
        loop {
            let text = prefix_chars(input, limit);
            match self.request(&[text], self.timeout).await {
                Ok(mut v) => {
                    if cuts > 0 {
                        self.max_chars.fetch_min(limit, Ordering::Relaxed);
                        tracing::info!(
                            max_input_chars = limit,
                            "the embedding server refused longer input; input is cut to this from now on"
                        );
                    }
                    return v.pop().ok_or_else(|| self.bad("no vector for the input"));
                }
                Err(e) if e.input_refused() && cuts < MAX_CUTS && limit > MIN_INPUT_CHARS => {
                    cuts += 1;
                    limit = (limit / 2).max(MIN_INPUT_CHARS);
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn request(
        &self,
        inputs: &[&str],
        timeout: Duration,
    ) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = serde_json::json!({ "model": self.model, "input": inputs });
        let mut request = self.client.post(&self.url).timeout(timeout).json(&body);
        if !self.api_key.is_empty() {
            request = request.bearer_auth(&self.api_key);
        }
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                EmbedError::Timeout {
                    url: self.url.clone(),
                    secs: timeout.as_secs_f64(),
                }
            } else {
                // reqwest's message names the URL and the cause, never the body or a header.
                EmbedError::Unreachable {
                    url: self.url.clone(),
                    reason: super::error::redact(&e.to_string(), &self.api_key),
                }
            }
        };
        let mut response = request.send().await.map_err(failed)?;
        let status = response.status();
        if !status.is_success() {
            // The body is not quoted: a server may echo the input back, and errors are logged.
            return Err(EmbedError::Status {
                url: self.url.clone(),
                status: status.as_u16(),
                hint: status_hint(status.as_u16(), &self.model),
            });
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if bytes.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(self.bad("it is larger than 256 MiB"));
            }
            bytes.extend_from_slice(&chunk);
        }
        let answer: Answer = serde_json::from_slice(&bytes)
            .map_err(|e| self.bad(&format!("no `data` list of embeddings ({e})")))?;
        self.read(answer, inputs.len())
    }

    /// The vectors of an answer in input order, or why the answer cannot be used.
    fn read(&self, answer: Answer, wanted: usize) -> Result<Vec<Vec<f32>>, EmbedError> {
        if answer.data.len() != wanted {
            return Err(self.bad(&format!(
                "{} vectors for {wanted} inputs",
                answer.data.len()
            )));
        }
        let mut slots: Vec<Option<Vec<f32>>> = vec![None; wanted];
        for (at, item) in answer.data.into_iter().enumerate() {
            let index = item.index.unwrap_or(at);
            let Some(slot) = slots.get_mut(index) else {
                return Err(self.bad(&format!("index {index} for {wanted} inputs")));
            };
            let embedding = item.embedding.pooled();
            if embedding.is_empty() || embedding.iter().any(|x| !x.is_finite()) {
                return Err(self.bad("an empty vector, or one with a value that is not a number"));
            }
            *slot = Some(embedding.iter().map(|&x| x as f32).collect());
        }
        let vectors: Vec<Vec<f32>> = slots.into_iter().flatten().collect();
        if vectors.len() != wanted {
            return Err(self.bad("the same index twice"));
        }
        if vectors.windows(2).any(|w| w[0].len() != w[1].len()) {
            return Err(self.bad("vectors of different dimensions in one answer"));
        }
        Ok(vectors)
    }

    fn bad(&self, reason: &str) -> EmbedError {
        EmbedError::BadAnswer {
            url: self.url.clone(),
            reason: reason.to_string(),
        }
    }
}

/// What to do about an HTTP status from the embedding server.
fn status_hint(status: u16, model: &str) -> String {
    match status {
        401 | 403 => "check memory.embeddings.api_key (e.g. api_key: ${EMBED_KEY})".into(),
        404 => format!(
            "check that the server has model '{model}' (for Ollama: `ollama pull {model}`) and that memory.embeddings.base_url ends in /v1"
        ),
        429 => "the server is rate limiting; it is asked again later".into(),
        500..=599 => "the server failed; its own logs say why".into(),
        _ => "the server refused the input (too long for it, or not text it takes)".into(),
    }
}

/// The first `n` characters of `text` (all of it when shorter), cut at a char boundary.
fn prefix_chars(text: &str, n: usize) -> &str {
    match text.char_indices().nth(n) {
        Some((at, _)) => &text[..at],
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn embedder() -> Embedder {
        Embedder::new(&EmbeddingSettings {
            base_url: "http://127.0.0.1:9/v1/".into(),
            model: "m".into(),
            ..Default::default()
        })
        .unwrap()
    }

    fn item(index: Option<usize>, v: &[f64]) -> Item {
        Item {
            index,
            embedding: Embedding::Pooled(v.to_vec()),
        }
    }

    #[test]
    fn per_token_vectors_are_averaged_into_one() {
        let e = embedder();
        let answer: Answer = serde_json::from_str(
            r#"{"data": [{"index": 0, "embedding": [[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]]}]}"#,
        )
        .unwrap();
        assert_eq!(e.read(answer, 1).unwrap(), vec![vec![1.0, 1.0]]);
        let ragged: Answer =
            serde_json::from_str(r#"{"data": [{"embedding": [[1.0], [1.0, 2.0]]}]}"#).unwrap();
        assert!(matches!(
            e.read(ragged, 1),
            Err(EmbedError::BadAnswer { .. })
        ));
    }

    #[test]
    fn answers_are_put_in_input_order_and_checked() {
        let e = embedder();
        assert_eq!(e.url(), "http://127.0.0.1:9/v1/embeddings");
        let shuffled = Answer {
            data: vec![item(Some(1), &[0.0, 1.0]), item(Some(0), &[1.0, 0.0])],
        };
        assert_eq!(
            e.read(shuffled, 2).unwrap(),
            vec![vec![1.0, 0.0], vec![0.0, 1.0]]
        );
        let short = Answer {
            data: vec![item(None, &[1.0])],
        };
        assert!(matches!(
            e.read(short, 2),
            Err(EmbedError::BadAnswer { .. })
        ));
        let twice = Answer {
            data: vec![item(Some(0), &[1.0]), item(Some(0), &[1.0])],
        };
        assert!(matches!(
            e.read(twice, 2),
            Err(EmbedError::BadAnswer { .. })
        ));
        let ragged = Answer {
            data: vec![item(None, &[1.0]), item(None, &[1.0, 2.0])],
        };
        assert!(matches!(
            e.read(ragged, 2),
            Err(EmbedError::BadAnswer { .. })
        ));
        let nan = Answer {
            data: vec![item(None, &[f64::NAN])],
        };
        assert!(matches!(e.read(nan, 1), Err(EmbedError::BadAnswer { .. })));
    }

    #[test]
    fn input_is_cut_at_char_boundaries() {
        assert_eq!(prefix_chars("汽车是红色的", 2), "汽车");
        assert_eq!(prefix_chars("car", 10), "car");
        assert_eq!(prefix_chars("", 3), "");
    }

    #[test]
    fn only_an_input_problem_counts_as_refused_input() {
        let status = |status| EmbedError::Status {
            url: String::new(),
            status,
            hint: String::new(),
        };
        assert!(status(400).input_refused());
        assert!(status(413).input_refused());
        assert!(!status(401).input_refused());
        assert!(!status(404).input_refused());
        assert!(!status(429).input_refused());
        assert!(!status(500).input_refused());
    }
}
