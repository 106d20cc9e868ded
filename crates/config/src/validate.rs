//! Checking settings that parse but cannot work: a zero where a count must be positive, a
//! channel without an address, a schedule zone that does not exist. The first problem found is
//! reported with its dotted key, and `config check` prints it at its line.
//!
//! Owns: every semantic rule of settings.yaml. Must not: read files or the environment.

use super::inbox::ImapSecurity;
use super::settings::*;

/// A semantic error: the dotted key and what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub key: String,
    pub message: String,
}

pub(super) fn bad(key: impl Into<String>, message: impl Into<String>) -> Result<(), Violation> {
    Err(Violation {
        key: key.into(),
        message: message.into(),
    })
}

pub(super) fn positive(key: &str, v: u64) -> Result<(), Violation> {
    if v == 0 {
        return bad(key, "must be greater than 0");
    }
    Ok(())
}

/// `url` must be an http(s) URL; `example`, when given, shows one in the message.
fn http_url(key: &str, url: &str, example: Option<&str>) -> Result<(), Violation> {
    if url.starts_with("http://") || url.starts_with("https://") {
        return Ok(());
    }
    let example = example.map_or(String::new(), |e| format!(" (example: {e})"));
    bad(key, format!("'{url}' is not an http(s) URL{example}"))
}

/// What a model server's URL looks like, in messages.
const MODEL_URL_EXAMPLE: Option<&str> = Some("http://127.0.0.1:11434/v1");

/// The shortest period between two identity checks of a profile (other than 0, never).
const MIN_IDENTITY_CHECK_S: u64 = 60;

/// The first cycle the fallbacks of `path`'s last profile lead into, as the names along it
/// (the first and last the same), if any.
fn cycle_from<'a>(
    m: &'a ModelSettings,
    name: &str,
    path: &mut Vec<&'a str>,
) -> Option<Vec<String>> {
    let profile = m.profiles.get(name)?;
    for next in &profile.fallback {
        if let Some(at) = path.iter().position(|p| p == next) {
            let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(next.clone());
            return Some(cycle);
        }
        path.push(next);
        let found = cycle_from(m, next, path);
        path.pop();
        if found.is_some() {
            return found;
        }
    }
    None
}

/// The most inputs one embeddings request may carry (OpenAI's own limit is 2,048).
const MAX_EMBED_BATCH: u32 = 2048;

/// Durations beyond a year are typos, and would overflow time arithmetic.
const MAX_SECONDS: u64 = 366 * 24 * 3600;

fn seconds(key: &str, v: u64, allow_zero: bool) -> Result<(), Violation> {
    if !allow_zero {
        positive(key, v)?;
    }
    if v > MAX_SECONDS {
        return bad(
            key,
            format!("{v} s is more than a year; use at most {MAX_SECONDS}"),
        );
    }
    Ok(())
}

impl Settings {
    /// Values that parse but cannot work. The first problem found is reported.
    pub fn validate(&self) -> Result<(), Violation> {
        self.validate_model()?;
        self.validate_limits()?;
        self.validate_scheduler()?;
        self.validate_notify()?;
        self.validate_server()?;
        self.validate_storage()?;
        self.validate_agents()?;
        self.validate_mcp()?;
        self.validate_inbox()?;
        self.validate_matrix()?;
        self.validate_telegram()
    }

    fn validate_model(&self) -> Result<(), Violation> {
        let m = &self.model;
        if !m.profiles.contains_key(&m.default_profile) {
            let known: Vec<&str> = m.profiles.keys().map(String::as_str).collect();
            return bad(
                "model.default_profile",
                format!(
                    "unknown profile '{}'; defined profiles: {}",
                    m.default_profile,
                    known.join(", ")
                ),
            );
        }
        for (name, p) in &m.profiles {
            let k = |f: &str| format!("model.profiles.{name}.{f}");
            http_url(&k("base_url"), &p.base_url, MODEL_URL_EXAMPLE)?;
            if p.model.trim().is_empty() {
                return bad(k("model"), "must name a model");
            }
            if !(0.0..=2.0).contains(&p.temperature) {
                return bad(k("temperature"), "must be between 0 and 2");
            }
            positive(&k("max_tokens"), p.max_tokens.into())?;
            seconds(&k("timeout_s"), p.timeout_s, false)?;
        }
        positive("model.max_response_bytes", m.max_response_bytes)?;
        seconds("model.max_retry_after_s", m.max_retry_after_s, true)?;
        seconds("model.fallback_cooldown_s", m.fallback_cooldown_s, true)?;
        seconds("model.identity_check_s", m.identity_check_s, true)?;
        if (1..MIN_IDENTITY_CHECK_S).contains(&m.identity_check_s) {
            return bad(
                "model.identity_check_s",
                format!(
                    "a check may cost a model call: use at least {MIN_IDENTITY_CHECK_S} s, or 0 to compare only the model ids replies report"
                ),
            );
        }
        self.validate_fallbacks()?;
        for channel in &m.on_change_notify {
            self.known_channel("model.on_change_notify", channel)?;
        }
        Ok(())
    }

    /// Every fallback names another defined profile, once, and no chain comes back to where
    /// it started (a call would go round it for ever).
    fn validate_fallbacks(&self) -> Result<(), Violation> {
        let m = &self.model;
        for (name, p) in &m.profiles {
            let key = format!("model.profiles.{name}.fallback");
            for (i, next) in p.fallback.iter().enumerate() {
                if next == name {
                    return bad(key, format!("'{name}' cannot fall back to itself"));
                }
                if !m.profiles.contains_key(next) {
                    let known: Vec<&str> = m.profiles.keys().map(String::as_str).collect();
                    return bad(
                        key,
                        format!(
                            "unknown profile '{next}'; defined profiles: {}",
                            known.join(", ")
                        ),
                    );
                }
                if p.fallback[..i].contains(next) {
                    return bad(key, format!("'{next}' is listed twice"));
                }
            }
        }
        for name in m.profiles.keys() {
            if let Some(cycle) = cycle_from(m, name, &mut vec![name.as_str()]) {
                let last = &cycle[cycle.len() - 2];
                return bad(
                    format!("model.profiles.{last}.fallback"),
                    format!(
                        "the fallbacks go round in a cycle ({}); a chain must end",
                        cycle.join(" → ")
                    ),
                );
            }
        }
        Ok(())
    }

    /// Whether a notice can go to `channel`: `email` when it is set up, a webhook's name,
    /// `matrix:NAME` for a room of `channels.matrix.rooms`, or `telegram:NAME` for a chat of
    /// `channels.telegram.chats`.
    fn is_channel(&self, channel: &str) -> bool {
        let n = &self.notify;
        (channel == "email" && n.email.is_some())
            || n.webhooks.contains_key(channel)
            || self.chat_channels().iter().any(|c| c == channel)
    }

    /// `channel` is one a notice can go to: `email` when it is set up, or a webhook's name.
    fn known_channel(&self, key: &str, channel: &str) -> Result<(), Violation> {
        let n = &self.notify;
        if self.is_channel(channel) {
            return Ok(());
        }
        let mut names: Vec<String> = n.webhooks.keys().cloned().collect();
        if n.email.is_some() {
            names.insert(0, "email".into());
        }
        names.extend(self.chat_channels());
        let have = if names.is_empty() {
            "none is configured (notify.email, notify.webhooks, channels.matrix.rooms, \
             channels.telegram.chats)"
                .to_string()
        } else {
            format!("configured channels: {}", names.join(", "))
        };
        bad(key, format!("unknown notify channel '{channel}'; {have}"))
    }

    /// The numbers of the agent, tools, context and memory sections.
    fn validate_limits(&self) -> Result<(), Violation> {
        positive("agent.max_steps", self.agent.max_steps.into())?;
        seconds("agent.task_timeout_s", self.agent.task_timeout_s, false)?;
        seconds("agent.shutdown_grace_s", self.agent.shutdown_grace_s, true)?;
        positive("agent.workers", self.agent.workers.into())?;
        positive(
            "agent.max_identical_calls",
            self.agent.max_identical_calls.into(),
        )?;
        let t = &self.tools;
        seconds("tools.timeout_s", t.timeout_s, false)?;
        seconds(
            "tools.circuit_breaker_cooldown_s",
            t.circuit_breaker_cooldown_s,
            true,
        )?;
        positive(
            "tools.circuit_breaker_threshold",
            t.circuit_breaker_threshold.into(),
        )?;
        positive("tools.result_max_tokens", t.result_max_tokens.into())?;
        positive("tools.web_fetch.max_bytes", t.web_fetch.max_bytes)?;
        seconds("tools.approval_expire_s", t.approval_expire_s, false)?;
        if t.approval.iter().any(|g| g.trim().is_empty()) {
            return bad(
                "tools.approval",
                "has an empty entry; list tool names or globs like \"mail_*\"",
            );
        }
        seconds("tools.web_fetch.timeout_s", t.web_fetch.timeout_s, false)?;
        positive(
            "context.summary_max_length",
            self.context.summary_max_length.into(),
        )?;
        positive("memory.recall_top_k", self.memory.recall_top_k.into())?;
        positive("memory.working_max_bytes", self.memory.working_max_bytes)?;
        self.validate_embeddings()
    }

    fn validate_embeddings(&self) -> Result<(), Violation> {
        let Some(e) = &self.memory.embeddings else {
            return Ok(());
        };
        let k = |f: &str| format!("memory.embeddings.{f}");
        http_url(&k("base_url"), &e.base_url, MODEL_URL_EXAMPLE)?;
        if e.model.trim().is_empty() {
            return bad(
                k("model"),
                "must name the embedding model (example: nomic-embed-text)",
            );
        }
        positive(&k("batch"), e.batch.into())?;
        if e.batch > MAX_EMBED_BATCH {
            return bad(
                k("batch"),
                format!("at most {MAX_EMBED_BATCH} inputs per request"),
            );
        }
        seconds(&k("timeout_s"), e.timeout_s, false)?;
        positive(&k("max_input_chars"), e.max_input_chars.into())?;
        if !(-1.0..=1.0).contains(&e.min_similarity) {
            return bad(
                k("min_similarity"),
                "is a cosine similarity: between -1 and 1 (0.3 suits most models)",
            );
        }
        Ok(())
    }

    fn validate_scheduler(&self) -> Result<(), Violation> {
        let s = &self.scheduler;
        // Empty: the machine's own zone, resolved when the config is loaded.
        if !s.timezone.is_empty() && s.timezone.parse::<chrono_tz::Tz>().is_err() {
            return bad(
                "scheduler.timezone",
                format!(
                    "unknown time zone '{}'; use an IANA name such as Europe/Berlin, or \"\" for the machine's own zone",
                    s.timezone
                ),
            );
        }
        positive("scheduler.max_jobs", s.max_jobs.into())?;
        seconds("scheduler.min_interval_s", s.min_interval_s, true)?;
        seconds("scheduler.catch_up_grace_s", s.catch_up_grace_s, true)
    }

    fn validate_notify(&self) -> Result<(), Violation> {
        seconds("notify.send_timeout_s", self.notify.send_timeout_s, false)?;
        for channel in &self.tools.approval_notify {
            if !self.is_channel(channel) {
                return bad(
                    "tools.approval_notify",
                    format!(
                        "'{channel}' is not a configured channel; use \"email\" (with notify.email), a name under \
                         notify.webhooks, matrix:NAME for a room under channels.matrix.rooms, or telegram:NAME for \
                         a chat under channels.telegram.chats"
                    ),
                );
            }
        }
        if let Some(e) = &self.notify.email {
            if e.smtp_host.is_empty() {
                return bad("notify.email.smtp_host", "must name the SMTP server");
            }
            positive("notify.email.smtp_port", e.smtp_port.into())?;
            if !e.from.contains('@') {
                return bad("notify.email.from", "must be an email address");
            }
            if e.to.is_empty() {
                return bad("notify.email.to", "must list at least one recipient");
            }
            if let Some(addr) = e.to.iter().find(|a| !a.contains('@')) {
                return bad(
                    "notify.email.to",
                    format!("'{addr}' is not an email address"),
                );
            }
        }
        for (name, w) in &self.notify.webhooks {
            if name == "email" {
                return bad(
                    "notify.webhooks.email",
                    "'email' is the email channel's name; choose another webhook name",
                );
            }
            if name == "matrix" || name.starts_with("matrix:") {
                return bad(
                    format!("notify.webhooks.{name}"),
                    "'matrix' and matrix:NAME are the Matrix channel's names; choose another webhook name",
                );
            }
            if name == "telegram" || name.starts_with("telegram:") {
                return bad(
                    format!("notify.webhooks.{name}"),
                    "'telegram' and telegram:NAME are the Telegram channel's names; choose another webhook name",
                );
            }
            http_url(&format!("notify.webhooks.{name}.url"), &w.url, None)?;
        }
        Ok(())
    }

    fn validate_server(&self) -> Result<(), Violation> {
        // Port 0 is allowed: the daemon then binds a free port and writes it to the data dir.
        let s = &self.server;
        if s.host.trim().is_empty() {
            return bad("server.host", "must be an address such as 127.0.0.1");
        }
        if s.token.is_empty() && !is_loopback_host(&s.host) {
            return bad(
                "server.host",
                format!(
                    "'{}' is reachable from the network, and without server.token anyone there could run tasks: set server.token (e.g. token: ${{HERMES_TOKEN}}) or use host: 127.0.0.1",
                    s.host
                ),
            );
        }
        if let Some(h) = s
            .allowed_hosts
            .iter()
            .find(|h| h.trim().is_empty() || h.contains(['/', ' ', '@']))
        {
            return bad(
                "server.allowed_hosts",
                format!(
                    "'{h}' is not a host name; write it as it appears in the Host header, e.g. hermes.example.org"
                ),
            );
        }
        seconds("server.header_timeout_s", s.header_timeout_s, false)?;
        seconds("server.idle_timeout_s", s.idle_timeout_s, false)?;
        positive("server.max_login_failures", s.max_login_failures.into())?;
        seconds("server.login_window_s", s.login_window_s, false)?;
        let url = &s.public_url;
        if !url.is_empty() {
            http_url("server.public_url", url, Some("https://hermes.example.org"))?;
        }
        Ok(())
    }

    fn validate_storage(&self) -> Result<(), Violation> {
        seconds("storage.node_lease_s", self.storage.node_lease_s, false)?;
        let url = self.storage.url.trim();
        if url.is_empty() {
            return Ok(());
        }
        match hermes_store::parse_url(url) {
            Ok(_) => Ok(()),
            Err(e) => bad("storage.url", e.to_string()),
        }
    }

    fn validate_mcp(&self) -> Result<(), Violation> {
        positive(
            "mcp.max_tools_per_server",
            self.mcp.max_tools_per_server.into(),
        )?;
        positive("mcp.max_list_pages", self.mcp.max_list_pages.into())?;
        for (name, m) in &self.mcp.servers {
            let k = |f: &str| format!("mcp.servers.{name}.{f}");
            let name_ok = !name.is_empty()
                && name.len() <= 32
                && !name.contains("__")
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !name_ok {
                return bad(
                    format!("mcp.servers.{name}"),
                    "a server name is 1 to 32 of a-z, A-Z, 0-9, '_' and '-', without '__' (tools are named SERVER__TOOL)",
                );
            }
            match (m.command.is_empty(), m.url.is_empty()) {
                (true, true) => {
                    return bad(
                        format!("mcp.servers.{name}"),
                        "give either `command: [program, args…]` (stdio) or `url: https://…/mcp` (streamable HTTP)",
                    );
                }
                (false, false) => return bad(k("url"), "give `command` or `url`, not both"),
                (false, true) => {
                    if m.command[0].trim().is_empty() {
                        return bad(k("command"), "the program (the first element) is empty");
                    }
                    if !m.headers.is_empty() {
                        return bad(k("headers"), "headers are for `url` servers");
                    }
                }
                (true, false) => {
                    http_url(&k("url"), &m.url, None)?;
                    if !m.env.is_empty() || !m.cwd.is_empty() {
                        return bad(k("env"), "env and cwd are for `command` servers");
                    }
                }
            }
            seconds(&k("timeout_s"), m.timeout_s, true)?;
            if let Err((field, message)) = m.sandbox.check() {
                return bad(k(&format!("sandbox.{field}")), message);
            }
        }
        Ok(())
    }

    fn validate_inbox(&self) -> Result<(), Violation> {
        let Some(e) = &self.inbox.email else {
            return Ok(());
        };
        let k = |f: &str| format!("inbox.email.{f}");
        if e.imap_host.trim().is_empty() {
            return bad(
                k("imap_host"),
                "must name the IMAP server (e.g. imap.example.org)",
            );
        }
        positive(&k("imap_port"), e.imap_port.into())?;
        if e.security == ImapSecurity::None && !is_loopback(&e.imap_host) {
            return bad(
                k("security"),
                format!(
                    "`none` sends the password unencrypted, so it is only for a server on this machine \
                     (127.0.0.1, ::1, localhost), not '{}'; use tls (port 993) or starttls (port 143)",
                    e.imap_host
                ),
            );
        }
        if e.username.trim().is_empty() {
            return bad(k("username"), "must name the mailbox's login");
        }
        if e.password.is_empty() {
            return bad(
                k("password"),
                "must be set; write password: ${IMAP_PASSWORD} and put the password in the environment",
            );
        }
        if e.mailbox.trim().is_empty() {
            return bad(k("mailbox"), "must name a folder, usually INBOX");
        }
        if let Some(a) = e.allow_from.iter().find(|a| !is_address(a)) {
            return bad(
                k("allow_from"),
                format!("'{a}' is not an email address (write me@example.org, without a name)"),
            );
        }
        positive(&k("max_tasks_per_hour"), e.max_tasks_per_hour.into())?;
        seconds(&k("poll_s"), e.poll_s, false)?;
        if e.trusted_authserv_id.contains(char::is_whitespace)
            || e.trusted_authserv_id.contains(';')
        {
            return bad(
                k("trusted_authserv_id"),
                "is the receiving server's id as it writes it first in Authentication-Results (e.g. mx.example.org)",
            );
        }
        if self.notify.email.is_none() {
            return bad(
                "inbox.email",
                "answers and confirmations go out through notify.email; configure it too",
            );
        }
        Ok(())
    }

    fn validate_agents(&self) -> Result<(), Violation> {
        let m = &self.model;
        for (name, a) in &self.agents {
            seconds(&format!("agents.{name}.timeout_s"), a.timeout_s, true)?;
            if !a.profile.is_empty() && !m.profiles.contains_key(&a.profile) {
                return bad(
                    format!("agents.{name}.profile"),
                    format!("unknown profile '{}'", a.profile),
                );
            }
        }
        Ok(())
    }

    /// The profile a task asks for, or the default one.
    pub fn profile(&self, name: Option<&str>) -> Option<(&str, &Profile)> {
        let name = name.unwrap_or(&self.model.default_profile);
        self.model
            .profiles
            .get_key_value(name)
            .map(|(k, v)| (k.as_str(), v))
    }
}

/// A bare address: one `@` with something on both sides, no spaces or angle brackets.
fn is_address(a: &str) -> bool {
    let a = a.trim();
    match a.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && !domain.is_empty()
                && !domain.contains('@')
                && !a.contains(|c: char| c.is_whitespace() || c == '<' || c == '>')
        }
        None => false,
    }
}

/// A host name or address that can only be this machine.
pub(super) fn is_loopback(host: &str) -> bool {
    let h = host.trim().trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether `host` is a loopback address (or `localhost`); a bind anywhere else needs a token.
pub fn is_loopback_host(host: &str) -> bool {
    if host.eq_ignore_ascii_case("localhost") {
        return true;
    }
    host.trim_matches(['[', ']'])
        .parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_loopback())
}
