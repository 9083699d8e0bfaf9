//! The record format of AOF files, and a streaming reader for it.
//!
//! # Record layout (what [`encode_command`] writes)
//!
//! An AOF file (Redis 7.0 "RESP" AOF, base or incr) is a plain concatenation
//! of commands, each a RESP2 array of bulk strings, byte for byte what a
//! client would send:
//!
//! ```text
//! *<argc>\r\n                    argc >= 1, decimal, no sign, no leading '+'
//! $<len>\r\n<len bytes>\r\n      repeated argc times; len decimal, >= 0
//! ```
//!
//! There is no header, no checksum and no length prefix for the file: a
//! record is complete exactly when its last `\r\n` is present. Two more
//! things may appear between records and are understood by the reader:
//!
//! * `SELECT <db>` records set the database of the records that follow them
//!   (the writer emits one whenever the database differs from the previous
//!   record's, as Redis does; a fresh journal always starts with one).
//! * Annotation lines starting with `#` and ending with `\n`, such as Redis's
//!   `#TS:<unix-seconds>\r\n` (written when `aof-timestamp-enabled yes`), are
//!   skipped. Keel never writes them.
//!
//! Transactions are `MULTI`, the commands, `EXEC`, each an ordinary record.

use std::io::{self, BufRead, Read};

/// Longest annotation line the reader accepts (Redis's
/// `AOF_ANNOTATION_LINE_MAX_LEN`).
const ANNOTATION_LINE_MAX: usize = 1024;
/// Longest `*<argc>\r\n` or `$<len>\r\n` line: 20 digits of a u64 plus the
/// prefix and CRLF, with room to spare.
const HEADER_LINE_MAX: usize = 32;

/// Appends the decimal form of `n` to `out`.
fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Encodes one command (see the module docs for the layout) onto `out`.
pub fn encode_command<A: AsRef<[u8]>>(out: &mut Vec<u8>, argv: &[A]) {
    assert!(!argv.is_empty(), "a journal record needs at least one argument");
    out.push(b'*');
    push_decimal(out, argv.len() as u64);
    out.extend_from_slice(b"\r\n");
    for arg in argv {
        let arg = arg.as_ref();
        out.push(b'$');
        push_decimal(out, arg.len() as u64);
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Encodes Redis's timestamp annotation, `#TS:<unix seconds>\r\n`
/// (`aof-timestamp-enabled`), which `redis-check-aof
/// --truncate-to-timestamp` cuts at.
pub(crate) fn encode_timestamp(out: &mut Vec<u8>, unix_s: u64) {
    out.extend_from_slice(b"#TS:");
    push_decimal(out, unix_s);
    out.extend_from_slice(b"\r\n");
}

/// Encodes the memcached flags of the key the record before it wrote, as
/// an annotation: Redis loads the file without them (it has nowhere to
/// keep them), Keel gives the key its flags back.
pub(crate) fn encode_item_flags(out: &mut Vec<u8>, flags: u32) {
    out.extend_from_slice(ITEM_FLAGS);
    push_decimal(out, u64::from(flags));
    out.extend_from_slice(b"\r\n");
}

const ITEM_FLAGS: &[u8] = b"#item-flags:";

/// The flags of an `#item-flags:<flags>\r\n` annotation line.
fn item_flags_of(line: &[u8]) -> Option<u32> {
    u32::try_from(parse_u64(line.strip_prefix(ITEM_FLAGS)?.strip_suffix(b"\r\n")?)?).ok()
}

/// The time of a `#TS:<seconds>\r\n` annotation line.
fn timestamp_of(line: &[u8]) -> Option<u64> {
    parse_u64(line.strip_prefix(b"#TS:")?.strip_suffix(b"\r\n")?)
}

/// The clock timestamp annotations carry.
pub(crate) fn unix_s() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Encodes `SELECT <db>`, exactly as Redis's `feedAppendOnlyFile` does.
pub fn encode_select(out: &mut Vec<u8>, db: usize) {
    let mut num = Vec::with_capacity(20);
    push_decimal(&mut num, db as u64);
    encode_command(out, &[&b"SELECT"[..], &num[..]]);
}

/// What the reader found at the current position.
#[derive(Debug)]
pub(crate) enum Item {
    /// A complete command. In [`Mode::Skim`] only the first argument is kept
    /// (and only when it is short); the others are empty.
    Command(Vec<Vec<u8>>),
    /// An annotation line (`#...\n`), skipped; the Unix time it carries
    /// if it is a timestamp annotation (`#TS:<seconds>\r\n`).
    Annotation(Option<u64>),
    /// The memcached flags of the key the command before wrote
    /// (`#item-flags:<flags>\r\n`).
    KeyFlags(u32),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Keep every argument.
    Full,
    /// Validate the structure, keep only a short first argument: enough to
    /// recognise MULTI/EXEC/SELECT without allocating values.
    Skim,
}

/// Why a record could not be read.
#[derive(Debug)]
pub(crate) enum ReadError {
    /// The input ended inside the record that starts at `record_start`: a
    /// torn tail if this is the end of the last file.
    Eof { record_start: u64 },
    /// The bytes at `offset` are not a valid record (the record began at
    /// `record_start`).
    Format { record_start: u64, offset: u64, reason: String },
    Io(io::Error),
}

/// Reads records from `R`, tracking the byte offset of everything it consumes.
pub(crate) struct RecordReader<R> {
    inner: R,
    pos: u64,
    /// Bytes left before the end of the input (the reader never reads more).
    remaining: u64,
    /// 1-based line number of the current position (for messages).
    line: u64,
}

impl<R: BufRead> RecordReader<R> {
    /// `len` is the number of bytes of input this reader may consume; `R`
    /// must hold at least that many (a file's length, or a validated prefix).
    pub(crate) fn new(inner: R, len: u64) -> Self {
        RecordReader { inner, pos: 0, remaining: len, line: 1 }
    }

    pub(crate) fn position(&self) -> u64 {
        self.pos
    }

    pub(crate) fn line(&self) -> u64 {
        self.line
    }

    /// Reads the next item; `Ok(None)` at a clean end of input.
    pub(crate) fn next_item(&mut self, mode: Mode) -> Result<Option<Item>, ReadError> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let record_start = self.pos;
        let first = self.peek_byte()?.ok_or(ReadError::Eof { record_start })?;
        match first {
            b'#' => {
                let line = self.read_line(ANNOTATION_LINE_MAX, record_start)?;
                match item_flags_of(&line) {
                    Some(flags) => Ok(Some(Item::KeyFlags(flags))),
                    None => Ok(Some(Item::Annotation(timestamp_of(&line)))),
                }
            }
            b'*' => {
                let argc = self.read_header(b'*', record_start)?;
                if argc == 0 {
                    return Err(ReadError::Format {
                        record_start,
                        offset: record_start,
                        reason: "command with zero arguments".into(),
                    });
                }
                // Each argument takes at least 6 bytes ("$0\r\n\r\n"): never
                // reserve more than the input could hold.
                let cap = argc.min(self.remaining / 6 + 1).min(1024) as usize;
                let mut argv = Vec::with_capacity(cap);
                for i in 0..argc {
                    let keep_max = match mode {
                        Mode::Full => u64::MAX,
                        Mode::Skim if i == 0 => 64,
                        Mode::Skim => 0,
                    };
                    argv.push(self.read_bulk(record_start, keep_max)?);
                }
                Ok(Some(Item::Command(argv)))
            }
            other => Err(ReadError::Format {
                record_start,
                offset: record_start,
                reason: format!("expected '*' or '#', got byte 0x{other:02x}"),
            }),
        }
    }

    fn peek_byte(&mut self) -> Result<Option<u8>, ReadError> {
        if self.remaining == 0 {
            return Ok(None);
        }
        let buf = self.inner.fill_buf().map_err(ReadError::Io)?;
        Ok(buf.first().copied())
    }

    /// Reads one line ending in `\n` (inclusive), at most `max` bytes.
    fn read_line(&mut self, max: usize, record_start: u64) -> Result<Vec<u8>, ReadError> {
        let start = self.pos;
        let mut line = Vec::new();
        loop {
            if self.remaining == 0 {
                return Err(ReadError::Eof { record_start });
            }
            let buf = self.inner.fill_buf().map_err(ReadError::Io)?;
            if buf.is_empty() {
                // The caller promised `remaining` bytes: a shorter input
                // (the file shrank under us) reads as a torn tail.
                return Err(ReadError::Eof { record_start });
            }
            let avail = buf.len().min(self.remaining as usize);
            let (take, done) = match memchr_nl(&buf[..avail]) {
                Some(i) => (i + 1, true),
                None => (avail, false),
            };
            if line.len() + take > max {
                return Err(ReadError::Format {
                    record_start,
                    offset: start,
                    reason: format!("line longer than {max} bytes"),
                });
            }
            line.extend_from_slice(&buf[..take]);
            self.inner.consume(take);
            self.pos += take as u64;
            self.remaining -= take as u64;
            if done {
                self.line += 1;
                return Ok(line);
            }
        }
    }

    /// Reads `<prefix><decimal>\r\n`.
    fn read_header(&mut self, prefix: u8, record_start: u64) -> Result<u64, ReadError> {
        let offset = self.pos;
        let line = self.read_line(HEADER_LINE_MAX, record_start)?;
        let bad = |reason: String| ReadError::Format { record_start, offset, reason };
        if line.first() != Some(&prefix) {
            return Err(bad(format!(
                "expected prefix '{}', got {}",
                prefix as char,
                line.first().map_or("nothing".to_string(), |b| format!("0x{b:02x}"))
            )));
        }
        let body = &line[1..];
        let Some(digits) = body.strip_suffix(b"\r\n") else {
            return Err(bad("header line does not end in \\r\\n".into()));
        };
        parse_u64(digits).ok_or_else(|| {
            bad(format!("invalid number {:?}", String::from_utf8_lossy(digits)))
        })
    }

    /// Reads one bulk string; its bytes are kept only when it is at most
    /// `keep_max` long (otherwise they are skipped and an empty value is
    /// returned).
    fn read_bulk(&mut self, record_start: u64, keep_max: u64) -> Result<Vec<u8>, ReadError> {
        let len = self.read_header(b'$', record_start)?;
        // The value and its CRLF must fit in what is left; otherwise the
        // input ends inside this record.
        if len.saturating_add(2) > self.remaining {
            return Err(ReadError::Eof { record_start });
        }
        let keep = len <= keep_max;
        let mut value = Vec::new();
        if keep {
            value.reserve_exact(len as usize);
            let n = (&mut self.inner).take(len).read_to_end(&mut value).map_err(ReadError::Io)?;
            if (n as u64) < len {
                return Err(ReadError::Eof { record_start });
            }
        } else {
            let n = io::copy(&mut (&mut self.inner).take(len), &mut io::sink())
                .map_err(ReadError::Io)?;
            if n < len {
                return Err(ReadError::Eof { record_start });
            }
        }
        self.pos += len;
        self.remaining -= len;
        let crlf_at = self.pos;
        let mut crlf = [0u8; 2];
        self.inner.read_exact(&mut crlf).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                ReadError::Eof { record_start }
            } else {
                ReadError::Io(e)
            }
        })?;
        self.pos += 2;
        self.remaining -= 2;
        if &crlf != b"\r\n" {
            return Err(ReadError::Format {
                record_start,
                offset: crlf_at,
                reason: format!("expected \\r\\n after a bulk string, got {crlf:02x?}"),
            });
        }
        self.line += 1;
        Ok(value)
    }
}

fn memchr_nl(buf: &[u8]) -> Option<usize> {
    buf.iter().position(|&b| b == b'\n')
}

/// Strict decimal: one or more ASCII digits, no sign, fits in u64.
pub(crate) fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 20 {
        return None;
    }
    let mut n: u64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        n = n.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn read_all(bytes: &[u8], mode: Mode) -> (Vec<Vec<Vec<u8>>>, Option<ReadError>) {
        let mut r = RecordReader::new(bytes, bytes.len() as u64);
        let mut out = Vec::new();
        loop {
            match r.next_item(mode) {
                Ok(Some(Item::Command(argv))) => out.push(argv),
                Ok(Some(Item::Annotation(_) | Item::KeyFlags(_))) => {}
                Ok(None) => return (out, None),
                Err(e) => return (out, Some(e)),
            }
        }
    }

    #[test]
    fn encodes_like_redis() {
        let mut out = Vec::new();
        encode_select(&mut out, 0);
        encode_command(&mut out, &[&b"set"[..], b"a", b"1"]);
        assert_eq!(
            out,
            b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nset\r\n$1\r\na\r\n$1\r\n1\r\n"
        );
    }

    #[test]
    fn item_flags_read_back_and_other_annotations_do_not_pass_for_them() {
        let mut out = Vec::new();
        encode_command(&mut out, &[&b"SET"[..], b"k", b"v"]);
        encode_item_flags(&mut out, u32::MAX);
        encode_timestamp(&mut out, 7);
        out.extend_from_slice(b"#item-flags:4294967296\r\n#item-flags:x\r\n");
        let mut r = RecordReader::new(&out[..], out.len() as u64);
        let mut items = Vec::new();
        while let Some(item) = r.next_item(Mode::Full).unwrap() {
            items.push(match item {
                Item::Command(argv) => format!("cmd {}", argv.len()),
                Item::KeyFlags(flags) => format!("flags {flags}"),
                Item::Annotation(ts) => format!("annotation {ts:?}"),
            });
        }
        assert_eq!(items, ["cmd 3", "flags 4294967295", "annotation Some(7)", "annotation None", "annotation None"]);
    }

    #[test]
    fn round_trips_binary_values() {
        let mut out = Vec::new();
        let big = vec![b'\n'; 100_000];
        encode_command(&mut out, &[&b"SET"[..], b"k\r\n", &big, b""]);
        out.extend_from_slice(b"#TS:1700000000\r\n");
        encode_command(&mut out, &[&b"DEL"[..], b"k"]);
        let (cmds, err) = read_all(&out, Mode::Full);
        assert!(err.is_none());
        assert_eq!(cmds.len(), 2);
        assert_eq!(cmds[0][2], big);
        assert_eq!(cmds[0][1], b"k\r\n");
        assert_eq!(cmds[0][3], b"");
        let (skim, err) = read_all(&out, Mode::Skim);
        assert!(err.is_none());
        assert_eq!(skim[0][0], b"SET");
        assert!(skim[0][2].is_empty(), "skim mode drops long values");
    }

    #[test]
    fn every_prefix_is_torn_not_corrupt() {
        let mut out = Vec::new();
        encode_command(&mut out, &[&b"SET"[..], b"key", b"value"]);
        let one = out.len();
        encode_command(&mut out, &[&b"INCR"[..], b"counter"]);
        for cut in 0..out.len() {
            let (cmds, err) = read_all(&out[..cut], Mode::Full);
            if cut == 0 || cut == one {
                assert!(err.is_none(), "cut at {cut}");
                continue;
            }
            match err {
                Some(ReadError::Eof { record_start }) => {
                    assert_eq!(record_start, if cut < one { 0 } else { one as u64 });
                    assert_eq!(cmds.len(), usize::from(cut > one));
                }
                other => panic!("cut at {cut}: {other:?}"),
            }
        }
    }

    #[test]
    fn garbage_is_a_format_error_with_offset() {
        let mut out = Vec::new();
        encode_command(&mut out, &[&b"SET"[..], b"a", b"1"]);
        let good = out.len() as u64;
        out.extend_from_slice(b"*2\r\n$3\r\nGET\r\nX1\r\na\r\n");
        match read_all(&out, Mode::Full).1 {
            Some(ReadError::Format { record_start, offset, .. }) => {
                assert_eq!(record_start, good);
                assert_eq!(offset, good + 13);
            }
            other => panic!("{other:?}"),
        }
        match read_all(b"+OK\r\n", Mode::Full).1 {
            Some(ReadError::Format { offset: 0, .. }) => {}
            other => panic!("{other:?}"),
        }
        match read_all(b"*0\r\n", Mode::Full).1 {
            Some(ReadError::Format { .. }) => {}
            other => panic!("{other:?}"),
        }
        match read_all(b"*1\r\n$3\r\nGETxx", Mode::Full).1 {
            Some(ReadError::Format { .. }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decimal_parsing_is_strict() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b"-1"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b" 1"), None);
    }
}
