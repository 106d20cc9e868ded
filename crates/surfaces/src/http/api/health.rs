//! `GET /healthz` and `GET /v1/mcp`: what the daemon and its parts are doing, for monitors,
//! `doctor` and scripts.

use crate::http::guard::bearer_token;
use crate::http::throttle::{Door, Peer};
use crate::http::{ApiResult, ApiState, token_matches};
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::IntoResponse;
use hermes_engine::memory::LongTerm;
use serde_json::json;

/// `/healthz` is open to anyone who reaches the port (monitors send no token): without the
/// token it says what is wrong and what to do, never where the database is — no file, host
/// or URL. With the token (or when none is configured: loopback only), it names it too.
pub(crate) async fn health(
    State(s): State<ApiState>,
    Peer(peer): Peer,
    headers: HeaderMap,
) -> ApiResult {
    let store = s.agent.store();
    let reading = store.health().await?;
    // Recall by meaning: its server away means keyword recall only, until it answers.
    let mut embeddings = s.memory.as_ref().and_then(LongTerm::meaning);
    let meaning_away = s.memory.as_ref().and_then(LongTerm::meaning_trouble);
    // Down, or messages arrive that cannot be decrypted: said, never green.
    let mut matrix = s.matrix.status();
    // A channel down says why in words that can name the homeserver, the account or the data
    // dir (standing by names nothing).
    let matrix_down =
        matrix.state == hermes_engine::channels::matrix::State::Down && matrix.error.is_some();
    // Telegram's network errors can name its API server; a refused token names nothing.
    let mut telegram = s.telegram.status();
    let telegram_down = telegram.state == hermes_engine::channels::State::Down
        && telegram.error.is_some()
        && !telegram.protocol.revoked;
    // Asked once (a wrong token counts against the sender), and only when there is a place
    // to name.
    let told = (reading.fault.is_some() || meaning_away.is_some() || matrix_down || telegram_down)
        && knows_the_token(&s, peer, &headers);
    let storage = match reading.fault {
        None => "ok".to_string(),
        Some(f) if told => format!("{f} at {}: {}", store.path().display(), f.hint()),
        Some(f) => format!("{f}: {}", f.hint()),
    };
    if let Some(e) = embeddings.as_mut().filter(|e| e.reason.is_some() && !told) {
        // The reason names the server's address.
        e.reason = Some(
            "the embedding server cannot be reached or failed; `hermes-agent doctor`, or /healthz with the token, says where and why"
                .into(),
        );
    }
    let index_trouble = s.memory.as_ref().and_then(LongTerm::trouble);
    let memory_index = index_word(s.memory.is_some(), index_trouble.as_deref());
    // The mailbox comes back by itself; meanwhile mail waits there, nothing is lost.
    let inbox = s.inbox.health();
    let mcp = mcp_health(&s.mcp);
    if !told {
        if matrix_down {
            matrix.error = Some(not_reading("Matrix"));
        }
        if telegram_down {
            telegram.error = Some(not_reading("Telegram"));
        }
    }
    let degraded = !troubles(&Parts {
        storage: reading.fault.is_some(),
        memory_index: index_trouble.is_some(),
        embeddings: meaning_away.is_some(),
        inbox: matches!(inbox, hermes_engine::inbox::Health::Down { .. }),
        matrix: matrix.degraded(),
        telegram: telegram.degraded(),
        mcp: mcp.as_ref().is_some_and(|m| !m.failed.is_empty()),
    })
    .is_empty();
    Ok(Json(json!({
        "status": if degraded { "degraded" } else { "ok" },
        "storage": storage,
        "memory_index": memory_index,
        "version": env!("CARGO_PKG_VERSION"),
        // Which data dir this daemon serves (its node id, a UUID naming nothing): a client
        // that found it through a data dir's address file checks it is that data dir's.
        "node": store.node(),
        "running": s.agent.running_count(),
        // With the database unreachable the count is unknown: null, and health still answers.
        "pending": reading.pending,
        "memory": s.memory.is_some(),
        // null: recall by keyword only (no memory.embeddings).
        "embeddings": embeddings,
        "inbox": inbox.word(),
        // null without channels.matrix.
        "matrix": s.matrix.is_on().then_some(matrix),
        // null without channels.telegram.
        "telegram": s.telegram.is_on().then_some(telegram),
        "sandbox": sandbox_health(s.agent.settings().tools.sandbox),
        // null without mcp.servers.
        "mcp": mcp,
    }))
    .into_response())
}

/// Which parts are not well, each a flag: what makes `/healthz` say `degraded`.
struct Parts {
    storage: bool,
    memory_index: bool,
    embeddings: bool,
    inbox: bool,
    matrix: bool,
    telegram: bool,
    mcp: bool,
}

/// The parts not well, named for a person ("storage", "Matrix" …); empty: all are.
fn troubles(p: &Parts) -> Vec<&'static str> {
    [
        (p.storage, "storage"),
        (p.memory_index, "memory index"),
        (p.embeddings, "embeddings"),
        (p.inbox, "mailbox"),
        (p.matrix, "Matrix"),
        (p.telegram, "Telegram"),
        (p.mcp, "MCP servers"),
    ]
    .into_iter()
    .filter_map(|(bad, name)| bad.then_some(name))
    .collect()
}

/// What `/healthz` would call degraded now, by part (the dashboard's overview shows it).
pub(crate) async fn degraded_parts(s: &ApiState) -> Vec<&'static str> {
    let storage = match s.agent.store().health().await {
        Ok(reading) => reading.fault.is_some(),
        Err(_) => true,
    };
    troubles(&Parts {
        storage,
        memory_index: s.memory.as_ref().and_then(LongTerm::trouble).is_some(),
        embeddings: s
            .memory
            .as_ref()
            .and_then(LongTerm::meaning_trouble)
            .is_some(),
        inbox: matches!(s.inbox.health(), hermes_engine::inbox::Health::Down { .. }),
        matrix: s.matrix.status().degraded(),
        telegram: s.telegram.status().degraded(),
        mcp: mcp_health(&s.mcp).is_some_and(|m| !m.failed.is_empty()),
    })
}

/// The MCP servers in two figures: how many run, and which failed to start (their tools are
/// not offered until one does). Names only: a reason can name a command, a path or a URL, and
/// `GET /v1/mcp` (with the token) gives it.
#[derive(serde::Serialize)]
struct McpHealth {
    running: usize,
    failed: Vec<String>,
}

fn mcp_health(mcp: &crate::mcp::McpManager) -> Option<McpHealth> {
    let servers = mcp.status();
    if servers.is_empty() {
        return None;
    }
    let running = servers
        .iter()
        .filter(|s| s.state == crate::mcp::ServerState::Running)
        .count();
    let failed = servers
        .into_iter()
        .filter(|s| matches!(s.state, crate::mcp::ServerState::Failed(_)))
        .map(|s| s.name)
        .collect();
    Some(McpHealth { running, failed })
}

/// The memory index's state in a word, or why it is being rebuilt: facts stay saved without the
/// index, and recall reads the database until it is back.
fn index_word(memory: bool, trouble: Option<&str>) -> String {
    match (memory, trouble) {
        (false, _) => "off".to_string(),
        (true, None) => "ok".to_string(),
        (true, Some(why)) => format!("rebuilding (recall reads the database meanwhile): {why}"),
    }
}

/// What a channel down says to a caller without the token: its own error can name the server,
/// the account or the data dir.
fn not_reading(channel: &str) -> String {
    format!(
        "the {channel} channel is not reading; `hermes-agent doctor`, or /healthz with the token, says why"
    )
}

/// Whether the request carries the server's token (or none is configured). A wrong token
/// counts against the sender's address like one sent to the API, so `/healthz` cannot be used
/// to guess it unthrottled; a locked-out address gets the answer given without a token.
fn knows_the_token(s: &ApiState, peer: Option<std::net::IpAddr>, headers: &HeaderMap) -> bool {
    if s.token.is_empty() {
        return true;
    }
    let Some(given) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
    else {
        return false;
    };
    if s.logins.check(peer).is_err() {
        return false;
    }
    if token_matches(given, &s.token) {
        s.logins.succeeded(peer);
        true
    } else {
        s.logins.failed(peer, Door::Api);
        false
    }
}

/// `tools.sandbox` and what of it this kernel cannot enforce (empty: nothing).
fn sandbox_health(mode: hermes_engine::tools::sandbox::Mode) -> serde_json::Value {
    let support = hermes_engine::tools::sandbox::Support::get();
    json!({
        "mode": mode,
        "landlock_abi": support.landlock_abi,
        "missing": support.missing(),
    })
}

/// Each configured room of the Matrix channel as the daemon's connection finds it
/// (`{"rooms": [{name, ok, detail}]}`): what `doctor` shows with the daemon up, whose session
/// and keys it cannot open itself.
pub(crate) async fn matrix_rooms(State(s): State<ApiState>) -> ApiResult {
    if !s.matrix.is_on() {
        return Err(crate::http::ApiError::not_found(
            "channels.matrix is not configured",
        ));
    }
    let Some(rooms) = s.matrix.look().await else {
        return Err(crate::http::ApiError::unavailable(
            "the Matrix channel is not connected yet; /healthz says why",
        ));
    };
    let rooms: Vec<serde_json::Value> = rooms
        .into_iter()
        .map(|(name, found)| {
            let (ok, detail) = match found {
                Ok(d) => (true, d),
                Err(d) => (false, d),
            };
            json!({"name": name, "ok": ok, "detail": detail})
        })
        .collect();
    Ok(Json(json!({ "rooms": rooms })).into_response())
}

/// Each MCP server's state and tools (`{"servers": [...]}`): for `doctor` and scripts.
pub(crate) async fn mcp_servers(State(s): State<ApiState>) -> ApiResult {
    Ok(Json(json!({ "servers": s.mcp.status() })).into_response())
}
