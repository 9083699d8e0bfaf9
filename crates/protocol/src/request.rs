//! Parsing one client request, as a Redis server reads it.
//!
//! Two wire forms exist, told apart by the first byte (Redis 7.0
//! `processInputBuffer`):
//!
//! * **multibulk** (first byte `*`), what every client library sends:
//!   ```text
//!   *<argc>\r\n  then argc times:  $<len>\r\n<len bytes>\r\n
//!   ```
//! * **inline** (anything else), what a person types over telnet:
//!   one line ended by `\n` (an `\r` before it is dropped), split into
//!   arguments by `sdssplitargs` rules: blanks separate, `"double quotes"`
//!   take `\n \r \t \b \a \xHH` and `\<any>` escapes, `'single quotes'`
//!   take only `\'`, and a closing quote must be followed by a blank or the
//!   end of the line.
//!
//! The parser is a pure function of the bytes buffered so far: the server
//! calls it again from the start of the request when more bytes arrive.
//! Every decision Redis makes incrementally depends only on the bytes it has
//! seen, so re-parsing gives the same answers, errors included, as Redis
//! gives at the same point. What the parser reproduces on purpose, quirks
//! included:
//!
//! * Lines of the multibulk form end at the first `\r`; the byte after it is
//!   required to be present but is not checked to be `\n`; likewise the two
//!   bytes after a bulk payload are skipped unchecked.
//! * Redis finds line ends with `strchr`, which stops at a NUL byte: a NUL
//!   before the line end means "no line end yet" (so the request waits until
//!   the buffer passes `max_inline_len` and then fails as too big). Inline
//!   arguments are split with C-string rules for the same reason.
//! * Counts are parsed with Redis's strict `string2ll`: no sign but `-`, no
//!   leading zeros, no blanks, at most 20 characters.
//! * A multibulk count <= 0 (`*0`, `*-1`, `*-7`) is an empty request.

use std::borrow::Cow;
use std::ops::Range;

use smallvec::SmallVec;

/// Bounds on what one request may claim, checked before anything is
/// buffered for it. Reaching one is a protocol error: the server replies
/// with the error and closes the connection, as Redis does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Largest bulk argument (`proto-max-bulk-len`), default 512 MiB.
    pub max_bulk_len: usize,
    /// Largest argument count. Redis 7.0 accepts up to `INT_MAX`, which is
    /// the default here; the server bounds memory by its query-buffer limit.
    pub max_multibulk_len: usize,
    /// Longest inline request, and longest count line of the multibulk form,
    /// that may sit in the buffer without its line end
    /// (`PROTO_INLINE_MAX_SIZE`, 64 KiB).
    pub max_inline_len: usize,
    /// The connection has not yet authenticated although a password is
    /// required: Redis 7.0 then refuses more than
    /// [`UNAUTHENTICATED_MULTIBULK_LEN_MAX`] arguments and bulk arguments
    /// longer than [`UNAUTHENTICATED_BULK_LEN_MAX`], so that an
    /// unauthenticated client cannot make the server buffer much.
    pub unauthenticated: bool,
}

/// Redis 7.0's argument-count bound for unauthenticated connections.
pub const UNAUTHENTICATED_MULTIBULK_LEN_MAX: i64 = 10;
/// Redis 7.0's bulk-length bound for unauthenticated connections.
pub const UNAUTHENTICATED_BULK_LEN_MAX: i64 = 16384;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            max_multibulk_len: i32::MAX as usize,
            max_inline_len: 64 * 1024,
            unauthenticated: false,
        }
    }
}

/// One request: its arguments, borrowed from the read buffer where possible
/// (every multibulk argument, unquoted inline arguments), owned where they
/// had to be unescaped (inline arguments with quotes).
///
/// An empty `argv` is a request the server skips without reply (an empty
/// inline line, `*0`, `*-1`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request<'a> {
    pub argv: SmallVec<[Cow<'a, [u8]>; 8]>,
}

impl<'a> Request<'a> {
    /// Number of arguments, the command name included.
    pub fn len(&self) -> usize {
        self.argv.len()
    }

    /// True for a request the server skips.
    pub fn is_empty(&self) -> bool {
        self.argv.is_empty()
    }
}

/// A malformed request. The server replies `-ERR <Display>` and closes the
/// connection. The texts are Redis 7.0's, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("Protocol error: invalid multibulk length")]
    InvalidMultibulkLength,
    #[error("Protocol error: invalid bulk length")]
    InvalidBulkLength,
    /// The byte found where a bulk argument's `$` should be.
    #[error("Protocol error: expected '$', got '{}'", char::from(*.0))]
    ExpectedDollar(u8),
    #[error("Protocol error: too big inline request")]
    TooBigInlineRequest,
    #[error("Protocol error: too big mbulk count string")]
    TooBigMbulkCountString,
    #[error("Protocol error: too big bulk count string")]
    TooBigBulkCountString,
    #[error("Protocol error: unbalanced quotes in request")]
    UnbalancedQuotes,
    #[error("Protocol error: unauthenticated multibulk length")]
    UnauthenticatedMultibulkLength,
    #[error("Protocol error: unauthenticated bulk length")]
    UnauthenticatedBulkLength,
}

/// Parses the request at the start of `buf`.
///
/// `Ok(None)`: the request is incomplete; nothing is consumed, call again
/// with more bytes. `Ok(Some((req, consumed)))`: one request, taking the
/// first `consumed` bytes of `buf`. An empty `req.argv` is a request to skip.
/// `Err`: the connection is to be closed after replying the error.
pub fn parse_request<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<Option<(Request<'a>, usize)>, ProtocolError> {
    match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_multibulk(buf, limits, &mut None),
        Some(_) => parse_inline(buf, limits),
    }
}

/// Redis's `PROTO_MBULK_BIG_ARG`: a bulk argument this long or longer gets
/// a query buffer sized for it alone.
pub const BIG_ARG: usize = 32 * 1024;

/// Where the request at the start of `buf` waits for the rest of a bulk
/// argument of [`BIG_ARG`] bytes or more: the range its payload and the
/// two bytes after it will take in `buf`. None when the request is
/// complete, malformed, inline, or waits for anything else. The server
/// then grows its read buffer to hold the whole argument at once and
/// reports only the argument's bytes as the client's query buffer, as
/// Redis's `processMultibulkBuffer` does.
pub fn pending_big_argument(buf: &[u8], limits: &Limits) -> Option<Range<usize>> {
    if buf.first() != Some(&b'*') {
        return None;
    }
    let mut awaited = None;
    match parse_multibulk(buf, limits, &mut awaited) {
        Ok(None) => awaited.filter(|payload| payload.len() - 2 >= BIG_ARG),
        _ => None,
    }
}

/// Index of the first `needle` in `hay`, or `None` when there is none or a
/// NUL comes first (C `strchr` on a NUL-terminated buffer, as Redis scans).
#[inline]
fn strchr(hay: &[u8], needle: u8) -> Option<usize> {
    debug_assert!(needle != 0);
    // Lines scanned on the hot path are a few bytes long ("$3\r"), so a plain
    // loop beats setting up a vectorised search.
    for (i, &b) in hay.iter().enumerate() {
        if b == needle {
            return Some(i);
        }
        if b == 0 {
            return None;
        }
    }
    None
}

/// Redis's `string2ll`: strict decimal, as described in the module doc.
#[inline]
fn string2ll(s: &[u8]) -> Option<i64> {
    // LONG_STR_SIZE is 21: 20 characters at most.
    if s.is_empty() || s.len() >= 21 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    let (&first, rest) = digits.split_first()?;
    if !(b'1'..=b'9').contains(&first) {
        return None;
    }
    let mut v = u64::from(first - b'0');
    for &c in rest {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if negative {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// `awaited`: set to where the bulk payload goes when the request waits
/// for one (for [`pending_big_argument`]).
fn parse_multibulk<'a>(
    buf: &'a [u8],
    limits: &Limits,
    awaited: &mut Option<Range<usize>>,
) -> Result<Option<(Request<'a>, usize)>, ProtocolError> {
    debug_assert_eq!(buf.first(), Some(&b'*'));
    let Some(cr) = strchr(buf, b'\r') else {
        if buf.len() > limits.max_inline_len {
            return Err(ProtocolError::TooBigMbulkCountString);
        }
        return Ok(None);
    };
    // The byte after '\r' must be there (it is not checked to be '\n').
    if cr + 2 > buf.len() {
        return Ok(None);
    }
    let count = match string2ll(&buf[1..cr]) {
        Some(n) if n <= i64::try_from(limits.max_multibulk_len).unwrap_or(i64::MAX) => n,
        _ => return Err(ProtocolError::InvalidMultibulkLength),
    };
    if count > UNAUTHENTICATED_MULTIBULK_LEN_MAX && limits.unauthenticated {
        return Err(ProtocolError::UnauthenticatedMultibulkLength);
    }
    let mut pos = cr + 2;
    if count <= 0 {
        return Ok(Some((Request::default(), pos)));
    }
    // count > 0 and <= max_multibulk_len, so it fits in usize.
    let count = count as usize;
    let mut argv: SmallVec<[Cow<'a, [u8]>; 8]> = SmallVec::new();
    if count > argv.inline_size() {
        // Bounded: the count is the client's claim, not yet backed by bytes.
        argv.reserve_exact(count.min(1024));
    }
    let max_bulk_len = i64::try_from(limits.max_bulk_len).unwrap_or(i64::MAX);
    for _ in 0..count {
        let rest = &buf[pos..];
        let Some(cr) = strchr(rest, b'\r') else {
            if rest.len() > limits.max_inline_len {
                return Err(ProtocolError::TooBigBulkCountString);
            }
            return Ok(None);
        };
        if cr + 2 > rest.len() {
            return Ok(None);
        }
        // cr + 2 <= rest.len(), so rest is not empty.
        if rest[0] != b'$' {
            return Err(ProtocolError::ExpectedDollar(rest[0]));
        }
        let len = match string2ll(&rest[1..cr]) {
            Some(n) if (0..=max_bulk_len).contains(&n) => n,
            _ => return Err(ProtocolError::InvalidBulkLength),
        };
        if len > UNAUTHENTICATED_BULK_LEN_MAX && limits.unauthenticated {
            return Err(ProtocolError::UnauthenticatedBulkLength);
        }
        // 0 <= len <= max_bulk_len <= usize::MAX.
        let len = len as usize;
        pos += cr + 2;
        // Checked before touching the payload, so a big argument arriving
        // in many reads costs O(arguments) per call, not O(bytes).
        let have = buf.len() - pos;
        if have < 2 || have - 2 < len {
            *awaited = Some(pos..pos + len + 2);
            return Ok(None);
        }
        argv.push(Cow::Borrowed(&buf[pos..pos + len]));
        // The two bytes after the payload are skipped unchecked, as Redis
        // does.
        pos += len + 2;
    }
    Ok(Some((Request { argv }, pos)))
}

fn parse_inline<'a>(
    buf: &'a [u8],
    limits: &Limits,
) -> Result<Option<(Request<'a>, usize)>, ProtocolError> {
    let Some(nl) = strchr(buf, b'\n') else {
        if buf.len() > limits.max_inline_len {
            return Err(ProtocolError::TooBigInlineRequest);
        }
        return Ok(None);
    };
    let end = if nl > 0 && buf[nl - 1] == b'\r' {
        nl - 1
    } else {
        nl
    };
    // strchr stopped at no NUL, so the line holds none: C-string rules and
    // slice rules agree on it.
    let argv = split_args(&buf[..end]).ok_or(ProtocolError::UnbalancedQuotes)?;
    Ok(Some((Request { argv }, nl + 1)))
}

/// C `isspace` in the C locale.
#[inline]
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// Ends an unquoted argument (sdssplitargs does not stop at `\v`, `\f`).
#[inline]
fn ends_unquoted(b: u8) -> bool {
    matches!(b, b' ' | b'\n' | b'\r' | b'\t')
}

fn hex_value(b: Option<&u8>) -> Option<u8> {
    match b? {
        c @ b'0'..=b'9' => Some(c - b'0'),
        c @ b'a'..=b'f' => Some(c - b'a' + 10),
        c @ b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// Redis's `sdssplitargs`: splits a line (without its line end) into
/// arguments by the rules in the module docs; `None` on unbalanced quotes.
/// A NUL ends the line, as it ends Redis's C string. An argument without
/// quotes borrows from the line. Redis splits more than inline requests
/// with it, and so does Keel: the config file, the AOF manifest, ACL
/// selectors, a function library's first line.
pub fn split_args(line: &[u8]) -> Option<SmallVec<[Cow<'_, [u8]>; 8]>> {
    let line = &line[..line.iter().position(|&b| b == 0).unwrap_or(line.len())];
    let n = line.len();
    let mut argv = SmallVec::new();
    let mut i = 0;
    loop {
        while i < n && is_c_space(line[i]) {
            i += 1;
        }
        if i == n {
            return Some(argv);
        }
        // Fast path: an argument without quotes is a slice of the line.
        let start = i;
        while i < n && !ends_unquoted(line[i]) && line[i] != b'"' && line[i] != b'\'' {
            i += 1;
        }
        if i == n || ends_unquoted(line[i]) {
            argv.push(Cow::Borrowed(&line[start..i]));
            i = (i + 1).min(n);
            continue;
        }
        // A quote opens, possibly in the middle of the argument (`a"b c"` is
        // the one argument `ab c`): unescape into an owned buffer.
        let mut cur = line[start..i].to_vec();
        let mut in_double = false;
        let mut in_single = false;
        loop {
            let c = line.get(i).copied();
            let mut done = false;
            if in_double {
                match c {
                    None => return None,
                    Some(b'\\') => {
                        if line.get(i + 1) == Some(&b'x') {
                            if let (Some(hi), Some(lo)) =
                                (hex_value(line.get(i + 2)), hex_value(line.get(i + 3)))
                            {
                                cur.push(hi * 16 + lo);
                                i += 3;
                                i += 1;
                                continue;
                            }
                        }
                        if let Some(&e) = line.get(i + 1) {
                            i += 1;
                            cur.push(match e {
                                b'n' => b'\n',
                                b'r' => b'\r',
                                b't' => b'\t',
                                b'b' => b'\x08',
                                b'a' => b'\x07',
                                other => other,
                            });
                        } else {
                            // A lone backslash at the end: kept, and the
                            // quote is then unterminated.
                            cur.push(b'\\');
                        }
                    }
                    Some(b'"') => {
                        if line.get(i + 1).is_some_and(|&b| !is_c_space(b)) {
                            return None;
                        }
                        done = true;
                    }
                    Some(other) => cur.push(other),
                }
            } else if in_single {
                match c {
                    None => return None,
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        cur.push(b'\'');
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|&b| !is_c_space(b)) {
                            return None;
                        }
                        done = true;
                    }
                    Some(other) => cur.push(other),
                }
            } else {
                match c {
                    None => done = true,
                    Some(b) if ends_unquoted(b) => done = true,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(other) => cur.push(other),
                }
            }
            if i < n {
                i += 1;
            }
            if done {
                break;
            }
        }
        argv.push(Cow::Owned(cur));
    }
}

/// Redis's `sdscatrepr`: `bytes` in double quotes, escaped so that
/// [`split_args`] reads them back as one argument.
pub fn repr(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    s.push('"');
    for &b in bytes {
        match b {
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            7 => s.push_str("\\a"),
            8 => s.push_str("\\b"),
            b if b.is_ascii_graphic() || b == b' ' => s.push(char::from(b)),
            b => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s.push('"');
    s
}

/// Whether `word` needs [`repr`] to be read back by [`split_args`] as
/// itself: it is empty, or holds a blank, a quote (one opens anywhere in a
/// word), a backslash or a byte that is not printable.
pub fn needs_repr(word: &[u8]) -> bool {
    word.is_empty() || word.iter().any(|&b| matches!(b, b'\\' | b'"' | b'\'') || !b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn args(req: &Request<'_>) -> Vec<Vec<u8>> {
        req.argv.iter().map(|a| a.to_vec()).collect()
    }

    type Parsed = Result<Option<(Vec<Vec<u8>>, usize)>, ProtocolError>;

    fn parse_all(buf: &[u8]) -> Parsed {
        parse_request(buf, &Limits::default()).map(|o| o.map(|(r, n)| (args(&r), n)))
    }

    fn ok(buf: &[u8]) -> Vec<Vec<u8>> {
        let (a, n) = parse_all(buf).unwrap().unwrap();
        assert_eq!(n, buf.len(), "whole buffer consumed for {:?}", buf);
        a
    }

    fn err(buf: &[u8]) -> ProtocolError {
        parse_all(buf).unwrap_err()
    }

    fn v(items: &[&str]) -> Vec<Vec<u8>> {
        items.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    /// Every strict prefix of a complete request is incomplete, and the
    /// whole parses to `expect`.
    fn check_prefixes(buf: &[u8], expect: &[Vec<u8>]) {
        for cut in 0..buf.len() {
            assert_eq!(
                parse_all(&buf[..cut]),
                Ok(None),
                "prefix {cut} of {:?}",
                buf
            );
        }
        assert_eq!(parse_all(buf), Ok(Some((expect.to_vec(), buf.len()))));
    }

    #[test]
    fn error_texts_are_redis_texts() {
        use ProtocolError::*;
        let cases: [(ProtocolError, &str); 9] = [
            (
                InvalidMultibulkLength,
                "Protocol error: invalid multibulk length",
            ),
            (InvalidBulkLength, "Protocol error: invalid bulk length"),
            (
                ExpectedDollar(b'X'),
                "Protocol error: expected '$', got 'X'",
            ),
            (
                TooBigInlineRequest,
                "Protocol error: too big inline request",
            ),
            (
                TooBigMbulkCountString,
                "Protocol error: too big mbulk count string",
            ),
            (
                TooBigBulkCountString,
                "Protocol error: too big bulk count string",
            ),
            (
                UnbalancedQuotes,
                "Protocol error: unbalanced quotes in request",
            ),
            (
                UnauthenticatedMultibulkLength,
                "Protocol error: unauthenticated multibulk length",
            ),
            (
                UnauthenticatedBulkLength,
                "Protocol error: unauthenticated bulk length",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }

    #[test]
    fn multibulk_basic() {
        let buf = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n";
        assert_eq!(ok(buf), v(&["SET", "key", "value"]));
        check_prefixes(buf, &v(&["SET", "key", "value"]));
    }

    #[test]
    fn multibulk_is_zero_copy() {
        let buf = b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
        let (req, _) = parse_request(buf, &Limits::default()).unwrap().unwrap();
        assert!(req.argv.iter().all(|a| matches!(a, Cow::Borrowed(_))));
        assert!(!req.argv.spilled());
    }

    #[test]
    fn multibulk_binary_safe() {
        let mut buf = b"*2\r\n$3\r\nSET\r\n$6\r\n".to_vec();
        let payload = [0u8, b'\r', b'\n', 0xff, b'*', b'$'];
        buf.extend_from_slice(&payload);
        buf.extend_from_slice(b"\r\n");
        assert_eq!(ok(&buf), vec![b"SET".to_vec(), payload.to_vec()]);
        check_prefixes(&buf, &[b"SET".to_vec(), payload.to_vec()]);
    }

    #[test]
    fn multibulk_empty_and_negative_counts() {
        assert_eq!(ok(b"*0\r\n"), Vec::<Vec<u8>>::new());
        assert_eq!(ok(b"*-1\r\n"), Vec::<Vec<u8>>::new());
        assert_eq!(ok(b"*-100\r\n"), Vec::<Vec<u8>>::new());
        assert_eq!(ok(b"*1\r\n$0\r\n\r\n"), vec![Vec::<u8>::new()]);
    }

    #[test]
    fn multibulk_many_args_spill() {
        let n = 1000;
        let mut buf = format!("*{n}\r\n").into_bytes();
        for i in 0..n {
            let s = i.to_string();
            buf.extend_from_slice(format!("${}\r\n{}\r\n", s.len(), s).as_bytes());
        }
        let a = ok(&buf);
        assert_eq!(a.len(), n);
        assert_eq!(a[999], b"999");
    }

    #[test]
    fn multibulk_count_errors() {
        use ProtocolError::*;
        for bad in [
            &b"*x\r\n"[..],
            b"*\r\n",
            b"*-\r\n",
            b"*-0\r\n",
            b"*01\r\n",
            b"*+1\r\n",
            b"* 1\r\n",
            b"*1 \r\n",
            b"*99999999999999999999\r\n",
            b"*123456789012345678901\r\n",
            b"*2147483648\r\n",
        ] {
            assert_eq!(err(bad), InvalidMultibulkLength, "{:?}", bad);
        }
        // INT_MAX itself is accepted (and then waits for its arguments).
        assert_eq!(parse_all(b"*2147483647\r\n"), Ok(None));
        let small = Limits {
            max_multibulk_len: 2,
            ..Limits::default()
        };
        assert_eq!(
            parse_request(b"*3\r\n", &small).unwrap_err(),
            InvalidMultibulkLength
        );
        assert_eq!(parse_request(b"*2\r\n", &small), Ok(None));
    }

    #[test]
    fn multibulk_line_end_quirks() {
        // The byte after '\r' is not checked, as in Redis.
        assert_eq!(ok(b"*1\rX$1\rYa\r\n"), v(&["a"]));
        // The two bytes after a payload are skipped unchecked.
        assert_eq!(ok(b"*1\r\n$1\r\naXY"), v(&["a"]));
        // '\r' alone at the end: wait for the byte after it.
        assert_eq!(parse_all(b"*1\r"), Ok(None));
        assert_eq!(parse_all(b"*1\r\n$1\r"), Ok(None));
        assert_eq!(parse_all(b"*1\r\n$1\r\na"), Ok(None));
        assert_eq!(parse_all(b"*1\r\n$1\r\na\r"), Ok(None));
    }

    #[test]
    fn multibulk_nul_before_line_end_waits() {
        // strchr stops at NUL: no line end yet.
        assert_eq!(parse_all(b"*1\0\r\n"), Ok(None));
        assert_eq!(parse_all(b"*1\r\n$1\0\r\na\r\n"), Ok(None));
        let mut big = b"*1\0\r\n".to_vec();
        big.resize(64 * 1024 + 1, b'x');
        assert_eq!(err(&big), ProtocolError::TooBigMbulkCountString);
        // NUL inside a payload is fine.
        assert_eq!(ok(b"*1\r\n$1\r\n\0\r\n"), vec![vec![0u8]]);
    }

    #[test]
    fn expected_dollar() {
        assert_eq!(err(b"*1\r\n:1\r\n"), ProtocolError::ExpectedDollar(b':'));
        assert_eq!(
            err(b"*2\r\n$1\r\na\r\nfoo\r\n"),
            ProtocolError::ExpectedDollar(b'f')
        );
        assert_eq!(err(b"*1\r\n\r\n"), ProtocolError::ExpectedDollar(b'\r'));
        // The line must be complete before its first byte is judged.
        assert_eq!(parse_all(b"*1\r\nfoo"), Ok(None));
        assert_eq!(
            ProtocolError::ExpectedDollar(b'*').to_string(),
            "Protocol error: expected '$', got '*'"
        );
    }

    #[test]
    fn bulk_length_errors() {
        use ProtocolError::*;
        for bad in [
            &b"*1\r\n$-1\r\n"[..],
            b"*1\r\n$x\r\n",
            b"*1\r\n$\r\n",
            b"*1\r\n$01\r\n",
            b"*1\r\n$1 \r\n",
            b"*1\r\n$99999999999999999999\r\n",
        ] {
            assert_eq!(err(bad), InvalidBulkLength, "{:?}", bad);
        }
        let small = Limits {
            max_bulk_len: 5,
            ..Limits::default()
        };
        assert_eq!(
            parse_request(b"*1\r\n$6\r\n", &small).unwrap_err(),
            InvalidBulkLength
        );
        assert_eq!(parse_request(b"*1\r\n$5\r\n", &small), Ok(None));
        // Default proto-max-bulk-len is 512 MiB.
        assert_eq!(parse_all(b"*1\r\n$536870912\r\n"), Ok(None));
        assert_eq!(err(b"*1\r\n$536870913\r\n"), InvalidBulkLength);
    }

    #[test]
    fn too_big_count_strings() {
        use ProtocolError::*;
        let limit = Limits::default().max_inline_len;
        let mut buf = b"*".to_vec();
        buf.resize(limit, b'1');
        assert_eq!(parse_all(&buf), Ok(None));
        buf.push(b'1');
        assert_eq!(err(&buf), TooBigMbulkCountString);

        let mut buf = b"*1\r\n$".to_vec();
        let header_at = 4;
        buf.resize(header_at + limit, b'1');
        assert_eq!(parse_all(&buf), Ok(None));
        buf.push(b'1');
        assert_eq!(err(&buf), TooBigBulkCountString);

        // A long line that does end is judged by its content instead.
        let mut buf = b"*".to_vec();
        buf.resize(limit + 10, b'1');
        buf.extend_from_slice(b"\r\n");
        assert_eq!(err(&buf), InvalidMultibulkLength);
    }

    #[test]
    fn unauthenticated_limits() {
        use ProtocolError::*;
        let l = Limits {
            unauthenticated: true,
            ..Limits::default()
        };
        assert_eq!(
            parse_request(b"*11\r\n", &l).unwrap_err(),
            UnauthenticatedMultibulkLength
        );
        assert_eq!(parse_request(b"*10\r\n", &l), Ok(None));
        assert_eq!(
            parse_request(b"*1\r\n$16385\r\n", &l).unwrap_err(),
            UnauthenticatedBulkLength
        );
        assert_eq!(parse_request(b"*1\r\n$16384\r\n", &l), Ok(None));
        // Invalid beats unauthenticated.
        assert_eq!(
            parse_request(b"*x\r\n", &l).unwrap_err(),
            InvalidMultibulkLength
        );
        // The authenticated default has no such bound.
        assert_eq!(parse_all(b"*11\r\n"), Ok(None));
        assert_eq!(parse_all(b"*1\r\n$16385\r\n"), Ok(None));
    }

    #[test]
    fn big_bulk_incomplete_is_cheap_and_correct() {
        let len = 10_000_000usize;
        let mut buf = format!("*2\r\n$3\r\nSET\r\n${len}\r\n").into_bytes();
        let header = buf.len();
        buf.resize(header + len, b'\r');
        assert_eq!(parse_all(&buf), Ok(None));
        buf.extend_from_slice(b"\r");
        assert_eq!(parse_all(&buf), Ok(None));
        buf.extend_from_slice(b"\n");
        let (a, n) = parse_all(&buf).unwrap().unwrap();
        assert_eq!(n, buf.len());
        assert_eq!(a[1].len(), len);
    }

    #[test]
    fn pipeline() {
        let mut buf = Vec::new();
        buf.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$1\r\na\r\n");
        buf.extend_from_slice(b"PING\r\n");
        buf.extend_from_slice(b"\r\n");
        buf.extend_from_slice(b"*0\r\n");
        buf.extend_from_slice(b"set k \"v v\"\n");
        buf.extend_from_slice(b"*1\r\n$4\r\nPI");
        let mut pos = 0;
        let mut got = Vec::new();
        while let Some((req, n)) = parse_request(&buf[pos..], &Limits::default()).unwrap() {
            got.push(args(&req));
            pos += n;
        }
        assert_eq!(
            got,
            vec![
                v(&["GET", "a"]),
                v(&["PING"]),
                vec![],
                vec![],
                v(&["set", "k", "v v"])
            ]
        );
        assert_eq!(&buf[pos..], b"*1\r\n$4\r\nPI");
    }

    #[test]
    fn inline_basic() {
        assert_eq!(ok(b"PING\r\n"), v(&["PING"]));
        assert_eq!(ok(b"PING\n"), v(&["PING"]));
        assert_eq!(ok(b"  set   a\tb  \r\n"), v(&["set", "a", "b"]));
        assert_eq!(ok(b"\r\n"), Vec::<Vec<u8>>::new());
        assert_eq!(ok(b"\n"), Vec::<Vec<u8>>::new());
        assert_eq!(ok(b"   \t \r\n"), Vec::<Vec<u8>>::new());
        // '\r' inside the line separates arguments; only one before '\n' is
        // the line end.
        assert_eq!(ok(b"a\rb\r\r\n"), v(&["a", "b"]));
        // \v and \f are skipped between arguments but do not end one.
        assert_eq!(ok(b"\x0ba\x0bb \x0c\n"), vec![b"a\x0bb".to_vec()]);
        check_prefixes(b"GET key\r\n", &v(&["GET", "key"]));
    }

    #[test]
    fn inline_unquoted_args_borrow() {
        let (req, _) = parse_request(b"GET key\r\n", &Limits::default())
            .unwrap()
            .unwrap();
        assert!(req.argv.iter().all(|a| matches!(a, Cow::Borrowed(_))));
        let (req, _) = parse_request(b"GET \"key\"\r\n", &Limits::default())
            .unwrap()
            .unwrap();
        assert!(matches!(req.argv[1], Cow::Owned(_)));
    }

    #[test]
    fn inline_quotes_as_sdssplitargs() {
        assert_eq!(ok(b"set \"a b\" 'c d'\n"), v(&["set", "a b", "c d"]));
        assert_eq!(
            ok(b"\"\\n\\r\\t\\b\\a\\\\\\\"\\q\"\n"),
            vec![b"\n\r\t\x08\x07\\\"q".to_vec()]
        );
        assert_eq!(
            ok(b"\"\\x41\\x4a\\x4A\\xff\\x00\"\n"),
            vec![vec![b'A', b'J', b'J', 0xff, 0]]
        );
        // Not a valid \x escape: the backslash escapes the 'x'.
        assert_eq!(ok(b"\"\\xZZ\"\n"), v(&["xZZ"]));
        assert_eq!(ok(b"\"\\x4\"\n"), v(&["x4"]));
        assert_eq!(ok(b"'a\\'b'\n"), v(&["a'b"]));
        // Single quotes keep other backslashes.
        assert_eq!(ok(b"'a\\nb'\n"), v(&["a\\nb"]));
        assert_eq!(ok(b"\"\"\n"), vec![Vec::<u8>::new()]);
        assert_eq!(ok(b"''\n"), vec![Vec::<u8>::new()]);
        // A quote in the middle of an argument opens a quoted part of it.
        assert_eq!(ok(b"a\"b c\" d\n"), v(&["ab c", "d"]));
        assert_eq!(ok(b"a'b c'\n"), v(&["ab c"]));
        // Closing quote followed by a blank of any kind.
        assert_eq!(ok(b"\"a\"\tb\n"), v(&["a", "b"]));
        assert_eq!(ok(b"\"a\"\x0bb\n"), v(&["a", "b"]));
        assert_eq!(ok(b"\"a\"\r\n"), v(&["a"]));
        assert_eq!(ok(b"\"a\"\r\r\n"), v(&["a"]));
        check_prefixes(b"set \"a b\" 'c'\r\n", &v(&["set", "a b", "c"]));
    }

    /// Outside a request (a config line, a selector), a NUL ends the
    /// line as it ends a C string (an ACL selector's NUL once made the
    /// fuzzer loop forever).
    #[test]
    fn split_args_stops_at_a_nul() {
        let words = |line: &[u8]| split_args(line).map(|a| a.iter().map(|w| w.to_vec()).collect::<Vec<_>>());
        assert_eq!(words(b"a\0b c"), Some(v(&["a"])));
        assert_eq!(words(b" \0"), Some(vec![]));
        assert_eq!(words(b"\"a\0b\""), None);
    }

    #[test]
    fn inline_unbalanced_quotes() {
        for bad in [
            &b"\"abc\n"[..],
            b"'abc\n",
            b"\"a\"b\n",
            b"'a'b\n",
            b"\"a\"\"\n",
            b"\"abc\\\"\n",
            b"\"abc\\\n",
            b"a\"b\n",
        ] {
            assert_eq!(err(bad), ProtocolError::UnbalancedQuotes, "{:?}", bad);
        }
    }

    #[test]
    fn inline_limits_and_nul() {
        let limit = Limits::default().max_inline_len;
        let mut buf = vec![b'a'; limit];
        assert_eq!(parse_all(&buf), Ok(None));
        buf.push(b'a');
        assert_eq!(err(&buf), ProtocolError::TooBigInlineRequest);
        // A long line that does end is accepted, as in Redis.
        let mut buf = vec![b'a'; limit * 2];
        buf.push(b'\n');
        assert_eq!(ok(&buf)[0].len(), limit * 2);
        // NUL before the newline: no line end yet.
        assert_eq!(parse_all(b"PING\0\r\n"), Ok(None));
        let mut buf = b"PING\0\r\n".to_vec();
        buf.resize(limit + 1, b'x');
        assert_eq!(err(&buf), ProtocolError::TooBigInlineRequest);
    }

    #[test]
    fn a_pending_big_argument_is_located() {
        let limits = Limits::default();
        let big = BIG_ARG + 7;
        let head = format!("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n${big}\r\n");
        let mut buf = head.clone().into_bytes();
        assert_eq!(pending_big_argument(&buf, &limits), Some(head.len()..head.len() + big + 2));
        buf.extend(std::iter::repeat_n(b'v', big));
        assert_eq!(pending_big_argument(&buf, &limits), Some(head.len()..head.len() + big + 2));
        buf.extend_from_slice(b"\r\n");
        assert_eq!(pending_big_argument(&buf, &limits), None, "complete");
        // Under the threshold, waiting for a header, inline, malformed.
        let small = format!("*2\r\n$3\r\nGET\r\n${}\r\nab", BIG_ARG - 1);
        assert_eq!(pending_big_argument(small.as_bytes(), &limits), None);
        assert_eq!(pending_big_argument(b"*2\r\n$3\r\nGET\r\n$400", &limits), None);
        assert_eq!(pending_big_argument(b"SET k 40000", &limits), None);
        assert_eq!(pending_big_argument(b"*2\r\n+3\r\n", &limits), None);
    }
}
