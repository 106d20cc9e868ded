//! Recall: the keyword ranking (the index, or the database while the index is repaired), the
//! vector ranking beside it when recall by meaning is on, their fusion, and the facts as the
//! store has them.
//!
//! Owns: how a query becomes ranked facts. Must not: write to the index or the store.

use super::{LongTerm, MemoryError, Recalled, vectors};
use crate::memory::tokenize;
use hermes_store::{Fact, StoreError};

/// Extra hits fetched beyond `k` so ties at the cut can be broken by recency.
const TIE_SLACK: usize = 8;
/// Keyword and vector candidates fetched per result asked for, before fusion: a fact ranked
/// low in one ranking can still come first in the fused one.
const CANDIDATES_PER_RESULT: usize = 4;
/// At least this many candidates from each ranking.
const MIN_CANDIDATES: usize = 20;

impl LongTerm {
    /// The facts best matching `query`, best first, at most `k`: by its words (BM25), and with
    /// `memory.embeddings` by its meaning as well, the two rankings fused by reciprocal rank.
    /// Equal keyword scores put the most recently updated fact first.
    pub async fn recall(&self, query: &str, k: usize) -> Result<Vec<Recalled>, MemoryError> {
        // A fact that shares only "is" or "的" with the query is not about it.
        let terms = tokenize::content_terms(query);
        if k == 0 || (terms.is_empty() && self.inner.meaning.is_none()) {
            return Ok(Vec::new());
        }
        let Some(meaning) = &self.inner.meaning else {
            return self.recall_by_words(&terms, k).await;
        };
        let n = (k * CANDIDATES_PER_RESULT).max(MIN_CANDIDATES);
        let (by_words, by_meaning) =
            tokio::join!(self.keyword_hits(&terms, n), meaning.nearest(query, n));
        let by_words = by_words?;
        let Some(by_meaning) = by_meaning.filter(|v| !v.is_empty()) else {
            // The server away or slow, or nothing near enough: exactly keyword recall.
            return self.recall_by_words(&terms, k).await;
        };
        let mut out = Vec::with_capacity(k);
        for found in vectors::fuse(&by_words, &by_meaning) {
            if out.len() == k {
                break;
            }
            if let Some(fact) = self.stored_fact(&found.id).await? {
                out.push(Recalled {
                    fact,
                    score: found.score,
                    keyword_rank: found.keyword.map(|(rank, _)| rank),
                    similarity: found.vector.map(|(_, similarity)| similarity),
                });
            }
        }
        Ok(out)
    }

    /// The fact as the store has it; `None` (and a warning) when the index or the vectors name
    /// one it no longer has.
    async fn stored_fact(&self, id: &str) -> Result<Option<Fact>, MemoryError> {
        match self.inner.store.facts().get(id).await {
            Ok(fact) => Ok(Some(fact)),
            // The index can only be ahead of the store after a crash between the two
            // writes; the store is the truth, and the next open recounts and rebuilds.
            Err(StoreError::NotFound { .. }) => {
                tracing::warn!(%id, "memory index names a fact the database does not have; skipping it");
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The ids and BM25 scores of the `n` facts best matching `terms`, best first: from the
    /// index, or the database while the index is being repaired.
    async fn keyword_hits(
        &self,
        terms: &[String],
        n: usize,
    ) -> Result<Vec<(String, f32)>, MemoryError> {
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        if self.trouble().is_none() {
            let terms = terms.to_vec();
            match self.blocking(move |inner| inner.search(&terms, n)).await {
                Ok(hits) => return Ok(hits),
                Err(e) => self.after_index_write(Err(e)),
            }
        }
        Ok(self
            .recall_from_store(terms, n)
            .await?
            .into_iter()
            .map(|r| (r.fact.id, r.score))
            .collect())
    }

    /// Recall by words only: keyword recall as it was before meaning, and what recall falls
    /// back to while the embedding server is away.
    async fn recall_by_words(
        &self,
        terms: &[String],
        k: usize,
    ) -> Result<Vec<Recalled>, MemoryError> {
        if terms.is_empty() {
            return Ok(Vec::new());
        }
        if self.trouble().is_some() {
            return self.recall_from_store(terms, k).await;
        }
        let searched = {
            let terms = terms.to_vec();
            self.blocking(move |inner| inner.search(&terms, k + TIE_SLACK))
                .await
        };
        let mut hits = match searched {
            Ok(hits) => hits,
            Err(e) => {
                self.after_index_write(Err(e));
                return self.recall_from_store(terms, k).await;
            }
        };
        // Equal scores are common for short facts. Keep every hit tied with the k-th, so the
        // tie-break below (newest first) decides, not the index's internal document order,
        // which changes when the index is rebuilt.
        if let Some(&(_, kth)) = hits.get(k.saturating_sub(1)) {
            hits.retain(|&(_, score)| score >= kth);
        }
        let mut out = Vec::with_capacity(hits.len());
        for (id, score) in hits {
            if let Some(fact) = self.stored_fact(&id).await? {
                out.push(Recalled {
                    fact,
                    score,
                    keyword_rank: None,
                    similarity: None,
                });
            }
        }
        out.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| b.fact.updated_at.cmp(&a.fact.updated_at))
                .then_with(|| a.fact.id.cmp(&b.fact.id))
        });
        out.truncate(k);
        ranked(&mut out);
        Ok(out)
    }

    /// Recall without the index: every fact scored by how many of the query's terms it has.
    /// Slower (it reads every fact), and only used while the index is being rebuilt.
    async fn recall_from_store(
        &self,
        terms: &[String],
        k: usize,
    ) -> Result<Vec<Recalled>, MemoryError> {
        let wanted: std::collections::HashSet<&str> = terms.iter().map(String::as_str).collect();
        let mut found: Vec<Recalled> = self
            .inner
            .store
            .facts()
            .all()
            .await?
            .into_iter()
            .filter_map(|fact| {
                let mut text = fact.text.clone();
                for tag in &fact.tags {
                    text.push(' ');
                    text.push_str(tag);
                }
                let have: std::collections::HashSet<String> =
                    tokenize::terms(&text).into_iter().collect();
                let score = wanted.iter().filter(|t| have.contains(**t)).count();
                (score > 0).then_some(Recalled {
                    fact,
                    score: score as f32,
                    keyword_rank: None,
                    similarity: None,
                })
            })
            .collect();
        found.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| b.fact.updated_at.cmp(&a.fact.updated_at))
        });
        found.truncate(k);
        ranked(&mut found);
        Ok(found)
    }
}

/// Number a keyword ranking: each result's place in it.
fn ranked(found: &mut [Recalled]) {
    for (i, r) in found.iter_mut().enumerate() {
        r.keyword_rank = u32::try_from(i + 1).ok();
    }
}
