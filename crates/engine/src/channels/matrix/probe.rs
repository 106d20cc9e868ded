//! `doctor`'s look at the Matrix account when no daemon runs: the session reused (or the
//! first login made, as the daemon would), encryption checked (this device's keys, the
//! account's cross-signing), and each configured room found. Nothing is sent.
//!
//! With a daemon up the store is the daemon's: `doctor` asks it instead (`/healthz`, and
//! `/v1/channels/matrix/rooms`, which runs [`rooms`] on the daemon's connection).

use super::{Probe, session};
use hermes_config::{MatrixSettings, MatrixTarget};
use matrix_sdk::ruma::{RoomId, UserId};
use matrix_sdk::{Client, RoomMemberships};
use std::path::Path;

/// Log in (or reuse the session) under `data_dir` and look; why not, in words.
pub async fn probe(s: &MatrixSettings, data_dir: &Path) -> Result<Probe, String> {
    let dir = data_dir.join("matrix");
    let client = session::connect(s, &dir).await.map_err(|e| e.to_string())?;
    let device = client
        .device_id()
        .map(|d| d.to_string())
        .unwrap_or_default();
    let e2e = client.encryption();
    let encryption = match e2e.get_own_device().await {
        Ok(Some(d)) if d.is_cross_signed_by_owner() => {
            "end-to-end encryption on; this device is cross-signed by the account".to_string()
        }
        Ok(Some(_)) if !s.recovery_key.trim().is_empty() => {
            "end-to-end encryption on; this device is not cross-signed although \
             channels.matrix.recovery_key is set: check the key (the daemon restores the \
             backup with it at start, and logs what the server answered)"
                .to_string()
        }
        Ok(Some(_)) => "end-to-end encryption on; this device is not cross-signed (set \
                        channels.matrix.recovery_key, or verify it from another session)"
            .to_string(),
        Ok(None) => return Err("this device has no encryption keys yet".into()),
        Err(e) => return Err(format!("cannot read this device's keys: {e}")),
    };
    let rooms = rooms(&client, s).await;
    Ok(Probe {
        user: s.user.trim().to_string(),
        device,
        encryption,
        rooms,
    })
}

/// Each configured room of `s` as `client` finds it: its name, and what was found or what is
/// missing (also asked of a running daemon's connection, for `doctor`).
pub(crate) async fn rooms(
    client: &Client,
    s: &MatrixSettings,
) -> Vec<(String, Result<String, String>)> {
    let mut rooms = Vec::new();
    for name in s.rooms.keys() {
        let found = match s.target(name) {
            Some(MatrixTarget::User(user)) => match UserId::parse(user) {
                Ok(id) => match super::send::usable_dm(client, &id).await {
                    Ok(Some(r)) => Ok(format!("encrypted direct room {} with {user}", r.room_id())),
                    Ok(None) => Ok(format!(
                        "no encrypted direct room with {user} in it yet; the next notice creates one"
                    )),
                    Err(e) => Err(format!("cannot read the direct rooms with {user}: {e}")),
                },
                Err(_) => Err(format!("'{user}' is not a user id")),
            },
            Some(MatrixTarget::Room(room)) => match RoomId::parse(room) {
                Ok(id) => match client.get_room(&id) {
                    Some(r) if r.state() == matrix_sdk::RoomState::Joined => {
                        let members = r
                            .members_no_sync(RoomMemberships::ACTIVE)
                            .await
                            .unwrap_or_default();
                        let allowed: Vec<String> = members
                            .iter()
                            .map(|m| m.user_id().to_string())
                            .filter(|u| s.allowed(u).is_some())
                            .collect();
                        if allowed.is_empty() {
                            Err(format!("joined {room}, but no one of allow_from is in it"))
                        } else {
                            Ok(format!("joined {room}, with {}", allowed.join(", ")))
                        }
                    }
                    Some(r) if r.state() == matrix_sdk::RoomState::Invited => Err(format!(
                        "invited to {room}; the daemon joins it if the inviter is in allow_from"
                    )),
                    _ => Err(format!(
                        "the agent is not in {room}; invite {} from an account in allow_from",
                        s.user
                    )),
                },
                Err(_) => Err(format!("'{room}' is not a room id")),
            },
            None => Err("neither a user id nor a room id".to_string()),
        };
        rooms.push((name.clone(), found));
    }
    rooms
}
