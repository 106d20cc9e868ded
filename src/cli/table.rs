//! Tables for the terminal (`tasks list`, `jobs list`): each column as wide as its widest cell,
//! measured in display columns — a Chinese character takes two, a combining mark none — so the
//! columns line up whatever the script; cells on one line, their control characters written out.
//!
//! Must not: know what a task or a job is; `render` fills the cells.

use hermes_store::util::text;
use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// Between two columns.
const GAP: &str = "  ";

/// Rows of cells, the first one the header.
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|h| h.to_string()).collect()],
        }
    }

    /// A row; each cell should come from [`cell`] (or be our own one-line text).
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// The lines, every column but the last padded to its widest cell.
    pub(crate) fn render(&self) -> String {
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|i| {
                let cells = self.rows.iter().filter_map(|r| r.get(i));
                cells.map(|c| c.width()).max().unwrap_or(0)
            })
            .collect();
        let mut out = String::new();
        for row in &self.rows {
            let mut line = String::new();
            for (i, cell) in row.iter().enumerate() {
                line.push_str(cell);
                if i + 1 < row.len() {
                    let pad = widths[i].saturating_sub(cell.width());
                    line.extend(std::iter::repeat_n(' ', pad));
                    line.push_str(GAP);
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `text` as one table cell: on one line, control characters written out (`\x1b`), at most
/// `max` display columns, a cut marked with `…`.
pub(crate) fn cell(text: &str, max: usize) -> String {
    let flat = text::collapse(&text::for_terminal(text));
    if flat.width() <= max {
        return flat;
    }
    let room = max.saturating_sub(1);
    let mut used = 0;
    let mut out = String::new();
    for c in flat.chars() {
        let w = c.width().unwrap_or(0);
        if used + w > room {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push(text::ELLIPSIS);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_in_display_columns() {
        let mut t = Table::new(&["NAME", "N", "NOTE"]);
        t.row(vec!["乌龙茶".into(), "1".into(), "tea".into()]);
        t.row(vec!["green".into(), "22".into(), "also tea".into()]);
        assert_eq!(
            t.render(),
            "NAME    N   NOTE\n乌龙茶  1   tea\ngreen   22  also tea\n"
        );
    }

    #[test]
    fn a_cell_is_one_line_cut_by_display_width() {
        assert_eq!(cell("乌龙茶好喝", 5), "乌龙…");
        assert_eq!(cell("a\nb\u{1b}[2J", 20), r"a b\x1b[2J");
        assert_eq!(cell("abcdef", 4), "abc…");
        assert_eq!(cell("abc", 3), "abc");
        assert!(cell("乌龙茶好喝", 5).width() <= 5);
    }
}
