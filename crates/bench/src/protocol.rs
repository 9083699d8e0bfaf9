//! Wire formats: request encoders that append to a connection's reusable
//! write buffer, and reply scanners that find where one reply ends without
//! building it.
//!
//! Requests (RESP, a multi-bulk array per command):
//!   `*<n>\r\n` then per argument `$<len>\r\n<bytes>\r\n`.
//! Memcached text: `set <key> 0 <exptime> <len>\r\n<data>\r\n`,
//!   `get <key> [<key> ...]\r\n`.
//!
//! A load generator only needs to know, for each reply, how many bytes it
//! spans, whether it is an error, and for reads whether it hit. The scanners
//! therefore skip bulk payloads by length and never copy them; a reply split
//! across reads is reported `Incomplete` and rescanned when more bytes come.

use crate::config::Protocol;

/// What the scanner learned about one complete reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    /// Bytes the reply spans in the buffer.
    pub len: usize,
    /// An error reply (`-ERR ...`, `!` in RESP3, memcached's `*ERROR`).
    pub error: bool,
    /// Non-nil values: 1 for a bulk string, the non-nil elements of an
    /// array (MGET), the VALUE blocks of a memcached get.
    pub hits: u32,
    /// A RESP3 push message: out of band, not the answer to a request.
    pub push: bool,
}

/// Result of scanning the start of a buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scan {
    Incomplete,
    Reply(Reply),
    /// The bytes are not the protocol: the connection cannot continue.
    Bad(String),
}

/// Nesting bound for RESP aggregates: deeper replies are a protocol error
/// rather than a stack overflow.
const DEPTH_MAX: u32 = 64;

// ---------------------------------------------------------------- encoders

/// Appends `*n\r\n`.
#[inline]
pub fn put_array(buf: &mut Vec<u8>, n: usize) {
    buf.push(b'*');
    buf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// Appends `$len\r\n` (the payload follows separately).
#[inline]
pub fn put_bulk_header(buf: &mut Vec<u8>, len: usize) {
    buf.push(b'$');
    buf.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
    buf.extend_from_slice(b"\r\n");
}

/// Appends one bulk string.
#[inline]
pub fn put_bulk(buf: &mut Vec<u8>, bytes: &[u8]) {
    put_bulk_header(buf, bytes.len());
    buf.extend_from_slice(bytes);
    buf.extend_from_slice(b"\r\n");
}

/// A key is `<prefix><decimal index>`: formatted on the stack, never allocated.
#[derive(Clone, Copy)]
pub struct Key<'a> {
    pub prefix: &'a [u8],
    pub index: u64,
}

impl Key<'_> {
    #[inline]
    pub fn write(&self, buf: &mut Vec<u8>) {
        buf.extend_from_slice(self.prefix);
        buf.extend_from_slice(itoa::Buffer::new().format(self.index).as_bytes());
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.prefix.len() + digits(self.index)
    }
}

#[inline]
pub fn digits(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 10 {
        v /= 10;
        n += 1;
    }
    n
}

#[inline]
fn put_key_bulk(buf: &mut Vec<u8>, key: Key<'_>) {
    put_bulk_header(buf, key.len());
    key.write(buf);
    buf.extend_from_slice(b"\r\n");
}

/// SET (or SETEX with an expiry) / memcached `set`.
pub fn encode_set(p: Protocol, buf: &mut Vec<u8>, key: Key<'_>, value: &[u8], expiry: u32) {
    if p == Protocol::MemcacheText {
        buf.extend_from_slice(b"set ");
        key.write(buf);
        buf.extend_from_slice(b" 0 ");
        buf.extend_from_slice(itoa::Buffer::new().format(expiry).as_bytes());
        buf.push(b' ');
        buf.extend_from_slice(itoa::Buffer::new().format(value.len()).as_bytes());
        buf.extend_from_slice(b"\r\n");
        buf.extend_from_slice(value);
        buf.extend_from_slice(b"\r\n");
        return;
    }
    if expiry == 0 {
        buf.extend_from_slice(b"*3\r\n$3\r\nSET\r\n");
        put_key_bulk(buf, key);
    } else {
        buf.extend_from_slice(b"*4\r\n$5\r\nSETEX\r\n");
        put_key_bulk(buf, key);
        put_bulk(buf, itoa::Buffer::new().format(expiry).as_bytes());
    }
    put_bulk(buf, value);
}

/// GET / memcached `get`.
pub fn encode_get(p: Protocol, buf: &mut Vec<u8>, key: Key<'_>) {
    if p == Protocol::MemcacheText {
        buf.extend_from_slice(b"get ");
        key.write(buf);
        buf.extend_from_slice(b"\r\n");
    } else {
        buf.extend_from_slice(b"*2\r\n$3\r\nGET\r\n");
        put_key_bulk(buf, key);
    }
}

/// MGET / memcached multi-key `get`, keys from `prefix` and `indices`.
pub fn encode_mget(p: Protocol, buf: &mut Vec<u8>, prefix: &[u8], indices: &[u64]) {
    if p == Protocol::MemcacheText {
        buf.extend_from_slice(b"get");
        for &index in indices {
            buf.push(b' ');
            Key { prefix, index }.write(buf);
        }
        buf.extend_from_slice(b"\r\n");
    } else {
        put_array(buf, indices.len() + 1);
        buf.extend_from_slice(b"$4\r\nMGET\r\n");
        for &index in indices {
            put_key_bulk(buf, Key { prefix, index });
        }
    }
}

/// The connection's opening commands (HELLO, AUTH, SELECT); returns how
/// many replies to expect.
pub fn encode_handshake(p: Protocol, buf: &mut Vec<u8>, auth: Option<&(Option<String>, String)>, db: Option<u32>) -> usize {
    let mut n = 0;
    match p {
        Protocol::MemcacheText => return 0,
        Protocol::Resp2 | Protocol::Resp3 => {
            let ver: &[u8] = if p == Protocol::Resp3 { b"3" } else { b"2" };
            match auth {
                Some((user, pass)) => {
                    put_array(buf, 5);
                    put_bulk(buf, b"HELLO");
                    put_bulk(buf, ver);
                    put_bulk(buf, b"AUTH");
                    put_bulk(buf, user.as_deref().unwrap_or("default").as_bytes());
                    put_bulk(buf, pass.as_bytes());
                }
                None => {
                    put_array(buf, 2);
                    put_bulk(buf, b"HELLO");
                    put_bulk(buf, ver);
                }
            }
            n += 1;
        }
        Protocol::Redis => {
            if let Some((user, pass)) = auth {
                match user {
                    Some(u) => {
                        put_array(buf, 3);
                        put_bulk(buf, b"AUTH");
                        put_bulk(buf, u.as_bytes());
                    }
                    None => {
                        put_array(buf, 2);
                        put_bulk(buf, b"AUTH");
                    }
                }
                put_bulk(buf, pass.as_bytes());
                n += 1;
            }
        }
    }
    if let Some(db) = db {
        put_array(buf, 2);
        put_bulk(buf, b"SELECT");
        put_bulk(buf, itoa::Buffer::new().format(db).as_bytes());
        n += 1;
    }
    n
}

// ---------------------------------------------------------------- scanners

/// Scans one reply of protocol `p` at the start of `buf`.
#[inline]
pub fn scan(p: Protocol, buf: &[u8]) -> Scan {
    if p == Protocol::MemcacheText {
        scan_memcache(buf)
    } else {
        scan_resp(buf)
    }
}

/// Finds the `\r\n` that ends the line starting at `from`; returns the
/// index of `\r`.
#[inline]
fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    let rel = buf.get(from..)?.iter().position(|&b| b == b'\n')?;
    let nl = from + rel;
    if nl > from && buf[nl - 1] == b'\r' {
        Some(nl - 1)
    } else {
        // A bare \n: treat as the end anyway (lenient, like redis-cli).
        Some(nl)
    }
}

fn parse_int(s: &[u8]) -> Option<i64> {
    let (neg, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(d - b'0');
    }
    Some(if neg { -v } else { v })
}

/// Kinds of RESP value, as far as counting goes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Val {
    Nil,
    Error,
    Value,
}

/// Scans one RESP2/RESP3 reply.
pub fn scan_resp(buf: &[u8]) -> Scan {
    let mut pos = 0;
    // RESP3 attributes precede the value they describe: skip them.
    loop {
        if buf.get(pos).is_none() {
            return Scan::Incomplete;
        }
        if buf.get(pos) == Some(&b'|') {
            match skip_value(buf, pos, 0) {
                Ok(Some((next, _, _))) => pos = next,
                Ok(None) => return Scan::Incomplete,
                Err(e) => return Scan::Bad(e),
            }
            continue;
        }
        break;
    }
    let push = buf.get(pos) == Some(&b'>');
    match skip_value(buf, pos, 0) {
        Ok(Some((end, val, hits))) => Scan::Reply(Reply { len: end, error: val == Val::Error, hits, push }),
        Ok(None) => Scan::Incomplete,
        Err(e) => Scan::Bad(e),
    }
}

/// Skips one value at `pos`; returns (end, kind, non-nil direct children
/// or 1 for a non-nil scalar).
fn skip_value(buf: &[u8], pos: usize, depth: u32) -> Result<Option<(usize, Val, u32)>, String> {
    if depth > DEPTH_MAX {
        return Err("reply nested too deeply".into());
    }
    let Some(&t) = buf.get(pos) else { return Ok(None) };
    let Some(cr) = line_end(buf, pos + 1) else { return Ok(None) };
    let after_line = if buf.get(cr) == Some(&b'\r') { cr + 2 } else { cr + 1 };
    if after_line > buf.len() {
        return Ok(None);
    }
    let line = &buf[pos + 1..cr];
    match t {
        b'+' | b':' | b',' | b'(' | b'#' => Ok(Some((after_line, Val::Value, 1))),
        b'_' => Ok(Some((after_line, Val::Nil, 0))),
        b'-' => Ok(Some((after_line, Val::Error, 0))),
        b'$' | b'=' | b'!' => {
            let n = parse_int(line).ok_or_else(|| bad_line(buf, pos))?;
            if n < 0 {
                return Ok(Some((after_line, Val::Nil, 0)));
            }
            let end = after_line + n as usize + 2;
            if end > buf.len() {
                return Ok(None);
            }
            if t == b'!' {
                Ok(Some((end, Val::Error, 0)))
            } else {
                Ok(Some((end, Val::Value, 1)))
            }
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = parse_int(line).ok_or_else(|| bad_line(buf, pos))?;
            if n < 0 {
                return Ok(Some((after_line, Val::Nil, 0)));
            }
            let elems = if t == b'%' || t == b'|' { n * 2 } else { n };
            let mut p = after_line;
            let mut hits = 0u32;
            for _ in 0..elems {
                match skip_value(buf, p, depth + 1)? {
                    Some((next, v, _)) => {
                        if v == Val::Value {
                            hits += 1;
                        }
                        p = next;
                    }
                    None => return Ok(None),
                }
            }
            Ok(Some((p, Val::Value, hits)))
        }
        _ => Err(bad_line(buf, pos)),
    }
}

fn bad_line(buf: &[u8], pos: usize) -> String {
    let end = (pos + 40).min(buf.len());
    format!("protocol error: unexpected reply {:?}", String::from_utf8_lossy(&buf[pos..end]))
}

/// Scans one memcached text-protocol reply.
pub fn scan_memcache(buf: &[u8]) -> Scan {
    let Some(cr) = line_end(buf, 0) else { return Scan::Incomplete };
    let first = &buf[..cr];
    let next_line = |cr: usize| if buf.get(cr) == Some(&b'\r') { cr + 2 } else { cr + 1 };
    if first.starts_with(b"VALUE ") {
        let mut pos = 0;
        let mut hits = 0;
        loop {
            let Some(cr) = line_end(buf, pos) else { return Scan::Incomplete };
            let line = &buf[pos..cr];
            let after = next_line(cr);
            if line == b"END" {
                return Scan::Reply(Reply { len: after, error: false, hits, push: false });
            }
            if !line.starts_with(b"VALUE ") {
                return Scan::Bad(bad_line(buf, pos));
            }
            // VALUE <key> <flags> <bytes> [<cas>]
            let bytes = line.split(|&b| b == b' ').nth(3).and_then(parse_int);
            let Some(bytes) = bytes.filter(|b| *b >= 0) else { return Scan::Bad(bad_line(buf, pos)) };
            let end = after + bytes as usize + 2;
            if end > buf.len() {
                return Scan::Incomplete;
            }
            hits += 1;
            pos = end;
        }
    }
    let len = next_line(cr);
    let error = first == b"ERROR" || first.starts_with(b"CLIENT_ERROR") || first.starts_with(b"SERVER_ERROR");
    Scan::Reply(Reply { len, error, hits: 0, push: false })
}

/// The first line of an error reply, for messages.
pub fn error_text(buf: &[u8]) -> String {
    let end = line_end(buf, 0).unwrap_or(buf.len()).min(200);
    let start = usize::from(matches!(buf.first(), Some(b'-') | Some(b'!')));
    String::from_utf8_lossy(&buf[start.min(end)..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(len: usize, error: bool, hits: u32) -> Scan {
        Scan::Reply(Reply { len, error, hits, push: false })
    }

    #[test]
    fn resp_scalars() {
        assert_eq!(scan_resp(b"+OK\r\n"), reply(5, false, 1));
        assert_eq!(scan_resp(b"-ERR no\r\n+OK\r\n"), reply(9, true, 0));
        assert_eq!(scan_resp(b":12\r\n"), reply(5, false, 1));
        assert_eq!(scan_resp(b"$-1\r\n"), reply(5, false, 0));
        assert_eq!(scan_resp(b"_\r\n"), reply(3, false, 0));
        assert_eq!(scan_resp(b"$3\r\nabc\r\n"), reply(9, false, 1));
        assert_eq!(scan_resp(b"!5\r\nERR x\r\n"), reply(11, true, 0));
        assert_eq!(scan_resp(b",1.5\r\n#t\r\n"), reply(6, false, 1));
    }

    #[test]
    fn resp_incomplete_at_every_split() {
        let full: &[u8] = b"*3\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n+x\r\n";
        for cut in 0..full.len() {
            assert_eq!(scan_resp(&full[..cut]), Scan::Incomplete, "cut {cut}");
        }
        assert_eq!(scan_resp(full), reply(full.len(), false, 2));
    }

    #[test]
    fn resp3_aggregates_push_and_attributes() {
        assert_eq!(scan_resp(b"%1\r\n+a\r\n:1\r\n"), reply(12, false, 2));
        let p = b">2\r\n+message\r\n+x\r\n";
        assert_eq!(scan_resp(p), Scan::Reply(Reply { len: p.len(), error: false, hits: 2, push: true }));
        let a = b"|1\r\n+k\r\n+v\r\n$1\r\nz\r\n";
        assert_eq!(scan_resp(a), reply(a.len(), false, 1));
    }

    #[test]
    fn resp_garbage_is_bad() {
        assert!(matches!(scan_resp(b"HTTP/1.1 400\r\n"), Scan::Bad(_)));
        assert!(matches!(scan_resp(b"$x\r\n"), Scan::Bad(_)));
        let deep = "*1\r\n".repeat(100);
        assert!(matches!(scan_resp(deep.as_bytes()), Scan::Bad(_) | Scan::Incomplete));
    }

    #[test]
    fn memcache_replies() {
        assert_eq!(scan_memcache(b"STORED\r\n"), reply(8, false, 0));
        assert_eq!(scan_memcache(b"END\r\n"), reply(5, false, 0));
        let two = b"VALUE a 0 3\r\nabc\r\nVALUE b 0 1\r\nz\r\nEND\r\n";
        assert_eq!(scan_memcache(two), reply(two.len(), false, 2));
        for cut in 0..two.len() {
            assert_eq!(scan_memcache(&two[..cut]), Scan::Incomplete, "cut {cut}");
        }
        assert_eq!(scan_memcache(b"SERVER_ERROR out of memory\r\n"), reply(28, true, 0));
        assert_eq!(scan_memcache(b"ERROR\r\n"), reply(7, true, 0));
        assert!(matches!(scan_memcache(b"VALUE a 0 x\r\n"), Scan::Bad(_)));
    }

    #[test]
    fn encoders() {
        let mut b = Vec::new();
        let k = Key { prefix: b"memtier-", index: 42 };
        assert_eq!(k.len(), 10);
        encode_set(Protocol::Redis, &mut b, k, b"xyz", 0);
        assert_eq!(b, b"*3\r\n$3\r\nSET\r\n$10\r\nmemtier-42\r\n$3\r\nxyz\r\n");
        b.clear();
        encode_set(Protocol::Redis, &mut b, k, b"v", 10);
        assert_eq!(b, b"*4\r\n$5\r\nSETEX\r\n$10\r\nmemtier-42\r\n$2\r\n10\r\n$1\r\nv\r\n");
        b.clear();
        encode_get(Protocol::MemcacheText, &mut b, k);
        assert_eq!(b, b"get memtier-42\r\n");
        b.clear();
        encode_set(Protocol::MemcacheText, &mut b, k, b"ab", 5);
        assert_eq!(b, b"set memtier-42 0 5 2\r\nab\r\n");
        b.clear();
        encode_mget(Protocol::Redis, &mut b, b"k", &[1, 22]);
        assert_eq!(b, b"*3\r\n$4\r\nMGET\r\n$2\r\nk1\r\n$3\r\nk22\r\n");
        b.clear();
        let n = encode_handshake(Protocol::Resp3, &mut b, Some(&(None, "pw".into())), Some(2));
        assert_eq!(n, 2);
        assert!(b.starts_with(b"*5\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$2\r\npw\r\n*2\r\n$6\r\nSELECT"));
        assert_eq!(digits(0), 1);
        assert_eq!(digits(10_000_000), 8);
    }
}
