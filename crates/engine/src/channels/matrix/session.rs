//! The account's session: the client built over the SDK's SQLite store in
//! `DATA_DIR/matrix/store`, logged in once with the password and restored from
//! `DATA_DIR/matrix/session.json` after that — so the agent keeps one device and its keys
//! across restarts instead of appearing as a new, unverified device each time.
//!
//! A session file and a store always belong together: a login (no session file, or one the
//! server no longer accepts) sets the old store aside first (`store.old-<time>`), because
//! the SDK refuses a store whose keys are another device's.

use hermes_config::MatrixSettings;
use matrix_sdk::Client;
use matrix_sdk::authentication::matrix::MatrixSession;
use matrix_sdk::config::RequestConfig;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Each request's bound (a sync's long poll is added to it by the SDK).
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How the agent's device is named in other clients' device lists.
const DEVICE_NAME: &str = "hermes-agent";

/// Why the channel cannot log in. Never holds the password, the token or a key.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    #[error(
        "no Matrix session yet and channels.matrix.password is empty; set password: ${{MATRIX_PASSWORD}} \
         for the first login (the session is kept in {dir} after it)"
    )]
    NoPassword { dir: String },
    #[error("cannot use {path}: {source}; check the data dir's permissions")]
    Files {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} holds a session of {found}, not of channels.matrix.user {configured}; move it away to \
         log in as {configured}"
    )]
    OtherAccount {
        path: String,
        found: String,
        configured: String,
    },
    #[error(
        "the homeserver {homeserver} refused the login of {user}: {reason}; check channels.matrix.user and password"
    )]
    Refused {
        homeserver: String,
        user: String,
        reason: String,
    },
    #[error("cannot reach the homeserver {homeserver}: {reason}")]
    Unreachable { homeserver: String, reason: String },
}

impl SessionError {
    /// Whether retrying later may help (a server down), or only a change of settings will.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, SessionError::Unreachable { .. })
    }
}

fn files(path: &Path) -> impl FnOnce(std::io::Error) -> SessionError + '_ {
    move |source| SessionError::Files {
        path: path.display().to_string(),
        source,
    }
}

/// A logged-in client of `s` over the session and store in `dir`: the saved session
/// restored, or a new login (saved at once).
pub(crate) async fn connect(s: &MatrixSettings, dir: &Path) -> Result<Client, SessionError> {
    create_private_dir(dir)?;
    let session_path = dir.join("session.json");
    let saved = read_session(&session_path)?;
    if let Some(session) = &saved
        && session.meta.user_id.as_str() != s.user.trim()
    {
        return Err(SessionError::OtherAccount {
            path: session_path.display().to_string(),
            found: session.meta.user_id.to_string(),
            configured: s.user.trim().to_string(),
        });
    }
    if let Some(session) = saved {
        let client = build(s, dir).await?;
        match client.restore_session(session).await {
            Ok(()) => match client.whoami().await {
                Ok(_) => return Ok(client),
                Err(e) if is_unknown_token(&e) => {
                    tracing::warn!(
                        "the homeserver no longer accepts the saved Matrix session (logged out elsewhere?); logging in again as a new device"
                    );
                }
                Err(e) => return Err(unreachable(s, &e)),
            },
            Err(e) => {
                tracing::warn!(error = %e, "the saved Matrix session cannot be restored; logging in again as a new device");
            }
        }
        drop(client);
        set_store_aside(dir)?;
    } else if dir.join("store").exists() {
        set_store_aside(dir)?;
    }
    login(s, dir, &session_path).await
}

async fn login(
    s: &MatrixSettings,
    dir: &Path,
    session_path: &Path,
) -> Result<Client, SessionError> {
    if s.password.is_empty() {
        return Err(SessionError::NoPassword {
            dir: dir.display().to_string(),
        });
    }
    let client = build(s, dir).await?;
    let login = client
        .matrix_auth()
        .login_username(s.user.trim(), &s.password)
        .initial_device_display_name(DEVICE_NAME)
        .send()
        .await;
    if let Err(e) = login {
        return Err(match e.as_client_api_error() {
            Some(api) => SessionError::Refused {
                homeserver: s.homeserver.clone(),
                user: s.user.clone(),
                reason: format!("{} {}", api.status_code, api_message(api)),
            },
            None => unreachable(s, &e),
        });
    }
    let Some(session) = client.matrix_auth().session() else {
        return Err(SessionError::Refused {
            homeserver: s.homeserver.clone(),
            user: s.user.clone(),
            reason: "the login gave no session".into(),
        });
    };
    write_session(session_path, &session)?;
    tracing::info!(user = %s.user, device = %session.meta.device_id, "logged in to Matrix; the session is kept for the next start");
    Ok(client)
}

async fn build(s: &MatrixSettings, dir: &Path) -> Result<Client, SessionError> {
    Client::builder()
        .homeserver_url(s.homeserver.trim())
        .sqlite_store(dir.join("store"), None)
        .request_config(RequestConfig::new().timeout(REQUEST_TIMEOUT).retry_limit(3))
        .build()
        .await
        .map_err(|e| SessionError::Unreachable {
            homeserver: s.homeserver.clone(),
            reason: e.to_string(),
        })
}

/// Whether the server said the access token is not (or no longer) valid.
pub(crate) fn is_unknown_token(e: &matrix_sdk::HttpError) -> bool {
    e.as_client_api_error()
        .is_some_and(|api| api.status_code == 401)
}

fn api_message(api: &matrix_sdk::ruma::api::error::Error) -> String {
    match &api.body {
        matrix_sdk::ruma::api::error::ErrorBody::Standard(b) => b.message.clone(),
        other => format!("{other:?}").chars().take(200).collect(),
    }
}

fn unreachable(s: &MatrixSettings, e: &impl std::fmt::Display) -> SessionError {
    SessionError::Unreachable {
        homeserver: s.homeserver.clone(),
        reason: e.to_string(),
    }
}

fn read_session(path: &Path) -> Result<Option<MatrixSession>, SessionError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(files(path)(e)),
    };
    match serde_json::from_str(&text) {
        Ok(s) => Ok(Some(s)),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "the Matrix session file cannot be read; logging in again");
            Ok(None)
        }
    }
}

/// Written whole or not at all (a temporary file renamed), readable by the owner only.
fn write_session(path: &Path, session: &MatrixSession) -> Result<(), SessionError> {
    use std::os::unix::fs::OpenOptionsExt;
    let json = serde_json::to_vec(session).map_err(|e| files(path)(std::io::Error::other(e)))?;
    let tmp = path.with_extension("json.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(files(&tmp))?;
    f.write_all(&json).map_err(files(&tmp))?;
    f.sync_all().map_err(files(&tmp))?;
    std::fs::rename(&tmp, path).map_err(files(path))
}

fn create_private_dir(dir: &Path) -> Result<(), SessionError> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(files(dir))
}

/// Move the SDK's store away (never deleted: it holds the old device's keys, which may still
/// decrypt old messages by hand).
fn set_store_aside(dir: &Path) -> Result<(), SessionError> {
    let store = dir.join("store");
    if !store.exists() {
        return Ok(());
    }
    let aside: PathBuf = dir.join(format!(
        "store.old-{}",
        chrono::Utc::now().format("%Y%m%dT%H%M%S")
    ));
    tracing::warn!(from = %store.display(), to = %aside.display(), "setting the Matrix store of the previous device aside");
    std::fs::rename(&store, &aside).map_err(files(&store))
}
