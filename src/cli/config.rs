//! `config check`: validate the configuration and summarise what it sets up. Exits 2 with
//! `file:line: key: problem` on an invalid one, like every command that loads it.
//!
//! Loads every file the config names (the manifests), as `serve` would.
//! Must not: open the data dir or reach the network: checking a config changes nothing.

use super::EXIT_CONFIG;
use hermes_config::{Config, ImapSettings, Settings, Sources, env_map};
use hermes_engine::tools::{Tool, manifest};
use std::process::ExitCode;
use std::sync::Arc;

pub(crate) fn config_check(src: &Sources) -> anyhow::Result<ExitCode> {
    let Some((config, manifests)) = load_checked(src) else {
        return Ok(ExitCode::from(EXIT_CONFIG));
    };
    let s = &config.settings;
    outln!("config: {} — valid", config.source);
    outln!("data dir: {}", config.data_dir.display());
    print_model(s);
    outln!(
        "agent: max_steps {}, {} workers, task timeout {} s",
        s.agent.max_steps,
        s.agent.workers,
        s.agent.task_timeout_s
    );
    print_tools(&config, &manifests);
    print_notify(s);
    if let Some(i) = &s.inbox.email {
        print_inbox(i);
    }
    outln!(
        "server: {}:{}{}",
        s.server.host,
        s.server.port,
        if s.server.token.is_empty() {
            " (no token)"
        } else {
            " (token set)"
        }
    );
    Ok(ExitCode::SUCCESS)
}

/// The configuration and its manifest tools; `None` when either is invalid, the error
/// printed.
fn load_checked(src: &Sources) -> Option<(Config, Vec<Arc<dyn Tool>>)> {
    let config = match Config::load(src) {
        Ok(c) => c,
        Err(e) => {
            errln!("error: {e}");
            return None;
        }
    };
    // `serve` refuses a bad manifest; so does the check, rather than say valid.
    let sandbox = config.settings.tools.sandbox;
    match manifest::load_dir_with(&config.manifests_dir, &env_map(), sandbox) {
        Ok(m) => Some((config, m)),
        Err(e) => {
            errln!("error: {e}");
            None
        }
    }
}

fn key_mark(api_key: &str) -> &'static str {
    if api_key.is_empty() {
        ""
    } else {
        " (with key)"
    }
}

/// The model profiles and the embeddings' model.
fn print_model(s: &Settings) {
    for (name, p) in &s.model.profiles {
        let mark = if *name == s.model.default_profile {
            " (default)"
        } else {
            ""
        };
        outln!(
            "profile {name}{mark}: model {} at {}{}",
            p.model,
            p.base_url,
            key_mark(&p.api_key)
        );
    }
    if let Some(e) = &s.memory.embeddings {
        outln!(
            "memory: recall by meaning and keyword, embeddings by model {} at {}{}",
            e.model,
            e.base_url,
            key_mark(&e.api_key)
        );
    }
}

/// The allowlist, the manifest tools and the MCP servers.
fn print_tools(config: &Config, manifests: &[Arc<dyn Tool>]) {
    let s = &config.settings;
    let names: Vec<&str> = manifests.iter().map(|t| t.info().name.as_str()).collect();
    outln!(
        "tools: allowlist [{}], {} manifest tool(s) in {}{}",
        s.tools.allowlist.join(", "),
        names.len(),
        config.manifests_dir.display(),
        if names.is_empty() {
            String::new()
        } else {
            format!(": {}", names.join(", "))
        }
    );
    let sandbox = match s.tools.sandbox {
        hermes_engine::tools::sandbox::Mode::Enforce => {
            "enforce (commands and MCP servers confined)"
        }
        hermes_engine::tools::sandbox::Mode::Warn => {
            "warn (commands and MCP servers run unconfined)"
        }
        hermes_engine::tools::sandbox::Mode::Off => "off (commands and MCP servers run unconfined)",
    };
    outln!("sandbox: {sandbox}");
    for (name, server) in &s.mcp.servers {
        let how = match server.transport() {
            hermes_config::McpTransport::Stdio => server.command.join(" "),
            hermes_config::McpTransport::Http => server.url.clone(),
        };
        outln!("mcp server {name}: {how}");
    }
}

fn print_notify(s: &Settings) {
    let email = match &s.notify.email {
        Some(e) => format!(
            "email via {}:{} to {} recipient(s)",
            e.smtp_host,
            e.smtp_port,
            e.to.len()
        ),
        None => "no email".into(),
    };
    outln!("notify: {email}, {} webhook(s)", s.notify.webhooks.len());
}

/// The mailbox read for tasks, with a warning when it lets no one or anyone in.
fn print_inbox(i: &ImapSettings) {
    outln!(
        "inbox: {} mailbox {}, {} allowed sender(s){}",
        i.label(),
        i.mailbox,
        i.allow_from.len(),
        if i.trusted_authserv_id.is_empty() {
            ""
        } else {
            ", authenticated by the server"
        }
    );
    if i.allow_from.is_empty() {
        errln!("warning: inbox.email.allow_from is empty: the agent reads mail but acts on none");
    } else if i.trusted_authserv_id.is_empty() {
        errln!(
            "warning: inbox.email.trusted_authserv_id is empty: a forged From of an allowed address starts tasks; set it to your mail server's id"
        );
    }
}
