//! `service install`: the systemd user unit for this binary, with the data dir made writable.
//!
//! Must not: start, enable or reload anything: it writes the unit and says what to run next.

use anyhow::Context;
use hermes_config::Config;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const UNIT_TEMPLATE: &str = include_str!("../../systemd/hermes-agent.service");

/// What systemd waits for a stopping daemon beyond `agent.shutdown_grace_s` before it kills it:
/// the steps after the grace take at most about 40 s (`daemon/run.rs`).
const STOP_MARGIN_S: u64 = 60;
/// The template's `TimeoutStopSec`, kept as the least.
const STOP_TIMEOUT_S: u64 = 90;

/// The unit text for this machine: ExecStart at this binary, the data dir writable, time to
/// stop for `grace_s` (`agent.shutdown_grace_s`). Paths are written as unit-file words (see
/// `unit_word`), so a space or a `%` in them survives.
pub(crate) fn render_unit(
    exe: &Path,
    config: Option<&Path>,
    data_dir: &Path,
    grace_s: u64,
) -> String {
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
            } else if l.starts_with("TimeoutStopSec=") {
                let stop = grace_s.saturating_add(STOP_MARGIN_S).max(STOP_TIMEOUT_S);
                format!("TimeoutStopSec={stop}s")
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

pub(crate) fn service_install(config: &Config) -> anyhow::Result<ExitCode> {
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
        hermes_config::ConfigSource::File(p) => Some(std::fs::canonicalize(p).unwrap_or(p.clone())),
        hermes_config::ConfigSource::Defaults { .. } => None,
    };
    let grace = config.settings.agent.shutdown_grace_s;
    let unit = render_unit(&exe, config_file.as_deref(), &data_dir, grace);
    let path = unit_dir.join("hermes-agent.service");
    let replaced = path.exists();
    std::fs::write(&path, unit).with_context(|| format!("cannot write {}", path.display()))?;
    outln!(
        "{} {}",
        if replaced { "replaced" } else { "wrote" },
        path.display()
    );
    let named = [Some(exe.as_path()), config_file.as_deref(), Some(&data_dir)];
    for hidden in named.into_iter().flatten().filter(|p| in_private_tmp(p)) {
        outln!(
            "warning: {} is under a temporary directory, which the service does not see (PrivateTmp=yes in the unit); put the binary on your PATH with `cargo install --path .`, and the config and data dir outside /tmp, then run this again",
            hidden.display()
        );
    }
    outln!(
        "next:\n  systemctl --user daemon-reload\n  systemctl --user enable --now hermes-agent\n  journalctl --user -u hermes-agent -f"
    );
    match linger_enabled() {
        Some(true) => outln!("lingering is on: the service keeps running after you log out"),
        Some(false) => outln!(
            "warning: lingering is off, so the service stops when you log out. Fix: loginctl enable-linger $USER"
        ),
        None => outln!(
            "note: could not ask loginctl about lingering; without it the service stops at logout (loginctl enable-linger $USER)"
        ),
    }
    Ok(ExitCode::SUCCESS)
}

/// Whether `path` lies in a directory the unit's `PrivateTmp=yes` replaces with an empty one.
fn in_private_tmp(path: &Path) -> bool {
    path.starts_with("/tmp") || path.starts_with("/var/tmp")
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
    fn what_private_tmp_hides_from_the_service() {
        assert!(in_private_tmp(Path::new("/tmp/trial/hermes-agent")));
        assert!(in_private_tmp(Path::new("/var/tmp/x")));
        assert!(!in_private_tmp(Path::new("/tmpfoo/hermes-agent")));
        assert!(!in_private_tmp(Path::new(
            "/home/a/.cargo/bin/hermes-agent"
        )));
    }

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
            30,
        );
        assert!(unit.contains(
            "ExecStart=/opt/hermes/bin/hermes-agent --config \"/etc/hermes settings.yaml\" \
             --data-dir /var/lib/hermes serve\n"
        ));
        assert!(unit.contains("ReadWritePaths=/var/lib/hermes\n"));
        assert_eq!(unit.matches("ExecStart=").count(), 1);
        assert!(unit.contains("Restart=on-failure"));
        // The HTTP connection cap is half of it (server::conn).
        assert!(unit.contains("\nLimitNOFILE=4096\n"));
        assert!(unit.contains("\nTimeoutStopSec=90s\n"));
        // A longer grace gets the time it needs to drain before systemd kills it.
        let long = render_unit(Path::new("/x"), None, Path::new("/d"), 300);
        assert!(long.contains("\nTimeoutStopSec=360s\n"), "{long}");
    }
}
