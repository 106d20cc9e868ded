//! `doctor`'s checks of the chat channels: each account looked at directly when no daemon
//! runs (Matrix: the session and keys; Telegram: whose token it is), or as the running
//! daemon's connection is doing.

use super::{Check, Verdict};
use hermes_config::Settings;

/// The Matrix account when no daemon runs: its session reused (or the first login made, as
/// the daemon would make it), this device's encryption, and each configured room.
pub async fn matrix(s: &Settings, data_dir: &std::path::Path) -> Vec<Check> {
    let Some(m) = s.channels.matrix.as_ref() else {
        return Vec::new();
    };
    let what = format!("matrix {} on {}", m.user.trim(), m.homeserver.trim());
    let p = match hermes_engine::channels::matrix::probe(m, data_dir).await {
        Ok(p) => p,
        Err(why) => return vec![Check::new(Verdict::Fail, what, why)],
    };
    let mut checks = Vec::new();
    let verdict = if m.allow_from.is_empty() {
        Verdict::Warn
    } else {
        Verdict::Ok
    };
    let nobody = if m.allow_from.is_empty() {
        "; but channels.matrix.allow_from is empty, so no one can instruct the agent"
    } else {
        ""
    };
    checks.push(Check::new(
        verdict,
        what,
        format!("logged in as device {}; {}{nobody}", p.device, p.encryption),
    ));
    for (name, found) in p.rooms {
        checks.push(match found {
            Ok(detail) => Check::new(Verdict::Ok, format!("matrix:{name}"), detail),
            Err(why) => Check::new(Verdict::Fail, format!("matrix:{name}"), why),
        });
    }
    checks
}

/// The running daemon's Matrix channel, as its connection is doing.
pub fn matrix_health(
    s: &Settings,
    status: &hermes_engine::channels::matrix::Status,
) -> Option<Check> {
    use hermes_engine::channels::matrix::State;
    let m = s.channels.matrix.as_ref()?;
    let what = format!("matrix {} on {}", m.user.trim(), m.homeserver.trim());
    let device = status.protocol.device.as_deref().unwrap_or("?");
    Some(match status.state {
        State::Off => return None,
        State::Starting => Check::new(Verdict::Warn, what, "connecting"),
        State::Down => Check::new(
            Verdict::Fail,
            what,
            format!(
                "down, retrying: {}",
                status.error.as_deref().unwrap_or("unknown error")
            ),
        ),
        State::Ok if status.protocol.decryption_failing => Check::new(
            Verdict::Fail,
            what,
            format!(
                "connected (device {device}), but the last encrypted message could not be decrypted \
                 ({} in all since the start; /inbox shows them): verify this device from your own \
                 session, or set channels.matrix.recovery_key",
                status.protocol.undecryptable
            ),
        ),
        State::Ok if status.protocol.recovery_failed => Check::new(
            Verdict::Warn,
            what,
            format!(
                "connected (device {device}), but channels.matrix.recovery_key did not restore \
                 the key backup: check the key (the daemon's log says what the server answered)"
            ),
        ),
        State::Ok => Check::new(
            Verdict::Ok,
            what,
            format!(
                "connected (device {device}); {} message(s) in, {} sent since the start",
                status.messages_in, status.messages_out
            ),
        ),
    })
}

/// The Telegram bot when no daemon runs: whose token it is (`getMe`); no update is read.
pub async fn telegram(s: &Settings) -> Vec<Check> {
    let Some(t) = s.channels.telegram.as_ref() else {
        return Vec::new();
    };
    let what = format!("telegram bot {} via {}", t.bot_id(), t.api_url.trim());
    match hermes_engine::channels::telegram::probe(t).await {
        Err(why) => vec![Check::new(Verdict::Fail, what, why)],
        Ok(found) if t.allow_from.is_empty() => vec![Check::new(
            Verdict::Warn,
            what,
            format!(
                "{found}; but channels.telegram.allow_from is empty, so no one can instruct the agent"
            ),
        )],
        Ok(found) => vec![Check::new(Verdict::Ok, what, found)],
    }
}

/// The running daemon's Telegram bot, as its polling is doing.
pub fn telegram_health(
    s: &Settings,
    status: &hermes_engine::channels::telegram::Status,
) -> Option<Check> {
    use hermes_engine::channels::State;
    let t = s.channels.telegram.as_ref()?;
    let what = format!("telegram bot {} via {}", t.bot_id(), t.api_url.trim());
    let why = status.error.as_deref().unwrap_or("unknown error");
    Some(match status.state {
        State::Off => return None,
        State::Starting => Check::new(
            Verdict::Warn,
            what,
            status.error.as_deref().unwrap_or("connecting"),
        ),
        State::Down if status.protocol.revoked => Check::new(Verdict::Fail, what, why),
        State::Down => Check::new(Verdict::Fail, what, format!("down, retrying: {why}")),
        State::Ok => Check::new(
            Verdict::Ok,
            what,
            format!(
                "polling as {}; {} message(s) in, {} sent since the start",
                status.protocol.bot.as_deref().unwrap_or("the bot"),
                status.messages_in,
                status.messages_out
            ),
        ),
    })
}
