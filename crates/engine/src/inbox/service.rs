//! The reading loop: connect, catch up on what arrived since the watermark, then wait for
//! mail (IDLE, or a poll every `poll_s`) and read it as it comes; when anything fails, mark the
//! inbox down and connect again after a backoff with jitter. Nothing here ends the daemon: the
//! loop ends only when it is stopped.

use super::imap::{self, Connection, ImapError, Woken};
use super::intake::IntakeError;
use super::{Health, Inner};
use crate::reconnect::{self, RECONNECT};
use hermes_store::{MailPlace, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
enum Ended {
    #[error(transparent)]
    Imap(#[from] ImapError),
    /// Recording failed (the disk, the database): nothing was lost, the message is read again.
    #[error("cannot record mail: {0}")]
    Store(#[from] StoreError),
    /// A message could not be read for want of a thread (it is read again).
    #[error(transparent)]
    Body(super::parse::BodyError),
}

impl From<IntakeError> for Ended {
    fn from(e: IntakeError) -> Ended {
        match e {
            IntakeError::Store(e) => Ended::Store(e),
            IntakeError::Body(e) => Ended::Body(e),
        }
    }
}

pub(crate) async fn run(inner: Arc<Inner>, stop: CancellationToken) {
    tracing::info!(server = %inner.settings.label(), mailbox = %inner.settings.mailbox, "inbox started");
    let session = || inner.session(&stop);
    reconnect::keep_connected(&stop, session, |e, failures| {
        let error = e.to_string();
        tracing::warn!(error = %error, retry = failures + 1, "inbox down; connecting again");
        inner.set_health(Health::Down { error });
        Some(RECONNECT.delay(failures))
    })
    .await;
    tracing::info!("inbox stopped");
}

impl Inner {
    /// One connection's life: Ok when stopped, Err when it failed.
    async fn session(&self, stop: &CancellationToken) -> Result<(), Ended> {
        let mut conn = imap::open(&self.settings).await?;
        let uid_validity = conn.opened.uid_validity;
        let mut last = self.watermark(&mut conn).await?;
        self.set_health(Health::Ok { idle: conn.idle });
        tracing::info!(
            idle = conn.idle,
            uid_validity,
            from_uid = last + 1,
            "inbox connected"
        );
        loop {
            last = self.read_new(&mut conn, uid_validity, last, stop).await?;
            if stop.is_cancelled() {
                conn.logout().await;
                return Ok(());
            }
            let woken = if conn.idle {
                conn.idle(stop).await?
            } else {
                let poll = Duration::from_secs(self.settings.poll_s.max(1));
                tokio::select! {
                    _ = stop.cancelled() => Woken::Stopped,
                    _ = tokio::time::sleep(poll) => {
                        conn.noop().await?;
                        Woken::Changed
                    }
                }
            };
            if woken == Woken::Stopped {
                return Ok(());
            }
        }
    }

    /// The UID mail is read after. First time on this mailbox: its current end (the backlog
    /// is not replayed). A new UIDVALIDITY (the server renumbered it): mail since the day the
    /// watermark last moved, each message skipped if its Message-ID was seen.
    async fn watermark(&self, conn: &mut Connection) -> Result<u32, Ended> {
        let uid_validity = conn.opened.uid_validity;
        let marks = self.store.inbox().watermarks(&self.mailbox).await?;
        if let Some(m) = marks
            .iter()
            .find(|m| m.uid_validity == i64::from(uid_validity))
        {
            return Ok(u32::try_from(m.last_uid).unwrap_or(0));
        }
        let end = match conn.opened.uid_next {
            Some(next) => next.saturating_sub(1),
            None => conn.last_uid().await?,
        };
        if let Some(previous) = marks.first() {
            let day = previous.updated_at.format("%-d-%b-%Y").to_string();
            let since = conn.uids_since(&day).await?;
            tracing::warn!(
                old = previous.uid_validity,
                new = uid_validity,
                "the mailbox was renumbered (new UIDVALIDITY); reading its mail since {day} again, skipping what was seen"
            );
            let first = since.first().map_or(end, |u| u.saturating_sub(1));
            return Ok(first.min(end));
        }
        self.store
            .inbox()
            .start_watermark(&MailPlace {
                mailbox: self.mailbox.clone(),
                uid_validity,
                uid: end,
            })
            .await?;
        tracing::info!(
            uid_validity,
            after_uid = end,
            "inbox read for the first time: mail already there is left alone"
        );
        Ok(end)
    }

    /// Read every message above `last`, in order; the new watermark.
    async fn read_new(
        &self,
        conn: &mut Connection,
        uid_validity: u32,
        mut last: u32,
        stop: &CancellationToken,
    ) -> Result<u32, Ended> {
        for uid in conn.uids_after(last).await? {
            if stop.is_cancelled() {
                break;
            }
            let place = MailPlace {
                mailbox: self.mailbox.clone(),
                uid_validity,
                uid,
            };
            match conn.fetch(uid).await? {
                Some((raw, size)) => self.take_in(&place, &raw, size).await?,
                // Removed between the search and the fetch: nothing to read.
                None => self.store.inbox().start_watermark(&place).await?,
            }
            last = uid;
        }
        Ok(last)
    }
}
