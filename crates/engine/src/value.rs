//! Values held by the keyspace and the encodings Redis reports for them.

pub use crate::hash::Hash;
pub use crate::list::List;
pub use crate::set::Set;
pub use crate::stream::Stream;
pub use crate::zset::ZSet;

/// Redis keeps strings that are canonical integers as a machine word
/// (`int`), short ones in one allocation with their header (`embstr`) and
/// the rest as growable buffers (`raw`). Keel keeps the same three shapes:
/// the integer form saves memory for counters, and `OBJECT ENCODING` must
/// answer as Redis does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Str {
    Int(i64),
    Embstr(Box<[u8]>),
    Raw(Vec<u8>),
}

/// Longest string Redis stores as `embstr`.
pub const EMBSTR_MAX_LEN: usize = 44;

/// Longest decimal form of an i64, sign included.
pub const I64_MAX_DIGITS: usize = 20;

impl Str {
    /// A string as SET stores it: integer if it is one in canonical form,
    /// else `embstr` or `raw` by length.
    pub fn from_bytes(bytes: &[u8]) -> Str {
        if let Some(i) = parse_canonical_i64(bytes) {
            Str::Int(i)
        } else if bytes.len() <= EMBSTR_MAX_LEN {
            Str::Embstr(bytes.into())
        } else {
            Str::Raw(bytes.to_vec())
        }
    }

    /// A string that was built by mutation (APPEND, SETRANGE, SETBIT):
    /// Redis leaves those `raw`.
    pub fn raw(bytes: Vec<u8>) -> Str {
        Str::Raw(bytes)
    }

    pub fn len(&self) -> usize {
        match self {
            Str::Int(i) => itoa::Buffer::new().format(*i).len(),
            Str::Embstr(b) => b.len(),
            Str::Raw(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes of the string; integers are formatted into `scratch`.
    pub fn as_bytes<'a>(&'a self, scratch: &'a mut itoa::Buffer) -> &'a [u8] {
        match self {
            Str::Int(i) => scratch.format(*i).as_bytes(),
            Str::Embstr(b) => b,
            Str::Raw(v) => v,
        }
    }

    /// Turns the string into a growable buffer for in-place mutation.
    pub fn make_raw(&mut self) -> &mut Vec<u8> {
        if !matches!(self, Str::Raw(_)) {
            let bytes = self.as_bytes(&mut itoa::Buffer::new()).to_vec();
            *self = Str::Raw(bytes);
        }
        match self {
            Str::Raw(v) => v,
            _ => unreachable!("converted to Raw above"),
        }
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Str::Int(_) => "int",
            Str::Embstr(_) => "embstr",
            Str::Raw(_) => "raw",
        }
    }

    /// Heap bytes owned by the string (for memory accounting).
    pub fn heap_size(&self) -> usize {
        match self {
            Str::Int(_) => 0,
            Str::Embstr(b) => b.len(),
            Str::Raw(v) => v.capacity(),
        }
    }
}

/// Parses a decimal integer the way Redis's `string2ll` does: no leading
/// `+`, no leading zeros, no spaces, `-0` rejected, within i64.
pub fn parse_canonical_i64(bytes: &[u8]) -> Option<i64> {
    if bytes.is_empty() || bytes.len() > I64_MAX_DIGITS {
        return None;
    }
    if bytes == b"0" {
        return Some(0);
    }
    let (negative, digits) = match bytes[0] {
        b'-' => (true, &bytes[1..]),
        _ => (false, bytes),
    };
    if digits.is_empty() || digits[0] == b'0' {
        return None;
    }
    let mut value: u64 = 0;
    for &b in digits {
        if !b.is_ascii_digit() {
            return None;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
    }
    if negative {
        if value > i64::MAX as u64 + 1 {
            return None;
        }
        Some((value as i64).wrapping_neg())
    } else {
        i64::try_from(value).ok()
    }
}

/// Every type a key can hold. Each variant is at most 24 bytes, so that a
/// `Value` stays 32 bytes in every dict node; big encodings are boxed.
#[derive(Debug, Clone)]
pub enum Value {
    Str(Str),
    List(List),
    Hash(Hash),
    Set(Set),
    ZSet(ZSet),
    Stream(Box<Stream>),
}

impl Value {
    /// The name TYPE answers.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::List(_) => "list",
            Value::Hash(_) => "hash",
            Value::Set(_) => "set",
            Value::ZSet(_) => "zset",
            Value::Stream(_) => "stream",
        }
    }

    /// The encoding OBJECT ENCODING answers, with Redis 7.0's names.
    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Str(s) => s.encoding(),
            Value::List(l) => l.encoding(),
            Value::Hash(h) => h.encoding(),
            Value::Set(s) => s.encoding(),
            Value::ZSet(z) => z.encoding(),
            Value::Stream(_) => "stream",
        }
    }

    /// Heap bytes owned by the value (memory accounting, lazy-free effort).
    pub fn heap_size(&self) -> usize {
        match self {
            Value::Str(s) => s.heap_size(),
            Value::List(l) => l.heap_size(),
            Value::Hash(h) => h.heap_size(),
            Value::Set(s) => s.heap_size(),
            Value::ZSet(z) => z.heap_size(),
            Value::Stream(s) => std::mem::size_of::<Stream>() + s.heap_size(),
        }
    }

    /// Elements held: 1 for a string, the member count for a collection
    /// (lazy-free effort: about one allocation per element when big).
    pub fn element_count(&self) -> usize {
        match self {
            Value::Str(_) => 1,
            Value::List(l) => l.len(),
            Value::Hash(h) => h.len(),
            Value::Set(s) => s.len(),
            Value::ZSet(z) => z.len(),
            // Freeing walks nodes, groups and their pending entries.
            Value::Stream(s) => s.node_count() + s.groups.values().map(|g| g.pel.len() + g.consumers.len()).sum::<usize>(),
        }
    }
}

/// Where small collections switch to their big encodings: Redis's
/// directives (`hash-max-listpack-entries`, ...) with Redis's defaults.
/// Conversions go one way, small to big, as in Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodingLimits {
    pub hash_max_listpack_entries: usize,
    pub hash_max_listpack_value: usize,
    pub set_max_intset_entries: usize,
    pub zset_max_listpack_entries: usize,
    pub zset_max_listpack_value: usize,
    /// Positive: entries per list node; -1..-5: node size 4, 8, 16, 32, 64 KiB.
    pub list_max_listpack_size: i64,
    pub list_compress_depth: usize,
    /// `stream-node-max-bytes` and `stream-node-max-entries`.
    pub stream_node: crate::stream::NodeLimits,
}

impl Default for EncodingLimits {
    fn default() -> Self {
        EncodingLimits {
            hash_max_listpack_entries: 512,
            hash_max_listpack_value: 64,
            set_max_intset_entries: 512,
            zset_max_listpack_entries: 128,
            zset_max_listpack_value: 64,
            list_max_listpack_size: -2,
            list_compress_depth: 0,
            stream_node: crate::stream::NodeLimits::default(),
        }
    }
}

/// What the keyspace stores per key.
#[derive(Debug, Clone)]
pub struct Entry {
    pub value: Value,
    /// Absolute expiry in Unix milliseconds; `NO_EXPIRY` when the key persists.
    pub expire_at_ms: u64,
    /// Last access, in seconds of the server's LRU clock (OBJECT IDLETIME).
    pub access_s: u32,
    /// Low 32 bits of the journal position of the last write to this key:
    /// a reply that shows this entry may leave only once the journal is
    /// durable there. See [`Entry::lsn`] for why 32 bits are enough.
    lsn_low: u32,
}

pub const NO_EXPIRY: u64 = 0;

impl Entry {
    /// Asks the processor for the first bytes of a string value kept on
    /// the heap (a GET copies them into its reply next), without waiting.
    pub fn prefetch_value(&self) {
        match &self.value {
            Value::Str(Str::Embstr(bytes)) => crate::dict::prefetch(bytes.as_ptr()),
            Value::Str(Str::Raw(bytes)) => crate::dict::prefetch(bytes.as_ptr()),
            _ => {}
        }
    }

    pub fn new(value: Value, access_s: u32) -> Entry {
        Entry { value, expire_at_ms: NO_EXPIRY, access_s, lsn_low: 0 }
    }

    /// Records the journal position of a write to this entry.
    pub fn set_lsn(&mut self, lsn: u64) {
        self.lsn_low = lsn as u32;
    }

    /// The journal position of the last write to this entry, given the
    /// journal's end (`appended`, which is at or past it). Keeping 32 bits
    /// saves 8 bytes on every key: the answer is the latest position at or
    /// below `appended` with the stored low bits, which is the true one
    /// unless the write is more than 4 GiB of journal old, and never below
    /// it, so a reply may wait for a later position than it needs but
    /// never leaves before its data is durable.
    pub fn lsn(&self, appended: u64) -> u64 {
        appended.saturating_sub(u64::from((appended as u32).wrapping_sub(self.lsn_low)))
    }

    pub fn has_expiry(&self) -> bool {
        self.expire_at_ms != NO_EXPIRY
    }

    pub fn is_expired(&self, now_ms: u64) -> bool {
        self.has_expiry() && self.expire_at_ms <= now_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lsn_reads_back_at_or_above_the_true_one() {
        let mut e = Entry::new(Value::Str(Str::Int(1)), 0);
        for (lsn, appended) in [(0, 0), (5, 9), (1 << 32, 1 << 32), ((7 << 32) + 3, (7 << 32) + 100), (3, 1 << 33)] {
            e.set_lsn(lsn);
            let read = e.lsn(appended);
            assert!(read >= lsn && read <= appended, "{lsn} at {appended}: {read}");
            if appended - lsn < 1 << 32 {
                assert_eq!(read, lsn);
            }
        }
    }

    #[test]
    fn values_stay_32_bytes() {
        assert!(std::mem::size_of::<Value>() <= 32, "{}", std::mem::size_of::<Value>());
        assert!(std::mem::size_of::<Entry>() <= 48, "{}", std::mem::size_of::<Entry>());
    }

    #[test]
    fn canonical_integers_match_string2ll() {
        for ok in ["0", "1", "-1", "9223372036854775807", "-9223372036854775808", "123"] {
            assert_eq!(parse_canonical_i64(ok.as_bytes()), ok.parse().ok(), "{ok}");
        }
        for bad in ["", "-", "-0", "01", "+1", " 1", "1 ", "9223372036854775808", "1.0", "0x10"] {
            assert_eq!(parse_canonical_i64(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn set_chooses_redis_encodings() {
        assert_eq!(Str::from_bytes(b"12345").encoding(), "int");
        assert_eq!(Str::from_bytes(b"012345").encoding(), "embstr");
        assert_eq!(Str::from_bytes(&[b'a'; 44]).encoding(), "embstr");
        assert_eq!(Str::from_bytes(&[b'a'; 45]).encoding(), "raw");
    }

    #[test]
    fn integers_read_back_as_their_digits() {
        let s = Str::from_bytes(b"-42");
        assert_eq!(s.as_bytes(&mut itoa::Buffer::new()), b"-42");
        assert_eq!(s.len(), 3);
        let mut m = s.clone();
        m.make_raw().push(b'x');
        assert_eq!(m, Str::Raw(b"-42x".to_vec()));
    }
}
