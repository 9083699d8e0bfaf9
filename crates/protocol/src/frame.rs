//! A general RESP2/RESP3 value parser, for clients (tests, tools, the
//! benchmark) that read what a server replies.
//!
//! Wire forms, each line ended by `\r\n` (checked strictly here, unlike the
//! server-side request parser which follows Redis's leniency):
//!
//! ```text
//! +text   -text   :int   $len CRLF bytes   $-1   *n elems   *-1
//! _   ,double   #t|#f   (bignum   =len CRLF fmt:text   !len CRLF error
//! %n (key value)*n   ~n elems   >n elems   |n (key value)*n then a value
//! ```
//!
//! Attributes (`|`) are parsed and dropped: the frame returned is the one
//! that follows them, and `consumed` covers both. Streamed strings and
//! aggregates (`$?`, `*?`) are not supported (Redis never sends them).

/// One RESP value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    Simple(Vec<u8>),
    /// `-` simple errors and `!` blob errors alike.
    Error(Vec<u8>),
    Integer(i64),
    Bulk(Vec<u8>),
    /// RESP2 `$-1` and `*-1`, RESP3 `_`.
    Null,
    Array(Vec<Frame>),
    Map(Vec<(Frame, Frame)>),
    Set(Vec<Frame>),
    Push(Vec<Frame>),
    /// The text after `,` exactly as sent (`1.5`, `inf`, `-nan`), so that
    /// comparisons are exact; parse it with `str::parse::<f64>` if needed.
    Double(Vec<u8>),
    Boolean(bool),
    /// The digits after `(`, as sent.
    BigNumber(Vec<u8>),
    Verbatim {
        format: Vec<u8>,
        text: Vec<u8>,
    },
}

/// Bytes that are not RESP. The connection cannot be resynchronised.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("invalid RESP: {0}")]
    Invalid(String),
}

/// Nesting deeper than this is refused, so that hostile input cannot
/// overflow the stack of the recursive parser.
pub const FRAME_DEPTH_MAX: usize = 128;

/// Parses the frame at the start of `buf`. `Ok(None)`: incomplete, call
/// again with more bytes. `Ok(Some((frame, consumed)))`: one frame.
pub fn parse_frame(buf: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
    parse_at(buf, 0, 0)
}

type Step = Result<Option<(Frame, usize)>, FrameError>;

fn invalid<T>(what: impl Into<String>) -> Result<T, FrameError> {
    Err(FrameError::Invalid(what.into()))
}

/// The line starting at `pos` (after the type byte): its content and the
/// position after its `\r\n`; `None` when the line end has not arrived.
fn line(buf: &[u8], pos: usize) -> Result<Option<(&[u8], usize)>, FrameError> {
    let rest = &buf[pos..];
    let Some(cr) = rest.iter().position(|&b| b == b'\r') else {
        return Ok(None);
    };
    match rest.get(cr + 1) {
        None => Ok(None),
        Some(b'\n') => Ok(Some((&rest[..cr], pos + cr + 2))),
        Some(_) => invalid("'\\r' not followed by '\\n'"),
    }
}

/// A signed decimal: optional sign, at least one digit, no overflow.
fn int(text: &[u8]) -> Result<i64, FrameError> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        Some((b'+', rest)) => (false, rest),
        _ => (false, text),
    };
    if digits.is_empty() {
        return invalid("empty integer");
    }
    let mut v: i64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return invalid(format!("bad integer {:?}", String::from_utf8_lossy(text)));
        }
        let d = i64::from(c - b'0');
        // Accumulate negatively so that i64::MIN parses.
        v = match v.checked_mul(10).and_then(|v| v.checked_sub(d)) {
            Some(v) => v,
            None => return invalid("integer overflow"),
        };
    }
    if negative {
        Ok(v)
    } else {
        v.checked_neg()
            .map_or_else(|| invalid("integer overflow"), Ok)
    }
}

/// A length: -1 (null) where `nullable`, else 0 or more.
fn length(text: &[u8], nullable: bool) -> Result<Option<usize>, FrameError> {
    match int(text)? {
        -1 if nullable => Ok(None),
        n if n >= 0 => {
            usize::try_from(n).map_or_else(|_| invalid("length too big"), |n| Ok(Some(n)))
        }
        n => invalid(format!("bad length {n}")),
    }
}

/// A length-prefixed payload at `pos` of `len` bytes plus `\r\n`.
fn payload(buf: &[u8], pos: usize, len: usize) -> Result<Option<(&[u8], usize)>, FrameError> {
    let have = buf.len() - pos;
    if have < 2 || have - 2 < len {
        return Ok(None);
    }
    if &buf[pos + len..pos + len + 2] != b"\r\n" {
        return invalid("payload not followed by \\r\\n");
    }
    Ok(Some((&buf[pos..pos + len], pos + len + 2)))
}

/// `n` frames from `pos`.
fn elements(
    buf: &[u8],
    mut pos: usize,
    n: usize,
    depth: usize,
) -> Result<Option<(Vec<Frame>, usize)>, FrameError> {
    // Each element takes at least 3 bytes ("_\r\n"): never reserve for more
    // than the input could hold.
    let mut out = Vec::with_capacity(n.min((buf.len() - pos) / 3));
    for _ in 0..n {
        let Some((f, next)) = parse_at(buf, pos, depth + 1)? else {
            return Ok(None);
        };
        out.push(f);
        pos = next;
    }
    Ok(Some((out, pos)))
}

fn parse_at(buf: &[u8], mut pos: usize, depth: usize) -> Step {
    if depth > FRAME_DEPTH_MAX {
        return invalid("nesting too deep");
    }
    loop {
        let Some(&kind) = buf.get(pos) else {
            return Ok(None);
        };
        let Some((text, after)) = line(buf, pos + 1)? else {
            return Ok(None);
        };
        let frame = match kind {
            b'+' => Frame::Simple(text.to_vec()),
            b'-' => Frame::Error(text.to_vec()),
            b':' => Frame::Integer(int(text)?),
            b',' => Frame::Double(text.to_vec()),
            b'(' => Frame::BigNumber(text.to_vec()),
            b'_' => {
                if !text.is_empty() {
                    return invalid("'_' with content");
                }
                Frame::Null
            }
            b'#' => match text {
                b"t" => Frame::Boolean(true),
                b"f" => Frame::Boolean(false),
                _ => return invalid("bad boolean"),
            },
            b'$' | b'!' | b'=' => {
                let Some(len) = length(text, kind == b'$')? else {
                    return Ok(Some((Frame::Null, after)));
                };
                let Some((data, end)) = payload(buf, after, len)? else {
                    return Ok(None);
                };
                let frame = match kind {
                    b'$' => Frame::Bulk(data.to_vec()),
                    b'!' => Frame::Error(data.to_vec()),
                    _ => {
                        if data.len() < 4 || data[3] != b':' {
                            return invalid("verbatim string without 'fmt:'");
                        }
                        Frame::Verbatim {
                            format: data[..3].to_vec(),
                            text: data[4..].to_vec(),
                        }
                    }
                };
                return Ok(Some((frame, end)));
            }
            b'*' | b'~' | b'>' => {
                let Some(n) = length(text, kind == b'*')? else {
                    return Ok(Some((Frame::Null, after)));
                };
                let Some((items, end)) = elements(buf, after, n, depth)? else {
                    return Ok(None);
                };
                let frame = match kind {
                    b'*' => Frame::Array(items),
                    b'~' => Frame::Set(items),
                    _ => Frame::Push(items),
                };
                return Ok(Some((frame, end)));
            }
            b'%' | b'|' => {
                let Some(pairs) = length(text, false)? else {
                    return invalid("null map");
                };
                let Some(n) = pairs.checked_mul(2) else {
                    return invalid("map too big");
                };
                let Some((items, end)) = elements(buf, after, n, depth)? else {
                    return Ok(None);
                };
                if kind == b'|' {
                    // An attribute: dropped; the value it annotates follows.
                    pos = end;
                    continue;
                }
                let mut map = Vec::with_capacity(pairs);
                let mut it = items.into_iter();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    map.push((k, v));
                }
                return Ok(Some((Frame::Map(map), end)));
            }
            other => return invalid(format!("unknown type byte {other:#04x}")),
        };
        return Ok(Some((frame, after)));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn one(buf: &[u8]) -> Frame {
        let (f, n) = parse_frame(buf).unwrap().unwrap();
        assert_eq!(n, buf.len(), "{:?}", String::from_utf8_lossy(buf));
        for cut in 0..buf.len() {
            assert_eq!(parse_frame(&buf[..cut]), Ok(None), "prefix {cut}");
        }
        f
    }

    fn bad(buf: &[u8]) {
        assert!(
            parse_frame(buf).is_err(),
            "{:?}",
            String::from_utf8_lossy(buf)
        );
    }

    fn b(s: &str) -> Vec<u8> {
        s.as_bytes().to_vec()
    }

    #[test]
    fn scalars() {
        assert_eq!(one(b"+OK\r\n"), Frame::Simple(b("OK")));
        assert_eq!(one(b"-ERR x\r\n"), Frame::Error(b("ERR x")));
        assert_eq!(one(b":-42\r\n"), Frame::Integer(-42));
        assert_eq!(one(b":9223372036854775807\r\n"), Frame::Integer(i64::MAX));
        assert_eq!(one(b":-9223372036854775808\r\n"), Frame::Integer(i64::MIN));
        assert_eq!(one(b"$5\r\nhe\r\no\r\n"), Frame::Bulk(b("he\r\no")));
        assert_eq!(one(b"$0\r\n\r\n"), Frame::Bulk(vec![]));
        assert_eq!(one(b"$-1\r\n"), Frame::Null);
        assert_eq!(one(b"*-1\r\n"), Frame::Null);
        assert_eq!(one(b"_\r\n"), Frame::Null);
        assert_eq!(one(b",1.5\r\n"), Frame::Double(b("1.5")));
        assert_eq!(one(b",-inf\r\n"), Frame::Double(b("-inf")));
        assert_eq!(one(b"#t\r\n"), Frame::Boolean(true));
        assert_eq!(one(b"#f\r\n"), Frame::Boolean(false));
        assert_eq!(
            one(b"(12345678901234567890\r\n"),
            Frame::BigNumber(b("12345678901234567890"))
        );
        assert_eq!(
            one(b"=9\r\ntxt:hello\r\n"),
            Frame::Verbatim {
                format: b("txt"),
                text: b("hello")
            }
        );
        assert_eq!(one(b"!5\r\nERR x\r\n"), Frame::Error(b("ERR x")));
    }

    #[test]
    fn aggregates() {
        assert_eq!(
            one(b"*2\r\n$1\r\na\r\n:1\r\n"),
            Frame::Array(vec![Frame::Bulk(b("a")), Frame::Integer(1)])
        );
        assert_eq!(one(b"*0\r\n"), Frame::Array(vec![]));
        assert_eq!(
            one(b"%1\r\n+k\r\n*1\r\n_\r\n"),
            Frame::Map(vec![(
                Frame::Simple(b("k")),
                Frame::Array(vec![Frame::Null])
            )])
        );
        assert_eq!(one(b"~1\r\n#t\r\n"), Frame::Set(vec![Frame::Boolean(true)]));
        assert_eq!(
            one(b">2\r\n+message\r\n$1\r\nx\r\n"),
            Frame::Push(vec![Frame::Simple(b("message")), Frame::Bulk(b("x"))])
        );
    }

    #[test]
    fn attributes_are_skipped() {
        assert_eq!(one(b"|1\r\n+ttl\r\n:3\r\n:7\r\n"), Frame::Integer(7));
        assert_eq!(
            one(b"*1\r\n|1\r\n+a\r\n+b\r\n|0\r\n+v\r\n"),
            Frame::Array(vec![Frame::Simple(b("v"))])
        );
    }

    #[test]
    fn pipeline_of_frames() {
        let buf = b"+OK\r\n:1\r\n$1\r\nx\r\n*1";
        let (f1, n1) = parse_frame(buf).unwrap().unwrap();
        let (f2, n2) = parse_frame(&buf[n1..]).unwrap().unwrap();
        let (f3, n3) = parse_frame(&buf[n1 + n2..]).unwrap().unwrap();
        assert_eq!(
            (f1, f2, f3),
            (
                Frame::Simple(b("OK")),
                Frame::Integer(1),
                Frame::Bulk(b("x"))
            )
        );
        assert_eq!(parse_frame(&buf[n1 + n2 + n3..]), Ok(None));
    }

    #[test]
    fn invalid_input() {
        bad(b"?\r\n");
        bad(b"+OK\rX");
        bad(b":\r\n");
        bad(b":12a\r\n");
        bad(b":99999999999999999999\r\n");
        bad(b"$-2\r\n");
        bad(b"$1\r\nabc\r\n");
        bad(b"$?\r\n");
        bad(b"~-1\r\n");
        bad(b"%-1\r\n");
        bad(b"#x\r\n");
        bad(b"_x\r\n");
        bad(b"=3\r\nabc\r\n");
        bad(b"=4\r\nabcd\r\n");
        let deep = "*1\r\n".repeat(FRAME_DEPTH_MAX + 2);
        bad(deep.as_bytes());
        // Depth at the limit with an incomplete tail is just incomplete.
        let ok_deep = "*1\r\n".repeat(FRAME_DEPTH_MAX);
        assert_eq!(parse_frame(ok_deep.as_bytes()), Ok(None));
    }

    #[test]
    fn huge_declared_sizes_do_not_allocate() {
        assert_eq!(parse_frame(b"*9223372036854775807\r\n"), Ok(None));
        assert_eq!(parse_frame(b"%4611686018427387904\r\n:1\r\n"), Ok(None));
        assert_eq!(parse_frame(b"%9223372036854775807\r\n"), Ok(None));
        assert_eq!(parse_frame(b"$9223372036854775807\r\n"), Ok(None));
    }
}
