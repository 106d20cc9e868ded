//! Vectors in memory and their arithmetic: the bytes they are stored as, the current model's
//! vectors of every fact held normalised in one block, exact cosine search over them, and the
//! reciprocal rank fusion of a keyword ranking with a vector ranking.
//!
//! Owns: pure computation on data it is handed. Must not: reach the store, the index or the
//! network (`meaning` around it does).

use hermes_store::VectorModel;
use std::collections::HashMap;

/// Reciprocal rank fusion's constant (Cormack et al., 2009): a result's score is the sum over
/// the rankings it is in of 1 / (K + rank), so being first in one ranking weighs little more
/// than being near the top of the other; 60 is the value the paper found robust.
const RRF_K: f32 = 60.0;
/// The vector ranking's weight against the keyword ranking's 1. Measured on the recall set
/// (`tests/data/recall_set.json`, BENCHMARKS.md): at 1 a fact sharing one incidental word with
/// the question ("next", "year") ties with the nearest by meaning and wins the tie; at 1.5
/// English recall@1 by meaning goes from 0.50 to 0.57 and every question keywords answer first
/// is still answered first; 2 changes nothing more.
const MEANING_WEIGHT: f32 = 1.5;

/// A vector as stored: its values as little-endian f32, 4 bytes each.
pub(crate) fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The values of stored bytes, if they are `dims` f32s.
pub(crate) fn decode(bytes: &[u8], dims: u32) -> Option<Vec<f32>> {
    let dims = usize::try_from(dims).ok()?;
    if dims == 0 || bytes.len() != dims * 4 {
        return None;
    }
    Some(
        bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

/// `v` scaled to length 1, so a dot product is the cosine; `None` for a zero vector, which has
/// no direction to compare.
pub(crate) fn normalised(mut v: Vec<f32>) -> Option<Vec<f32>> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return None;
    }
    v.iter_mut().for_each(|x| *x /= norm);
    Some(v)
}

/// The current model's vector of each fact, normalised, in one contiguous block (`dims`
/// floats a fact), with the fact ids beside it.
#[derive(Debug, Default)]
pub(crate) struct VectorSet {
    model: Option<VectorModel>,
    ids: Vec<String>,
    data: Vec<f32>,
    at: HashMap<String, usize>,
    /// The store's `seq` of the newest row loaded.
    pub(crate) loaded: i64,
}

impl VectorSet {
    /// Empty, for `model`.
    pub(crate) fn for_model(model: VectorModel) -> VectorSet {
        VectorSet {
            model: Some(model),
            ..VectorSet::default()
        }
    }

    pub(crate) fn model(&self) -> Option<&VectorModel> {
        self.model.as_ref()
    }

    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    fn dims(&self) -> usize {
        self.model
            .as_ref()
            .and_then(|m| usize::try_from(m.dims).ok())
            .unwrap_or(0)
    }

    /// Holds `vector` (already normalised, of this set's dimensions) for `id`, replacing the one
    /// it had. False when the dimensions differ.
    pub(crate) fn insert(&mut self, id: &str, vector: &[f32]) -> bool {
        let dims = self.dims();
        if dims == 0 || vector.len() != dims {
            return false;
        }
        match self.at.get(id) {
            Some(&i) => self.data[i * dims..(i + 1) * dims].copy_from_slice(vector),
            None => {
                self.at.insert(id.to_string(), self.ids.len());
                self.ids.push(id.to_string());
                self.data.extend_from_slice(vector);
            }
        }
        true
    }

    /// Drops `id`'s vector, if held (the last one moves into its place).
    pub(crate) fn remove(&mut self, id: &str) {
        let dims = self.dims();
        let Some(i) = self.at.remove(id) else {
            return;
        };
        let last = self.ids.len() - 1;
        if i != last {
            self.data
                .copy_within(last * dims..(last + 1) * dims, i * dims);
            self.ids.swap(i, last);
            self.at.insert(self.ids[i].clone(), i);
        }
        self.ids.pop();
        self.data.truncate(last * dims);
    }

    /// The `n` facts nearest to `query` (normalised, of this set's dimensions) with a cosine
    /// similarity of at least `floor`, nearest first (equal ones by id).
    pub(crate) fn nearest(&self, query: &[f32], n: usize, floor: f32) -> Vec<(String, f32)> {
        let dims = self.dims();
        if dims == 0 || query.len() != dims || n == 0 {
            return Vec::new();
        }
        let mut scored: Vec<(f32, usize)> = self
            .data
            .chunks_exact(dims)
            .enumerate()
            .filter_map(|(i, v)| {
                let s = dot(v, query);
                (s >= floor).then_some((s, i))
            })
            .collect();
        let order = |a: &(f32, usize), b: &(f32, usize)| {
            b.0.total_cmp(&a.0)
                .then_with(|| self.ids[a.1].cmp(&self.ids[b.1]))
        };
        if scored.len() > n {
            scored.select_nth_unstable_by(n - 1, order);
            scored.truncate(n);
        }
        scored.sort_unstable_by(order);
        scored
            .into_iter()
            .map(|(s, i)| (self.ids[i].clone(), s))
            .collect()
    }

    /// Bytes held: the vectors, the ids and the map from id to place (estimated from their
    /// capacities).
    pub(crate) fn bytes(&self) -> usize {
        let ids: usize = self
            .ids
            .iter()
            .map(|s| 2 * (s.capacity() + std::mem::size_of::<String>()))
            .sum();
        self.data.capacity() * 4 + ids + self.at.capacity() * std::mem::size_of::<usize>()
    }
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        dot_sse2(a, b)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        a.iter().zip(b).map(|(x, y)| x * y).sum()
    }
}

/// The dot product four lanes at a time. The release profile's `opt-level = "s"` leaves this
/// loop scalar (LLVM vectorises loops only at 2 and above): 33.5 ms for 100k vectors of 256
/// dimensions as plain code, 18.1 ms like this (BENCHMARKS.md §17).
#[cfg(target_arch = "x86_64")]
fn dot_sse2(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::{_mm_add_ps, _mm_loadu_ps, _mm_mul_ps, _mm_setzero_ps, _mm_storeu_ps};
    let n = a.len().min(b.len());
    let whole = n - n % 8;
    let (a8, b8) = (&a[..whole], &b[..whole]);
    let mut lanes = [0f32; 4];
    // SAFETY: SSE2 is in every x86_64 CPU (the target's baseline), and each unaligned load
    // reads 4 floats at offset 0 or 4 of a chunk of exactly 8.
    unsafe {
        let (mut low, mut high) = (_mm_setzero_ps(), _mm_setzero_ps());
        for (x, y) in a8.chunks_exact(8).zip(b8.chunks_exact(8)) {
            let (x, y) = (x.as_ptr(), y.as_ptr());
            low = _mm_add_ps(low, _mm_mul_ps(_mm_loadu_ps(x), _mm_loadu_ps(y)));
            high = _mm_add_ps(
                high,
                _mm_mul_ps(_mm_loadu_ps(x.add(4)), _mm_loadu_ps(y.add(4))),
            );
        }
        _mm_storeu_ps(lanes.as_mut_ptr(), _mm_add_ps(low, high));
    }
    let tail: f32 = a[whole..n]
        .iter()
        .zip(&b[whole..n])
        .map(|(x, y)| x * y)
        .sum();
    lanes.iter().sum::<f32>() + tail
}

/// A fact in the fused ranking, with its parts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fused {
    pub(crate) id: String,
    /// Its place (1 = first) and BM25 score in the keyword ranking.
    pub(crate) keyword: Option<(u32, f32)>,
    /// Its place and cosine similarity in the vector ranking.
    pub(crate) vector: Option<(u32, f32)>,
    pub(crate) score: f32,
}

/// Weighted reciprocal rank fusion of two rankings (each best first), best first. Equal scores
/// put a fact found by its words first.
pub(crate) fn fuse(keyword: &[(String, f32)], vector: &[(String, f32)]) -> Vec<Fused> {
    let mut out: Vec<Fused> = Vec::with_capacity(keyword.len() + vector.len());
    let mut at: HashMap<&str, usize> = HashMap::new();
    let rank = |i: usize| u32::try_from(i + 1).unwrap_or(u32::MAX);
    for (i, (id, score)) in keyword.iter().enumerate() {
        at.insert(id, out.len());
        out.push(Fused {
            id: id.clone(),
            keyword: Some((rank(i), *score)),
            vector: None,
            score: 1.0 / (RRF_K + (i + 1) as f32),
        });
    }
    for (i, (id, similarity)) in vector.iter().enumerate() {
        let part = MEANING_WEIGHT / (RRF_K + (i + 1) as f32);
        match at.get(id.as_str()) {
            Some(&j) => {
                out[j].vector = Some((rank(i), *similarity));
                out[j].score += part;
            }
            None => {
                at.insert(id, out.len());
                out.push(Fused {
                    id: id.clone(),
                    keyword: None,
                    vector: Some((rank(i), *similarity)),
                    score: part,
                });
            }
        }
    }
    out.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| {
                let place = |f: &Fused| f.keyword.map_or(u32::MAX, |k| k.0);
                place(a).cmp(&place(b))
            })
            .then_with(|| a.id.cmp(&b.id))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(dims: u32) -> VectorModel {
        VectorModel {
            model: "m".into(),
            dims,
        }
    }

    fn ids(v: &[(String, f32)]) -> Vec<&str> {
        v.iter().map(|(id, _)| id.as_str()).collect()
    }

    #[test]
    fn vectors_round_trip_through_their_bytes() {
        let v = vec![1.5, -0.25, 0.0, f32::MIN_POSITIVE];
        let bytes = encode(&v);
        assert_eq!(bytes.len(), 16);
        assert_eq!(bytes[..4], 1.5f32.to_le_bytes());
        assert_eq!(decode(&bytes, 4), Some(v));
        assert_eq!(decode(&bytes, 3), None, "another dimension is refused");
        assert_eq!(decode(&[], 4), None, "a refusal has no vector");
    }

    #[test]
    fn nearest_is_exact_cosine_with_a_floor() {
        let mut set = VectorSet::for_model(model(2));
        let unit = |x: f32, y: f32| normalised(vec![x, y]).unwrap();
        assert!(set.insert("east", &unit(1.0, 0.0)));
        assert!(set.insert("north", &unit(0.0, 1.0)));
        assert!(set.insert("northeast", &unit(1.0, 1.0)));
        assert!(set.insert("west", &unit(-1.0, 0.0)));
        assert!(!set.insert("3d", &[1.0, 0.0, 0.0]));
        let q = unit(1.0, 0.2);
        let found = set.nearest(&q, 3, -1.0);
        assert_eq!(ids(&found), ["east", "northeast", "north"]);
        assert!((found[0].1 - 0.9806).abs() < 1e-3);
        assert_eq!(ids(&set.nearest(&q, 10, 0.5)), ["east", "northeast"]);
        assert!(set.nearest(&[1.0, 0.0, 0.0], 3, -1.0).is_empty());
        assert!(normalised(vec![0.0, 0.0]).is_none());
    }

    #[test]
    fn removing_and_replacing_keep_the_block_consistent() {
        let mut set = VectorSet::for_model(model(2));
        for (id, v) in [("a", [1.0, 0.0]), ("b", [0.0, 1.0]), ("c", [-1.0, 0.0])] {
            set.insert(id, &v);
        }
        set.remove("a");
        set.remove("nothing");
        assert_eq!(set.len(), 2);
        assert_eq!(ids(&set.nearest(&[-1.0, 0.0], 1, -1.0)), ["c"]);
        set.insert("b", &[-1.0, 0.0]);
        assert_eq!(set.len(), 2);
        let found = set.nearest(&[-1.0, 0.0], 2, 0.9);
        assert_eq!(ids(&found), ["b", "c"], "equal similarity: by id");
        set.remove("c");
        set.remove("b");
        assert_eq!(set.len(), 0);
        assert!(set.nearest(&[-1.0, 0.0], 2, -1.0).is_empty());
    }

    #[test]
    fn the_dot_product_matches_the_plain_sum_for_every_length() {
        for len in [1usize, 7, 8, 9, 31, 256, 257] {
            let a: Vec<f32> = (0..len).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..len).map(|i| (i as f32 * 0.11).cos()).collect();
            let plain: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
            assert!((dot(&a, &b) - plain).abs() < 1e-4, "length {len}");
        }
    }

    #[test]
    fn fusion_adds_the_reciprocal_ranks_and_keeps_keyword_hits_first_on_ties() {
        let kw = |v: &[&str]| -> Vec<(String, f32)> {
            v.iter()
                .enumerate()
                .map(|(i, id)| (id.to_string(), 10.0 - i as f32))
                .collect()
        };
        let fused = fuse(&kw(&["a", "b"]), &kw(&["c", "b"]));
        let order: Vec<&str> = fused.iter().map(|f| f.id.as_str()).collect();
        // b is in both; c (first by meaning) outweighs a (first by words).
        assert_eq!(order, ["b", "c", "a"]);
        assert_eq!(fused[0].keyword, Some((2, 9.0)));
        assert_eq!(fused[0].vector, Some((2, 9.0)));
        assert_eq!(fused[1].keyword, None);
        assert_eq!(fused[2].vector, None);
        assert!((fused[0].score - 2.5 / 62.0).abs() < 1e-6);
        // Equal scores: the one found by its words first.
        let tied = fuse(&kw(&["z", "x", "y"]), &kw(&["w"]));
        assert!((tied[0].score - tied[1].score).abs() > 0.0);
        let even = fuse(&kw(&["p"]), &[]);
        assert_eq!(even[0].vector, None);
        // One ranking alone keeps its order.
        let alone = fuse(&kw(&["x", "y", "z"]), &[]);
        let order: Vec<&str> = alone.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(order, ["x", "y", "z"]);
    }
}
