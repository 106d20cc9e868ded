//! Checking settings that parse but cannot work: a zero where a count must be positive, a
//! channel without an address, a schedule zone that does not exist. The first problem found is
//! reported with its dotted key, and `config check` prints it at its line.
//!
//! Owns: every semantic rule of settings.yaml. Must not: read files or the environment.

use super::settings::*;

/// A semantic error: the dotted key and what is wrong with its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub key: String,
    pub message: String,
}

fn bad(key: impl Into<String>, message: impl Into<String>) -> Result<(), Violation> {
    Err(Violation {
        key: key.into(),
        message: message.into(),
    })
}

fn positive(key: &str, v: u64) -> Result<(), Violation> {
    if v == 0 {
        return bad(key, "must be greater than 0");
    }
    Ok(())
}

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
        self.validate_agents()?;
        self.validate_mcp()
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
            if !(p.base_url.starts_with("http://") || p.base_url.starts_with("https://")) {
                return bad(
                    k("base_url"),
                    format!(
                        "'{}' is not an http(s) URL (example: http://127.0.0.1:11434/v1)",
                        p.base_url
                    ),
                );
            }
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
        Ok(())
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
        positive("memory.working_max_bytes", self.memory.working_max_bytes)
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
            let known = (channel == "email" && self.notify.email.is_some())
                || self.notify.webhooks.contains_key(channel);
            if !known {
                return bad(
                    "tools.approval_notify",
                    format!(
                        "'{channel}' is not a configured channel; use \"email\" (with notify.email) or a name under notify.webhooks"
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
            if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
                return bad(
                    format!("notify.webhooks.{name}.url"),
                    format!("'{}' is not an http(s) URL", w.url),
                );
            }
        }
        Ok(())
    }

    fn validate_server(&self) -> Result<(), Violation> {
        // Port 0 is allowed: the daemon then binds a free port and writes it to the data dir.
        let s = &self.server;
        if s.host.trim().is_empty() {
            return bad("server.host", "must be an address such as 127.0.0.1");
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
        if !(url.is_empty() || url.starts_with("http://") || url.starts_with("https://")) {
            return bad(
                "server.public_url",
                format!("'{url}' is not an http(s) URL (example: https://hermes.example.org)"),
            );
        }
        Ok(())
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
                    if !(m.url.starts_with("http://") || m.url.starts_with("https://")) {
                        return bad(k("url"), format!("'{}' is not an http(s) URL", m.url));
                    }
                    if !m.env.is_empty() || !m.cwd.is_empty() {
                        return bad(k("env"), "env and cwd are for `command` servers");
                    }
                }
            }
            seconds(&k("timeout_s"), m.timeout_s, true)?;
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
