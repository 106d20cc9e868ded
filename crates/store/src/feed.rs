//! The change feed of a shared PostgreSQL database: the notifications its triggers send at
//! commit (`LISTEN hermes`, see migration 0007), read as typed [`Change`]s. They say which task
//! to look at, never what it holds — the tables stay the one source of truth.
//!
//! Must not: be relied on alone. A notification sent while the feed's connection was down is
//! lost; [`Change::Lost`] says so, and every reader polls as well.

use super::{Engine, Result, Store};
use sqlx::postgres::PgListener;

/// The channel the triggers notify on.
const CHANNEL: &str = "hermes";

/// What another daemon changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    /// A task was queued, or an approval answered: a worker may have something to take.
    Pending,
    /// This task ended, or waits for a person.
    Task(String),
    /// A long-term fact changed.
    Facts,
    /// The feed's connection was lost: what was sent meanwhile is gone.
    Lost,
}

impl Change {
    /// A notification's payload, as the triggers write it; `None` for one this build does
    /// not know (a newer daemon's), which is ignored.
    pub(crate) fn parse(payload: &str) -> Option<Change> {
        match payload.split_once(':') {
            None if payload == "pending" => Some(Change::Pending),
            None if payload == "facts" => Some(Change::Facts),
            Some(("task", id)) => Some(Change::Task(id.to_string())),
            _ => None,
        }
    }
}

/// A listening connection of its own (not one of the pool's).
pub struct ChangeFeed {
    listener: PgListener,
}

impl Store {
    /// Listen to the database's changes; `None` on SQLite (one daemon, which hears its own).
    pub async fn change_feed(&self) -> Result<Option<ChangeFeed>> {
        let Engine::Postgres(pool) = &self.engine else {
            return Ok(None);
        };
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(CHANNEL).await?;
        Ok(Some(ChangeFeed { listener }))
    }
}

impl ChangeFeed {
    /// The next change. After [`Change::Lost`] the next call connects again (an error while
    /// the server is down; call again later).
    pub async fn next(&mut self) -> Result<Change> {
        loop {
            match self.listener.try_recv().await? {
                None => return Ok(Change::Lost),
                Some(n) => {
                    if let Some(change) = Change::parse(n.payload()) {
                        return Ok(change);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_read_as_the_triggers_write_them() {
        assert_eq!(Change::parse("pending"), Some(Change::Pending));
        assert_eq!(Change::parse("facts"), Some(Change::Facts));
        assert_eq!(
            Change::parse("task:ab12"),
            Some(Change::Task("ab12".into()))
        );
        assert_eq!(Change::parse("step:ab12"), None);
        assert_eq!(Change::parse("jobs"), None);
        assert_eq!(Change::parse("other:x"), None);
    }

    /// The triggers of migration 0007 notify at commit, as `Change::parse` reads them: a task
    /// queued and ended through one store is heard on another's feed; its start and its trace
    /// rows are not sent (the next notification is its end).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_queued_started_and_ended_elsewhere_is_heard() {
        use crate::{NewTask, Origin, TaskOutcome};
        let store = crate::testing::postgres().await;
        let mut feed = store
            .change_feed()
            .await
            .unwrap()
            .expect("a feed on PostgreSQL");
        let mut next = async || {
            tokio::time::timeout(std::time::Duration::from_secs(5), feed.next())
                .await
                .expect("a notification in time")
                .unwrap()
        };
        let new = NewTask {
            task: "x".into(),
            origin: Origin::Api,
            profile: "default".into(),
            ..NewTask::default()
        };
        let task = store.tasks().create(&new).await.unwrap();
        assert_eq!(next().await, Change::Pending);
        let claimed = store.tasks().claim_next_pending().await.unwrap().unwrap();
        assert_eq!(claimed.id, task.id);
        let step = crate::testing::note(1, "hi");
        store.tasks().add_step(&task.id, &step).await.unwrap();
        let outcome = TaskOutcome::answered("done");
        store.tasks().finish(&task.id, &outcome).await.unwrap();
        assert_eq!(next().await, Change::Task(task.id.clone()));
    }
}
