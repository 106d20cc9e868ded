//! The tantivy index on disk: its schema, opening it (and telling a locked index from a broken
//! one), this process's lock on it, and a writer that lives for one write.
//!
//! Owns: everything that touches tantivy's files. Must not: decide when to rebuild or what to
//! write (the [`super::LongTerm`] around it does).

use super::super::tokenize::{self, ANALYZER_NAME};
use super::MemoryError;
use hermes_store::Fact;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tantivy::directory::error::{
    DeleteError, LockError, OpenDirectoryError, OpenReadError, OpenWriteError,
};
use tantivy::directory::{
    Directory, DirectoryLock, FileHandle, Lock, MmapDirectory, WatchCallback, WatchHandle, WritePtr,
};
use tantivy::indexer::IndexWriterOptions;
use tantivy::schema::{
    Field, IndexRecordOption, STORED, STRING, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::{
    Index, IndexReader, IndexSettings, IndexWriter, ReloadPolicy, TantivyDocument, TantivyError,
};

/// The writer's indexing arena. Tantivy's minimum; it is only allocated while documents are
/// being indexed, by a writer that lives for one write.
const WRITER_MEMORY_BYTES: usize = 15_000_000;
/// This process's lock on the index directory, held from open to drop: between writes there is
/// no tantivy writer (whose own lock file is `.tantivy-writer.lock`) to keep others out.
const PROCESS_LOCK: &str = ".hermes-memory.lock";

#[derive(Clone, Copy)]
pub(super) struct Fields {
    pub(super) id: Field,
    pub(super) text: Field,
    pub(super) tags: Field,
}

pub(super) fn schema() -> (Schema, Fields) {
    let mut builder = Schema::builder();
    let analysed = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER_NAME)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let id = builder.add_text_field("id", STRING | STORED);
    let text = builder.add_text_field("text", analysed.clone());
    let tags = builder.add_text_field("tags", analysed);
    (builder.build(), Fields { id, text, tags })
}

/// tantivy's `MmapDirectory`, but its locks (this process's and tantivy's writer lock) are let
/// go by an explicit unlock when dropped. tantivy's own locks are let go by closing their file
/// only: an flock belongs to the open file, which a child forked meanwhile (a tool's process,
/// or in tests another test's, between its fork and its exec) shares until it execs — so the
/// lock outlived the handle that held it, and a reopen right after a drop was refused.
#[derive(Clone, Debug)]
struct Unlocking {
    root: PathBuf,
    inner: MmapDirectory,
}

/// A lock file held by flock, unlocked (for every copy of its descriptor) on drop.
struct HeldLock(File);

impl Drop for HeldLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

impl Unlocking {
    fn open(root: &Path) -> Result<Unlocking, OpenDirectoryError> {
        Ok(Unlocking {
            root: root.to_path_buf(),
            inner: MmapDirectory::open(root)?,
        })
    }
}

impl Directory for Unlocking {
    fn get_file_handle(&self, path: &Path) -> Result<Arc<dyn FileHandle>, OpenReadError> {
        self.inner.get_file_handle(path)
    }
    fn delete(&self, path: &Path) -> Result<(), DeleteError> {
        self.inner.delete(path)
    }
    fn exists(&self, path: &Path) -> Result<bool, OpenReadError> {
        self.inner.exists(path)
    }
    fn open_write(&self, path: &Path) -> Result<WritePtr, OpenWriteError> {
        self.inner.open_write(path)
    }
    fn atomic_read(&self, path: &Path) -> Result<Vec<u8>, OpenReadError> {
        self.inner.atomic_read(path)
    }
    fn atomic_write(&self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        self.inner.atomic_write(path, data)
    }
    fn sync_directory(&self) -> std::io::Result<()> {
        self.inner.sync_directory()
    }
    fn watch(&self, callback: WatchCallback) -> tantivy::Result<WatchHandle> {
        self.inner.watch(callback)
    }
    fn acquire_lock(&self, lock: &Lock) -> Result<DirectoryLock, LockError> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(self.root.join(&lock.filepath))
            .map_err(LockError::wrap_io_error)?;
        if lock.is_blocking {
            file.lock().map_err(LockError::wrap_io_error)?;
        } else {
            file.try_lock().map_err(|e| match e {
                TryLockError::WouldBlock => LockError::LockBusy,
                TryLockError::Error(e) => LockError::wrap_io_error(e),
            })?;
        }
        Ok(DirectoryLock::from(Box::new(HeldLock(file))))
    }
}

/// The index, opened and locked for this process, or why not.
pub(super) struct Opened {
    pub(super) index: Index,
    pub(super) reader: IndexReader,
    /// `None` only while [`Inner::reopen_with`] reopens the index (it lets go first, so the
    /// fresh open can take it again).
    pub(super) lock: Option<DirectoryLock>,
}

pub(super) enum OpenFailure {
    /// Another process holds the index lock: the index may be fine, so leave it alone.
    Locked,
    /// Unreadable, or built with another schema: delete and rebuild.
    Unusable(String),
}

/// [`try_open_inner`], with a panic counted as damage: tantivy can panic (an arithmetic
/// overflow) on a truncated segment file instead of returning an error.
pub(super) fn try_open(path: &Path, schema: &Schema) -> Result<Opened, OpenFailure> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        try_open_inner(path, schema)
    }))
    .unwrap_or_else(|panic| {
        let why = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "tantivy panicked while opening it".into());
        Err(OpenFailure::Unusable(why))
    })
}

pub(super) fn try_open_inner(path: &Path, schema: &Schema) -> Result<Opened, OpenFailure> {
    let unusable = |e: TantivyError| OpenFailure::Unusable(e.to_string());
    let directory = Unlocking::open(path).map_err(|e| OpenFailure::Unusable(e.to_string()))?;
    let index = if path.join("meta.json").exists() {
        let index = Index::open(directory).map_err(unusable)?;
        if &index.schema() != schema {
            return Err(OpenFailure::Unusable(
                "it was built with another schema".into(),
            ));
        }
        index
    } else {
        Index::create(directory, schema.clone(), IndexSettings::default()).map_err(unusable)?
    };
    index
        .tokenizers()
        .register(ANALYZER_NAME, tokenize::analyzer());
    // The reader opens every segment, so damaged segment files show up here, before the
    // lock is taken.
    let reader = index
        .reader_builder()
        .reload_policy(ReloadPolicy::Manual)
        .try_into()
        .map_err(unusable)?;
    let lock = index
        .directory()
        .acquire_lock(&Lock {
            filepath: PathBuf::from(PROCESS_LOCK),
            is_blocking: false,
        })
        .map_err(|e| match e {
            LockError::LockBusy => OpenFailure::Locked,
            other => OpenFailure::Unusable(other.to_string()),
        })?;
    Ok(Opened {
        index,
        reader,
        lock: Some(lock),
    })
}

/// A writer for one write: one indexing thread and one merge thread (tantivy's default is
/// four), started now and stopped by [`close_writer`] or on drop. Dropped without a commit,
/// it discards what it was given.
pub(super) fn open_writer(index: &Index) -> tantivy::Result<IndexWriter> {
    index.writer_with_options(
        IndexWriterOptions::builder()
            .num_worker_threads(1)
            .num_merge_threads(1)
            .memory_budget_per_thread(WRITER_MEMORY_BYTES)
            .build(),
    )
}

/// Lets the merges a commit started finish, then stops the writer's threads. A failed merge
/// leaves the index correct (its segments unmerged), so it is only logged.
pub(super) fn close_writer(writer: IndexWriter) {
    if let Err(e) = writer.wait_merging_threads() {
        tracing::warn!(error = %e, "memory index merge failed; the index stays correct, in more segments");
    }
}

pub(super) fn open_index(path: &Path) -> Result<(Opened, Fields), MemoryError> {
    let io = |source| MemoryError::Io {
        path: path.to_path_buf(),
        source,
    };
    let (schema, fields) = schema();
    std::fs::create_dir_all(path).map_err(io)?;
    match try_open(path, &schema) {
        Ok(opened) => Ok((opened, fields)),
        Err(OpenFailure::Locked) => Err(MemoryError::Locked {
            path: path.to_path_buf(),
        }),
        Err(OpenFailure::Unusable(why)) => {
            tracing::warn!(path = %path.display(), %why, "memory index unusable; rebuilding it from the database");
            std::fs::remove_dir_all(path).map_err(io)?;
            std::fs::create_dir_all(path).map_err(io)?;
            match try_open(path, &schema) {
                Ok(opened) => Ok((opened, fields)),
                Err(OpenFailure::Locked) => Err(MemoryError::Locked {
                    path: path.to_path_buf(),
                }),
                Err(OpenFailure::Unusable(why)) => Err(MemoryError::Index {
                    path: path.to_path_buf(),
                    source: TantivyError::SystemError(why),
                }),
            }
        }
    }
}

pub(super) fn document(fields: Fields, fact: &Fact) -> TantivyDocument {
    let mut doc = TantivyDocument::default();
    doc.add_text(fields.id, &fact.id);
    doc.add_text(fields.text, &fact.text);
    for tag in &fact.tags {
        doc.add_text(fields.tags, tag);
    }
    doc
}
