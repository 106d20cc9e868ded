//! Line diff for `watch_page`: which lines were added and which removed, in page order.
//!
//! Owns: the comparison only. An LCS keeps repeated and moved lines honest on ordinary pages;
//! past a size bound (the table is quadratic) it falls back to a multiset comparison, which
//! still reports every line whose count changed, in order.
//! Must not: fetch or store anything.

use std::collections::HashMap;

/// LCS over at most this many cells (old lines × new lines, u32 each: about 4 MB).
const MAX_LCS_CELLS: usize = 1_000_000;

#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct LineDiff {
    pub added: Vec<String>,
    pub removed: Vec<String>,
}

pub(crate) fn line_diff(old: &str, new: &str) -> LineDiff {
    let old: Vec<&str> = old.lines().collect();
    let new: Vec<&str> = new.lines().collect();
    // Common head and tail are the usual case for a page that changed in one place.
    let head = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let tail = old[head..]
        .iter()
        .rev()
        .zip(new[head..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let old = &old[head..old.len() - tail];
    let new = &new[head..new.len() - tail];
    if old.len().saturating_mul(new.len()) <= MAX_LCS_CELLS {
        lcs_diff(old, new)
    } else {
        multiset_diff(old, new)
    }
}

fn lcs_diff(old: &[&str], new: &[&str]) -> LineDiff {
    let (n, m) = (old.len(), new.len());
    // suffix[i][j] = LCS length of old[i..] and new[j..], row-major in one vector.
    let width = m + 1;
    let mut suffix = vec![0u32; (n + 1) * width];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            suffix[i * width + j] = if old[i] == new[j] {
                suffix[(i + 1) * width + j + 1] + 1
            } else {
                suffix[(i + 1) * width + j].max(suffix[i * width + j + 1])
            };
        }
    }
    let mut diff = LineDiff::default();
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if old[i] == new[j] {
            i += 1;
            j += 1;
        } else if suffix[(i + 1) * width + j] >= suffix[i * width + j + 1] {
            diff.removed.push(old[i].to_string());
            i += 1;
        } else {
            diff.added.push(new[j].to_string());
            j += 1;
        }
    }
    diff.removed.extend(old[i..].iter().map(|s| s.to_string()));
    diff.added.extend(new[j..].iter().map(|s| s.to_string()));
    diff
}

fn multiset_diff(old: &[&str], new: &[&str]) -> LineDiff {
    fn counts<'a>(lines: &[&'a str]) -> HashMap<&'a str, usize> {
        let mut c = HashMap::new();
        for l in lines {
            *c.entry(*l).or_insert(0) += 1;
        }
        c
    }
    // Lines beyond the other side's count of the same line are the difference.
    fn surplus(lines: &[&str], other: &HashMap<&str, usize>) -> Vec<String> {
        let mut budget = other.clone();
        lines
            .iter()
            .filter(|l| match budget.get_mut(**l) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    false
                }
                _ => true,
            })
            .map(|l| l.to_string())
            .collect()
    }
    LineDiff {
        added: surplus(new, &counts(old)),
        removed: surplus(old, &counts(new)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_is_empty() {
        assert_eq!(line_diff("a\nb", "a\nb"), LineDiff::default());
    }

    #[test]
    fn changed_line_in_the_middle() {
        let d = line_diff(
            "Kettle\nPrice: 12\nIn stock",
            "Kettle\nPrice: 10\nIn stock\nNew!",
        );
        assert_eq!(d.removed, vec!["Price: 12"]);
        assert_eq!(d.added, vec!["Price: 10", "New!"]);
    }

    #[test]
    fn repeated_and_moved_lines() {
        let d = line_diff("x\na\nx\nb", "a\nx\nb\nx\nc");
        assert_eq!(d.added.len() + d.removed.len(), 3, "{d:?}");
        assert!(d.added.contains(&"c".to_string()));
    }

    #[test]
    fn large_inputs_use_the_multiset_fallback() {
        let old: String = (0..1500).map(|i| format!("line {i}\n")).collect();
        let new: String = (0..1500)
            .rev()
            .map(|i| format!("line {i}\n"))
            .collect::<String>()
            + "extra\n";
        let d = line_diff(&old, &new);
        assert_eq!(d.added, vec!["extra"]);
        assert!(d.removed.is_empty());
        // Sanity: the LCS path gives the same answer on a small reversal plus an extra line.
        let d = line_diff("1\n2\n3", "3\n2\n1\nextra");
        assert!(d.added.contains(&"extra".to_string()));
    }
}
