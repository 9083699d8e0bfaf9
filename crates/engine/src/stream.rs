//! Streams: entries by ID, consumer groups and their pending entries, in
//! Redis 7.0's layout.
//!
//! # Representation
//!
//! The entries live in nodes, each a listpack in Redis's exact byte
//! format (`lp`), keyed by its master ID in a `BTreeMap`, just as Redis
//! keeps them in a radix tree (`t_stream.c`):
//!
//! ```text
//! node   = master-entry entry...
//! master = count deleted num-fields field... 0
//! entry  = flags ms-diff seq-diff [num-fields field...] value... lp-count
//! ```
//!
//! `flags` says whether the entry is deleted (XDEL, exact trims mark, they
//! never move bytes) and whether its fields are the master's (then only
//! the values are stored); the IDs are deltas from the master ID, and
//! `lp-count` (the entry's element count) lets a walk go backwards. Why
//! this rather than one map entry per stream entry:
//!
//! - Memory: a node of 100 small entries is one allocation of a few
//!   kilobytes, where a `BTreeMap` of entries costs a 32-byte slot plus an
//!   allocation per entry.
//! - XADD appends at the tail node (found in O(log nodes)), and a range
//!   read seeks the node holding its start and walks bytes.
//! - Redis's behaviour depends on the nodes: `MAXLEN ~`/`MINID ~` trim
//!   whole nodes only, and a node fills at `stream-node-max-entries` or
//!   `stream-node-max-bytes` of listpack. Keeping Redis's nodes makes
//!   approximate trims answer exactly as Redis's, and RDB's
//!   `STREAM_LISTPACKS` nodes are these bytes, written and loaded as they
//!   are.
//!
//! Consumer groups keep their pending entries list (PEL) as a map from ID
//! to the owning consumer, delivery time and count; each consumer keeps the
//! IDs it owns. Maps are ordered, as Redis's radix trees are, because the
//! PEL is read in ID order (XPENDING, XAUTOCLAIM) and groups and consumers
//! are listed in name order (XINFO).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::value::parse_canonical_i64;

/// An entry ID: milliseconds and a sequence number, ordered as pairs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The next ID, or None past the last possible one (`streamIncrID`).
    pub fn incr(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId::new(ms + 1, 0)),
            (ms, seq) => Some(StreamId::new(ms, seq + 1)),
        }
    }

    /// The previous ID, or None before 0-0 (`streamDecrID`).
    pub fn decr(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId::new(ms - 1, u64::MAX)),
            (ms, seq) => Some(StreamId::new(ms, seq - 1)),
        }
    }

    /// The 16 big-endian bytes Redis's radix tree and RDB key a node by.
    pub fn to_be_bytes(self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.ms.to_be_bytes());
        out[8..].copy_from_slice(&self.seq.to_be_bytes());
        out
    }

    pub fn from_be_bytes(bytes: &[u8; 16]) -> StreamId {
        let (ms, seq) = bytes.split_at(8);
        StreamId::new(u64::from_be_bytes(ms.try_into().expect("8 bytes")), u64::from_be_bytes(seq.try_into().expect("8 bytes")))
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// Redis's listpack format, the part streams need: appending strings and
/// integers, reading elements forwards, replacing one in place.
///
/// ```text
/// listpack = total-bytes:u32le count:u16le element... 0xFF
/// element  = encoding [data] backlen
/// ```
///
/// A string that is a canonical 64-bit integer is stored as an integer
/// (7-bit, 13-bit, 16, 24, 32 or 64-bit forms), others with a 6-bit,
/// 12-bit or 32-bit length; `backlen` is the size of encoding and data,
/// 7 bits a byte, readable from its end. `count` saturates at 65535.
pub mod lp {
    pub const HEADER: usize = 6;
    pub const EOF: u8 = 0xFF;
    const COUNT_UNKNOWN: u16 = u16::MAX;

    /// An element as read: listpacks keep integers as integers.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Elem<'a> {
        Int(i64),
        Str(&'a [u8]),
    }

    impl Elem<'_> {
        pub fn to_vec(self) -> Vec<u8> {
            match self {
                Elem::Int(i) => itoa::Buffer::new().format(i).as_bytes().to_vec(),
                Elem::Str(s) => s.to_vec(),
            }
        }

        /// The element as an integer: ints, and strings that are integers.
        pub fn as_int(self) -> Option<i64> {
            match self {
                Elem::Int(i) => Some(i),
                Elem::Str(s) => super::parse_canonical_i64(s),
            }
        }

        /// Whether the element reads back as `bytes`.
        pub fn eq_bytes(self, bytes: &[u8]) -> bool {
            match self {
                Elem::Int(i) => itoa::Buffer::new().format(i).as_bytes() == bytes,
                Elem::Str(s) => s == bytes,
            }
        }
    }

    /// An empty listpack.
    pub fn new() -> Vec<u8> {
        let mut lp = Vec::with_capacity(64);
        lp.extend_from_slice(&(HEADER as u32 + 1).to_le_bytes());
        lp.extend_from_slice(&0u16.to_le_bytes());
        lp.push(EOF);
        lp
    }

    /// The encoding and data of an integer.
    fn encode_int(v: i64, out: &mut Vec<u8>) {
        if (0..=127).contains(&v) {
            out.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let u = if v < 0 { (1i64 << 13) + v } else { v } as u64;
            out.push(0xC0 | (u >> 8) as u8);
            out.push(u as u8);
        } else if (-32768..=32767).contains(&v) {
            out.push(0xF1);
            out.extend_from_slice(&(v as i16).to_le_bytes());
        } else if (-8_388_608..=8_388_607).contains(&v) {
            out.push(0xF2);
            out.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if i32::try_from(v).is_ok() {
            out.push(0xF3);
            out.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            out.push(0xF4);
            out.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// The encoding and data of a string (an integer's if it is one).
    fn encode_str(s: &[u8], out: &mut Vec<u8>) {
        if let Some(v) = super::parse_canonical_i64(s) {
            return encode_int(v, out);
        }
        let len = s.len();
        if len < 64 {
            out.push(0x80 | len as u8);
        } else if len < 4096 {
            out.push(0xE0 | (len >> 8) as u8);
            out.push(len as u8);
        } else {
            out.push(0xF0);
            out.extend_from_slice(&(len as u32).to_le_bytes());
        }
        out.extend_from_slice(s);
    }

    fn backlen_size(l: usize) -> usize {
        match l {
            0..=127 => 1,
            128..=16382 => 2,
            16383..=2_097_150 => 3,
            2_097_151..=268_435_454 => 4,
            _ => 5,
        }
    }

    fn push_backlen(l: usize, out: &mut Vec<u8>) {
        let n = backlen_size(l);
        for i in (0..n).rev() {
            let b = ((l >> (7 * i)) & 127) as u8;
            out.push(if i + 1 == n { b } else { b | 128 });
        }
    }

    /// One whole element (encoding, data, backlen).
    fn element(encode: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut e = Vec::with_capacity(16);
        encode(&mut e);
        let l = e.len();
        push_backlen(l, &mut e);
        e
    }

    /// The size a string takes as an element.
    pub fn str_size(s: &[u8]) -> usize {
        let mut e = Vec::new();
        encode_str(s, &mut e);
        e.len() + backlen_size(e.len())
    }

    fn set_header(lp: &mut [u8], added: isize) {
        let total = lp.len() as u32;
        lp[..4].copy_from_slice(&total.to_le_bytes());
        let count = u16::from_le_bytes([lp[4], lp[5]]);
        if count != COUNT_UNKNOWN {
            let n = count as isize + added;
            let n = if n >= COUNT_UNKNOWN as isize { COUNT_UNKNOWN } else { n as u16 };
            lp[4..6].copy_from_slice(&n.to_le_bytes());
        }
    }

    fn append(lp: &mut Vec<u8>, e: &[u8]) {
        lp.pop();
        lp.extend_from_slice(e);
        lp.push(EOF);
        set_header(lp, 1);
    }

    pub fn append_int(lp: &mut Vec<u8>, v: i64) {
        append(lp, &element(|e| encode_int(v, e)));
    }

    pub fn append_str(lp: &mut Vec<u8>, s: &[u8]) {
        append(lp, &element(|e| encode_str(s, e)));
    }

    /// Replaces the integer element at `off` with `v`; returns the change
    /// in size, for offsets after it.
    pub fn replace_int(lp: &mut Vec<u8>, off: usize, v: i64) -> isize {
        let Some((_, next)) = read(lp, off) else { return 0 };
        let e = element(|e| encode_int(v, e));
        let delta = e.len() as isize - (next - off) as isize;
        lp.splice(off..next, e);
        set_header(lp, 0);
        delta
    }

    /// The element at `off` and the offset after it; None at the end or
    /// on bytes that are not a listpack element (a loaded node is checked
    /// with `valid` before use, so only untrusted input meets that).
    pub fn read(lp: &[u8], off: usize) -> Option<(Elem<'_>, usize)> {
        let b = *lp.get(off)?;
        let bytes = |from: usize, n: usize| lp.get(from..from.checked_add(n)?);
        let (elem, len) = if b & 0x80 == 0 {
            (Elem::Int(i64::from(b)), 1)
        } else if b & 0xC0 == 0x80 {
            let n = usize::from(b & 0x3F);
            (Elem::Str(bytes(off + 1, n)?), 1 + n)
        } else if b & 0xE0 == 0xC0 {
            let u = (u64::from(b & 0x1F) << 8) | u64::from(*lp.get(off + 1)?);
            let v = if u >= 1 << 12 { u as i64 - (1 << 13) } else { u as i64 };
            (Elem::Int(v), 2)
        } else if b & 0xF0 == 0xE0 {
            let n = (usize::from(b & 0x0F) << 8) | usize::from(*lp.get(off + 1)?);
            (Elem::Str(bytes(off + 2, n)?), 2 + n)
        } else {
            match b {
                0xF0 => {
                    let n = u32::from_le_bytes(bytes(off + 1, 4)?.try_into().ok()?) as usize;
                    (Elem::Str(bytes(off + 5, n)?), 5 + n)
                }
                0xF1 => (Elem::Int(i64::from(i16::from_le_bytes(bytes(off + 1, 2)?.try_into().ok()?))), 3),
                0xF2 => {
                    let d = bytes(off + 1, 3)?;
                    (Elem::Int(i64::from(i32::from_le_bytes([0, d[0], d[1], d[2]]) >> 8)), 4)
                }
                0xF3 => (Elem::Int(i64::from(i32::from_le_bytes(bytes(off + 1, 4)?.try_into().ok()?))), 5),
                0xF4 => (Elem::Int(i64::from_le_bytes(bytes(off + 1, 8)?.try_into().ok()?)), 9),
                _ => return None,
            }
        };
        let next = off + len + backlen_size(len);
        (next < lp.len()).then_some((elem, next))
    }

    /// The size of the element that ends at `end`, from its backlen.
    pub fn element_size_before(lp: &[u8], end: usize) -> Option<usize> {
        let (mut l, mut n) = (0usize, 0usize);
        loop {
            let b = *lp.get(end.checked_sub(n + 1)?)?;
            l |= usize::from(b & 127) << (7 * n);
            n += 1;
            if b & 128 == 0 {
                break;
            }
            if n == 5 {
                return None;
            }
        }
        (backlen_size(l) == n).then_some(l + n)
    }

    /// Checks the header, the terminator and every element's backlen;
    /// returns the element count.
    pub fn valid(lp: &[u8]) -> Option<usize> {
        if lp.len() < HEADER + 1 || u32::from_le_bytes(lp[..4].try_into().ok()?) as usize != lp.len() || lp[lp.len() - 1] != EOF {
            return None;
        }
        let (mut off, mut n) = (HEADER, 0usize);
        while off < lp.len() - 1 {
            let (_, next) = read(lp, off)?;
            // The backlen must say the element's size, for backward walks.
            (element_size_before(lp, next)? == next - off).then_some(())?;
            off = next;
            n += 1;
        }
        let count = u16::from_le_bytes([lp[4], lp[5]]);
        (count == COUNT_UNKNOWN || usize::from(count) == n).then_some(n)
    }
}

use lp::Elem;

const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;

/// A stream entry as read: its ID and its fields and values, alternating.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEntry {
    pub id: StreamId,
    pub fields: Vec<Vec<u8>>,
}

/// One entry's place in a node, as a walk finds it.
#[derive(Debug, Clone, Copy)]
struct RawEntry {
    id: StreamId,
    flags: i64,
    flags_off: usize,
    /// First field (or value, with the master's fields) and their count.
    fields_off: usize,
    num_fields: usize,
    /// Offset after the entry's lp-count.
    end: usize,
}

/// A node's master entry, read.
#[derive(Debug, Clone)]
struct Master<'a> {
    live: i64,
    deleted: i64,
    fields: Vec<Elem<'a>>,
    /// Offset of the first entry.
    entries_off: usize,
}

fn master(lp: &[u8]) -> Option<Master<'_>> {
    let (live, off) = lp::read(lp, lp::HEADER)?;
    let (deleted, off) = lp::read(lp, off)?;
    let (n, mut off) = lp::read(lp, off)?;
    let n = usize::try_from(n.as_int()?).ok()?;
    let mut fields = Vec::with_capacity(n.min(64));
    for _ in 0..n {
        let (f, next) = lp::read(lp, off)?;
        fields.push(f);
        off = next;
    }
    let (zero, entries_off) = lp::read(lp, off)?;
    (zero.as_int() == Some(0)).then_some(())?;
    Some(Master { live: live.as_int()?, deleted: deleted.as_int()?, fields, entries_off })
}

/// The entry at `off` of a node with master ID `master_id`, or None at the
/// node's end (or on malformed bytes).
fn raw_entry(lp: &[u8], off: usize, master_id: StreamId, master_fields: usize) -> Option<RawEntry> {
    let flags_off = off;
    let (flags, off) = lp::read(lp, off)?;
    let flags = flags.as_int()?;
    let (ms, off) = lp::read(lp, off)?;
    let (seq, mut off) = lp::read(lp, off)?;
    let id = StreamId::new(master_id.ms.wrapping_add(ms.as_int()? as u64), master_id.seq.wrapping_add(seq.as_int()? as u64));
    let (num_fields, elements) = if flags & FLAG_SAMEFIELDS != 0 {
        (master_fields, master_fields)
    } else {
        let (n, next) = lp::read(lp, off)?;
        off = next;
        let n = usize::try_from(n.as_int()?).ok()?;
        (n, n.checked_mul(2)?)
    };
    let fields_off = off;
    for _ in 0..elements {
        off = lp::read(lp, off)?.1;
    }
    let (_count, end) = lp::read(lp, off)?;
    Some(RawEntry { id, flags, flags_off, fields_off, num_fields, end })
}

/// Walks a node's entries, deleted ones included.
fn node_entries(lp: &[u8], master_id: StreamId) -> Vec<RawEntry> {
    let Some(m) = master(lp) else { return Vec::new() };
    let mut out = Vec::with_capacity((m.live + m.deleted).clamp(0, 1024) as usize);
    let mut off = m.entries_off;
    while off < lp.len() - 1 {
        let Some(e) = raw_entry(lp, off, master_id, m.fields.len()) else { break };
        off = e.end;
        out.push(e);
    }
    out
}

/// The fields and values of `e`, alternating.
fn entry_fields(lp: &[u8], m: &Master<'_>, e: &RawEntry) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(e.num_fields * 2);
    let mut off = e.fields_off;
    let same = e.flags & FLAG_SAMEFIELDS != 0;
    for i in 0..e.num_fields {
        if same {
            out.push(m.fields[i].to_vec());
        } else {
            let (f, next) = lp::read(lp, off).expect("walked before");
            out.push(f.to_vec());
            off = next;
        }
        let (v, next) = lp::read(lp, off).expect("walked before");
        out.push(v.to_vec());
        off = next;
    }
    out
}

/// How XADD and XTRIM trim (`streamAddTrimArgs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    MaxLen(u64),
    MinId(StreamId),
}

/// Where a node fills (`stream-node-max-bytes`, `stream-node-max-entries`;
/// 0 means no bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    pub max_bytes: usize,
    pub max_entries: usize,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits { max_bytes: 4096, max_entries: 100 }
    }
}

/// The largest listpack Redis lets a node grow to (`STREAM_LISTPACK_MAX_SIZE`).
pub const LISTPACK_MAX_SIZE: usize = 1 << 30;

/// Why XADD failed to append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddError {
    /// The ID is not above the stream's last one.
    NotGreater,
    /// The fields and values pass what a listpack can hold.
    TooLarge,
}

/// An entry a consumer group delivered and has not had acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub consumer: Vec<u8>,
    /// Unix ms of the last delivery.
    pub delivery_time: u64,
    pub delivery_count: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Consumer {
    /// Unix ms of the consumer's last read or claim.
    pub seen_time: u64,
    /// The IDs of the group's PEL that this consumer owns.
    pub pel: BTreeSet<StreamId>,
}

/// `SCG_INVALID_ENTRIES_READ`: the group's count of entries read is unknown.
pub const ENTRIES_READ_UNKNOWN: i64 = -1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub last_id: StreamId,
    /// Entries the group has read, or `ENTRIES_READ_UNKNOWN`.
    pub entries_read: i64,
    pub pel: BTreeMap<StreamId, Pending>,
    pub consumers: BTreeMap<Vec<u8>, Consumer>,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group { last_id, entries_read, pel: BTreeMap::new(), consumers: BTreeMap::new() }
    }
}

/// A stream value.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    /// Nodes by master ID (see the module doc).
    nodes: BTreeMap<StreamId, Vec<u8>>,
    /// Live entries.
    length: u64,
    pub last_id: StreamId,
    /// The first live entry's ID (0-0 when empty).
    pub first_id: StreamId,
    pub max_deleted_entry_id: StreamId,
    /// Entries ever added.
    pub entries_added: u64,
    pub groups: BTreeMap<Vec<u8>, Group>,
}

impl Stream {
    pub fn new() -> Stream {
        Stream::default()
    }

    pub fn len(&self) -> u64 {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Heap bytes owned (memory accounting): the nodes' buffers, about 40
    /// bytes of map per node, and the groups.
    pub fn heap_size(&self) -> usize {
        let nodes: usize = self.nodes.values().map(|lp| lp.capacity() + 40).sum();
        let groups: usize = self
            .groups
            .iter()
            .map(|(name, g)| {
                let pel: usize = g.pel.values().map(|p| 64 + p.consumer.len()).sum();
                let consumers: usize = g.consumers.iter().map(|(n, c)| 64 + n.len() + c.pel.len() * 24).sum();
                96 + name.len() + pel + consumers
            })
            .sum();
        nodes + groups
    }

    /// Number of nodes (lazy-free effort, XINFO's radix-tree figures).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The nodes, by master ID, as RDB writes them.
    pub fn nodes(&self) -> impl Iterator<Item = (StreamId, &[u8])> {
        self.nodes.iter().map(|(id, lp)| (*id, lp.as_slice()))
    }

    /// A stream from nodes as RDB holds them, checked to be well-formed
    /// listpacks of entries in ascending order with consistent counts;
    /// None otherwise. The caller sets the metadata and groups.
    pub fn from_nodes(nodes: Vec<(StreamId, Vec<u8>)>) -> Option<Stream> {
        let mut s = Stream::new();
        let mut prev: Option<StreamId> = None;
        for (master_id, lp) in nodes {
            lp::valid(&lp)?;
            let m = master(&lp)?;
            let mut off = m.entries_off;
            let (mut live, mut deleted) = (0i64, 0i64);
            while off < lp.len() - 1 {
                let e = raw_entry(&lp, off, master_id, m.fields.len())?;
                // The lp-count must be the entry's element count.
                let (count, _) = lp::read(&lp, e.end - lp::element_size_before(&lp, e.end)?)?;
                let extra = if e.flags & FLAG_SAMEFIELDS != 0 { 3 } else { 4 };
                let elements = if e.flags & FLAG_SAMEFIELDS != 0 { e.num_fields } else { e.num_fields * 2 };
                if count.as_int()? != (elements + extra) as i64 || e.flags & !3 != 0 {
                    return None;
                }
                if prev.is_some_and(|p| e.id <= p) {
                    return None;
                }
                prev = Some(e.id);
                if e.flags & FLAG_DELETED != 0 {
                    deleted += 1;
                } else {
                    live += 1;
                }
                off = e.end;
            }
            if live != m.live || deleted != m.deleted || live + deleted == 0 || s.nodes.contains_key(&master_id) {
                return None;
            }
            s.length += live as u64;
            s.nodes.insert(master_id, lp);
        }
        s.first_id = s.edge(true).unwrap_or_default();
        Some(s)
    }

    /// The first (or last) live entry's ID.
    pub fn edge(&self, first: bool) -> Option<StreamId> {
        let pick = |(master_id, lp): (&StreamId, &Vec<u8>)| {
            let entries = node_entries(lp, *master_id);
            let live = |e: &&RawEntry| e.flags & FLAG_DELETED == 0;
            if first {
                entries.iter().find(live).map(|e| e.id)
            } else {
                entries.iter().rev().find(live).map(|e| e.id)
            }
        };
        if first {
            self.nodes.iter().find_map(pick)
        } else {
            self.nodes.iter().rev().find_map(pick)
        }
    }

    /// The ID XADD gives an entry: `*` (None) takes the time, or the last
    /// ID's next one if the clock is behind; `<ms>-*` (`seq_given` false)
    /// the next sequence of that millisecond.
    pub fn next_id(&self, given: Option<StreamId>, seq_given: bool, now_ms: u64) -> Result<StreamId, AddError> {
        let id = match given {
            Some(id) if seq_given => id,
            Some(id) if id.ms == self.last_id.ms => {
                if self.last_id.seq == u64::MAX {
                    return Err(AddError::NotGreater);
                }
                StreamId::new(id.ms, self.last_id.seq + 1)
            }
            Some(id) => id,
            None if now_ms > self.last_id.ms => StreamId::new(now_ms, 0),
            None => self.last_id.incr().unwrap_or(self.last_id),
        };
        if id <= self.last_id {
            return Err(AddError::NotGreater);
        }
        Ok(id)
    }

    /// Appends an entry with `id` (above the last ID: see `next_id`) and
    /// `fields` (field, value, ...), as `streamAppendItem` does.
    pub fn append(&mut self, id: StreamId, fields: &[&[u8]], limits: NodeLimits) -> Result<(), AddError> {
        if id <= self.last_id {
            return Err(AddError::NotGreater);
        }
        let total: usize = fields.iter().map(|f| f.len()).sum();
        if total > LISTPACK_MAX_SIZE {
            return Err(AddError::TooLarge);
        }
        let num_fields = fields.len() / 2;
        let max_bytes = if limits.max_bytes == 0 || limits.max_bytes > LISTPACK_MAX_SIZE { LISTPACK_MAX_SIZE } else { limits.max_bytes };
        let tail = self.nodes.iter_mut().next_back().filter(|(_, lp)| {
            if lp.len() + total >= max_bytes {
                return false;
            }
            let Some(m) = master(lp) else { return false };
            limits.max_entries == 0 || ((m.live + m.deleted) as usize) < limits.max_entries
        });
        let (master_id, lp, same) = match tail {
            Some((master_id, lp)) => {
                let m = master(lp).expect("checked above");
                let same = m.fields.len() == num_fields && m.fields.iter().enumerate().all(|(i, f)| f.eq_bytes(fields[i * 2]));
                let live = m.live;
                lp::replace_int(lp, lp::HEADER, live + 1);
                (*master_id, lp, same)
            }
            None => {
                let mut lp = lp::new();
                lp::append_int(&mut lp, 1);
                lp::append_int(&mut lp, 0);
                lp::append_int(&mut lp, num_fields as i64);
                for i in 0..num_fields {
                    lp::append_str(&mut lp, fields[i * 2]);
                }
                lp::append_int(&mut lp, 0);
                self.nodes.insert(id, lp);
                (id, self.nodes.get_mut(&id).expect("just inserted"), true)
            }
        };
        lp::append_int(lp, if same { FLAG_SAMEFIELDS } else { 0 });
        lp::append_int(lp, id.ms.wrapping_sub(master_id.ms) as i64);
        lp::append_int(lp, id.seq.wrapping_sub(master_id.seq) as i64);
        if !same {
            lp::append_int(lp, num_fields as i64);
        }
        for (i, f) in fields.iter().enumerate() {
            if !same || i % 2 == 1 {
                lp::append_str(lp, f);
            }
        }
        let count = if same { num_fields + 3 } else { num_fields * 2 + 4 };
        lp::append_int(lp, count as i64);
        self.length += 1;
        self.entries_added += 1;
        self.last_id = id;
        if self.length == 1 {
            self.first_id = id;
        }
        Ok(())
    }

    /// Live entries from `start` to `end` inclusive, ascending (or
    /// descending with `rev`), at most `count` of them (0: all), each
    /// handed to `f`.
    pub fn for_range(&self, start: StreamId, end: StreamId, rev: bool, count: usize, mut f: impl FnMut(StreamEntry)) {
        if start > end {
            return;
        }
        let mut sent = 0;
        let mut visit = |master_id: &StreamId, lp: &Vec<u8>| -> bool {
            let Some(m) = master(lp) else { return true };
            let entries = node_entries(lp, *master_id);
            let mut go = |e: &RawEntry| -> bool {
                if e.flags & FLAG_DELETED != 0 || e.id < start || e.id > end {
                    return !(if rev { e.id < start } else { e.id > end });
                }
                f(StreamEntry { id: e.id, fields: entry_fields(lp, &m, e) });
                sent += 1;
                count == 0 || sent < count
            };
            if rev {
                entries.iter().rev().all(&mut go)
            } else {
                entries.iter().all(&mut go)
            }
        };
        // The node holding `start` begins at or before it.
        let from = self.nodes.range(..=start).next_back().map_or(StreamId::MIN, |(id, _)| *id);
        if rev {
            for (id, lp) in self.nodes.range(from..=end).rev() {
                if !visit(id, lp) {
                    return;
                }
            }
        } else {
            for (id, lp) in self.nodes.range(from..=end) {
                if !visit(id, lp) {
                    return;
                }
            }
        }
    }

    /// As `for_range`, gathered.
    pub fn range(&self, start: StreamId, end: StreamId, rev: bool, count: usize) -> Vec<StreamEntry> {
        let mut out = Vec::new();
        self.for_range(start, end, rev, count, |e| out.push(e));
        out
    }

    /// The live entry `id`, if any.
    pub fn get(&self, id: StreamId) -> Option<StreamEntry> {
        self.range(id, id, false, 1).pop()
    }

    /// Marks entry `id` deleted (`streamIteratorRemoveEntry`): its node
    /// goes once it holds no live entry. Returns whether it was live.
    /// Leaves `first_id` and `max_deleted_entry_id` to the caller (XDEL
    /// updates them once for all its IDs).
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some((&master_id, lp)) = self.nodes.range_mut(..=id).next_back() else { return false };
        let Some(e) = node_entries(lp, master_id).into_iter().find(|e| e.id == id && e.flags & FLAG_DELETED == 0) else {
            return false;
        };
        let m = master(lp).expect("a walked node");
        let (live, deleted) = (m.live, m.deleted);
        if live == 1 {
            self.nodes.remove(&master_id);
        } else {
            lp::replace_int(lp, e.flags_off, e.flags | FLAG_DELETED);
            let after = lp::read(lp, lp::HEADER).expect("master").1;
            let delta = lp::replace_int(lp, lp::HEADER, live - 1);
            lp::replace_int(lp, (after as isize + delta) as usize, deleted + 1);
        }
        self.length -= 1;
        true
    }

    /// Trims as `streamTrim` does: whole nodes from the head while they
    /// are all beyond the bound, then (unless `approx`) entries of the
    /// next node, marked deleted; never more than `limit` entries when it
    /// is not 0. Returns the entries removed.
    pub fn trim(&mut self, trim: Trim, approx: bool, limit: u64) -> u64 {
        let mut deleted = 0u64;
        while let Some((&master_id, lp)) = self.nodes.iter_mut().next() {
            if let Trim::MaxLen(max) = trim {
                if self.length <= max {
                    break;
                }
            }
            let (live, marked) = master(lp).map(|m| (m.live, m.deleted)).expect("a stored node");
            let entries = live as u64;
            if limit != 0 && deleted + entries > limit {
                break;
            }
            let remove_node = match trim {
                Trim::MaxLen(max) => self.length - entries >= max,
                Trim::MinId(min) => node_entries(lp, master_id).last().is_some_and(|e| e.id < min),
            };
            if remove_node {
                self.nodes.remove(&master_id);
                self.length -= entries;
                deleted += entries;
                continue;
            }
            if approx {
                break;
            }
            let mut from_node = 0i64;
            let mut shift = 0isize;
            for e in node_entries(lp, master_id) {
                let stop = match trim {
                    Trim::MaxLen(max) => self.length <= max,
                    Trim::MinId(min) => e.id >= min,
                };
                if stop {
                    break;
                }
                if e.flags & FLAG_DELETED == 0 {
                    shift += lp::replace_int(lp, (e.flags_off as isize + shift) as usize, e.flags | FLAG_DELETED);
                    from_node += 1;
                    self.length -= 1;
                }
            }
            deleted += from_node as u64;
            let after = lp::read(lp, lp::HEADER).expect("master").1;
            let delta = lp::replace_int(lp, lp::HEADER, live - from_node);
            lp::replace_int(lp, (after as isize + delta) as usize, marked + from_node);
            break;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if deleted > 0 {
            self.first_id = self.edge(true).unwrap_or_default();
        }
        deleted
    }

    /// The ID of the first entry, deleted ones included (what an
    /// approximate MINID trim is propagated with: `streamGetEdgeID` with
    /// tombstones).
    pub fn first_id_with_tombstones(&self) -> StreamId {
        self.nodes
            .iter()
            .find_map(|(master_id, lp)| node_entries(lp, *master_id).first().map(|e| e.id))
            .unwrap_or_default()
    }

    /// Whether a deletion may have left a gap between `start` and `end`
    /// (`streamRangeHasTombstones`).
    pub fn range_has_tombstones(&self, start: StreamId, end: StreamId) -> bool {
        if self.is_empty() || self.max_deleted_entry_id == StreamId::MIN || self.first_id > self.max_deleted_entry_id {
            return false;
        }
        start <= self.max_deleted_entry_id && self.max_deleted_entry_id <= end
    }

    /// `streamEstimateDistanceFromFirstEverEntry`: how many entries were
    /// added up to `id`, or None where gaps make that unknowable.
    pub fn entries_read_at(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.is_empty() && id <= self.last_id {
            return Some(self.entries_added);
        }
        match id.cmp(&self.last_id) {
            std::cmp::Ordering::Equal => return Some(self.entries_added),
            std::cmp::Ordering::Greater => return None,
            std::cmp::Ordering::Less => {}
        }
        if self.max_deleted_entry_id == StreamId::MIN || self.max_deleted_entry_id < self.first_id {
            // No deletion after the first entry: nothing is fragmented.
            match id.cmp(&self.first_id) {
                std::cmp::Ordering::Less => return Some(self.entries_added - self.length),
                std::cmp::Ordering::Equal => return Some(self.entries_added - self.length + 1),
                std::cmp::Ordering::Greater => {}
            }
        }
        None
    }

    /// A group's lag (XINFO): entries not yet delivered to it, or None
    /// where it cannot be known (`streamReplyWithCGLag`).
    pub fn group_lag(&self, group: &Group) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if group.entries_read != ENTRIES_READ_UNKNOWN && !self.range_has_tombstones(group.last_id, StreamId::MAX) {
            return Some(self.entries_added.wrapping_sub(group.entries_read as u64));
        }
        self.entries_read_at(group.last_id).map(|read| self.entries_added.wrapping_sub(read))
    }

    /// The group's entries-read once it has read up to `id` (XREADGROUP's
    /// `streamUpdateCG` counting).
    pub fn entries_read_after(&self, group: &Group, id: StreamId) -> i64 {
        if group.entries_read != ENTRIES_READ_UNKNOWN && !self.range_has_tombstones(id, StreamId::MAX) {
            // A valid counter and no gap ahead: count on.
            group.entries_read + 1
        } else {
            self.entries_read_at(id).map_or(ENTRIES_READ_UNKNOWN, |read| read as i64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn fields(pairs: &[(&str, &str)]) -> Vec<Vec<u8>> {
        pairs.iter().flat_map(|(f, v)| [f.as_bytes().to_vec(), v.as_bytes().to_vec()]).collect()
    }

    fn add(s: &mut Stream, id: StreamId, f: &[Vec<u8>], limits: NodeLimits) {
        let args: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
        s.append(id, &args, limits).expect("id above the last");
    }

    /// The nodes read back as RDB would carry them give the same stream.
    fn reloads_the_same(s: &Stream) {
        let nodes: Vec<(StreamId, Vec<u8>)> = s.nodes().map(|(id, lp)| (id, lp.to_vec())).collect();
        let back = Stream::from_nodes(nodes).expect("nodes we wrote are valid");
        assert_eq!(back.len(), s.len());
        assert_eq!(back.range(StreamId::MIN, StreamId::MAX, false, 0), s.range(StreamId::MIN, StreamId::MAX, false, 0));
    }

    #[test]
    fn listpack_elements_use_redis_encodings() {
        let mut lp = lp::new();
        let values: [&[u8]; 10] = [b"0", b"127", b"128", b"-1", b"4095", b"-4096", b"40000", b"-9000000", b"9223372036854775807", b"abc"];
        for v in values {
            lp::append_str(&mut lp, v);
        }
        let long = vec![b'x'; 5000];
        lp::append_str(&mut lp, &long);
        assert_eq!(lp::valid(&lp), Some(11));
        let mut off = lp::HEADER;
        for v in values.iter().map(|v| v.to_vec()).chain([long]) {
            let (e, next) = lp::read(&lp, off).expect("an element");
            assert_eq!(e.to_vec(), v);
            off = next;
        }
        // Redis's bytes for 127, 128 (13-bit) and "abc".
        let mut one = lp::new();
        lp::append_int(&mut one, 128);
        assert_eq!(&one[lp::HEADER..], &[0xC0, 0x80, 2, 0xFF]);
        let mut s = lp::new();
        lp::append_str(&mut s, b"abc");
        assert_eq!(&s[lp::HEADER..], &[0x83, b'a', b'b', b'c', 4, 0xFF]);
        assert_eq!(u32::from_le_bytes([s[0], s[1], s[2], s[3]]) as usize, s.len());
    }

    #[test]
    fn entries_share_the_master_fields_and_nodes_fill_at_the_limits() {
        let limits = NodeLimits { max_bytes: 4096, max_entries: 3 };
        let mut s = Stream::new();
        for i in 1..=7 {
            let f = if i == 2 { fields(&[("other", "x")]) } else { fields(&[("f", "v")]) };
            add(&mut s, StreamId::new(i, 0), &f, limits);
        }
        assert_eq!(s.len(), 7);
        assert_eq!(s.node_count(), 3);
        assert_eq!(s.first_id, StreamId::new(1, 0));
        let all = s.range(StreamId::MIN, StreamId::MAX, false, 0);
        assert_eq!(all[1].fields, fields(&[("other", "x")]));
        assert_eq!(s.range(StreamId::new(3, 0), StreamId::new(5, 0), true, 2).iter().map(|e| e.id.ms).collect::<Vec<_>>(), [5, 4]);
        reloads_the_same(&s);
    }

    #[test]
    fn ids_come_from_the_clock_or_the_last_id() {
        let mut s = Stream::new();
        assert_eq!(s.next_id(None, true, 100), Ok(StreamId::new(100, 0)));
        add(&mut s, StreamId::new(100, 0), &fields(&[("a", "1")]), NodeLimits::default());
        // A clock behind the last ID takes the next sequence.
        assert_eq!(s.next_id(None, true, 50), Ok(StreamId::new(100, 1)));
        assert_eq!(s.next_id(Some(StreamId::new(100, 0)), false, 0), Ok(StreamId::new(100, 1)));
        assert_eq!(s.next_id(Some(StreamId::new(100, 0)), true, 0), Err(AddError::NotGreater));
        assert_eq!(s.next_id(Some(StreamId::new(7, 0)), false, 0), Err(AddError::NotGreater));
    }

    #[test]
    fn deleting_marks_and_drops_empty_nodes() {
        let limits = NodeLimits { max_bytes: 0, max_entries: 2 };
        let mut s = Stream::new();
        for i in 1..=4 {
            add(&mut s, StreamId::new(i, 0), &fields(&[("f", "v")]), limits);
        }
        assert!(s.delete(StreamId::new(1, 0)));
        assert!(!s.delete(StreamId::new(1, 0)));
        assert_eq!(s.node_count(), 2);
        assert!(s.delete(StreamId::new(2, 0)));
        assert_eq!(s.node_count(), 1);
        assert_eq!(s.len(), 2);
        reloads_the_same(&s);
    }

    #[test]
    fn approximate_trims_remove_whole_nodes_only() {
        let limits = NodeLimits { max_bytes: 0, max_entries: 10 };
        let mut s = Stream::new();
        for i in 1..=25 {
            add(&mut s, StreamId::new(i, 0), &fields(&[("f", "v")]), limits);
        }
        assert_eq!(s.trim(Trim::MaxLen(12), true, 0), 10);
        assert_eq!(s.len(), 15);
        assert_eq!(s.trim(Trim::MaxLen(12), false, 0), 3);
        assert_eq!(s.first_id, StreamId::new(14, 0));
        assert_eq!(s.first_id_with_tombstones(), StreamId::new(11, 0));
        assert_eq!(s.trim(Trim::MinId(StreamId::new(23, 0)), false, 0), 9);
        assert_eq!(s.range(StreamId::MIN, StreamId::MAX, false, 0).len(), 3);
        reloads_the_same(&s);
    }

    #[test]
    fn malformed_nodes_are_refused() {
        let mut s = Stream::new();
        add(&mut s, StreamId::new(1, 0), &fields(&[("f", "v")]), NodeLimits::default());
        let (id, lp) = s.nodes().next().map(|(id, lp)| (id, lp.to_vec())).expect("one node");
        for cut in 0..lp.len() {
            let mut bad = lp.clone();
            bad[cut] ^= 0x5A;
            // Anything accepted must read back without panicking.
            if let Some(s) = Stream::from_nodes(vec![(id, bad)]) {
                s.range(StreamId::MIN, StreamId::MAX, true, 0);
            }
        }
        assert!(Stream::from_nodes(vec![(id, lp[..lp.len() - 1].to_vec())]).is_none());
    }

    #[derive(Debug, Clone)]
    enum Op {
        Add(u64, u8, bool),
        Del(u64),
        MaxLen(u64, bool),
        MinId(u64, bool),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => (1..4u64, 0..3u8, any::<bool>()).prop_map(|(gap, n, same)| Op::Add(gap, n, same)),
            2 => (0..80u64).prop_map(Op::Del),
            1 => (0..30u64, any::<bool>()).prop_map(|(n, a)| Op::MaxLen(n, a)),
            1 => (0..80u64, any::<bool>()).prop_map(|(n, a)| Op::MinId(n, a)),
        ]
    }

    proptest! {
        /// Against a map of entries: every operation leaves the same
        /// entries, length and first ID, and nodes that reload as they are.
        #[test]
        fn stream_matches_a_model(ops in proptest::collection::vec(op(), 1..120), per_node in 1..6usize) {
            let limits = NodeLimits { max_bytes: 300, max_entries: per_node };
            let mut s = Stream::new();
            let mut model: BTreeMap<StreamId, Vec<Vec<u8>>> = BTreeMap::new();
            let mut ms = 0;
            for op in ops {
                match op {
                    Op::Add(gap, n, same) => {
                        ms += gap;
                        let f: Vec<Vec<u8>> = (0..=n)
                            .flat_map(|i| [if same { format!("f{i}") } else { format!("g{ms}") }.into_bytes(), format!("{}", ms * 7 + u64::from(i)).into_bytes()])
                            .collect();
                        add(&mut s, StreamId::new(ms, 0), &f, limits);
                        model.insert(StreamId::new(ms, 0), f);
                    }
                    Op::Del(at) => {
                        let id = StreamId::new(at, 0);
                        prop_assert_eq!(s.delete(id), model.remove(&id).is_some());
                        s.first_id = s.edge(true).unwrap_or_default();
                    }
                    Op::MaxLen(max, approx) => {
                        let removed = s.trim(Trim::MaxLen(max), approx, 0);
                        for _ in 0..removed {
                            let first = *model.keys().next().expect("as many entries as removed");
                            model.remove(&first);
                        }
                        if !approx {
                            prop_assert!(model.len() as u64 <= max);
                        }
                    }
                    Op::MinId(min, approx) => {
                        let removed = s.trim(Trim::MinId(StreamId::new(min, 0)), approx, 0);
                        let before = model.len();
                        let keep = model.split_off(&StreamId::new(min, 0));
                        if approx {
                            // Whole nodes only: what went is a prefix.
                            let mut gone: Vec<StreamId> = model.keys().copied().collect();
                            gone.truncate(removed as usize);
                            let mut rest = std::mem::replace(&mut model, keep);
                            for id in gone { rest.remove(&id); }
                            model.extend(rest);
                        } else {
                            model = keep;
                            prop_assert_eq!(removed as usize, before - model.len());
                        }
                    }
                }
                prop_assert_eq!(s.len(), model.len() as u64);
                let got: Vec<(StreamId, Vec<Vec<u8>>)> = s.range(StreamId::MIN, StreamId::MAX, false, 0).into_iter().map(|e| (e.id, e.fields)).collect();
                let want: Vec<(StreamId, Vec<Vec<u8>>)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
                prop_assert_eq!(&got, &want);
                let mut rev = got.clone();
                rev.reverse();
                let back: Vec<(StreamId, Vec<Vec<u8>>)> = s.range(StreamId::MIN, StreamId::MAX, true, 0).into_iter().map(|e| (e.id, e.fields)).collect();
                prop_assert_eq!(back, rev);
                prop_assert_eq!(s.first_id, model.keys().next().copied().unwrap_or_default());
                reloads_the_same(&s);
            }
        }
    }
}
