//! Forkless point-in-time snapshots: the dataset of every shard exactly as
//! it was at one instant S, read out piece by piece while the server keeps
//! serving reads and writes (for BGSAVE's RDB and the AOF rewrite's base).
//!
//! # Why not fork
//!
//! Redis forks and lets the kernel copy pages on write. Keel is one process
//! of worker threads sharing the shards, so a fork would snapshot a process
//! whose locks may be held mid-command, and its copy-on-write is per 4 KiB
//! page: a write to one key copies its page, and under a write-heavy load
//! most of the dataset gets copied. Here the copy is per key and only of
//! what the snapshot still needs: the old version of an entry written during
//! the snapshot before the snapshot has read it out.
//!
//! # How
//!
//! At S the server holds every shard's lock and calls
//! [`Shard::begin_snapshot`] on each. From then on, per database:
//!
//! - A SCAN of the key table emits entries bucket by bucket
//!   ([`Shard::snapshot_step`], a bounded amount per call, under the lock).
//!   The table may grow but does not shrink until its scan ends
//!   ([`Dict::pause_shrink`]), so every key is visited exactly once and,
//!   for any key, whether the scan has passed its bucket is an exact O(1)
//!   question ([`Dict::scan_passed`]; the dict's "Snapshots" section says
//!   why growing keeps it exact).
//! - Before any write to a key whose bucket the scan has not passed, the
//!   key's entry as it is at that moment, which is its entry at S, is kept in
//!   `saved` (or `None`: absent at S) unless the key is already there: the
//!   first write wins ([`Shard::preserve`]; `Db`'s write methods do it
//!   themselves).
//! - The scan skips keys that are in `saved`; once the scan is done the
//!   `Some`s in `saved` are emitted.
//!
//! # Invariants (for one database's contents)
//!
//! 1. While scanning with cursor `c`, the key table neither shrinks nor is
//!    shrinking, so whether the scan has visited a key's bucket (in the
//!    smaller table while a grow migrates) is `Dict::scan_passed`, and a
//!    visited bucket is never visited again.
//! 2. A key in a bucket not yet visited and not in `saved` has not been
//!    written since S: its live entry, or its absence, is its state at S.
//!    (Every write preserves first, and a key enters `saved` at its first
//!    write.)
//! 3. `saved[k]` is `k`'s state at S, and `k` is in `saved` iff it was
//!    written since S while its bucket was not yet visited.
//!
//! Hence every key present at S is emitted exactly once, with its entry at
//! S: by the scan if it was not in `saved` when its bucket was visited (it
//! cannot enter `saved` after that), else from `saved`. A key created
//! after S is never emitted: it is in `saved` as `None`, or its bucket was
//! already visited and never is again. A key deleted after S is emitted
//! from `saved`. Entries that had expired at S but were not deleted yet
//! are emitted as they are; the caller filters by expiry as it likes.
//!
//! # Memory and latency
//!
//! `saved` holds at most one entry per distinct key written during the
//! snapshot, and only for keys the scan had not reached; each is freed as
//! it is emitted, and each database's `saved` as soon as that database is
//! done ([`Shard::snapshot_saved_bytes`] reports it). The price is paid by
//! the first write to a key: one clone of its entry, which for a big
//! collection is O(its size), once per key per snapshot.
//!
//! No call holds a lock for long: `begin_snapshot` is O(databases) as long
//! as no shrink is under way, which [`Shard::finish_shrink_step`] (called
//! before S, in short locked steps) guarantees by pausing new shrinks
//! before finishing the running ones; `snapshot_step` does about
//! `max_entries` units of work; `preserve` one lookup and at most one clone.
//! Key tables grow during a snapshot as at any other time, incrementally,
//! so a long snapshot under a load that creates keys keeps lookups O(1).
//! A database's key table may shrink again as soon as its scan ends.
//!
//! # Whole-database writes
//!
//! The state lives in `DbData`, with the contents it describes, and knows
//! the database number it had at S. So SWAPDB (which swaps `DbData`)
//! carries it along with no work, and FLUSHDB and FLUSHALL ([`Db::take_all`])
//! hand the old contents to the snapshot, which emits and frees them piece
//! by piece; the new contents are all newer than S and take no part. A
//! server that prefers Redis's behaviour for FLUSHALL (abandon the
//! snapshot) calls [`Shard::abort_snapshot`] first.
//!
//! # Not captured exactly
//!
//! A read refreshes an entry's access time (`Entry::access_s`) through
//! `Db::get_mut` without preserving it, and the journal stamps
//! `Entry::lsn` after writes: a snapshot may show these two bookkeeping
//! fields as they were when it read the entry. Neither is data.
//!
//! A key's memcached flags (`DbData::items`) go with its entry: kept in
//! `saved_flags` beside it when it is preserved (only flags change with a
//! write, which preserves first), read from `items` when it is emitted
//! from the table, where nothing has written it since S.

use std::collections::HashMap;

use crate::db::{Db, DbData, ItemMeta, Key};
use crate::dict::Dict;
use crate::keyspace::Shard;
use crate::value::Entry;

/// Where a shard stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SnapshotPhase {
    Idle,
    /// [`Shard::finish_shrink_step`] ran: shrinks of the key tables are
    /// paused while the ones under way finish, until `begin_snapshot` (or
    /// `abort_snapshot`).
    Preparing,
    /// Between `begin_snapshot` and the end of the last `snapshot_step` (or
    /// `abort_snapshot`).
    Active,
}

/// How far the scan of one database's key table has got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    /// The next cursor for `Dict::scan`. Cursor 0 is "not started": no bucket
    /// counts as visited. (A finished `Dict::scan` also returns 0, which is
    /// why finishing moves to `Scanned` rather than storing it.)
    Scanning(u64),
    /// Every bucket visited: what is left to emit is in `saved`.
    Scanned,
}

/// The snapshot's state for one database's contents (`DbData::snap`).
pub(crate) struct DbSnapshot {
    /// The database number these contents had at S: what `emit` is told.
    origin: usize,
    progress: Progress,
    /// The state at S of keys written since S before the scan reached them.
    /// A `Dict` rather than a `HashMap` so that it can be drained a few
    /// entries per step ([`Dict::pop`]) instead of freed all at once.
    saved: Dict<Key, Option<Entry>>,
    /// The memcached flags at S of the keys in `saved` that had some.
    saved_flags: HashMap<Key, u32>,
    /// Heap owned by `saved`'s keys and values (the table is measured by
    /// `Dict::memory_usage`).
    saved_heap: usize,
}

/// The memcached flags `items` holds for `key`, 0 for none (most keys, and
/// every key of a dataset memcached never wrote: no lookup then).
fn flags_of(items: &HashMap<Key, ItemMeta>, key: &[u8]) -> u32 {
    if items.is_empty() {
        return 0;
    }
    items.get(key).map_or(0, |m| m.flags)
}

/// `flags_of`, for frozen contents: the entry is dropped.
fn take_flags(items: &mut HashMap<Key, ItemMeta>, key: &[u8]) -> u32 {
    if items.is_empty() {
        return 0;
    }
    items.remove(key).map_or(0, |m| m.flags)
}

fn entry_heap(key: &[u8], entry: Option<&Entry>) -> usize {
    key.len() + entry.map_or(0, |e| e.value.heap_size())
}

impl DbSnapshot {
    /// Keeps `key`'s current state in `saved` unless the scan has passed it
    /// or it is kept already (`keys` is the table the state belongs to).
    pub(crate) fn preserve(&mut self, keys: &Dict<Key, Entry>, items: &HashMap<Key, ItemMeta>, key: &[u8]) {
        match self.progress {
            Progress::Scanned => return,
            Progress::Scanning(cursor) => {
                if keys.scan_passed(key, cursor) {
                    return;
                }
            }
        }
        if self.saved.contains_key(key) {
            return;
        }
        let old = keys.get(key).cloned();
        self.saved_heap += entry_heap(key, old.as_ref());
        self.saved.insert(key.into(), old);
        let flags = flags_of(items, key);
        if flags != 0 {
            self.saved_flags.insert(key.into(), flags);
        }
    }

    /// Heap of `saved` (not the fixed size of the state itself, so that an
    /// empty `saved` counts 0).
    fn saved_bytes(&self) -> usize {
        self.saved.memory_usage() - std::mem::size_of_val(&self.saved) + self.saved_heap
    }
}

impl DbData {
    /// Starts the snapshot of these contents, which had number `origin` at
    /// S. Shrinks stop first, then any one under way is finished (normally
    /// none: see `Shard::finish_shrink_step`); a grow under way goes on.
    /// Empty contents need no state: everything they will ever hold is
    /// newer than S.
    fn begin_snapshot(&mut self, origin: usize) {
        debug_assert!(self.snap.is_none());
        self.keys.pause_shrink(true);
        while self.keys.is_shrinking() {
            self.keys.rehash_step(1024);
        }
        if self.keys.is_empty() {
            self.keys.pause_shrink(false);
            return;
        }
        self.snap = Some(Box::new(DbSnapshot {
            origin,
            progress: Progress::Scanning(0),
            saved: Dict::new(),
            saved_flags: HashMap::new(),
            saved_heap: 0,
        }));
    }

    /// Emits up to about `*work` units of these contents; true once all are
    /// emitted (the state is then dropped, and a detached `DbData` is empty).
    ///
    /// Live contents are scanned. Detached ones (flushed during the
    /// snapshot, so frozen) are drained with `pop` instead, emitting what the
    /// scan had not reached, so that their memory comes back as they go.
    fn snapshot_step(&mut self, detached: bool, work: &mut usize, emit: &mut impl FnMut(usize, &[u8], &Entry, u32)) -> bool {
        let Some(snap) = self.snap.as_deref_mut() else { return true };
        let origin = snap.origin;
        if detached {
            // Frozen: shrinking it would be wasted work (and while
            // scanning, it is paused already, which `scan_passed` relies on).
            self.keys.pause_shrink(true);
            while *work > 0 {
                let Some((key, entry)) = self.keys.pop() else { break };
                let in_saved = snap.saved.contains_key(&key[..]);
                // Freed with their keys, but for those `saved` emits below.
                let flags = if in_saved { 0 } else { take_flags(&mut self.items, &key) };
                // Still the bucket array of S, so the cursor still tells
                // what the scan had emitted. Once scanned, keys are only freed.
                if let Progress::Scanning(cursor) = snap.progress {
                    if !in_saved && !self.keys.scan_passed(&key[..], cursor) {
                        emit(origin, &key, &entry, flags);
                    }
                }
                *work -= 1;
            }
            if !self.keys.is_empty() {
                return false;
            }
            snap.progress = Progress::Scanned;
        }
        if let (Progress::Scanning(cursor), true) = (snap.progress, *work > 0) {
            let (saved, items) = (&snap.saved, &self.items);
            // As many buckets as entries are wanted (a bucket holds at most
            // one entry on average, the table's load factor), each bucket
            // counting as one so that a sparse table cannot make a step
            // unbounded: the call spends the step's work.
            let next = self.keys.scan_many(cursor, *work, Entry::prefetch_value, |key, entry| {
                if saved.is_empty() || !saved.contains_key(&key[..]) {
                    emit(origin, key, entry, flags_of(items, key));
                }
            });
            *work = 0;
            if next == 0 {
                snap.progress = Progress::Scanned;
                // Nothing depends on bucket positions any more.
                self.keys.pause_shrink(false);
                // `saved` only drains from now on: shrinking it is wasted work.
                snap.saved.pause_shrink(true);
            } else {
                snap.progress = Progress::Scanning(next);
            }
        }
        if snap.progress != Progress::Scanned {
            return false;
        }
        while *work > 0 {
            let Some((key, old)) = snap.saved.pop() else { break };
            snap.saved_heap -= entry_heap(&key, old.as_ref());
            let flags = snap.saved_flags.remove(&key[..]).unwrap_or(0);
            if detached {
                take_flags(&mut self.items, &key);
            }
            if let Some(entry) = &old {
                emit(origin, &key, entry, flags);
            }
            *work -= 1;
        }
        if !snap.saved.is_empty() {
            return false;
        }
        if detached {
            // Its keys are gone; the copies of them in `expires` too, a few
            // at a time for the same reason.
            while *work > 0 && self.expires.pop().is_some() {
                *work -= 1;
            }
            if !self.expires.is_empty() {
                return false;
            }
        }
        self.snap = None;
        true
    }
}

/// What an aborted snapshot still held, to be dropped off the serving path
/// when big (`Send`): the saved entries and any flushed contents.
#[derive(Default)]
pub struct SnapshotLeftovers {
    saved: Vec<Dict<Key, Option<Entry>>>,
    detached: Vec<DbData>,
}

impl SnapshotLeftovers {
    /// Entries held (each about one allocation to free or more).
    pub fn len(&self) -> usize {
        self.saved.iter().map(Dict::len).sum::<usize>() + self.detached.iter().map(|d| d.keys.len()).sum::<usize>()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What a running snapshot holds besides the live dataset.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Entries in `saved` (old versions of keys written during the snapshot,
    /// `None`s for keys created during it included).
    pub saved_entries: usize,
    /// Approximate bytes of `saved`: table, keys and values' heap.
    pub saved_bytes: usize,
    /// Keys of contents flushed during the snapshot and not yet emitted.
    pub detached_keys: usize,
    /// Approximate bytes of those contents' tables (their values' heap is
    /// not counted: that would be a walk over all of them).
    pub detached_bytes: usize,
}

impl Db {
    /// The contents of this database that the running snapshot has not
    /// finished with: the live ones and those flushed during it.
    fn snapshot_parts(&self) -> impl Iterator<Item = &DbData> {
        std::iter::once(&self.data).chain(self.detached.iter()).filter(|d| d.snap.is_some())
    }
}

/// Which contents `snapshot_step` works on: live (`None`) or detached.
type Part = (usize, Option<usize>);

impl Shard {
    /// Before S, with the lock held for one call: stops new shrinks of this
    /// shard's key tables (from the first call on) and moves up to `budget`
    /// buckets of one that is under way. True while work remains; the
    /// server calls it (lock, step, unlock) until false, then takes every
    /// lock for S. Because new shrinks cannot start in between, S's
    /// `begin_snapshot` then has no shrink to finish (grows may run on
    /// through S). A server that gives up before `begin_snapshot` calls
    /// `abort_snapshot`, which resumes them.
    pub fn finish_shrink_step(&mut self, budget: usize) -> bool {
        if self.snapshot == SnapshotPhase::Active {
            return false;
        }
        if self.snapshot == SnapshotPhase::Idle {
            self.snapshot = SnapshotPhase::Preparing;
            for db in self.dbs.iter_mut() {
                db.data.keys.pause_shrink(true);
            }
        }
        let Some(db) = self.dbs.iter_mut().find(|db| db.data.keys.is_shrinking()) else {
            return false;
        };
        // A table created by FLUSHDB since the first call is not paused yet.
        db.data.keys.pause_shrink(true);
        db.data.keys.rehash_step(budget.max(1));
        self.dbs.iter().any(|db| db.data.keys.is_shrinking())
    }

    /// The instant S for this shard: called with every shard locked
    /// (`Keyspace::lock_all`), on each shard, before any lock is released.
    /// Pauses the shrinks of every key table and finishes any shrink under
    /// way (nothing to finish after `finish_shrink_step`). O(databases)
    /// then.
    ///
    /// Panics if a snapshot is already running on this shard: the server
    /// runs one at a time (`abort_snapshot` ends one early).
    pub fn begin_snapshot(&mut self) {
        assert!(self.snapshot != SnapshotPhase::Active, "a snapshot is already running on shard {}", self.index);
        for (origin, db) in self.dbs.iter_mut().enumerate() {
            debug_assert!(db.detached.is_empty());
            db.data.begin_snapshot(origin);
        }
        self.snapshot = SnapshotPhase::Active;
    }

    /// Whether a snapshot is running here (begun, not yet finished or
    /// aborted).
    #[inline]
    pub fn snapshot_active(&self) -> bool {
        self.snapshot == SnapshotPhase::Active
    }

    /// Before a write command mutates `key` (in any database of this shard:
    /// MOVE and COPY name a key in another one), keeps its entry as at S for
    /// the running snapshot if needed. One branch when none runs; else a few
    /// lookups per database and at most one clone per database, the first
    /// time the key is written. `Db`'s own write methods preserve anyway;
    /// this is for writes through `Db::get_mut`/`peek_mut`, and calling it
    /// for every key a write names is the simple safe rule. Idempotent.
    #[inline]
    pub fn preserve(&mut self, key: &[u8]) {
        if self.snapshot != SnapshotPhase::Active {
            return;
        }
        for db in self.dbs.iter_mut() {
            db.preserve(key);
        }
    }

    /// As `preserve`, for one database only (cheaper when the caller knows
    /// which databases the command writes).
    #[inline]
    pub fn preserve_in(&mut self, db: usize, key: &[u8]) {
        if self.snapshot == SnapshotPhase::Active {
            self.dbs[db].preserve(key);
        }
    }

    /// Emits about `max_entries` more entries of the snapshot (more by at
    /// most one bucket's chain), calling `emit(db, key, entry, flags)` with
    /// the database number at S and the key's memcached flags at S (0 for
    /// none). True once the whole
    /// shard is emitted: the snapshot has then ended here (every table may
    /// shrink again, all kept memory is freed); it is also true when no
    /// snapshot runs.
    ///
    /// Within a shard entries come grouped by database, in increasing
    /// number; each key present at S exactly once, with its entry at S.
    pub fn snapshot_step(&mut self, max_entries: usize, mut emit: impl FnMut(usize, &[u8], &Entry, u32)) -> bool {
        if self.snapshot != SnapshotPhase::Active {
            return true;
        }
        let mut work = max_entries.max(1);
        while let Some((db, detached)) = self.next_part() {
            let db = &mut self.dbs[db];
            let done = match detached {
                None => db.data.snapshot_step(false, &mut work, &mut emit),
                Some(i) => {
                    let done = db.detached[i].snapshot_step(true, &mut work, &mut emit);
                    if done {
                        // Empty now: dropping it is a few `free`s.
                        db.detached.swap_remove(i);
                    }
                    done
                }
            };
            if !done {
                return false;
            }
        }
        self.snapshot = SnapshotPhase::Idle;
        true
    }

    /// The unfinished contents with the smallest number at S.
    fn next_part(&self) -> Option<Part> {
        let mut best: Option<(usize, Part)> = None;
        for (i, db) in self.dbs.iter().enumerate() {
            let live = db.data.snap.as_ref().map(|s| (s.origin, (i, None)));
            let detached = db.detached.iter().enumerate().filter_map(|(j, d)| d.snap.as_ref().map(|s| (s.origin, (i, Some(j)))));
            for (origin, part) in live.into_iter().chain(detached) {
                if best.is_none_or(|(o, _)| origin < o) {
                    best = Some((origin, part));
                }
            }
        }
        best.map(|(_, part)| part)
    }

    /// Ends the snapshot (or its preparation) early, as FLUSHALL does in
    /// Redis: every table may shrink again. What the snapshot held comes back
    /// to be dropped off the serving path if big. No-op when none runs.
    pub fn abort_snapshot(&mut self) -> SnapshotLeftovers {
        let mut left = SnapshotLeftovers::default();
        for db in self.dbs.iter_mut() {
            if let Some(snap) = db.data.snap.take() {
                left.saved.push(snap.saved);
            }
            db.data.keys.pause_shrink(false);
            left.detached.append(&mut db.detached);
        }
        self.snapshot = SnapshotPhase::Idle;
        left
    }

    /// Approximate bytes the running snapshot holds besides the live data:
    /// its saved entries and the tables of contents flushed during it (see
    /// [`SnapshotStats`]). 0 when none runs. O(databases).
    pub fn snapshot_saved_bytes(&self) -> usize {
        let stats = self.snapshot_stats();
        stats.saved_bytes + stats.detached_bytes
    }

    /// What the running snapshot holds here, in detail. O(databases).
    pub fn snapshot_stats(&self) -> SnapshotStats {
        let mut stats = SnapshotStats::default();
        for db in self.dbs.iter() {
            for data in db.snapshot_parts() {
                let Some(snap) = data.snap.as_deref() else { continue };
                stats.saved_entries += snap.saved.len();
                stats.saved_bytes += snap.saved_bytes();
            }
            for data in &db.detached {
                stats.detached_keys += data.keys.len();
                stats.detached_bytes += data.keys.memory_usage() + data.expires.memory_usage();
            }
        }
        stats
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::value::{Str, Value, NO_EXPIRY};
    use proptest::prelude::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};
    use std::collections::{BTreeMap, HashSet};

    /// The time the tests run at: entries expiring before it are expired.
    const NOW: u64 = 10_000;

    /// (db, key) -> (string value, expiry): `Value` has no `PartialEq`.
    type State = BTreeMap<(usize, Vec<u8>), (Vec<u8>, u64)>;

    fn key(n: u32) -> Vec<u8> {
        format!("k{n}").into_bytes()
    }

    fn s(v: &[u8]) -> Value {
        Value::Str(Str::from_bytes(v))
    }

    fn describe(e: &Entry) -> (Vec<u8>, u64) {
        match &e.value {
            Value::Str(s) => (s.as_bytes(&mut itoa::Buffer::new()).to_vec(), e.expire_at_ms),
            other => panic!("tests store strings only, got {}", other.type_name()),
        }
    }

    fn state(shard: &Shard) -> State {
        let mut st = State::new();
        for (i, db) in shard.dbs.iter().enumerate() {
            for (k, e) in db.iter() {
                st.insert((i, k.to_vec()), describe(e));
            }
        }
        st
    }

    /// Collects what a snapshot emits, failing on any key emitted twice.
    #[derive(Default)]
    struct Sink {
        got: State,
        entries: usize,
    }

    impl Sink {
        fn step(&mut self, shard: &mut Shard, budget: usize) -> bool {
            shard.snapshot_step(budget, |db, k, e, _| {
                self.entries += 1;
                let old = self.got.insert((db, k.to_vec()), describe(e));
                assert!(old.is_none(), "db {db} key {:?} emitted twice", String::from_utf8_lossy(k));
            })
        }

        fn finish(&mut self, shard: &mut Shard) {
            for _ in 0..10_000_000 {
                if self.step(shard, 64) {
                    return;
                }
            }
            panic!("snapshot does not finish");
        }
    }

    /// Builds a shard of `dbs` databases with about `keys` string keys in
    /// each of random databases (db 1 stays empty), some with a TTL, some
    /// of those already expired.
    fn populate(rng: &mut SmallRng, dbs: usize, keys: u32) -> Shard {
        let mut shard = Shard::new(0, dbs);
        for (i, db) in shard.dbs.iter_mut().enumerate() {
            if i == 1 {
                continue;
            }
            let n = rng.gen_range(0..=keys);
            for _ in 0..n {
                let k = key(rng.gen_range(0..keys * 2));
                db.set(&k, s(format!("v{}", rng.gen::<u16>()).as_bytes()), false, 0);
                if rng.gen_bool(0.1) {
                    db.set_expire(&k, rng.gen_range(NOW / 2..NOW * 2), 0);
                }
            }
        }
        shard
    }

    #[derive(Debug, Clone)]
    enum Op {
        Step(u16),
        /// Set, with or without the server's explicit `preserve` first.
        Set { db: usize, key: u32, val: u16, explicit: bool },
        /// A mutation through `get_mut` (APPEND), preserved as the server must.
        Append { db: usize, key: u32 },
        Del { db: usize, key: u32 },
        /// Deletes a run of keys: nodes move into the holes, tables want to shrink.
        DelRange { db: usize, from: u32, n: u32 },
        /// Creates a run of keys: tables want to grow.
        Grow { db: usize, from: u32, n: u32 },
        Expire { db: usize, key: u32, at: u64 },
        Persist { db: usize, key: u32 },
        /// A read: expires the key lazily if due.
        Read { db: usize, key: u32 },
        ActiveExpire { db: usize },
        Move { from: usize, to: usize, key: u32 },
        Swap { a: usize, b: usize },
        Flush { db: usize },
        FlushAll,
    }

    fn apply(shard: &mut Shard, sink: &mut Sink, op: &Op) {
        match *op {
            Op::Step(budget) => {
                sink.step(shard, budget.into());
            }
            Op::Set { db, key: k, val, explicit } => {
                let k = key(k);
                if explicit {
                    shard.preserve(&k);
                }
                shard.db(db).set(&k, s(format!("w{val}").as_bytes()), val % 2 == 0, 0);
            }
            Op::Append { db, key: k } => {
                let k = key(k);
                shard.preserve_in(db, &k);
                if let Some(e) = shard.db(db).get_mut(&k, NOW) {
                    let Value::Str(st) = &mut e.value else { unreachable!() };
                    st.make_raw().push(b'+');
                }
            }
            Op::Del { db, key: k } => {
                shard.db(db).remove(&key(k));
            }
            Op::DelRange { db, from, n } => {
                for k in from..from + n {
                    shard.db(db).remove(&key(k));
                }
            }
            Op::Grow { db, from, n } => {
                for k in from..from + n {
                    shard.db(db).set(&key(k), s(b"grown"), false, 0);
                }
            }
            Op::Expire { db, key: k, at } => {
                shard.db(db).set_expire(&key(k), at, NOW);
            }
            Op::Persist { db, key: k } => {
                shard.db(db).persist(&key(k));
            }
            Op::Read { db, key: k } => {
                shard.db(db).get(&key(k), NOW);
            }
            Op::ActiveExpire { db } => {
                shard.db(db).active_expire(NOW, 20);
            }
            Op::Move { from, to, key: k } => {
                // MOVE: only if absent in the target.
                let k = key(k);
                if from != to && shard.db(to).peek(&k).is_none() {
                    if let Some(e) = shard.db(from).remove(&k) {
                        shard.db(to).insert_entry(&k, e);
                    }
                }
            }
            Op::Swap { a, b } => shard.swap_dbs(a, b, NOW),
            Op::Flush { db } => drop(shard.db(db).take_all()),
            Op::FlushAll => {
                for db in shard.dbs.iter_mut() {
                    drop(db.take_all());
                }
            }
        }
        check_tables(shard);
    }

    /// A table being scanned neither shrinks nor is shrinking (invariant
    /// 1); every other live table resizes freely.
    fn check_tables(shard: &Shard) {
        for (i, db) in shard.dbs.iter().enumerate() {
            let scanning = db.data.snap.as_ref().is_some_and(|s| matches!(s.progress, Progress::Scanning(_)));
            assert_eq!(db.data.keys.is_shrink_paused(), scanning, "db {i}");
            if scanning {
                assert!(!db.data.keys.is_shrinking(), "db {i} shrinking during its scan");
            }
        }
    }

    fn random_op(rng: &mut SmallRng, dbs: usize, keys: u32) -> Op {
        let db = rng.gen_range(0..dbs);
        let k = rng.gen_range(0..keys * 3);
        match rng.gen_range(0..1000) {
            0..=149 => Op::Step(rng.gen_range(1..40)),
            150..=449 => Op::Set { db, key: k, val: rng.gen(), explicit: rng.gen() },
            450..=549 => Op::Append { db, key: k },
            550..=699 => Op::Del { db, key: k },
            700..=719 => Op::DelRange { db, from: k, n: rng.gen_range(1..keys / 2 + 2) },
            720..=739 => Op::Grow { db, from: keys * 3 + rng.gen_range(0..keys * 3), n: rng.gen_range(1..keys + 2) },
            740..=789 => Op::Expire { db, key: k, at: rng.gen_range(NOW / 2..NOW * 2) },
            790..=819 => Op::Persist { db, key: k },
            820..=909 => Op::Read { db, key: k },
            910..=929 => Op::ActiveExpire { db },
            930..=979 => Op::Move { from: db, to: rng.gen_range(0..dbs), key: k },
            980..=989 => Op::Swap { a: db, b: rng.gen_range(0..dbs) },
            990..=998 => Op::Flush { db },
            _ => Op::FlushAll,
        }
    }

    /// What `run` saw, to check the test exercises what it means to.
    #[derive(Default)]
    struct Seen {
        /// Operations after which a table being scanned was growing.
        growing_during_scan: usize,
        /// Writes applied while the snapshot was active.
        writes_during: usize,
    }

    /// Starts a snapshot of `shard`, runs `ops` interleaved with it, finishes
    /// it, and checks that exactly the state at the start came out.
    fn run(mut shard: Shard, ops: impl IntoIterator<Item = Op>, prepare: bool) -> Seen {
        if prepare {
            let mut calls = 0;
            while shard.finish_shrink_step(4) {
                calls += 1;
                assert!(calls < 1_000_000);
            }
        }
        let at_s = state(&shard);
        shard.begin_snapshot();
        assert!(shard.snapshot_active());
        check_tables(&shard);
        let mut sink = Sink::default();
        let mut seen = Seen::default();
        for op in ops {
            if shard.snapshot_active() && !matches!(op, Op::Step(_)) {
                seen.writes_during += 1;
            }
            apply(&mut shard, &mut sink, &op);
            let scanning = |db: &&Db| db.data.snap.as_ref().is_some_and(|s| matches!(s.progress, Progress::Scanning(_)));
            if shard.dbs.iter().filter(scanning).any(|db| db.data.keys.is_rehashing()) {
                seen.growing_during_scan += 1;
            }
        }
        sink.finish(&mut shard);
        assert!(!shard.snapshot_active());
        assert_eq!(shard.snapshot_stats(), SnapshotStats::default());
        for db in shard.dbs.iter() {
            assert!(db.data.snap.is_none() && db.detached.is_empty());
            assert!(!db.data.keys.is_shrink_paused());
        }
        assert_eq!(sink.entries, at_s.len());
        if sink.got != at_s {
            let missing: Vec<_> = at_s.iter().filter(|(k, v)| sink.got.get(k) != Some(v)).take(5).collect();
            let extra: Vec<_> = sink.got.iter().filter(|(k, v)| at_s.get(k) != Some(v)).take(5).collect();
            panic!("snapshot differs from the state at S: missing or different {missing:?}, extra {extra:?}");
        }
        // Ended: another one can start and sees the current state.
        let now = state(&shard);
        shard.begin_snapshot();
        let mut sink = Sink::default();
        sink.finish(&mut shard);
        assert_eq!(sink.got, now);
        seen
    }

    #[test]
    fn snapshot_is_the_state_at_its_start_under_random_writes() {
        let mut growing_during_scan = 0;
        let mut writes_during = 0;
        for seed in 0..24u64 {
            let mut rng = SmallRng::seed_from_u64(seed);
            let dbs = 4;
            let keys = if seed % 3 == 0 { 300 } else { 3000 };
            let shard = populate(&mut rng, dbs, keys);
            let n_ops = rng.gen_range(0..6000);
            let ops: Vec<Op> = (0..n_ops).map(|_| random_op(&mut rng, dbs, keys)).collect();
            let seen = run(shard, ops, seed % 2 == 0);
            growing_during_scan += seen.growing_during_scan;
            writes_during += seen.writes_during;
        }
        // Tables grew while being scanned, across several operations.
        assert!(growing_during_scan > 100, "only {growing_during_scan} operations saw a scanned table grow");
        eprintln!("{growing_during_scan} operations during a grow of a scanned table, {writes_during} writes during snapshots");
        assert!(writes_during > 24 * 1000, "only {writes_during} writes during snapshots");
    }

    fn op_strategy(dbs: usize, keys: u32) -> impl Strategy<Value = Op> {
        let db = 0..dbs;
        let k = 0..keys * 3;
        prop_oneof![
            20 => (1u16..30).prop_map(Op::Step),
            25 => (db.clone(), k.clone(), any::<u16>(), any::<bool>())
                .prop_map(|(db, key, val, explicit)| Op::Set { db, key, val, explicit }),
            10 => (db.clone(), k.clone()).prop_map(|(db, key)| Op::Append { db, key }),
            15 => (db.clone(), k.clone()).prop_map(|(db, key)| Op::Del { db, key }),
            2 => (db.clone(), k.clone(), 1..keys).prop_map(|(db, from, n)| Op::DelRange { db, from, n }),
            2 => (db.clone(), 0..keys * 3, 1..keys).prop_map(move |(db, from, n)| Op::Grow { db, from: keys * 3 + from, n }),
            5 => (db.clone(), k.clone(), NOW / 2..NOW * 2).prop_map(|(db, key, at)| Op::Expire { db, key, at }),
            3 => (db.clone(), k.clone()).prop_map(|(db, key)| Op::Persist { db, key }),
            8 => (db.clone(), k.clone()).prop_map(|(db, key)| Op::Read { db, key }),
            2 => db.clone().prop_map(|db| Op::ActiveExpire { db }),
            5 => (db.clone(), db.clone(), k.clone()).prop_map(|(from, to, key)| Op::Move { from, to, key }),
            1 => (db.clone(), db.clone()).prop_map(|(a, b)| Op::Swap { a, b }),
            1 => db.prop_map(|db| Op::Flush { db }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn snapshot_is_the_state_at_its_start(
            seed in any::<u64>(),
            prepare in any::<bool>(),
            ops in proptest::collection::vec(op_strategy(3, 400), 0..800),
        ) {
            let shard = populate(&mut SmallRng::seed_from_u64(seed), 3, 400);
            run(shard, ops, prepare);
        }
    }

    /// The protocol the server follows, with real threads and locks: writers
    /// lock a key's shard, preserve, write; the snapshot prepares, begins
    /// under every lock, then steps each shard under its own lock.
    #[test]
    fn concurrent_writers_across_shards() {
        use crate::keyspace::Keyspace;
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

        let ks = Keyspace::new(16, 2);
        let keys = 20_000u32;
        for k in 0..keys {
            let kb = key(k);
            let mut locked = ks.lock_one(ks.shard_of_key(&kb));
            locked.shard_for(&ks, &kb).db((k % 2) as usize).set(&kb, s(b"v0"), false, 0);
        }
        let stop = AtomicBool::new(false);
        let writes = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for t in 0..2u64 {
                let (ks, stop, writes) = (&ks, &stop, &writes);
                scope.spawn(move || {
                    let mut rng = SmallRng::seed_from_u64(t);
                    while !stop.load(Ordering::Relaxed) {
                        let kb = key(rng.gen_range(0..keys * 2));
                        let db = rng.gen_range(0..2);
                        let mut locked = ks.lock_one(ks.shard_of_key(&kb));
                        let shard = locked.shard_for(ks, &kb);
                        // As the server: preserve every key the command names.
                        shard.preserve(&kb);
                        match rng.gen_range(0..4) {
                            0 => drop(shard.db(db).remove(&kb)),
                            1 => {
                                if let Some(e) = shard.db(db).get_mut(&kb, NOW) {
                                    let Value::Str(st) = &mut e.value else { unreachable!() };
                                    st.make_raw().push(b'+');
                                }
                            }
                            _ => drop(shard.db(db).set(&kb, s(format!("v{}", rng.gen::<u8>()).as_bytes()), false, 0)),
                        }
                        writes.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            while writes.load(Ordering::Relaxed) < 1000 {
                std::thread::yield_now();
            }
            ks.prepare_snapshot(4);
            let at_s = ks.begin_snapshot(|all| {
                let mut st = State::new();
                for i in 0..16 {
                    st.extend(state(all.shard(i)));
                }
                st
            });
            let before = writes.load(Ordering::Relaxed);
            let mut got = State::new();
            let mut emitted = 0;
            for i in 0..16 {
                loop {
                    let mut locked = ks.lock_one(i);
                    let done = locked.shard(i).snapshot_step(16, |db, k, e, _| {
                        emitted += 1;
                        got.insert((db, k.to_vec()), describe(e));
                    });
                    drop(locked);
                    if done {
                        break;
                    }
                    std::thread::yield_now();
                }
            }
            stop.store(true, Ordering::Relaxed);
            assert!(writes.load(Ordering::Relaxed) > before + 100, "writers starved");
            assert_eq!(emitted, at_s.len(), "some key emitted twice");
            assert!(got == at_s, "snapshot differs from the state at S");
        });
    }

    #[test]
    fn leftovers_can_be_dropped_on_another_thread() {
        fn send<T: Send + 'static>() {}
        send::<SnapshotLeftovers>();
        send::<DbData>();
    }

    #[test]
    fn deleted_modified_created_and_untouched_keys() {
        let mut shard = Shard::new(0, 2);
        for k in 0..2000 {
            shard.db(0).set(&key(k), s(b"old"), false, 0);
        }
        shard.begin_snapshot();
        // Written before the scan reaches anything: all kept.
        shard.db(0).remove(&key(0));
        shard.db(0).set(&key(1), s(b"new"), false, 0);
        shard.db(0).set(&key(5000), s(b"created"), false, 0);
        shard.db(1).set(&key(1), s(b"created"), false, 0);
        let mut sink = Sink::default();
        sink.finish(&mut shard);
        assert_eq!(sink.got.len(), 2000);
        assert!(sink.got.values().all(|(v, e)| v == b"old" && *e == NO_EXPIRY));
        assert!(sink.got.contains_key(&(0, key(0))) && !sink.got.contains_key(&(0, key(5000))));
    }

    #[test]
    fn saved_holds_at_most_one_entry_per_key_written() {
        let mut rng = SmallRng::seed_from_u64(9);
        let mut shard = Shard::new(0, 2);
        for k in 0..5000 {
            shard.db(0).set(&key(k), s(&[b'x'; 100]), false, 0);
        }
        let at_s = state(&shard);
        shard.begin_snapshot();
        assert_eq!(shard.snapshot_saved_bytes(), 0);
        // K distinct keys, half existing and half new, written many times
        // each, in both databases, while the scan advances.
        let written: Vec<u32> = (0..100).map(|i| if i % 2 == 0 { i * 37 } else { 10_000 + i }).collect();
        let mut distinct = HashSet::new();
        let mut sink = Sink::default();
        for round in 0..20 {
            for &k in &written {
                let db = rng.gen_range(0..2);
                distinct.insert((db, k));
                match round % 3 {
                    0 => drop(shard.db(db).set(&key(k), s(format!("r{round}").as_bytes()), false, 0)),
                    1 => drop(shard.db(db).remove(&key(k))),
                    _ => {
                        shard.preserve(&key(k));
                        if let Some(e) = shard.db(db).get_mut(&key(k), NOW) {
                            e.expire_at_ms = NOW * 10;
                        }
                    }
                }
                let stats = shard.snapshot_stats();
                assert!(stats.saved_entries <= distinct.len(), "{stats:?} for {} keys", distinct.len());
            }
            sink.step(&mut shard, 50);
        }
        let stats = shard.snapshot_stats();
        assert!(stats.saved_entries > 0 && stats.saved_entries <= written.len() * 2, "{stats:?}");
        // About one 100-byte value per kept existing key, not the dataset.
        assert!(stats.saved_bytes > 100 && stats.saved_bytes < 64 * 1024, "{stats:?}");
        sink.finish(&mut shard);
        assert_eq!(sink.got, at_s);
        assert_eq!(shard.snapshot_saved_bytes(), 0);
    }

    #[test]
    fn writes_behind_the_scan_keep_nothing() {
        let mut shard = Shard::new(0, 1);
        for k in 0..3000 {
            shard.db(0).set(&key(k), s(b"v"), false, 0);
        }
        shard.begin_snapshot();
        let mut sink = Sink::default();
        // Scan half the table, then write every key: only those ahead of the
        // scan are kept.
        while sink.entries < 1500 {
            sink.step(&mut shard, 10);
        }
        let emitted: HashSet<Vec<u8>> = sink.got.keys().map(|(_, k)| k.clone()).collect();
        for k in 0..3000 {
            shard.db(0).set(&key(k), s(b"w"), false, 0);
        }
        assert_eq!(shard.snapshot_stats().saved_entries, 3000 - emitted.len());
        sink.finish(&mut shard);
        assert_eq!(sink.got.len(), 3000);
        assert!(sink.got.values().all(|(v, _)| v == b"v"));
    }

    #[test]
    fn finish_shrink_step_is_bounded_and_leaves_nothing_for_s() {
        let mut shard = Shard::new(0, 2);
        for k in 0..20_000 {
            shard.db(0).set(&key(k), s(b"v"), false, 0);
        }
        while shard.db(0).data.keys.rehash_step(1000) {}
        // Stop right after a shrink of a big table starts.
        let mut k = 0;
        while !shard.db(0).data.keys.is_shrinking() {
            shard.db(0).remove(&key(k));
            k += 1;
            shard.db(0).data.keys.rehash_step(0);
        }
        let buckets_at_start = shard.db(0).data.keys.buckets();
        let mut calls = 0;
        while shard.finish_shrink_step(8) {
            calls += 1;
            // Writes between the steps: no new shrink starts, grows do.
            shard.db(0).remove(&key(k));
            for j in 0..8 {
                shard.db(1).set(&key(k * 8 + j), s(b"v"), false, 0);
            }
            k += 1;
        }
        assert!(calls > 10, "{calls} calls: steps were not small");
        assert!(!shard.db(0).data.keys.is_shrinking() && !shard.db(1).data.keys.is_shrinking());
        assert!(shard.db(0).data.keys.buckets() < buckets_at_start, "the old table is gone");
        assert!(shard.db(1).data.keys.buckets() >= shard.db(1).len() / 2, "db 1 grew meanwhile");
        for _ in 0..1000 {
            shard.db(0).remove(&key(k));
            k += 1;
            shard.db(0).data.keys.rehash_step(8);
            assert!(!shard.db(0).data.keys.is_shrinking());
        }
        assert!(!shard.snapshot_active());
        shard.begin_snapshot();
        let mut sink = Sink::default();
        sink.finish(&mut shard);
        assert_eq!(sink.entries, shard.db(0).len() + shard.db(1).len());
    }

    #[test]
    fn abort_resumes_shrinks_and_hands_back_what_was_kept() {
        let mut shard = Shard::new(0, 2);
        for k in 0..1000 {
            shard.db(0).set(&key(k), s(b"v"), false, 0);
            shard.db(1).set(&key(k), s(b"v"), false, 0);
        }
        // Aborting a preparation.
        shard.finish_shrink_step(1);
        assert!(shard.db(0).data.keys.is_shrink_paused());
        assert!(shard.abort_snapshot().is_empty());
        assert!(!shard.db(0).data.keys.is_shrink_paused());

        shard.begin_snapshot();
        for k in 0..100 {
            shard.db(0).remove(&key(k));
        }
        drop(shard.db(1).take_all());
        assert!(shard.snapshot_stats().detached_keys == 1000);
        let left = shard.abort_snapshot();
        assert!(left.len() > 1000, "{}", left.len());
        assert!(!shard.snapshot_active());
        assert!(shard.snapshot_step(10, |_, _, _, _| panic!("aborted")));
        for db in shard.dbs.iter() {
            assert!(!db.data.keys.is_shrink_paused() && db.data.snap.is_none() && db.detached.is_empty());
        }
        // Growth resizes again.
        for k in 1000..5000 {
            shard.db(0).set(&key(k), s(b"v"), false, 0);
        }
        assert!(shard.db(0).data.keys.buckets() >= shard.db(0).len() / 2);
    }

    #[test]
    fn flags_are_emitted_as_they_were_at_s() {
        use crate::db::ItemMeta;
        let meta = |flags| ItemMeta { flags, ..ItemMeta::default() };
        let mut shard = Shard::new(0, 2);
        for db in 0..2 {
            for k in 0..2000 {
                shard.db(db).set(&key(k), s(b"old"), false, 0);
                if k % 10 == 0 {
                    shard.db(db).set_item_meta(&key(k), meta(k + 1));
                }
            }
        }
        shard.begin_snapshot();
        // Before the scan reaches them: kept at S with their flags then.
        shard.db(0).set(&key(0), s(b"new"), false, 0);
        shard.db(0).set_item_meta(&key(0), meta(999));
        shard.db(0).remove(&key(10));
        shard.db(0).set(&key(5), s(b"new"), false, 0);
        shard.db(0).set_item_meta(&key(5), meta(55));
        // Flushed: emitted from the detached contents, kept ones included.
        shard.db(1).set(&key(3), s(b"new"), false, 0);
        shard.db(1).set_item_meta(&key(3), meta(77));
        shard.db(1).set(&key(20), s(b"new"), false, 0);
        drop(shard.db(1).take_all());
        let mut got = BTreeMap::new();
        while !shard.snapshot_step(50, |db, k, e, flags| {
            assert_eq!(describe(e).0, b"old");
            assert!(got.insert((db, k.to_vec()), flags).is_none());
        }) {}
        assert_eq!(got.len(), 4000);
        for ((db, k), flags) in got {
            let n: u32 = std::str::from_utf8(&k[1..]).unwrap().parse().unwrap();
            let want = if n.is_multiple_of(10) { n + 1 } else { 0 };
            assert_eq!(flags, want, "db {db} key {n}");
        }
        assert!(shard.db(1).detached.is_empty());
    }

    #[test]
    fn emitted_by_database_at_s_through_swapdb_and_flushdb() {
        let mut shard = Shard::new(0, 4);
        for db in 0..4 {
            for k in 0..500 {
                shard.db(db).set(&key(k), s(format!("db{db}").as_bytes()), false, 0);
            }
        }
        let at_s = state(&shard);
        shard.begin_snapshot();
        shard.swap_dbs(0, 3, NOW);
        assert_eq!(shard.db(0).take_all().keys.len(), 0, "flushed contents stay with the snapshot");
        shard.db(0).set(b"new", s(b"new"), false, 0);
        shard.swap_dbs(1, 2, NOW);
        let mut order = Vec::new();
        let mut got = State::new();
        while !shard.snapshot_step(37, |db, k, e, _| {
            order.push(db);
            got.insert((db, k.to_vec()), describe(e));
        }) {}
        assert!(order.windows(2).all(|w| w[0] <= w[1]), "not grouped by database");
        assert_eq!(got, at_s);
        assert!(shard.db(0).data.snap.is_none() && shard.db(0).detached.is_empty());
    }
}
