//! Recall by meaning: the facts' vectors from the embedding server, made in the background and
//! searched beside the keyword index.
//!
//! A fact is stored and indexed by its words first; the worker ([`Meaning::run`]) finds the
//! facts the current model has no vector of, embeds them in batches and stores the vectors
//! (bytes, with the model and dimensions they came from). Each daemon holds the current
//! model's vectors in memory ([`VectorSet`]), loaded by `seq` from the store. A recall embeds
//! its query with a short wait and searches them exactly. While the server is slow or away,
//! recall is by keyword only and costs no wait: the worker probes it with backoff and says
//! once in the log when it goes and comes back. A model change (name or dimensions) is a new
//! set of vectors made beside the old ones, which are deleted only once replaced.
//!
//! Owns: the worker, the in-memory vectors and the server's state. Must not: write facts, log a
//! fact's text, or make a task wait on the embedding server longer than [`QUERY_WAIT`].

use super::vectors::{self, VectorSet};
use crate::llm::{EmbedError, Embedder};
use chrono::{DateTime, Utc};
use hermes_store::{Store, StoreError, VectorModel};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The longest a recall waits for its query's vector: past it, that recall is by keyword and
/// the server counts as away until the worker hears from it again.
pub(crate) const QUERY_WAIT: Duration = Duration::from_secs(1);
/// Retries of an away server: soon at first, then every minute at most.
const RETRY_BACKOFF: hermes_store::util::Backoff =
    hermes_store::util::Backoff::new(Duration::from_secs(1), Duration::from_secs(60));
/// With nothing to embed, how often the worker looks again (facts written by another process,
/// vectors by `memory reindex --embeddings`); a fact remembered here wakes it at once.
const IDLE_EVERY: Duration = Duration::from_secs(60);
/// Vector rows loaded at a time into memory.
const LOAD_BATCH: i64 = 1024;
/// What the worker sends to learn the server's dimensions (and that it answers).
const PROBE: &str = "hello";
/// Above this many vectors a search runs on the blocking pool rather than an async thread.
const SEARCH_INLINE_MAX: usize = 4096;
/// After a wake, how long the worker waits for more facts to come before it embeds: facts
/// remembered in a burst go in one request (and one write), not one each.
const GATHER: Duration = Duration::from_millis(250);

/// What is known of the embedding server.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Server {
    /// Not asked yet: a recall may try it.
    Unknown,
    /// It answered last time.
    Up,
    /// It failed last time, for this reason (no fact text in it).
    Away(String),
}

/// What the worker did in one step.
enum Step {
    /// Stored this many facts' vectors (or refusals).
    Embedded(usize),
    NothingToDo,
}

/// Where the worker's walk through the facts got to, for one model: the last fact it
/// embedded, or the newest fact when a walk from the start found nothing to do.
type Cursor = (VectorModel, DateTime<Utc>, String);

/// The state `/healthz`, `doctor` and the dashboard show.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MeaningStatus {
    pub model: String,
    pub dims: Option<u32>,
    /// The current model's vectors held in memory.
    pub vectors: usize,
    /// What they take in memory, ids included.
    pub bytes: usize,
    pub server: ServerState,
    /// Why the server is away (no fact text in it); `None` otherwise.
    pub reason: Option<String>,
}

/// The embedding server as recall sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerState {
    /// Not heard from yet.
    Starting,
    Ok,
    /// It failed last time: recall is by keyword until it answers again.
    Away,
}

pub(crate) struct Meaning {
    embedder: Embedder,
    store: Store,
    min_similarity: f32,
    set: RwLock<VectorSet>,
    server: Mutex<Server>,
    wake: tokio::sync::Notify,
    cursor: Mutex<Option<Cursor>>,
    /// Another model's vectors may wait to be deleted once replaced: looked at when a walk
    /// has nothing left to do (at open, and after a model change).
    prune_due: std::sync::atomic::AtomicBool,
}

impl Meaning {
    /// Loads the vectors of `embedder`'s model at the dimensions last stored; the server is
    /// not asked until the worker or a recall asks it.
    pub(crate) async fn open(
        embedder: Embedder,
        store: Store,
        min_similarity: f32,
    ) -> Result<Arc<Meaning>, StoreError> {
        let dims = store.vectors().dims(embedder.model()).await?;
        let meaning = Arc::new(Meaning {
            set: RwLock::new(match dims {
                Some(dims) => VectorSet::for_model(VectorModel {
                    model: embedder.model().to_string(),
                    dims,
                }),
                None => VectorSet::default(),
            }),
            embedder,
            store,
            min_similarity,
            server: Mutex::new(Server::Unknown),
            wake: tokio::sync::Notify::new(),
            cursor: Mutex::new(None),
            prune_due: std::sync::atomic::AtomicBool::new(true),
        });
        meaning.load().await?;
        Ok(meaning)
    }

    /// Look for facts to embed at once (one was just remembered).
    pub(crate) fn wake(&self) {
        self.wake.notify_one();
    }

    fn model(&self) -> Option<VectorModel> {
        hermes_store::util::read(&self.set).model().cloned()
    }

    pub(crate) fn status(&self) -> MeaningStatus {
        let (model, len, bytes) = {
            let set = hermes_store::util::read(&self.set);
            (set.model().cloned(), set.len(), set.bytes())
        };
        MeaningStatus {
            model: self.embedder.model().to_string(),
            dims: model.map(|m| m.dims),
            vectors: len,
            bytes,
            server: match self.server() {
                Server::Unknown => ServerState::Starting,
                Server::Up => ServerState::Ok,
                Server::Away(_) => ServerState::Away,
            },
            reason: match self.server() {
                Server::Away(why) => Some(why),
                Server::Unknown | Server::Up => None,
            },
        }
    }

    pub(crate) fn server(&self) -> Server {
        hermes_store::util::lock(&self.server).clone()
    }

    /// Notes what the server did; a change is said once in the log.
    fn heard(&self, now: Server) {
        let before = std::mem::replace(&mut *hermes_store::util::lock(&self.server), now.clone());
        match (&before, &now) {
            (Server::Away(_), Server::Up) => {
                tracing::info!(url = %self.embedder.url(), "embedding server answers again; recall is by meaning and keyword")
            }
            (Server::Up | Server::Unknown, Server::Away(why)) => {
                tracing::warn!(url = %self.embedder.url(), reason = %why, "embedding server away; recall is by keyword until it answers")
            }
            _ => {}
        }
    }

    fn away(&self, e: &EmbedError) {
        self.heard(Server::Away(e.to_string()));
    }

    /// Load the vectors written since the last load (this process's, another node's, or
    /// `memory reindex --embeddings`'s).
    pub(crate) async fn load(&self) -> Result<usize, StoreError> {
        let mut loaded = 0;
        loop {
            let (model, after) = {
                let set = hermes_store::util::read(&self.set);
                match set.model() {
                    Some(m) => (m.clone(), set.loaded),
                    None => return Ok(loaded),
                }
            };
            let rows = self
                .store
                .vectors()
                .after(&model, after, LOAD_BATCH)
                .await?;
            let Some(last) = rows.last().map(|r| r.seq) else {
                return Ok(loaded);
            };
            let n = rows.len();
            let mut set = hermes_store::util::write(&self.set);
            // The model changed while the rows were read: they are the old one's.
            if set.model() != Some(&model) {
                continue;
            }
            for row in rows {
                // A refusal (no bytes) has no vector; neither has a row of other dimensions.
                if let Some(v) =
                    vectors::decode(&row.vector, model.dims).and_then(vectors::normalised)
                {
                    set.insert(&row.fact_id, &v);
                }
            }
            set.loaded = last;
            loaded += n;
            if (n as i64) < LOAD_BATCH {
                return Ok(loaded);
            }
        }
    }

    /// Forget a fact's vector (the fact was forgotten, here or on another node).
    pub(crate) fn drop_fact(&self, id: &str) {
        hermes_store::util::write(&self.set).remove(id);
    }

    /// Start holding `model`'s vectors (the server answers another model or dimension), and
    /// load those already stored.
    async fn switch_to(&self, model: VectorModel) -> Result<(), StoreError> {
        if self.model().as_ref() == Some(&model) {
            return Ok(());
        }
        tracing::info!(
            model = %model.model,
            dims = model.dims,
            "embedding model changed; facts are embedded again in the background, and recall by meaning uses the new vectors as they come (the old ones are kept until replaced)"
        );
        *hermes_store::util::write(&self.set) = VectorSet::for_model(model);
        self.prune_due
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.load().await.map(|_| ())
    }

    /// The facts nearest to `query` by meaning, nearest first, at most `n`; `None` when
    /// meaning cannot be used right now (the server away or slow, no vectors yet).
    pub(crate) async fn nearest(
        self: &Arc<Self>,
        query: &str,
        n: usize,
    ) -> Option<Vec<(String, f32)>> {
        if matches!(self.server(), Server::Away(_)) {
            return None;
        }
        let held = hermes_store::util::read(&self.set).len();
        if held == 0 {
            return None;
        }
        let asked =
            tokio::time::timeout(QUERY_WAIT, self.embedder.embed(&[query], QUERY_WAIT)).await;
        let vector = match asked {
            Ok(Ok(mut v)) => v.pop(),
            Ok(Err(e)) => {
                self.away(&e);
                self.wake();
                return None;
            }
            Err(_) => {
                self.away(&EmbedError::Timeout {
                    url: self.embedder.url().to_string(),
                    secs: QUERY_WAIT.as_secs_f64(),
                });
                self.wake();
                return None;
            }
        }?;
        let query = vectors::normalised(vector)?;
        let dims = u32::try_from(query.len()).ok()?;
        if self.model().map(|m| m.dims) != Some(dims) {
            // Another model answers under this name: the worker learns it and re-embeds.
            self.heard(Server::Unknown);
            self.wake();
            return None;
        }
        let floor = self.min_similarity;
        if held <= SEARCH_INLINE_MAX {
            return Some(hermes_store::util::read(&self.set).nearest(&query, n, floor));
        }
        let me = Arc::clone(self);
        tokio::task::spawn_blocking(move || {
            hermes_store::util::read(&me.set).nearest(&query, n, floor)
        })
        .await
        .ok()
    }

    /// Embed facts until none is left, then wait to be woken; the server's failures are
    /// retried with backoff. Until `stop`.
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let mut failures: u32 = 0;
        // From the start at first and after each quiet spell: facts another process wrote,
        // or older than where the walk got to, are found then.
        let mut from_start = true;
        loop {
            let wait = match self.step(from_start).await {
                Ok(Step::Embedded(_)) => {
                    failures = 0;
                    from_start = false;
                    continue;
                }
                Ok(Step::NothingToDo) => {
                    failures = 0;
                    IDLE_EVERY
                }
                Err(e) => {
                    let wait = RETRY_BACKOFF.delay(failures);
                    failures = failures.saturating_add(1);
                    if let Worker::Store(e) = &e {
                        tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "could not read or write fact vectors");
                    }
                    wait
                }
            };
            from_start = tokio::select! {
                biased;
                _ = stop.cancelled() => return,
                _ = self.wake.notified() => {
                    tokio::select! {
                        biased;
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(GATHER) => {}
                    }
                    false
                }
                _ = tokio::time::sleep(wait) => true,
            };
        }
    }

    /// One batch: learn the model's dimensions if they are not known to be current, embed the
    /// oldest facts without a vector (after where the walk got to, unless `from_start`), store
    /// the vectors and load them.
    async fn step(&self, from_start: bool) -> Result<Step, Worker> {
        let model = match (self.server(), self.model()) {
            (Server::Up, Some(model)) => model,
            _ => self.probe().await?,
        };
        self.load().await?;
        let after = match hermes_store::util::lock(&self.cursor).clone() {
            Some((m, at, id)) if m == model && !from_start => Some((at, id)),
            _ => None,
        };
        let batch = i64::try_from(self.embedder.batch()).unwrap_or(64);
        // Read before the walk, not after: a fact remembered between the walk and this read
        // would otherwise be the cursor, and every later walk would start after it unembedded
        // (until the next walk from the start, a minute later).
        let newest = match after {
            None => self.store.facts().newest().await?,
            Some(_) => None,
        };
        let todo = self
            .store
            .vectors()
            .unembedded(
                &model,
                after.as_ref().map(|(at, id)| (*at, id.as_str())),
                batch,
            )
            .await?;
        let Some(last) = todo.last() else {
            if after.is_none() {
                // Nothing older is missing: later walks start from the newest fact then.
                *hermes_store::util::lock(&self.cursor) =
                    newest.map(|(at, id)| (model.clone(), at, id));
            }
            if after.is_none()
                || self
                    .prune_due
                    .swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                let pruned = self.store.vectors().prune_replaced(&model).await?;
                if pruned > 0 {
                    tracing::info!(
                        rows = pruned,
                        "deleted fact vectors of an earlier embedding model, all replaced"
                    );
                }
            }
            return Ok(Step::NothingToDo);
        };
        let next = (model.clone(), last.created_at, last.id.clone());
        let texts: Vec<&str> = todo.iter().map(|f| f.text.as_str()).collect();
        let made = match self.embedder.embed(&texts, self.embedder.timeout()).await {
            Ok(made) => made,
            Err(e) if e.input_refused() => self.one_by_one(&todo).await?,
            Err(e) => {
                self.away(&e);
                return Err(Worker::Server);
            }
        };
        if made
            .iter()
            .any(|v| !v.is_empty() && v.len() != model.dims as usize)
        {
            // The server changed model under the same name between two requests.
            self.heard(Server::Unknown);
            return Ok(Step::Embedded(0));
        }
        self.heard(Server::Up);
        let rows: Vec<(String, Vec<u8>)> = todo
            .iter()
            .zip(&made)
            .map(|(f, v)| (f.id.clone(), vectors::encode(v)))
            .collect();
        self.store.vectors().put(&model, &rows).await?;
        *hermes_store::util::lock(&self.cursor) = Some(next);
        self.load().await?;
        Ok(Step::Embedded(rows.len()))
    }

    /// A batch the server refused, fact by fact, each cut shorter while it is refused; a fact
    /// refused even cut short gets an empty vector (recorded, so it is not sent again).
    async fn one_by_one(&self, todo: &[hermes_store::Unembedded]) -> Result<Vec<Vec<f32>>, Worker> {
        let mut made = Vec::with_capacity(todo.len());
        for fact in todo {
            match self.embedder.embed_one_cutting(&fact.text).await {
                Ok(v) => made.push(v),
                Err(e) if e.input_refused() => {
                    tracing::warn!(fact = %fact.id, error = %e, "the embedding server refused this fact even cut short; it is recalled by keyword only");
                    made.push(Vec::new());
                }
                Err(e) => {
                    self.away(&e);
                    return Err(Worker::Server);
                }
            }
        }
        Ok(made)
    }

    /// Ask the server for one vector: it answers (the model is what it says), or not.
    async fn probe(&self) -> Result<VectorModel, Worker> {
        let answer = self.embedder.embed(&[PROBE], self.embedder.timeout()).await;
        let dims = match answer {
            Ok(v) => v.first().map(Vec::len).unwrap_or(0),
            Err(e) => {
                self.away(&e);
                return Err(Worker::Server);
            }
        };
        let model = VectorModel {
            model: self.embedder.model().to_string(),
            dims: u32::try_from(dims).unwrap_or(0),
        };
        self.switch_to(model.clone()).await?;
        self.heard(Server::Up);
        Ok(model)
    }

    /// Embed every fact the current model has no vector of now, calling `progress(done, all)`
    /// after each batch (`memory reindex --embeddings`). How many were embedded.
    pub(crate) async fn embed_all(
        &self,
        mut progress: impl FnMut(i64, i64),
    ) -> Result<i64, MeaningError> {
        let model = self.probe().await.map_err(|e| self.explain(e))?;
        let counts = self.store.vectors().counts(&model).await?;
        let all = (self.store.facts().count().await? - counts.embedded - counts.refused).max(0);
        let mut done: i64 = 0;
        progress(done, all);
        let mut from_start = true;
        loop {
            match self.step(from_start).await.map_err(|e| self.explain(e))? {
                Step::Embedded(n) => {
                    done += i64::try_from(n).unwrap_or(0);
                    // Facts remembered meanwhile count too.
                    progress(done, all.max(done));
                    from_start = false;
                }
                Step::NothingToDo => return Ok(done),
            }
        }
    }

    fn explain(&self, e: Worker) -> MeaningError {
        match e {
            Worker::Store(e) => MeaningError::Store(e),
            Worker::Server => MeaningError::Server(match self.server() {
                Server::Away(why) => why,
                _ => "the embedding server did not answer".into(),
            }),
        }
    }
}

/// Why a worker step failed: the store (logged by the worker), or the server (noted in the
/// server's state, which logs it once).
enum Worker {
    Store(StoreError),
    Server,
}

impl From<StoreError> for Worker {
    fn from(e: StoreError) -> Worker {
        Worker::Store(e)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MeaningError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Server(String),
    #[error(
        "recall by meaning is off: add a memory.embeddings section (base_url, model) to the settings first"
    )]
    Off,
}
