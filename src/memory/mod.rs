//! Memory in three layers: the short-term window (RAM), working memory (SQLite, via the store)
//! and long-term facts (a tantivy index derived from the store's `facts` table).
//!
//! Must not: call the model except through the gateway handle it is given.
