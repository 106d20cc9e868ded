//! One connection to one MCP server: the process started (stdio) or the endpoint reached
//! (streamable HTTP), the MCP handshake under a time bound, and the handler that hears the
//! server's notifications.
//!
//! Owns: how a server's process is started — without a shell, with only PATH, HOME, LANG and
//! its configured `env`, in its own session and process group (so a wrapper such as `uvx` or
//! `npx` dies with its children, and no terminal is its), killed when dropped — and its
//! stderr, kept as "last words" for the reason of a failure (logged at debug only: a server
//! may print what it was given).
//! Must not: restart anything (the manager does), log env values or header values, or let the
//! server write to this process's stdout.

use super::McpError;
use super::child::ChildTransport;
use super::limits::HANDSHAKE_TIMEOUT;
use hermes_config::{McpServer, McpTransport};
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{ClientCacheConfig, MaybeSendFuture, NotificationContext, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{IntoTransport, StreamableHttpClientTransport};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncBufReadExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
/// The only variables of this process a server inherits; the rest of its environment is its
/// own `env` (the daemon's may hold keys the server has no business seeing).
const INHERITED_ENV: [&str; 3] = ["PATH", "HOME", "LANG"];
/// Lines of stderr kept, and the length each is cut to.
const LAST_WORDS_LINES: usize = 5;
const LAST_WORDS_CHARS: usize = 300;
/// After a failed handshake, how long to wait for the dying process's last stderr lines.
const LAST_WORDS_WAIT: Duration = Duration::from_millis(500);

/// A live connection.
pub(super) struct Connection {
    pub service: RunningService<RoleClient, Handler>,
    /// The process of a stdio server.
    pub pid: Option<u32>,
    pub last_words: LastWords,
}

/// The last lines a stdio server wrote to stderr, with the values of its `env` blanked out (a
/// server that complains about its key may well print it).
#[derive(Clone, Default)]
pub(super) struct LastWords {
    lines: Arc<Mutex<VecDeque<String>>>,
    secrets: Arc<Vec<String>>,
}

impl LastWords {
    fn new(server: &McpServer) -> LastWords {
        // Short values ("1", "en") would blank out ordinary words; they are no keys anyway.
        let secrets = server.env.values().filter(|v| v.len() >= 6).cloned();
        LastWords {
            lines: Arc::default(),
            secrets: Arc::new(secrets.collect()),
        }
    }

    /// `line` without any secret in it.
    fn redact(&self, line: &str) -> String {
        let mut line = line.trim().to_string();
        for s in self.secrets.iter() {
            line = line.replace(s.as_str(), "<redacted>");
        }
        line
    }

    fn push(&self, line: &str) {
        let mut lines = hermes_store::util::lock(&self.lines);
        if lines.len() == LAST_WORDS_LINES {
            lines.pop_front();
        }
        lines.push_back(hermes_store::util::text::cut(line.trim(), LAST_WORDS_CHARS).into_owned());
    }

    /// `; it said: LINE` with its last non-empty line, or nothing.
    pub(crate) fn suffix(&self) -> String {
        let lines = hermes_store::util::lock(&self.lines);
        match lines.iter().rev().find(|l| !l.is_empty()) {
            Some(l) => format!("; it said: {l}"),
            None => String::new(),
        }
    }
}

/// Hears the server: a changed tool list wakes the manager, which lists the tools again.
#[derive(Clone)]
pub(super) struct Handler {
    pub changed: Arc<Notify>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.changed.notify_one();
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("hermes-agent", env!("CARGO_PKG_VERSION")),
        )
    }
}

/// Connect to `server` and complete the handshake.
pub(super) async fn connect(
    name: &str,
    server: &McpServer,
    env: &HashMap<String, String>,
    sandbox: hermes_engine::tools::sandbox::Mode,
    handler: Handler,
) -> Result<Connection, McpError> {
    match server.transport() {
        McpTransport::Stdio => {
            let Started {
                child,
                pid,
                last_words,
                reader,
            } = start(name, server, env, sandbox)?;
            match handshake(handler, child).await {
                Ok(service) => Ok(Connection {
                    service,
                    pid,
                    last_words,
                }),
                Err(failure) => {
                    // The process is gone or going: give its last lines a moment to arrive, so
                    // the reason can quote them.
                    let _ = tokio::time::timeout(LAST_WORDS_WAIT, reader).await;
                    Err(failure.into_error(name, last_words.suffix(), ""))
                }
            }
        }
        McpTransport::Http => {
            let transport = http_transport(name, server)?;
            let service = handshake(handler, transport)
                .await
                .map_err(|f| f.into_error(name, String::new(), &server.url))?;
            Ok(Connection {
                service,
                pid: None,
                last_words: LastWords::default(),
            })
        }
    }
}

/// A stdio server's process, started, before the handshake.
struct Started {
    child: ChildTransport,
    pid: Option<u32>,
    last_words: LastWords,
    /// Reads its stderr into `last_words` until it closes.
    reader: JoinHandle<()>,
}

/// Start the process of `server`, confined as `sandbox` says.
fn start(
    name: &str,
    server: &McpServer,
    env: &HashMap<String, String>,
    sandbox: hermes_engine::tools::sandbox::Mode,
) -> Result<Started, McpError> {
    let mut command = build_command(name, server, env)?;
    let program = server.command.first().cloned().unwrap_or_default();
    let confinement = confine(name, server, env, sandbox)?;
    if let Some(c) = &confinement {
        c.install(&mut command);
        // The configured cwd stays the cwd (readable, see `confine`); the work dir is TMPDIR.
        if !server.cwd.is_empty() {
            command.current_dir(&server.cwd);
        }
    }
    let mut wrapped = process_wrap::tokio::CommandWrap::from(command);
    // A session of its own: a process group to end it with, and no terminal to type into.
    wrapped.wrap(process_wrap::tokio::ProcessSession);
    let (mut child, stderr) =
        ChildTransport::spawn(name, wrapped).map_err(|e| spawn_error(name, &program, e))?;
    // The ruleset fd closes now; the work dir lives as long as the server.
    child.keep_workdir(confinement.map(|c| c.into_workdir()));
    let last_words = LastWords::new(server);
    Ok(Started {
        pid: child.id(),
        reader: read_stderr(name, stderr, last_words.clone()),
        child,
        last_words,
    })
}

/// The box of server `name`: its program's install prefix, its fixed file arguments (a
/// script) and its cwd are its own (read and execute); the rest as `mcp.servers.NAME.sandbox`
/// widens it. `None`: `tools.sandbox` is not `enforce`.
fn confine(
    name: &str,
    server: &McpServer,
    env: &HashMap<String, String>,
    sandbox: hermes_engine::tools::sandbox::Mode,
) -> Result<Option<hermes_engine::tools::sandbox::Confinement>, McpError> {
    let mut policy = hermes_engine::tools::sandbox::Policy::new(
        sandbox,
        &server.sandbox,
        false,
        env.get("HOME").map(std::path::Path::new),
        format!("mcp.servers.{name}"),
    );
    policy.warn_widening();
    let Some((program, args)) = server.command.split_first() else {
        return Ok(None);
    };
    policy.own_program(program, env.get("PATH").map(String::as_str));
    for a in args {
        let a = std::path::Path::new(a);
        if a.is_absolute()
            && a.is_file()
            && let Some(dir) = a.parent()
        {
            policy.own_dir(dir);
        }
    }
    if !server.cwd.is_empty() {
        policy.own_dir(std::path::Path::new(&server.cwd));
    }
    // No timeout: a server runs as long as the daemon.
    policy.prepare(None).map_err(|e| McpError::Sandbox {
        server: name.to_string(),
        message: e.to_string(),
    })
}

/// The program under `name`'s settings: no shell, a clean environment, its own cwd.
fn build_command(
    name: &str,
    server: &McpServer,
    env: &HashMap<String, String>,
) -> Result<tokio::process::Command, McpError> {
    let Some((program, args)) = server.command.split_first() else {
        // Validation refuses this; say so rather than start nothing.
        return Err(McpError::NotFound {
            server: name.to_string(),
            program: String::new(),
        });
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args).env_clear().kill_on_drop(true);
    for key in INHERITED_ENV {
        if let Some(v) = env.get(key) {
            cmd.env(key, v);
        }
    }
    cmd.envs(&server.env);
    if !server.cwd.is_empty() {
        // A missing cwd fails the spawn with the same error as a missing program.
        if !std::path::Path::new(&server.cwd).is_dir() {
            return Err(McpError::NoCwd {
                server: name.to_string(),
                cwd: server.cwd.clone(),
            });
        }
        cmd.current_dir(&server.cwd);
    }
    Ok(cmd)
}

fn spawn_error(name: &str, program: &str, e: std::io::Error) -> McpError {
    match e.kind() {
        std::io::ErrorKind::NotFound => McpError::NotFound {
            server: name.to_string(),
            program: program.to_string(),
        },
        _ => McpError::Spawn {
            server: name.to_string(),
            program: program.to_string(),
            reason: e.to_string(),
        },
    }
}

/// Read the server's stderr to its end: each line at debug, the last few kept.
fn read_stderr(
    name: &str,
    stderr: tokio::process::ChildStderr,
    last_words: LastWords,
) -> JoinHandle<()> {
    let name = name.to_string();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let line = last_words.redact(&line);
            tracing::debug!(server = %name, "mcp server stderr: {}", hermes_store::util::text::for_terminal(&line));
            last_words.push(&line);
        }
    })
}

/// The streamable-HTTP transport for `server.url`, with its headers (marked sensitive, so no
/// debug output shows them).
fn http_transport(
    name: &str,
    server: &McpServer,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, McpError> {
    use reqwest::header::{HeaderName, HeaderValue};
    let mut headers = HashMap::new();
    for (key, value) in &server.headers {
        let bad = || McpError::Header {
            server: name.to_string(),
            header: key.clone(),
        };
        let header = HeaderName::from_bytes(key.as_bytes()).map_err(|_| bad())?;
        let mut value = HeaderValue::from_str(value).map_err(|_| bad())?;
        value.set_sensitive(true);
        headers.insert(header, value);
    }
    let config =
        StreamableHttpClientTransportConfig::with_uri(server.url.as_str()).custom_headers(headers);
    Ok(StreamableHttpClientTransport::from_config(config))
}

/// Why a handshake did not complete, before it is told with the server's name.
enum Failure {
    Timeout,
    Refused(String),
}

impl Failure {
    /// The error for `name`; `url` (if any) is shown without its query, which may hold a key.
    fn into_error(self, name: &str, last_words: String, url: &str) -> McpError {
        match self {
            Failure::Timeout => McpError::HandshakeTimeout {
                server: name.to_string(),
                seconds: HANDSHAKE_TIMEOUT.as_secs(),
                last_words,
            },
            Failure::Refused(reason) => McpError::Handshake {
                server: name.to_string(),
                reason: redact_url(&reason, url),
                last_words,
            },
        }
    }
}

async fn handshake<T, E, A>(
    handler: Handler,
    transport: T,
) -> Result<RunningService<RoleClient, Handler>, Failure>
where
    T: IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, handler.serve(transport)).await {
        Err(_) => Err(Failure::Timeout),
        Ok(Err(e)) => Err(Failure::Refused(init_error_text(&e))),
        Ok(Ok(service)) => {
            // rmcp keeps `tools/list` pages for as long as the server's `ttlMs` says: a server
            // could have it hold hundreds of huge pages. The manager lists again when told to.
            service
                .peer()
                .set_response_cache_config(ClientCacheConfig::disabled())
                .await;
            Ok(service)
        }
    }
}

/// A failed handshake in words: the transport's own error without rmcp's type names.
fn init_error_text(e: &rmcp::service::ClientInitializeError) -> String {
    use rmcp::service::ClientInitializeError as E;
    match e {
        E::TransportError { error, context } => {
            format!(
                "{} (while trying to {context})",
                transport_error_text(error)
            )
        }
        E::ConnectionClosed(_) => "it closed the connection (did the program exit?)".into(),
        other => hermes_store::util::error_chain(other),
    }
}

/// A transport error's cause chain, without the wrapper that names rmcp's types.
pub(super) fn transport_error_text(e: &rmcp::transport::DynamicTransportError) -> String {
    hermes_store::util::error_chain(&*e.error as &(dyn std::error::Error + 'static))
}

/// A failed request in words (see [`transport_error_text`]).
pub(super) fn service_error_text(e: &rmcp::service::ServiceError) -> String {
    match e {
        rmcp::service::ServiceError::TransportSend(t) => transport_error_text(t),
        other => hermes_store::util::error_chain(other),
    }
}

/// `text` with `url` shortened to the part before its query.
pub(super) fn redact_url(text: &str, url: &str) -> String {
    match url.split_once('?') {
        Some((bare, _)) if !url.is_empty() => text.replace(url, &format!("{bare}?…")),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_a_query_are_not_repeated() {
        let url = "https://mcp.example.org/mcp?key=s3cret";
        let text = format!("error sending request for url ({url})");
        assert_eq!(
            redact_url(&text, url),
            "error sending request for url (https://mcp.example.org/mcp?…)"
        );
        assert_eq!(redact_url("plain", ""), "plain");
    }

    #[test]
    fn last_words_keep_the_last_lines_cut_short_and_without_secrets() {
        let server = McpServer {
            env: [("API_KEY".to_string(), "sk-s3cret-value".to_string())].into(),
            ..Default::default()
        };
        let w = LastWords::new(&server);
        assert_eq!(
            w.redact("  rejected key sk-s3cret-value  "),
            "rejected key <redacted>"
        );
        assert_eq!(w.suffix(), "");
        for i in 0..8 {
            w.push(&format!("line {i}"));
        }
        w.push(&"x".repeat(1000));
        assert_eq!(hermes_store::util::lock(&w.lines).len(), LAST_WORDS_LINES);
        assert!(w.suffix().len() < LAST_WORDS_CHARS + 20);
        w.push("   ");
        assert!(w.suffix().starts_with("; it said: xxx"));
    }
}
