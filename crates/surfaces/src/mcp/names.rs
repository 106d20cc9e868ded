//! The names a server's tools get in the registry: `SERVER__TOOL`, made to pass the registry's
//! name rule (1 to 64 of `a-z A-Z 0-9 _ -`) and kept unique within the server.
//!
//! Owns: that mapping. The real name travels with each [`McpTool`](super::McpTool), so a
//! renamed tool is still called by the name its server knows.
//! Must not: depend on anything but the server name and the server's own tool names, so a
//! name (and the allowlist entries written for it) stays the same across restarts.

/// Between the server name and the tool name (configured server names cannot contain it).
pub(crate) const SEPARATOR: &str = "__";
/// The registry's limit on a tool name.
const MAX_NAME: usize = 64;
/// Room for `_` and 6 hex digits when a name must be shortened or told apart.
const SUFFIX: usize = 7;

/// Registry names for `tools` of `server`, in the same order: `server__tool`, with characters
/// the registry refuses turned into `_`; a name too long, or equal to an earlier one after
/// that, is shortened and given a suffix from a hash of the real name.
pub(crate) fn tool_names(server: &str, tools: &[&str]) -> Vec<String> {
    let mut taken = std::collections::HashSet::new();
    tools
        .iter()
        .map(|real| {
            let mut name = tool_name(server, real);
            if name.len() > MAX_NAME || taken.contains(&name) {
                name = with_suffix(&name, real);
            }
            taken.insert(name.clone());
            name
        })
        .collect()
}

/// `server__tool` with the tool's refused characters turned into `_` (no length rule).
pub(crate) fn tool_name(server: &str, tool: &str) -> String {
    let mut name = format!("{server}{SEPARATOR}");
    if tool.is_empty() {
        name.push('_');
    }
    name.extend(tool.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            c
        } else {
            '_'
        }
    }));
    name
}

/// `name` cut to leave room for `_` and a hash of the real name (the name is ASCII by now).
fn with_suffix(name: &str, real: &str) -> String {
    let keep = name.len().min(MAX_NAME - SUFFIX);
    format!("{}_{:06x}", &name[..keep], fnv1a(real) & 0xff_ffff)
}

/// FNV-1a: stable across builds and platforms, unlike the standard library's hasher.
fn fnv1a(text: &str) -> u32 {
    text.bytes().fold(0x811c_9dc5, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_accepts(name: &str) -> bool {
        !name.is_empty()
            && name.len() <= MAX_NAME
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }

    #[test]
    fn plain_names_keep_their_spelling() {
        let names = tool_names("time", &["get_current_time", "convert-time"]);
        assert_eq!(names, ["time__get_current_time", "time__convert-time"]);
    }

    #[test]
    fn refused_characters_become_underscores_and_clashes_get_a_suffix() {
        let names = tool_names("fs", &["read.file", "read_file", "größe", ""]);
        assert_eq!(names[0], "fs__read_file");
        assert!(names[1].starts_with("fs__read_file_") && names[1].len() == 20);
        assert_eq!(names[2], "fs__gr__e");
        assert_eq!(names[3], "fs___");
        assert!(names.iter().all(|n| registry_accepts(n)), "{names:?}");
    }

    #[test]
    fn long_names_are_cut_to_the_limit_and_stay_distinct_and_stable() {
        let long_a = "a".repeat(80);
        let long_b = format!("{}b", "a".repeat(79));
        let names = tool_names("server", &[&long_a, &long_b]);
        assert!(
            names
                .iter()
                .all(|n| n.len() == MAX_NAME && registry_accepts(n))
        );
        assert_ne!(names[0], names[1]);
        assert_eq!(names, tool_names("server", &[&long_a, &long_b]));
    }
}
