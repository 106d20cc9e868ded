//! Chat channels' bookkeeping in the store: which node reads a channel (`channel_holders`),
//! where its intake has read up to (`channel_cursors`), and the messages a notice was sent as
//! (`chat_parts`).
//!
//! Owns: those three tables and the fence every chat record passes. Must not: decide what a
//! message means (the inbox does) or talk to a chat server.

use super::aggregates::Chat;
use super::{Channel, Result, Store, Tx, now, query, query_as, query_scalar};

/// Where a chat intake has read up to, saved (a key, its position, when).
const SAVE_CURSOR: &str = "INSERT INTO channel_cursors (channel, position, updated_at) \
     VALUES (?1, ?2, ?3) ON CONFLICT (channel) DO UPDATE SET position = excluded.position, \
     updated_at = excluded.updated_at";

impl Chat<'_> {
    /// Take `channel` for this node, or keep it: true when no other live node holds it (its
    /// holder's row in `nodes` is gone or holds another epoch). Outside a cluster (SQLite, or
    /// before the daemon joined), always true.
    // Used by the chat channels; a build without any has no caller.
    pub async fn hold_channel(self, channel: Channel) -> Result<bool> {
        let (Some(node), Some(epoch)) = (self.store.node().map(str::to_string), self.store.stamp())
        else {
            return Ok(true);
        };
        let mut tx = self.store.begin_writing(super::Locked::Inbox).await?;
        let holder: Option<(String, String)> =
            query_as("SELECT node_id, epoch FROM channel_holders WHERE channel = ?")
                .pg("SELECT node_id, epoch FROM channel_holders WHERE channel = $1 FOR UPDATE")
                .bind(channel)
                .fetch_optional(&mut tx)
                .await?;
        if let Some((id, held)) = &holder {
            if *id == node && *held == epoch {
                tx.commit().await?;
                return Ok(true);
            }
            let alive: Option<String> =
                query_scalar("SELECT id FROM nodes WHERE id = ? AND epoch = ?")
                    .bind(id)
                    .bind(held)
                    .fetch_optional(&mut tx)
                    .await?;
            if alive.is_some() {
                tx.rollback().await?;
                return Ok(false);
            }
        }
        query(
            "INSERT INTO channel_holders (channel, node_id, epoch, since) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (channel) DO UPDATE SET node_id = excluded.node_id, \
             epoch = excluded.epoch, since = excluded.since",
        )
        .bind(channel)
        .bind(&node)
        .bind(&epoch)
        .bind(now())
        .execute(&mut tx)
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Where a chat intake has read up to (`key`: the channel and the device reading it), if
    /// it ever read.
    pub async fn cursor(self, key: &str) -> Result<Option<String>> {
        Ok(
            query_scalar("SELECT position FROM channel_cursors WHERE channel = ?")
                .bind(key)
                .fetch_optional(self.store)
                .await?,
        )
    }

    /// The most recently saved cursor whose key starts with `prefix` (`matrix/`: any device's),
    /// so a device reading for the first time knows where the last reader got to.
    pub async fn newest_cursor(self, prefix: &str) -> Result<Option<String>> {
        // `prefix` is ours (a channel name and a slash), so LIKE's wildcards cannot be in it.
        Ok(query_scalar(
            "SELECT position FROM channel_cursors WHERE channel LIKE ? \
             ORDER BY updated_at DESC LIMIT 1",
        )
        .bind(format!("{prefix}%"))
        .fetch_optional(self.store)
        .await?)
    }

    /// Save a chat intake's cursor: everything before `position` has been recorded.
    pub async fn set_cursor(self, key: &str, position: &str) -> Result<()> {
        query(SAVE_CURSOR)
            .bind(key)
            .bind(position)
            .bind(now())
            .execute(self.store)
            .await?;
        Ok(())
    }

    /// Move `channel`'s cursor `key` to `position` past a message that is recorded already or
    /// becomes nothing; refused ([`super::Fenced`]) once another node holds the channel.
    pub async fn move_cursor(self, channel: Channel, key: &str, position: &str) -> Result<()> {
        let mut tx = self.store.begin_writing(super::Locked::Inbox).await?;
        fence_channel(&mut tx, self.store, channel).await?;
        save_cursor(&mut tx, key, position).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The parts of notice `id` a chat server took already, as (part number, message id), in
    /// order: a send retried after a failure goes on after them instead of posting them again.
    pub async fn parts(self, id: i64) -> Result<Vec<(i64, String)>> {
        Ok(
            query_as("SELECT part, remote_id FROM chat_parts WHERE notice_id = ? ORDER BY part")
                .bind(id)
                .fetch_all(self.store)
                .await?,
        )
    }

    /// Record that part `part` of notice `id` was sent as `remote_id`; a reply to that message
    /// names the notice ([`Outbox::by_remote`](crate::Outbox::by_remote)).
    pub async fn add_part(self, id: i64, part: i64, remote_id: &str) -> Result<()> {
        query(
            "INSERT INTO chat_parts (notice_id, part, remote_id, sent_at) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (notice_id, part) DO UPDATE SET remote_id = excluded.remote_id",
        )
        .bind(id)
        .bind(part)
        .bind(remote_id)
        .bind(now())
        .execute(self.store)
        .await?;
        Ok(())
    }
}

/// Move a chat intake's cursor inside a record's transaction (see `Place::Polled`).
pub(super) async fn save_cursor(tx: &mut Tx, key: &str, position: &str) -> Result<()> {
    query(SAVE_CURSOR)
        .bind(key)
        .bind(position)
        .bind(now())
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// Refused ([`super::Fenced`]) unless this node still holds `channel` under its lease (or no
/// lease is in play: SQLite, a process outside a cluster).
pub(super) async fn fence_channel(tx: &mut Tx, store: &Store, channel: Channel) -> Result<()> {
    let (Some(node), Some(epoch)) = (store.node(), store.stamp()) else {
        return Ok(());
    };
    let held: Option<String> = query_scalar(
        "SELECT h.node_id FROM channel_holders h JOIN nodes n ON n.id = h.node_id AND n.epoch = h.epoch \
         WHERE h.channel = ? AND h.node_id = ? AND h.epoch = ?",
    )
    .pg(
        "SELECT h.node_id FROM channel_holders h JOIN nodes n ON n.id = h.node_id AND n.epoch = h.epoch \
         WHERE h.channel = $1 AND h.node_id = $2 AND h.epoch = $3 FOR SHARE OF n",
    )
    .bind(channel)
    .bind(node)
    .bind(&epoch)
    .fetch_optional(&mut *tx)
    .await?;
    match held {
        Some(_) => Ok(()),
        None => Err(super::Fenced.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        InboxOutcome, NewInboxMessage, NewNotice, NewTask, Origin, Place, Recorded, StoreError,
    };

    fn update(event: &str) -> NewInboxMessage {
        NewInboxMessage {
            channel: Channel::Telegram,
            room: Some("111".into()),
            message_id: Some(event.into()),
            sender: "111".into(),
            subject: "hi".into(),
            ..NewInboxMessage::default()
        }
    }

    fn task() -> InboxOutcome {
        InboxOutcome::Task {
            task: NewTask {
                task: "hi".into(),
                origin: Origin::Telegram,
                profile: "fast".into(),
                ..NewTask::default()
            },
            context: None,
            notice_id: None,
            job_id: None,
        }
    }

    on_both_engines!(
        Memory,
        tokio::test,
        async fn an_update_and_its_offset_are_one_write_fenced_by_the_lease(store: Store) {
            let key = "telegram/42";
            let at = |position| Place::Polled {
                account: "telegram:42",
                key,
                position,
            };
            let new = store
                .inbox()
                .record(at("8"), &update("111:5"), &task())
                .await
                .unwrap();
            assert!(matches!(
                new,
                Recorded::New {
                    task_id: Some(_),
                    ..
                }
            ));
            assert_eq!(
                store.chat().cursor(key).await.unwrap().as_deref(),
                Some("8")
            );
            // Read again (a kill before the next poll): known, only the offset moves.
            let again = store
                .inbox()
                .record(at("9"), &update("111:5"), &task())
                .await
                .unwrap();
            assert!(matches!(again, Recorded::Seen));
            assert_eq!(
                store.chat().cursor(key).await.unwrap().as_deref(),
                Some("9")
            );

            let (a, b) = crate::testing::two_nodes(&store).await;
            assert!(a.chat().hold_channel(Channel::Telegram).await.unwrap());
            a.chat()
                .move_cursor(Channel::Telegram, key, "10")
                .await
                .unwrap();
            let since = now() + chrono::Duration::minutes(1);
            assert!(b.nodes().revoke("node-a", since).await.unwrap());
            assert!(
                b.chat().hold_channel(Channel::Telegram).await.unwrap(),
                "taken over"
            );
            // Past its lease, node a can neither record nor move the offset.
            let late = a
                .inbox()
                .record(at("11"), &update("111:6"), &task())
                .await
                .unwrap_err();
            assert!(matches!(late, StoreError::Fenced(_)), "{late}");
            let late = a
                .chat()
                .move_cursor(Channel::Telegram, key, "12")
                .await
                .unwrap_err();
            assert!(matches!(late, StoreError::Fenced(_)), "{late}");
            assert_eq!(
                store.chat().cursor(key).await.unwrap().as_deref(),
                Some("10")
            );
        }
    );

    on_both_engines!(
        Memory,
        tokio::test,
        async fn a_notice_is_found_by_any_part_it_went_out_as(store: Store) {
            let id = store
                .outbox()
                .enqueue(&NewNotice {
                    channel: "telegram:me".into(),
                    title: String::new(),
                    body: "long".into(),
                    ..NewNotice::default()
                })
                .await
                .unwrap();
            store.chat().add_part(id, 0, "111:20").await.unwrap();
            store.chat().add_part(id, 1, "111:21").await.unwrap();
            assert_eq!(
                store.chat().parts(id).await.unwrap(),
                [(0, "111:20".to_string()), (1, "111:21".to_string())]
            );
            for part in ["111:20", "111:21"] {
                let found = store.outbox().by_remote(part).await.unwrap();
                assert_eq!(found.map(|n| n.id), Some(id), "{part}");
            }
            assert!(store.outbox().by_remote("111:22").await.unwrap().is_none());
        }
    );
}
