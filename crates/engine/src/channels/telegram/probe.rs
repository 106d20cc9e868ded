//! `doctor`'s look at the bot when no daemon runs: the Bot API asked who the token belongs to
//! (`getMe`). Nothing is sent and no update is read, so a running daemon's offset is untouched.

use super::client::{self, Failure};
use hermes_config::TelegramSettings;
use teloxide_core::requests::Requester;

/// Whose token it is, in words; why not, in words.
pub async fn probe(s: &TelegramSettings) -> Result<String, String> {
    let bot = client::bot(s).map_err(|e| e.to_string())?;
    match bot.get_me().await {
        Ok(me) => Ok(format!(
            "the token is the bot @{} (id {})",
            me.username(),
            me.user.id.0
        )),
        // No channel runs here to have stopped: say only what to change.
        Err(e) => match Failure::from(e) {
            Failure::Revoked => Err(REFUSED.to_string()),
            other => Err(other.to_string()),
        },
    }
}

/// A refused token, as `doctor` says it with no daemon running.
const REFUSED: &str = "the Bot API refused the bot token (401 Unauthorized): it was revoked or is \
     wrong. Get the token from @BotFather and set channels.telegram.bot_token";
