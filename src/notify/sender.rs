//! The sender: drains the outbox. One pass sends every due pending notice and records each
//! outcome; the loop sleeps until the next notice is due or `enqueue` wakes it.
//!
//! Owns: the order of a delivery (attempt, then record), the backoff arithmetic, and keeping
//! one bad notice (an error, even a panic in a send) from stopping the others.
//! Must not: drop a notice without recording why; send a notice twice in one process (passes
//! are serialised by a lock).

use super::{Inner, Notifier};
use crate::store::Notice;
use chrono::Utc;
use futures::FutureExt;
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

/// Notices fetched per query; a pass keeps fetching until nothing new is due.
const BATCH: i64 = 50;
/// Longest sleep with nothing due: notices queued by another process (the CLI writing to the
/// same database) are picked up within this.
const IDLE_POLL: Duration = Duration::from_secs(60);
/// Shortest sleep between passes, so a notice that cannot even be recorded (a database error)
/// does not spin the loop.
const MIN_SLEEP: Duration = Duration::from_millis(50);

/// How one delivery attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SendError {
    /// May pass on its own (a relay down, 4xx SMTP, HTTP 5xx/408/429): retry with backoff.
    Transient(String),
    /// Will not pass without a change (bad login, 5xx SMTP, HTTP 4xx): fail the notice now.
    Permanent(String),
}

impl SendError {
    pub(crate) fn into_message(self) -> String {
        match self {
            SendError::Transient(m) | SendError::Permanent(m) => m,
        }
    }
}

impl Notifier {
    /// One pass: send every due pending notice; returns how many were sent.
    pub async fn deliver_due(&self) -> usize {
        self.deliver_due_until(&CancellationToken::new()).await
    }

    /// A pass that stops between notices once `cancel` fires (a send in flight finishes, so
    /// its outcome is recorded).
    async fn deliver_due_until(&self, cancel: &CancellationToken) -> usize {
        let _pass = self.inner.pass.lock().await;
        let mut seen = HashSet::new();
        let mut sent = 0;
        loop {
            let batch = match self.inner.store.due_notices(Utc::now(), BATCH).await {
                Ok(batch) => batch,
                Err(e) => {
                    error!(error = %e, "cannot read the outbox; will retry on the next pass");
                    break;
                }
            };
            // A notice retried with a zero delay is due again at once; once per pass is enough.
            let fresh: Vec<Notice> = batch.into_iter().filter(|n| seen.insert(n.id)).collect();
            if fresh.is_empty() {
                break;
            }
            for notice in fresh {
                if cancel.is_cancelled() {
                    return sent;
                }
                if self.deliver_one(notice).await {
                    sent += 1;
                }
            }
        }
        sent
    }

    /// Attempt one notice and record the outcome. True when it was sent.
    async fn deliver_one(&self, notice: Notice) -> bool {
        let id = notice.id;
        let attempt = u32::try_from(notice.attempts.max(0))
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        let outcome = AssertUnwindSafe(self.inner.attempt(&notice))
            .catch_unwind()
            .await
            .unwrap_or_else(|_| {
                error!(
                    notice = id,
                    "panic while sending a notice; it will be retried"
                );
                Err(SendError::Transient(
                    "internal error while sending (a bug; see the log)".into(),
                ))
            });
        let was_sent = outcome.is_ok();
        let store = &self.inner.store;
        let recorded = match outcome {
            Ok(()) => {
                info!(notice = id, channel = %notice.channel, attempt, "notice sent");
                store.mark_notice_sent(id).await
            }
            Err(SendError::Permanent(msg)) => {
                warn!(notice = id, channel = %notice.channel, attempt, error = %msg, "notice failed; not retrying");
                store.mark_notice_attempt_failed(id, &msg, None).await
            }
            Err(SendError::Transient(msg)) if attempt > self.retry.max_retries => {
                let msg = format!("gave up after {attempt} attempts; last error: {msg}");
                warn!(notice = id, channel = %notice.channel, error = %msg, "notice failed");
                store.mark_notice_attempt_failed(id, &msg, None).await
            }
            Err(SendError::Transient(msg)) => {
                let delay = self.retry.delay(attempt - 1);
                let next = Utc::now()
                    + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::hours(1));
                info!(notice = id, channel = %notice.channel, attempt, retry_in_s = delay.as_secs_f64(), error = %msg, "notice not sent; will retry");
                store.mark_notice_attempt_failed(id, &msg, Some(next)).await
            }
        };
        if let Err(e) = recorded {
            // A sent notice that cannot be marked stays pending and goes out again later:
            // delivery is at least once, never silently at most once.
            error!(notice = id, error = %e, "cannot record a delivery outcome in the outbox");
        }
        was_sent
    }

    /// The sender loop: deliver_due, then sleep until the next due time or a wake-up from
    /// enqueue, until cancelled.
    pub async fn run(&self, cancel: CancellationToken) {
        info!(channels = ?self.channels(), "notice sender started");
        loop {
            let sent = self.deliver_due_until(&cancel).await;
            if sent > 0 {
                debug!(sent, "outbox pass done");
            }
            if cancel.is_cancelled() {
                break;
            }
            let sleep = match self.inner.store.next_notice_due().await {
                Ok(Some(at)) => (at - Utc::now()).to_std().unwrap_or(Duration::ZERO),
                Ok(None) => IDLE_POLL,
                Err(e) => {
                    error!(error = %e, "cannot read the outbox; retrying later");
                    IDLE_POLL
                }
            }
            .clamp(MIN_SLEEP, IDLE_POLL);
            tokio::select! {
                _ = cancel.cancelled() => break,
                _ = self.inner.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
        info!("notice sender stopped");
    }
}

impl Inner {
    /// One attempt on the notice's channel. The channel is looked up again here, not trusted
    /// from enqueue time: the config may have changed across a restart.
    async fn attempt(&self, notice: &Notice) -> Result<(), SendError> {
        if notice.channel == super::EMAIL {
            if let Some(email) = &self.email {
                return email.send(notice).await;
            }
        } else if let Some(hook) = self.webhooks.get(&notice.channel) {
            let state = match &notice.task_id {
                Some(task_id) => match self.store.find_task(task_id).await {
                    Ok(task) => task.map(|t| t.state.as_str()),
                    Err(e) => {
                        return Err(SendError::Transient(format!(
                            "cannot look up task {task_id} for the webhook payload: {e}"
                        )));
                    }
                },
                None => None,
            };
            return hook.send(notice, state).await;
        }
        Err(SendError::Permanent(format!(
            "channel '{}' is no longer configured (configured now: {}); add it back under notify in settings.yaml and queue the notice again",
            notice.channel,
            super::channel_list(&self.channel_names())
        )))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn the_default_policy_is_8_attempts_doubling_from_30_s_up_to_an_hour() {
        let p = super::super::DEFAULT_RETRY;
        assert_eq!(p.max_retries + 1, 8);
        let secs: Vec<u64> = (0..9).map(|r| p.delay(r).as_secs()).collect();
        assert_eq!(secs, [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(p.delay(200), Duration::from_secs(3600));
    }
}
