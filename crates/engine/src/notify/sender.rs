//! The sender: drains the outbox, one lane per channel. A lane's pass sends the channel's due
//! notices in order and records each outcome; the lane then sleeps until its next notice is
//! due or `enqueue` wakes it. Lanes run side by side, so one stalled server holds up only its
//! own channel, and every attempt ends by `notify.send_timeout_s` at the latest.
//!
//! Owns: the order of a delivery (attempt, then record), each attempt's deadline, the backoff
//! arithmetic, and keeping one bad notice (an error, even a panic in a send) from stopping the
//! others.
//! Must not: drop a notice without recording why; send a notice twice in one process (a
//! lane's passes are serialised by its lock).

use super::{Inner, Notifier};
use crate::metrics::DeliveryFailure;
use chrono::Utc;
use futures::FutureExt;
use futures::future::join_all;
use hermes_store::Notice;
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

/// Notices fetched per query; a pass keeps fetching until nothing new is due.
const BATCH: i64 = 50;
/// Longest sleep with nothing due: notices queued by another process (`run`, the CLI writing
/// to the same database beside the daemon) are picked up within this — a person waits for
/// them. One indexed query per lane each time.
const IDLE_POLL: Duration = Duration::from_secs(10);
/// The same for a chat account's lane on a database several daemons share: only the node
/// holding the account sends its notices, while any node may queue them (its worker ran the
/// task), and a person in a chat waits for the answer.
const SHARED_CHAT_POLL: Duration = Duration::from_secs(2);
/// At a stop, how long a send in flight may still take to finish and be recorded.
const STOP_GRACE: Duration = Duration::from_secs(2);
/// Shortest sleep between passes, so a notice that cannot even be recorded (a database error)
/// does not spin the loop.
const MIN_SLEEP: Duration = Duration::from_millis(50);
/// A notice's lease outlasts its attempt (`notify.send_timeout_s`) by this, for recording it.
const LEASE_MARGIN: Duration = Duration::from_secs(10);
/// A retry further off than any backoff (an hour at most) — every pending notice of a removed
/// channel is within it.
const ORPHAN_HORIZON_DAYS: i64 = 36_500;

/// How one delivery attempt failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
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
    /// One pass on every channel at once (and notices for channels no longer configured);
    /// returns how many were sent.
    pub async fn deliver_due(&self) -> usize {
        let never = CancellationToken::new();
        self.fail_orphans().await;
        let lanes = self
            .inner
            .lanes
            .keys()
            .map(|channel| self.deliver_lane(channel, &never));
        join_all(lanes).await.into_iter().sum()
    }

    /// The sender: one loop per channel, until cancelled. Without a channel there is nothing
    /// to loop on: notices left for removed channels are failed, and it returns at once.
    pub async fn run(&self, cancel: CancellationToken) {
        self.fail_orphans().await;
        if self.inner.lanes.is_empty() {
            info!(
                "no notice channel is configured (notify.email, notify.webhooks); the notice sender does not run"
            );
            return;
        }
        info!(channels = ?self.channels(), "notice sender started");
        join_all(
            self.inner
                .lanes
                .keys()
                .map(|channel| self.lane_loop(channel, &cancel)),
        )
        .await;
        info!("notice sender stopped");
    }

    async fn lane_loop(&self, channel: &str, cancel: &CancellationToken) {
        let Some(lane) = self.inner.lanes.get(channel) else {
            return;
        };
        // A chat account's lanes wait for it to be logged in on this daemon (see
        // `ChatSend::ready`).
        let chat = self.inner.chat_of(channel);
        let idle = match (chat, self.inner.store.shared()) {
            (Some(_), Some(_)) => SHARED_CHAT_POLL,
            _ => IDLE_POLL,
        };
        loop {
            if let Some(chat) = chat {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = chat.ready() => {}
                }
            }
            let sent = self.deliver_lane(channel, cancel).await;
            if sent > 0 {
                debug!(channel, sent, "outbox pass done");
            }
            if cancel.is_cancelled() {
                return;
            }
            let sleep = match self.inner.store.outbox().next_due(Some(channel)).await {
                Ok(Some(at)) => (at - Utc::now()).to_std().unwrap_or(Duration::ZERO),
                Ok(None) => idle,
                Err(e) => {
                    error!(channel, error = %e, "cannot read the outbox; retrying later");
                    idle
                }
            }
            .clamp(MIN_SLEEP, idle);
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = lane.wake.notified() => {}
                _ = tokio::time::sleep(sleep) => {}
            }
        }
    }

    /// One pass of one channel: its due notices in order, until none is due. Once `cancel`
    /// fires, a send in flight gets [`STOP_GRACE`] to finish and be recorded; past that it is
    /// dropped, and its notice stays pending with the attempt uncounted and goes out at the
    /// next start (at least once), rather than holding the shutdown for up to
    /// `notify.send_timeout_s` on a stalled server.
    async fn deliver_lane(&self, channel: &str, cancel: &CancellationToken) -> usize {
        let Some(lane) = self.inner.lanes.get(channel) else {
            return 0;
        };
        let _pass = lane.pass.lock().await;
        let mut seen = HashSet::new();
        let mut sent = 0;
        loop {
            let batch = match self
                .inner
                .store
                .outbox()
                .due(Some(channel), Utc::now(), BATCH)
                .await
            {
                Ok(batch) => batch,
                Err(e) => {
                    error!(channel, error = %e, "cannot read the outbox; will retry on the next pass");
                    break;
                }
            };
            // A notice retried with a zero delay is due again at once; once per pass is enough.
            let fresh: Vec<Notice> = batch.into_iter().filter(|n| seen.insert(n.id)).collect();
            if fresh.is_empty() {
                break;
            }
            for notice in fresh {
                let attempt = self.deliver_one(notice);
                tokio::pin!(attempt);
                tokio::select! {
                    was_sent = &mut attempt => sent += usize::from(was_sent),
                    _ = cancel.cancelled() => {
                        if let Ok(was_sent) = tokio::time::timeout(STOP_GRACE, &mut attempt).await {
                            sent += usize::from(was_sent);
                        }
                        return sent;
                    }
                }
            }
        }
        sent
    }

    /// Notices queued for a channel that is no longer configured fail visibly, with the
    /// channels there are now — those waiting for a retry too: no lane would ever take them.
    /// Configured means any lane: a chat's reply lane (`matrix`, the thread an answer goes to)
    /// is none of the targets anyone may queue to, but its answers queued before a restart are
    /// still to go out.
    async fn fail_orphans(&self) {
        let known = self.channels();
        let lanes: Vec<String> = self.inner.lanes.keys().cloned().collect();
        let whenever = Utc::now() + chrono::Duration::days(ORPHAN_HORIZON_DAYS);
        let orphans = match self
            .inner
            .store
            .outbox()
            .due_off(&lanes, whenever, BATCH)
            .await
        {
            Ok(o) => o,
            Err(e) => {
                error!(error = %e, "cannot read the outbox for notices of removed channels");
                return;
            }
        };
        for notice in orphans {
            let msg = format!(
                "channel '{}' is no longer configured (configured now: {}); add it back under notify in settings.yaml and queue the notice again",
                notice.queued.channel,
                super::channel_list(&known)
            );
            warn!(notice = notice.id, channel = %notice.queued.channel, "notice for a removed channel failed");
            // Its name is no configured channel's: not a label (a removed channel's label
            // would linger), so all such failures share one.
            self.metrics
                .observe_delivery_failure("removed", DeliveryFailure::ChannelRemoved);
            if let Err(e) = self
                .inner
                .store
                .outbox()
                .mark_attempt_failed(notice.id, &msg, None)
                .await
            {
                error!(notice = notice.id, error = %e, "cannot record a delivery outcome in the outbox");
            }
            if let Some(run) = notice.queued.run_id
                && let Err(e) = self.inner.store.jobs().settle_run_delivery(run).await
            {
                error!(notice = notice.id, run, error = %e, "cannot record the run's delivery");
            }
        }
    }

    /// Attempt one notice within the send deadline and record the outcome. True when sent.
    async fn deliver_one(&self, notice: Notice) -> bool {
        let id = notice.id;
        if !self.lease(&notice).await {
            return false;
        }
        let attempt = u32::try_from(notice.attempts.max(0))
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        let deadline = self.inner.send_timeout;
        let outcome = tokio::time::timeout(
            deadline,
            AssertUnwindSafe(self.inner.attempt(&notice)).catch_unwind(),
        )
        .await
        .unwrap_or_else(|_| {
            Ok(Err(SendError::Transient(format!(
                "the attempt did not finish within {} s (notify.send_timeout_s): the server accepted the connection but stalled",
                deadline.as_secs()
            ))))
        })
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
        if let Err(e) = self.record(&notice, attempt, outcome).await {
            // A sent notice that cannot be marked stays pending and goes out again later:
            // delivery is at least once, never silently at most once.
            error!(notice = id, error = %e, "cannot record a delivery outcome in the outbox");
        }
        // A job run's delivery says `sent` (or what failed) once all its notices settled.
        if let Some(run) = notice.queued.run_id
            && let Err(e) = self.inner.store.jobs().settle_run_delivery(run).await
        {
            error!(notice = id, run, error = %e, "cannot record the run's delivery");
        }
        was_sent
    }

    /// On a database several daemons share, take the notice for this attempt first (see
    /// `store.outbox().lease`): each notice is sent by one of them, and by another after
    /// the lease if this one dies mid-send. One daemon alone needs no lease. False: leave it.
    async fn lease(&self, notice: &Notice) -> bool {
        let store = &self.inner.store;
        if store.shared().is_none() {
            return true;
        }
        // The attempt ends within the send timeout; the margin covers recording it.
        let lease = self.inner.send_timeout + LEASE_MARGIN;
        let now = Utc::now();
        let until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::minutes(5));
        match store.outbox().lease(notice.id, now, until).await {
            Ok(taken) => taken,
            Err(e) => {
                error!(notice = notice.id, error = %e, "cannot take the notice for sending; will retry on the next pass");
                false
            }
        }
    }

    async fn record(
        &self,
        notice: &Notice,
        attempt: u32,
        outcome: Result<(), SendError>,
    ) -> Result<(), hermes_store::StoreError> {
        let (id, channel) = (notice.id, &notice.queued.channel);
        let store = &self.inner.store;
        let failed = |kind| self.metrics.observe_delivery_failure(channel, kind);
        match outcome {
            Ok(()) => {
                info!(notice = id, %channel, attempt, "notice sent");
                self.metrics.observe_delivery_sent(channel);
                store.outbox().mark_sent(id).await
            }
            Err(SendError::Permanent(msg)) => {
                warn!(notice = id, %channel, attempt, error = %msg, "notice failed; not retrying");
                failed(DeliveryFailure::Permanent);
                store.outbox().mark_attempt_failed(id, &msg, None).await
            }
            Err(SendError::Transient(msg)) if attempt > self.retry.max_retries => {
                let msg = format!("gave up after {attempt} attempts; last error: {msg}");
                warn!(notice = id, %channel, error = %msg, "notice failed");
                failed(DeliveryFailure::GaveUp);
                store.outbox().mark_attempt_failed(id, &msg, None).await
            }
            Err(SendError::Transient(msg)) => {
                failed(DeliveryFailure::Retry);
                let delay = self.retry.delay(attempt - 1);
                let next = Utc::now()
                    + chrono::Duration::from_std(delay).unwrap_or(chrono::Duration::hours(1));
                info!(notice = id, %channel, attempt, retry_in_s = delay.as_secs_f64(), error = %msg, "notice not sent; will retry");
                store
                    .outbox()
                    .mark_attempt_failed(id, &msg, Some(next))
                    .await
            }
        }
    }
}

impl Inner {
    /// One attempt on the notice's channel. The channel is looked up again here, not trusted
    /// from enqueue time: the config may have changed across a restart.
    async fn attempt(&self, notice: &Notice) -> Result<(), SendError> {
        if notice.queued.channel == super::EMAIL {
            if let Some(email) = &self.email {
                return email.send(notice).await;
            }
        } else if let Some(hook) = self.webhooks.get(&notice.queued.channel) {
            let state = match &notice.queued.task_id {
                Some(task_id) => match self.store.tasks().find(task_id).await {
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
        } else if let Some(chat) = self.chat_of(&notice.queued.channel) {
            let remote = chat.send(notice).await?;
            // Recorded before the notice is marked sent: a reply in its thread, or a reaction
            // to it, must find it from the moment the person can see it.
            return self
                .store
                .outbox()
                .set_remote(notice.id, &remote)
                .await
                .map_err(|e| {
                    SendError::Transient(format!("sent, but cannot record its event id: {e}"))
                });
        }
        Err(SendError::Permanent(format!(
            "channel '{}' is no longer configured (configured now: {}); add it back under notify in settings.yaml and queue the notice again",
            notice.queued.channel,
            super::channel_list(&self.channel_names())
        )))
    }
}

#[cfg(test)]
mod tests {
    use crate::notify::Notifier;
    use hermes_config::{NotifySettings, WebhookSettings};
    use hermes_store::Store;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    /// Log lines written while it is the thread's default subscriber.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            hermes_store::util::lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Logs {
        /// Capture this thread's log lines (the test runtime is single-threaded).
        fn capture() -> (Logs, tracing::subscriber::DefaultGuard) {
            let logs = Logs::default();
            let writer = logs.clone();
            let subscriber = tracing_subscriber::fmt()
                .with_ansi(false)
                .with_writer(move || writer.clone())
                .finish();
            (logs, tracing::subscriber::set_default(subscriber))
        }

        fn text(&self) -> String {
            String::from_utf8_lossy(&hermes_store::util::lock(&self.0)).into_owned()
        }
    }

    /// A chat account that sends everything, with a reply lane and one target.
    struct Chat;

    impl crate::notify::ChatSend for Chat {
        fn lanes(&self) -> Vec<String> {
            vec!["chat".into(), "chat:me".into()]
        }
        fn targets(&self) -> Vec<String> {
            vec!["chat:me".into()]
        }
        fn ready(&self) -> futures::future::BoxFuture<'_, ()> {
            Box::pin(async {})
        }
        fn send<'a>(
            &'a self,
            notice: &'a hermes_store::Notice,
        ) -> futures::future::BoxFuture<'a, Result<String, crate::notify::SendError>> {
            Box::pin(async move { Ok(format!("event-{}", notice.id)) })
        }
    }

    /// An answer queued to a chat's reply lane (the thread it answers) before a restart is
    /// sent after it: the reply lane is no target anyone may queue to, but it is configured.
    #[tokio::test]
    async fn answers_queued_to_a_chats_reply_lane_survive_a_restart() {
        let store = Store::open_in_memory().await.unwrap();
        let id = store
            .outbox()
            .enqueue(&hermes_store::NewNotice {
                channel: "chat".into(),
                title: "answer".into(),
                body: "the answer".into(),
                task_id: None,
                job_id: None,
                run_id: None,
                recipient: None,
                in_reply_to: None,
                refs: None,
            })
            .await
            .unwrap();
        let notifier = Notifier::with_chat(
            NotifySettings::default(),
            store.clone(),
            &[],
            vec![Arc::new(Chat)],
        )
        .unwrap();
        assert_eq!(notifier.deliver_due().await, 1);
        let notice = store.outbox().get(id).await.unwrap().expect("the notice");
        assert_eq!(notice.state, hermes_store::NoticeState::Sent, "{notice:?}");
    }

    #[tokio::test]
    async fn without_a_channel_the_sender_says_it_does_not_run_not_that_it_stopped() {
        let (logs, _guard) = Logs::capture();
        let store = Store::open_in_memory().await.unwrap();
        let notifier = Notifier::new(NotifySettings::default(), store).unwrap();
        let cancel = CancellationToken::new();
        tokio::time::timeout(Duration::from_secs(5), notifier.run(cancel))
            .await
            .expect("nothing to wait for");
        let text = logs.text();
        assert!(text.contains("no notice channel is configured"), "{text}");
        assert!(!text.contains("sender started"), "{text}");
        assert!(!text.contains("sender stopped"), "{text}");
    }

    #[tokio::test]
    async fn with_a_channel_the_sender_says_stopped_only_once_stopped() {
        let (logs, _guard) = Logs::capture();
        let store = Store::open_in_memory().await.unwrap();
        let settings = NotifySettings {
            webhooks: [(
                "ops".to_string(),
                WebhookSettings {
                    url: "http://127.0.0.1:9/hook".into(),
                    secret: String::new(),
                },
            )]
            .into(),
            ..NotifySettings::default()
        };
        let notifier = Notifier::new(settings, store).unwrap();
        let cancel = CancellationToken::new();
        let running = tokio::spawn({
            let notifier = notifier.clone();
            let cancel = cancel.clone();
            async move { notifier.run(cancel).await }
        });
        // Let the sender start and settle into its wait.
        let started = async {
            while !logs.text().contains("sender started") {
                tokio::task::yield_now().await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), started)
            .await
            .expect("the sender starts");
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(!logs.text().contains("sender stopped"), "{}", logs.text());
        cancel.cancel();
        tokio::time::timeout(Duration::from_secs(5), running)
            .await
            .expect("stops when cancelled")
            .unwrap();
        assert!(logs.text().contains("sender stopped"), "{}", logs.text());
    }

    #[test]
    fn the_default_policy_is_8_attempts_doubling_from_30_s_up_to_an_hour() {
        let p = super::super::DEFAULT_RETRY;
        assert_eq!(p.max_retries + 1, 8);
        let secs: Vec<u64> = (0..9).map(|r| p.delay(r).as_secs()).collect();
        assert_eq!(secs, [30, 60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(p.delay(200), Duration::from_secs(3600));
    }
}
