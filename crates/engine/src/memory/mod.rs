//! Memory in three layers: the short-term window (RAM), working memory (the database, via the
//! store) and long-term facts (a tantivy index derived from the store's `facts` table).
//!
//! - [`window`]: [`ShortTerm`], the messages one task sends the model — preamble, goal, a summary
//!   of older rounds (at most `summary_max_length` characters) and the last `max_dialog_rounds`
//!   rounds. Owned by its task; nothing is shared between tasks.
//! - [`longterm`]: [`LongTerm`], facts and preferences searched with BM25 in Chinese and English,
//!   and with `memory.embeddings` by meaning too (vectors from any `/v1/embeddings` server,
//!   made in the background, kept as bytes in the store, fused with the keyword ranking).
//!   The store's `facts` table is the truth; the index at `DATA_DIR/memory-index` catches up with
//!   the store's fact change sequence (at open, and every second on a shared database), and is
//!   rebuilt from the facts whenever it is missing, damaged, miscounted or too far behind.
//! - [`tokenize`]: the CJK-aware, dictionary-free analyzer the index uses.
//!
//! Working memory (intermediate results by key) is the store's `working` API and its tool.
//!
//! Must not: call the model except through the gateway handle it is given.

pub(crate) mod longterm;
pub(crate) mod tokenize;
pub mod window;

pub use longterm::{LongTerm, MeaningError, MeaningStatus, MemoryError, Recalled, ServerState};
pub use window::{ShortTerm, Summariser, SummaryModel};
