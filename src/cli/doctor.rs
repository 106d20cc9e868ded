//! `doctor`: each dependency — the config, the model endpoints, the daemon, the data dir,
//! memory, tools, SMTP and webhooks — with a verdict. Exits 1 if any check failed.
//!
//! Must not: change anything: it probes, and with a daemon up it leaves the data dir alone.

use super::backend::Remote;
use crate::agent::prompt;
use crate::app::{App, JobExecution};
use crate::config::{Config, Settings};
use crate::llm::Gateway;
use std::process::ExitCode;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

/// The verdicts printed so far; any failure makes the exit code 1.
#[derive(Default)]
struct Report {
    failed: bool,
}

impl Report {
    fn check(&mut self, v: Verdict, what: &str, detail: impl AsRef<str>) {
        self.failed |= v == Verdict::Fail;
        let tag = match v {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        };
        println!("[{tag}] {what}: {}", detail.as_ref());
    }

    fn exit_code(&self) -> ExitCode {
        if self.failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    }
}

pub async fn doctor(config: Config) -> anyhow::Result<ExitCode> {
    let mut report = Report::default();
    report.check(Verdict::Ok, "config", format!("{} is valid", config.source));
    check_models(&mut report, &config.settings).await;
    let daemon = Remote::detect(&config).await;
    match &daemon {
        Some(d) => report.check(Verdict::Ok, "daemon", format!("running at {}", d.base())),
        None => report.check(
            Verdict::Warn,
            "daemon",
            format!(
                "not running on {}:{} (start it with `hermes-agent serve` or `systemctl --user start hermes-agent`)",
                config.settings.server.host, config.settings.server.port
            ),
        ),
    }
    // With a daemon up, the memory index is the daemon's; open the rest only when it is not.
    if daemon.is_some() {
        report.check(
            Verdict::Ok,
            "data dir",
            format!("{} (in use by the daemon)", config.data_dir.display()),
        );
    } else {
        check_data_dir(&mut report, config).await;
    }
    Ok(report.exit_code())
}

async fn check_models(report: &mut Report, s: &Settings) {
    let gateway = match Gateway::new(&s.model) {
        Ok(g) => g,
        Err(e) => return report.check(Verdict::Fail, "model", e.to_string()),
    };
    for name in s.model.profiles.keys() {
        let what = format!("model profile {name}");
        match gateway.probe(name).await {
            Ok(detail) => report.check(Verdict::Ok, &what, detail),
            Err(e) => report.check(Verdict::Fail, &what, e),
        }
    }
}

/// The data dir, and what only opening it can tell: memory, tools, notify channels.
async fn check_data_dir(report: &mut Report, config: Config) {
    let data_dir = config.data_dir.clone();
    let app = match App::build(config, JobExecution::Direct).await {
        Ok(app) => app,
        Err(e) => {
            let detail = format!("{}: {e:#}", data_dir.display());
            return report.check(Verdict::Fail, "data dir", detail);
        }
    };
    report.check(
        Verdict::Ok,
        "data dir",
        format!(
            "{} (database schema v{})",
            data_dir.display(),
            crate::store::Store::schema_version()
        ),
    );
    match &app.memory {
        Some(_) => {
            let n = app.store.fact_count().await.unwrap_or(0);
            report.check(Verdict::Ok, "memory", format!("{n} fact(s) indexed"))
        }
        None => report.check(
            Verdict::Warn,
            "memory",
            "long-term memory index could not be opened; see the log above",
        ),
    }
    check_tools(report, &app);
    let results = app.notifier.check().await;
    if results.is_empty() {
        report.check(
            Verdict::Warn,
            "notify",
            "no email or webhook configured (notify.email, notify.webhooks)",
        );
    }
    for r in results {
        let v = if r.ok { Verdict::Ok } else { Verdict::Fail };
        report.check(v, &r.target, r.detail);
    }
}

fn check_tools(report: &mut Report, app: &App) {
    let tools = app.agent.registry().offered(None);
    let system = prompt::system_prompt(&app.config.settings.agent.system_prompt_extra, None);
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    report.check(
        Verdict::Ok,
        "tools",
        format!(
            "{} offered ({}); fixed prompt overhead ≈ {} tokens per model call",
            tools.len(),
            names.join(", "),
            prompt::fixed_overhead_tokens(&system, &tools)
        ),
    );
}
