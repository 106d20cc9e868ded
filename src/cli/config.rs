//! `config check`: validate the configuration and summarise what it sets up. Exits 2 with
//! `file:line: key: problem` on an invalid one, like every command that loads it.
//!
//! Must not: open the data dir or reach the network: checking a config changes nothing.

use super::EXIT_CONFIG;
use crate::config::{Config, Sources};
use std::process::ExitCode;

pub fn config_check(src: &Sources) -> anyhow::Result<ExitCode> {
    let config = match Config::load(src) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
    };
    let s = &config.settings;
    println!("config: {} — valid", config.source);
    println!("data dir: {}", config.data_dir.display());
    for (name, p) in &s.model.profiles {
        let mark = if *name == s.model.default_profile {
            " (default)"
        } else {
            ""
        };
        println!(
            "profile {name}{mark}: model {} at {}{}",
            p.model,
            p.base_url,
            if p.api_key.is_empty() {
                ""
            } else {
                " (with key)"
            }
        );
    }
    println!(
        "agent: max_steps {}, {} workers, task timeout {} s",
        s.agent.max_steps, s.agent.workers, s.agent.task_timeout_s
    );
    println!(
        "tools: allowlist [{}], manifests in {}",
        s.tools.allowlist.join(", "),
        config.manifests_dir.display()
    );
    let email = match &s.notify.email {
        Some(e) => format!(
            "email via {}:{} to {} recipient(s)",
            e.smtp_host,
            e.smtp_port,
            e.to.len()
        ),
        None => "no email".into(),
    };
    println!("notify: {email}, {} webhook(s)", s.notify.webhooks.len());
    println!(
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
