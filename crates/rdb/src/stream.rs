//! Streams as RDB stores them (`RDB_TYPE_STREAM_LISTPACKS` 15 and
//! `RDB_TYPE_STREAM_LISTPACKS_2` 19, `rdb.c`):
//!
//! ```text
//! stream   = len(nodes) (string(master-id:16) string(listpack))...
//!            len(length) len(last.ms) len(last.seq)
//!            [19: len(first.ms) len(first.seq) len(max-deleted.ms)
//!                 len(max-deleted.seq) len(entries-added)]
//!            len(groups) group...
//! group    = string(name) len(last.ms) len(last.seq) [19: len(entries-read)]
//!            len(pel) (id:16 ms-time:8le len(delivery-count))...
//!            len(consumers) consumer...
//! consumer = string(name) ms-time:8le(seen) len(pel) id:16...
//! ```
//!
//! IDs are 16 bytes, milliseconds then sequence, big-endian. A node is a
//! listpack of Redis's stream node layout (a master entry, then entries
//! delta-encoded from the master ID: see `keel-engine`'s `stream.rs`),
//! carried as its bytes: the reader checks every node's layout as Redis's
//! deep sanitization does, so a value handed out is one Redis could have
//! written; the writer writes nodes as they are.

use std::collections::HashSet;
use std::io::{self, BufRead, Write};

use crate::encode::Output;
use crate::encoded::{listpack, Elem};
use crate::error::RdbError;
use crate::input::Input;

/// A stream ID: milliseconds and sequence.
pub type Id = (u64, u64);

/// A stream, its nodes as Redis's listpacks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdbStream {
    /// Each node's master ID and listpack, in ID order.
    pub nodes: Vec<(Id, Vec<u8>)>,
    /// Live entries.
    pub length: u64,
    pub last_id: Id,
    /// Type 19's metadata; None in a type 15 value, whose loader derives
    /// it (`first_id` from the nodes, `entries_added` the length).
    pub meta: Option<StreamMeta>,
    pub groups: Vec<RdbGroup>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StreamMeta {
    pub first_id: Id,
    pub max_deleted_id: Id,
    pub entries_added: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RdbGroup {
    pub name: Vec<u8>,
    pub last_id: Id,
    /// Type 19's entries-read counter (-1: unknown); None in type 15.
    pub entries_read: Option<i64>,
    /// The PEL: ID, delivery time (Unix ms), delivery count, and the index
    /// of the owning consumer in `consumers`.
    pub pel: Vec<(Id, u64, u64, usize)>,
    /// Name and seen time (Unix ms).
    pub consumers: Vec<(Vec<u8>, u64)>,
}

fn id_bytes(id: Id) -> [u8; 16] {
    let mut out = [0; 16];
    out[..8].copy_from_slice(&id.0.to_be_bytes());
    out[8..].copy_from_slice(&id.1.to_be_bytes());
    out
}

fn id_of(b: &[u8; 16]) -> Id {
    let mut ms = [0; 8];
    let mut seq = [0; 8];
    ms.copy_from_slice(&b[..8]);
    seq.copy_from_slice(&b[8..]);
    (u64::from_be_bytes(ms), u64::from_be_bytes(seq))
}

pub(crate) fn read<R: BufRead>(input: &mut Input<R>, v2: bool) -> Result<RdbStream, RdbError> {
    let mut s = RdbStream::default();
    let nodes = input.len()?;
    let mut prev_last: Option<Id> = None;
    let mut live_total = 0u64;
    for _ in 0..nodes {
        let (key, at) = input.blob()?;
        let key: [u8; 16] = key.try_into().map_err(|_| RdbError::corrupt(at, "stream node key is not the size of a stream ID"))?;
        let master = id_of(&key);
        let (lp, at) = input.blob()?;
        let (live, first, last) =
            check_node(&lp, master, at).map_err(|e| e.redis_says("Stream listpack integrity check failed."))?;
        if prev_last.is_some_and(|p| first <= p) {
            return Err(RdbError::corrupt(at, "stream nodes out of order"));
        }
        prev_last = Some(last);
        live_total += live;
        s.nodes.push((master, lp));
    }
    let at = input.offset();
    s.length = input.len()?;
    if s.length != live_total {
        return Err(RdbError::corrupt(at, "stream length inconsistent with its nodes"));
    }
    s.last_id = (input.len()?, input.len()?);
    if prev_last.is_some_and(|l| l > s.last_id) {
        return Err(RdbError::corrupt(at, "stream last ID below its entries"));
    }
    if v2 {
        let first_id = (input.len()?, input.len()?);
        let max_deleted_id = (input.len()?, input.len()?);
        let entries_added = input.len()?;
        s.meta = Some(StreamMeta { first_id, max_deleted_id, entries_added });
    }
    let groups = input.len()?;
    let mut names = HashSet::new();
    for _ in 0..groups {
        let (name, at) = input.blob()?;
        if !names.insert(name.clone()) {
            return Err(RdbError::corrupt(at, format!("Duplicated consumer group name {}", String::from_utf8_lossy(&name))));
        }
        let last_id = (input.len()?, input.len()?);
        let entries_read = if v2 { Some(input.len()? as i64) } else { None };
        let mut pel: Vec<(Id, u64, u64, usize)> = Vec::new();
        let n = input.len()?;
        for _ in 0..n {
            let at = input.offset();
            let id = id_of(&input.array::<16>()?);
            let time = u64::from_le_bytes(input.array::<8>()?);
            let count = input.len()?;
            if pel.last().is_some_and(|p| p.0 >= id) {
                return Err(RdbError::corrupt(at, "duplicated or unordered global PEL entry")
                    .redis_says("Duplicated global PEL entry loading stream consumer group"));
            }
            pel.push((id, time, count, usize::MAX));
        }
        let mut consumers = Vec::new();
        let mut consumer_names = HashSet::new();
        let n = input.len()?;
        for index in 0..n as usize {
            let (cname, at) = input.blob()?;
            if !consumer_names.insert(cname.clone()) {
                return Err(RdbError::corrupt(at, "Duplicate stream consumer detected."));
            }
            let seen = u64::from_le_bytes(input.array::<8>()?);
            let owned = input.len()?;
            for _ in 0..owned {
                let at = input.offset();
                let id = id_of(&input.array::<16>()?);
                match pel.binary_search_by(|p| p.0.cmp(&id)) {
                    Ok(i) if pel[i].3 == usize::MAX => pel[i].3 = index,
                    Ok(_) => {
                        let e = RdbError::corrupt(at, "PEL entry owned by two consumers");
                        return Err(e.redis_says("Duplicated consumer PEL entry loading a stream consumer group"));
                    }
                    Err(_) => return Err(RdbError::corrupt(at, "Consumer entry not found in group global PEL")),
                }
            }
            consumers.push((cname, seen));
        }
        if pel.iter().any(|p| p.3 == usize::MAX) {
            return Err(RdbError::corrupt(input.offset(), "Stream CG PEL entry without consumer"));
        }
        s.groups.push(RdbGroup { name, last_id, entries_read, pel, consumers });
    }
    Ok(s)
}

/// Checks a node as Redis's `streamValidateListpackIntegrity` does in deep
/// mode; returns its live entry count and its first and last entry IDs.
fn check_node(lp: &[u8], master: Id, at: u64) -> Result<(u64, Id, Id), RdbError> {
    let bad = |what: &str| RdbError::corrupt(at, format!("stream node: {what}"));
    let elems = listpack::decode(lp, at)?;
    let int = |e: Option<&Elem<'_>>| -> Result<i64, RdbError> {
        match e {
            Some(Elem::Int(i)) => Ok(*i),
            Some(Elem::Str(s)) => crate::num::parse_i64(s).ok_or_else(|| bad("integer expected")),
            None => Err(bad("truncated entry")),
        }
    };
    let mut it = elems.iter();
    let live = int(it.next())?;
    let deleted = int(it.next())?;
    let master_fields = usize::try_from(int(it.next())?).map_err(|_| bad("negative field count"))?;
    let mut fields = Vec::with_capacity(master_fields.min(elems.len()));
    for _ in 0..master_fields {
        fields.push(it.next().ok_or_else(|| bad("truncated master entry"))?);
    }
    if int(it.next())? != 0 {
        return Err(bad("master entry not terminated by 0"));
    }
    let (mut seen_live, mut seen_deleted) = (0i64, 0i64);
    let (mut first, mut last): (Option<Id>, Option<Id>) = (None, None);
    while it.len() > 0 {
        let flags = int(it.next())?;
        if flags & !3 != 0 {
            return Err(bad("unknown entry flags"));
        }
        let ms = master.0.wrapping_add(int(it.next())? as u64);
        let seq = master.1.wrapping_add(int(it.next())? as u64);
        let id = (ms, seq);
        if last.is_some_and(|l| id <= l) || id < master {
            return Err(bad("entry IDs out of order"));
        }
        first.get_or_insert(id);
        last = Some(id);
        let (n, elements, extra) = if flags & 2 != 0 {
            (master_fields, master_fields, 3)
        } else {
            let n = usize::try_from(int(it.next())?).map_err(|_| bad("negative field count"))?;
            (n, n.checked_mul(2).ok_or_else(|| bad("field count"))?, 4)
        };
        if n == 0 || elements > it.len() {
            return Err(bad("entry fields missing"));
        }
        for _ in 0..elements {
            it.next();
        }
        if int(it.next())? != (elements + extra) as i64 {
            return Err(bad("entry lp-count wrong"));
        }
        if flags & 1 != 0 {
            seen_deleted += 1;
        } else {
            seen_live += 1;
        }
    }
    if seen_live != live || seen_deleted != deleted {
        return Err(bad("master entry counts disagree with the entries"));
    }
    match (first, last) {
        (Some(f), Some(l)) => Ok((live as u64, f, l)),
        _ => Err(bad("empty listpack inside stream")),
    }
}

pub(crate) fn write<W: Write>(out: &mut Output<W>, s: &RdbStream, compression: bool) -> io::Result<()> {
    out.len(s.nodes.len() as u64)?;
    for (master, lp) in &s.nodes {
        out.string(&id_bytes(*master), compression)?;
        out.string(lp, compression)?;
    }
    out.len(s.length)?;
    out.len(s.last_id.0)?;
    out.len(s.last_id.1)?;
    let meta = s.meta.unwrap_or(StreamMeta { first_id: (0, 0), max_deleted_id: (0, 0), entries_added: s.length });
    out.len(meta.first_id.0)?;
    out.len(meta.first_id.1)?;
    out.len(meta.max_deleted_id.0)?;
    out.len(meta.max_deleted_id.1)?;
    out.len(meta.entries_added)?;
    out.len(s.groups.len() as u64)?;
    for g in &s.groups {
        out.string(&g.name, compression)?;
        out.len(g.last_id.0)?;
        out.len(g.last_id.1)?;
        out.len(g.entries_read.unwrap_or(-1) as u64)?;
        out.len(g.pel.len() as u64)?;
        for (id, time, count, _) in &g.pel {
            out.bytes(&id_bytes(*id))?;
            out.bytes(&time.to_le_bytes())?;
            out.len(*count)?;
        }
        out.len(g.consumers.len() as u64)?;
        for (index, (name, seen)) in g.consumers.iter().enumerate() {
            out.string(name, compression)?;
            out.bytes(&seen.to_le_bytes())?;
            let owned: Vec<&Id> = g.pel.iter().filter(|p| p.3 == index).map(|p| &p.0).collect();
            out.len(owned.len() as u64)?;
            for id in owned {
                out.bytes(&id_bytes(*id))?;
            }
        }
    }
    Ok(())
}
