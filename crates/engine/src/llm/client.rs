//! The gateway handle: one reqwest client shared by every profile, calling
//! `POST {base_url}/chat/completions` on any OpenAI-compatible server.
//!
//! Owns: building the request body from our [`Message`]s and [`ToolSpec`]s, per-profile
//! authorization and timeout, retries with backoff (honouring `Retry-After`), reading the reply
//! through [`super::parse`], token usage, and the count of parse failures.
//! Must not: log, format or return an API key — it is only ever handed to reqwest as a
//! sensitive header; server text is redacted before it is quoted.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::error::{ProbeError, body_detail, connect_hint, redact, settings_place};
#[cfg(test)]
use super::failure::RETRY_AFTER_CEILING;
use super::failure::{ERROR_BODY_CHARS, Failure, parse_retry_after};
use super::wire;
use super::{LlmError, Message, ModelReply, Served, ToolSpec, Toolset, Usage, parse};
use hermes_config::{ConfigSource, ModelSettings, Profile, ToolMode};
use hermes_store::util::lock;
use hermes_store::util::{Backoff, RetryPolicy};

/// Cap for the TCP connect phase, separate from the profile's whole-request timeout so that an
/// unreachable remote host fails fast even when a slow local model is given minutes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// The whole of `doctor`'s `GET /models`: a server that takes longer is as good as away.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The gateway's retries by default: three, from half a second, with jitter so that workers
/// that failed together do not all come back at the same instant.
pub const DEFAULT_RETRY: RetryPolicy = RetryPolicy {
    max_retries: 3,
    backoff: Backoff::new(Duration::from_millis(500), Duration::from_secs(30)).with_jitter(),
};

/// What one call asks, whichever profile of its chain answers it.
#[derive(Clone, Copy)]
pub(super) struct Ask<'a> {
    pub(super) messages: &'a [Message],
    /// Offered to the model; none: no `tools` field is sent.
    pub(super) tools: &'a Toolset,
    /// No retry wait goes past it (a task's time limit).
    pub(super) deadline: Option<tokio::time::Instant>,
}

/// The model gateway. Cheap to clone (the reqwest client and profiles are shared); one per
/// process is enough.
#[derive(Clone)]
pub struct Gateway {
    /// One connection pool for every profile and task.
    pub(super) client: reqwest::Client,
    /// The configured profiles, by name; holds the API keys, which never leave this struct
    /// except as a request header.
    profiles: Arc<BTreeMap<String, Profile>>,
    retry: RetryPolicy,
    /// A reply body larger than this is refused while it streams in.
    max_response_bytes: u64,
    /// A 429 asking to wait longer than this fails the call at once.
    max_retry_after: Duration,
    /// Replies whose output looked like a tool call but could not be read.
    parse_failures: Arc<AtomicU64>,
    /// `auto` profiles whose server showed it ignores native tools: text mode from then on.
    switched: Arc<Mutex<BTreeSet<String>>>,
    /// Where the profiles are set ("in /path/settings.yaml"), for the hints of errors.
    pub(super) settings_place: Arc<str>,
    /// Each profile's fallback chain, itself first (`model.profiles.NAME.fallback`).
    pub(super) chains: Arc<BTreeMap<String, Vec<String>>>,
    /// How long a profile that failed and fell back is skipped (`model.fallback_cooldown_s`).
    pub(super) cooldown: Duration,
    /// When each profile last failed in a way that moved its chain on.
    pub(super) failed_at: Arc<Mutex<BTreeMap<String, Instant>>>,
    /// What each profile's server was last seen to serve.
    pub(super) identities: Arc<super::known::Tracker>,
    /// Whether identity checks ask the server (`model.identity_check_s` above 0).
    pub(super) identity_checks: bool,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Safe<'a>(&'a Profile);
        impl std::fmt::Debug for Safe<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("Profile")
                    .field("base_url", &self.0.base_url)
                    .field("model", &self.0.model)
                    .field("api_key_set", &!self.0.api_key.is_empty())
                    .field("timeout_s", &self.0.timeout_s)
                    .finish()
            }
        }
        let profiles: BTreeMap<&str, Safe<'_>> = self
            .profiles
            .iter()
            .map(|(k, p)| (k.as_str(), Safe(p)))
            .collect();
        f.debug_struct("Gateway")
            .field("profiles", &profiles)
            .field("retry", &self.retry)
            .finish()
    }
}

impl Gateway {
    /// Builds the gateway for the configured profiles. Fails if a profile's `base_url` is not a
    /// usable URL or the HTTP client cannot be built.
    pub fn new(settings: &ModelSettings) -> Result<Gateway, LlmError> {
        for (name, profile) in &settings.profiles {
            let url = chat_url(&profile.base_url);
            match reqwest::Url::parse(&url) {
                Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                Ok(_) | Err(_) => {
                    return Err(LlmError::InvalidProfile {
                        profile: name.clone(),
                        reason: format!(
                            "base_url '{}' is not an http(s) URL (expected something like http://127.0.0.1:11434/v1)",
                            profile.base_url
                        ),
                    });
                }
            }
        }
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .map_err(|e| LlmError::Setup {
                reason: e.to_string(),
            })?;
        Ok(Gateway {
            client,
            profiles: Arc::new(settings.profiles.clone()),
            retry: DEFAULT_RETRY,
            max_response_bytes: settings.max_response_bytes.max(1),
            max_retry_after: Duration::from_secs(settings.max_retry_after_s),
            parse_failures: Arc::new(AtomicU64::new(0)),
            switched: Arc::default(),
            settings_place: settings_place(&ConfigSource::Defaults { looked_in: vec![] }).into(),
            chains: Arc::new(
                settings
                    .profiles
                    .keys()
                    .map(|name| (name.clone(), settings.fallback_chain(name)))
                    .collect(),
            ),
            cooldown: Duration::from_secs(settings.fallback_cooldown_s),
            failed_at: Arc::default(),
            identities: Arc::default(),
            identity_checks: settings.identity_check_s > 0,
        })
    }

    pub fn with_retry(mut self, policy: RetryPolicy) -> Gateway {
        self.retry = policy;
        self
    }

    /// Name the settings file in use (or where to create one) in the errors' hints: a person
    /// told to set `model.profiles.fast.base_url` should not have to find out where.
    pub fn with_settings_source(mut self, source: &ConfigSource) -> Gateway {
        self.settings_place = settings_place(source).into();
        self
    }

    pub fn has_profile(&self, name: &str) -> bool {
        self.profiles.contains_key(name)
    }

    /// How many replies so far carried output that looked like a tool call but could not be read.
    pub fn parse_failures(&self) -> u64 {
        self.parse_failures.load(Ordering::Relaxed)
    }

    /// `doctor`'s check of a profile: can the server be reached, and does it list the model?
    /// Uses `GET {base_url}/models`, which OpenAI-compatible servers answer without a model call.
    pub async fn probe(&self, profile_name: &str) -> Result<String, ProbeError> {
        let profile = self
            .profiles
            .get(profile_name)
            .ok_or_else(|| ProbeError::UnknownProfile(profile_name.to_string()))?;
        let url = format!("{}/models", profile.base_url.trim_end_matches('/'));
        let mut req = self.client.get(&url).timeout(PROBE_TIMEOUT);
        if !profile.api_key.is_empty() {
            req = req.bearer_auth(&profile.api_key);
        }
        let resp = req.send().await.map_err(|e| ProbeError::Unreachable {
            base_url: profile.base_url.clone(),
            reason: redact(&e.to_string(), &profile.api_key),
            hint: connect_hint(profile_name, &profile.base_url, &self.settings_place),
        })?;
        let status = resp.status();
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            return Err(ProbeError::KeyRefused {
                base_url: profile.base_url.clone(),
                status,
                profile: profile_name.to_string(),
                place: self.settings_place.to_string(),
            });
        }
        if !status.is_success() {
            return Ok(format!(
                "{} answers (GET /models gave {status}); model {} not verified",
                profile.base_url, profile.model
            ));
        }
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        let ids: Vec<&str> = body["data"]
            .as_array()
            .map(|a| a.iter().filter_map(|m| m["id"].as_str()).collect())
            .unwrap_or_default();
        if ids.is_empty() || ids.contains(&profile.model.as_str()) {
            Ok(format!(
                "{} reachable, model {}",
                profile.base_url, profile.model
            ))
        } else {
            Err(ProbeError::ModelMissing {
                base_url: profile.base_url.clone(),
                model: profile.model.clone(),
                listed: ids.join(", "),
                profile: profile_name.to_string(),
                place: self.settings_place.to_string(),
            })
        }
    }

    /// One model turn. `tools` are offered to the model; when empty no `tools` field is sent
    /// and calls written as text are not looked for (the model was offered nothing to call).
    /// A caller that offers the same tools again and again passes a [`Toolset`] to
    /// [`Gateway::chat_until`] instead, so they are serialised once.
    pub async fn chat(
        &self,
        profile_name: &str,
        messages: &[Message],
        tools: &[ToolSpec],
    ) -> Result<ModelReply, LlmError> {
        let tools = Toolset::new(tools.to_vec());
        self.chat_until(profile_name, messages, &tools, None).await
    }

    /// One profile's call, without its fallbacks. With `tool_mode: auto`, a server that shows
    /// it ignores tools (a 400 naming them, a prompt count that cannot include them, or a blank
    /// reply) switches the profile to text mode for the rest of the process, once, and the call
    /// is made again that way; the reply's `notes` say so.
    pub(super) async fn chat_profile(
        &self,
        profile_name: &str,
        ask: Ask<'_>,
    ) -> Result<ModelReply, LlmError> {
        let profile = self.profile(profile_name)?;
        let tools = ask.tools;
        let mut notes = Vec::new();
        // The tokens of replies given up on as evidence: spent all the same, so counted.
        let mut spent = Usage::default();
        loop {
            let mode = self.tool_mode(profile_name, profile);
            let result = self.exchange(profile_name, profile, ask, mode).await;
            let may_switch = profile.tool_mode == ToolMode::Auto
                && mode == ToolMode::Native
                && !tools.is_empty();
            let evidence = match &result {
                Ok(reply) if may_switch => wire::tools_ignored(&reply.usage, tools)
                    .or_else(|| wire::tools_blanked(reply, tools)),
                Err(e) if may_switch => wire::tools_refused(e),
                _ => None,
            };
            if let Some(why) = evidence {
                if let Ok(reply) = &result {
                    spent = spent.plus(reply.usage);
                }
                notes.push(self.switch_to_text(profile_name, profile, &why));
                continue;
            }
            return result.map(|mut reply| {
                notes.append(&mut reply.notes);
                reply.notes = notes;
                reply.usage = reply.usage.plus(spent);
                reply
            });
        }
    }

    pub(super) fn profile(&self, name: &str) -> Result<&Profile, LlmError> {
        self.profiles
            .get(name)
            .ok_or_else(|| LlmError::UnknownProfile {
                profile: name.to_string(),
                known: self.profiles.keys().cloned().collect::<Vec<_>>().join(", "),
            })
    }

    /// The mode a profile's calls use now: its setting, or for `auto` native until switched.
    pub fn tool_mode(&self, profile_name: &str, profile: &Profile) -> ToolMode {
        match profile.tool_mode {
            ToolMode::Auto if lock(&self.switched).contains(profile_name) => ToolMode::Text,
            ToolMode::Auto => ToolMode::Native,
            fixed => fixed,
        }
    }

    /// Use text mode for `profile_name` from now on; the warning (logged once) and the note.
    fn switch_to_text(&self, profile_name: &str, profile: &Profile, why: &str) -> String {
        lock(&self.switched).insert(profile_name.to_string());
        let note = format!(
            "model profile '{profile_name}' switched to text tool mode for this process: {why}; \
             set model.profiles.{profile_name}.tool_mode: text to start that way"
        );
        tracing::warn!(profile = profile_name, model = %profile.model, %why, "the model server ignores native tools; using text tool mode from now on");
        note
    }

    /// One request in `mode`, retried per the policy; the reply read back.
    pub(super) async fn exchange(
        &self,
        profile_name: &str,
        profile: &Profile,
        ask: Ask<'_>,
        mode: ToolMode,
    ) -> Result<ModelReply, LlmError> {
        let Ask {
            messages,
            tools,
            deadline,
        } = ask;
        let url = chat_url(&profile.base_url);
        let body = match mode {
            ToolMode::Text if !tools.is_empty() => {
                let none = Toolset::default();
                wire::request_body(profile, &wire::text_mode(messages, tools), &none)
            }
            _ => wire::request_body(profile, messages, tools),
        }
        .map_err(|e| LlmError::Encode {
            profile: profile_name.to_string(),
            reason: e.to_string(),
        })?;
        let mut attempts = 0u32;
        // Why each earlier attempt failed, for the task's trace.
        let mut retried: Vec<String> = Vec::new();
        loop {
            attempts += 1;
            let started = Instant::now();
            let outcome = self.send_once(profile, &url, &body).await;
            let ms = started.elapsed().as_millis() as u64;
            let status = match &outcome {
                Ok(_) => "200".to_string(),
                Err(f) => f.label(),
            };
            tracing::debug!(profile = profile_name, model = %profile.model, %status, ms, attempt = attempts, "model call");
            let failure = match outcome {
                Ok(reply) => {
                    let text_fallback = !tools.is_empty();
                    let read = self.read_reply(
                        profile_name,
                        profile,
                        &body,
                        reply,
                        text_fallback,
                        attempts,
                    );
                    return read.map(|mut reply| {
                        if !retried.is_empty() {
                            reply.notes.push(format!(
                                "the call to profile '{profile_name}' was tried {attempts} times: {}",
                                retried.join("; ")
                            ));
                        }
                        reply
                    });
                }
                Err(f) => f,
            };
            let delay = self.retry_delay(profile_name, profile, &failure, attempts, deadline)?;
            let error = failure.into_error(profile_name, profile, attempts, &self.settings_place);
            let Some(delay) = delay.filter(|_| error.is_retryable()) else {
                return Err(error);
            };
            tracing::warn!(
                profile = profile_name,
                attempt = attempts,
                delay_ms = delay.as_millis() as u64,
                error = %error.retry_cause(),
                "model call failed; retrying"
            );
            retried.push(format!(
                "attempt {attempts} failed ({}), retried after {} ms",
                error.retry_cause(),
                delay.as_millis()
            ));
            tokio::time::sleep(delay).await;
        }
    }

    /// How long to wait before trying again: `None` when no retry is left or the deadline
    /// would pass first; an error at once when the server asks to wait longer than we may.
    fn retry_delay(
        &self,
        profile_name: &str,
        profile: &Profile,
        failure: &Failure,
        attempts: u32,
        deadline: Option<tokio::time::Instant>,
    ) -> Result<Option<Duration>, LlmError> {
        let left = deadline.map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
        if let Some(wait) = failure.retry_after() {
            let too_long = wait > self.max_retry_after;
            if too_long || left.is_some_and(|left| wait >= left) {
                let until = chrono::Utc::now()
                    + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::days(1));
                return Err(LlmError::RateLimited {
                    profile: profile_name.to_string(),
                    base_url: profile.base_url.clone(),
                    until: until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    why: if too_long {
                        format!(
                            "longer than model.max_retry_after_s ({} s)",
                            self.max_retry_after.as_secs()
                        )
                    } else {
                        "past the task's time limit".to_string()
                    },
                    setting: if too_long {
                        "model.max_retry_after_s"
                    } else {
                        "agent.task_timeout_s"
                    },
                });
            }
        }
        if attempts > self.retry.max_retries {
            return Ok(None);
        }
        // The server knows best how long it needs; otherwise back off.
        let delay = failure
            .retry_after()
            .unwrap_or_else(|| self.retry.delay(attempts - 1));
        Ok(Some(delay).filter(|d| left.is_none_or(|left| *d < left)))
    }

    pub(super) async fn send_once(
        &self,
        profile: &Profile,
        url: &str,
        body: &str,
    ) -> Result<Value, Failure> {
        let mut request = self
            .client
            .post(url)
            .timeout(Duration::from_secs(profile.timeout_s.max(1)))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string());
        if !profile.api_key.is_empty() {
            // bearer_auth marks the header sensitive, so reqwest and hyper never print it.
            request = request.bearer_auth(&profile.api_key);
        }
        let response = request.send().await.map_err(Failure::from_reqwest)?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(parse_retry_after);
            let body = self.read_capped(response).await.unwrap_or_default();
            return Err(Failure::Status {
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body).into_owned(),
                retry_after,
            });
        }
        let bytes = self.read_capped(response).await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            Failure::BadResponse(format!(
                "the body is not JSON: {e}; it starts with: {}",
                body_detail(&String::from_utf8_lossy(&bytes), 120)
            ))
        })
    }

    /// The body, read as it arrives and refused the moment it passes the cap: a broken or
    /// hostile server cannot grow the daemon's memory without bound.
    pub(super) async fn read_capped(
        &self,
        mut response: reqwest::Response,
    ) -> Result<Vec<u8>, Failure> {
        let cap = self.max_response_bytes;
        if response.content_length().is_some_and(|n| n > cap) {
            return Err(Failure::TooLarge(cap));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(Failure::from_reqwest)? {
            if (body.len() + chunk.len()) as u64 > cap {
                return Err(Failure::TooLarge(cap));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn read_reply(
        &self,
        profile_name: &str,
        profile: &Profile,
        request_body: &str,
        response: Value,
        text_fallback: bool,
        attempts: u32,
    ) -> Result<ModelReply, LlmError> {
        let bad = |reason: String| LlmError::BadResponse {
            profile: profile_name.to_string(),
            base_url: profile.base_url.clone(),
            reason: redact(&reason, &profile.api_key),
        };
        let Some(message) = response.pointer("/choices/0/message") else {
            let reason = match response.get("error") {
                Some(e) => format!(
                    "it carries an error: {}",
                    body_detail(&json!({"error": e}).to_string(), ERROR_BODY_CHARS)
                ),
                None => "no choices[0].message".to_string(),
            };
            return Err(bad(reason));
        };
        // A reply cut off by the provider's filter: what is there is not the model's answer, and
        // the same content would be cut again.
        if response
            .pointer("/choices/0/finish_reason")
            .and_then(Value::as_str)
            == Some("content_filter")
        {
            return Err(LlmError::ContentRefused {
                profile: profile_name.to_string(),
                base_url: profile.base_url.clone(),
                model: profile.model.clone(),
                how: "its reply was stopped with finish_reason content_filter".to_string(),
                attempts,
            });
        }
        let parsed = parse::parse_message(message, text_fallback);
        let native_calls = message
            .get("tool_calls")
            .and_then(Value::as_array)
            .is_some_and(|calls| !calls.is_empty());
        if !parsed.warnings.is_empty() {
            self.parse_failures.fetch_add(1, Ordering::Relaxed);
            for warning in &parsed.warnings {
                tracing::warn!(profile = profile_name, model = %profile.model, %warning, "model output looked like a tool call but could not be read");
            }
        }
        let usage = Usage::of_reply(&response, request_body, &parsed.content, &parsed.tool_calls);
        let served = served_by(&response, profile_name, profile);
        self.identities
            .reported(profile_name, served.model.as_deref());
        Ok(ModelReply {
            content: parsed.content,
            tool_calls: parsed.tool_calls,
            usage,
            parse_warnings: parsed.warnings,
            attempts,
            notes: Vec::new(),
            native_calls,
            served,
        })
    }
}

/// Who answered: the profile asked, and the model and fingerprint the reply names (redacted,
/// as any server text).
fn served_by(response: &Value, profile_name: &str, profile: &Profile) -> Served {
    let text = |field: &str| {
        response
            .get(field)
            .and_then(Value::as_str)
            .filter(|v| !v.trim().is_empty())
            .map(|v| redact(v, &profile.api_key))
    };
    Served {
        profile: profile_name.to_string(),
        requested: profile.model.clone(),
        model: text("model"),
        fingerprint: text("system_fingerprint"),
        identity: None,
    }
}

/// `{base_url}/chat/completions`, whether or not the configured URL ends in a slash.
pub(crate) fn chat_url(base_url: &str) -> String {
    format!("{}/chat/completions", base_url.trim().trim_end_matches('/'))
}

#[cfg(test)]
mod tests;
