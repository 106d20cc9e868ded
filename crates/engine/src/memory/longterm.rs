//! Long-term memory: facts and preferences that outlive a task, searched with BM25.
//!
//! Owns: the tantivy index at `DATA_DIR/memory-index` (schema, analyzer, writer, reader) and
//! keeping it in step with the store's `facts` table. The database is the source of truth; the
//! index is derived from it and holds only the fact id and the analysed text and tags. Recall
//! returns the facts as the store has them. Each commit of the index records the last change of
//! the store's fact change sequence it has applied (`follow`), so an index that was closed
//! while facts changed — or that sits on another node sharing the database — catches up with
//! just those changes. A missing, corrupt, outdated or miscounted index, or one whose applied
//! change the sequence no longer reaches, is rebuilt from the store at [`LongTerm::open`].
//! The index is locked for the process that opened it (a second process gets
//! [`MemoryError::Locked`]); tantivy's writer — its threads, its queue and its indexing arena —
//! exists only while a write runs, so an idle process holds just the reader.
//! Must not: write facts anywhere but through the store, or hold the index lock longer than the
//! one process that opened it.

use crate::llm::Embedder;
use hermes_store::{Fact, Store, StoreError, Upsert};
use index::{Fields, Opened, close_writer, document, open_index, open_writer};
use meaning::Meaning;
pub use meaning::{MeaningError, MeaningStatus, ServerState};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use tantivy::collector::TopDocs;
use tantivy::query::{BooleanQuery, Occur, Query, TermQuery};
use tantivy::schema::{IndexRecordOption, Value};
use tantivy::{IndexWriter, TantivyDocument, TantivyError, Term};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The index directory's name inside the data dir.
pub(crate) const INDEX_DIR: &str = "memory-index";

/// Retries of a failed index repair: soon at first, then every minute at most.
const REPAIR_BACKOFF: hermes_store::util::Backoff = hermes_store::util::Backoff::new(
    std::time::Duration::from_secs(1),
    std::time::Duration::from_secs(60),
);

/// The longest fact text accepted, in characters.
pub(crate) const MAX_FACT_CHARS: usize = 2000;

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "the memory index {path} failed: {source}; it is derived from the database, so deleting that directory and restarting rebuilds it"
    )]
    Index { path: PathBuf, source: TantivyError },
    #[error(
        "the memory index {path} is in use by another hermes-agent process (the daemon, or a `run` on the same data dir); stop it, or add and search memory through the daemon's HTTP API"
    )]
    Locked { path: PathBuf },
    /// This process let go of its index to rebuild it (it failed, e.g. on a full disk): until
    /// the rebuild succeeds, facts are kept in the database only.
    #[error(
        "the memory index {path} is being rebuilt after a failure (the log says which); the fact is kept in the database and indexed once the rebuild succeeds"
    )]
    Rebuilding { path: PathBuf },
    #[error("cannot prepare the memory index directory {path}: {source} (check its permissions)")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("a fact needs some text; say what to remember")]
    EmptyFact,
    #[error(
        "a fact is at most {MAX_FACT_CHARS} characters (this one has {0}); remember a shorter summary"
    )]
    FactTooLong(usize),
    #[error("the memory index worker stopped unexpectedly: {0}")]
    Worker(String),
}

/// A fact found by [`LongTerm::recall`], with what found it.
#[derive(Debug, Clone, Serialize)]
pub struct Recalled {
    pub fact: Fact,
    /// Higher is more relevant: the BM25 score when recall is by keyword only; with
    /// `memory.embeddings`, the reciprocal-rank fusion of the two rankings.
    pub score: f32,
    /// Its place in the keyword ranking (1 = first); `None`: no word of the query in it.
    pub keyword_rank: Option<u32>,
    /// Its cosine similarity to the query by meaning; `None`: not among the nearest (or
    /// recall by meaning is off or waiting for the embedding server).
    pub similarity: Option<f32>,
}

/// The long-term memory handle: cheap to clone, one per process.
#[derive(Clone)]
pub struct LongTerm {
    inner: Arc<Inner>,
}

struct Inner {
    /// The source of truth: every fact lives here first.
    store: Store,
    /// Where the index lives (for error messages).
    path: PathBuf,
    fields: Fields,
    /// The index, its reader (searchers for recall, reloaded by hand after each write so a
    /// recall right after a remember sees it) and this process's lock on it; only touched
    /// inside `spawn_blocking`. Replaced whole when the index is reopened after trouble.
    index: Mutex<Opened>,
    /// Why the index cannot be trusted right now (a write to it failed); `None` when healthy.
    /// Meanwhile recall reads the database, and one repair runs in the background.
    trouble: Mutex<Option<String>>,
    /// A repair is running.
    repairing: AtomicBool,
    /// Serialises "change SQL, then change the index" so the index applies writes in the order
    /// the database made them (two merges of one fact must not land out of order); catching up
    /// with the change sequence takes it too.
    write_gate: tokio::sync::Mutex<()>,
    /// The last change of the store's fact change sequence the index has applied (0: none),
    /// as its last commit recorded it. Changed only under `write_gate`.
    applied: AtomicI64,
    /// Which database's sequence `applied` counts in (its file, or its address without the
    /// password): an index that followed another one is rebuilt.
    source: String,
    /// Woken to catch up at once (another node changed a fact), see [`LongTerm::wake`].
    wake: tokio::sync::Notify,
    /// Full rebuilds of the index through this handle (each is logged; tests count them).
    rebuilds: AtomicU64,
    /// Recall by meaning (`memory.embeddings`); `None`: by keyword only.
    meaning: Option<Arc<Meaning>>,
}

impl LongTerm {
    /// Opens (or creates) the index at data_dir/memory-index; rebuilds it from the store when it is
    /// missing, corrupt, or its document count disagrees with the facts table.
    pub async fn open(data_dir: &Path, store: Store) -> Result<LongTerm, MemoryError> {
        LongTerm::open_with(data_dir, store, None).await
    }

    /// [`LongTerm::open`], recalling by meaning too when `embeddings` is set (through that
    /// embedder, counting a cosine below its floor as no match).
    pub async fn open_with(
        data_dir: &Path,
        store: Store,
        embeddings: Option<(Embedder, f32)>,
    ) -> Result<LongTerm, MemoryError> {
        let meaning = match embeddings {
            Some((embedder, floor)) => Some(Meaning::open(embedder, store.clone(), floor).await?),
            None => None,
        };
        let path = data_dir.join(INDEX_DIR);
        let open_path = path.clone();
        let (opened, fields) = tokio::task::spawn_blocking(move || open_index(&open_path))
            .await
            .map_err(|e| MemoryError::Worker(e.to_string()))??;
        let source = store.path().display().to_string();
        let recorded = follow::recorded_seq(&opened.index, &source);
        let memory = LongTerm {
            inner: Arc::new(Inner {
                store,
                path,
                fields,
                index: Mutex::new(opened),
                trouble: Mutex::new(None),
                repairing: AtomicBool::new(false),
                write_gate: tokio::sync::Mutex::new(()),
                applied: AtomicI64::new(match recorded {
                    follow::Recorded::Seq(seq) => seq,
                    _ => 0,
                }),
                source,
                wake: tokio::sync::Notify::new(),
                rebuilds: AtomicU64::new(0),
                meaning,
            }),
        };
        {
            let _gate = memory.inner.write_gate.lock().await;
            match recorded {
                follow::Recorded::Seq(_) => {
                    memory.catch_up_locked().await?;
                }
                follow::Recorded::Nothing => {
                    tracing::info!(
                        "memory index has no record of the fact changes it applied; rebuilding"
                    );
                    memory.rebuild_locked().await?;
                }
                follow::Recorded::Other(followed) => {
                    tracing::info!(
                        followed = %followed,
                        now = %memory.inner.source,
                        "memory index followed another database (moved with `storage migrate`, \
                         or storage.url changed); rebuilding from this one's facts"
                    );
                    memory.rebuild_locked().await?;
                }
            }
            // A last check that costs one count: whatever went wrong before, the index holds
            // one document per fact.
            let indexed = memory.inner.lock_index().reader.searcher().num_docs();
            let stored = memory.inner.store.facts().count().await?;
            if u64::try_from(stored).ok() != Some(indexed) {
                tracing::info!(
                    indexed,
                    stored,
                    "memory index out of step with the database; rebuilding"
                );
                memory.rebuild_locked().await?;
            }
        }
        memory.prune_changes().await;
        Ok(memory)
    }

    /// Stores a fact (merging it into the same fact said before, tags unioned) and indexes it.
    pub async fn remember(
        &self,
        text: &str,
        tags: &[String],
        source: &str,
    ) -> Result<(Fact, Upsert), MemoryError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(MemoryError::EmptyFact);
        }
        let chars = text.chars().count();
        if chars > MAX_FACT_CHARS {
            return Err(MemoryError::FactTooLong(chars));
        }
        let tags: Vec<String> = tags
            .iter()
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect();
        let _gate = self.inner.write_gate.lock().await;
        let (fact, how, seq) = self
            .inner
            .store
            .facts()
            .upsert_logged(text, &tags, source)
            .await?;
        let doc_fact = fact.clone();
        let mark = self.mark_after(seq);
        let indexed = self
            .blocking(move |inner| {
                inner.write(mark, |writer, fields| {
                    // Merged or new, the fact has exactly one document: the latest version.
                    writer.delete_term(Term::from_field_text(fields.id, &doc_fact.id));
                    writer.add_document(document(fields, &doc_fact))?;
                    Ok(())
                })
            })
            .await;
        // The fact is saved either way: the database is the truth, the index catches up.
        self.after_index_write(indexed.map(|()| self.applied_up_to(mark)));
        if let Some(meaning) = &self.inner.meaning {
            meaning.wake();
        }
        Ok((fact, how))
    }

    /// Recall by meaning's state (`None`: keyword only), for `/healthz`, `doctor` and pages.
    pub fn meaning(&self) -> Option<MeaningStatus> {
        self.inner.meaning.as_ref().map(|m| m.status())
    }

    /// Whether recall by meaning is configured but not working now (the server away).
    pub fn meaning_trouble(&self) -> Option<String> {
        let meaning = self.inner.meaning.as_ref()?;
        match meaning.server() {
            meaning::Server::Away(why) => Some(why),
            meaning::Server::Up | meaning::Server::Unknown => None,
        }
    }

    /// Have the embedding worker look for work at once.
    pub fn wake_meaning(&self) {
        if let Some(meaning) = &self.inner.meaning {
            meaning.wake();
        }
    }

    /// With `memory.embeddings`, start the worker that embeds facts in the background, on
    /// `tracker` until `stop`.
    pub fn spawn_meaning(&self, tracker: &TaskTracker, stop: CancellationToken) {
        if let Some(meaning) = &self.inner.meaning {
            tracker.spawn(Arc::clone(meaning).run(stop));
        }
    }

    /// Embed now every fact the current embedding model has no vector of, calling
    /// `progress(done, all)` as it goes; how many were embedded.
    pub async fn embed_all(&self, progress: impl FnMut(i64, i64)) -> Result<i64, MeaningError> {
        match &self.inner.meaning {
            Some(meaning) => meaning.embed_all(progress).await,
            None => Err(MeaningError::Off),
        }
    }

    /// [`LongTerm::embed_all`] without opening the index (`memory reindex --embeddings`,
    /// which may run beside a daemon that holds it): the vectors go to the store, where every
    /// daemon on it loads them.
    pub async fn embed_missing(
        store: Store,
        embedder: Embedder,
        progress: impl FnMut(i64, i64),
    ) -> Result<i64, MeaningError> {
        // The floor only matters for searching, which this does not do.
        Meaning::open(embedder, store, 0.0)
            .await?
            .embed_all(progress)
            .await
    }

    /// Deletes a fact from the store and the index. False when there was no such fact.
    pub async fn forget(&self, id: &str) -> Result<bool, MemoryError> {
        let _gate = self.inner.write_gate.lock().await;
        let seq = self.inner.store.facts().delete(id).await?;
        let id_for_vectors = id.to_string();
        let id = id.to_string();
        let mark = self.mark_after(seq);
        // Deleted from the index even when the store had no such row: that clears a stale
        // document left by a crash.
        let deleted = self
            .blocking(move |inner| {
                inner.write(mark, |writer, fields| {
                    writer.delete_term(Term::from_field_text(fields.id, &id));
                    Ok(())
                })
            })
            .await;
        // A document left behind names a fact the store no longer has: recall skips it, and
        // the repair drops it.
        self.after_index_write(deleted.map(|()| self.applied_up_to(mark)));
        if let Some(meaning) = &self.inner.meaning {
            meaning.drop_fact(&id_for_vectors);
        }
        Ok(seq.is_some())
    }

    /// Rebuilds the index from every fact in the store. Returns how many facts it indexed.
    pub async fn rebuild(&self) -> Result<usize, MemoryError> {
        let _gate = self.inner.write_gate.lock().await;
        self.rebuild_locked().await
    }

    /// [`LongTerm::rebuild`], `write_gate` held.
    async fn rebuild_locked(&self) -> Result<usize, MemoryError> {
        // The sequence's end first, then the facts: every change up to it is in what is read,
        // and a change after it is applied again by the next catch-up (harmlessly).
        let seq = self.inner.store.facts().change_seq().await?;
        let facts = self.inner.store.facts().all().await?;
        let n = self
            .blocking(move |inner| {
                inner.write(seq, |writer, fields| {
                    writer.delete_all_documents()?;
                    for fact in &facts {
                        writer.add_document(document(fields, fact))?;
                    }
                    Ok(facts.len())
                })
            })
            .await?;
        self.applied_up_to(seq);
        self.inner.rebuilds.fetch_add(1, Ordering::SeqCst);
        Ok(n)
    }

    /// Why the index is not used right now, if it is not (recall then reads the database).
    pub fn trouble(&self) -> Option<String> {
        hermes_store::util::lock(&self.inner.trouble).clone()
    }

    /// After a write to the index: on failure, note the trouble and start a repair.
    fn after_index_write(&self, result: Result<(), MemoryError>) {
        let Err(e) = result else {
            return;
        };
        tracing::warn!(error = %e, "memory index write failed; facts stay saved, recall reads the database until the index is rebuilt");
        eprintln!("DIAG after_index_write: {e}; spawning repair (holds a Weak now)");
        *hermes_store::util::lock(&self.inner.trouble) = Some(e.to_string());
        if !self.inner.repairing.swap(true, Ordering::SeqCst) {
            tokio::spawn(LongTerm::repair(Arc::downgrade(&self.inner)));
        }
    }

    /// Reopen the index (recreating its directory) and rebuild it from the database, retrying
    /// with backoff until it works, or until the last handle is dropped: the repair holds the
    /// index only during an attempt, so it does not keep the index (and its lock) open past
    /// the owner's drop, for up to a minute between attempts.
    async fn repair(inner: Weak<Inner>) {
        let mut attempt = 0;
        loop {
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let me = LongTerm { inner };
            let result = async {
                let _gate = me.inner.write_gate.lock().await;
                let seq = me.inner.store.facts().change_seq().await?;
                let facts = me.inner.store.facts().all().await?;
                let n = me
                    .blocking(move |inner| inner.reopen_with(&facts, seq))
                    .await?;
                me.applied_up_to(seq);
                me.inner.rebuilds.fetch_add(1, Ordering::SeqCst);
                Ok::<_, MemoryError>(n)
            }
            .await;
            match result {
                Ok(n) => {
                    eprintln!("DIAG repair done (attempt {attempt})");
                    tracing::info!(facts = n, "memory index rebuilt; recall uses it again");
                    *hermes_store::util::lock(&me.inner.trouble) = None;
                    me.inner.repairing.store(false, Ordering::SeqCst);
                    return;
                }
                Err(e) => {
                    let delay = REPAIR_BACKOFF.delay(attempt);
                    attempt = attempt.saturating_add(1);
                    eprintln!("DIAG repair failed: {e}");
                    tracing::warn!(error = %e, retry_in_s = delay.as_secs(), "memory index repair failed");
                    *hermes_store::util::lock(&me.inner.trouble) = Some(e.to_string());
                    drop(me);
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// Runs tantivy work off the async threads: it does file I/O and CPU-bound scoring.
    async fn blocking<T, F>(&self, work: F) -> Result<T, MemoryError>
    where
        T: Send + 'static,
        F: FnOnce(&Inner) -> Result<T, MemoryError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || work(&inner))
            .await
            .map_err(|e| MemoryError::Worker(e.to_string()))?
    }
}

impl Inner {
    fn index_error(&self, source: TantivyError) -> MemoryError {
        MemoryError::Index {
            path: self.path.clone(),
            source,
        }
    }

    fn lock_index(&self) -> MutexGuard<'_, Opened> {
        // A panic while holding the lock drops the write's writer on the way out, and with it
        // its uncommitted operations.
        hermes_store::util::lock(&self.index)
    }

    /// Open the index afresh (its directory recreated if it went away) and fill it with
    /// `facts`, which are the store's as of change `seq`. This process's lock on the old one
    /// is released first.
    fn reopen_with(&self, facts: &[Fact], seq: i64) -> Result<usize, MemoryError> {
        let mut index = self.lock_index();
        index.lock = None;
        let (fresh, _) = open_index(&self.path)?;
        let fields = self.fields;
        let mut writer = open_writer(&fresh.index).map_err(|e| self.index_error(e))?;
        let mark = follow::mark(seq, &self.source);
        let filled = writer.delete_all_documents().and_then(|_| {
            for fact in facts {
                writer.add_document(document(fields, fact))?;
            }
            let mut commit = writer.prepare_commit()?;
            commit.set_payload(&mark);
            commit.commit()
        });
        filled.map_err(|e| self.index_error(e))?;
        close_writer(writer);
        fresh.reader.reload().map_err(|e| self.index_error(e))?;
        *index = fresh;
        Ok(facts.len())
    }

    /// Applies `change` with a writer opened for it and commits it, recording that the index
    /// has applied the fact change sequence up to `seq`; on failure the writer is dropped
    /// uncommitted, so a failed write leaves no half-applied operations behind. The reader is
    /// reloaded after the commit. Callers hold `write_gate`: one write at a time.
    fn write<T>(
        &self,
        seq: i64,
        change: impl FnOnce(&mut IndexWriter, Fields) -> tantivy::Result<T>,
    ) -> Result<T, MemoryError> {
        // Recall only needs the mutex for a moment to take a searcher: not held while indexing.
        let index = {
            let opened = self.lock_index();
            // A reopen that failed has let go of the process lock, and another process may
            // hold it now: writing would be two writers on one index. The repair relocks.
            if opened.lock.is_none() {
                return Err(MemoryError::Rebuilding {
                    path: self.path.clone(),
                });
            }
            opened.index.clone()
        };
        let mut writer = open_writer(&index).map_err(|e| self.index_error(e))?;
        let mark = follow::mark(seq, &self.source);
        let value = change(&mut writer, self.fields)
            .and_then(|value| {
                // The mark goes into the commit itself: the index and what it has applied can
                // never disagree, whenever the process stops.
                let mut commit = writer.prepare_commit()?;
                commit.set_payload(&mark);
                commit.commit()?;
                Ok(value)
            })
            .map_err(|e| self.index_error(e))?;
        close_writer(writer);
        self.lock_index()
            .reader
            .reload()
            .map_err(|e| self.index_error(e))?;
        Ok(value)
    }

    fn search(&self, terms: &[String], k: usize) -> Result<Vec<(String, f32)>, MemoryError> {
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::with_capacity(terms.len() * 2);
        for term in terms {
            for field in [self.fields.text, self.fields.tags] {
                clauses.push((
                    Occur::Should,
                    Box::new(TermQuery::new(
                        Term::from_field_text(field, term),
                        IndexRecordOption::WithFreqs,
                    )),
                ));
            }
        }
        let query = BooleanQuery::new(clauses);
        let searcher = self.lock_index().reader.searcher();
        let top = searcher
            .search(&query, &TopDocs::with_limit(k).order_by_score())
            .map_err(|e| self.index_error(e))?;
        let mut hits = Vec::with_capacity(top.len());
        for (score, address) in top {
            let doc: TantivyDocument = searcher.doc(address).map_err(|e| self.index_error(e))?;
            if let Some(id) = doc.get_first(self.fields.id).and_then(|v| v.as_str()) {
                hits.push((id.to_string(), score));
            }
        }
        Ok(hits)
    }
}

mod follow;
#[cfg(test)]
mod follow_tests;
mod index;
mod meaning;
mod recall;
#[cfg(test)]
mod tests;
mod vectors;
