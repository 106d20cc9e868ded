//! A look at a message's MIME shape from its raw bytes, before any parser sees it: how deep
//! its parts nest and how many there are, in one pass over the lines with a stack that is
//! data, not calls — so no mail, however it is built, can use this to exhaust a stack.
//!
//! It is an estimate on purpose (it reads only Content-Type, Content-Transfer-Encoding and
//! boundary lines): it decides whether a message is too complex to hand to mail-parser, and
//! which multipart boundaries were still open where a fetch cut the message off.

/// The deepest nesting of containers (multipart and message/rfc822 parts) read. A person's
/// mail, even a forward of a forward, nests 4–6 deep (mixed > rfc822 > mixed > alternative);
/// 10 leaves room for that and keeps any recursive walk over the parts short.
pub(crate) const MAX_DEPTH: usize = 10;
/// The most parts read. Hundreds of attachments are not an instruction a person writes, and
/// the parser's work (and the list of attachment names) grows with the count.
pub(crate) const MAX_PARTS: usize = 500;

/// What the scan found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Shape {
    /// The deepest nesting of containers (0: a single-part message).
    pub depth: usize,
    /// Header blocks seen: the message's own, each part's, each nested message's.
    pub parts: usize,
    /// Boundaries of multiparts not closed by the end of the bytes, innermost first.
    pub open: Vec<Vec<u8>>,
}

impl Shape {
    /// Whether the message is within [`MAX_DEPTH`] and [`MAX_PARTS`].
    pub(crate) fn within_bounds(&self) -> bool {
        self.depth <= MAX_DEPTH && self.parts <= MAX_PARTS
    }
}

/// An open container: a multipart (its boundary) or a nested message (none; it ends where
/// the part holding it ends).
struct Frame {
    boundary: Option<Vec<u8>>,
}

/// The header block being read: the values that decide what follows it.
#[derive(Default)]
struct Block {
    content_type: Vec<u8>,
    encoding: Vec<u8>,
    /// Which of the two the last header line was (for folded continuations).
    last: Last,
}

#[derive(Default, PartialEq, Eq)]
enum Last {
    #[default]
    Other,
    ContentType,
    Encoding,
}

/// The shape of `raw`. Linear in its length; stops counting once both bounds are passed
/// far enough that the answer cannot change.
pub(crate) fn shape(raw: &[u8]) -> Shape {
    let mut stack: Vec<Frame> = Vec::new();
    let mut shape = Shape {
        parts: 1,
        ..Shape::default()
    };
    let mut block = Some(Block::default());
    for line in raw.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let colon = line.iter().position(|c| *c == b':');
        match block.as_mut() {
            Some(b) if !line.is_empty() && (line[0] == b' ' || line[0] == b'\t') => match b.last {
                Last::ContentType => b.content_type.extend_from_slice(line),
                Last::Encoding => b.encoding.extend_from_slice(line),
                Last::Other => {}
            },
            Some(b) if colon.is_some() => {
                let at = colon.unwrap_or_default();
                let name = line[..at].trim_ascii();
                let value = &line[at + 1..];
                if name.eq_ignore_ascii_case(b"content-type") {
                    b.content_type = value.to_vec();
                    b.last = Last::ContentType;
                } else if name.eq_ignore_ascii_case(b"content-transfer-encoding") {
                    b.encoding = value.to_vec();
                    b.last = Last::Encoding;
                } else {
                    b.last = Last::Other;
                }
            }
            Some(_) => {
                // A blank line (or a line that is no header) ends the block: what it says
                // opens a container, or a leaf's body follows.
                let Some(b) = block.take() else { continue };
                let ct = b.content_type.trim_ascii().to_ascii_lowercase();
                let encoded = {
                    let e = b.encoding.trim_ascii().to_ascii_lowercase();
                    e.starts_with(b"base64") || e.starts_with(b"quoted-printable")
                };
                if ct.starts_with(b"multipart/")
                    && let Some(boundary) = boundary_of(&b.content_type)
                {
                    stack.push(Frame {
                        boundary: Some(boundary),
                    });
                } else if ct.starts_with(b"message/") && !encoded {
                    // The nested message's own headers start on the next line.
                    stack.push(Frame { boundary: None });
                    shape.parts += 1;
                    block = Some(Block::default());
                }
                shape.depth = shape.depth.max(stack.len());
            }
            None => {
                let Some(rest) = line.strip_prefix(b"--") else {
                    continue;
                };
                let hit = stack.iter().rposition(|f| {
                    f.boundary
                        .as_deref()
                        .is_some_and(|bd| !bd.is_empty() && rest.starts_with(bd))
                });
                let Some(i) = hit else { continue };
                let len = stack[i].boundary.as_ref().map_or(0, Vec::len);
                if rest[len..].starts_with(b"--") {
                    stack.truncate(i);
                } else {
                    stack.truncate(i + 1);
                    shape.parts += 1;
                    block = Some(Block::default());
                }
            }
        }
        if shape.depth > MAX_DEPTH && shape.parts > MAX_PARTS {
            break;
        }
    }
    shape.open = stack.into_iter().rev().filter_map(|f| f.boundary).collect();
    shape
}

/// The `boundary` parameter of a Content-Type value, quoted or not.
fn boundary_of(content_type: &[u8]) -> Option<Vec<u8>> {
    let lower = content_type.to_ascii_lowercase();
    let at = lower
        .windows(9)
        .position(|w| w == b"boundary=")
        .map(|p| p + 9)?;
    let value = &content_type[at..];
    let value = value.trim_ascii_start();
    let found: Vec<u8> = if let Some(quoted) = value.strip_prefix(b"\"") {
        quoted.iter().take_while(|c| **c != b'"').copied().collect()
    } else {
        value
            .iter()
            .take_while(|c| **c != b';' && !c.is_ascii_whitespace())
            .copied()
            .collect()
    };
    (!found.is_empty()).then_some(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message wrapping a small one in `levels` message/rfc822 parts.
    fn nested(levels: usize) -> String {
        let mut raw = String::from("From: me@example.org\r\nSubject: deep\r\n");
        for _ in 0..levels {
            raw.push_str("Content-Type: message/rfc822\r\n\r\n");
        }
        raw.push_str("Subject: inner\r\n\r\nhello\r\n");
        raw
    }

    #[test]
    fn a_plain_message_is_flat() {
        let s = shape(b"From: a@b\r\nSubject: x\r\n\r\nhello\r\n--not a boundary\r\n");
        assert_eq!((s.depth, s.parts), (0, 1));
        assert!(s.open.is_empty());
        assert!(s.within_bounds());
    }

    #[test]
    fn multiparts_and_nested_messages_are_counted() {
        let raw = "From: a@b\r\nContent-Type: multipart/mixed;\r\n boundary=\"outer\"\r\n\r\n\
            preamble\r\n--outer\r\nContent-Type: multipart/alternative; boundary=in\r\n\r\n\
            --in\r\nContent-Type: text/plain\r\n\r\nhi\r\n--in\r\nContent-Type: text/html\r\n\r\n\
            <p>hi</p>\r\n--in--\r\n--outer\r\nContent-Type: message/rfc822\r\n\r\n\
            From: b@c\r\nSubject: fwd\r\n\r\nold\r\n--outer--\r\n";
        let s = shape(raw.as_bytes());
        // mixed > alternative, and mixed > rfc822.
        assert_eq!(s.depth, 2);
        // The message, alternative, plain, html, rfc822 part, the forwarded message.
        assert_eq!(s.parts, 6);
        assert!(s.open.is_empty(), "{:?}", s.open);
    }

    #[test]
    fn deep_nesting_is_seen_without_recursion() {
        let s = shape(nested(20_000).as_bytes());
        assert!(s.depth > MAX_DEPTH, "{}", s.depth);
        assert!(!s.within_bounds());
        assert!(shape(nested(MAX_DEPTH).as_bytes()).within_bounds());
        assert!(!shape(nested(MAX_DEPTH + 1).as_bytes()).within_bounds());
    }

    #[test]
    fn too_many_parts_are_seen() {
        let mut raw =
            String::from("From: a@b\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n");
        for i in 0..MAX_PARTS {
            raw.push_str(&format!(
                "--b\r\nContent-Type: text/plain\r\n\r\npart {i}\r\n"
            ));
        }
        raw.push_str("--b--\r\n");
        let s = shape(raw.as_bytes());
        assert_eq!(s.parts, MAX_PARTS + 1);
        assert!(!s.within_bounds());
    }

    #[test]
    fn boundaries_left_open_by_a_cut_are_named_innermost_first() {
        let raw = "From: a@b\r\nContent-Type: multipart/mixed; boundary=out\r\n\r\n--out\r\n\
            Content-Type: multipart/alternative; boundary=\"in 1\"\r\n\r\n--in 1\r\n\
            Content-Type: text/plain\r\n\r\nlong text that goes on";
        let s = shape(raw.as_bytes());
        assert_eq!(s.open, vec![b"in 1".to_vec(), b"out".to_vec()]);
    }
}
