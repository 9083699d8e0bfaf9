//! Encoding values the way Redis 7.0 saves them; shared by the file writer
//! and `dump_payload`.

use std::cmp::Ordering;
use std::io::{self, Write};

use crate::crc64::crc64;
use crate::encoded::{intset, listpack};
use crate::format::*;
use crate::input::{ENC_INT16, ENC_INT32, ENC_INT8, ENC_LZF, LEN_14BIT, LEN_32BIT, LEN_64BIT, LEN_ENCVAL};
use crate::{lzf, num, RdbValue};

/// When a collection is small enough for its compact encoding: Redis's
/// `*-max-listpack-*` and `set-max-intset-entries` settings. Redis loads a
/// value in whichever encoding the file has and converts it if its own
/// settings differ, so these only shape the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    /// `hash-max-listpack-entries`: at most this many fields as a listpack.
    pub hash_max_listpack_entries: usize,
    /// `hash-max-listpack-value`: no field or value longer than this.
    pub hash_max_listpack_value: usize,
    /// `set-max-intset-entries`: at most this many all-integer members as
    /// an intset.
    pub set_max_intset_entries: usize,
    /// `zset-max-listpack-entries`.
    pub zset_max_listpack_entries: usize,
    /// `zset-max-listpack-value`: no member longer than this.
    pub zset_max_listpack_value: usize,
    /// Bytes per quicklist node (`list-max-listpack-size -2` is 8 KiB); a
    /// single larger element still gets a node of its own.
    pub list_max_listpack_bytes: usize,
    /// Elements at least this long (and not empty) go into a PLAIN
    /// quicklist node of their own rather than a listpack (Redis's
    /// `packed_threshold`, 1 GiB).
    pub list_packed_threshold: usize,
}

impl Default for Thresholds {
    /// Redis 7.0's defaults.
    fn default() -> Thresholds {
        Thresholds {
            hash_max_listpack_entries: 512,
            hash_max_listpack_value: 64,
            set_max_intset_entries: 512,
            zset_max_listpack_entries: 128,
            zset_max_listpack_value: 64,
            list_max_listpack_bytes: 8 * 1024,
            list_packed_threshold: 1 << 30,
        }
    }
}

/// How values are encoded, in files and in DUMP payloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EncodeOptions {
    /// `rdbcompression`: LZF-compress strings longer than 20 bytes when that
    /// saves at least 4 bytes. On by default, as in Redis.
    pub compression: bool,
    pub thresholds: Thresholds,
}

impl Default for EncodeOptions {
    fn default() -> EncodeOptions {
        EncodeOptions { compression: true, thresholds: Thresholds::default() }
    }
}

/// Bytes gathered by [`Output`] before they are checksummed and passed on.
/// A file is mostly pieces of a few bytes (a type, a length, a key), and
/// `crc-fast` costs as much to set up as to checksum a few hundred bytes:
/// a CRC per piece took two thirds of the time to write 100-byte strings.
const CHUNK: usize = 16 << 10;

/// The writing side: counts bytes and runs the CRC64 over them, a chunk at
/// a time.
pub(crate) struct Output<W> {
    inner: W,
    /// Bytes not yet checksummed nor passed to `inner`, under [`CHUNK`].
    pending: Vec<u8>,
    /// The CRC of what was passed on.
    crc: u64,
    written: u64,
}

impl<W: Write> Output<W> {
    pub(crate) fn new(inner: W) -> Output<W> {
        Output { inner, pending: Vec::with_capacity(CHUNK), crc: 0, written: 0 }
    }

    /// The CRC of every byte so far.
    pub(crate) fn crc(&self) -> u64 {
        crc64(self.crc, &self.pending)
    }

    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Passes on what is pending, and returns the inner writer.
    pub(crate) fn into_inner(mut self) -> io::Result<W> {
        self.pass_on()?;
        Ok(self.inner)
    }

    pub(crate) fn flush(&mut self) -> io::Result<()> {
        self.pass_on()?;
        self.inner.flush()
    }

    pub(crate) fn bytes(&mut self, b: &[u8]) -> io::Result<()> {
        self.written += b.len() as u64;
        if self.pending.len() + b.len() > CHUNK {
            self.pass_on()?;
        }
        if b.len() >= CHUNK {
            self.crc = crc64(self.crc, b);
            return self.inner.write_all(b);
        }
        self.pending.extend_from_slice(b);
        Ok(())
    }

    fn pass_on(&mut self) -> io::Result<()> {
        self.crc = crc64(self.crc, &self.pending);
        self.inner.write_all(&self.pending)?;
        self.pending.clear();
        Ok(())
    }

    pub(crate) fn u8(&mut self, b: u8) -> io::Result<()> {
        self.bytes(&[b])
    }

    /// A length in the smallest form (`rdbSaveLen`).
    pub(crate) fn len(&mut self, n: u64) -> io::Result<()> {
        if n < 1 << 6 {
            self.u8(n as u8)
        } else if n < 1 << 14 {
            self.bytes(&[(LEN_14BIT << 6) | (n >> 8) as u8, (n & 0xff) as u8])
        } else if let Ok(n) = u32::try_from(n) {
            self.u8(LEN_32BIT)?;
            self.bytes(&n.to_be_bytes())
        } else {
            self.u8(LEN_64BIT)?;
            self.bytes(&n.to_be_bytes())
        }
    }

    /// A string as `rdbSaveRawString` stores it: canonical integers that
    /// fit 32 bits as integers, else LZF when enabled and worthwhile, else
    /// verbatim.
    pub(crate) fn string(&mut self, s: &[u8], compression: bool) -> io::Result<()> {
        if s.len() <= 11 {
            if let Some(v) = num::parse_i64(s) {
                let marker = |enc: u8| (LEN_ENCVAL << 6) | enc;
                let le = v.to_le_bytes();
                if let Ok(v) = i8::try_from(v) {
                    return self.bytes(&[marker(ENC_INT8), v as u8]);
                } else if i16::try_from(v).is_ok() {
                    return self.bytes(&[marker(ENC_INT16), le[0], le[1]]);
                } else if i32::try_from(v).is_ok() {
                    return self.bytes(&[marker(ENC_INT32), le[0], le[1], le[2], le[3]]);
                }
            }
        }
        // Under 21 bytes LZF cannot save the 4 bytes it must.
        if compression && s.len() > 20 {
            if let Some(c) = lzf::compress(s, s.len() - 4) {
                self.u8((LEN_ENCVAL << 6) | ENC_LZF)?;
                self.len(c.len() as u64)?;
                self.len(s.len() as u64)?;
                return self.bytes(&c);
            }
        }
        self.len(s.len() as u64)?;
        self.bytes(s)
    }
}

/// The encoding chosen for a value, with what the choice computed.
pub(crate) enum Plan {
    String,
    /// Quicklist nodes: ranges of element indexes, and whether the node is
    /// PLAIN (one element) rather than a listpack.
    List(Vec<(std::ops::Range<usize>, bool)>),
    /// The members as sorted integers.
    SetIntset(Vec<i64>),
    Set,
    HashListpack,
    Hash,
    ZSetListpack,
    ZSet2,
    Stream,
}

impl Plan {
    /// Chooses the encoding Redis 7.0 would have for `value` in memory, and
    /// therefore save.
    pub(crate) fn new(value: &RdbValue, t: &Thresholds) -> Plan {
        match value {
            RdbValue::String(_) => Plan::String,
            RdbValue::List(items) => Plan::List(quicklist_nodes(items, t)),
            RdbValue::Set(members) => {
                if members.len() <= t.set_max_intset_entries {
                    let ints: Option<Vec<i64>> = members.iter().map(|m| num::parse_i64(m)).collect();
                    if let Some(mut ints) = ints {
                        ints.sort_unstable();
                        return Plan::SetIntset(ints);
                    }
                }
                Plan::Set
            }
            RdbValue::Hash(pairs) => {
                let fits = pairs.len() <= t.hash_max_listpack_entries
                    && pairs.iter().all(|(f, v)| f.len() <= t.hash_max_listpack_value && v.len() <= t.hash_max_listpack_value)
                    && safe_listpack_size(pairs.iter().map(|(f, v)| f.len() + v.len()));
                if fits {
                    Plan::HashListpack
                } else {
                    Plan::Hash
                }
            }
            RdbValue::ZSet(pairs) => {
                let fits = pairs.len() <= t.zset_max_listpack_entries
                    && pairs.iter().all(|(m, _)| m.len() <= t.zset_max_listpack_value)
                    && safe_listpack_size(pairs.iter().map(|(m, _)| m.len() + 32));
                if fits {
                    Plan::ZSetListpack
                } else {
                    Plan::ZSet2
                }
            }
            RdbValue::Stream(_) => Plan::Stream,
        }
    }

    pub(crate) fn rdb_type(&self) -> u8 {
        match self {
            Plan::String => TYPE_STRING,
            Plan::List(_) => TYPE_LIST_QUICKLIST_2,
            Plan::SetIntset(_) => TYPE_SET_INTSET,
            Plan::Set => TYPE_SET,
            Plan::HashListpack => TYPE_HASH_LISTPACK,
            Plan::Hash => TYPE_HASH,
            Plan::ZSetListpack => TYPE_ZSET_LISTPACK,
            Plan::ZSet2 => TYPE_ZSET_2,
            Plan::Stream => TYPE_STREAM_LISTPACKS_2,
        }
    }

    /// Writes the value's payload (what follows the type byte and key).
    pub(crate) fn write<W: Write>(&self, out: &mut Output<W>, value: &RdbValue, compression: bool) -> io::Result<()> {
        match (self, value) {
            (Plan::String, RdbValue::String(s)) => out.string(s, compression),
            (Plan::List(nodes), RdbValue::List(items)) => {
                out.len(nodes.len() as u64)?;
                for (range, plain) in nodes {
                    if *plain {
                        out.len(CONTAINER_PLAIN)?;
                        out.string(&items[range.start], compression)?;
                    } else {
                        let mut lp = listpack::Builder::new();
                        for item in &items[range.clone()] {
                            lp.push(item);
                        }
                        out.len(CONTAINER_PACKED)?;
                        out.string(&lp.finish(), compression)?;
                    }
                }
                Ok(())
            }
            (Plan::SetIntset(ints), RdbValue::Set(_)) => out.string(&intset::encode(ints), compression),
            (Plan::Set, RdbValue::Set(members)) => {
                out.len(members.len() as u64)?;
                members.iter().try_for_each(|m| out.string(m, compression))
            }
            (Plan::HashListpack, RdbValue::Hash(pairs)) => {
                let mut lp = listpack::Builder::new();
                for (f, v) in pairs {
                    lp.push(f);
                    lp.push(v);
                }
                out.string(&lp.finish(), compression)
            }
            (Plan::Hash, RdbValue::Hash(pairs)) => {
                out.len(pairs.len() as u64)?;
                pairs.iter().try_for_each(|(f, v)| {
                    out.string(f, compression)?;
                    out.string(v, compression)
                })
            }
            (Plan::ZSetListpack, RdbValue::ZSet(pairs)) => {
                // A listpack sorted set is kept in score order (ties, -0
                // and 0 included, by member bytes): Redis relies on it
                // without checking.
                let mut sorted: Vec<&(Vec<u8>, f64)> = pairs.iter().collect();
                sorted.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(Ordering::Equal).then_with(|| a.0.cmp(&b.0)));
                let mut lp = listpack::Builder::new();
                for (m, score) in sorted {
                    lp.push(m);
                    lp.push(&num::f64_bytes(*score));
                }
                out.string(&lp.finish(), compression)
            }
            (Plan::ZSet2, RdbValue::ZSet(pairs)) => {
                out.len(pairs.len() as u64)?;
                pairs.iter().try_for_each(|(m, score)| {
                    out.string(m, compression)?;
                    out.bytes(&score.to_le_bytes())
                })
            }
            (Plan::Stream, RdbValue::Stream(s)) => crate::stream::write(out, s, compression),
            _ => unreachable!("a plan is only used with the value it was made for"),
        }
    }
}

/// Whether elements of these sizes stay well under Redis's 1 GiB listpack
/// limit (each also costs up to 11 bytes of header and back length).
fn safe_listpack_size(sizes: impl Iterator<Item = usize>) -> bool {
    let mut total = 7usize;
    for s in sizes {
        total = total.saturating_add(s + 11);
        if total > listpack::MAX_SAFE_SIZE {
            return false;
        }
    }
    true
}

/// Splits a list into quicklist nodes as Redis fills them: listpacks of up
/// to `list_max_listpack_bytes` (at least one element each), and a PLAIN
/// node for each element of `list_packed_threshold` bytes or more.
fn quicklist_nodes(items: &[Vec<u8>], t: &Thresholds) -> Vec<(std::ops::Range<usize>, bool)> {
    let limit = t.list_max_listpack_bytes.min(listpack::MAX_SAFE_SIZE);
    let mut nodes = Vec::new();
    let mut start = 0;
    let mut bytes = listpack::Builder::new().bytes();
    let empty = bytes;
    // An empty element never goes PLAIN: an empty node is corrupt.
    let plain_from = t.list_packed_threshold.max(1);
    for (i, item) in items.iter().enumerate() {
        if item.len() >= plain_from {
            if start < i {
                nodes.push((start..i, false));
            }
            nodes.push((i..i + 1, true));
            start = i + 1;
            bytes = empty;
            continue;
        }
        let size = listpack::Builder::entry_size(item);
        if start < i && bytes + size > limit {
            nodes.push((start..i, false));
            start = i;
            bytes = empty;
        }
        bytes += size;
    }
    if start < items.len() {
        nodes.push((start..items.len(), false));
    }
    nodes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pieces on either side of a chunk's size, in an order that crosses
    /// chunk boundaries every way: what comes out, its CRC and its count
    /// are those of the bytes put in, at every step.
    #[test]
    fn output_passes_on_every_byte_and_checksums_it_whatever_the_pieces() {
        let sizes = [1, 7, CHUNK - 1, 1, 1, CHUNK, 3, 3 * CHUNK + 5, CHUNK / 2, CHUNK / 2, CHUNK / 2 + 1, 0, 2];
        let mut out = Output::new(Vec::new());
        let mut all = Vec::new();
        for (i, &size) in sizes.iter().enumerate() {
            let piece: Vec<u8> = (0..size).map(|j| (i * 31 + j * 7) as u8).collect();
            out.bytes(&piece).expect("a Vec takes every byte");
            all.extend_from_slice(&piece);
            assert_eq!(out.crc(), crc64(0, &all), "after piece {i}");
            assert_eq!(out.written(), all.len() as u64);
        }
        assert_eq!(out.into_inner().expect("a Vec takes every byte"), all);
    }
}
