//! The remote backend: a running daemon, reached over its HTTP API.
//!
//! Owns: finding the daemon (`DATA_DIR/daemon.addr`, then the configured address), the
//! bearer token, and turning API answers into typed values and API errors into messages.
//! Must not: fall back to the data dir — `connect` decides that, before any call.

use super::{Backend, ClientError, Fired, FoundFact, OnStep, Remembered, Reply};
use hermes_config::Config;
use hermes_engine::agent::{Decision, VIA_HEADER};
use hermes_engine::scheduler::{JobRequest, JobView};
use hermes_store::{Approval, ApprovalState, Origin, Task, TaskRecord, TaskState, Usage};
use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

/// How long a daemon may take to answer `/healthz` before the CLI works without it: a live
/// daemon answers in milliseconds, and every command pays this wait when none is up.
const PROBE_TIMEOUT: Duration = Duration::from_millis(700);
/// Bound on any one API call. Only `run_task` (`hermes-agent mcp`) asks the API to wait on a
/// task, and the API bounds that wait itself; otherwise only a hung daemon comes near it.
const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// A daemon that answered `/healthz`.
pub struct Remote {
    base: String,
    token: String,
    http: reqwest::Client,
    /// How long `run_task` waits: past the API's own bound on a waiting request
    /// (3 × `agent.task_timeout_s` + 30 s), so the API's answer comes first.
    task_wait: Duration,
    /// On whose behalf it creates tasks, jobs and facts, told to the API in `X-Hermes-Origin`;
    /// `None`: the API's own, `api`.
    origin: Option<Origin>,
}

impl Remote {
    /// Look for a daemon: at the address the daemon on this data dir wrote, then at the
    /// configured one (unless `server.port` is 0, or the data dir was named for this command
    /// and the address is on this machine); `None` when nothing answers quickly.
    pub async fn detect(config: &Config) -> Option<Remote> {
        let http = reqwest::Client::builder()
            .timeout(CALL_TIMEOUT)
            .build()
            .ok()?;
        for (base, node) in candidates(config) {
            if answers_health(&http, &base, node.as_deref()).await {
                let task_s = config.settings.agent.task_timeout_s;
                return Some(Remote {
                    base,
                    token: config.settings.server.token.clone(),
                    http,
                    task_wait: Duration::from_secs(task_s.saturating_mul(3).saturating_add(60)),
                    origin: None,
                });
            }
        }
        None
    }

    /// `GET path` of the API, read as `T` (what the trait does not cover, e.g. `/v1/mcp`).
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.typed(Method::GET, path, None).await
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// The same client, creating things on behalf of `origin` (the CLI: `cli`; `hermes-agent
    /// mcp`: `mcp`), as the data-dir backend does.
    pub fn acting_for(mut self, origin: Origin) -> Remote {
        self.origin = Some(origin);
        self
    }

    /// Call the API; a JSON error body becomes an error carrying its message.
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        let req = self.http.request(method, format!("{}{path}", self.base));
        self.send(req, body).await
    }

    /// Send a request built by the caller (e.g. with its own timeout); see [`Remote::call`].
    async fn send(
        &self,
        mut req: reqwest::RequestBuilder,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        if !self.token.is_empty() {
            req = req.bearer_auth(&self.token);
        }
        if let Some(origin) = self.origin {
            req = req.header("x-hermes-origin", origin.as_str());
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| self.unreachable(e))?;
        let status = resp.status();
        let value: Value = if status == StatusCode::NO_CONTENT {
            Value::Null
        } else {
            resp.json().await.unwrap_or(Value::Null)
        };
        if status.is_success() {
            return Ok(value);
        }
        Err(refused(status, &value))
    }

    fn unreachable(&self, source: reqwest::Error) -> ClientError {
        ClientError::Unreachable {
            base: self.base.clone(),
            source,
        }
    }

    fn garbled(&self, what: &str, e: serde_json::Error) -> ClientError {
        ClientError::Garbled {
            base: self.base.clone(),
            what: what.to_string(),
            detail: e.to_string(),
        }
    }

    /// Call the API and read the answer as `T`.
    async fn typed<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<T, ClientError> {
        let value = self.call(method, path, body).await?;
        serde_json::from_value(value).map_err(|e| self.garbled(path, e))
    }
}

impl Remote {
    /// `GET /v1/tasks/{id}/events`, read as it streams: a `step` event per trace row, then
    /// `state`, after which the task is fetched as it ended.
    async fn follow_events(&self, id: &str, on_step: &OnStep) -> Result<Task, ClientError> {
        let url = format!("{}/v1/tasks/{}/events", self.base, seg(id)?);
        let mut req = self.http.get(url).timeout(self.task_wait);
        if !self.token.is_empty() {
            req = req.bearer_auth(&self.token);
        }
        let mut resp = req.send().await.map_err(|e| self.unreachable(e))?;
        let status = resp.status();
        if !status.is_success() {
            let v: Value = resp.json().await.unwrap_or(Value::Null);
            return Err(refused(status, &v));
        }
        let mut buffer = String::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.unreachable(e))? {
            buffer.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let (event, data) = sse_fields(&block);
                match event {
                    "step" => on_step(
                        &serde_json::from_str(&data).map_err(|e| self.garbled("a step", e))?,
                    ),
                    "state" => return Ok(self.task(id).await?.task),
                    _ => {}
                }
            }
        }
        Err(ClientError::Broken(format!(
            "the daemon closed the event stream of task {id} before the task ended"
        )))
    }
}

/// The daemon's JSON error (`{"error": {"code", "message"}}`) as a [`ClientError`].
fn refused(status: StatusCode, body: &Value) -> ClientError {
    let field = |name: &str| {
        body.pointer(&format!("/error/{name}"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    ClientError::Refused {
        status: status.as_u16(),
        code: field("code").unwrap_or_default(),
        message: field("message").unwrap_or_else(|| format!("the daemon answered {status}")),
    }
}

/// An event block's `event:` name and its `data:` lines joined.
fn sse_fields(block: &str) -> (&str, String) {
    let mut event = "message";
    let mut data = Vec::new();
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            event = v.trim();
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push(v.strip_prefix(' ').unwrap_or(v));
        }
    }
    (event, data.join("\n"))
}

impl Backend for Remote {
    fn watch<'a>(&'a self, id: &'a str, on_step: &'a OnStep) -> Reply<'a, Task> {
        Box::pin(self.follow_events(id, on_step))
    }

    fn daemon(&self) -> Option<&str> {
        Some(&self.base)
    }

    fn tasks(&self, state: Option<TaskState>, limit: i64) -> Reply<'_, Vec<Task>> {
        Box::pin(async move {
            let mut path = format!("/v1/tasks?limit={limit}");
            if let Some(s) = state {
                path.push_str(&format!("&state={s}"));
            }
            #[derive(Deserialize)]
            struct List {
                tasks: Vec<Task>,
            }
            Ok(self.typed::<List>(Method::GET, &path, None).await?.tasks)
        })
    }

    fn task<'a>(&'a self, id: &'a str) -> Reply<'a, TaskRecord> {
        Box::pin(async move {
            let path = format!("/v1/tasks/{}", seg(id)?);
            self.typed(Method::GET, &path, None).await
        })
    }

    fn jobs(&self) -> Reply<'_, Vec<JobView>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct List {
                jobs: Vec<JobView>,
            }
            Ok(self
                .typed::<List>(Method::GET, "/v1/jobs", None)
                .await?
                .jobs)
        })
    }

    fn add_job(&self, job: JobRequest) -> Reply<'_, JobView> {
        Box::pin(async move {
            let body = serde_json::to_value(job).map_err(|e| self.garbled("a job", e))?;
            self.typed(Method::POST, "/v1/jobs", Some(body)).await
        })
    }

    fn remove_job<'a>(&'a self, id: &'a str) -> Reply<'a, ()> {
        Box::pin(async move {
            let path = format!("/v1/jobs/{}", seg(id)?);
            self.call(Method::DELETE, &path, None).await.map(drop)
        })
    }

    fn fire_job<'a>(&'a self, id: &'a str) -> Reply<'a, Fired> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Started {
                task_id: String,
            }
            let path = format!("/v1/jobs/{}/run", seg(id)?);
            let started: Started = self.typed(Method::POST, &path, None).await?;
            Ok(Fired::OnDaemon {
                base: self.base.clone(),
                task_id: started.task_id,
            })
        })
    }

    fn pause_job<'a>(&'a self, id: &'a str, paused: bool) -> Reply<'a, JobView> {
        Box::pin(async move {
            let verb = if paused { "pause" } else { "resume" };
            let path = format!("/v1/jobs/{}/{verb}", seg(id)?);
            self.typed(Method::POST, &path, None).await
        })
    }

    fn remember<'a>(&'a self, text: &'a str, tags: &'a [String]) -> Reply<'a, Remembered> {
        Box::pin(async move {
            let body = json!({"text": text, "tags": tags});
            self.typed(Method::POST, "/v1/memory", Some(body)).await
        })
    }

    fn recall<'a>(&'a self, query: &'a str, k: usize) -> Reply<'a, Vec<FoundFact>> {
        Box::pin(async move {
            #[derive(Deserialize)]
            struct Found {
                facts: Vec<FoundFact>,
            }
            let path = format!("/v1/memory?q={}&k={k}", form_urlencode(query));
            Ok(self.typed::<Found>(Method::GET, &path, None).await?.facts)
        })
    }

    fn forget<'a>(&'a self, id: &'a str) -> Reply<'a, ()> {
        Box::pin(async move {
            let path = format!("/v1/memory/{}", seg(id)?);
            self.call(Method::DELETE, &path, None).await.map(drop)
        })
    }

    fn approvals(&self, state: Option<ApprovalState>) -> Reply<'_, Vec<Approval>> {
        Box::pin(async move {
            let mut path = "/v1/approvals?limit=1000".to_string();
            if let Some(s) = state {
                path.push_str(&format!("&state={s}"));
            }
            #[derive(Deserialize)]
            struct List {
                approvals: Vec<Approval>,
            }
            Ok(self
                .typed::<List>(Method::GET, &path, None)
                .await?
                .approvals)
        })
    }

    fn decide<'a>(&'a self, id: &'a str, decision: Decision) -> Reply<'a, Approval> {
        Box::pin(async move {
            let (verb, body) = match decision {
                Decision::Approve => ("approve", None),
                Decision::Deny { reason } => ("deny", Some(json!({ "reason": reason }))),
            };
            let path = format!("/v1/approvals/{}/{verb}", seg(id)?);
            let req = self
                .http
                .post(format!("{}{path}", self.base))
                .header(VIA_HEADER, "cli");
            let value = self.send(req, body).await?;
            serde_json::from_value(value).map_err(|e| self.garbled(&path, e))
        })
    }

    fn usage(&self, days: u32) -> Reply<'_, Usage> {
        Box::pin(async move {
            let path = format!("/v1/usage?days={days}");
            self.typed(Method::GET, &path, None).await
        })
    }

    fn run_task<'a>(&'a self, task: &'a str, profile: Option<&'a str>) -> Reply<'a, Task> {
        Box::pin(async move {
            let body = json!({"task": task, "profile": profile, "wait": true});
            let req = self
                .http
                .post(format!("{}/v1/tasks", self.base))
                .timeout(self.task_wait);
            let value = self.send(req, Some(body)).await?;
            serde_json::from_value(value).map_err(|e| self.garbled("a task", e))
        })
    }
}

/// The base URLs to probe, in order: the configured address (a fixed port is where the
/// person expects the daemon), then the one the daemon on this data dir wrote (the only way
/// to find one bound to port 0, or to another port than this config says).
fn candidates(config: &Config) -> Vec<(String, Option<String>)> {
    let mut bases = Vec::new();
    // The data dir's own daemon first: one serving it on this machine always leaves its
    // address there. A file left by a daemon killed since may name a port another data dir's
    // daemon took: the answer there must carry this data dir's node id.
    match super::addr::read_addr(&config.data_dir) {
        Ok(Some(addr)) => bases.push((format!("http://{}", reachable(addr)), own_node(config))),
        Ok(None) => {}
        // A broken file only costs the way to a daemon on another port; say why it was skipped.
        Err(e) => tracing::warn!("{e}"),
    }
    let s = &config.settings.server;
    // With the data dir named for this command, a daemon on this machine at the configured
    // port that did not answer through that data dir's address serves another data dir: going
    // through it would act on the wrong tasks, jobs and facts. One elsewhere (another host
    // sharing the database) is still asked.
    let another_data_dirs = config.data_dir_named && on_this_machine(&s.host);
    if s.port != 0 && !another_data_dirs {
        let host = match s.host.as_str() {
            // A wildcard bind is reachable on loopback.
            "0.0.0.0" | "::" | "[::]" => "127.0.0.1".to_string(),
            h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
            h => h.to_string(),
        };
        let base = format!("http://{host}:{}", s.port);
        if !bases.iter().any(|(b, _)| *b == base) {
            // Another host sharing the database is another node: any node id answers.
            bases.push((base, None));
        }
    }
    bases
}

/// This data dir's node id, if a daemon ever served it (read only: the CLI writes none).
fn own_node(config: &Config) -> Option<String> {
    let path = config.data_dir.join(hermes_engine::metrics::NODE_ID_FILE);
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// Whether `server.host` is this machine: loopback, `localhost` or a wildcard bind.
fn on_this_machine(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    bare.eq_ignore_ascii_case("localhost")
        || bare
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
}

/// A bound address as a client reaches it: a wildcard bind answers on loopback.
fn reachable(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

/// Whether a daemon answers at `base`, healthy enough to talk to, and (with `node`) is the
/// node that serves this data dir.
async fn answers_health(http: &reqwest::Client, base: &str, node: Option<&str>) -> bool {
    let Ok(probe) = http
        .get(format!("{base}/healthz"))
        .timeout(PROBE_TIMEOUT)
        .send()
        .await
    else {
        return false;
    };
    let Ok(body) = probe.json::<Value>().await else {
        return false;
    };
    if let (Some(want), Some(serves)) = (node, body.get("node").and_then(Value::as_str))
        && want != serves
    {
        tracing::info!(%base, "the daemon at this data dir's old address serves another data dir now; not used");
        return false;
    }
    // A degraded daemon (its disk full, say) still owns the data dir: talk to it, and let its
    // errors say what is wrong.
    matches!(
        body.get("status").and_then(Value::as_str),
        Some("ok" | "degraded")
    )
}

/// An id as one URL path segment: `tasks show ../jobs` must not reach another endpoint, nor
/// an empty id the collection's own URL (its "no such endpoint" would hide the mistake).
fn seg(id: &str) -> Result<String, ClientError> {
    if id.trim().is_empty() {
        return Err(ClientError::Invalid(
            "the id is empty; the list commands (`tasks list`, `jobs list` …) show the ids".into(),
        ));
    }
    Ok(form_urlencode(id))
}

fn form_urlencode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hermes_config::Settings;

    fn config(host: &str, port: u16, data_dir: &std::path::Path) -> Config {
        let mut s = Settings::default();
        s.server.host = host.into();
        s.server.port = port;
        Config::from_settings(s, data_dir.to_path_buf())
    }

    /// The candidates' addresses, in order.
    fn bases(c: &Config) -> Vec<String> {
        candidates(c).into_iter().map(|(base, _)| base).collect()
    }

    #[test]
    fn the_address_file_first_then_the_configured_port() {
        let dir = tempfile::tempdir().expect("temp dir");
        let c = config("0.0.0.0", 8765, dir.path());
        assert_eq!(bases(&c), ["http://127.0.0.1:8765"]);
        let addr: SocketAddr = "0.0.0.0:41234".parse().expect("an address");
        let _file = crate::client::addr::AddrFile::write(dir.path(), addr).expect("written");
        assert_eq!(
            bases(&c),
            ["http://127.0.0.1:41234", "http://127.0.0.1:8765"]
        );
        // A data dir named for the command: a daemon here on the configured port is not its
        // own; another host's still is.
        let mut named = config("0.0.0.0", 8765, dir.path());
        named.data_dir_named = true;
        assert_eq!(bases(&named), ["http://127.0.0.1:41234"]);
        let mut far = config("192.0.2.7", 8765, dir.path());
        far.data_dir_named = true;
        assert_eq!(
            bases(&far),
            ["http://127.0.0.1:41234", "http://192.0.2.7:8765"]
        );
        // The file's daemon must be this data dir's node, once one ever served it; the
        // configured port's may be another host's.
        assert!(candidates(&c).iter().all(|(_, node)| node.is_none()));
        std::fs::write(
            dir.path().join(hermes_engine::metrics::NODE_ID_FILE),
            "n-1\n",
        )
        .expect("node id");
        let nodes: Vec<_> = candidates(&c).into_iter().map(|(_, node)| node).collect();
        assert_eq!(nodes, [Some("n-1".to_string()), None]);
        // Port 0 is no address to probe: only the file says where the daemon is.
        let c = config("127.0.0.1", 0, dir.path());
        assert_eq!(bases(&c), ["http://127.0.0.1:41234"]);
        // The same address twice is probed once.
        let c = config("::1", 41234, dir.path());
        let _file =
            crate::client::addr::AddrFile::write(dir.path(), "[::1]:41234".parse().expect("v6"))
                .expect("written");
        assert_eq!(bases(&c), ["http://[::1]:41234"]);
    }

    #[test]
    fn ids_are_one_path_segment() {
        assert_eq!(seg("../jobs").ok().as_deref(), Some("..%2Fjobs"));
        assert!(matches!(seg(""), Err(ClientError::Invalid(_))));
        assert!(matches!(seg("  "), Err(ClientError::Invalid(_))));
        assert_eq!(form_urlencode("cat Miso"), "cat%20Miso");
    }
}
