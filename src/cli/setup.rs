//! `doctor` (each dependency with a verdict) and `service install` (the systemd user unit).

use super::client::Daemon;
use crate::agent::prompt;
use crate::app::{App, JobExecution};
use crate::config::Config;
use crate::llm::Gateway;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const UNIT_TEMPLATE: &str = include_str!("../../systemd/hermes-agent.service");

#[derive(Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Ok,
    Warn,
    Fail,
}

fn say(v: Verdict, what: &str, detail: impl AsRef<str>) {
    let tag = match v {
        Verdict::Ok => "ok  ",
        Verdict::Warn => "warn",
        Verdict::Fail => "FAIL",
    };
    println!("[{tag}] {what}: {}", detail.as_ref());
}

pub async fn doctor(config: Config) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    let mut check = |v: Verdict, what: &str, detail: String| {
        failed |= v == Verdict::Fail;
        say(v, what, detail);
    };
    check(Verdict::Ok, "config", format!("{} is valid", config.source));
    let s = config.settings.clone();

    match Gateway::new(&s.model) {
        Ok(gateway) => {
            for name in s.model.profiles.keys() {
                match gateway.probe(name).await {
                    Ok(detail) => check(Verdict::Ok, &format!("model profile {name}"), detail),
                    Err(e) => check(
                        Verdict::Fail,
                        &format!("model profile {name}"),
                        e.to_string(),
                    ),
                }
            }
        }
        Err(e) => check(Verdict::Fail, "model", e.to_string()),
    }

    let daemon = Daemon::detect(&s).await;
    match &daemon {
        Some(d) => check(Verdict::Ok, "daemon", format!("running at {}", d.base())),
        None => check(
            Verdict::Warn,
            "daemon",
            format!(
                "not running on {}:{} (start it with `hermes-agent serve` or `systemctl --user start hermes-agent`)",
                s.server.host, s.server.port
            ),
        ),
    }

    // With a daemon up, the memory index is the daemon's; open the rest only when it is not.
    if daemon.is_some() {
        check(
            Verdict::Ok,
            "data dir",
            format!("{} (in use by the daemon)", config.data_dir.display()),
        );
        return Ok(if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        });
    }
    let data_dir = config.data_dir.clone();
    match App::build(config, JobExecution::Direct).await {
        Ok(app) => {
            check(
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
                    check(Verdict::Ok, "memory", format!("{n} fact(s) indexed"))
                }
                None => check(
                    Verdict::Warn,
                    "memory",
                    "long-term memory index could not be opened; see the log above".into(),
                ),
            }
            let tools = app.agent.registry().offered(None);
            let system = prompt::system_prompt(
                "2026-01-01 08:00 UTC (Thursday)",
                &s.agent.system_prompt_extra,
                None,
            );
            check(
                Verdict::Ok,
                "tools",
                format!(
                    "{} offered ({}); fixed prompt overhead ≈ {} tokens per model call",
                    tools.len(),
                    tools
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    prompt::fixed_overhead_tokens(&system, &tools)
                ),
            );
            let results = app.notifier.check().await;
            if results.is_empty() {
                check(
                    Verdict::Warn,
                    "notify",
                    "no email or webhook configured (notify.email, notify.webhooks)".into(),
                );
            }
            for r in results {
                check(
                    if r.ok { Verdict::Ok } else { Verdict::Fail },
                    &r.target,
                    r.detail,
                );
            }
        }
        Err(e) => check(
            Verdict::Fail,
            "data dir",
            format!("{}: {e:#}", data_dir.display()),
        ),
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The unit text for this machine: ExecStart at this binary, the data dir writable. Paths are
/// written as unit-file words (see [`unit_word`]), so a space or a `%` in them survives.
pub fn render_unit(exe: &Path, config: Option<&Path>, data_dir: &Path) -> String {
    let mut exec = format!("ExecStart={}", unit_word(&exe.to_string_lossy(), true));
    if let Some(c) = config {
        exec.push_str(&format!(
            " --config {}",
            unit_word(&c.to_string_lossy(), true)
        ));
    }
    exec.push_str(&format!(
        " --data-dir {} serve",
        unit_word(&data_dir.to_string_lossy(), true)
    ));
    UNIT_TEMPLATE
        .lines()
        .map(|l| {
            if l.starts_with("ExecStart=") {
                exec.clone()
            } else if l.starts_with("ReadWritePaths=") {
                format!(
                    "ReadWritePaths={}",
                    unit_word(&data_dir.to_string_lossy(), false)
                )
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// One word of a unit file. systemd expands `%` specifiers everywhere and `$VAR` in command
/// lines, and splits on whitespace: escape the first two, and quote a word that has whitespace,
/// quotes or backslashes (C-style escapes inside the quotes).
fn unit_word(word: &str, exec: bool) -> String {
    let mut out = word.replace('%', "%%");
    if exec {
        out = out.replace('$', "$$");
    }
    if out.is_empty()
        || out
            .chars()
            .any(|c| c.is_whitespace() || matches!(c, '"' | '\'' | '\\'))
    {
        out = format!("\"{}\"", out.replace('\\', "\\\\").replace('"', "\\\""));
    }
    out
}

pub fn service_install(config: &Config) -> anyhow::Result<ExitCode> {
    let exe = std::env::current_exe().context("cannot find this program's path")?;
    let dirs = directories::BaseDirs::new()
        .context("cannot find your home directory to install a user service")?;
    let unit_dir = dirs.config_dir().join("systemd").join("user");
    std::fs::create_dir_all(&unit_dir)
        .with_context(|| format!("cannot create {}", unit_dir.display()))?;
    // The unit makes only the data dir writable, and systemd refuses to start if it is missing.
    std::fs::create_dir_all(&config.data_dir)
        .with_context(|| format!("cannot create the data dir {}", config.data_dir.display()))?;
    // systemd runs the service from another directory and wants absolute paths.
    let data_dir = std::fs::canonicalize(&config.data_dir)
        .with_context(|| format!("cannot resolve the data dir {}", config.data_dir.display()))?;
    let config_file: Option<PathBuf> = match &config.source {
        crate::config::ConfigSource::File(p) => Some(std::fs::canonicalize(p).unwrap_or(p.clone())),
        crate::config::ConfigSource::Defaults { .. } => None,
    };
    let unit = render_unit(&exe, config_file.as_deref(), &data_dir);
    let path = unit_dir.join("hermes-agent.service");
    std::fs::write(&path, unit).with_context(|| format!("cannot write {}", path.display()))?;
    println!("wrote {}", path.display());
    println!(
        "next:\n  systemctl --user daemon-reload\n  systemctl --user enable --now hermes-agent\n  journalctl --user -u hermes-agent -f"
    );
    match linger_enabled() {
        Some(true) => println!("lingering is on: the service keeps running after you log out"),
        Some(false) => println!(
            "warning: lingering is off, so the service stops when you log out. Fix: loginctl enable-linger $USER"
        ),
        None => println!(
            "note: could not ask loginctl about lingering; without it the service stops at logout (loginctl enable-linger $USER)"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

fn linger_enabled() -> Option<bool> {
    let uid = std::process::Command::new("id").arg("-u").output().ok()?;
    let uid = String::from_utf8_lossy(&uid.stdout).trim().to_string();
    let out = std::process::Command::new("loginctl")
        .args(["show-user", &uid, "--property=Linger", "--value"])
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => Some(true),
        "no" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_words_are_escaped_and_quoted_only_when_needed() {
        assert_eq!(
            unit_word("/usr/bin/hermes-agent", true),
            "/usr/bin/hermes-agent"
        );
        assert_eq!(unit_word("/home/a b/data", false), "\"/home/a b/data\"");
        assert_eq!(unit_word("/srv/100%/x", false), "/srv/100%%/x");
        assert_eq!(unit_word("/srv/$HOME", true), "/srv/$$HOME");
        assert_eq!(unit_word("/srv/$HOME", false), "/srv/$HOME");
        assert_eq!(unit_word("/a\"b", true), "\"/a\\\"b\"");
    }

    #[test]
    fn the_rendered_unit_points_at_the_binary_and_the_data_dir() {
        let unit = render_unit(
            Path::new("/opt/hermes/bin/hermes-agent"),
            Some(Path::new("/etc/hermes settings.yaml")),
            Path::new("/var/lib/hermes"),
        );
        assert!(unit.contains(
            "ExecStart=/opt/hermes/bin/hermes-agent --config \"/etc/hermes settings.yaml\" \
             --data-dir /var/lib/hermes serve\n"
        ));
        assert!(unit.contains("ReadWritePaths=/var/lib/hermes\n"));
        assert_eq!(unit.matches("ExecStart=").count(), 1);
        assert!(unit.contains("Restart=on-failure"));
    }
}
