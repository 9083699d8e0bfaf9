//! Hashes: a listpack of alternating fields and values while small, an
//! incrementally rehashed [`Dict`] once past `hash-max-listpack-*`.
//!
//! As in Redis 7.0, a hash stays a listpack while it has at most
//! `hash-max-listpack-entries` fields and every field and value it was
//! given is at most `hash-max-listpack-value` bytes long; the first insert
//! that breaks either limit converts it to a table, and a table never goes
//! back. A listpack keeps fields in insertion order (an update keeps the
//! field's place), which is the order HGETALL answers in.
//!
//! Costs are Redis's: O(1) per field on a table, O(n) on a listpack (whose
//! n is bounded by the limit).
//!
//! What other code uses: [`Hash::get`] (SORT's `BY`/`GET` `->field`),
//! [`Hash::iter`] for every (field, value) pair (RDB, AOF rewrite, DUMP)
//! and [`Hash::from_pairs`] to build one back with the encoding the
//! limits choose.

use rand::Rng;

use crate::compact::CompactBytes;
use crate::dict::Dict;
use crate::listpack::Listpack;
use crate::value::EncodingLimits;

/// Redis's `LISTPACK_MAX_SAFETY_SIZE`: a listpack about to grow past this
/// many bytes becomes a table instead (`lpSafeToAdd`).
const LISTPACK_MAX_SAFETY_SIZE: usize = 1 << 30;

type Table = Dict<CompactBytes, CompactBytes>;

#[derive(Debug, Clone)]
pub enum Hash {
    /// field, value, field, value... in insertion order.
    Listpack(Listpack),
    /// Boxed: a `Dict` is far bigger than a `Value` may be.
    Table(Box<Table>),
}

impl Default for Hash {
    fn default() -> Self {
        Hash::Listpack(Listpack::new())
    }
}

/// Offset of `field`'s entry in a hash listpack (fields are at even
/// positions; a value equal to `field` is never taken for it).
fn listpack_find(lp: &Listpack, field: &[u8]) -> Option<usize> {
    let mut off = lp.first();
    while let Some(f) = off {
        let value = lp.next(f).expect("a hash listpack holds pairs");
        if lp.at(f) == field {
            return Some(f);
        }
        off = lp.next(value);
    }
    None
}

impl Hash {
    /// An empty hash, listpack-encoded as Redis creates them.
    pub fn new() -> Hash {
        Hash::default()
    }

    /// A hash holding `pairs` (a later duplicate field replaces the
    /// earlier one), encoded as if built by HSET under `limits`: for RDB
    /// loading, RESTORE and tests.
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a [u8], &'a [u8])>, limits: &EncodingLimits) -> Hash {
        let mut hash = Hash::new();
        for (field, value) in pairs {
            hash.insert(field, value, limits);
        }
        hash
    }

    pub fn len(&self) -> usize {
        match self {
            Hash::Listpack(lp) => lp.len() / 2,
            Hash::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name OBJECT ENCODING answers.
    pub fn encoding(&self) -> &'static str {
        match self {
            Hash::Listpack(_) => "listpack",
            Hash::Table(_) => "hashtable",
        }
    }

    /// Heap bytes owned (MEMORY USAGE). O(n) for a table: it adds up the
    /// lengths of every field and value.
    pub fn heap_size(&self) -> usize {
        match self {
            Hash::Listpack(lp) => lp.heap_size(),
            Hash::Table(t) => t.memory_usage() + t.iter().map(|(k, v)| k.heap_bytes() + v.heap_bytes()).sum::<usize>(),
        }
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match self {
            Hash::Listpack(lp) => {
                let f = listpack_find(lp, field)?;
                Some(lp.at(lp.next(f).expect("a hash listpack holds pairs")))
            }
            Hash::Table(t) => t.get(field).map(|v| &**v),
        }
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        match self {
            Hash::Listpack(lp) => listpack_find(lp, field).is_some(),
            Hash::Table(t) => t.contains_key(field),
        }
    }

    /// Sets `field` to `value`; true when the field is new. A listpack
    /// becomes a table first if either is longer than
    /// `hash-max-listpack-value`, and after the insert if it then holds
    /// more than `hash-max-listpack-entries` fields (Redis's
    /// `hashTypeSet` and `hashTypeTryConversion`).
    pub fn insert(&mut self, field: &[u8], value: &[u8], limits: &EncodingLimits) -> bool {
        if let Hash::Listpack(lp) = self {
            let max = limits.hash_max_listpack_value;
            if field.len() > max
                || value.len() > max
                || lp.bytes() + field.len() + value.len() > LISTPACK_MAX_SAFETY_SIZE
            {
                self.convert();
            }
        }
        match self {
            Hash::Listpack(lp) => {
                if let Some(f) = listpack_find(lp, field) {
                    let v = lp.next(f).expect("a hash listpack holds pairs");
                    lp.replace_at(v, value);
                    return false;
                }
                lp.insert_many_at(lp.bytes(), &[field, value]);
                if lp.len() / 2 > limits.hash_max_listpack_entries {
                    self.convert();
                }
                true
            }
            Hash::Table(t) => match t.get_mut(field) {
                Some(v) => {
                    *v = value.into();
                    false
                }
                None => {
                    t.insert(field.into(), value.into());
                    true
                }
            },
        }
    }

    /// Removes `field`; true when it was there.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self {
            Hash::Listpack(lp) => match listpack_find(lp, field) {
                Some(f) => {
                    lp.remove_at(f, 2);
                    true
                }
                None => false,
            },
            Hash::Table(t) => t.remove(field).is_some(),
        }
    }

    /// Every (field, value) pair: insertion order for a listpack, table
    /// order otherwise.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let (lp, table) = match self {
            Hash::Listpack(lp) => (Some(lp.iter()), None),
            Hash::Table(t) => (None, Some(t.iter().map(|(k, v)| (&**k, &**v)))),
        };
        let pairs = lp.map(|mut entries| {
            std::iter::from_fn(move || {
                let field = entries.next()?;
                Some((field, entries.next().expect("a hash listpack holds pairs")))
            })
        });
        pairs.into_iter().flatten().chain(table.into_iter().flatten())
    }

    /// A uniformly random pair, or None when empty: O(1) on a table, O(n)
    /// on a listpack (as Redis's `lpRandomPair`).
    pub fn random_pair<R: Rng>(&self, rng: &mut R) -> Option<(&[u8], &[u8])> {
        match self {
            Hash::Listpack(_) => {
                let len = self.len();
                if len == 0 {
                    return None;
                }
                self.iter().nth(rng.gen_range(0..len))
            }
            Hash::Table(t) => t.random_entry(rng).map(|(k, v)| (&**k, &**v)),
        }
    }

    /// One HSCAN step from `cursor`: passes pairs to `f` and returns the
    /// next cursor (0 at the end). A listpack is small, so it answers
    /// everything at once with cursor 0, as Redis does; a table uses the
    /// reverse-binary cursor of [`Dict::scan`], one bucket per call.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&[u8], &[u8])) -> u64 {
        match self {
            Hash::Listpack(_) => {
                self.iter().for_each(|(k, v)| f(k, v));
                0
            }
            Hash::Table(t) => t.scan(cursor, |k, v| f(k, v)),
        }
    }

    /// Listpack to table (one way, as in Redis).
    fn convert(&mut self) {
        if let Hash::Listpack(lp) = self {
            let mut table = Table::default();
            let mut entries = lp.iter();
            while let (Some(field), Some(value)) = (entries.next(), entries.next()) {
                table.insert(field.into(), value.into());
            }
            *self = Hash::Table(Box::new(table));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn limits(entries: usize, value: usize) -> EncodingLimits {
        EncodingLimits { hash_max_listpack_entries: entries, hash_max_listpack_value: value, ..Default::default() }
    }

    fn pairs(h: &Hash) -> Vec<(Vec<u8>, Vec<u8>)> {
        h.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
    }

    #[test]
    fn fits_in_a_value() {
        assert!(std::mem::size_of::<Hash>() <= 24);
    }

    #[test]
    fn listpack_keeps_insertion_order_and_updates_in_place() {
        let l = limits(128, 64);
        let mut h = Hash::new();
        assert!(h.insert(b"a", b"1", &l));
        assert!(h.insert(b"b", b"a", &l));
        assert!(h.insert(b"c", b"3", &l));
        assert!(!h.insert(b"a", b"one", &l));
        assert_eq!(h.encoding(), "listpack");
        assert_eq!(pairs(&h), vec![
            (b"a".to_vec(), b"one".to_vec()),
            (b"b".to_vec(), b"a".to_vec()),
            (b"c".to_vec(), b"3".to_vec())
        ]);
        // A value equal to a field name is not a field.
        assert!(h.insert(b"1", b"x", &l));
        assert_eq!(h.get(b"a"), Some(&b"one"[..]));
        assert_eq!(h.get(b"1"), Some(&b"x"[..]));
        assert_eq!(h.get(b"3"), None);
        assert!(h.remove(b"b"));
        assert!(!h.remove(b"b"));
        assert!(!h.contains(b"b"));
        assert_eq!(h.len(), 3);
    }

    #[test]
    fn converts_on_count_and_length_one_way() {
        let l = limits(2, 4);
        let mut h = Hash::new();
        h.insert(b"a", b"1", &l);
        h.insert(b"b", b"2", &l);
        assert_eq!(h.encoding(), "listpack");
        h.insert(b"c", b"3", &l);
        assert_eq!(h.encoding(), "hashtable");
        h.remove(b"c");
        h.remove(b"b");
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(h.get(b"a"), Some(&b"1"[..]));

        let mut long_value = Hash::new();
        long_value.insert(b"a", b"1234", &l);
        assert_eq!(long_value.encoding(), "listpack");
        long_value.insert(b"a", b"12345", &l);
        assert_eq!(long_value.encoding(), "hashtable");
        let mut long_field = Hash::new();
        long_field.insert(b"abcde", b"", &l);
        assert_eq!(long_field.encoding(), "hashtable");
        assert_eq!(Hash::from_pairs([(&b"x"[..], &b"y"[..])], &limits(0, 64)).encoding(), "hashtable");
    }

    #[test]
    fn scan_of_a_listpack_is_one_call() {
        let l = limits(128, 64);
        let h = Hash::from_pairs([(&b"a"[..], &b"1"[..]), (b"b", b"2")], &l);
        let mut seen = Vec::new();
        assert_eq!(h.scan(0, |k, v| seen.push((k.to_vec(), v.to_vec()))), 0);
        assert_eq!(seen, pairs(&h));
    }

    #[test]
    fn scan_of_a_table_sees_everything() {
        let l = limits(4, 64);
        let fields: Vec<String> = (0..500).map(|i| format!("f{i}")).collect();
        let h = Hash::from_pairs(fields.iter().map(|f| (f.as_bytes(), f.as_bytes())), &l);
        let mut seen = std::collections::HashSet::new();
        let mut cursor = 0;
        loop {
            cursor = h.scan(cursor, |k, v| {
                assert_eq!(k, v);
                seen.insert(k.to_vec());
            });
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(seen.len(), 500);
    }

    #[test]
    fn random_pairs_are_members() {
        let mut rng = rand::thread_rng();
        for l in [limits(128, 64), limits(1, 64)] {
            let h = Hash::from_pairs([(&b"a"[..], &b"1"[..]), (b"b", b"2"), (b"c", b"3")], &l);
            let mut seen = std::collections::HashSet::new();
            for _ in 0..200 {
                let (k, v) = h.random_pair(&mut rng).expect("non-empty");
                assert_eq!(h.get(k), Some(v));
                seen.insert(k.to_vec());
            }
            assert_eq!(seen.len(), 3);
        }
        assert!(Hash::new().random_pair(&mut rng).is_none());
    }

    fn bytes() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => prop::collection::vec(b'a'..b'f', 0..3),
            1 => prop::collection::vec(any::<u8>(), 0..12),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_model(
            entries in 0usize..6,
            value in 0usize..8,
            ops in prop::collection::vec((0u8..3, bytes(), bytes()), 0..60),
        ) {
            let l = limits(entries, value);
            let mut h = Hash::new();
            // The listpack's order is insertion order: model it as a Vec.
            let mut model: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
            let mut big = false;
            for (op, field, val) in ops {
                match op {
                    0 | 1 => {
                        let new = !model.iter().any(|(k, _)| *k == field);
                        prop_assert_eq!(h.insert(&field, &val, &l), new);
                        big |= field.len() > value || val.len() > value;
                        match model.iter_mut().find(|(k, _)| *k == field) {
                            Some(pair) => pair.1 = val,
                            None => model.push((field, val)),
                        }
                        big |= model.len() > entries;
                    }
                    _ => {
                        let had = model.iter().position(|(k, _)| *k == field);
                        prop_assert_eq!(h.remove(&field), had.is_some());
                        if let Some(i) = had { model.remove(i); }
                    }
                }
                prop_assert_eq!(h.len(), model.len());
                prop_assert_eq!(h.encoding(), if big { "hashtable" } else { "listpack" });
                if big {
                    let got: HashMap<_, _> = pairs(&h).into_iter().collect();
                    let want: HashMap<_, _> = model.iter().cloned().collect();
                    prop_assert_eq!(got, want);
                } else {
                    prop_assert_eq!(pairs(&h), model.clone());
                }
                for (k, v) in &model {
                    prop_assert_eq!(h.get(k), Some(&v[..]));
                }
            }
        }
    }
}
