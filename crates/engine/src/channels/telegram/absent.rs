//! The Telegram channel in a build without the cargo feature `telegram`: no Bot API client,
//! and a handle that can never hold a connected channel.

use super::Status;
use hermes_config::TelegramSettings;

/// The connected channel's state; none can exist in this build.
pub(crate) type Inner = crate::channels::Absent<Status>;

/// Why there is nothing to probe.
pub async fn probe(_s: &TelegramSettings) -> Result<String, String> {
    Err(hermes_config::TELEGRAM_NOT_BUILT.to_string())
}
