//! Running a manifest tool: the command (no shell, capped output, a clean environment) or
//! the HTTP request, and mapping what happened to a [`ToolError`].

use super::*;

/// The CPU-time base of a tool without its own timeout (the registry's default applies to
/// its wall clock; this only bounds a spinning child the kill somehow missed).
const DEFAULT_CPU_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A call's process group, killed when the call is over.
struct ProcessGroup(u32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        #[cfg(unix)]
        if let Ok(pgid) = i32::try_from(self.0) {
            // SAFETY: kill(2) takes plain integers and touches no memory of ours. A group whose
            // members all exited answers ESRCH, which is the normal case and ignored.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
    }
}

impl ManifestTool {
    /// The manifest file this tool came from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    async fn run_command(
        &self,
        program: &str,
        templates: &[Template],
        env: &[(String, String)],
        args: &Map<String, Value>,
    ) -> Result<Value, ToolError> {
        let mut cmd = command(program, templates, env, args);
        // Kept to the end: the work dir is removed when the call is over.
        let confinement = self
            .sandbox
            .prepare(Some(self.info.timeout.unwrap_or(DEFAULT_CPU_TIMEOUT)))
            .map_err(|e| ToolError::Failed(format!("'{program}' not run: {e}")))?;
        if let Some(c) = &confinement {
            c.install(&mut cmd);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| ToolError::Failed(format!("cannot run '{program}': {e}")))?;
        // However the call ends — its answer, or its timeout dropping this future — whatever
        // the tool started (a fork bomb's children, a forgotten background job) is killed with
        // it, not only the direct child that `kill_on_drop` reaches.
        let _group = child.id().map(ProcessGroup);
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            return Err(ToolError::Failed(format!(
                "cannot capture the output of '{program}'"
            )));
        };
        let (out, err, status) = tokio::join!(
            read_capped(stdout, MAX_OUTPUT_BYTES),
            read_tail(stderr, STDERR_TAIL_BYTES),
            child.wait()
        );
        let status =
            status.map_err(|e| ToolError::Failed(format!("cannot wait for '{program}': {e}")))?;
        let (out, truncated) = out.map_err(|e| {
            ToolError::Failed(format!("cannot read the output of '{program}': {e}"))
        })?;
        if status.success() {
            return Ok(output_value(&out, truncated));
        }
        let err = err.unwrap_or_default();
        Err(ToolError::Failed(self.failure_message(
            status,
            &out,
            &err,
            confinement.is_some(),
        )))
    }

    /// What a failed command says: how it ended, then the tail of what it reported, with the
    /// sandbox's note when `confined` and its limits are the likely cause.
    fn failure_message(
        &self,
        status: std::process::ExitStatus,
        out: &[u8],
        err: &[u8],
        confined: bool,
    ) -> String {
        let mut tail = report_tail(out, err);
        let note = if confined {
            crate::tools::sandbox::refusal_note(&tail, exit_signal(status), self.sandbox.widen_at())
        } else {
            None
        };
        if let Some(note) = note {
            tail = if tail.is_empty() {
                note
            } else {
                format!("{tail} {note}")
            };
        }
        let how = how_it_ended(status);
        if tail.is_empty() {
            how
        } else {
            format!("{how}: {tail}")
        }
    }

    async fn run_http(
        &self,
        method: &reqwest::Method,
        url: &Template,
        json: bool,
        headers: &reqwest::header::HeaderMap,
        client: &reqwest::Client,
        args: &Map<String, Value>,
    ) -> Result<Value, ToolError> {
        let mut target = reqwest::Url::parse(&url.render(args, percent_encode))
            .map_err(|e| ToolError::Failed(format!("the manifest's URL became invalid: {e}")))?;
        let in_url: BTreeSet<&str> = url.params().collect();
        let body_method = matches!(
            *method,
            reqwest::Method::POST | reqwest::Method::PUT | reqwest::Method::PATCH
        );
        let as_body = json && body_method;
        if !as_body {
            let mut query = args
                .iter()
                .filter(|(k, v)| !in_url.contains(k.as_str()) && !v.is_null())
                .peekable();
            // `query_pairs_mut` would leave a bare `?` behind when there is nothing to add.
            if query.peek().is_some() {
                let mut pairs = target.query_pairs_mut();
                for (k, v) in query {
                    pairs.append_pair(k, &value_text(Some(v)));
                }
            }
        }
        let mut req = client
            .request(method.clone(), target)
            .headers(headers.clone());
        if as_body {
            req = req.json(&Value::Object(args.clone()));
        }
        let resp = req.send().await.map_err(request_error)?;
        let status = resp.status();
        let (body, truncated) = read_body(resp).await?;
        if status.is_success() {
            return Ok(output_value(&body, truncated));
        }
        let excerpt = excerpt(&String::from_utf8_lossy(&body));
        let msg = if excerpt.is_empty() {
            format!("HTTP {status}")
        } else {
            format!("HTTP {status}: {excerpt}")
        };
        if status.is_server_error() {
            Err(ToolError::Network(msg))
        } else {
            Err(ToolError::Failed(msg))
        }
    }
}

/// The command of one call: no shell, a clean environment, output captured.
fn command(
    program: &str,
    templates: &[Template],
    env: &[(String, String)],
    args: &Map<String, Value>,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(render_argv(templates, args))
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // A timed-out call drops this future; the child must die with it.
        .kill_on_drop(true);
    // Its own session, so that everything it starts can be ended with its group and no
    // terminal is its (confined or not: a tool typing into the person's shell is no widening).
    // SAFETY: setsid only, async-signal-safe as pre_exec requires.
    unsafe {
        cmd.pre_exec(crate::tools::sandbox::new_session);
    }
    cmd
}

/// The end of what a failed command reported, trimmed; empty when it said nothing.
fn report_tail(out: &[u8], err: &[u8]) -> String {
    let tail = String::from_utf8_lossy(err).trim().to_string();
    if !tail.is_empty() {
        return tail;
    }
    // Some programs report errors on stdout; better than saying nothing.
    let out = String::from_utf8_lossy(out);
    let start = out.len().saturating_sub(STDERR_TAIL_BYTES);
    let start = (start..=out.len())
        .find(|i| out.is_char_boundary(*i))
        .unwrap_or(out.len());
    out[start..].trim().to_string()
}

/// The signal that ended the command, if one did.
#[cfg(unix)]
fn exit_signal(status: std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal()
}

#[cfg(not(unix))]
fn exit_signal(_status: std::process::ExitStatus) -> Option<i32> {
    None
}

/// How a failed command ended: its exit code, or the signal that killed it.
fn how_it_ended(status: std::process::ExitStatus) -> String {
    match (status.code(), exit_signal(status)) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "ended abnormally".to_string(),
    }
}

pub(super) fn render_argv(templates: &[Template], args: &Map<String, Value>) -> Vec<String> {
    templates
        .iter()
        .filter(|t| {
            // An element that is only an absent optional parameter disappears entirely,
            // so `--flag {{x}}`-style pairs should be written as one `--flag={{x}}` element.
            t.sole_param()
                .is_none_or(|p| args.get(p).is_some_and(|v| !v.is_null()))
        })
        .map(|t| t.render(args, |s| s.to_string()))
        .collect()
}

/// Output as a value: JSON when it parses as JSON, else the text. A cut-off output is
/// never valid JSON, so it is text with a note saying so.
pub(super) fn output_value(bytes: &[u8], truncated: bool) -> Value {
    let text = String::from_utf8_lossy(bytes);
    if truncated {
        return Value::String(format!(
            "{text}\n[output cut at {} bytes]",
            MAX_OUTPUT_BYTES
        ));
    }
    let trimmed = text.trim();
    match serde_json::from_str::<Value>(trimmed) {
        Ok(v) if !trimmed.is_empty() => v,
        _ => Value::String(trimmed.to_string()),
    }
}

/// Read up to `cap` bytes, then keep draining so the writer never blocks on a full pipe.
pub(super) async fn read_capped<R: AsyncRead + Unpin>(
    mut r: R,
    cap: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    let mut truncated = false;
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok((out, truncated));
        }
        let room = cap.saturating_sub(out.len());
        if n > room {
            truncated = true;
        }
        out.extend_from_slice(&buf[..n.min(room)]);
    }
}

/// Keep only the last `keep` bytes of a stream.
pub(super) async fn read_tail<R: AsyncRead + Unpin>(
    mut r: R,
    keep: usize,
) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if out.len() > 2 * keep {
            out.drain(..out.len() - keep);
        }
    }
    if out.len() > keep {
        out.drain(..out.len() - keep);
    }
    Ok(out)
}

pub(super) async fn read_body(mut resp: reqwest::Response) -> Result<(Vec<u8>, bool), ToolError> {
    let mut out = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(request_error)? {
        let room = MAX_OUTPUT_BYTES.saturating_sub(out.len());
        if chunk.len() > room {
            out.extend_from_slice(&chunk[..room]);
            // Stop reading: the rest would be thrown away, and dropping the response
            // closes the connection.
            return Ok((out, true));
        }
        out.extend_from_slice(&chunk);
    }
    Ok((out, false))
}

/// A request error without its URL (a query string may carry a key), with its causes.
pub(super) fn request_error(e: reqwest::Error) -> ToolError {
    if let Some(refusal) = crate::tools::builtin::web::guard::find_refusal(&e) {
        // A redirect (or a name) the guard refused: the tool worked, the target is off limits.
        return ToolError::Failed(refusal.to_string());
    }
    let builder = e.is_builder();
    let msg = hermes_store::util::error_chain(&e.without_url());
    if builder {
        ToolError::Failed(msg)
    } else {
        ToolError::Network(msg)
    }
}

pub(super) fn excerpt(body: &str) -> String {
    let collapsed = hermes_store::util::text::collapse(body);
    hermes_store::util::text::cut(&collapsed, BODY_EXCERPT_CHARS).into_owned()
}

impl Tool for ManifestTool {
    fn info(&self) -> &ToolInfo {
        &self.info
    }

    fn keep_fields(&self) -> &[String] {
        &self.keep_fields
    }

    fn call<'a>(
        &'a self,
        args: Value,
        _ctx: &'a ToolContext,
    ) -> BoxFuture<'a, Result<Value, ToolError>> {
        Box::pin(async move {
            let empty = Map::new();
            let args = args.as_object().unwrap_or(&empty);
            match &self.action {
                Action::Command {
                    program,
                    args: t,
                    env,
                } => self.run_command(program, t, env, args).await,
                Action::Http {
                    method,
                    url,
                    json,
                    headers,
                    client,
                } => {
                    self.run_http(method, url, *json, headers, client, args)
                        .await
                }
            }
        })
    }
}
