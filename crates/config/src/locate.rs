//! Finding the line of a dotted key in YAML text, for semantic errors found after parsing
//! (the parser only knows lines for syntax and type errors).

/// The 1-based line of `keys` (a path like `["server", "port"]`) in block-style YAML.
/// Falls back to the deepest ancestor found (flow-style maps keep their children on one line).
pub fn line_of_key(text: &str, keys: &[&str]) -> Option<u64> {
    let lines: Vec<&str> = text.lines().collect();
    let mut best = None;
    // The block we search: line range [start, end) and the indent its parent key had.
    let (mut start, mut end, mut parent_indent) = (0usize, lines.len(), -1i64);
    for key in keys {
        let mut found = None;
        for (i, line) in lines.iter().enumerate().take(end).skip(start) {
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let indent = (line.len() - trimmed.len()) as i64;
            if indent <= parent_indent {
                break;
            }
            if key_of(trimmed) == Some(key) {
                found = Some((i, indent));
                break;
            }
        }
        let Some((i, indent)) = found else {
            return best;
        };
        best = Some(i as u64 + 1);
        start = i + 1;
        parent_indent = indent;
        end = lines.len();
    }
    best
}

fn key_of(line: &str) -> Option<&str> {
    let line = line.strip_prefix("- ").unwrap_or(line);
    let colon = line.find(':')?;
    let key = line[..colon].trim().trim_matches(|c| c == '"' || c == '\'');
    Some(key)
}

#[cfg(test)]
mod tests {
    use super::line_of_key;

    #[test]
    fn finds_nested_keys_and_falls_back_to_the_parent() {
        let text =
            "# top\nserver:\n  host: x\n  port: 0\nmodel:\n  profiles:\n    fast: {timeout_s: 0}\n";
        assert_eq!(line_of_key(text, &["server", "port"]), Some(4));
        assert_eq!(line_of_key(text, &["server", "host"]), Some(3));
        assert_eq!(
            line_of_key(text, &["model", "profiles", "fast", "timeout_s"]),
            Some(7)
        );
        assert_eq!(line_of_key(text, &["agent"]), None);
    }

    #[test]
    fn does_not_match_a_key_of_another_section() {
        let text = "agent:\n  timeout_s: 1\ntools:\n  timeout_s: 0\n";
        assert_eq!(line_of_key(text, &["tools", "timeout_s"]), Some(4));
    }
}
