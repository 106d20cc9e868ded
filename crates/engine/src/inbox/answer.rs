//! After the record: a finished task's answer queued to the person who wrote, on the channel
//! they wrote on (once —
//! the notice and the mark that it was queued are one transaction), and a `run now` carried
//! out. Both are looked at on every finished task, at start (a task that ended while the
//! daemon was down; a run asked for just before a stop) and every [`RESCAN`].

use super::converse::Reply;
use super::reply::{ChatThread, Thread};
use super::{Finished, Inner};
use futures::StreamExt;
use hermes_store::{Channel, CommandState, InboxCommand, InboxMessage, StoreError};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often the answers are looked at without a task ending (tasks run by another process).
const RESCAN: Duration = Duration::from_secs(60);
/// Answers queued per look; more wait for the next.
const BATCH: i64 = 100;

/// The answering loop, until `stop`; one last look after it.
pub(crate) async fn run(inner: Arc<Inner>, stop: CancellationToken) {
    // Subscribed before the first look: a task ending in between is not missed.
    let mut finished = inner.handoff.finished();
    inner.interrupted_commands().await;
    inner.requested_commands().await;
    inner.answer_all().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            event = finished.next() => match event {
                Some(Finished::Task(_) | Finished::Missed) => inner.answer_all().await,
                None => break,
            },
            _ = tokio::time::sleep(RESCAN) => {
                inner.requested_commands().await;
                inner.answer_all().await;
            }
        }
    }
    inner.answer_all().await;
}

impl Inner {
    /// Queue the answer of every task from a message that has finished and has none yet.
    pub(crate) async fn answer_all(&self) {
        let done = match self.store.inbox().unanswered(BATCH).await {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "cannot look for email tasks to answer; will look again");
                return;
            }
        };
        let mut queued = false;
        for (message, task) in done {
            let Some(thread) = self.reply_of(&message) else {
                // The sender was taken off allow_from since: no answer goes out.
                tracing::warn!(message = message.id, channel = %message.channel, sender = %message.sender, "not answering a task: its sender is no longer in the channel's allow_from");
                if let Err(e) = self.store.inbox().answer(message.id, None).await {
                    tracing::error!(message = message.id, error = %e, "cannot record that a task goes unanswered");
                }
                continue;
            };
            let notice = thread.answer(&task, &self.public_url);
            match self.store.inbox().answer(message.id, Some(&notice)).await {
                Ok(Some(id)) => {
                    tracing::info!(message = message.id, task = %task.id, notice = id, "answer queued");
                    queued = true;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::error!(message = message.id, error = %e, "cannot queue an answer; will try again")
                }
            }
        }
        if queued {
            self.handoff.notices_queued();
        }
    }

    /// Where an answer to `message` goes, if its sender is still in its channel's
    /// `allow_from`: by mail to that entry, or into the room and thread it came from.
    fn reply_of(&self, message: &InboxMessage) -> Option<Reply> {
        match message.channel {
            Channel::Email => {
                let to = self.settings.allowed(&message.sender)?;
                Some(Reply::Mail(Thread {
                    to: to.to_string(),
                    subject: message.subject.clone(),
                    message_id: message.message_id.clone(),
                    refs: message.refs.clone(),
                    job_id: message.job_id.clone(),
                }))
            }
            Channel::Matrix | Channel::Telegram => {
                if !self.chat_allowed(message.channel, &message.sender) {
                    return None;
                }
                Some(Reply::Chat(ChatThread {
                    channel: super::chat::reply_lane(message.channel).to_string(),
                    room: message.room.clone()?,
                    root: message
                        .thread_root
                        .clone()
                        .or_else(|| message.message_id.clone())?,
                    job_id: message.job_id.clone(),
                }))
            }
        }
    }

    /// Carry out the runs asked for and not yet started (a stop came between the record and
    /// the start).
    async fn requested_commands(&self) {
        match self.store.inbox().commands(CommandState::Requested).await {
            Ok(rows) => {
                for row in rows {
                    if let Err(e) = self.carry_out(row.id).await {
                        tracing::error!(message = row.id, error = %e, "cannot carry out a command; will try again");
                    }
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot look for commands to carry out"),
        }
    }

    /// A run a stop interrupted while it started: it may or may not have begun, and it is not
    /// started again (that could run it twice); the person is told.
    async fn interrupted_commands(&self) {
        let rows = match self.store.inbox().commands(CommandState::Started).await {
            Ok(rows) => rows,
            Err(e) => {
                tracing::error!(error = %e, "cannot look for interrupted commands");
                return;
            }
        };
        for row in rows {
            let detail = "The daemon stopped while it started this run, so it may not have \
                          run; the job's page lists its runs. Reply run now to ask again.";
            let reply = self.reply_of(&row).map(|t| t.confirmation(detail, None));
            match self
                .store
                .inbox()
                .move_command(
                    row.id,
                    CommandState::Started,
                    CommandState::Failed,
                    detail,
                    None,
                    reply.as_ref(),
                )
                .await
            {
                Ok(true) => {
                    tracing::warn!(
                        message = row.id,
                        "a run asked for by mail was interrupted by a stop"
                    );
                    self.handoff.notices_queued();
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(message = row.id, error = %e, "cannot record an interrupted command")
                }
            }
        }
    }

    /// Start the run message `id` asked for: claimed first (`requested` → `started`), so a
    /// restart never starts it twice; then fired as `POST /v1/jobs/{id}/run` does, and the
    /// outcome recorded and confirmed.
    pub(crate) async fn carry_out(&self, id: i64) -> Result<(), StoreError> {
        let Some(row) = self.store.inbox().get(id).await? else {
            return Ok(());
        };
        let (Some(InboxCommand::RunNow), Some(job_id)) = (row.command, row.job_id.clone()) else {
            return Ok(());
        };
        if !self
            .store
            .inbox()
            .move_command(
                id,
                CommandState::Requested,
                CommandState::Started,
                "starting the run",
                None,
                None,
            )
            .await?
        {
            return Ok(());
        }
        let name = self
            .store
            .jobs()
            .get(&job_id)
            .await
            .map(|j| j.name)
            .unwrap_or_else(|_| job_id.clone());
        let (to, detail, task) = match self.handoff.run_now(&job_id).await {
            Ok(task) => (
                CommandState::Done,
                format!("Started a run of “{name}” (task {task}); its result comes as usual."),
                Some(task),
            ),
            Err(why) => (
                CommandState::Failed,
                format!("Did not start a run of “{name}”: {why}"),
                None,
            ),
        };
        let reply = self
            .reply_of(&row)
            .map(|t| t.confirmation(&detail, task.as_deref()));
        self.store
            .inbox()
            .move_command(
                id,
                CommandState::Started,
                to,
                &detail,
                task.as_deref(),
                reply.as_ref(),
            )
            .await?;
        tracing::info!(message = id, channel = %row.channel, job = %job_id, outcome = %to, "run asked for by a message");
        if reply.is_some() {
            self.handoff.notices_queued();
        }
        Ok(())
    }
}
