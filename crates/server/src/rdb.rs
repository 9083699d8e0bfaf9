//! The bridge between the keyspace's values and `keel-rdb`'s neutral model:
//! DUMP/RESTORE and RDB loads convert with [`to_rdb`] and [`from_rdb`];
//! snapshots and rewrites copy a step's entries out with [`Gathered`].

use std::io;

use keel_engine::set::Member;
use keel_engine::value::{EncodingLimits, Entry, Str, Value};
use keel_engine::{Hash, List, Set, ZSet};
use keel_engine::stream::{Consumer, Group, Pending, StreamId, ENTRIES_READ_UNKNOWN};
use keel_engine::Stream;
use keel_rdb::{EncodeOptions, RdbGroup, RdbStream, RdbValue, RdbWriter, StreamMeta, Thresholds};

/// A value as `keel-rdb` writes it.
pub fn to_rdb(value: &Value) -> RdbValue {
    match value {
        Value::Str(s) => RdbValue::String(s.as_bytes(&mut itoa::Buffer::new()).to_vec()),
        Value::List(l) => RdbValue::List(l.iter().map(<[u8]>::to_vec).collect()),
        Value::Set(s) => RdbValue::Set(s.iter().map(|m| m.to_vec()).collect()),
        Value::Hash(h) => RdbValue::Hash(h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect()),
        Value::ZSet(z) => RdbValue::ZSet(z.iter().map(|(m, s)| (m.to_vec(), s)).collect()),
        Value::Stream(s) => RdbValue::Stream(Box::new(stream_to_rdb(s))),
    }
}

fn id_pair(id: StreamId) -> (u64, u64) {
    (id.ms, id.seq)
}

fn stream_id((ms, seq): (u64, u64)) -> StreamId {
    StreamId::new(ms, seq)
}

/// A stream as RDB type 19 holds it: its nodes' bytes as they are.
fn stream_to_rdb(s: &Stream) -> RdbStream {
    let groups = s
        .groups
        .iter()
        .map(|(name, g)| {
            let index: std::collections::HashMap<&[u8], usize> = g.consumers.keys().enumerate().map(|(i, n)| (n.as_slice(), i)).collect();
            RdbGroup {
                name: name.clone(),
                last_id: id_pair(g.last_id),
                entries_read: Some(g.entries_read),
                pel: g.pel.iter().map(|(id, p)| (id_pair(*id), p.delivery_time, p.delivery_count, index[p.consumer.as_slice()])).collect(),
                consumers: g.consumers.iter().map(|(n, c)| (n.clone(), c.seen_time)).collect(),
            }
        })
        .collect();
    RdbStream {
        nodes: s.nodes().map(|(id, lp)| (id_pair(id), lp.to_vec())).collect(),
        length: s.len(),
        last_id: id_pair(s.last_id),
        meta: Some(StreamMeta {
            first_id: id_pair(s.first_id),
            max_deleted_id: id_pair(s.max_deleted_entry_id),
            entries_added: s.entries_added,
        }),
        groups,
    }
}

/// A stream read from RDB. `keel-rdb` checked its nodes as the engine
/// does (a fuzz target holds them to agreeing), so the engine's refusal
/// cannot happen; a type 15 value gets the metadata Redis derives.
fn stream_from_rdb(r: RdbStream) -> Stream {
    let nodes = r.nodes.into_iter().map(|(id, lp)| (stream_id(id), lp)).collect();
    let mut s = Stream::from_nodes(nodes).unwrap_or_default();
    s.last_id = stream_id(r.last_id);
    match r.meta {
        Some(m) => {
            s.first_id = stream_id(m.first_id);
            s.max_deleted_entry_id = stream_id(m.max_deleted_id);
            s.entries_added = m.entries_added;
        }
        None => s.entries_added = s.len(),
    }
    for g in r.groups {
        let last_id = stream_id(g.last_id);
        let entries_read = match g.entries_read {
            Some(read) => read,
            None => s.entries_read_at(last_id).map_or(ENTRIES_READ_UNKNOWN, |n| n as i64),
        };
        let mut group = Group::new(last_id, entries_read);
        for (name, seen_time) in &g.consumers {
            group.consumers.insert(name.clone(), Consumer { seen_time: *seen_time, pel: Default::default() });
        }
        for (id, delivery_time, delivery_count, owner) in g.pel {
            let consumer = g.consumers[owner].0.clone();
            if let Some(c) = group.consumers.get_mut(&consumer) {
                c.pel.insert(stream_id(id));
            }
            group.pel.insert(stream_id(id), Pending { consumer, delivery_time, delivery_count });
        }
        s.groups.insert(g.name, group);
    }
    s
}

/// Entries copied out of a shard under its lock, to be encoded once it is
/// let go (a step of a snapshot's scan): keys and string values side by
/// side in one buffer, other values converted. A copy of each key and each
/// string into vectors of their own, and their frees, took about a tenth
/// of a rewrite.
#[derive(Default)]
pub struct Gathered {
    bytes: Vec<u8>,
    entries: Vec<GatheredEntry>,
}

struct GatheredEntry {
    db: usize,
    /// The key ends here in `bytes`, starting where the previous entry
    /// ended; a string value follows it up to `end`.
    key_end: usize,
    end: usize,
    /// A value that is not a string.
    other: Option<RdbValue>,
    expire_at_ms: Option<u64>,
    /// Memcached flags, 0 for none.
    flags: u32,
}

/// A gathered value, as [`Gathered::drain`] hands it out.
pub enum GatheredValue<'a> {
    Str(&'a [u8]),
    Other(&'a RdbValue),
}

impl Gathered {
    pub fn push(&mut self, db: usize, key: &[u8], entry: &Entry, flags: u32) {
        self.bytes.extend_from_slice(key);
        let key_end = self.bytes.len();
        let other = match &entry.value {
            Value::Str(s) => {
                self.bytes.extend_from_slice(s.as_bytes(&mut itoa::Buffer::new()));
                None
            }
            value => Some(to_rdb(value)),
        };
        let expire_at_ms = entry.has_expiry().then_some(entry.expire_at_ms);
        self.entries.push(GatheredEntry { db, key_end, end: self.bytes.len(), other, expire_at_ms, flags });
    }

    /// Hands each entry to `f` in order, (database, key, value, expiry,
    /// memcached flags), until `f` fails; then empties, keeping the buffers
    /// for the next step.
    pub fn drain<E>(&mut self, mut f: impl FnMut(usize, &[u8], GatheredValue<'_>, Option<u64>, u32) -> Result<(), E>) -> Result<(), E> {
        let mut start = 0;
        let result = self.entries.iter().try_for_each(|e| {
            let value = match &e.other {
                Some(v) => GatheredValue::Other(v),
                None => GatheredValue::Str(&self.bytes[e.key_end..e.end]),
            };
            let key = &self.bytes[start..e.key_end];
            start = e.end;
            f(e.db, key, value, e.expire_at_ms, e.flags)
        });
        self.entries.clear();
        self.bytes.clear();
        result
    }
}

impl GatheredValue<'_> {
    /// Writes the key with this value into the current database of `w`,
    /// after its memcached flags (none for 0).
    pub fn write<W: io::Write>(&self, w: &mut RdbWriter<W>, key: &[u8], expire_at_ms: Option<u64>, flags: u32) -> io::Result<()> {
        w.item_flags(flags)?;
        match self {
            GatheredValue::Str(bytes) => w.write_string_key(key, bytes, expire_at_ms),
            GatheredValue::Other(value) => w.write_key(key, value, expire_at_ms),
        }
    }
}

/// A value read by `keel-rdb`, in the encodings the current limits give it
/// (as Redis re-encodes what it loads).
pub fn from_rdb(value: RdbValue, limits: &EncodingLimits) -> Value {
    match value {
        RdbValue::String(bytes) => Value::Str(Str::from_bytes(&bytes)),
        RdbValue::List(items) => {
            let mut list = List::new(limits.list_max_listpack_size);
            items.iter().for_each(|item| list.push_back(item));
            Value::List(list)
        }
        RdbValue::Set(members) => {
            let members = members.iter().map(|m| Member::Bytes(m).canonical());
            Value::Set(Set::from_members(members, limits.set_max_intset_entries))
        }
        RdbValue::Hash(pairs) => {
            Value::Hash(Hash::from_pairs(pairs.iter().map(|(f, v)| (f.as_slice(), v.as_slice())), limits))
        }
        RdbValue::ZSet(mut pairs) => {
            // The reader refuses duplicate members and NaN scores.
            pairs.sort_by(|(ma, sa), (mb, sb)| sa.partial_cmp(sb).unwrap_or(std::cmp::Ordering::Equal).then_with(|| ma.cmp(mb)));
            Value::ZSet(ZSet::from_sorted(&pairs, limits))
        }
        RdbValue::Stream(s) => Value::Stream(Box::new(stream_from_rdb(*s))),
    }
}

/// How `keel-rdb` should encode, from the server's limits and
/// `rdbcompression`.
pub fn encode_options(limits: &EncodingLimits, compression: bool) -> EncodeOptions {
    let list_max_listpack_bytes = match limits.list_max_listpack_size {
        // Positive sizes count entries; Redis's node byte cap still applies.
        n if n > 0 => 8 * 1024,
        n => 4096 << (n.unsigned_abs().clamp(1, 5) - 1),
    };
    EncodeOptions {
        compression,
        thresholds: Thresholds {
            hash_max_listpack_entries: limits.hash_max_listpack_entries,
            hash_max_listpack_value: limits.hash_max_listpack_value,
            set_max_intset_entries: limits.set_max_intset_entries,
            zset_max_listpack_entries: limits.zset_max_listpack_entries,
            zset_max_listpack_value: limits.zset_max_listpack_value,
            list_max_listpack_bytes,
            ..Thresholds::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_round_trips() {
        let limits = EncodingLimits::default();
        let values = [
            RdbValue::String(b"12345".to_vec()),
            RdbValue::List(vec![b"a".to_vec(), b"".to_vec(), b"c".to_vec()]),
            RdbValue::Set(vec![b"3".to_vec(), b"1".to_vec()]),
            RdbValue::Set(vec![b"x".to_vec(), b"1".to_vec()]),
            RdbValue::Hash(vec![(b"f".to_vec(), b"v".to_vec())]),
            RdbValue::ZSet(vec![(b"b".to_vec(), 2.0), (b"a".to_vec(), f64::NEG_INFINITY)]),
        ];
        for v in values {
            let back = to_rdb(&from_rdb(v.clone(), &limits));
            let norm = |v: RdbValue| match v {
                RdbValue::Set(mut m) => {
                    m.sort();
                    RdbValue::Set(m)
                }
                RdbValue::ZSet(mut p) => {
                    p.sort_by(|a, b| a.0.cmp(&b.0));
                    RdbValue::ZSet(p)
                }
                other => other,
            };
            assert_eq!(norm(back), norm(v));
        }
    }
}
