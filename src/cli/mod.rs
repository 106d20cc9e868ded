//! The command line (clap): parses arguments, loads the configuration, calls into the library
//! and prints. This is the binary edge: errors become `anyhow` messages and exit codes here.
//! One file per command group; `tasks`, `jobs`, `memory`, `approvals` and `usage` are written once against
//! `client::Backend`, answered by the running daemon or by the data dir in this process
//! (`backend` picks); `mcp` (the MCP server in `hermes_surfaces::mcp`) is built on the same trait.
//!
//! Must not: hold business logic; each command is a thin call into a part or a backend.

/// A line on stdout for what a person reads, through [`write_out`]; the line goes through
/// [`for_terminal`](hermes_store::util::text::for_terminal), so text from a model, a server, an MCP
/// server or a fact cannot drive the terminal (retitle it, clear it, plant links, reverse text).
/// `--json` output is printed by `render::print_json` instead, unchanged.
macro_rules! outln {
    ($($arg:tt)*) => {
        $crate::cli::write_out(&format!(
            "{}\n",
            ::hermes_store::util::text::for_terminal(&format!($($arg)*))
        ))
    };
}

/// [`outln!`] without the newline: for tables and timelines that end in their own.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::cli::write_out(&::hermes_store::util::text::for_terminal(&format!($($arg)*)))
    };
}

/// [`outln!`] on stderr: the live timeline, errors, progress.
macro_rules! errln {
    ($($arg:tt)*) => {
        eprintln!("{}", ::hermes_store::util::text::for_terminal(&format!($($arg)*)))
    };
}

mod approvals;
mod backend;
mod config;
mod doctor;
mod eval;
mod jobs;
mod mcp;
mod memory;
mod render;
mod run;
mod service;
mod storage;
mod table;
mod tasks;
mod usage;

use clap::{Args, Parser, Subcommand};
use hermes_config::{Config, ConfigError, Sources};
use hermes_store::TaskState;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "hermes-agent",
    version,
    about = "A personal-automation agent daemon: the model thinks, the code acts.",
    propagate_version = true
)]
pub struct Cli {
    /// Settings file (default: $HERMES_CONFIG, then the XDG config dir, then built-in defaults).
    #[arg(long, global = true, env = "HERMES_CONFIG", value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Data directory for the database and the memory index (default: the XDG data dir).
    #[arg(long, global = true, env = "HERMES_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: worker pool, scheduler, outbox sender and the HTTP API.
    Serve,
    /// Run one task in this process: a live timeline on stderr, the answer on stdout.
    Run(RunArgs),
    /// Inspect tasks and their traces.
    #[command(subcommand)]
    Tasks(TasksCmd),
    /// Manage scheduled jobs.
    #[command(subcommand)]
    Jobs(JobsCmd),
    /// Manage long-term memory (facts).
    #[command(subcommand)]
    Memory(MemoryCmd),
    /// Answer tool calls waiting for a person's approval (tools.approval).
    #[command(subcommand)]
    Approvals(ApprovalsCmd),
    /// Model calls, tokens and model time over the last days, per day, profile and job.
    Usage(UsageArgs),
    /// Configuration commands.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Install the systemd user unit.
    #[command(subcommand)]
    Service(ServiceCmd),
    /// The database: move a data dir's SQLite database to PostgreSQL.
    #[command(subcommand)]
    Storage(StorageCmd),
    /// Check the config, the time zone, the sandbox, the database, each model profile (and its
    /// tool calling), the daemon, the data dir, memory, tools, MCP servers, the inbox and chat
    /// channels, SMTP and webhooks, each with a verdict.
    Doctor,
    /// Serve MCP on stdin/stdout: MCP clients (desktop assistants, editors) can run tasks and
    /// manage jobs and memory, through the daemon when it runs, else on the data dir.
    Mcp,
    /// Run the regression cases (evals/*.yaml and the evals dir beside your settings) each in a
    /// throwaway data dir; exit 1 when any fails. A run where all pass verifies the model.
    Eval(EvalArgs),
}

#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Model profile to run on (default: model.default_profile); a case may name its own.
    #[arg(long)]
    pub profile: Option<String>,
    /// Only the cases whose name matches this glob (`*` for any run of characters);
    /// repeatable.
    #[arg(long = "case", value_name = "GLOB")]
    pub case: Vec<String>,
    /// Print the run with its per-case results as JSON instead of the table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// The last this many days, today included (days in scheduler.timezone).
    #[arg(long, default_value_t = hermes_store::DEFAULT_USAGE_DAYS,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(hermes_store::MAX_USAGE_DAYS)))]
    pub days: u32,
    /// Print the figures as JSON (`GET /v1/usage`'s shape) instead of the tables.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The task, in plain language.
    pub task: String,
    /// Model profile to use (default: model.default_profile).
    #[arg(long)]
    pub profile: Option<String>,
    /// Print the task record with its trace as JSON instead of the answer.
    #[arg(long)]
    pub json: bool,
    /// Deny (reason `timeout`) a call still waiting for approval after this many seconds;
    /// without it, `run` waits until someone answers (or the request expires).
    #[arg(long, value_name = "SECS")]
    pub approval_timeout: Option<u64>,
}

#[derive(Debug, Subcommand)]
pub enum TasksCmd {
    /// List tasks, newest first.
    List {
        /// Only tasks in this state (pending, running, succeeded, failed, cancelled).
        #[arg(long)]
        state: Option<TaskState>,
        /// At most this many.
        #[arg(long, default_value_t = 20)]
        limit: i64,
        /// Print the tasks as JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Show one task and its trace as a timeline (an unambiguous id prefix is enough).
    Show {
        /// The task's id (`tasks list` shows them), or an unambiguous prefix of it.
        #[arg(value_parser = an_id)]
        id: String,
        /// Print the task record with its trace as JSON instead of the timeline.
        #[arg(long)]
        json: bool,
    },
    /// Follow a task live to its end: each step as it happens, then the answer (exit 0 when it
    /// succeeded). A task that is over is shown whole.
    Watch {
        /// The task's id (`tasks list` shows them), or an unambiguous prefix of it.
        #[arg(value_parser = an_id)]
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum JobsCmd {
    /// List jobs with their next and last runs.
    List {
        /// Print the jobs as JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Add a job.
    Add {
        #[command(flatten)]
        job: jobs::JobArgs,
        /// Print the job made as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Remove a job.
    Rm {
        /// The job's id (`jobs list` shows them).
        #[arg(value_parser = an_id)]
        id: String,
    },
    /// Fire a job now (through the daemon if it runs, else in this process). Its precheck
    /// runs too, and its failure fails the run; a "no change" does not skip it.
    Run {
        /// The job's id (`jobs list` shows them).
        #[arg(value_parser = an_id)]
        id: String,
    },
    /// Pause a job: it does not fire until resumed (`jobs run` still fires it).
    Pause {
        /// The job's id (`jobs list` shows them).
        #[arg(value_parser = an_id)]
        id: String,
    },
    /// Resume a paused job: a firing missed while paused is not made up; the next one stands.
    Resume {
        /// The job's id (`jobs list` shows them).
        #[arg(value_parser = an_id)]
        id: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ApprovalsCmd {
    /// List requests, newest first (the open ones unless --state or --all).
    List {
        /// Only requests in this state (open, approved, denied, expired).
        #[arg(long)]
        state: Option<hermes_store::ApprovalState>,
        /// Every request, whatever its state.
        #[arg(long, conflicts_with = "state")]
        all: bool,
        /// Print the requests as JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Approve an open request: the call runs once, with the arguments shown.
    Approve {
        /// The request's id (`approvals list` shows them).
        #[arg(value_parser = an_id)]
        id: String,
    },
    /// Deny an open request: the call never runs; the model is told a person declined.
    Deny {
        /// The request's id (`approvals list` shows them).
        #[arg(value_parser = an_id)]
        id: String,
        /// Told to the model with the denial.
        #[arg(long)]
        reason: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum MemoryCmd {
    /// Remember a fact.
    Add {
        /// The fact, in plain words (at most 2,000 characters).
        text: String,
        /// A tag to file the fact under; repeatable.
        #[arg(long = "tag")]
        tags: Vec<String>,
    },
    /// Search facts.
    Search {
        /// What to look for: words (and meaning, with memory.embeddings set), any language.
        query: String,
        /// At most this many facts.
        #[arg(long, default_value_t = 5)]
        k: usize,
        /// Print the facts found, with their scores, as JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Forget a fact by id.
    Forget {
        /// The fact's id (`memory search` shows them).
        #[arg(value_parser = an_id)]
        id: String,
    },
    /// Rebuild the keyword index from the database (the daemon must be stopped: it holds the
    /// index); with --embeddings, embed now every fact the configured embedding model has no
    /// vector of (works beside a running daemon, which picks the vectors up).
    Reindex {
        /// Embed the facts that have no vector yet, instead of rebuilding the keyword index.
        #[arg(long)]
        embeddings: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCmd {
    /// Validate the configuration: exit 0 with a summary, or 2 with file:line: key and the problem.
    Check,
}

#[derive(Debug, Subcommand)]
pub enum StorageCmd {
    /// Copy the data dir's database into an empty PostgreSQL database, check every table's
    /// count, and print the `storage.url` to set. The data dir is left as it was.
    Migrate {
        /// The target, e.g. postgres://hermes@db.example.org:5432/hermes (the password as
        /// ${VAR}, or from PGPASSWORD).
        #[arg(long, value_name = "URL")]
        to: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum ServiceCmd {
    /// Write the systemd user unit for `systemctl --user`.
    Install,
}

/// An id argument: an empty one is refused as the arguments are read, before anything is
/// opened or asked (through the daemon it would name the collection, not an item).
fn an_id(arg: &str) -> Result<String, String> {
    let id = arg.trim();
    if id.is_empty() {
        return Err("an id cannot be empty; the list commands show the ids".into());
    }
    Ok(id.to_string())
}

/// Write to stdout. A reader that went away (`config check | head -1`) ends the command
/// quietly, as a pipe's writer is ended on Unix; any other failure (a full disk) ends it with
/// the reason and exit 1 — where `println!` would panic in both.
pub(crate) fn write_out(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            errln!("error: cannot write the output: {e}");
            std::process::exit(1);
        }
    }
}

/// Exit code for an invalid configuration (`config check` and every command that loads one).
pub(crate) const EXIT_CONFIG: u8 = 2;

/// Parse the process arguments and run the command.
pub fn main() -> ExitCode {
    hermes_store::util::tune_allocator();
    let cli = Cli::parse();
    // The daemon logs its work; one-shot commands print their own output and only warn.
    // rmcp narrates every MCP session at info, and matrix-sdk every sync (a 1.5 KB line each
    // 30 s) with, on an account without key backup, a warning that it has none; the channel
    // says what matters itself. Serving MCP, rmcp also warns with a debug dump of every error
    // it answers (an unknown tool, say), which the client has already been sent.
    init_tracing(match cli.command {
        Command::Serve => {
            "info,rmcp=warn,matrix_sdk=warn,matrix_sdk_base=warn,matrix_sdk_crypto=warn,\
             matrix_sdk_crypto::backups=error"
        }
        Command::Mcp => "warn,rmcp=error",
        _ => "warn,matrix_sdk_crypto::backups=error",
    });
    let runtime = match runtime(matches!(cli.command, Command::Serve)) {
        Ok(rt) => rt,
        Err(e) => {
            errln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            errln!("error: {}", error_text(&e));
            match e.downcast_ref::<ConfigError>() {
                Some(_) => ExitCode::from(EXIT_CONFIG),
                None => ExitCode::FAILURE,
            }
        }
    }
}

/// The daemon's runtime has a worker per core. A one-shot command (`run` included) spends its
/// time waiting on the model, a tool or the database: it runs on this thread alone, with no
/// worker threads (nor their stacks and allocator arenas). Blocking work still goes to tokio's
/// blocking pool.
fn runtime(daemon: bool) -> std::io::Result<tokio::runtime::Runtime> {
    if daemon {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
}

/// The error and its causes on one line, skipping a cause whose text the message already
/// carries (many errors quote their source, and `{:#}` would print it twice).
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

fn init_tracing(default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    // journald adds its own timestamps; keep lines short. No colour codes: every line goes
    // through `for_terminal` (see `LogWriter`), which would write them out.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LogWriter)
        .with_ansi(false)
        .with_target(false)
        .try_init();
}

/// Log lines to stderr through [`for_terminal`](hermes_store::util::text::for_terminal), like every
/// other line a person reads: a logged error may quote a model server's body or an MCP server's
/// stderr, and tracing-subscriber escapes nothing when it writes without colours.
struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        // The formatter writes each event whole, so no character is split between two writes.
        let line = String::from_utf8_lossy(buf);
        std::io::stderr().write_all(hermes_store::util::text::for_terminal(&line).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

fn sources(cli: &Cli) -> Sources {
    Sources {
        config_flag: cli.config.clone(),
        data_dir_flag: cli.data_dir.clone(),
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    let src = sources(&cli);
    if let Command::Config(ConfigCmd::Check) = cli.command {
        return config::config_check(&src);
    }
    let config = Config::load(&src)?;
    match cli.command {
        Command::Config(ConfigCmd::Check) => config::config_check(&src),
        Command::Serve => hermes_surfaces::daemon::serve(config)
            .await
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
        Command::Run(args) => run::run(config, args).await,
        Command::Tasks(cmd) => tasks::tasks(backend::connect(config).await.as_ref(), cmd).await,
        Command::Jobs(cmd) => {
            // `jobs run` without a daemon starts the MCP servers for its task; stop them.
            let backend = backend::connect(config).await;
            let done = jobs::jobs(backend.as_ref(), cmd).await;
            backend.close().await;
            done
        }
        Command::Memory(MemoryCmd::Reindex { embeddings }) => {
            memory::reindex(&config, embeddings).await
        }
        Command::Memory(cmd) => memory::memory(backend::connect(config).await.as_ref(), cmd).await,
        Command::Approvals(cmd) => {
            approvals::approvals(backend::connect(config).await.as_ref(), cmd).await
        }
        Command::Usage(args) => usage::usage(backend::connect(config).await.as_ref(), args).await,
        Command::Mcp => mcp::mcp(config).await,
        Command::Service(ServiceCmd::Install) => service::service_install(&config),
        Command::Doctor => doctor::doctor(config).await,
        Command::Storage(StorageCmd::Migrate { to }) => storage::migrate(config, &to).await,
        Command::Eval(args) => eval::eval(config, args).await,
    }
}

#[cfg(test)]
mod tests;
