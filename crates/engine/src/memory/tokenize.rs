//! The text analyzer of the long-term index: CJK-aware, dictionary-free.
//!
//! Owns: how fact text, tags and recall queries are cut into index terms. Runs of CJK characters
//! (Han, kana, Hangul) become unigrams plus bigrams, so "乌龙茶" is found by "乌龙茶", "乌龙"
//! or "茶"; other letters and digits form words that are lower-cased and English-stemmed, so
//! "runs" finds "running". Mixed text works because each run is handled on its own.
//! Must not: load a dictionary (jieba and friends cost ~33 MB of RSS; the daemon's idle budget is
//! 30 MB), or be used with different settings at index and query time — [`analyzer`] is the one
//! definition both sides call.

use tantivy::tokenizer::{
    Language, LowerCaser, RemoveLongFilter, Stemmer, TextAnalyzer, Token, TokenStream, Tokenizer,
};

/// The name the analyzer is registered under in the index's tokenizer manager.
pub(crate) const ANALYZER_NAME: &str = "hermes_cjk";

/// Longer "words" are base64 blobs or URLs squashed together: not worth indexing.
const MAX_TOKEN_BYTES: usize = 64;

/// The analyzer for fact text, tags and queries.
pub(crate) fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(CjkTokenizer)
        .filter(RemoveLongFilter::limit(MAX_TOKEN_BYTES))
        .filter(LowerCaser)
        .filter(Stemmer::new(Language::English))
        .build()
}

/// The distinct terms of `text`, in first-seen order (what a query searches for).
pub(crate) fn terms(text: &str) -> Vec<String> {
    let mut analyzer = analyzer();
    let mut stream = analyzer.token_stream(text);
    let mut out: Vec<String> = Vec::new();
    while let Some(token) = stream.next() {
        if !out.iter().any(|t| t == &token.text) {
            out.push(token.text.clone());
        }
    }
    out
}

/// Words that say nothing of what a question is about: in English the function words, in
/// Chinese the single characters of pronouns, particles and question words. Only the query
/// side of recall drops them (an index term is never dropped): a fact found by "my" or "的"
/// alone would be recalled, or fused, as if the words had found it.
const STOP_WORDS: &[&str] = &[
    "a", "about", "am", "an", "and", "any", "are", "as", "at", "be", "been", "but", "by", "can",
    "could", "did", "do", "does", "doing", "for", "from", "get", "got", "had", "has", "have", "he",
    "her", "here", "hers", "him", "his", "how", "i", "if", "in", "into", "is", "it", "its", "me",
    "mine", "my", "myself", "of", "on", "or", "our", "ours", "she", "should", "so", "some", "than",
    "that", "the", "their", "them", "then", "there", "these", "they", "this", "those", "to", "too",
    "us", "was", "we", "were", "what", "when", "where", "which", "who", "whom", "whose", "why",
    "will", "with", "would", "you", "your", "yours", "我", "你", "他", "她", "它", "们", "的",
    "地", "得", "是", "了", "吗", "呢", "吧", "啊", "在", "有", "和", "与", "也", "都", "就", "什",
    "么", "哪", "谁", "几", "怎", "样", "这", "那", "个", "会", "要", "对", "给", "把", "被",
];

/// [`terms`] without the [`STOP_WORDS`] (as the analyzer makes them), nor the CJK bigrams made
/// of two of them ("我的", "什么"); all of them when every term is one.
pub(crate) fn content_terms(text: &str) -> Vec<String> {
    let all = terms(text);
    let stop: std::collections::HashSet<String> =
        STOP_WORDS.iter().flat_map(|w| terms(w)).collect();
    let says_nothing = |t: &String| {
        stop.contains(t)
            || (t.chars().count() == 2
                && t.chars()
                    .all(|c| is_cjk(c) && stop.contains(&c.to_string())))
    };
    let content: Vec<String> = all.iter().filter(|t| !says_nothing(t)).cloned().collect();
    if content.is_empty() { all } else { content }
}

/// Whether `c` belongs to a script written without spaces between words.
pub(crate) fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF     // hiragana, katakana
        | 0x3100..=0x312F   // bopomofo
        | 0x3130..=0x318F   // hangul compatibility jamo
        | 0x31F0..=0x31FF   // katakana phonetic extensions
        | 0x3400..=0x4DBF   // CJK extension A
        | 0x4E00..=0x9FFF   // CJK unified ideographs
        | 0xAC00..=0xD7AF   // hangul syllables
        | 0xF900..=0xFAFF   // CJK compatibility ideographs
        | 0x20000..=0x2FA1F // CJK extensions B.. and compatibility supplement
    )
}

/// Splits text into Latin-style words and CJK unigrams + bigrams (before lower-casing and
/// stemming, which the [`analyzer`]'s filters do).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct CjkTokenizer;

/// The tokens of one text, cut up front: fact texts are short, and a plain vector keeps the
/// segmentation logic in one readable function.
pub(crate) struct CjkTokenStream {
    tokens: Vec<Token>,
    next: usize,
}

impl Tokenizer for CjkTokenizer {
    type TokenStream<'a> = CjkTokenStream;

    fn token_stream<'a>(&'a mut self, text: &'a str) -> CjkTokenStream {
        CjkTokenStream {
            tokens: segment(text),
            next: 0,
        }
    }
}

impl TokenStream for CjkTokenStream {
    fn advance(&mut self) -> bool {
        if self.next < self.tokens.len() {
            self.next += 1;
            true
        } else {
            false
        }
    }

    fn token(&self) -> &Token {
        &self.tokens[self.next - 1]
    }

    fn token_mut(&mut self) -> &mut Token {
        &mut self.tokens[self.next - 1]
    }
}

#[derive(PartialEq)]
enum Class {
    Word,
    Cjk,
    Other,
}

fn class(c: char) -> Class {
    if is_cjk(c) {
        Class::Cjk
    } else if c.is_alphanumeric() {
        Class::Word
    } else {
        Class::Other
    }
}

fn segment(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut position = 0usize;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let end_of = |i: usize| chars.get(i).map_or(text.len(), |&(b, _)| b);
    let mut i = 0;
    while i < chars.len() {
        let kind = class(chars[i].1);
        let start = i;
        while i < chars.len() && class(chars[i].1) == kind {
            i += 1;
        }
        match kind {
            Class::Other => {}
            Class::Word => {
                tokens.push(token(text, chars[start].0, end_of(i), position));
                position += 1;
            }
            Class::Cjk => {
                // A unigram and the bigram starting at the same character share a position:
                // they are two views of the same spot, not two words in a row.
                for (j, &(at, _)) in chars.iter().enumerate().take(i).skip(start) {
                    tokens.push(token(text, at, end_of(j + 1), position));
                    if j + 1 < i {
                        tokens.push(token(text, at, end_of(j + 2), position));
                    }
                    position += 1;
                }
            }
        }
    }
    tokens
}

fn token(text: &str, from: usize, to: usize, position: usize) -> Token {
    Token {
        offset_from: from,
        offset_to: to,
        position,
        text: text[from..to].to_string(),
        position_length: 1,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn content_terms_drop_function_words_unless_nothing_else_is_left() {
        assert_eq!(
            super::content_terms("what colour is my automobile?"),
            ["colour", "automobil"]
        );
        let zh = super::content_terms("我的车是什么颜色");
        assert!(
            !zh.iter().any(|t| t == "我" || t == "的" || t == "是"),
            "{zh:?}"
        );
        assert!(zh.iter().any(|t| t == "颜色"), "{zh:?}");
        assert!(!zh.iter().any(|t| t == "我的" || t == "什么"), "{zh:?}");
        assert_eq!(
            super::content_terms("what is it"),
            super::terms("what is it")
        );
    }

    use super::*;

    #[test]
    fn chinese_becomes_unigrams_and_bigrams() {
        assert_eq!(terms("乌龙茶"), vec!["乌", "乌龙", "龙", "龙茶", "茶"]);
        assert_eq!(terms("茶"), vec!["茶"]);
    }

    #[test]
    fn english_is_lowercased_and_stemmed() {
        assert_eq!(terms("The user RUNS, running!"), vec!["the", "user", "run"]);
    }

    #[test]
    fn mixed_text_keeps_both_scripts_apart() {
        assert_eq!(
            terms("周报weekly report发给Alice"),
            vec![
                "周", "周报", "报", "week", "report", "发", "发给", "给", "alic"
            ]
        );
    }

    #[test]
    fn punctuation_and_symbols_separate_and_vanish() {
        assert_eq!(
            terms("\"tea\": 茶，咖啡。"),
            vec!["tea", "茶", "咖", "咖啡", "啡"]
        );
        assert!(terms("  ,.!?:\"' 。，").is_empty());
        assert!(terms("").is_empty());
    }

    #[test]
    fn japanese_and_korean_are_treated_as_cjk() {
        assert!(terms("カタカナ").contains(&"カタ".to_string()));
        assert!(terms("한국어").contains(&"한국".to_string()));
    }

    #[test]
    fn offsets_point_at_the_source_text() {
        let text = "a 乌龙 b";
        let mut tok = CjkTokenizer;
        let mut stream = tok.token_stream(text);
        let mut seen = Vec::new();
        while let Some(t) = stream.next() {
            seen.push((text[t.offset_from..t.offset_to].to_string(), t.position));
        }
        assert_eq!(
            seen,
            vec![
                ("a".to_string(), 0),
                ("乌".to_string(), 1),
                ("乌龙".to_string(), 1),
                ("龙".to_string(), 2),
                ("b".to_string(), 3)
            ]
        );
    }

    #[test]
    fn overlong_tokens_are_dropped() {
        let blob = "x".repeat(MAX_TOKEN_BYTES + 1);
        assert_eq!(terms(&format!("{blob} tea")), vec!["tea"]);
    }
}
