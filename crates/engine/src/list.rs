//! Lists: Redis 7.0's quicklist, a deque of listpack nodes, each bounded
//! by `list-max-listpack-size` (the list's `fill`, fixed when the list is
//! created, as in Redis):
//!
//! - positive: at most that many entries per node, and never more than
//!   8 KiB (Redis's `SIZE_SAFETY_LIMIT`) unless the node holds one entry;
//! - -1..-5: at most 4, 8, 16, 32 or 64 KiB per node (values below -5
//!   count as -5, above 32767 as 32767, as `quicklistSetFill` clamps them).
//!
//! A node always holds at least one entry, so an entry bigger than the
//! limit gets a node of its own. So does an entry of at least the packed
//! threshold (Redis's `packed_threshold`, 1 GiB unless DEBUG
//! QUICKLIST-PACKED-THRESHOLD lowers it), whatever the fill: Redis keeps
//! such an entry in a "plain" node, outside any listpack, and never
//! merges that node with another; here the node is a listpack of that one
//! entry, with the same rule. Redis 7.0 reports every list as
//! `quicklist` whatever its size, so there is no small-to-big conversion.
//!
//! `list-compress-depth` is accepted by the configuration but not applied:
//! nodes are never LZF-compressed here. Compression trades CPU for memory
//! on the inner nodes of long lists and changes no reply.
//!
//! Costs: push and pop at either end touch one node (O(node size));
//! indexing walks nodes from the nearer end and then entries within one
//! node; removing a range drops whole nodes without touching their
//! entries. The total length is cached, so `len` is O(1).

use std::sync::atomic::{AtomicUsize, Ordering};

use thin_vec::ThinVec;

use crate::listpack::{self, Listpack};

/// Redis's default `packed_threshold`: 1 GiB.
const DEFAULT_PACKED_THRESHOLD: usize = 1 << 30;

/// Entries of at least this many bytes get a node of their own (Redis's
/// `packed_threshold`, one for the whole server as in Redis).
static PACKED_THRESHOLD: AtomicUsize = AtomicUsize::new(DEFAULT_PACKED_THRESHOLD);

/// Sets the packed threshold as DEBUG QUICKLIST-PACKED-THRESHOLD does
/// (Redis's `quicklistisSetPackedThreshold`): 0 restores the default;
/// false, and nothing changed, for more than 4 GiB less 1 MiB.
pub fn set_packed_threshold(bytes: u64) -> bool {
    if bytes > (1 << 32) - (1 << 20) {
        return false;
    }
    let bytes = if bytes == 0 { DEFAULT_PACKED_THRESHOLD } else { bytes as usize };
    PACKED_THRESHOLD.store(bytes, Ordering::Relaxed);
    true
}

/// Redis's `isLargeElement`: an entry that must be alone in its node.
fn is_large(data: &[u8]) -> bool {
    data.len() >= PACKED_THRESHOLD.load(Ordering::Relaxed)
}

/// A node holding one large entry (Redis's plain node), which takes no
/// other entry.
fn is_plain(node: &Listpack) -> bool {
    node.len() == 1 && node.bytes() > PACKED_THRESHOLD.load(Ordering::Relaxed) && node.first().is_some_and(|at| is_large(node.at(at)))
}

/// Redis's `SIZE_SAFETY_LIMIT`: a node limited by count still stays
/// within this many bytes.
const SIZE_SAFETY_LIMIT: usize = 8192;

/// Node byte limits for fill -1..-5 (Redis's `optimization_level`).
const OPTIMIZATION_LEVEL: [usize; 5] = [4096, 8192, 16384, 32768, 65536];

/// Largest positive fill (Redis's `FILL_MAX`).
const FILL_MAX: i64 = (1 << 15) - 1;

/// The default `list-max-listpack-size`.
pub const DEFAULT_FILL: i64 = -2;

#[derive(Debug, Clone)]
pub struct List {
    /// One pointer to one allocation (length, capacity, nodes), so that a
    /// `Value` stays 32 bytes and a one-node list (most lists) costs one
    /// small allocation besides its listpack, where a boxed `VecDeque`
    /// costs two and about 80 bytes more. Pushing a node at the front
    /// moves the others, which happens once per node's worth of pushes.
    /// Never holds an empty node.
    nodes: ThinVec<Listpack>,
    /// Entries in all nodes.
    len: usize,
    /// `list-max-listpack-size` at creation, clamped to -5..=FILL_MAX.
    fill: i16,
}

impl Default for List {
    fn default() -> Self {
        List::new(DEFAULT_FILL)
    }
}

impl List {
    /// An empty list whose nodes are bounded by `fill`
    /// (`list-max-listpack-size`).
    pub fn new(fill: i64) -> List {
        let fill = fill.clamp(-(OPTIMIZATION_LEVEL.len() as i64), FILL_MAX) as i16;
        List { nodes: ThinVec::new(), len: 0, fill }
    }

    /// Number of entries, O(1).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of listpack nodes, O(1) (Redis's `ql->len`, the free effort
    /// of a list).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }

    /// Heap bytes owned (O(nodes)).
    pub fn heap_size(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Listpack>()
            + self.nodes.iter().map(Listpack::heap_size).sum::<usize>()
    }

    /// Whether a node of `count` entries and `bytes` bytes respects the
    /// fill (Redis's `_quicklistNodeAllowInsert` and `AllowMerge`). A
    /// single entry is always allowed: a node cannot be smaller.
    fn allowed(&self, count: usize, bytes: usize) -> bool {
        if count <= 1 {
            return true;
        }
        if self.fill < 0 {
            bytes <= OPTIMIZATION_LEVEL[(-self.fill - 1) as usize]
        } else {
            bytes <= SIZE_SAFETY_LIMIT && count <= self.fill as usize
        }
    }

    /// Inserts a node at index `at`. The first node gets room for itself
    /// only: most lists never have a second, and `ThinVec` would otherwise
    /// start at four (48 bytes more per list); later ones double as usual.
    fn add_node(&mut self, at: usize, node: Listpack) {
        if self.nodes.capacity() == 0 {
            self.nodes.reserve_exact(1);
        }
        self.nodes.insert(at, node);
    }

    fn allows_insert(&self, node: &Listpack, data: &[u8]) -> bool {
        self.allowed(node.len() + 1, node.bytes() + Listpack::entry_size(data)) && !is_large(data) && !is_plain(node)
    }

    pub fn push_back(&mut self, data: &[u8]) {
        match self.nodes.last() {
            Some(node) if self.allows_insert(node, data) => {
                self.nodes.last_mut().expect("checked above").push_back(data);
            }
            _ => self.add_node(self.nodes.len(), Listpack::from_iter([data])),
        }
        self.len += 1;
    }

    pub fn push_front(&mut self, data: &[u8]) {
        match self.nodes.first() {
            Some(node) if self.allows_insert(node, data) => {
                self.nodes.first_mut().expect("checked above").push_front(data);
            }
            _ => self.add_node(0, Listpack::from_iter([data])),
        }
        self.len += 1;
    }

    pub fn pop_front(&mut self) -> Option<Vec<u8>> {
        let node = self.nodes.first_mut()?;
        let v = node.pop_front();
        if node.is_empty() {
            self.nodes.remove(0);
        }
        self.len -= 1;
        v
    }

    pub fn pop_back(&mut self) -> Option<Vec<u8>> {
        let node = self.nodes.last_mut()?;
        let v = node.pop_back();
        if node.is_empty() {
            self.nodes.pop();
        }
        self.len -= 1;
        v
    }

    /// Resolves a Redis index (negative counts from the end) to a position.
    fn resolve(&self, index: i64) -> Option<usize> {
        let len = self.len as i64;
        let i = if index < 0 { index.checked_add(len)? } else { index };
        (0..len).contains(&i).then_some(i as usize)
    }

    /// The node holding entry `index` (< len) and the entry's index in it,
    /// walking from the nearer end.
    fn locate(&self, index: usize) -> (usize, usize) {
        debug_assert!(index < self.len);
        if index < self.len / 2 {
            let mut left = index;
            for (i, node) in self.nodes.iter().enumerate() {
                if left < node.len() {
                    return (i, left);
                }
                left -= node.len();
            }
        } else {
            let mut right = self.len - index; // 1-based from the end
            for (i, node) in self.nodes.iter().enumerate().rev() {
                if right <= node.len() {
                    return (i, node.len() - right);
                }
                right -= node.len();
            }
        }
        unreachable!("index {index} within the cached length {}", self.len)
    }

    /// The offset of entry `at` inside `node`, seeking from the nearer end.
    fn seek_in(node: &Listpack, at: usize) -> usize {
        let index = if at < node.len() / 2 { at as isize } else { at as isize - node.len() as isize };
        node.seek(index).expect("entry within node")
    }

    /// The entry at `index` (negative counts from the end), as LINDEX.
    pub fn get(&self, index: i64) -> Option<&[u8]> {
        let (n, at) = self.locate(self.resolve(index)?);
        let node = &self.nodes[n];
        Some(node.at(Self::seek_in(node, at)))
    }

    /// Replaces the entry at `index` (negative counts from the end), as
    /// LSET; false if out of range.
    pub fn set(&mut self, index: i64, data: &[u8]) -> bool {
        let Some(i) = self.resolve(index) else { return false };
        let (n, at) = self.locate(i);
        let node = &mut self.nodes[n];
        let off = Self::seek_in(node, at);
        node.replace_at(off, data);
        if is_large(data) {
            self.isolate(n, at);
        } else {
            self.split_if_needed(n);
        }
        true
    }

    /// Inserts `data` before (or after) the first entry equal to `pivot`,
    /// as LINSERT; false if there is no such entry.
    pub fn insert(&mut self, pivot: &[u8], data: &[u8], after: bool) -> bool {
        for n in 0..self.nodes.len() {
            let node = &mut self.nodes[n];
            let mut cursor = node.first();
            let mut index = 0;
            while let Some(off) = cursor {
                if node.at(off) == pivot {
                    let beside_large = is_plain(node);
                    let at = if after { node.next(off).unwrap_or(node.bytes()) } else { off };
                    node.insert_at(at, data);
                    self.len += 1;
                    if is_large(data) {
                        self.isolate(n, index + usize::from(after));
                    } else if beside_large {
                        // The pivot is the large entry: it keeps its node.
                        self.isolate(n, index + usize::from(!after));
                    } else {
                        self.split_if_needed(n);
                    }
                    return true;
                }
                cursor = node.next(off);
                index += 1;
            }
        }
        false
    }

    /// Gives entry `at` of node `n`, a large one, a node of its own: the
    /// entries before and after it stay in nodes on either side.
    fn isolate(&mut self, n: usize, at: usize) {
        let node = &mut self.nodes[n];
        let count = node.len();
        if at + 1 < count {
            let after = Listpack::from_iter(node.iter().skip(at + 1));
            node.remove_range(at + 1, count - at - 1);
            self.add_node(n + 1, after);
        }
        if at > 0 {
            let node = &mut self.nodes[n];
            let large = Listpack::from_iter(node.iter().skip(at));
            node.remove_range(at, 1);
            self.add_node(n + 1, large);
        }
    }

    /// Splits node `n` in halves until every part respects the fill.
    fn split_if_needed(&mut self, n: usize) {
        let count = self.nodes[n].len();
        if self.allowed(count, self.nodes[n].bytes()) {
            return;
        }
        let node = &mut self.nodes[n];
        let half = count / 2;
        let right = Listpack::from_iter(node.iter().skip(half));
        node.remove_range(half, count - half);
        self.add_node(n + 1, right);
        self.split_if_needed(n + 1);
        self.split_if_needed(n);
    }

    /// Removes `count` entries starting at `start` (clamped to the list),
    /// as LTRIM and the counted pops do: whole nodes are dropped without
    /// touching their entries.
    pub fn remove_range(&mut self, start: usize, count: usize) {
        let count = count.min(self.len.saturating_sub(start));
        if count == 0 {
            return;
        }
        let (first, at) = self.locate(start);
        let mut left = count;
        let mut n = first;
        // The tail of the first node, if the range starts inside it.
        if at > 0 {
            let node = &mut self.nodes[n];
            let take = left.min(node.len() - at);
            node.remove_range(at, take);
            left -= take;
            n += 1;
        }
        // Whole nodes.
        let mut whole = n;
        while whole < self.nodes.len() && left >= self.nodes[whole].len() {
            left -= self.nodes[whole].len();
            whole += 1;
        }
        self.nodes.drain(n..whole);
        // The head of the last node.
        if left > 0 {
            self.nodes[n].remove_range(0, left);
        }
        self.len -= count;
        if !self.nodes.is_empty() {
            self.compact(first.saturating_sub(1), n.min(self.nodes.len() - 1));
        }
    }

    /// Removes entries equal to `value`, as LREM: the first `count` from
    /// the head when positive, the last `-count` from the tail when
    /// negative, all when zero. Returns how many went.
    pub fn remove(&mut self, value: &[u8], count: i64) -> usize {
        let limit = if count == 0 { usize::MAX } else { usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX) };
        let mut removed = 0;
        let mut touched: Option<(usize, usize)> = None;
        let order: Box<dyn Iterator<Item = usize>> =
            if count < 0 { Box::new((0..self.nodes.len()).rev()) } else { Box::new(0..self.nodes.len()) };
        for n in order {
            if removed == limit {
                break;
            }
            let node = &mut self.nodes[n];
            let matches = node.iter().filter(|e| *e == value).count();
            if matches == 0 {
                continue;
            }
            let take = matches.min(limit - removed);
            // From the tail, the node's last `take` matches go: skip the others.
            let mut skip = if count < 0 { matches - take } else { 0 };
            let mut left = take;
            node.retain(|e| {
                if e != value || left == 0 {
                    return true;
                }
                if skip > 0 {
                    skip -= 1;
                    return true;
                }
                left -= 1;
                false
            });
            removed += take;
            touched = Some(touched.map_or((n, n), |(lo, hi)| (lo.min(n), hi.max(n))));
        }
        self.len -= removed;
        if let Some((lo, hi)) = touched {
            self.compact(lo.saturating_sub(1), (hi + 1).min(self.nodes.len() - 1));
        }
        removed
    }

    /// Drops the empty nodes among `lo..=hi` and merges neighbours whose
    /// union respects the fill, so that removals do not leave a trail of
    /// small nodes (Redis merges after deletions too).
    fn compact(&mut self, lo: usize, hi: usize) {
        let mut write = lo;
        for read in lo..=hi {
            if self.nodes[read].is_empty() {
                continue;
            }
            if write > lo {
                let (prev, cur) = (&self.nodes[write - 1], &self.nodes[read]);
                // Both headers counted: a slight overestimate, on the safe side.
                if self.allowed(prev.len() + cur.len(), prev.bytes() + cur.bytes()) && !is_plain(prev) && !is_plain(cur) {
                    let cur = std::mem::take(&mut self.nodes[read]);
                    let items: Vec<&[u8]> = cur.iter().collect();
                    let prev = &mut self.nodes[write - 1];
                    prev.insert_many_at(prev.bytes(), &items);
                    continue;
                }
            }
            self.nodes.swap(write, read);
            write += 1;
        }
        self.nodes.drain(write..=hi);
    }

    /// Every entry, head to tail (`.rev()` for tail to head).
    pub fn iter(&self) -> Iter<'_> {
        Iter { nodes: self.nodes.iter(), front: None, back: None, left: self.len }
    }

    /// The entries from index `start` (>= 0) to the tail, head to tail;
    /// empty when `start >= len`. Finding `start` walks from the nearer
    /// end, so LRANGE near the tail of a long list is cheap.
    pub fn iter_from(&self, start: usize) -> Iter<'_> {
        if start >= self.len {
            return Iter { nodes: self.nodes[..0].iter(), front: None, back: None, left: 0 };
        }
        let (n, at) = self.locate(start);
        let mut front = self.nodes[n].iter();
        if at > 0 {
            front.nth(at - 1);
        }
        Iter { nodes: self.nodes[n + 1..].iter(), front: Some(front), back: None, left: self.len - start }
    }

    /// Removes up to `count` entries from the head (or the tail when
    /// `from_tail`) and returns them in the order they were popped.
    pub fn pop_many(&mut self, count: usize, from_tail: bool) -> Vec<Vec<u8>> {
        let count = count.min(self.len);
        if from_tail {
            let out = self.iter().rev().take(count).map(<[u8]>::to_vec).collect();
            self.remove_range(self.len - count, count);
            out
        } else {
            let out = self.iter().take(count).map(<[u8]>::to_vec).collect();
            self.remove_range(0, count);
            out
        }
    }
}

/// Double-ended iterator over a list's entries.
pub struct Iter<'a> {
    nodes: std::slice::Iter<'a, Listpack>,
    front: Option<listpack::Iter<'a>>,
    back: Option<listpack::Iter<'a>>,
    /// Entries not yet yielded (the two ends meet when it reaches 0).
    left: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.left == 0 {
            return None;
        }
        loop {
            if let Some(e) = self.front.as_mut().and_then(Iterator::next) {
                self.left -= 1;
                return Some(e);
            }
            match self.nodes.next() {
                Some(node) => self.front = Some(node.iter()),
                None => {
                    let e = self.back.as_mut().and_then(Iterator::next);
                    if e.is_some() {
                        self.left -= 1;
                    }
                    return e;
                }
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        loop {
            if let Some(e) = self.back.as_mut().and_then(DoubleEndedIterator::next_back) {
                self.left -= 1;
                return Some(e);
            }
            match self.nodes.next_back() {
                Some(node) => self.back = Some(node.iter()),
                None => {
                    let e = self.front.as_mut().and_then(DoubleEndedIterator::next_back);
                    if e.is_some() {
                        self.left -= 1;
                    }
                    return e;
                }
            }
        }
    }
}

impl ExactSizeIterator for Iter<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use proptest::prelude::*;

    /// The structure's invariants: cached length, no empty node, every
    /// node within the fill.
    fn check(list: &List) {
        assert_eq!(list.len, list.nodes.iter().map(Listpack::len).sum::<usize>());
        for node in list.nodes.iter() {
            assert!(!node.is_empty(), "empty node");
            assert!(list.allowed(node.len(), node.bytes()), "node over the fill: {} entries, {} bytes", node.len(), node.bytes());
        }
    }

    fn items(list: &List) -> Vec<Vec<u8>> {
        list.iter().map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn fits_in_a_value() {
        assert!(std::mem::size_of::<List>() <= 24);
    }

    #[test]
    fn a_one_node_list_allocates_one_node_slot() {
        let mut l = List::new(DEFAULT_FILL);
        l.push_front(b"a");
        l.push_back(b"b");
        assert_eq!(l.nodes.capacity(), 1);
        let mut many = List::new(1);
        for i in 0..100 {
            many.push_back(format!("{i}").as_bytes());
        }
        assert_eq!((many.nodes.len(), many.nodes.capacity()), (100, 128));
    }

    #[test]
    fn fill_bounds_nodes_by_count_or_bytes() {
        let mut by_count = List::new(3);
        for i in 0..10 {
            by_count.push_back(format!("{i}").as_bytes());
        }
        assert_eq!(by_count.node_count(), 4);
        check(&by_count);

        let mut by_bytes = List::new(-1);
        let big = vec![b'x'; 1100];
        for _ in 0..10 {
            by_bytes.push_front(&big);
        }
        // 4 KiB nodes hold three 1100-byte entries each.
        assert_eq!(by_bytes.node_count(), 4);
        check(&by_bytes);

        // An entry bigger than the limit still gets a node.
        let mut huge = List::new(-1);
        huge.push_back(&vec![b'y'; 10_000]);
        huge.push_back(b"a");
        assert_eq!(huge.node_count(), 2);
        assert_eq!(huge.len(), 2);
    }

    #[test]
    fn fill_is_clamped_like_redis() {
        assert_eq!(List::new(-100).fill, -5);
        assert_eq!(List::new(1 << 40).fill, FILL_MAX as i16);
        // Fill 0: one entry per node.
        let mut zero = List::new(0);
        zero.push_back(b"a");
        zero.push_back(b"b");
        assert_eq!(zero.node_count(), 2);
    }

    #[test]
    fn indexes_from_both_ends() {
        let mut l = List::new(2);
        for i in 0..7 {
            l.push_back(format!("{i}").as_bytes());
        }
        assert_eq!(l.get(0), Some(&b"0"[..]));
        assert_eq!(l.get(6), Some(&b"6"[..]));
        assert_eq!(l.get(-1), Some(&b"6"[..]));
        assert_eq!(l.get(-7), Some(&b"0"[..]));
        assert_eq!(l.get(7), None);
        assert_eq!(l.get(-8), None);
        assert_eq!(l.get(i64::MIN), None);
        let tail: Vec<&[u8]> = l.iter_from(5).collect();
        assert_eq!(tail, [&b"5"[..], b"6"]);
        assert_eq!(l.iter_from(7).count(), 0);
        assert_eq!(l.iter().next_back(), Some(&b"6"[..]));
    }

    #[test]
    fn lset_and_linsert_split_full_nodes() {
        let mut l = List::new(-1);
        for _ in 0..4 {
            l.push_back(&[b'a'; 900]);
        }
        assert_eq!(l.node_count(), 1);
        assert!(l.set(1, &[b'b'; 3000]));
        check(&l);
        assert!(l.node_count() > 1);
        assert!(l.insert(&[b'b'; 3000], b"after", true));
        assert!(l.insert(&[b'a'; 900], b"before", false));
        assert!(!l.insert(b"missing", b"x", false));
        check(&l);
        assert_eq!(l.get(0), Some(&b"before"[..]));
        assert_eq!(l.get(3), Some(&b"after"[..]));
        assert_eq!(l.len(), 6);
    }

    #[test]
    fn lrem_and_ranges_merge_small_nodes() {
        let mut l = List::new(4);
        for i in 0..40 {
            l.push_back(if i % 2 == 0 { b"x" } else { b"y" });
        }
        assert_eq!(l.node_count(), 10);
        assert_eq!(l.remove(b"x", 0), 20);
        check(&l);
        assert_eq!(l.node_count(), 5);
        assert_eq!(l.remove(b"y", -3), 3);
        assert_eq!(l.remove(b"y", 2), 2);
        assert_eq!(l.len(), 15);
        l.remove_range(1, 13);
        check(&l);
        assert_eq!(l.len(), 2);
        assert_eq!(l.node_count(), 1);
    }

    #[test]
    fn pop_many_pops_in_pop_order() {
        let mut l = List::new(2);
        for i in 0..5 {
            l.push_back(format!("{i}").as_bytes());
        }
        assert_eq!(l.pop_many(2, true), vec![b"4".to_vec(), b"3".to_vec()]);
        assert_eq!(l.pop_many(2, false), vec![b"0".to_vec(), b"1".to_vec()]);
        assert_eq!(l.pop_many(10, false), vec![b"2".to_vec()]);
        assert!(l.is_empty());
        assert_eq!(l.node_count(), 0);
        assert_eq!(l.pop_front(), None);
        assert_eq!(l.pop_back(), None);
    }

    fn fill_strategy() -> impl Strategy<Value = i64> {
        prop_oneof![Just(0i64), 1i64..5, Just(128), -5i64..0]
    }

    fn data_strategy() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            prop::collection::vec(b'a'..b'd', 0..3),
            prop::collection::vec(any::<u8>(), 0..3000),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_deque(
            fill in fill_strategy(),
            ops in prop::collection::vec((0u8..11, any::<i16>(), any::<i16>(), data_strategy()), 0..80),
        ) {
            let mut list = List::new(fill);
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            for (op, a, b, data) in ops {
                let (a64, b64) = (i64::from(a % 40), i64::from(b % 40));
                match op {
                    0 => { list.push_back(&data); model.push_back(data); }
                    1 => { list.push_front(&data); model.push_front(data); }
                    2 => { prop_assert_eq!(list.pop_front(), model.pop_front()); }
                    3 => { prop_assert_eq!(list.pop_back(), model.pop_back()); }
                    4 => {
                        let len = model.len() as i64;
                        let i = if a64 < 0 { a64 + len } else { a64 };
                        let ok = (0..len).contains(&i);
                        prop_assert_eq!(list.set(a64, &data), ok);
                        if ok { model[i as usize] = data; }
                    }
                    5 => {
                        let pivot = model.get((a as usize) % model.len().max(1)).cloned().unwrap_or_default();
                        let after = b % 2 == 0;
                        let found = model.iter().position(|e| *e == pivot);
                        prop_assert_eq!(list.insert(&pivot, &data, after), found.is_some());
                        if let Some(p) = found { model.insert(p + usize::from(after), data); }
                    }
                    6 => {
                        let value = data.iter().take(1).copied().collect::<Vec<u8>>();
                        let removed = list.remove(&value, b64 - 20);
                        let mut want = 0;
                        let limit = if b64 == 20 { usize::MAX } else { (b64 - 20).unsigned_abs() as usize };
                        if b64 - 20 < 0 {
                            let mut i = model.len();
                            while i > 0 && want < limit { i -= 1; if model[i] == value { model.remove(i); want += 1; } }
                        } else {
                            let mut i = 0;
                            while i < model.len() && want < limit { if model[i] == value { model.remove(i); want += 1; } else { i += 1; } }
                        }
                        prop_assert_eq!(removed, want);
                    }
                    7 => {
                        let (start, count) = (a64.unsigned_abs() as usize, b64.unsigned_abs() as usize);
                        list.remove_range(start, count);
                        let end = (start + count).min(model.len());
                        if start < end { model.drain(start..end); }
                    }
                    8 => {
                        let got = list.pop_many(a64.unsigned_abs() as usize, b % 2 == 0);
                        let n = (a64.unsigned_abs() as usize).min(model.len());
                        let want: Vec<Vec<u8>> = if b % 2 == 0 {
                            (0..n).map(|_| model.pop_back().expect("n <= len")).collect()
                        } else {
                            (0..n).map(|_| model.pop_front().expect("n <= len")).collect()
                        };
                        prop_assert_eq!(got, want);
                    }
                    9 => {
                        let start = a64.unsigned_abs() as usize;
                        let got: Vec<Vec<u8>> = list.iter_from(start).map(<[u8]>::to_vec).collect();
                        let want: Vec<Vec<u8>> = model.iter().skip(start).cloned().collect();
                        prop_assert_eq!(got, want);
                    }
                    _ => {
                        prop_assert_eq!(list.get(a64), {
                            let len = model.len() as i64;
                            let i = if a64 < 0 { a64 + len } else { a64 };
                            (0..len).contains(&i).then(|| model[i as usize].as_slice())
                        });
                    }
                }
                check(&list);
                prop_assert_eq!(list.len(), model.len());
                prop_assert_eq!(items(&list), model.iter().cloned().collect::<Vec<_>>());
                prop_assert!(list.iter().rev().eq(model.iter().rev().map(Vec::as_slice)));
                // Mixed ends meet exactly once.
                let mut it = list.iter();
                let mut seen = 0;
                while if seen % 2 == 0 { it.next() } else { it.next_back() }.is_some() { seen += 1; }
                prop_assert_eq!(seen, model.len());
            }
        }
    }
}
