//! What each MCP server reports: its state, its tools and, for stdio, its process — the shape
//! `doctor` and the dashboard show.
//!
//! Owns: the status types and their text and JSON forms.
//! Must not: carry env values, header values or the URL's query (they may hold secrets).

use chrono::{DateTime, Utc};
use hermes_config::McpTransport;
use serde::Serialize;

/// Where a server is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerState {
    /// The first connection is being made.
    Starting,
    /// Connected; its tools are offered.
    Running,
    /// The last attempt to start it failed (the reason says why and what to change); it is
    /// tried again with backoff. Its tools are not offered.
    Failed(String),
    /// It was running and ended (the reason says how); it is being started again (with
    /// backoff). Its tools are not offered meanwhile.
    Restarting(String),
}

impl ServerState {
    /// The state's word, without the reason: `starting`, `running`, `failed`, `restarting`.
    pub fn word(&self) -> &'static str {
        match self {
            ServerState::Starting => "starting",
            ServerState::Running => "running",
            ServerState::Failed(_) => "failed",
            ServerState::Restarting(_) => "restarting",
        }
    }

    /// Why it failed, or how it ended before this restart.
    pub fn reason(&self) -> Option<&str> {
        match self {
            ServerState::Failed(r) | ServerState::Restarting(r) => Some(r),
            ServerState::Starting | ServerState::Running => None,
        }
    }
}

/// `starting`, `running`, `failed(REASON)`, `restarting(REASON)`.
impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerState::Failed(r) => write!(f, "failed({r})"),
            ServerState::Restarting(r) => write!(f, "restarting({r})"),
            other => f.write_str(other.word()),
        }
    }
}

/// Read back from `{"state", "reason"?}` (the CLI reads a daemon's `GET /v1/mcp`).
impl<'de> serde::Deserialize<'de> for ServerState {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        struct Wire {
            state: String,
            #[serde(default)]
            reason: Option<String>,
        }
        let w = Wire::deserialize(d)?;
        Ok(match w.state.as_str() {
            "starting" => ServerState::Starting,
            "running" => ServerState::Running,
            "restarting" => ServerState::Restarting(w.reason.unwrap_or_default()),
            "failed" => ServerState::Failed(w.reason.unwrap_or_default()),
            other => return Err(serde::de::Error::custom(format!("unknown state '{other}'"))),
        })
    }
}

/// `{"state": "failed", "reason": "…"}`; `reason` only for `failed` and `restarting`.
impl Serialize for ServerState {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("state", self.word())?;
        if let Some(r) = self.reason() {
            map.serialize_entry("reason", r)?;
        }
        map.end()
    }
}

/// One server as `McpManager::status` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ServerStatus {
    /// Its name under `mcp.servers`.
    pub name: String,
    /// `stdio` or `http`.
    pub transport: std::borrow::Cow<'static, str>,
    #[serde(flatten)]
    pub state: ServerState,
    /// Its tools as the model sees them (`NAME__TOOL`), sorted; empty unless running.
    pub tools: Vec<String>,
    /// The process id of a running stdio server.
    pub pid: Option<u32>,
    /// How often it ended after running (each time it is started again).
    pub restarts: u32,
    /// When it entered this state.
    pub since: DateTime<Utc>,
}

pub(super) fn transport_word(t: McpTransport) -> std::borrow::Cow<'static, str> {
    std::borrow::Cow::Borrowed(match t {
        McpTransport::Stdio => "stdio",
        McpTransport::Http => "http",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn states_read_as_words_and_failures_carry_their_reason() {
        assert_eq!(ServerState::Running.to_string(), "running");
        let failed = ServerState::Failed("`uvx` not found".into());
        assert_eq!(failed.to_string(), "failed(`uvx` not found)");
        let status = ServerStatus {
            name: "time".into(),
            transport: "stdio".into(),
            state: failed,
            tools: vec![],
            pid: None,
            restarts: 0,
            since: DateTime::UNIX_EPOCH,
        };
        let v = serde_json::to_value(&status).expect("serialisable");
        assert_eq!(v["state"], json!("failed"));
        assert_eq!(v["reason"], json!("`uvx` not found"));
        let v = serde_json::to_value(ServerState::Restarting("killed by signal 9".into()))
            .expect("serialisable");
        assert_eq!(
            v,
            json!({"state": "restarting", "reason": "killed by signal 9"})
        );
        let back: ServerState = serde_json::from_value(v).expect("readable");
        assert_eq!(back, ServerState::Restarting("killed by signal 9".into()));
    }
}
