//! Tests of `format.rs`: Markdown to Telegram's HTML, its plain text, and the split.

use super::*;

/// Panics unless `html` is well-formed: Telegram's tags only, nested right, entities whole.
fn check_balanced(html: &str) {
    let mut stack = Vec::new();
    for token in tokenize(html) {
        let name = tag_name(token);
        if !is_tag(token) {
            let entity_ok = !token.starts_with('&') || entity(token).is_some();
            assert!(entity_ok && !token.starts_with(['<', '>']), "{token}");
        } else if token.starts_with("</") {
            assert_eq!(stack.pop(), Some(name), "{token} in {html:?}");
        } else {
            let allowed = "b i u s code pre a blockquote tg-spoiler";
            assert!(allowed.split(' ').any(|a| a == name), "{token} in {html:?}");
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed {stack:?} in {html:?}");
}

/// The text a part shows, without the link targets [`plain`] adds: what a split must
/// neither lose nor repeat.
fn text_only(html: &str) -> String {
    let shown = tokenize(html).into_iter().filter(|t| !is_tag(t));
    shown
        .map(|t| entity(t).map_or(t.to_string(), String::from))
        .collect()
}

/// `split`, checked: parts within `limit`, balanced, with text, losing only whitespace.
fn check_parts(html: &str, limit: usize) -> Vec<String> {
    let parts = split(html, limit);
    for part in &parts {
        assert!(utf16_len(part) <= limit, "{} > {limit}", utf16_len(part));
        assert!(!plain(part).trim().is_empty(), "empty part");
        check_balanced(part);
    }
    let squeeze = |s: &str| s.split_whitespace().collect::<String>();
    let joined: String = parts.iter().map(|p| text_only(p)).collect();
    assert_eq!(squeeze(&joined), squeeze(&text_only(html)));
    parts
}

#[test]
#[rustfmt::skip]
fn renders_telegram_html() {
    let cases = [
        ("**b** *i* `a<b` ~~s~~", "<b>b</b> <i>i</i> <code>a&lt;b</code> <s>s</s>"),
        ("[l](https://e.org/?a=1&b=\"2\")", "<a href=\"https://e.org/?a=1&amp;b=&quot;2&quot;\">l</a>"),
        ("[](tg://user?id=1)", "<a href=\"tg://user?id=1\">tg://user?id=1</a>"),
        ("[m](mailto:x@y.z)", "<a href=\"mailto:x@y.z\">m</a>"),
        ("```rust\nfn f() {}\n```", "<pre><code class=\"language-rust\">fn f() {}</code></pre>"),
        ("```\na < b\n\nc\n```", "<pre>a &lt; b\n\nc</pre>"),
        ("```x\"y\nz\n```", "<pre>z</pre>"),
        ("    indented\n", "<pre>indented</pre>"),
        // The Markdown is untrusted: raw HTML is text, odd links lose their target.
        ("<script>alert(1)</script>", "&lt;script&gt;alert(1)&lt;/script&gt;"),
        ("a < b & c > d", "a &lt; b &amp; c &gt; d"),
        ("x <b onclick=\"y\">z</b>", "x &lt;b onclick=\"y\"&gt;z&lt;/b&gt;"),
        ("<div>\n<img src=x>\n</div>\n\nok", "&lt;div&gt;\n&lt;img src=x&gt;\n&lt;/div&gt;\n\nok"),
        ("[click](javascript:alert(1))", "click"),
        ("[f](file:///etc/passwd)", "f"),
        ("![a *cat*](https://x.org/c.png)", "a cat (https://x.org/c.png)"),
        ("![](http://x.org/c.png)", "http://x.org/c.png"),
        ("a\n\n![](data:image/png;base64,AA)\n\nb", "a\n\nb"),
        ("[![i](https://x.org/i.png)](https://x.org)", "<a href=\"https://x.org\">i (https://x.org/i.png)</a>"),
        ("# Title\n\nSome *text*\nnext  \nhard", "<b>Title</b>\n\nSome <i>text</i>\nnext\nhard"),
        ("> quoted\n>\n> > inner\n\n---\n\nend", "<blockquote>quoted\n\ninner</blockquote>\n\n———\n\nend"),
        ("Intro\n\n- a\n- b\n  - c\n    d\n- e\n\n## After", "Intro\n\n• a\n• b\n  • c\n    d\n• e\n\n<b>After</b>"),
        ("3. three\n4. four\n\n- [ ] to\n- [x] done", "3. three\n4. four\n\n☐ to\n☑ done"),
        ("- one\n\n- two", "• one\n\n• two"),
        ("| A | B |\n|---|:-:|\n| 1 | `2` |\n| 3 | 4 |", "<b>A | B</b>\n1 | <code>2</code>\n3 | 4"),
        ("", ""),
        ("\n\n  \n", ""),
    ];
    for (md, html) in cases {
        assert_eq!(to_html(md), html, "rendering {md:?}");
        check_balanced(html);
    }
}

#[test]
fn plain_strips_tags_and_decodes() {
    let html = to_html("**a** < [b](https://x.org/?q=\"1\") & `c>d` &#39;");
    assert_eq!(plain(&html), "a < b (https://x.org/?q=\"1\") & c>d '");
    // A link whose text is its target is shown once.
    assert_eq!(
        plain(&to_html("see <https://e.org/?a=1&b=2>")),
        "see https://e.org/?a=1&b=2"
    );
    assert_eq!(plain("&lt;&gt;&amp;&quot;&#39;&#x1F600;&#65;"), "<>&\"'😀A");
    assert_eq!(plain("&bogus; & &#xZZ; <b"), "&bogus; & &#xZZ; <b");
    assert_eq!(plain("<pre><code class=\"language-x\">y</code></pre>"), "y");
}

#[test]
fn split_cuts_where_it_should() {
    assert!(split("", 10).is_empty());
    assert_eq!(split("<b>hi</b>", 9), ["<b>hi</b>"]);
    assert_eq!(split("aaaa\nbb cc\n\ndd", 11), ["aaaa\nbb cc", "dd"]);
    assert_eq!(split("aaaa\nbb cc dd", 11), ["aaaa", "bb cc dd"]);
    assert_eq!(split("aa bb  cc", 6), ["aa bb ", "cc"]);
    assert_eq!(split("abcdef", 4), ["abcd", "ef"]);
    assert_eq!(split("&amp;&amp;&amp;", 7), ["&amp;", "&amp;", "&amp;"]);
    assert_eq!(split("x&amp;", 3), ["x", "&amp;"]);
    assert_eq!(split("<b>ab</b>", 1), ["<b>a</b>", "<b>b</b>"]);
    assert_eq!(split("<b></b>", 1), ["<b></b>"]);
    assert_eq!(split("ab<b>cd</b>", 9), ["ab", "<b>cd</b>"]);
    assert_eq!(split(&format!("a{}b", " ".repeat(99)), 5), ["a    ", "b"]);
    assert_eq!(split("<b>a</b>  \n\n  ", 9), ["<b>a</b> "]);
    let paragraph = |c: char| c.to_string().repeat(990);
    let paragraphs: Vec<String> = ('a'..='j').map(paragraph).collect();
    let parts = check_parts(&paragraphs.join("\n\n"), MAX_UTF16);
    assert_eq!(parts.len(), 3);
    let back: Vec<&str> = parts.iter().flat_map(|p| p.split("\n\n")).collect();
    assert_eq!(back, paragraphs);
    check_parts(&"a&amp;".repeat(2000), 999);
    for limit in [0, 1, 3, 5] {
        let parts = split("<b>ab</b> &amp; <i>c</i>", limit);
        assert_eq!(plain(&parts.concat()).replace(' ', ""), "ab&c");
        parts.iter().for_each(|p| check_balanced(p));
    }
}

#[test]
fn split_long_line_and_emoji() {
    for (text, first) in [
        ("x".repeat(9000), 4096),
        ("😀".repeat(5000), 4096),
        (format!("a{}", "😀".repeat(5000)), 4095),
    ] {
        let parts = check_parts(&text, MAX_UTF16);
        assert_eq!((parts.len(), utf16_len(&parts[0])), (3, first));
        assert_eq!(parts.concat(), text);
    }
}

#[test]
fn split_reopens_tags() {
    assert_eq!(split("<b>aaa bbb</b>", 12), ["<b>aaa</b>", "<b>bbb</b>"]);
    let a = "<a href=\"https://e.org\"><b>";
    let pre = "<pre><code class=\"language-sh\">";
    let words = format!("x {a}{}</b></a> y", "word ".repeat(3000));
    let parts = check_parts(&words, MAX_UTF16);
    assert_eq!(parts.len(), 4);
    for part in &parts[1..3] {
        assert!(part.starts_with(&format!("{a}word")), "{part}");
        assert!(part.ends_with("word</b></a>"), "{part}");
    }
    let lines = format!("{pre}{}</code></pre>", "ls\n".repeat(3000));
    for part in check_parts(&lines, 1000) {
        assert!(part.starts_with(&format!("{pre}ls\n")), "{part}");
    }
}

#[test]
fn split_mixed_markdown() {
    let pieces: Vec<&str> = "**bold¦*it* ¦`c<d` ¦[l](https://e.org/?a=1&b=2) ¦😀 ¦a & b ¦\n¦\n\n¦\
        - item ¦> quote ¦```py\nx = 1\n```\n¦# Head\n¦~~s~~ ¦é漢字 ¦word ¦1. [x] ok ¦\
        | a | b |\n|---|---|\n| c | d |\n\n"
        .split('¦')
        .collect();
    // Spread over the pieces without a pattern a cut could line up with.
    let piece = |i: usize| pieces[(i * i + i / 7) % pieces.len()];
    let md: String = (0..3000).map(piece).collect();
    let html = to_html(&md);
    check_balanced(&html);
    for limit in [120, 500, MAX_UTF16] {
        assert!(check_parts(&html, limit).len() > 1);
    }
}
