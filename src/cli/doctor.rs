//! `doctor`: each dependency — the config, the model endpoints, the daemon, the data dir,
//! memory, tools, SMTP and webhooks — with a verdict. Exits 1 if any check failed. The checks
//! are `hermes_surfaces::doctor`'s; this prints them as they come.
//!
//! Must not: change anything: it probes, and with a daemon up it leaves the data dir alone.

use hermes_config::Config;
use hermes_engine::agent::JobExecution;
use hermes_engine::tools::manifest;
use hermes_surfaces::app::App;
use hermes_surfaces::client::Remote;
use hermes_surfaces::doctor::{self, Check, Verdict};
use std::process::ExitCode;

/// The verdicts printed so far; any failure makes the exit code 1.
#[derive(Default)]
struct Report {
    failed: bool,
}

impl Report {
    fn print(&mut self, c: Check) {
        self.failed |= c.verdict == Verdict::Fail;
        let tag = match c.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "warn",
            Verdict::Fail => "FAIL",
        };
        outln!("[{tag}] {}: {}", c.what, c.detail);
    }

    fn print_all(&mut self, checks: Vec<Check>) {
        for c in checks {
            self.print(c);
        }
    }

    fn exit_code(&self) -> ExitCode {
        if self.failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    }
}

/// `GET /healthz`'s chat channels.
#[derive(serde::Deserialize)]
struct ChatHealth {
    matrix: Option<hermes_engine::channels::matrix::Status>,
    #[serde(default)]
    telegram: Option<hermes_engine::channels::telegram::Status>,
}

/// `GET /v1/channels/matrix/rooms`: each configured room as the daemon's connection finds it.
#[derive(serde::Deserialize)]
struct MatrixRooms {
    rooms: Vec<RoomFound>,
}

#[derive(serde::Deserialize)]
struct RoomFound {
    name: String,
    ok: bool,
    detail: String,
}

/// The Matrix rooms of the settings, asked of the daemon (its session and keys are its own).
async fn matrix_rooms_of(d: &Remote) -> Vec<Check> {
    match d.get::<MatrixRooms>("/v1/channels/matrix/rooms").await {
        Ok(list) => list
            .rooms
            .into_iter()
            .map(|r| {
                let verdict = if r.ok { Verdict::Ok } else { Verdict::Fail };
                Check::new(verdict, format!("matrix:{}", r.name), r.detail)
            })
            .collect(),
        Err(e) => vec![Check::new(Verdict::Warn, "matrix rooms", e.to_string())],
    }
}

/// `GET /v1/mcp`: each MCP server's status as the daemon sees it.
#[derive(serde::Deserialize)]
struct McpServers {
    servers: Vec<hermes_surfaces::mcp::ServerStatus>,
}

pub async fn doctor(config: Config) -> anyhow::Result<ExitCode> {
    let mut report = Report::default();
    report.print(doctor::config(&config));
    report.print(doctor::time_zone(&config));
    report.print(doctor::sandbox(&config));
    // The record of verified models, read only: with a daemon up the data dir is its own.
    let (database, on_server) = doctor::database(&config).await;
    report.print(database);
    let store = match on_server {
        Some(s) => Some(s),
        None => open_read_only(&config).await,
    };
    report.print_all(doctor::models(&config, store.as_ref()).await);
    if let Some(store) = store {
        store.close().await;
    }
    // Its own login, whether or not the daemon is up: IMAP servers take several sessions.
    report.print_all(doctor::inbox(&config.settings).await.into_iter().collect());
    report.print_all(
        doctor::embeddings(&config.settings)
            .await
            .into_iter()
            .collect(),
    );
    let daemon = Remote::detect(&config).await;
    report.print(match &daemon {
        Some(d) => Check::new(Verdict::Ok, "daemon", format!("running at {}", d.base())),
        None => Check::new(
            Verdict::Warn,
            "daemon",
            format!(
                "not running on {}:{} (start it with `hermes-agent serve` or `systemctl --user start hermes-agent`)",
                config.settings.server.host, config.settings.server.port
            ),
        ),
    });
    // The MCP servers: the daemon's, as it runs them; else each started once and stopped.
    match &daemon {
        Some(d) => match d.get::<McpServers>("/v1/mcp").await {
            Ok(list) => report.print_all(doctor::mcp_servers(&list.servers)),
            Err(e) => report.print(Check::new(Verdict::Warn, "mcp servers", e.to_string())),
        },
        None => {
            report.print_all(doctor::mcp_probe(&config.settings, &hermes_config::env_map()).await)
        }
    }
    // The chat accounts: with a daemon up the Matrix session and keys are the daemon's and
    // the bot's updates are its to read, so their status is asked for; else the Matrix
    // session is reused (or the first login made) here and the bot is asked who it is.
    match &daemon {
        Some(d) => {
            match d.get::<ChatHealth>("/healthz").await {
                Ok(h) => {
                    let s = &config.settings;
                    let matrix = h.matrix.and_then(|m| doctor::matrix_health(s, &m));
                    let telegram = h.telegram.and_then(|t| doctor::telegram_health(s, &t));
                    report.print_all(matrix.into_iter().chain(telegram).collect());
                }
                Err(e) => report.print(Check::new(Verdict::Warn, "chat channels", e.to_string())),
            }
            if config.settings.channels.matrix.is_some() {
                report.print_all(matrix_rooms_of(d).await);
            }
        }
        None => {
            report.print_all(doctor::matrix(&config.settings, &config.data_dir).await);
            report.print_all(doctor::telegram(&config.settings).await);
        }
    }
    // With a daemon up, the data dir and the memory index are the daemon's: its memory is
    // asked of it, and the tools and notify channels are built beside it, on a throwaway one.
    match &daemon {
        Some(d) => {
            report.print(Check::new(
                Verdict::Ok,
                "data dir",
                format!("{} (in use by the daemon)", config.data_dir.display()),
            ));
            match d.get::<MemoryHealth>("/healthz").await {
                Ok(h) => report.print(doctor::memory_of_daemon(&h.memory_index)),
                Err(e) => report.print(Check::new(Verdict::Warn, "memory", e.to_string())),
            }
            check_beside_the_daemon(&mut report, config).await;
        }
        None => check_data_dir(&mut report, config).await,
    }
    Ok(report.exit_code())
}

/// `GET /healthz`'s memory index.
#[derive(serde::Deserialize)]
struct MemoryHealth {
    memory_index: String,
}

/// The tools and notify channels as the settings make them, built on a throwaway data dir
/// (SQLite) so that the daemon's is left alone.
async fn check_beside_the_daemon(report: &mut Report, mut config: Config) {
    let scratch = match tempfile::tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            let detail = format!("cannot make a scratch dir to check them in: {e}");
            return report.print(Check::new(Verdict::Warn, "tools", detail));
        }
    };
    config.data_dir = scratch.path().to_path_buf();
    config.settings.storage.url.clear();
    let missing = manifest::missing_programs(&config.manifests_dir, &hermes_config::env_map());
    match App::build(config, JobExecution::Direct).await {
        Ok(app) => {
            report.print(doctor::tools(
                app.agent.registry(),
                &app.config.settings,
                &missing,
            ));
            report.print_all(doctor::notify(&app.notifier).await);
            app.store.close().await;
        }
        Err(e) => report.print(Check::new(Verdict::Fail, "tools", format!("{e:#}"))),
    }
}

/// The data dir's database for reading, when there is one.
async fn open_read_only(config: &Config) -> Option<hermes_store::Store> {
    if !config.settings.storage.url.trim().is_empty() {
        return None;
    }
    if !config.data_dir.join(hermes_store::DB_FILE).is_file() {
        return None;
    }
    let options = hermes_store::StoreOptions {
        read_only: true,
        max_connections: 1,
        ..Default::default()
    };
    hermes_store::Store::open_with(&config.data_dir, options)
        .await
        .ok()
}

/// The data dir, and what only opening it can tell: memory, tools, notify channels.
async fn check_data_dir(report: &mut Report, config: Config) {
    let data_dir = config.data_dir.clone();
    let app = match App::build(config, JobExecution::Direct).await {
        Ok(app) => app,
        Err(e) => {
            let detail = format!("{}: {e:#}", data_dir.display());
            return report.print(Check::new(Verdict::Fail, "data dir", detail));
        }
    };
    report.print(doctor::data_dir(&app.config));
    report.print(doctor::memory(&app.store, app.memory.as_ref()).await);
    let missing = manifest::missing_programs(&app.config.manifests_dir, &hermes_config::env_map());
    report.print(doctor::tools(
        app.agent.registry(),
        &app.config.settings,
        &missing,
    ));
    report.print_all(doctor::notify(&app.notifier).await);
}
