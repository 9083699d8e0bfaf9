//! Sets, in Redis 7.0's two encodings:
//!
//! - `intset` ([`IntSet`]) while every member is a canonical 64-bit integer
//!   and there are at most `set-max-intset-entries`: a sorted array of the
//!   integers at the narrowest width (16, 32 or 64 bits) that holds them
//!   all, so that small integer sets cost 2 bytes a member.
//! - `hashtable`: a [`Dict`] of the members' bytes.
//!
//! Conversion goes one way (intset to table), as in Redis: a table stays a
//! table even if removals leave it with integers only.
//!
//! # For other code (SORT, RDB, DUMP)
//!
//! - [`Set::iter`] yields every member once as a [`Member`]: intset members
//!   as [`Member::Int`] (their decimal text is the member), table members as
//!   [`Member::Bytes`]. `Member::as_bytes`/`to_vec` give the text. Intset
//!   iteration is in ascending order; table order is unspecified.
//! - [`Set::contains`], [`Set::len`], [`Set::random`] (uniform, O(1)).
//! - [`Set::insert`] with the `set-max-intset-entries` limit, and
//!   [`Set::from_members`] to build a whole set (choosing the encoding as
//!   Redis would for the same members added one by one).

use std::hash::{Hash, Hasher};

use rand::Rng;

use crate::compact::CompactBytes;
use crate::dict::Dict;
use crate::value::parse_canonical_i64;

/// Redis caps an intset at 2^30 entries whatever the directive says.
const INTSET_MAX_ENTRIES: usize = 1 << 30;

/// A member as a set yields it. Equality and hashing are by the member's
/// text: `Int(5)` equals `Bytes(b"5")`, so members of sets in different
/// encodings can be compared and deduplicated together.
#[derive(Debug, Clone, Copy)]
pub enum Member<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

impl<'a> Member<'a> {
    /// The integer form when the text is a canonical integer.
    pub fn canonical(self) -> Member<'a> {
        match self {
            Member::Bytes(b) => parse_canonical_i64(b).map_or(self, Member::Int),
            int => int,
        }
    }

    /// The member's text; integers are formatted into `scratch`.
    pub fn as_bytes<'b>(&'b self, scratch: &'b mut itoa::Buffer) -> &'b [u8] {
        match self {
            Member::Int(i) => scratch.format(*i).as_bytes(),
            Member::Bytes(b) => b,
        }
    }

    pub fn to_vec(&self) -> Vec<u8> {
        self.as_bytes(&mut itoa::Buffer::new()).to_vec()
    }
}

impl PartialEq for Member<'_> {
    fn eq(&self, other: &Self) -> bool {
        match (*self, *other) {
            (Member::Int(a), Member::Int(b)) => a == b,
            (Member::Bytes(a), Member::Bytes(b)) => a == b,
            (Member::Int(i), Member::Bytes(b)) | (Member::Bytes(b), Member::Int(i)) => {
                parse_canonical_i64(b) == Some(i)
            }
        }
    }
}

impl Eq for Member<'_> {}

impl Hash for Member<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self.canonical() {
            Member::Int(i) => {
                state.write_u8(0);
                state.write_i64(i);
            }
            Member::Bytes(b) => {
                state.write_u8(1);
                b.hash(state);
            }
        }
    }
}

/// Bytes per element needed to hold `v`.
fn width_for(v: i64) -> usize {
    if i16::try_from(v).is_ok() {
        2
    } else if i32::try_from(v).is_ok() {
        4
    } else {
        8
    }
}

/// Reads a little-endian integer of `bytes.len()` (2, 4 or 8) bytes.
fn read_int(bytes: &[u8]) -> i64 {
    match *bytes {
        [a, b] => i64::from(i16::from_le_bytes([a, b])),
        [a, b, c, d] => i64::from(i32::from_le_bytes([a, b, c, d])),
        [a, b, c, d, e, f, g, h] => i64::from_le_bytes([a, b, c, d, e, f, g, h]),
        _ => unreachable!("intset width is 2, 4 or 8"),
    }
}

/// Writes `v` little-endian into `dst` (2, 4 or 8 bytes, wide enough).
fn write_int(dst: &mut [u8], v: i64) {
    match dst.len() {
        2 => dst.copy_from_slice(&(v as i16).to_le_bytes()),
        4 => dst.copy_from_slice(&(v as i32).to_le_bytes()),
        _ => dst.copy_from_slice(&v.to_le_bytes()),
    }
}

/// Redis's intset: distinct integers, sorted, all at one width. The first
/// byte of the buffer is the width in bytes (2, 4 or 8), then the elements
/// little-endian; an empty set owns no buffer. Keeping the width inside the
/// buffer keeps `IntSet` one `Vec` (24 bytes), so that a `Value` stays 32.
///
/// Like Redis, inserts and removals move the tail (O(n)) and the width only
/// grows; the buffer is sized exactly, as Redis reallocates it per change.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntSet {
    buf: Vec<u8>,
}

impl IntSet {
    pub fn new() -> IntSet {
        IntSet::default()
    }

    /// Builds an intset from sorted, distinct values.
    pub fn from_sorted(values: &[i64]) -> IntSet {
        debug_assert!(values.windows(2).all(|w| w[0] < w[1]), "from_sorted needs sorted distinct values");
        let (Some(&first), Some(&last)) = (values.first(), values.last()) else {
            return IntSet::new();
        };
        let width = width_for(first).max(width_for(last));
        let mut buf = vec![0u8; 1 + values.len() * width];
        buf[0] = width as u8;
        for (slot, &v) in buf[1..].chunks_exact_mut(width).zip(values) {
            write_int(slot, v);
        }
        IntSet { buf }
    }

    /// Bytes per element.
    pub fn width(&self) -> usize {
        self.buf.first().map_or(2, |&w| usize::from(w))
    }

    pub fn len(&self) -> usize {
        self.buf.len().saturating_sub(1) / self.width()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The `i`-th smallest element.
    pub fn get(&self, i: usize) -> i64 {
        let w = self.width();
        read_int(&self.buf[1 + i * w..1 + (i + 1) * w])
    }

    /// Where `v` is, or where it would go.
    fn search(&self, v: i64) -> Result<usize, usize> {
        let len = self.len();
        if width_for(v) > self.width() {
            // Wider than every element: below them all or above them all.
            return Err(if v < 0 { 0 } else { len });
        }
        let (mut lo, mut hi) = (0, len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid).cmp(&v) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    pub fn contains(&self, v: i64) -> bool {
        self.search(v).is_ok()
    }

    /// Adds `v`; false if it was there.
    pub fn insert(&mut self, v: i64) -> bool {
        let need = width_for(v);
        if self.buf.is_empty() {
            self.buf.reserve_exact(1 + need);
            self.buf.push(need as u8);
            self.buf.resize(1 + need, 0);
            write_int(&mut self.buf[1..], v);
            return true;
        }
        if need > self.width() {
            self.upgrade(need);
        }
        let Err(i) = self.search(v) else { return false };
        let w = self.width();
        let at = 1 + i * w;
        let old_len = self.buf.len();
        self.buf.reserve_exact(w);
        self.buf.resize(old_len + w, 0);
        self.buf.copy_within(at..old_len, at + w);
        write_int(&mut self.buf[at..at + w], v);
        true
    }

    /// Re-encodes every element at `width` bytes.
    fn upgrade(&mut self, width: usize) {
        let len = self.len();
        let mut buf = Vec::with_capacity(1 + (len + 1) * width);
        buf.push(width as u8);
        for v in self.iter() {
            let at = buf.len();
            buf.resize(at + width, 0);
            write_int(&mut buf[at..], v);
        }
        self.buf = buf;
    }

    /// Removes `v`; false if it was not there.
    pub fn remove(&mut self, v: i64) -> bool {
        match self.search(v) {
            Ok(i) => {
                self.remove_at(i);
                true
            }
            Err(_) => false,
        }
    }

    /// Removes the `i`-th smallest element and returns it.
    pub fn remove_at(&mut self, i: usize) -> i64 {
        let v = self.get(i);
        let w = self.width();
        self.buf.drain(1 + i * w..1 + (i + 1) * w);
        if self.buf.len() == 1 {
            self.buf = Vec::new();
        } else if self.buf.capacity() >= 2 * self.buf.len() {
            self.buf.shrink_to_fit();
        }
        v
    }

    /// Keeps the elements whose index is not in `sorted_indexes` (sorted,
    /// distinct): one pass, however many go.
    fn remove_indexes(&mut self, sorted_indexes: &[usize]) {
        let kept: Vec<i64> = {
            let mut drop = sorted_indexes.iter().peekable();
            self.iter()
                .enumerate()
                .filter(|(i, _)| {
                    let hit = drop.peek() == Some(&i);
                    if hit {
                        drop.next();
                    }
                    !hit
                })
                .map(|(_, v)| v)
                .collect()
        };
        *self = IntSet::from_sorted(&kept);
    }

    /// The elements in ascending order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = i64> + '_ {
        let w = self.width();
        self.buf.get(1..).unwrap_or_default().chunks_exact(w).map(read_int)
    }

    pub fn heap_size(&self) -> usize {
        self.buf.capacity()
    }
}

type Table = Dict<CompactBytes, ()>;

#[derive(Debug, Clone)]
pub enum Set {
    Intset(IntSet),
    Table(Box<Table>),
}

impl Default for Set {
    fn default() -> Self {
        Set::Intset(IntSet::new())
    }
}

/// The effective `set-max-intset-entries`.
fn intset_limit(max_intset_entries: usize) -> usize {
    max_intset_entries.min(INTSET_MAX_ENTRIES)
}

fn table_of_ints(values: impl Iterator<Item = i64>) -> Box<Table> {
    let mut table = Box::new(Table::new());
    let mut buf = itoa::Buffer::new();
    for v in values {
        table.insert(buf.format(v).as_bytes().into(), ());
    }
    table
}

impl Set {
    pub fn len(&self) -> usize {
        match self {
            Set::Intset(s) => s.len(),
            Set::Table(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name OBJECT ENCODING answers.
    pub fn encoding(&self) -> &'static str {
        match self {
            Set::Intset(_) => "intset",
            Set::Table(_) => "hashtable",
        }
    }

    pub fn heap_size(&self) -> usize {
        match self {
            Set::Intset(s) => s.heap_size(),
            Set::Table(t) => t.memory_usage() + t.iter().map(|(k, _)| k.heap_bytes()).sum::<usize>(),
        }
    }

    /// Builds a set of `members` (distinct), in the encoding Redis would
    /// reach by adding them one by one to an empty intset: `intset` if all
    /// are integers and they are at most `max_intset_entries`. O(n log n).
    pub fn from_members<'a>(members: impl IntoIterator<Item = Member<'a>>, max_intset_entries: usize) -> Set {
        let mut members = members.into_iter();
        let mut ints = Vec::new();
        while let Some(m) = members.next() {
            match m.canonical() {
                Member::Int(v) => ints.push(v),
                Member::Bytes(b) => {
                    let mut table = table_of_ints(ints.into_iter());
                    table.insert(b.into(), ());
                    for m in members {
                        table.insert(m.to_vec().into(), ());
                    }
                    return Set::Table(table);
                }
            }
        }
        ints.sort_unstable();
        ints.dedup();
        if ints.len() <= intset_limit(max_intset_entries) {
            Set::Intset(IntSet::from_sorted(&ints))
        } else {
            Set::Table(table_of_ints(ints.into_iter()))
        }
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        match self {
            Set::Intset(s) => parse_canonical_i64(member).is_some_and(|v| s.contains(v)),
            Set::Table(t) => t.contains_key(member),
        }
    }

    /// [`Set::contains`] for a member of another set, without formatting
    /// integers when both are intsets.
    pub fn contains_member(&self, member: Member<'_>) -> bool {
        match (self, member) {
            (Set::Intset(s), Member::Int(v)) => s.contains(v),
            (_, m) => self.contains(m.as_bytes(&mut itoa::Buffer::new())),
        }
    }

    /// Adds `member`; false if it was there. Converts to a table when the
    /// member is not an integer or the intset would pass
    /// `max_intset_entries` (`set-max-intset-entries`).
    pub fn insert(&mut self, member: &[u8], max_intset_entries: usize) -> bool {
        match self {
            Set::Intset(s) => match parse_canonical_i64(member) {
                Some(v) => {
                    if !s.insert(v) {
                        return false;
                    }
                    if s.len() > intset_limit(max_intset_entries) {
                        self.convert_to_table();
                    }
                    true
                }
                None => {
                    self.convert_to_table();
                    self.insert(member, max_intset_entries)
                }
            },
            Set::Table(t) => t.entry_or_insert_with(member, || member.into(), || ()).1,
        }
    }

    fn convert_to_table(&mut self) {
        if let Set::Intset(s) = self {
            *self = Set::Table(table_of_ints(s.iter()));
        }
    }

    /// Removes `member`; false if it was not there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self {
            Set::Intset(s) => parse_canonical_i64(member).is_some_and(|v| s.remove(v)),
            Set::Table(t) => t.remove(member).is_some(),
        }
    }

    /// Every member once: ascending for an intset, unspecified for a table.
    pub fn iter(&self) -> impl Iterator<Item = Member<'_>> + '_ {
        let (ints, table) = match self {
            Set::Intset(s) => (Some(s.iter()), None),
            Set::Table(t) => (None, Some(t.iter())),
        };
        ints.into_iter()
            .flatten()
            .map(Member::Int)
            .chain(table.into_iter().flatten().map(|(k, ())| Member::Bytes(k)))
    }

    /// One SSCAN step: calls `f` for some members and returns the next
    /// cursor (0: done). An intset is returned whole in one call, as Redis
    /// does; a table follows [`Dict::scan`]'s guarantees.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(Member<'_>)) -> u64 {
        match self {
            Set::Intset(s) => {
                s.iter().for_each(|v| f(Member::Int(v)));
                0
            }
            Set::Table(t) => t.scan(cursor, |k, ()| f(Member::Bytes(k))),
        }
    }

    /// A uniformly random member in O(1), or None if empty.
    pub fn random<R: Rng>(&self, rng: &mut R) -> Option<Member<'_>> {
        match self {
            Set::Intset(s) if s.is_empty() => None,
            Set::Intset(s) => Some(Member::Int(s.get(rng.gen_range(0..s.len())))),
            Set::Table(t) => t.random_entry(rng).map(|(k, ())| Member::Bytes(k)),
        }
    }

    /// `count` distinct members chosen uniformly (all of them, in
    /// iteration order, if `count >= len`). O(count) expected, O(len) when
    /// `count` is more than a third of a table (then the members are
    /// listed and a random part of them kept, as Redis's SRANDMEMBER does).
    pub fn random_distinct<R: Rng>(&self, count: usize, rng: &mut R) -> Vec<Member<'_>> {
        let len = self.len();
        if count >= len {
            return self.iter().collect();
        }
        match self {
            Set::Intset(s) => {
                rand::seq::index::sample(rng, len, count).into_iter().map(|i| Member::Int(s.get(i))).collect()
            }
            Set::Table(t) if count.saturating_mul(3) > len => {
                let mut all: Vec<&[u8]> = t.iter().map(|(k, ())| &k[..]).collect();
                let (chosen, _) = rand::seq::SliceRandom::partial_shuffle(&mut all[..], rng, count);
                chosen.iter().map(|k| Member::Bytes(k)).collect()
            }
            Set::Table(t) => {
                let mut seen: std::collections::HashSet<&[u8], foldhash::fast::RandomState> = Default::default();
                let mut out = Vec::with_capacity(count);
                while out.len() < count {
                    let Some((k, ())) = t.random_entry(rng) else { break };
                    if seen.insert(&k[..]) {
                        out.push(Member::Bytes(&k[..]));
                    }
                }
                out
            }
        }
    }

    /// Removes a uniformly random member and returns its text.
    pub fn pop_random<R: Rng>(&mut self, rng: &mut R) -> Option<Vec<u8>> {
        match self {
            Set::Intset(s) if s.is_empty() => None,
            Set::Intset(s) => {
                let v = s.remove_at(rng.gen_range(0..s.len()));
                Some(itoa::Buffer::new().format(v).as_bytes().to_vec())
            }
            Set::Table(t) => {
                let key = t.random_entry(rng).map(|(k, ())| k.clone())?;
                t.remove(&key[..]);
                Some(key.into_vec())
            }
        }
    }

    /// Removes `count` distinct members chosen uniformly (at most all of
    /// them) and returns their texts. O(count) for a table; one O(len)
    /// rebuild for an intset, however many go.
    pub fn pop_random_many<R: Rng>(&mut self, count: usize, rng: &mut R) -> Vec<Vec<u8>> {
        let count = count.min(self.len());
        match self {
            Set::Intset(s) => {
                let mut picked = rand::seq::index::sample(rng, s.len(), count).into_vec();
                let mut buf = itoa::Buffer::new();
                let popped = picked.iter().map(|&i| buf.format(s.get(i)).as_bytes().to_vec()).collect();
                picked.sort_unstable();
                s.remove_indexes(&picked);
                popped
            }
            Set::Table(_) => (0..count).filter_map(|_| self.pop_random(rng)).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;
    use std::collections::{BTreeSet, HashMap, HashSet};

    fn members(set: &Set) -> BTreeSet<Vec<u8>> {
        set.iter().map(|m| m.to_vec()).collect()
    }

    /// Checks the intset invariants: sorted, distinct, narrowest width
    /// reached by growth only (so at least what the extremes need).
    fn check(set: &Set) {
        if let Set::Intset(s) = set {
            let v: Vec<i64> = s.iter().collect();
            assert!(v.windows(2).all(|w| w[0] < w[1]), "{v:?}");
            assert_eq!(v.len(), s.len());
            if let (Some(&a), Some(&b)) = (v.first(), v.last()) {
                assert!(s.width() >= width_for(a).max(width_for(b)));
                assert_eq!(s.buf.len(), 1 + v.len() * s.width());
            } else {
                assert!(s.buf.is_empty());
            }
        }
    }

    #[test]
    fn intset_widths_grow_and_elements_stay_sorted() {
        let mut s = IntSet::new();
        assert!(s.insert(5));
        assert_eq!(s.width(), 2);
        assert!(!s.insert(5));
        assert!(s.insert(-3));
        assert!(s.insert(70_000));
        assert_eq!(s.width(), 4);
        assert!(s.insert(i64::MIN));
        assert_eq!(s.width(), 8);
        assert!(s.insert(i64::MAX));
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![i64::MIN, -3, 5, 70_000, i64::MAX]);
        assert!(s.contains(70_000) && !s.contains(70_001) && !s.contains(1 << 40));
        assert!(s.remove(i64::MIN) && !s.remove(i64::MIN));
        // The width never shrinks, as in Redis.
        assert_eq!(s.width(), 8);
        assert_eq!(s.heap_size(), s.buf.capacity());
        for v in [-3, 5, 70_000, i64::MAX] {
            assert!(s.remove(v));
        }
        assert!(s.is_empty() && s.buf.capacity() == 0);
        assert_eq!(IntSet::from_sorted(&[-40_000, 1, 2]).width(), 4);
        assert_eq!(IntSet::from_sorted(&[]).len(), 0);
    }

    #[test]
    fn small_integer_sets_cost_two_bytes_a_member() {
        let mut set = Set::default();
        for i in 0..500 {
            set.insert(i.to_string().as_bytes(), 512);
        }
        assert_eq!(set.encoding(), "intset");
        assert!(set.heap_size() <= 1 + 500 * 2 + 16, "{}", set.heap_size());
    }

    #[test]
    fn encodings_convert_as_redis_does() {
        let mut set = Set::default();
        assert!(set.insert(b"1", 3));
        assert!(set.insert(b"2", 3));
        assert!(set.insert(b"3", 3));
        assert_eq!(set.encoding(), "intset");
        assert!(set.insert(b"4", 3));
        assert_eq!(set.encoding(), "hashtable");
        // Never back.
        set.remove(b"4");
        assert_eq!(set.encoding(), "hashtable");

        let mut set = Set::default();
        set.insert(b"1", 512);
        assert!(set.insert(b"a", 512));
        assert_eq!(set.encoding(), "hashtable");
        assert!(set.contains(b"1") && set.contains(b"a"));

        // Not canonical integers: strings.
        for text in ["01", "+1", " 1", "-0", "9223372036854775808", "1.0"] {
            let mut set = Set::default();
            set.insert(text.as_bytes(), 512);
            assert_eq!(set.encoding(), "hashtable", "{text}");
        }
        let mut set = Set::default();
        set.insert(b"1", 0);
        assert_eq!(set.encoding(), "hashtable", "set-max-intset-entries 0");
    }

    #[test]
    fn from_members_picks_the_encoding_of_one_by_one_insertion() {
        let ints = [Member::Int(3), Member::Bytes(b"1"), Member::Int(2)];
        let set = Set::from_members(ints, 3);
        assert_eq!(set.encoding(), "intset");
        assert_eq!(set.iter().collect::<Vec<_>>(), vec![Member::Int(1), Member::Int(2), Member::Int(3)]);
        assert_eq!(Set::from_members(ints, 2).encoding(), "hashtable");
        assert_eq!(Set::from_members(ints, 2).len(), 3);
        let mixed = Set::from_members([Member::Int(3), Member::Bytes(b"x"), Member::Int(4)], 512);
        assert_eq!(mixed.encoding(), "hashtable");
        assert_eq!(members(&mixed), [b"3".to_vec(), b"4".to_vec(), b"x".to_vec()].into());
        assert!(Set::from_members([], 512).is_empty());
    }

    #[test]
    fn members_compare_by_text() {
        assert_eq!(Member::Int(5), Member::Bytes(b"5"));
        assert_ne!(Member::Int(5), Member::Bytes(b"05"));
        let set: HashSet<Member<'_>> = [Member::Int(-7), Member::Bytes(b"-7"), Member::Bytes(b"x")].into();
        assert_eq!(set.len(), 2);
        let table = Set::from_members([Member::Bytes(b"a"), Member::Int(7)], 512);
        let ints = Set::from_members([Member::Int(7)], 512);
        assert!(table.contains_member(Member::Int(7)));
        assert!(ints.contains_member(Member::Bytes(b"7")));
        assert!(!ints.contains_member(Member::Bytes(b"a")));
    }

    #[test]
    fn random_draws_are_uniform_and_distinct() {
        let mut rng = SmallRng::seed_from_u64(1);
        for encoding_limit in [512, 0] {
            let set = Set::from_members((0..10).map(Member::Int), encoding_limit);
            let mut hist: HashMap<Vec<u8>, usize> = HashMap::new();
            for _ in 0..20_000 {
                *hist.entry(set.random(&mut rng).unwrap().to_vec()).or_default() += 1;
            }
            assert_eq!(hist.len(), 10);
            assert!(hist.values().all(|&n| (1700..2300).contains(&n)), "{hist:?}");
            for count in [0, 1, 2, 5, 9, 10, 20] {
                let picked = set.random_distinct(count, &mut rng);
                let distinct: HashSet<_> = picked.iter().copied().collect();
                assert_eq!(picked.len(), count.min(10));
                assert_eq!(distinct.len(), picked.len());
                assert!(picked.iter().all(|&m| set.contains_member(m)));
            }
        }
        assert!(Set::default().random(&mut rng).is_none());
    }

    #[test]
    fn pops_remove_what_they_return() {
        let mut rng = SmallRng::seed_from_u64(2);
        for limit in [512, 0] {
            let mut set = Set::from_members((0..100).map(Member::Int), limit);
            let mut left: BTreeSet<Vec<u8>> = members(&set);
            let one = set.pop_random(&mut rng).unwrap();
            assert!(left.remove(&one));
            for count in [3, 50, 0, 100] {
                for m in set.pop_random_many(count, &mut rng) {
                    assert!(left.remove(&m), "popped twice");
                }
                assert_eq!(members(&set), left);
                check(&set);
            }
            assert!(set.is_empty());
            assert!(set.pop_random(&mut rng).is_none());
        }
    }

    #[test]
    fn scan_returns_intsets_whole_and_tables_by_cursor() {
        let ints = Set::from_members((0..100).map(Member::Int), 512);
        let mut n = 0;
        assert_eq!(ints.scan(0, |_| n += 1), 0);
        assert_eq!(n, 100);
        let table = Set::from_members((0..1000).map(Member::Int), 10);
        let mut seen = BTreeSet::new();
        let mut cursor = 0;
        loop {
            cursor = table.scan(cursor, |m| {
                seen.insert(m.to_vec());
            });
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(seen, members(&table));
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(Vec<u8>),
        Remove(Vec<u8>),
        Pop,
        PopMany(usize),
    }

    fn member() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            4 => (-300i64..300).prop_map(|i| i.to_string().into_bytes()),
            1 => prop_oneof![Just(i64::MIN), Just(i64::MAX), -100_000i64..100_000, any::<i64>()]
                .prop_map(|i| i.to_string().into_bytes()),
            1 => "[a-c0-9]{0,3}".prop_map(String::into_bytes),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => member().prop_map(Op::Insert),
            3 => member().prop_map(Op::Remove),
            1 => Just(Op::Pop),
            1 => (0usize..10).prop_map(Op::PopMany),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_set_of_texts(ops in proptest::collection::vec(op(), 1..400), limit in 0usize..40) {
            let mut rng = SmallRng::seed_from_u64(3);
            let mut set = Set::default();
            let mut model: BTreeSet<Vec<u8>> = BTreeSet::new();
            let mut was_table = false;
            for op in ops {
                match op {
                    Op::Insert(m) => prop_assert_eq!(set.insert(&m, limit), model.insert(m)),
                    Op::Remove(m) => prop_assert_eq!(set.remove(&m), model.remove(&m)),
                    Op::Pop => match set.pop_random(&mut rng) {
                        Some(m) => prop_assert!(model.remove(&m)),
                        None => prop_assert!(model.is_empty()),
                    },
                    Op::PopMany(n) => {
                        let popped = set.pop_random_many(n, &mut rng);
                        prop_assert_eq!(popped.len(), n.min(model.len()));
                        for m in popped {
                            prop_assert!(model.remove(&m));
                        }
                    }
                }
                check(&set);
                prop_assert_eq!(set.len(), model.len());
                let all_ints = model.iter().all(|m| parse_canonical_i64(m).is_some());
                // One way only: a table never goes back to an intset.
                if was_table {
                    prop_assert_eq!(set.encoding(), "hashtable");
                } else if set.encoding() == "intset" {
                    prop_assert!(all_ints && model.len() <= limit);
                }
                was_table = set.encoding() == "hashtable";
            }
            prop_assert_eq!(members(&set), model.clone());
            for m in &model {
                prop_assert!(set.contains(m));
            }
            let rebuilt = Set::from_members(set.iter(), limit);
            prop_assert_eq!(members(&rebuilt), model.clone());
            let all_ints = model.iter().all(|m| parse_canonical_i64(m).is_some());
            prop_assert_eq!(rebuilt.encoding() == "intset", all_ints && model.len() <= limit);
        }
    }
}
