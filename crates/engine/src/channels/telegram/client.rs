//! The bot's connection to the Bot API and what each of its errors means here.
//!
//! One HTTP client per bot, its timeout above the long poll's, so a `getUpdates` held by the
//! server is never cut short by our own clock. Errors are sorted once into [`Failure`]: the
//! sender and the polling loop act on that enum, never on an error's text.

use hermes_config::TelegramSettings;
use std::time::Duration;
use teloxide_core::{ApiError, RequestError};

pub(super) use teloxide_core::Bot;

/// How long a `getUpdates` waits on the server for something to happen.
pub(super) const LONG_POLL: Duration = Duration::from_secs(25);
/// The whole of one request, the long poll included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(45);

/// What `/healthz` and `doctor` say once the Bot API refused the token.
pub(super) const REVOKED: &str = "the Bot API refused the bot token (401 Unauthorized): it was \
     revoked or is wrong. The channel stopped; get the token from @BotFather, set \
     channels.telegram.bot_token and restart the daemon";

/// What a failed Bot API request means for whoever made it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Failure {
    /// 401: the token is revoked or wrong. Nothing works until a person replaces it.
    #[error("{REVOKED}")]
    Revoked,
    /// 429: wait this long, then the same request may go.
    #[error("Telegram asks to wait {} s before the next request (429)", .0.as_secs())]
    RetryAfter(Duration),
    /// 400 can't parse entities: the HTML was refused; the text itself can still go.
    #[error("Telegram refused the message's formatting: {0}")]
    Formatting(String),
    /// 400 message is too long.
    #[error("Telegram refused the message as too long")]
    TooLong,
    /// 409: another program reads this bot's updates (a second poller, a webhook), or the long
    /// poll of this daemon's previous run is still open at Telegram. Worth another try soon.
    #[error(
        "another program reads this bot's updates ({0}); a bot has one reader at a time: stop the other one (another hermes-agent with its own database, a bot framework). Trying again meanwhile"
    )]
    Conflict(String),
    /// Any other refusal (a chat not found, the bot blocked or kicked): sending it again will
    /// not help.
    #[error("Telegram refused the request: {0}")]
    Refused(String),
    /// The network, a 5xx, an answer we cannot read: it may work later.
    #[error("the Bot API cannot be reached or answered badly: {0}")]
    Unavailable(String),
}

impl From<RequestError> for Failure {
    fn from(e: RequestError) -> Failure {
        match e {
            RequestError::Api(ApiError::InvalidToken) => Failure::Revoked,
            RequestError::Api(ApiError::MessageIsTooLong) => Failure::TooLong,
            RequestError::Api(ApiError::CantParseEntities(why)) => Failure::Formatting(why),
            RequestError::Api(
                e @ (ApiError::TerminatedByOtherGetUpdates | ApiError::CantGetUpdates),
            ) => Failure::Conflict(e.to_string()),
            RequestError::Api(ApiError::Unknown(why))
                if !(why.starts_with("Bad Request") || why.starts_with("Forbidden")) =>
            {
                // Telegram's 5xx and the texts teloxide does not know yet: worth another try.
                Failure::Unavailable(why)
            }
            RequestError::Api(other) => Failure::Refused(other.to_string()),
            RequestError::RetryAfter(s) => Failure::RetryAfter(s.duration()),
            RequestError::MigrateToChatId(to) => Failure::Refused(format!(
                "the group became a supergroup with the id {}; put that id in channels.telegram.chats",
                to.0
            )),
            // With its causes: "error sending request" alone says neither "refused" nor
            // "timed out".
            other @ (RequestError::Network(_)
            | RequestError::InvalidJson { .. }
            | RequestError::Io(_)) => Failure::Unavailable(hermes_store::util::error_chain(&other)),
        }
    }
}

/// The bot of `settings`, talking to its Bot API server.
pub(super) fn bot(settings: &TelegramSettings) -> Result<Bot, Failure> {
    let client = teloxide_core::net::default_reqwest_settings()
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| Failure::Unavailable(format!("cannot set up the HTTP client: {e}")))?;
    // `config check` made sure the URL parses; a settings file edited since is caught here.
    let url = url::Url::parse(settings.api_url.trim()).map_err(|e| {
        Failure::Refused(format!(
            "channels.telegram.api_url '{}' is not a URL: {e}",
            settings.api_url
        ))
    })?;
    Ok(Bot::with_client(settings.bot_token.trim(), client).set_api_url(url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_are_sorted_by_what_they_mean() {
        let api = |e| Failure::from(RequestError::Api(e));
        assert_eq!(api(ApiError::InvalidToken), Failure::Revoked);
        assert_eq!(api(ApiError::MessageIsTooLong), Failure::TooLong);
        assert_eq!(
            api(ApiError::CantParseEntities(
                "Bad Request: can't parse entities: x".into()
            )),
            Failure::Formatting("Bad Request: can't parse entities: x".into())
        );
        assert!(matches!(api(ApiError::BotBlocked), Failure::Refused(_)));
        assert!(matches!(
            api(ApiError::Unknown("Internal Server Error".into())),
            Failure::Unavailable(_)
        ));
        assert!(matches!(
            api(ApiError::Unknown("Bad Request: chat not found here".into())),
            Failure::Refused(_)
        ));
        assert_eq!(
            Failure::from(RequestError::RetryAfter(
                teloxide_core::types::Seconds::from_seconds(3)
            )),
            Failure::RetryAfter(Duration::from_secs(3))
        );
        assert!(Failure::Revoked.to_string().contains("401"));
    }
}
