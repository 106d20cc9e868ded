//! The code's shape, held by a test: inside each crate no two files import each other, not even
//! through a parent's re-exports, so the one-way map of `docs/ARCHITECTURE.md` cannot slip
//! unnoticed (it slipped twice: three circles came back between two reviews). Between crates
//! cargo holds it already.
//!
//! It reads the sources as text: `mod` declarations, `use` trees and `crate::` / `super::` /
//! `self::` paths, with a parent's `pub use child::Item` followed to the child that defines
//! `Item`. A module and the modules inside it count as one (a parent and its children always
//! see each other), and test modules are left out.
//!
//! It also holds that every waiting time in the code is a named constant (or comes from the
//! settings): a `Duration` written as a number inside a function is one no reader can find.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// A module by its path from the crate root (`["agent", "run"]`).
type Module = Vec<String>;

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    /// `::`
    Sep,
    Punct(char),
}

/// The tokens of Rust source with comments, strings and character literals left out.
fn tokens(src: &str) -> Vec<Token> {
    let s: Vec<char> = src.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(end) = raw_string_end(&s, i) {
            i = end;
        } else if c == '"' {
            i += 1;
            while i < s.len() && s[i] != '"' {
                i += if s[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '\'' {
            i = char_literal_end(&s, i).unwrap_or(i + 1);
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(s[start..i].iter().collect()));
        } else if c == ':' && next == Some(':') {
            out.push(Token::Sep);
            i += 2;
        } else {
            if !c.is_whitespace() {
                out.push(Token::Punct(c));
            }
            i += 1;
        }
    }
    out
}

/// Where a raw string (`r"…"`, `r#"…"#`, `br"…"`) starting at `i` ends.
fn raw_string_end(s: &[char], i: usize) -> Option<usize> {
    if i > 0 && (s[i - 1].is_alphanumeric() || s[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if s.get(j) == Some(&'b') {
        j += 1;
    }
    if s.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = s[j..].iter().take_while(|&&c| c == '#').count();
    j += hashes;
    if s.get(j) != Some(&'"') {
        return None;
    }
    j += 1;
    while j < s.len() {
        if s[j] == '"'
            && s[j + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == '#')
                .count()
                == hashes
        {
            return Some(j + 1 + hashes);
        }
        j += 1;
    }
    Some(s.len())
}

/// Where a character literal starting at `i` ends; `None` for a lifetime.
fn char_literal_end(s: &[char], i: usize) -> Option<usize> {
    match s.get(i + 1)? {
        '\\' => {
            let close = (i + 2..s.len().min(i + 14)).find(|&j| s[j] == '\'')?;
            Some(close + 1)
        }
        _ if s.get(i + 2) == Some(&'\'') => Some(i + 3),
        _ => None,
    }
}

/// `tokens` without the items behind `#[cfg(test)]` (an inline test module, a test file's
/// `mod x;`).
fn without_tests(t: Vec<Token>) -> Vec<Token> {
    let cfg_test = [
        Token::Punct('#'),
        Token::Punct('['),
        Token::Ident("cfg".into()),
        Token::Punct('('),
        Token::Ident("test".into()),
        Token::Punct(')'),
        Token::Punct(']'),
    ];
    let mut out = Vec::with_capacity(t.len());
    let mut i = 0;
    while i < t.len() {
        if t[i..].starts_with(&cfg_test) {
            i += cfg_test.len();
            // The item: to its `;`, or to the end of its block.
            let mut depth = 0;
            while i < t.len() {
                match t[i] {
                    Token::Punct('{') => depth += 1,
                    Token::Punct('}') => {
                        depth -= 1;
                        if depth == 0 {
                            i += 1;
                            break;
                        }
                    }
                    Token::Punct(';') if depth == 0 => {
                        i += 1;
                        break;
                    }
                    _ => {}
                }
                i += 1;
            }
        } else {
            out.push(t[i].clone());
            i += 1;
        }
    }
    out
}

fn ident(t: Option<&Token>) -> Option<&str> {
    match t {
        Some(Token::Ident(s)) => Some(s),
        _ => None,
    }
}

/// One crate's modules, each with its tokens.
struct Crate {
    modules: BTreeMap<Module, Vec<Token>>,
}

impl Crate {
    fn read(root: &Path) -> Crate {
        let mut c = Crate {
            modules: BTreeMap::new(),
        };
        c.visit(Vec::new(), root);
        c
    }

    fn visit(&mut self, module: Module, file: &Path) {
        let src = std::fs::read_to_string(file)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", file.display()));
        let t = without_tests(tokens(&src));
        let dir = file.parent().expect("a source file has a folder");
        let stem = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let children_dir = match stem {
            "lib" | "main" | "mod" => dir.to_path_buf(),
            _ => dir.join(stem),
        };
        for w in t.windows(3) {
            if let (Some("mod"), Some(name), Token::Punct(';')) =
                (ident(Some(&w[0])), ident(Some(&w[1])), &w[2])
            {
                let file = [
                    children_dir.join(format!("{name}.rs")),
                    children_dir.join(name).join("mod.rs"),
                ]
                .into_iter()
                .find(|f| f.exists());
                if let Some(file) = file {
                    let mut child = module.clone();
                    child.push(name.to_string());
                    self.visit(child, &file);
                }
            }
        }
        self.modules.insert(module, t);
    }

    /// A module's `pub use child::…::Item` (any `pub(…)`), as (module, name) → the child
    /// module it names; `Item as Other` is named `Other`.
    fn reexports(&self) -> BTreeMap<(Module, String), Module> {
        let mut out = BTreeMap::new();
        for (module, t) in &self.modules {
            for (i, tok) in t.iter().enumerate() {
                if ident(Some(tok)) != Some("use") || !preceded_by_pub(t, i) {
                    continue;
                }
                for used in use_paths(&t[i + 1..]) {
                    let mut segs: Vec<&str> = used.path.iter().map(String::as_str).collect();
                    if segs.first() == Some(&"self") {
                        segs.remove(0);
                    }
                    let (name, prefix) = match segs.split_last() {
                        Some((name, prefix)) if !prefix.is_empty() => {
                            (used.alias.as_deref().unwrap_or(name), prefix)
                        }
                        _ => continue,
                    };
                    let mut child = module.clone();
                    child.push(prefix[0].to_string());
                    if !self.modules.contains_key(&child) {
                        continue;
                    }
                    let mut target = module.clone();
                    target.extend(prefix.iter().map(|s| s.to_string()));
                    out.insert((module.clone(), name.to_string()), target);
                }
            }
        }
        out
    }

    /// The module a path leads to: down through modules, and through a re-export to the
    /// module that holds the item.
    fn resolve(&self, reexports: &BTreeMap<(Module, String), Module>, path: &[String]) -> Module {
        let mut cur: Module = Vec::new();
        for seg in path {
            let mut down = cur.clone();
            down.push(seg.clone());
            if self.modules.contains_key(&down) {
                cur = down;
                continue;
            }
            let mut key = (cur.clone(), seg.clone());
            let mut hops = 0;
            while let Some(target) = reexports.get(&key) {
                cur = target.clone();
                key = (cur.clone(), seg.clone());
                hops += 1;
                if hops > 8 {
                    break;
                }
            }
            break;
        }
        cur
    }

    /// Which module each module imports, a module's own family (its ancestors and the modules
    /// inside it) left out.
    fn imports(&self) -> BTreeMap<Module, BTreeSet<Module>> {
        let reexports = self.reexports();
        let mut out: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
        for (module, t) in &self.modules {
            let mut paths = Vec::new();
            for (i, tok) in t.iter().enumerate() {
                match ident(Some(tok)) {
                    Some("use") => paths.extend(use_paths(&t[i + 1..]).into_iter().map(|u| u.path)),
                    Some("crate" | "super" | "self") if t.get(i + 1) == Some(&Token::Sep) => {
                        paths.push(path_at(&t[i..]))
                    }
                    _ => {}
                }
            }
            for path in paths {
                let Some(absolute) = absolute(module, &path) else {
                    continue;
                };
                let target = self.resolve(&reexports, &absolute);
                if !related(module, &target) {
                    out.entry(module.clone()).or_default().insert(target);
                }
            }
        }
        out
    }
}

fn preceded_by_pub(t: &[Token], i: usize) -> bool {
    match i.checked_sub(1).map(|j| &t[j]) {
        Some(Token::Ident(s)) if s == "pub" => true,
        // `pub(crate) use`, `pub(super) use`
        Some(Token::Punct(')')) => (0..i)
            .rev()
            .take(6)
            .any(|j| t[j] == Token::Ident("pub".into())),
        _ => false,
    }
}

/// A path's segments from `t` on: `a::b::c`.
fn path_at(t: &[Token]) -> Vec<String> {
    let mut segs = Vec::new();
    let mut i = 0;
    while let Some(s) = ident(t.get(i)) {
        segs.push(s.to_string());
        if t.get(i + 1) != Some(&Token::Sep) {
            break;
        }
        i += 2;
    }
    segs
}

/// A path a `use` tree names, and the name it is brought in as when renamed (`x as y`).
struct UsePath {
    path: Vec<String>,
    alias: Option<String>,
}

/// The paths a `use` tree names, from the token after `use` to its `;`.
fn use_paths(t: &[Token]) -> Vec<UsePath> {
    let end = t
        .iter()
        .position(|x| *x == Token::Punct(';'))
        .unwrap_or(t.len());
    let mut out = Vec::new();
    tree(&t[..end], Vec::new(), &mut out);
    out
}

fn tree(t: &[Token], mut prefix: Vec<String>, out: &mut Vec<UsePath>) {
    let mut alias = None;
    let mut i = 0;
    while i < t.len() {
        match &t[i] {
            Token::Ident(s) if s == "as" => {
                alias = ident(t.get(i + 1)).map(str::to_string);
                i += 1;
            }
            Token::Ident(s) => prefix.push(s.clone()),
            Token::Punct('{') => {
                let close = matching(t, i);
                for part in split_top(&t[i + 1..close]) {
                    tree(part, prefix.clone(), out);
                }
                return;
            }
            _ => {}
        }
        i += 1;
    }
    if !prefix.is_empty() {
        out.push(UsePath {
            path: prefix,
            alias,
        });
    }
}

fn matching(t: &[Token], open: usize) -> usize {
    let mut depth = 0;
    for (j, x) in t.iter().enumerate().skip(open) {
        match x {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
    }
    t.len()
}

fn split_top(t: &[Token]) -> Vec<&[Token]> {
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (j, x) in t.iter().enumerate() {
        match x {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => depth -= 1,
            Token::Punct(',') if depth == 0 => {
                parts.push(&t[start..j]);
                start = j + 1;
            }
            _ => {}
        }
    }
    parts.push(&t[start..]);
    parts.retain(|p| !p.is_empty());
    parts
}

/// `path` as seen from `module`, from the crate root; `None` for another crate's path.
fn absolute(module: &Module, path: &[String]) -> Option<Vec<String>> {
    let (first, rest) = path.split_first()?;
    let mut base = match first.as_str() {
        "crate" => Vec::new(),
        "self" => module.clone(),
        "super" => module[..module.len().saturating_sub(1)].to_vec(),
        _ => return None,
    };
    let mut rest = rest;
    while let Some((s, more)) = rest.split_first() {
        if s != "super" {
            break;
        }
        base.pop();
        rest = more;
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// One is the other, or inside it.
fn related(a: &Module, b: &Module) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Every circle of imports, as the modules it passes through, each circle once.
fn circles(imports: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    let mut found: BTreeSet<Vec<Module>> = BTreeSet::new();
    for (from, targets) in imports {
        for to in targets {
            // The way back from `to` to `from`, if there is one: with `from → to`, a circle.
            let mut back: BTreeMap<&Module, &Module> = BTreeMap::new();
            let mut queue = VecDeque::from([to]);
            while let Some(m) = queue.pop_front() {
                if m == from {
                    break;
                }
                for next in imports.get(m).into_iter().flatten() {
                    if next != to && !back.contains_key(next) {
                        back.insert(next, m);
                        queue.push_back(next);
                    }
                }
            }
            if !back.contains_key(from) {
                continue;
            }
            let mut circle = vec![from.clone()];
            let mut m = from;
            while let Some(prev) = back.get(m) {
                circle.push((*prev).clone());
                m = prev;
            }
            circle.reverse();
            // The same circle from any of its modules is one: start it at its least.
            let start = (0..circle.len())
                .min_by_key(|&k| &circle[k])
                .unwrap_or_default();
            circle.rotate_left(start);
            found.insert(circle);
        }
    }
    found.into_iter().collect()
}

fn circles_in(root: &Path) -> Vec<String> {
    let c = Crate::read(root);
    circles(&c.imports())
        .into_iter()
        .map(|circle| {
            let mut names: Vec<String> = circle.iter().map(|m| m.join("::")).collect();
            names.push(names[0].clone());
            names.join(" → ")
        })
        .collect()
}

/// The `Duration::from_…(N)` written with a number outside a `const` or `static` item.
fn literal_durations(t: &[Token]) -> Vec<String> {
    let mut found = Vec::new();
    // Inside a `const` or `static` item, to its `;` (its value may hold blocks and calls).
    let mut in_const = false;
    let mut depth = 0i32;
    for (i, tok) in t.iter().enumerate() {
        match tok {
            Token::Ident(k)
                if (k == "const" || k == "static")
                    && ident(t.get(i + 1)).is_some_and(|n| n != "fn")
                    && t.get(i + 2) == Some(&Token::Punct(':')) =>
            {
                in_const = true;
                depth = 0;
            }
            Token::Punct('(' | '[' | '{') => depth += 1,
            Token::Punct(')' | ']' | '}') => depth -= 1,
            Token::Punct(';') if in_const && depth <= 0 => in_const = false,
            Token::Ident(d) if d == "Duration" && !in_const => {
                if let (Some(Token::Sep), Some(f), Some(Token::Punct('(')), Some(Token::Punct(c))) = (
                    t.get(i + 1),
                    ident(t.get(i + 2)),
                    t.get(i + 3),
                    t.get(i + 4),
                ) && f.starts_with("from_")
                    && c.is_ascii_digit()
                {
                    found.push(format!("Duration::{f}({c}…)"));
                }
            }
            _ => {}
        }
    }
    found
}

/// The library crates and the binary, where every waiting time is named.
const ROOTS: [&str; 5] = [
    "src/lib.rs",
    "crates/store/src/lib.rs",
    "crates/config/src/lib.rs",
    "crates/engine/src/lib.rs",
    "crates/surfaces/src/lib.rs",
];

#[test]
fn every_waiting_time_in_the_code_is_a_named_constant() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for root in ROOTS {
        let c = Crate::read(&repo.join(root));
        for (module, t) in &c.modules {
            for d in literal_durations(t) {
                found.push(format!("{root}: {}: {d}", module.join("::")));
            }
        }
    }
    assert!(
        found.is_empty(),
        "durations written as numbers in the code (name them as constants, or take them from the settings):\n{}",
        found.join("\n")
    );
    let probe = tokens(
        "const WAIT: Duration = Duration::from_secs(5);\n\
         const POLICY: P = P { backoff: B::new(Duration::from_millis(200)) };\n\
         const fn f() {}\n\
         fn g() { sleep(Duration::from_millis(20)); sleep(WAIT); sleep(Duration::from_secs(s.timeout_s)); }",
    );
    assert_eq!(literal_durations(&probe), ["Duration::from_millis(2…)"]);
}

#[test]
fn no_two_files_of_a_crate_import_each_other() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for root in ROOTS {
        let c = Crate::read(&repo.join(root));
        assert!(
            c.modules.len() > 1,
            "{root}: no modules read; the reader has gone wrong"
        );
        found.extend(
            circles_in(&repo.join(root))
                .into_iter()
                .map(|c| format!("{root}: {c}")),
        );
    }
    assert!(
        found.is_empty(),
        "files that import each other (make one of them a leaf, or move what both need):\n{}",
        found.join("\n")
    );
}

/// The reader finds a circle, a direct one and one through a re-export alike: the test above
/// can fail.
#[test]
fn a_circle_is_found_directly_and_through_a_reexport() {
    let write = |dir: &Path, files: &[(&str, &str)]| {
        for (name, text) in files {
            std::fs::write(dir.join(name), text).expect("write a source file");
        }
    };
    let direct = tempfile::tempdir().expect("a temporary dir");
    write(
        direct.path(),
        &[
            ("lib.rs", "mod a;\nmod b;\n#[cfg(test)]\nmod tests;\n"),
            (
                "a.rs",
                "use crate::b::B; // \"use crate::c\"\npub struct A;\n",
            ),
            ("b.rs", "pub struct B;\nfn f() { let _ = super::a::A; }\n"),
        ],
    );
    assert_eq!(circles_in(&direct.path().join("lib.rs")), ["a → b → a"]);

    let through = tempfile::tempdir().expect("a temporary dir");
    std::fs::create_dir(through.path().join("parts")).expect("a folder");
    write(
        through.path(),
        &[
            ("lib.rs", "mod parts;\nmod c;\n"),
            (
                "c.rs",
                "use crate::parts::{Left as L, other};\npub struct C;\n",
            ),
            (
                "parts/mod.rs",
                "mod left;\nmod right;\npub(crate) use left::Left;\n",
            ),
            ("parts/left.rs", "use crate::c::C;\npub struct Left;\n"),
            ("parts/right.rs", "pub struct Right;\n"),
        ],
    );
    assert_eq!(
        circles_in(&through.path().join("lib.rs")),
        ["c → parts::left → c"]
    );

    let clean = tempfile::tempdir().expect("a temporary dir");
    write(
        clean.path(),
        &[
            ("lib.rs", "mod a;\nmod b;\n"),
            ("a.rs", "use crate::b::B;\npub struct A;\n"),
            (
                "b.rs",
                "pub struct B;\nconst S: &str = r#\"crate::a::A\"#;\n#[cfg(test)]\nmod tests { use crate::a::A; }\n",
            ),
        ],
    );
    assert!(circles_in(&clean.path().join("lib.rs")).is_empty());
}
