//! `Dict`: the hash table that holds every key of a database, built so that no
//! single operation ever stalls the shard (design.md, "A table never stalls").
//!
//! # How it never stalls
//!
//! Chained hashing over power-of-two bucket arrays, resized the way Redis's
//! `dict.c` does it: a resize allocates a second bucket array and then moves
//! the old one's buckets over *incrementally*. While two tables exist, every
//! `insert`, `remove`, `get_mut` and `entry_or_insert_with` first migrates one
//! non-empty bucket (visiting at most [`EMPTY_VISITS_PER_BUCKET`] empty ones on
//! the way), and the server's cron calls [`Dict::rehash_step`] with a time
//! budget to finish sooner. New keys always go to the new table, so a resize
//! finishes before the new table fills: one bucket per write against at most
//! one bucket of the old table per element.
//!
//! - Grow when `len >= buckets` (load factor 1) to the next power of two
//!   above `len`; shrink when `len < buckets / 8` to the next power of two
//!   above `len` (never below [`INITIAL_BUCKETS`]). Shrinking is a rehash like
//!   any other, so it is incremental too. No resize starts while one runs.
//! - A new bucket array is allocated zeroed (`calloc`), so even a 2^24-bucket
//!   array costs no memset up front: its pages are faulted in as the
//!   migration reaches them. This is why the empty link is `0`.
//! - The only O(n) operations are `clear`, `retain`, `iter`/`iter_mut` (which
//!   the caller drives) and dropping the whole `Dict` (the server drops big
//!   ones on another thread after `std::mem::take`, which is free: `Default`
//!   allocates nothing).
//!
//! # Node layout: an index arena, not a `Box` per entry
//!
//! Entries live in an arena of fixed-size chunks (`Vec<Node>`, 64 KiB each,
//! except that the first grows by doubling up to that size so that small
//! dicts stay small). Buckets and `next` links are `u32` indices (`index + 1`,
//! `0` is the empty link) rather than pointers. Compared with the obvious
//! `Option<Box<Node>>` chain (what Redis does in C), for
//! `Dict<Box<[u8]>, u64>`:
//!
//! - a node is 32 bytes (16 key + 8 value + 4 link, padded) with no malloc
//!   header or size-class rounding, against 32 + allocator overhead for a
//!   boxed node (+16 bytes on glibc, which rounds 32 up to 48);
//! - a bucket is 4 bytes instead of 8, i.e. 4 to 8 bytes per entry at a load
//!   factor between 1/2 and 1;
//! - inserts do not call the allocator (except once per 64 KiB chunk), and
//!   `iter` walks dense memory;
//! - nodes stay dense because `remove` moves the last node into the hole
//!   (one extra hash and chain walk to re-point the link to it). Density makes
//!   [`Dict::random_entry`] exactly uniform and O(1) even after mass deletes,
//!   where Redis's bucket sampling can get slow on a sparse table.
//!
//! Chunks are fixed-size, never reallocated, so growth never copies the
//! entries (a `Vec` of all nodes would copy gigabytes on doubling). The price
//! is a limit of `u32::MAX - 1` entries per dict, asserted on insert.
//!
//! The hash is not stored in the node (Redis doesn't either): it would cost
//! 8 bytes per entry to save rehashing the key on migration, and foldhash is
//! a few nanoseconds per short key.
//!
//! # Hash
//!
//! [`DefaultHashBuilder`] is `foldhash::fast::RandomState`: among the fastest
//! hashes for short keys (what hashbrown itself defaults to), seeded at random
//! per process and per table, so bucket layout cannot be predicted from
//! outside. It is not a keyed PRF like Redis's SipHash; a deployment that must
//! resist a determined HashDoS can pick another `BuildHasher` type.
//!
//! # SCAN
//!
//! [`Dict::scan`] is Redis's reverse-binary cursor (Pieter Noordhuis's
//! design, `dictScan`): the cursor's high bits are incremented first, so a
//! cursor stays meaningful when the table doubles or halves between calls,
//! and while rehashing the smaller table's bucket is visited together with
//! all of its expansions in the larger one. Every element present for the
//! whole scan is returned at least once; some may be returned twice.
//!
//! # Snapshots: growing, never shrinking
//!
//! A point-in-time snapshot (`crate::snapshot`) walks a dict with SCAN while
//! writes go on, and must know, for any key, whether the walk has already
//! passed it ([`Dict::scan_passed`]). The reverse-binary cursor makes that
//! exact and cheap as long as the table only grows: bucket `b` of a table
//! with mask `m` has been visited iff `reverse(b) < reverse(cursor)` within
//! `m`, and when the table doubles, a bucket of the bigger table has been
//! visited iff the bucket it came from had been (the cursor gains a zero
//! top bit, the bucket its new bit below the old ones, so the comparison
//! does not change). While a grow migrates, `scan` visits a bucket of the
//! smaller table with all of its expansions, so the smaller table's mask
//! still answers. A shrink would break both that answer and SCAN's
//! exactly-once visits (halving merges a visited bucket with one that is
//! not), so [`Dict::pause_shrink`] stops any from starting. Inserts grow
//! the table as usual: a long snapshot under a load that creates keys keeps
//! its chains short. (Redis pauses all rehashing for its safe iterators and
//! lets a fork's tables grow only past five entries per bucket.)

use std::borrow::Borrow;
use std::fmt;
use std::hash::{BuildHasher, Hash};
use std::mem;

/// The default hasher: fast, seeded per process and per table (see module doc).
pub type DefaultHashBuilder = foldhash::fast::RandomState;

/// The smallest bucket array, as in Redis (`DICT_HT_INITIAL_SIZE`).
pub const INITIAL_BUCKETS: usize = 4;

/// A migration step gives up after this many empty buckets per bucket it was
/// asked to move, so a step over a sparse table stays bounded (Redis: 10).
pub const EMPTY_VISITS_PER_BUCKET: usize = 10;

/// Shrink when fewer than one entry per this many buckets.
const SHRINK_RATIO: usize = 8;

/// Target size of one arena chunk. Big enough that the chunk allocation is
/// rare (one in ~2000 inserts for 32-byte nodes), small enough that
/// allocating or freeing one never costs more than a few microseconds.
const CHUNK_BYTES: usize = 64 * 1024;

/// A link to a node: its index + 1, or [`NIL`]. Zero as the empty value lets
/// bucket arrays be allocated zeroed (lazily, by the kernel).
type Link = u32;
const NIL: Link = 0;

/// The most entries a dict holds: indices must fit a `Link` besides `NIL`.
const LEN_MAX: usize = u32::MAX as usize - 1;

struct Node<K, V> {
    key: K,
    value: V,
    next: Link,
}

/// Dense storage of nodes, in chunks that are never reallocated once full
/// size. Invariant: chunk `c` holds indices `c << CHUNK_BITS ..`; every chunk
/// but the last non-empty one is full; at most one empty chunk follows it.
struct Arena<K, V> {
    chunks: Vec<Vec<Node<K, V>>>,
    len: usize,
}

impl<K, V> Arena<K, V> {
    const CHUNK_BITS: u32 = {
        // A node holds at least its link, so the size is never zero.
        let n = CHUNK_BYTES / mem::size_of::<Node<K, V>>();
        if n <= 1 {
            0
        } else {
            n.ilog2()
        }
    };
    const CHUNK: usize = 1 << Self::CHUNK_BITS;
    const CHUNK_MASK: usize = Self::CHUNK - 1;

    const fn new() -> Self {
        Arena { chunks: Vec::new(), len: 0 }
    }

    #[inline]
    fn get(&self, i: usize) -> &Node<K, V> {
        &self.chunks[i >> Self::CHUNK_BITS][i & Self::CHUNK_MASK]
    }

    #[inline]
    fn get_mut(&mut self, i: usize) -> &mut Node<K, V> {
        &mut self.chunks[i >> Self::CHUNK_BITS][i & Self::CHUNK_MASK]
    }

    /// Appends `node`, returning its index. Copies at most one chunk (while
    /// the first chunk is still growing), never the whole arena.
    fn push(&mut self, node: Node<K, V>) -> usize {
        let i = self.len;
        let c = i >> Self::CHUNK_BITS;
        if c == self.chunks.len() {
            // Only chunk 0 starts small; later chunks mean the dict is big.
            let cap = if c == 0 { INITIAL_BUCKETS.min(Self::CHUNK) } else { Self::CHUNK };
            self.chunks.push(Vec::with_capacity(cap));
        }
        let chunk = &mut self.chunks[c];
        if chunk.len() == chunk.capacity() {
            let want = (chunk.capacity() * 2).clamp(INITIAL_BUCKETS, Self::CHUNK);
            chunk.reserve_exact(want - chunk.len());
        }
        debug_assert!(chunk.len() < Self::CHUNK);
        chunk.push(node);
        self.len += 1;
        i
    }

    /// Removes the node at `i`, moving the last node into its place.
    fn swap_remove(&mut self, i: usize) -> Node<K, V> {
        assert!(i < self.len);
        self.len -= 1;
        let last = self.chunks[self.len >> Self::CHUNK_BITS]
            .pop()
            .expect("arena chunk holding the last index is non-empty");
        // Keep one spare empty chunk so that a dict hovering at a chunk
        // boundary does not allocate and free 64 KiB on every other write.
        let used_chunks = self.len.div_ceil(Self::CHUNK);
        if self.chunks.len() > used_chunks + 1 {
            self.chunks.truncate(used_chunks + 1);
        }
        if i == self.len {
            last
        } else {
            mem::replace(self.get_mut(i), last)
        }
    }

    /// Bytes held, in O(1): every chunk but the first has the full capacity.
    fn bytes(&self) -> usize {
        let nodes = match self.chunks.first() {
            None => 0,
            Some(first) => first.capacity() + (self.chunks.len() - 1) * Self::CHUNK,
        };
        nodes * mem::size_of::<Node<K, V>>()
            + self.chunks.capacity() * mem::size_of::<Vec<Node<K, V>>>()
    }

    fn iter(&self) -> impl Iterator<Item = &Node<K, V>> {
        self.chunks.iter().flatten()
    }

    fn iter_mut(&mut self) -> impl Iterator<Item = &mut Node<K, V>> {
        self.chunks.iter_mut().flatten()
    }
}

/// Where a link lives: a bucket head, or the `next` of a node.
#[derive(Clone, Copy)]
enum LinkPos {
    Bucket { table: usize, bucket: usize },
    Next { node: usize },
}

/// What the last operation's migration did, for tests that bound the work.
#[cfg(test)]
#[derive(Clone, Copy, Debug, Default)]
struct Work {
    /// Buckets of the old table visited, empty or not.
    buckets_visited: usize,
    /// Nodes moved to the new table.
    nodes_moved: usize,
}

/// A node's place, from [`Dict::find`]: good until the dict next changes
/// (a stale one reads some other node, never freed memory).
#[derive(Clone, Copy)]
pub struct Found(usize);

/// An incrementally rehashed hash table; see the module documentation.
pub struct Dict<K, V, S = DefaultHashBuilder> {
    /// `tables[0]` is the only table, or the one being drained while
    /// `tables[1]` is non-empty (rehashing). Lengths are powers of two or 0.
    tables: [Box<[Link]>; 2],
    /// Entries reachable from each table.
    used: [usize; 2],
    /// While rehashing, the next bucket of `tables[0]` to migrate: every
    /// bucket of `tables[0]` below it is empty.
    rehash_idx: usize,
    /// No shrink starts while set (see "Snapshots").
    shrink_paused: bool,
    nodes: Arena<K, V>,
    hasher: S,
    #[cfg(test)]
    work: Work,
}

impl<K, V, S: Default> Default for Dict<K, V, S> {
    fn default() -> Self {
        Self::with_hasher(S::default())
    }
}

/// A copy with the same hasher (COPY, and snapshots of collections):
/// rebuilt by insertion, so the copy is not mid-rehash.
impl<K: Hash + Eq + Clone, V: Clone, S: BuildHasher + Clone> Clone for Dict<K, V, S> {
    fn clone(&self) -> Self {
        let mut copy = Dict::with_hasher(self.hasher.clone());
        for (k, v) in self.iter() {
            copy.insert(k.clone(), v.clone());
        }
        copy
    }
}

impl<K, V, S> fmt::Debug for Dict<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Dict")
            .field("len", &self.nodes.len)
            .field("buckets", &[self.tables[0].len(), self.tables[1].len()])
            .field("rehash_idx", &self.rehash_idx)
            .finish_non_exhaustive()
    }
}

/// A zeroed bucket array: `vec![0; n]` goes to `alloc_zeroed`, which for big
/// arrays is fresh `mmap` pages, so this costs no O(n) memset.
fn empty_table(buckets: usize) -> Box<[Link]> {
    debug_assert!(buckets.is_power_of_two());
    vec![NIL; buckets].into_boxed_slice()
}

/// Starts loading the cache line at `at`, without waiting for it.
#[inline]
pub(crate) fn prefetch<T>(at: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch reads nothing the program can observe and
        // cannot fault, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(at.cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Buckets [`Dict::scan_many`] asks memory for at once.
const SCAN_AHEAD: usize = 16;

/// Advances a scan's reversed cursor by one in the bits `mask` leaves.
fn next_cursor(v: u64, mask: u64) -> u64 {
    (v | !mask).reverse_bits().wrapping_add(1).reverse_bits()
}

#[inline]
fn bucket_of(hash: u64, table_len: usize) -> usize {
    // Truncation is intended: table lengths are powers of two below usize::MAX.
    (hash as usize) & (table_len - 1)
}

impl<K, V, S> Dict<K, V, S> {
    /// An empty dict that allocates nothing until the first insert.
    pub fn with_hasher(hasher: S) -> Self {
        Dict {
            tables: Default::default(),
            used: [0, 0],
            rehash_idx: 0,
            shrink_paused: false,
            nodes: Arena::new(),
            hasher,
            #[cfg(test)]
            work: Work { buckets_visited: 0, nodes_moved: 0 },
        }
    }

    pub fn len(&self) -> usize {
        self.nodes.len
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.len == 0
    }

    pub fn is_rehashing(&self) -> bool {
        !self.tables[1].is_empty()
    }

    /// Buckets of both tables together (INFO, DEBUG HTSTATS).
    pub fn buckets(&self) -> usize {
        self.tables[0].len() + self.tables[1].len()
    }

    /// Approximate bytes of the table itself: bucket arrays and nodes
    /// (including spare capacity), not what keys and values point to.
    pub fn memory_usage(&self) -> usize {
        mem::size_of::<Self>() + self.buckets() * mem::size_of::<Link>() + self.nodes.bytes()
    }

    /// Stops (`true`) or allows again (`false`) the start of any shrink, so
    /// that a scan's progress keeps its meaning (see "Snapshots"). A shrink
    /// already under way is not stopped: a caller that needs one finished
    /// runs [`Dict::rehash_step`] while [`Dict::is_shrinking`]. Grows go on.
    /// The pause is kept by `clear`; it does not travel with `clone`.
    pub fn pause_shrink(&mut self, paused: bool) {
        self.shrink_paused = paused;
    }

    pub fn is_shrink_paused(&self) -> bool {
        self.shrink_paused
    }

    /// Whether a migration to a smaller bucket array is under way.
    pub fn is_shrinking(&self) -> bool {
        self.is_rehashing() && self.tables[1].len() < self.tables[0].len()
    }

    /// Removes every entry and frees all memory. O(n) in the drops; to free a
    /// big dict without blocking, `std::mem::take` it and drop it elsewhere.
    pub fn clear(&mut self) {
        self.tables = Default::default();
        self.used = [0, 0];
        self.rehash_idx = 0;
        self.nodes = Arena::new();
    }

    pub fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.nodes.iter().map(|n| (&n.key, &n.value))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.nodes.iter_mut().map(|n| (&n.key, &mut n.value))
    }

    /// A uniformly random entry in O(1), or `None` if empty. Nodes are dense
    /// (see module doc), so this is a uniform index into them: fairer than
    /// Redis's `dictGetFairRandomKey` and never slow on a sparse table.
    pub fn random_entry<R: rand::Rng>(&self, rng: &mut R) -> Option<(&K, &V)> {
        if self.is_empty() {
            return None;
        }
        let node = self.nodes.get(rng.gen_range(0..self.nodes.len));
        Some((&node.key, &node.value))
    }

    /// Calls `f` for `n` uniformly random entries (drawn with
    /// replacement). Their nodes are asked of the processor together
    /// first, so that the cache misses of a sample overlap.
    pub fn random_entries<R: rand::Rng>(&self, rng: &mut R, n: usize, mut f: impl FnMut(&K, &V)) {
        if self.is_empty() {
            return;
        }
        let picks: smallvec::SmallVec<[usize; 16]> = (0..n).map(|_| rng.gen_range(0..self.nodes.len)).collect();
        for &i in &picks {
            prefetch(self.nodes.get(i));
        }
        for &i in &picks {
            let node = self.nodes.get(i);
            f(&node.key, &node.value);
        }
    }

    /// One call of Redis's SCAN over this dict: calls `f` for every entry of
    /// the bucket(s) the cursor names and returns the next cursor, 0 when the
    /// scan is complete. Start with 0. The dict may change freely between
    /// calls; every entry present from the first call to the last is passed
    /// to `f` at least once (some may be passed more than once).
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&K, &V)) -> u64 {
        if self.is_empty() {
            return 0;
        }
        let mut v = cursor;
        if !self.is_rehashing() {
            let table = &self.tables[0];
            let mask = (table.len() - 1) as u64;
            self.emit_chain(table[(v & mask) as usize], &mut f);
            return next_cursor(v, mask);
        }
        let (small, big) = if self.tables[0].len() <= self.tables[1].len() {
            (&self.tables[0], &self.tables[1])
        } else {
            (&self.tables[1], &self.tables[0])
        };
        let m_small = (small.len() - 1) as u64;
        let m_big = (big.len() - 1) as u64;
        self.emit_chain(small[(v & m_small) as usize], &mut f);
        // Every bucket of the big table that the small bucket expands to.
        loop {
            self.emit_chain(big[(v & m_big) as usize], &mut f);
            v = next_cursor(v, m_big);
            if v & (m_small ^ m_big) == 0 {
                break;
            }
        }
        v
    }

    /// Up to `calls` calls of [`scan`](Dict::scan) in one: the same
    /// entries in the same order, and the cursor the last call would
    /// return. A scan's order hops across the bucket array, so every
    /// bucket, node and value it reads is a cache miss, most of the time a
    /// rewrite spent. So it goes [`SCAN_AHEAD`] buckets at a time: their
    /// slots are asked for, then their chains' first nodes, then `ahead` is
    /// called with each first node's value (to ask for what it points to),
    /// and only then are the chains passed to `f`: one wait for each kind
    /// of line instead of one per bucket. While rehashing it is plain
    /// `scan` calls.
    pub fn scan_many(&self, mut cursor: u64, calls: usize, mut ahead: impl FnMut(&V), mut f: impl FnMut(&K, &V)) -> u64 {
        if self.is_rehashing() {
            for _ in 0..calls {
                cursor = self.scan(cursor, &mut f);
                if cursor == 0 {
                    break;
                }
            }
            return cursor;
        }
        if self.is_empty() {
            return 0;
        }
        let table = &self.tables[0];
        let mask = (table.len() - 1) as u64;
        let head = |c: u64| match table[(c & mask) as usize] {
            NIL => None,
            link => Some(self.nodes.get((link - 1) as usize)),
        };
        let mut left = calls;
        while left > 0 {
            let mut cursors = [0u64; SCAN_AHEAD];
            let mut n = 0;
            while n < SCAN_AHEAD.min(left) {
                cursors[n] = cursor;
                n += 1;
                cursor = next_cursor(cursor, mask);
                if cursor == 0 {
                    break;
                }
            }
            let cursors = &cursors[..n];
            cursors.iter().for_each(|&c| prefetch(&table[(c & mask) as usize]));
            cursors.iter().filter_map(|&c| head(c)).for_each(|node| prefetch(node));
            cursors.iter().filter_map(|&c| head(c)).for_each(|node| ahead(&node.value));
            for &c in cursors {
                self.emit_chain(table[(c & mask) as usize], &mut f);
            }
            if cursor == 0 {
                return 0;
            }
            left -= n;
        }
        cursor
    }

    fn emit_chain(&self, mut link: Link, f: &mut impl FnMut(&K, &V)) {
        while link != NIL {
            let node = self.nodes.get((link - 1) as usize);
            f(&node.key, &node.value);
            link = node.next;
        }
    }

    fn link_mut(&mut self, pos: LinkPos) -> &mut Link {
        match pos {
            LinkPos::Bucket { table, bucket } => &mut self.tables[table][bucket],
            LinkPos::Next { node } => &mut self.nodes.get_mut(node).next,
        }
    }
}

impl<K: Hash + Eq, V, S: BuildHasher + Default> Dict<K, V, S> {
    pub fn new() -> Self {
        Self::default()
    }
}

impl<K: Hash + Eq, V, S: BuildHasher> Dict<K, V, S> {
    /// The hash this table files `q` under, for the prefetches below.
    pub fn hash_of<Q>(&self, q: &Q) -> u64
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        self.hash(q)
    }

    /// Asks the processor for the bucket(s) a lookup of `hash` reads
    /// first, without waiting for them. With [`Dict::prefetch_chain`] a
    /// moment later, once the bucket has arrived, a batch of lookups has
    /// its cache misses overlap instead of taking them one by one. Hints
    /// only: nothing changes, and a table that changes in between makes
    /// them useless, never wrong.
    pub fn prefetch_bucket(&self, hash: u64) {
        for table in self.tables.iter().take_while(|t| !t.is_empty()) {
            prefetch(&table[bucket_of(hash, table.len())]);
        }
    }

    /// Asks for the first node of `hash`'s chain(s); see
    /// [`Dict::prefetch_bucket`].
    pub fn prefetch_chain(&self, hash: u64) {
        self.chain_heads(hash).for_each(|node| prefetch(node));
    }

    /// The third step, once the chain's first node has arrived: if that
    /// node holds `q`, hands its value to `f` (to ask for what the value
    /// points to).
    pub fn prefetch_value<Q>(&self, hash: u64, q: &Q, f: impl FnOnce(&V))
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        if let Some(node) = self.chain_heads(hash).find(|node| node.key.borrow() == q) {
            f(&node.value);
        }
    }

    /// The first node of `hash`'s chain in each live table.
    fn chain_heads(&self, hash: u64) -> impl Iterator<Item = &Node<K, V>> {
        self.tables.iter().take_while(|t| !t.is_empty()).filter_map(move |table| {
            let link = table[bucket_of(hash, table.len())];
            (link != NIL).then(|| self.nodes.get((link - 1) as usize))
        })
    }

    #[inline]
    fn hash<Q: Hash + ?Sized>(&self, q: &Q) -> u64 {
        self.hasher.hash_one(q)
    }

    /// The node index holding `q`. Reads only; searches the old table, then
    /// the new one while rehashing.
    #[inline]
    fn find_index<Q>(&self, hash: u64, q: &Q) -> Option<usize>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        if self.is_empty() {
            return None;
        }
        for table in &self.tables {
            if table.is_empty() {
                break;
            }
            let mut link = table[bucket_of(hash, table.len())];
            while link != NIL {
                let i = (link - 1) as usize;
                let node = self.nodes.get(i);
                if node.key.borrow() == q {
                    return Some(i);
                }
                link = node.next;
            }
        }
        None
    }

    /// Like `find_index`, also returning the table and the link that points
    /// at the node, for unlinking.
    fn find_pos<Q>(&self, hash: u64, q: &Q) -> Option<(usize, LinkPos, usize)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        if self.is_empty() {
            return None;
        }
        for (t, table) in self.tables.iter().enumerate() {
            if table.is_empty() {
                break;
            }
            let bucket = bucket_of(hash, table.len());
            let mut pos = LinkPos::Bucket { table: t, bucket };
            let mut link = table[bucket];
            while link != NIL {
                let i = (link - 1) as usize;
                let node = self.nodes.get(i);
                if node.key.borrow() == q {
                    return Some((t, pos, i));
                }
                pos = LinkPos::Next { node: i };
                link = node.next;
            }
        }
        None
    }

    /// The table and link pointing at node `target`, whose key hashes to
    /// `hash`. The node must be linked: a miss means the structure is corrupt.
    fn pos_of_node(&self, hash: u64, target: usize) -> (usize, LinkPos) {
        let wanted = (target + 1) as Link;
        for (t, table) in self.tables.iter().enumerate() {
            if table.is_empty() {
                break;
            }
            let bucket = bucket_of(hash, table.len());
            let mut pos = LinkPos::Bucket { table: t, bucket };
            let mut link = table[bucket];
            while link != NIL {
                if link == wanted {
                    return (t, pos);
                }
                let i = (link - 1) as usize;
                pos = LinkPos::Next { node: i };
                link = self.nodes.get(i).next;
            }
        }
        panic!("dict corrupt: node {target} is not in its bucket chain");
    }

    /// Frees node `i`, already unlinked from its chain: the last node moves
    /// into its slot, so the link to the last node is re-pointed first.
    fn free_node(&mut self, i: usize) -> Node<K, V> {
        let last = self.nodes.len - 1;
        if i != last {
            let hash = self.hash(&self.nodes.get(last).key);
            let (_, pos) = self.pos_of_node(hash, last);
            *self.link_mut(pos) = (i + 1) as Link;
        }
        self.nodes.swap_remove(i)
    }

    /// The bounded share of migration every write (and `get_mut`) does.
    #[inline]
    fn step_on_op(&mut self) {
        #[cfg(test)]
        {
            self.work = Work::default();
        }
        if self.is_rehashing() {
            self.rehash(1);
        }
    }

    /// Migrates up to `n` non-empty buckets, visiting at most
    /// `n * EMPTY_VISITS_PER_BUCKET` empty ones. True if work remains.
    fn rehash(&mut self, n: usize) -> bool {
        if !self.is_rehashing() {
            return false;
        }
        let mut empty_visits = n.saturating_mul(EMPTY_VISITS_PER_BUCKET);
        let new_len = self.tables[1].len();
        for _ in 0..n {
            if self.used[0] == 0 {
                break;
            }
            // In bounds: some bucket at or above rehash_idx is non-empty.
            while self.tables[0][self.rehash_idx] == NIL {
                self.rehash_idx += 1;
                #[cfg(test)]
                {
                    self.work.buckets_visited += 1;
                }
                empty_visits -= 1;
                if empty_visits == 0 {
                    return true;
                }
            }
            let mut link = mem::replace(&mut self.tables[0][self.rehash_idx], NIL);
            self.rehash_idx += 1;
            #[cfg(test)]
            {
                self.work.buckets_visited += 1;
            }
            while link != NIL {
                let node = self.nodes.get_mut((link - 1) as usize);
                let next = node.next;
                let bucket = bucket_of(self.hasher.hash_one(&node.key), new_len);
                node.next = self.tables[1][bucket];
                self.tables[1][bucket] = link;
                self.used[0] -= 1;
                self.used[1] += 1;
                #[cfg(test)]
                {
                    self.work.nodes_moved += 1;
                }
                link = next;
            }
        }
        if self.used[0] != 0 {
            return true;
        }
        // Done. Freeing the old array is one `free`; for a big array that is
        // an munmap, whose cost is what the latency bench measures.
        self.tables[0] = mem::take(&mut self.tables[1]);
        self.used = [self.used[1], 0];
        self.rehash_idx = 0;
        self.maybe_shrink();
        self.is_rehashing()
    }

    /// Starts a resize to the smallest power of two above `len` (at least
    /// `INITIAL_BUCKETS`), unless one runs or the size would not change.
    fn start_resize(&mut self) {
        debug_assert!(!self.is_rehashing());
        let size = (self.nodes.len + 1).max(INITIAL_BUCKETS).next_power_of_two();
        if size != self.tables[0].len() {
            self.tables[1] = empty_table(size);
            self.rehash_idx = 0;
        }
    }

    /// Sizes an empty dict's table for `n` entries at once, as Redis's
    /// `dictExpand` does for an RDB file's RESIZEDB hint, so that a load
    /// never rehashes. A dict that holds entries keeps growing
    /// incrementally instead.
    pub fn reserve_when_empty(&mut self, n: usize) {
        if self.nodes.len > 0 || self.is_rehashing() {
            return;
        }
        let size = n.max(INITIAL_BUCKETS).next_power_of_two();
        if size > self.tables[0].len() {
            self.tables[0] = empty_table(size);
        }
    }

    fn maybe_grow(&mut self) {
        if self.is_rehashing() {
            return;
        }
        if self.tables[0].is_empty() {
            self.tables[0] = empty_table(INITIAL_BUCKETS);
        } else if self.used[0] >= self.tables[0].len() {
            self.start_resize();
        }
    }

    fn maybe_shrink(&mut self) {
        if !self.is_rehashing()
            && !self.shrink_paused
            && self.tables[0].len() > INITIAL_BUCKETS
            && self.nodes.len.saturating_mul(SHRINK_RATIO) < self.tables[0].len()
        {
            self.start_resize();
        }
    }

    /// Links a new node for a key known to be absent.
    fn insert_new(&mut self, hash: u64, key: K, value: V) -> usize {
        assert!(self.nodes.len < LEN_MAX, "dict full: {LEN_MAX} entries");
        self.maybe_grow();
        // While rehashing, new keys go to the new table only, so the old one
        // only ever drains.
        let t = usize::from(self.is_rehashing());
        let bucket = bucket_of(hash, self.tables[t].len());
        let next = self.tables[t][bucket];
        let i = self.nodes.push(Node { key, value, next });
        self.tables[t][bucket] = (i + 1) as Link;
        self.used[t] += 1;
        i
    }

    pub fn get<Q>(&self, k: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = self.find_index(self.hash(k), k)?;
        Some(&self.nodes.get(i).value)
    }

    pub fn get_key_value<Q>(&self, k: &Q) -> Option<(&K, &V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = self.find_index(self.hash(k), k)?;
        let node = self.nodes.get(i);
        Some((&node.key, &node.value))
    }

    pub fn contains_key<Q>(&self, k: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.find_index(self.hash(k), k).is_some()
    }

    /// Like `get`, and also does a migration step.
    pub fn get_mut<Q>(&mut self, k: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(k);
        self.step_on_op();
        let i = self.find_index(hash, k)?;
        Some(&mut self.nodes.get_mut(i).value)
    }

    /// Where `k`'s node is, for a caller that must look at the value
    /// before deciding to borrow it or to change the dict: one hash and
    /// one probe where `get` then `remove` or `get` would take two.
    pub fn find<Q>(&self, k: &Q) -> Option<Found>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.find_index(self.hash(k), k).map(Found)
    }

    /// `find` with `get_mut`'s migration step.
    pub fn find_mut<Q>(&mut self, k: &Q) -> Option<Found>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(k);
        self.step_on_op();
        self.find_index(hash, k).map(Found)
    }

    /// The value `find` found; the dict must not have changed since.
    pub fn at(&self, at: Found) -> &V {
        &self.nodes.get(at.0).value
    }

    /// `at`, mutably.
    pub fn at_mut(&mut self, at: Found) -> &mut V {
        &mut self.nodes.get_mut(at.0).value
    }

    /// Inserts or replaces; returns the old value. On replace the stored key
    /// is kept and `k` is dropped.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        let hash = self.hash(&k);
        self.step_on_op();
        if let Some(i) = self.find_index(hash, &k) {
            return Some(mem::replace(&mut self.nodes.get_mut(i).value, v));
        }
        self.insert_new(hash, k, v);
        None
    }

    /// The value for `k`, inserting `(make_key(), make_val())` if absent;
    /// true if it inserted. `make_key()` must equal `k` (and hash the same).
    /// One hash and one probe when the key exists.
    pub fn entry_or_insert_with<Q>(
        &mut self,
        k: &Q,
        make_key: impl FnOnce() -> K,
        make_val: impl FnOnce() -> V,
    ) -> (&mut V, bool)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(k);
        self.step_on_op();
        match self.find_index(hash, k) {
            Some(i) => (&mut self.nodes.get_mut(i).value, false),
            None => {
                let key = make_key();
                debug_assert!(key.borrow() == k, "make_key() differs from the looked-up key");
                let i = self.insert_new(hash, key, make_val());
                (&mut self.nodes.get_mut(i).value, true)
            }
        }
    }

    pub fn remove<Q>(&mut self, k: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.remove_entry(k).map(|(_, v)| v)
    }

    pub fn remove_entry<Q>(&mut self, k: &Q) -> Option<(K, V)>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = self.hash(k);
        self.step_on_op();
        let (t, pos, i) = self.find_pos(hash, k)?;
        let next = self.nodes.get(i).next;
        *self.link_mut(pos) = next;
        self.used[t] -= 1;
        let node = self.free_node(i);
        self.maybe_shrink();
        Some((node.key, node.value))
    }

    /// Migrates up to `max_buckets` non-empty buckets (visiting at most ten
    /// times as many empty ones); the server calls this from its cron in a
    /// loop under a time budget. Also starts a pending shrink. True if more
    /// migration work remains.
    pub fn rehash_step(&mut self, max_buckets: usize) -> bool {
        #[cfg(test)]
        {
            self.work = Work::default();
        }
        if !self.is_rehashing() {
            self.maybe_shrink();
        }
        self.rehash(max_buckets)
    }

    /// Whether a scan whose next cursor is `cursor` (what the last
    /// [`Dict::scan`] call returned) has already visited the bucket that `k`
    /// hashes to, whether or not `k` is present. Exact as long as the table
    /// has not shrunk since the scan began: the caller pauses shrinks (see
    /// "Snapshots") before its first `scan` call.
    ///
    /// Why it is exact: without a rehash, `scan` visits one bucket per call,
    /// in increasing order of the bucket index with its bits reversed
    /// (within the mask), starting from 0; so bucket `b` has been visited
    /// iff `reverse(b) < reverse(cursor)`. Growing keeps that true, and
    /// while a grow migrates, the smaller table (`tables[0]`) answers for
    /// both. Cursor 0 means nothing visited yet (a finished scan also
    /// returns 0: the caller must remember that it finished). One hash and
    /// a comparison.
    ///
    /// Panics while a shrink runs: the answer would mean nothing.
    pub fn scan_passed<Q>(&self, k: &Q, cursor: u64) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + ?Sized,
    {
        assert!(!self.is_shrinking(), "scan_passed during a shrink");
        let table = &self.tables[0];
        if table.is_empty() {
            return false;
        }
        let mask = (table.len() - 1) as u64;
        // A grow-only scan's cursor never has bits above the smaller mask.
        debug_assert_eq!(cursor & !mask, 0, "cursor {cursor:#x} beyond mask {mask:#x}");
        let bucket = self.hash(k) & mask;
        // Both have only the mask's low bits set, so comparing the full
        // 64-bit reversals compares the reversals within the mask.
        bucket.reverse_bits() < cursor.reverse_bits()
    }

    /// Removes and returns one entry, the most recently stored node (the
    /// last of the arena, so no other node moves): O(1) plus one chain walk.
    /// For draining a table piece by piece, so that freeing a big one never
    /// stalls (a snapshot frees what it kept this way).
    pub fn pop(&mut self) -> Option<(K, V)> {
        if self.is_empty() {
            return None;
        }
        self.step_on_op();
        let i = self.nodes.len - 1;
        let hash = self.hash(&self.nodes.get(i).key);
        let (t, pos) = self.pos_of_node(hash, i);
        let next = self.nodes.get(i).next;
        *self.link_mut(pos) = next;
        self.used[t] -= 1;
        let node = self.nodes.swap_remove(i);
        self.maybe_shrink();
        Some((node.key, node.value))
    }

    /// Keeps the entries for which `f` is true. O(n): admin paths only.
    pub fn retain(&mut self, mut f: impl FnMut(&K, &mut V) -> bool) {
        // Backwards, so that the node moved into a freed slot is one already
        // visited (and kept).
        let mut i = self.nodes.len;
        while i > 0 {
            i -= 1;
            let node = self.nodes.get_mut(i);
            if f(&node.key, &mut node.value) {
                continue;
            }
            let hash = self.hash(&self.nodes.get(i).key);
            let (t, pos) = self.pos_of_node(hash, i);
            let next = self.nodes.get(i).next;
            *self.link_mut(pos) = next;
            self.used[t] -= 1;
            drop(self.free_node(i));
        }
        self.maybe_shrink();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::collections::{HashMap, HashSet};

    type Key = Box<[u8]>;

    fn key(n: u64) -> Key {
        n.to_le_bytes().to_vec().into_boxed_slice()
    }

    #[test]
    fn prefetch_value_hands_over_the_value_of_a_key_heading_its_chain() {
        let mut d: Dict<Key, u64> = Dict::new();
        for n in 0..1000 {
            d.insert(key(n), n);
        }
        let mut seen = 0;
        for n in 0..1000 {
            let hash = d.hash_of(&*key(n));
            d.prefetch_bucket(hash);
            d.prefetch_chain(hash);
            d.prefetch_value(hash, &*key(n), |&v| {
                assert_eq!(v, n, "another key's value");
                seen += 1;
            });
        }
        // Only chain heads are handed over: most keys, not every one.
        assert!(seen > 500 && seen <= 1000, "{seen}");
        let absent = key(5000);
        d.prefetch_value(d.hash_of(&*absent), &*absent, |v| panic!("{v} for an absent key"));
    }

    impl<K: Hash + Eq, V, S: BuildHasher> Dict<K, V, S> {
        /// Checks every structural invariant; O(n).
        fn check(&self) {
            let mut seen = vec![false; self.nodes.len];
            for (t, table) in self.tables.iter().enumerate() {
                let mut count = 0;
                for (b, &head) in table.iter().enumerate() {
                    if t == 0 && self.is_rehashing() && b < self.rehash_idx {
                        assert_eq!(head, NIL, "migrated bucket {b} not empty");
                    }
                    let mut link = head;
                    while link != NIL {
                        let i = (link - 1) as usize;
                        assert!(!seen[i], "node {i} linked twice");
                        seen[i] = true;
                        let node = self.nodes.get(i);
                        assert_eq!(bucket_of(self.hash(&node.key), table.len()), b);
                        count += 1;
                        link = node.next;
                    }
                }
                assert_eq!(count, self.used[t], "used[{t}]");
            }
            assert!(seen.iter().all(|&s| s), "unlinked node");
            assert!(self.tables[0].is_empty() || self.tables[0].len().is_power_of_two());
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u16, u32),
        Remove(u16),
        RemoveRange(u16, u16),
        Get(u16),
        GetMut(u16, u32),
        Entry(u16, u32),
        Step(u8),
        Retain(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        let k = 0u16..600;
        prop_oneof![
            6 => (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::Insert(k, v)),
            3 => k.clone().prop_map(Op::Remove),
            1 => (k.clone(), 0u16..300).prop_map(|(a, n)| Op::RemoveRange(a, a.saturating_add(n))),
            3 => k.clone().prop_map(Op::Get),
            2 => (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::GetMut(k, v)),
            3 => (k.clone(), any::<u32>()).prop_map(|(k, v)| Op::Entry(k, v)),
            1 => any::<u8>().prop_map(Op::Step),
            1 => (1u16..8).prop_map(Op::Retain),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        #[test]
        fn behaves_like_hashmap(ops in proptest::collection::vec(op(), 1..1500)) {
            let mut d: Dict<Key, u32> = Dict::new();
            let mut m: HashMap<Key, u32> = HashMap::new();
            for op in ops {
                match op {
                    Op::Insert(k, v) => prop_assert_eq!(d.insert(key(k.into()), v), m.insert(key(k.into()), v)),
                    Op::Remove(k) => prop_assert_eq!(d.remove(&key(k.into())[..]), m.remove(&key(k.into())[..])),
                    Op::RemoveRange(a, b) => for k in a..b {
                        let k = key(k.into());
                        prop_assert_eq!(d.remove_entry(&k[..]), m.remove_entry(&k[..]));
                    },
                    Op::Get(k) => {
                        let k = key(k.into());
                        prop_assert_eq!(d.get(&k[..]), m.get(&k[..]));
                        prop_assert_eq!(d.contains_key(&k[..]), m.contains_key(&k[..]));
                        prop_assert_eq!(d.get_key_value(&k[..]), m.get_key_value(&k[..]));
                    }
                    Op::GetMut(k, v) => {
                        let k = key(k.into());
                        let (a, b) = (d.get_mut(&k[..]), m.get_mut(&k[..]));
                        prop_assert_eq!(a.is_some(), b.is_some());
                        if let (Some(a), Some(b)) = (a, b) { *a = v; *b = v; }
                    }
                    Op::Entry(k, v) => {
                        let k = key(k.into());
                        let existed = m.contains_key(&k[..]);
                        let (dv, inserted) = d.entry_or_insert_with(&k[..], || k.clone(), || v);
                        let mv = m.entry(k.clone()).or_insert(v);
                        prop_assert_eq!(inserted, !existed);
                        prop_assert_eq!(*dv, *mv);
                        *dv = dv.wrapping_add(1);
                        *mv = mv.wrapping_add(1);
                    }
                    Op::Step(n) => { d.rehash_step(n.into()); }
                    Op::Retain(modulus) => {
                        d.retain(|_, v| *v % u32::from(modulus) != 0);
                        m.retain(|_, v| *v % u32::from(modulus) != 0);
                    }
                }
                prop_assert_eq!(d.len(), m.len());
                d.check();
            }
            let mut got: Vec<_> = d.iter().map(|(k, v)| (k.clone(), *v)).collect();
            let mut want: Vec<_> = m.into_iter().collect();
            got.sort();
            want.sort();
            prop_assert_eq!(got, want);
        }
    }

    #[test]
    fn a_reserved_dict_fills_without_rehashing() {
        let mut d: Dict<u32, u32> = Dict::new();
        d.reserve_when_empty(5000);
        let buckets = d.buckets();
        assert_eq!(buckets, 8192);
        for i in 0..5000 {
            d.insert(i, i);
            assert!(!d.is_rehashing(), "rehashing at {i}");
        }
        assert_eq!(d.buckets(), buckets);
        // Only an empty dict takes the hint.
        d.reserve_when_empty(1 << 20);
        assert_eq!(d.buckets(), buckets);
        d.check();
    }

    #[test]
    fn insert_keeps_old_key_and_borrowed_lookup() {
        #[derive(Debug)]
        struct K(u32, &'static str);
        impl PartialEq for K {
            fn eq(&self, o: &K) -> bool {
                self.0 == o.0
            }
        }
        impl Eq for K {}
        impl Hash for K {
            fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
                self.0.hash(h)
            }
        }
        let mut d: Dict<K, u8> = Dict::new();
        assert_eq!(d.insert(K(1, "old"), 1), None);
        assert_eq!(d.insert(K(1, "new"), 2), Some(1));
        let (k, v) = d.get_key_value(&K(1, "")).unwrap();
        assert_eq!((k.1, *v), ("old", 2));

        let mut d: Dict<Key, u8> = Dict::default();
        assert!(d.get(&b"x"[..]).is_none());
        assert_eq!(d.scan(0, |_, _| unreachable!()), 0);
        let (v, inserted) = d.entry_or_insert_with(&b"x"[..], || b"x"[..].into(), || 7);
        assert!(inserted && *v == 7);
        assert_eq!(d.remove(&b"x"[..]), Some(7));
        assert!(d.is_empty());
        assert!(format!("{d:?}").starts_with("Dict"));
    }

    #[test]
    fn entry_hit_does_not_build_key() {
        let mut d: Dict<Key, u32> = Dict::new();
        d.insert(key(5), 1);
        let (v, inserted) = d.entry_or_insert_with(&key(5)[..], || panic!("key built"), || panic!());
        assert!(!inserted);
        assert_eq!(*v, 1);
    }

    /// `scan_many` is `calls` calls of `scan`: the same entries in the
    /// same order and the same cursors, on tables of every size, while
    /// rehashing too, for batches under, at and over `SCAN_AHEAD`; `ahead`
    /// sees only values that are then emitted.
    #[test]
    fn scan_many_is_that_many_scans() {
        let (mut rehashing_seen, mut stable_seen) = (false, false);
        for n in [0u64, 1, 5, 100, 1000, 4100] {
            // A fixed seed, so that which sizes end mid-rehash never varies.
            let mut d: Dict<u64, u64, foldhash::fast::FixedState> = Dict::new();
            for k in 0..n {
                d.insert(k * 7919, k);
            }
            rehashing_seen |= d.is_rehashing();
            stable_seen |= n > 0 && !d.is_rehashing();
            for calls in [1, 3, SCAN_AHEAD, SCAN_AHEAD + 1, 100] {
                let (mut one, mut many) = (Vec::new(), Vec::new());
                let (mut c1, mut c2) = (0, 0);
                let mut ahead = HashSet::new();
                loop {
                    for _ in 0..calls {
                        c1 = d.scan(c1, |k, v| one.push((*k, *v)));
                        if c1 == 0 {
                            break;
                        }
                    }
                    c2 = d.scan_many(c2, calls, |v| assert!(ahead.insert(*v)), |k, v| many.push((*k, *v)));
                    assert_eq!(c1, c2, "n {n}, calls {calls}");
                    assert_eq!(one, many, "n {n}, calls {calls}");
                    if c1 == 0 {
                        break;
                    }
                }
                assert_eq!(one.len() as u64, n);
                assert!(ahead.iter().all(|v| one.iter().any(|(_, w)| w == v)));
            }
        }
        assert!(rehashing_seen && stable_seen, "no case scanned a rehashing table, or none a stable one");
    }

    /// Runs one SCAN to completion while `mutate` changes the dict between
    /// calls; checks every key of `stable` (never removed) came back.
    fn scan_with(d: &mut Dict<u64, ()>, stable: &HashSet<u64>, mut mutate: impl FnMut(&mut Dict<u64, ()>, usize)) {
        let mut seen = HashSet::new();
        let mut cursor = 0;
        let mut calls = 0;
        loop {
            cursor = d.scan(cursor, |k, _| {
                seen.insert(*k);
            });
            calls += 1;
            assert!(calls < 10_000_000, "scan does not terminate");
            if cursor == 0 {
                break;
            }
            mutate(d, calls);
        }
        let missing: Vec<_> = stable.difference(&seen).collect();
        assert!(missing.is_empty(), "scan missed {} keys, e.g. {:?}", missing.len(), &missing[..missing.len().min(5)]);
    }

    #[test]
    fn scan_returns_every_stable_key_across_grow_and_shrink() {
        for seed in 0..40u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut d: Dict<u64, ()> = Dict::new();
            let stable: HashSet<u64> = (0..300).collect();
            for &k in &stable {
                d.insert(k, ());
            }
            // Keys that come and go during the scan: drive the table up past
            // 8x its size, then down below 1/8, mixing in cron steps.
            let mut extra: Vec<u64> = Vec::new();
            let mut next = 1_000_000u64;
            let grow_calls = rng.gen_range(5..200);
            scan_with(&mut d, &stable, |d, call| {
                if call < grow_calls {
                    for _ in 0..rng.gen_range(0..60) {
                        d.insert(next, ());
                        extra.push(next);
                        next += 1;
                    }
                } else {
                    for _ in 0..rng.gen_range(0..200) {
                        if let Some(k) = extra.pop() {
                            d.remove(&k);
                        }
                    }
                }
                if rng.gen_bool(0.2) {
                    d.rehash_step(rng.gen_range(1..4));
                }
            });
            d.check();
        }
    }

    #[test]
    fn scan_across_shrink_from_large() {
        for seed in 0..10u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let mut d: Dict<u64, ()> = Dict::new();
            let stable: HashSet<u64> = (0..100).map(|i| i * 7919).collect();
            for &k in &stable {
                d.insert(k, ());
            }
            let mut extra: Vec<u64> = (1_000_000..1_020_000).collect();
            for &k in &extra {
                d.insert(k, ());
            }
            while d.is_rehashing() {
                d.rehash_step(100);
            }
            let start_calls = rng.gen_range(0..2000);
            scan_with(&mut d, &stable, |d, call| {
                if call > start_calls {
                    for _ in 0..rng.gen_range(0..500) {
                        if let Some(k) = extra.pop() {
                            d.remove(&k);
                        }
                    }
                }
            });
            // The cron finishes a shrink that writes alone would take long to.
            while d.rehash_step(100) {}
            assert!(d.buckets() <= 256, "did not shrink: {d:?}");
            d.check();
        }
    }

    #[test]
    fn work_per_op_is_bounded_while_growing_and_shrinking() {
        const N: u64 = 1_000_000;
        // A fixed seed: with a random one, the longest chain among the
        // sequential keys came out at 44 nodes once in many runs.
        type Fixed = Dict<u64, u64, foldhash::fast::FixedState>;
        let mut d: Fixed = Dict::new();
        let mut max = Work::default();
        let mut resizes = 0;
        let track = |d: &Fixed, max: &mut Work| {
            max.buckets_visited = max.buckets_visited.max(d.work.buckets_visited);
            max.nodes_moved = max.nodes_moved.max(d.work.nodes_moved);
        };
        // A resize that starts allocates a table, so the bucket count rises;
        // counting rises also sees a resize that starts in the same insert
        // as the previous one ends.
        for k in 0..N {
            let before = d.buckets();
            d.insert(k, k);
            resizes += usize::from(d.buckets() > before);
            track(&d, &mut max);
        }
        // 4 to 2^20 buckets is 18 doublings; a long rehash may skip a size.
        assert!(resizes >= 15, "grew {resizes} times");
        assert!(d.buckets() >= N as usize);
        for k in 0..N {
            assert_eq!(d.remove(&k), Some(k));
            track(&d, &mut max);
        }
        // Writes alone lag behind a mass delete; the cron's steps catch up.
        while d.rehash_step(1) {
            track(&d, &mut max);
        }
        assert_eq!(d.buckets(), INITIAL_BUCKETS, "{d:?}");
        // One non-empty bucket plus at most ten empty ones; a chain is a few
        // nodes (the longest of a million chains at load factor 1 is about
        // 10 with a random hash; foldhash on sequential integers reaches
        // the high teens).
        assert!(max.buckets_visited <= 1 + EMPTY_VISITS_PER_BUCKET, "{max:?}");
        assert!(max.nodes_moved <= 32, "{max:?}");
        assert!(max.nodes_moved >= 1);
        eprintln!("{resizes} resizes; max work of one op over {N} inserts and removes: {max:?}");
    }

    #[test]
    fn scan_passed_is_exactly_what_scan_visited() {
        // Writes between scan calls: none, or enough inserts to double the
        // table several times during the scan (grows migrate across calls).
        for grow in [0usize, 3] {
            for (seed, n) in [(1u64, 0u64), (2, 1), (3, 3), (4, 100), (5, 1000), (6, 3000)] {
                scan_passed_case(seed, n, grow);
            }
        }
    }

    fn scan_passed_case(seed: u64, n: u64, grow: usize) {
        let mut absent_passed = 0usize;
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut d: Dict<u64, ()> = Dict::new();
        for k in 0..n {
            d.insert(k, ());
        }
        while d.rehash_step(100) {}
        d.pause_shrink(true);
        let buckets = d.buckets();
        // Probe keys, present and absent (absent ones hash to buckets too).
        let probes: Vec<u64> = (0..n + 200).chain((0..200).map(|_| rng.gen())).collect();
        // Keys inserted during the scan, and whether the scan had passed
        // each when it went in: it must come back iff not.
        let mut added: HashMap<u64, bool> = HashMap::new();
        let mut seen: HashSet<u64> = HashSet::new();
        let mut cursor = 0;
        let mut scans_while_growing = 0;
        loop {
            for &p in &probes {
                let passed = d.scan_passed(&p, cursor);
                if p < n {
                    assert_eq!(passed, seen.contains(&p), "key {p} at cursor {cursor:#x}, n {n}, grow {grow}");
                } else {
                    // An absent key shares its answer with its bucket:
                    // inserted now, it would be returned iff not passed.
                    absent_passed += usize::from(passed);
                }
            }
            for (&k, _) in added.iter().filter(|(k, _)| seen.contains(k)) {
                assert!(d.scan_passed(&k, cursor), "returned key {k} not passed at {cursor:#x}");
            }
            // A short-lived key must not move anything or shrink the table.
            let extra = 1_000_000 + rng.gen_range(0..1_000_000u64);
            d.insert(extra, ());
            d.remove(&extra);
            for _ in 0..grow {
                let k = 10_000_000 + rng.gen_range(0..1_000_000_000u64);
                if !d.contains_key(&k) {
                    added.insert(k, d.scan_passed(&k, cursor));
                    d.insert(k, ());
                }
            }
            scans_while_growing += usize::from(d.is_rehashing());
            cursor = d.scan(cursor, |k, _| {
                assert!(seen.insert(*k), "key {k} returned twice");
            });
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(seen.iter().filter(|&&k| k < n).count() as u64, n);
        for (k, passed) in added {
            assert_eq!(seen.contains(&k), !passed, "key {k} added during the scan");
        }
        assert!(n < 100 || absent_passed > 0, "absent keys' buckets are passed too");
        if grow == 0 && n > 0 {
            // (An empty dict allocates its first array on first insert.)
            assert_eq!(d.buckets(), buckets);
        }
        if grow > 0 && n >= 1000 {
            assert!(d.buckets() >= 4 * buckets, "{} buckets, {buckets} at the start", d.buckets());
            assert!(scans_while_growing > 0, "no scan call met a migration");
        }
    }

    #[test]
    #[should_panic(expected = "shrink")]
    fn scan_passed_refuses_a_shrinking_table() {
        let mut d: Dict<u64, ()> = Dict::new();
        for k in 0..1000 {
            d.insert(k, ());
        }
        while d.rehash_step(100) {}
        d.retain(|&k, _| k < 10);
        assert!(d.is_shrinking());
        d.scan_passed(&1, 0);
    }

    #[test]
    fn a_dict_paused_for_shrinking_grows_then_shrinks_once_resumed() {
        let mut d: Dict<u64, u64> = Dict::new();
        for k in 0..1000 {
            d.insert(k, k);
        }
        while d.rehash_step(100) {}
        let buckets = d.buckets();
        d.pause_shrink(true);
        assert!(d.is_shrink_paused());
        for k in 1000..(8 * buckets as u64) {
            d.insert(k, k);
        }
        while d.rehash_step(100) {}
        assert_eq!(d.buckets(), 8 * buckets, "grows go on while shrinks are paused");

        // Mass delete while paused keeps the array; the cron's step shrinks
        // once resumed.
        let buckets = d.buckets();
        d.retain(|&k, _| k < 10);
        for _ in 0..10 {
            assert!(!d.rehash_step(10));
        }
        assert_eq!(d.buckets(), buckets);
        d.clear();
        assert!(d.is_shrink_paused(), "clear keeps the pause");
        for k in 0..100 {
            d.insert(k, k);
        }
        while d.rehash_step(100) {}
        d.retain(|&k, _| k < 2);
        assert!(!d.is_rehashing() && !d.rehash_step(100), "no shrink while paused");
        d.pause_shrink(false);
        while d.rehash_step(100) {}
        assert_eq!(d.buckets(), INITIAL_BUCKETS);
        d.check();
    }

    #[test]
    fn pop_drains_everything_once() {
        let mut d: Dict<u64, u64> = Dict::new();
        for k in 0..10_000 {
            d.insert(k, k * 2);
        }
        for k in (0..10_000).step_by(3) {
            d.remove(&k);
        }
        let mut got = HashSet::new();
        while let Some((k, v)) = d.pop() {
            assert_eq!(v, k * 2);
            assert!(k % 3 != 0 && got.insert(k));
            if got.len() % 500 == 0 {
                d.check();
            }
        }
        assert_eq!(got.len(), 10_000 - 3334);
        assert!(d.is_empty() && d.pop().is_none());
        d.check();
    }

    #[test]
    fn random_entry_reaches_every_key() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut d: Dict<u64, u64> = Dict::new();
        assert!(d.random_entry(&mut rng).is_none());
        for k in 0..50 {
            d.insert(k, k);
        }
        let mut seen = HashSet::new();
        for _ in 0..100_000 {
            let (k, v) = d.random_entry(&mut rng).unwrap();
            assert_eq!(k, v);
            seen.insert(*k);
            if seen.len() == 50 {
                break;
            }
        }
        assert_eq!(seen.len(), 50);

        // Sparse after mass deletes: still every survivor, quickly.
        for k in 1000..200_000 {
            d.insert(k, k);
        }
        for k in 1000..200_000 {
            d.remove(&k);
        }
        let mut seen = HashSet::new();
        for _ in 0..10_000 {
            seen.insert(*d.random_entry(&mut rng).unwrap().0);
        }
        assert_eq!(seen.len(), 50);
    }

    #[test]
    fn clear_take_and_memory() {
        let mut d: Dict<Key, u64> = Dict::new();
        let empty = d.memory_usage();
        for k in 0..100_000 {
            d.insert(key(k), k);
        }
        let per_entry = (d.memory_usage() - empty) as f64 / d.len() as f64;
        assert!(per_entry < 48.0, "{per_entry} bytes per entry");
        assert_eq!(mem::size_of::<Node<Key, u64>>(), 32);
        let mut n = 0;
        for (_, v) in d.iter_mut() {
            *v += 1;
            n += 1;
        }
        assert_eq!(n, 100_000);
        assert_eq!(d.get(&key(5)[..]), Some(&6));
        let taken = mem::take(&mut d);
        assert_eq!(taken.len(), 100_000);
        assert!(d.is_empty() && d.buckets() == 0);
        d.insert(key(1), 1);
        d.clear();
        assert!(d.is_empty() && d.buckets() == 0);
        assert_eq!(d.memory_usage(), empty);
    }
}
