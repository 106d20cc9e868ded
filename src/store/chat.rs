//! Chat channels' bookkeeping in the store: which node reads a channel (`channel_holders`),
//! where its intake has read up to (`channel_cursors`), and the messages a notice was sent as
//! (`chat_parts`).
//!
//! Owns: those three tables and the fence every chat record passes. Must not: decide what a
//! message means (the inbox does) or talk to a chat server.

use super::{Channel, Result, Store, Tx, now, query, query_as, query_scalar};

/// Where a chat intake has read up to, saved (a key, its position, when).
const SAVE_CURSOR: &str = "INSERT INTO channel_cursors (channel, position, updated_at) \
     VALUES (?1, ?2, ?3) ON CONFLICT (channel) DO UPDATE SET position = excluded.position, \
     updated_at = excluded.updated_at";

impl Store {
    /// Take `channel` for this node, or keep it: true when no other live node holds it (its
    /// holder's row in `nodes` is gone or holds another epoch). Outside a cluster (SQLite, or
    /// before the daemon joined), always true.
    // Used by the chat channels; a build without any has no caller.
    #[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
    pub(crate) async fn hold_channel(&self, channel: Channel) -> Result<bool> {
        let (Some(node), Some(epoch)) = (self.node().map(str::to_string), self.stamp()) else {
            return Ok(true);
        };
        let mut tx = self.begin_writing(super::Locked::Inbox).await?;
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
    #[cfg_attr(not(any(feature = "matrix", feature = "telegram")), allow(dead_code))]
    pub(crate) async fn channel_cursor(&self, key: &str) -> Result<Option<String>> {
        Ok(
            query_scalar("SELECT position FROM channel_cursors WHERE channel = ?")
                .bind(key)
                .fetch_optional(self)
                .await?,
        )
    }

    /// The most recently saved cursor whose key starts with `prefix` (`matrix/`: any device's),
    /// so a device reading for the first time knows where the last reader got to.
    #[cfg_attr(not(feature = "matrix"), allow(dead_code))]
    pub(crate) async fn newest_channel_cursor(&self, prefix: &str) -> Result<Option<String>> {
        // `prefix` is ours (a channel name and a slash), so LIKE's wildcards cannot be in it.
        Ok(query_scalar(
            "SELECT position FROM channel_cursors WHERE channel LIKE ? \
             ORDER BY updated_at DESC LIMIT 1",
        )
        .bind(format!("{prefix}%"))
        .fetch_optional(self)
        .await?)
    }

    /// Save a chat intake's cursor: everything before `position` has been recorded.
    #[cfg_attr(not(feature = "matrix"), allow(dead_code))]
    pub(crate) async fn set_channel_cursor(&self, key: &str, position: &str) -> Result<()> {
        query(SAVE_CURSOR)
            .bind(key)
            .bind(position)
            .bind(now())
            .execute(self)
            .await?;
        Ok(())
    }

    /// Move `channel`'s cursor `key` to `position` past a message that is recorded already or
    /// becomes nothing; refused ([`super::Fenced`]) once another node holds the channel.
    #[cfg_attr(not(feature = "telegram"), allow(dead_code))]
    pub(crate) async fn move_chat_cursor(
        &self,
        channel: Channel,
        key: &str,
        position: &str,
    ) -> Result<()> {
        let mut tx = self.begin_writing(super::Locked::Inbox).await?;
        fence_channel(&mut tx, self, channel).await?;
        save_cursor(&mut tx, key, position).await?;
        tx.commit().await?;
        Ok(())
    }

    /// The parts of notice `id` a chat server took already, as (part number, message id), in
    /// order: a send retried after a failure goes on after them instead of posting them again.
    #[cfg_attr(not(feature = "telegram"), allow(dead_code))]
    pub(crate) async fn chat_parts(&self, id: i64) -> Result<Vec<(i64, String)>> {
        Ok(
            query_as("SELECT part, remote_id FROM chat_parts WHERE notice_id = ? ORDER BY part")
                .bind(id)
                .fetch_all(self)
                .await?,
        )
    }

    /// Record that part `part` of notice `id` was sent as `remote_id`; a reply to that message
    /// names the notice ([`Store::notice_by_remote`]).
    #[cfg_attr(not(feature = "telegram"), allow(dead_code))]
    pub(crate) async fn add_chat_part(&self, id: i64, part: i64, remote_id: &str) -> Result<()> {
        query(
            "INSERT INTO chat_parts (notice_id, part, remote_id, sent_at) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (notice_id, part) DO UPDATE SET remote_id = excluded.remote_id",
        )
        .bind(id)
        .bind(part)
        .bind(remote_id)
        .bind(now())
        .execute(self)
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
