//! The Telegram channel in a build without the cargo feature `telegram`: no Bot API client,
//! and a handle that is always off.

use hermes_config::TelegramSettings;

/// Why there is nothing to probe.
pub async fn probe(_s: &TelegramSettings) -> Result<String, String> {
    Err(hermes_config::TELEGRAM_NOT_BUILT.to_string())
}
