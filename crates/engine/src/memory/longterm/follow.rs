//! Keeping the index in step with the store's fact change sequence: every insert, change of
//! tags and delete of a fact is a numbered row in the database (`store::facts`), and the index
//! records in each commit the last one it has applied. Catching up reads the changes after
//! that, reads each changed fact as it is now, and (re)indexes it or drops its document. On a
//! shared database (PostgreSQL, several daemons) [`LongTerm::follow_changes`] does this every
//! second, and at once when woken, so a fact remembered or forgotten through one node is
//! recalled, or not, through every other.
//!
//! Owns: the mark in the index's commits (which change, of which database), the catch-up and
//! its loop, and pruning old changes. Must not: write facts, or change the index without
//! `write_gate` held.

use super::{LongTerm, MemoryError, document};
use hermes_store::StoreError;
use serde::{Deserialize, Serialize};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tantivy::{Index, Term};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Changes read and applied at a time: a node far behind catches up in bounded steps.
const BATCH: i64 = 256;
/// How often a node looks for changes other nodes made, when nobody wakes it sooner.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);
/// Retries after a failed catch-up (the database away): soon at first, then every minute.
const FOLLOW_BACKOFF: hermes_store::util::Backoff =
    hermes_store::util::Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
/// How long changes stay in the sequence. A node whose index is older than that (stopped
/// for longer) rebuilds it from the facts instead, which takes a moment.
const CHANGES_KEPT_DAYS: i64 = 7;
/// How often a following node prunes the sequence.
const PRUNE_EVERY: Duration = Duration::from_secs(3600);

/// What each commit of the index records: the last change applied, and the database whose
/// sequence that number belongs to.
#[derive(Serialize, Deserialize)]
struct Mark {
    fact_seq: i64,
    store: String,
}

/// The commit payload saying the index has applied every change up to `seq` of `store`.
pub(super) fn mark(seq: i64, store: &str) -> String {
    let mark = Mark {
        fact_seq: seq,
        store: store.to_string(),
    };
    // Two plain fields always serialise; the fallback only keeps this infallible (and an
    // unreadable mark means a rebuild, never a wrong index).
    serde_json::to_string(&mark).unwrap_or_default()
}

/// What the index's newest commit says it applied, as seen from database `store`.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Recorded {
    /// Every change of this database up to this one.
    Seq(i64),
    /// Nothing to go by: the index is new, was written by an older build, or its record
    /// cannot be read.
    Nothing,
    /// Changes of another database (its file or address): the data dir moved with
    /// `storage migrate`, or `storage.url` now names another database. Its numbers say nothing
    /// about this one's changes.
    Other(String),
}

/// The last change the index's newest commit applied, if it recorded one for `store`; anything
/// else means a rebuild.
pub(super) fn recorded_seq(index: &Index, store: &str) -> Recorded {
    let Some(payload) = index.load_metas().ok().and_then(|m| m.payload) else {
        return Recorded::Nothing;
    };
    match serde_json::from_str::<Mark>(&payload) {
        Ok(mark) if mark.store != store => Recorded::Other(mark.store),
        Ok(mark) if mark.fact_seq >= 0 => Recorded::Seq(mark.fact_seq),
        _ => Recorded::Nothing,
    }
}

impl LongTerm {
    /// Catch up at once (another node changed a fact and said so). Cheap; a wake while a
    /// catch-up runs is kept for right after it.
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// The last change of the fact change sequence this index has applied.
    pub(crate) fn applied_seq(&self) -> i64 {
        self.inner.applied.load(Ordering::SeqCst)
    }

    /// How many times this handle rebuilt the whole index from the store.
    pub fn rebuilds(&self) -> u64 {
        self.inner.rebuilds.load(Ordering::SeqCst)
    }

    /// On a shared database, start [`LongTerm::follow_changes`] on `tracker` until `stop`.
    /// A database of one daemon needs no following: every change goes through this handle,
    /// and changes made while it was closed are caught up by [`LongTerm::open`].
    pub fn spawn_follow(&self, tracker: &TaskTracker, stop: CancellationToken) {
        if self.inner.store.shared().is_none() {
            return;
        }
        let me = self.clone();
        tracker.spawn(async move { me.follow_changes(stop).await });
    }

    /// Catch up every second, and at once when [`LongTerm::wake`] is called, until `stop` is
    /// cancelled; prune old changes hourly. A failure is logged and retried with backoff.
    pub(crate) async fn follow_changes(&self, stop: CancellationToken) {
        self.follow_every(FOLLOW_EVERY, stop).await;
    }

    /// [`LongTerm::follow_changes`], looking every `period`.
    pub(super) async fn follow_every(&self, period: Duration, stop: CancellationToken) {
        let mut failures: u32 = 0;
        let mut pruned = Instant::now();
        loop {
            // Vectors other nodes made (or `memory reindex --embeddings`) are loaded as they
            // come; a failure is the same database away that the catch-up reports.
            if let Some(meaning) = &self.inner.meaning {
                let _ = meaning.load().await;
            }
            let wait = match self.catch_up().await {
                Ok(_) => {
                    if failures > 0 {
                        tracing::info!("memory index follows the fact changes again");
                    }
                    failures = 0;
                    period
                }
                Err(e) => {
                    let wait = FOLLOW_BACKOFF.delay(failures);
                    failures = failures.saturating_add(1);
                    tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "memory index could not catch up with the facts changed on other nodes; recall may miss them meanwhile");
                    wait
                }
            };
            if pruned.elapsed() >= PRUNE_EVERY {
                self.prune_changes().await;
                pruned = Instant::now();
            }
            tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = self.inner.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// Apply the changes made since the index's last applied one; how many were applied.
    pub(crate) async fn catch_up(&self) -> Result<usize, MemoryError> {
        let _gate = self.inner.write_gate.lock().await;
        self.catch_up_locked().await
    }

    /// [`LongTerm::catch_up`], `write_gate` held.
    pub(super) async fn catch_up_locked(&self) -> Result<usize, MemoryError> {
        let store = &self.inner.store;
        let mut done = 0;
        loop {
            // A repair under way rebuilds from every fact; catching up meanwhile is moot.
            if self.trouble().is_some() {
                return Ok(done);
            }
            let applied = self.applied_seq();
            let range = store.facts().change_range().await?;
            let newest = range.newest.unwrap_or(0);
            if applied == newest {
                return Ok(done);
            }
            // Behind the oldest change kept: those between may have been pruned. Ahead of the
            // newest: this is not the sequence the index followed (a database restored or
            // replaced). Either way only the facts themselves can be trusted.
            if applied > newest || range.oldest.is_some_and(|oldest| applied < oldest - 1) {
                tracing::info!(
                    applied,
                    oldest = range.oldest,
                    newest,
                    "memory index cannot catch up from the fact changes kept; rebuilding"
                );
                self.rebuild_locked().await?;
                return Ok(done);
            }
            let changes = store.facts().changes_after(applied, BATCH).await?;
            let Some(last) = changes.last().map(|c| c.seq) else {
                return Ok(done);
            };
            let mut ids: Vec<String> = changes.iter().map(|c| c.fact_id.clone()).collect();
            ids.sort_unstable();
            ids.dedup();
            // Each fact as it is now, not as the change left it: a later change only applies
            // the same state again.
            let mut now = Vec::with_capacity(ids.len());
            for id in ids {
                match store.facts().get(&id).await {
                    Ok(fact) => now.push((id, Some(fact))),
                    Err(StoreError::NotFound { .. }) => now.push((id, None)),
                    Err(e) => return Err(e.into()),
                }
            }
            let gone_or_kept: Vec<(String, bool)> = now
                .iter()
                .map(|(id, f)| (id.clone(), f.is_some()))
                .collect();
            let written = self
                .blocking(move |inner| {
                    inner.write(last, |writer, fields| {
                        for (id, fact) in &now {
                            writer.delete_term(Term::from_field_text(fields.id, id));
                            if let Some(fact) = fact {
                                writer.add_document(document(fields, fact))?;
                            }
                        }
                        Ok(())
                    })
                })
                .await;
            if let Err(e) = written {
                // The repair rebuilds the index from the store, which covers these changes.
                self.after_index_write(Err(e));
                return Ok(done);
            }
            self.applied_up_to(last);
            if let Some(meaning) = &self.inner.meaning {
                for (id, fact) in &gone_or_kept {
                    if !fact {
                        meaning.drop_fact(id);
                    }
                }
            }
            done += changes.len();
            if (changes.len() as i64) < BATCH {
                return Ok(done);
            }
        }
    }

    /// The change a write of this handle may record as applied, given the change `seq` its
    /// store write logged: that one when it comes right after the last applied (nothing
    /// between was missed), else the last applied (the next catch-up applies it again).
    pub(super) fn mark_after(&self, seq: Option<i64>) -> i64 {
        let applied = self.applied_seq();
        match seq {
            Some(seq) if seq == applied + 1 => seq,
            _ => applied,
        }
    }

    /// Note that the index's commit recorded `seq` as applied.
    pub(super) fn applied_up_to(&self, seq: i64) {
        self.inner.applied.store(seq, Ordering::SeqCst);
    }

    /// Drop changes older than [`CHANGES_KEPT_DAYS`]; a failure only leaves them a while.
    pub(super) async fn prune_changes(&self) {
        let before = hermes_store::now() - chrono::Duration::days(CHANGES_KEPT_DAYS);
        match self.inner.store.facts().prune_changes(before).await {
            Ok(0) => {}
            Ok(rows) => tracing::debug!(rows, "pruned old fact changes"),
            Err(e) => tracing::warn!(error = %e, "could not prune old fact changes"),
        }
    }
}
