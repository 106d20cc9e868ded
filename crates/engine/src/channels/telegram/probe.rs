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
        Err(e) => Err(Failure::from(e).to_string()),
    }
}
