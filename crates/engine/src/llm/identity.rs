//! Which model a profile's server really serves. Many servers echo the requested model name
//! whatever they load (llama-cpp-python does, and sends no `system_fingerprint`), so a
//! profile's identity also takes what the server tells beyond the name — Ollama's digest of
//! the weights (`/api/tags`), llama.cpp's loaded file (`/props`) — and where it tells nothing,
//! what the model *does*: the hash of its greedy answer (temperature 0, a fixed seed) to a fixed
//! short prompt, asked twice before a new answer counts (a server that answers it differently
//! each time is not called a new model).
//!
//! Owns: the checks, which fill the gateway's per-profile record (`known.rs`, with
//! [`Identity`]); a reply reporting another id than before asks the checker (the daemon's
//! watch) for a check at once, through [`Gateway::identity_wanted`].
//! Must not: decide what a change means (the eval module records and acts on it), or check on
//! its own schedule — callers say when.

use super::known::{Identity, Told, hash};
use super::{Gateway, LlmError};
use serde_json::{Value, json};
use std::time::Duration;

/// A check's requests to the server's own endpoints: they answer at once or not at all.
const ENDPOINT_TIMEOUT: Duration = Duration::from_secs(5);
/// The fixed prompt of the behavioural fingerprint: short, and answered the same way every
/// time by a given model at temperature 0 with a fixed seed.
const GREEDY_PROMPT: &str = "Continue this list with the next five words: red, orange, yellow,";
const GREEDY_SEED: u64 = 20_241_130;
const GREEDY_MAX_TOKENS: u32 = 16;

impl Gateway {
    /// The identity the last check of `profile` established, if any.
    pub fn identity(&self, profile: &str) -> Option<Identity> {
        self.identities.current(profile)
    }

    /// Woken when a reply reports another model id than the one before; then
    /// [`Gateway::take_wanted`] names the profiles to check.
    pub fn identity_wanted(&self) -> &tokio::sync::Notify {
        self.identities.wanted_signal()
    }

    /// The profiles whose check was asked for since the last call.
    pub fn take_wanted(&self) -> Vec<String> {
        self.identities.take_wanted()
    }

    /// Ask `profile`'s server what it serves, and remember the answer: Ollama's digest, else
    /// llama.cpp's model file, else the greedy answer. With `model.identity_check_s: 0` nothing
    /// is asked: the identity is the model id the replies report (`None` before any reply).
    pub async fn check_identity(&self, profile_name: &str) -> Result<Option<Identity>, LlmError> {
        let profile = self.profile(profile_name)?;
        let identity = if self.identity_checks {
            let told = match self.told_by_server(profile).await {
                Some(told) => (profile.model.clone(), told),
                None => self.greedy(profile_name).await?,
            };
            Some(Identity {
                model: told.0,
                told: Some(told.1),
            })
        } else {
            self.identities
                .last_reported(profile_name)
                .map(|model| Identity { model, told: None })
        };
        if let Some(id) = &identity {
            tracing::debug!(profile = profile_name, identity = %id.key(), "model identity checked");
            self.identities.set(profile_name, id.clone());
        }
        Ok(identity)
    }

    /// The model ids the profile's server lists at `GET {base_url}/models`.
    pub async fn served_models(&self, profile_name: &str) -> Result<Vec<String>, LlmError> {
        let profile = self.profile(profile_name)?;
        let url = format!("{}/models", profile.base_url.trim().trim_end_matches('/'));
        let body = self
            .get_json(profile_name, profile, &url)
            .await?
            .unwrap_or(Value::Null);
        Ok(body["data"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|m| m["id"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// What the server's own endpoints say about the weights; `None` when it has no such
    /// endpoint (or does not answer it).
    async fn told_by_server(&self, profile: &hermes_config::Profile) -> Option<Told> {
        let base = profile.base_url.trim().trim_end_matches('/');
        let root = base.strip_suffix("/v1")?;
        let tags = self.get_plain(profile, &format!("{root}/api/tags")).await;
        if let Some(digest) = tags.as_ref().and_then(|t| ollama_digest(t, &profile.model)) {
            return Some(Told::Digest(digest));
        }
        let props = self.get_plain(profile, &format!("{root}/props")).await?;
        llamacpp_file(&props)
    }

    /// The greedy answer's hash; a new answer is asked twice before it counts.
    async fn greedy(&self, profile_name: &str) -> Result<(String, Told), LlmError> {
        let first = self.greedy_once(profile_name).await?;
        let before = self.identities.current(profile_name);
        let known = matches!(&before, Some(Identity { told: Some(Told::Greedy(h)), model }) if *h == first.1 && *model == first.0);
        if known || before.is_none() {
            return Ok((first.0, Told::Greedy(first.1)));
        }
        let second = self.greedy_once(profile_name).await?;
        if second == first {
            return Ok((first.0, Told::Greedy(first.1)));
        }
        // The same prompt answered two ways: the server does not answer greedily (batching,
        // a sampler that ignores the seed). Keep what was known rather than call it a change.
        tracing::warn!(
            profile = profile_name,
            "the model server answered the same greedy prompt two ways; its identity is left as it was"
        );
        match before {
            Some(Identity {
                model,
                told: Some(told),
            }) => Ok((model, told)),
            _ => Ok((first.0, Told::Greedy(first.1))),
        }
    }

    /// One greedy answer: the model id the reply reports (or the profile's) and the hash.
    async fn greedy_once(&self, profile_name: &str) -> Result<(String, String), LlmError> {
        let profile = self.profile(profile_name)?;
        let body = json!({
            "model": profile.model,
            "messages": [{"role": "user", "content": GREEDY_PROMPT}],
            "temperature": 0,
            "top_p": 1,
            "seed": GREEDY_SEED,
            "max_tokens": GREEDY_MAX_TOKENS,
            "stream": false,
        })
        .to_string();
        let url = super::client::chat_url(&profile.base_url);
        let reply = self
            .send_once(profile, &url, &body)
            .await
            .map_err(|f| f.into_error(profile_name, profile, 1, &self.settings_place))?;
        let model = reply["model"]
            .as_str()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or(&profile.model)
            .to_string();
        self.identities.reported(profile_name, Some(&model));
        let answer = reply
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .unwrap_or("");
        Ok((model, hash(&[answer.trim()])))
    }

    /// A GET that must answer JSON; `None` for a 404 (no such endpoint on this server).
    async fn get_json(
        &self,
        profile_name: &str,
        profile: &hermes_config::Profile,
        url: &str,
    ) -> Result<Option<Value>, LlmError> {
        let mut req = self.client.get(url).timeout(ENDPOINT_TIMEOUT);
        if !profile.api_key.is_empty() {
            req = req.bearer_auth(&profile.api_key);
        }
        let place = &self.settings_place;
        let into = |f: super::failure::Failure| f.into_error(profile_name, profile, 1, place);
        let resp = req
            .send()
            .await
            .map_err(|e| into(super::failure::Failure::from_reqwest(e)))?;
        let status = resp.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(into(super::failure::Failure::Status {
                status: status.as_u16(),
                body,
                retry_after: None,
            }));
        }
        let bytes = self.read_capped(resp).await.map_err(into)?;
        Ok(serde_json::from_slice(&bytes).ok())
    }

    /// [`Gateway::get_json`] for a probe whose failure only means "not this kind of server".
    async fn get_plain(&self, profile: &hermes_config::Profile, url: &str) -> Option<Value> {
        self.get_json("", profile, url).await.ok().flatten()
    }
}

/// The digest Ollama lists for `model` (a name without a tag means `:latest`).
fn ollama_digest(tags: &Value, model: &str) -> Option<String> {
    let wanted = |name: &str| name == model || name.strip_suffix(":latest") == Some(model);
    tags["models"].as_array()?.iter().find(|m| {
        ["name", "model"]
            .iter()
            .any(|k| m[k].as_str().is_some_and(wanted))
    })?["digest"]
        .as_str()
        .filter(|d| !d.is_empty())
        .map(str::to_string)
}

/// llama.cpp's loaded file: its name, and a hash of its path and chat template (a template
/// change alters behaviour as much as new weights).
fn llamacpp_file(props: &Value) -> Option<Told> {
    let path = props["model_path"].as_str().filter(|p| !p.is_empty())?;
    let name = path.rsplit(['/', '\\']).next().unwrap_or(path);
    let template = props["chat_template"].as_str().unwrap_or("");
    Some(Told::ModelFile(format!(
        "{name} #{}",
        &hash(&[path, template])[..8]
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ollama_and_llamacpp_answers_are_read() {
        let tags = json!({"models": [
            {"name": "llama3:latest", "digest": "sha256:aaa"},
            {"name": "qwen2.5:7b", "model": "qwen2.5:7b", "digest": "sha256:bbb"}]});
        assert_eq!(
            ollama_digest(&tags, "qwen2.5:7b").as_deref(),
            Some("sha256:bbb")
        );
        assert_eq!(
            ollama_digest(&tags, "llama3").as_deref(),
            Some("sha256:aaa")
        );
        assert_eq!(ollama_digest(&tags, "mistral"), None);
        let props = json!({"model_path": "/models/SmolLM2.gguf", "chat_template": "{{x}}"});
        let Some(Told::ModelFile(f)) = llamacpp_file(&props) else {
            panic!("no file read from {props}");
        };
        assert!(f.starts_with("SmolLM2.gguf #"), "{f}");
        assert_eq!(llamacpp_file(&json!({"n_ctx": 1})), None);
    }
}
