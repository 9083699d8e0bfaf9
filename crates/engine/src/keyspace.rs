//! The keyspace: 16384 hash slots split into contiguous ranges, one range
//! per shard, each shard behind its own lock.
//!
//! Why per-shard locks rather than threads that own shards (see
//! ARCHITECTURE.md for the measurement): any worker thread executes a
//! command to completion on the socket thread that read it, so a request
//! costs no cross-thread hop; locks are uncontended unless two threads hit
//! the same shard at the same instant. Multi-key commands and EXEC take the
//! locks of every shard they touch in ascending shard order, which makes
//! them atomic and deadlock-free.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, TryLockError};

use smallvec::SmallVec;

use crate::db::{Db, Key};
use crate::slot::{key_slot, SLOTS};
use crate::snapshot::SnapshotPhase;

pub struct Shard {
    pub index: usize,
    pub(crate) dbs: Box<[Db]>,
    /// The databases lent out mutably since [`Shard::drain_expired`] last
    /// ran, bit `i` for database `i` (bit 63 for every one from 63 on):
    /// only they can hold keys a command expired, so the drain after each
    /// command looks at the one it used, not at every one.
    touched: u64,
    /// Journal position of the last removal of a key here: a reply that
    /// reports a key missing depends on it.
    pub removed_lsn: u64,
    /// Journal position of the last write that touched the shard as a
    /// whole (FLUSHALL, SWAPDB, MOVE...): every reply from the shard
    /// depends on it.
    pub floor_lsn: u64,
    /// Where this shard stands in a point-in-time snapshot
    /// (`crate::snapshot`, which holds the methods that drive it).
    pub(crate) snapshot: SnapshotPhase,
    /// Client-side caching: the ids of the clients that read each key of
    /// this shard with tracking on (Redis's `TrackingTable`, keyed by the
    /// name whatever the database, as Redis's).
    tracked: HashMap<Key, Trackers>,
}

/// The clients tracking one key, by id (most keys have one or two).
pub type Trackers = SmallVec<[u64; 2]>;

impl Shard {
    /// An empty shard of `databases` databases.
    pub fn new(index: usize, databases: usize) -> Shard {
        let dbs = (0..databases).map(|_| Db::default()).collect();
        Shard {
            index,
            dbs,
            touched: 0,
            removed_lsn: 0,
            floor_lsn: 0,
            snapshot: SnapshotPhase::Idle,
            tracked: HashMap::new(),
        }
    }

    pub fn db(&mut self, index: usize) -> &mut Db {
        self.touch(index);
        &mut self.dbs[index]
    }

    pub fn dbs(&self) -> &[Db] {
        &self.dbs
    }

    pub fn dbs_mut(&mut self) -> &mut [Db] {
        self.touched = u64::MAX;
        &mut self.dbs
    }

    /// Two different databases of this shard at once (MOVE, SWAPDB).
    pub fn two_dbs(&mut self, a: usize, b: usize) -> (&mut Db, &mut Db) {
        assert_ne!(a, b, "two_dbs needs two different databases");
        self.touch(a);
        self.touch(b);
        if a < b {
            let (low, high) = self.dbs.split_at_mut(b);
            (&mut low[a], &mut high[0])
        } else {
            let (low, high) = self.dbs.split_at_mut(a);
            (&mut high[0], &mut low[b])
        }
    }

    fn touch(&mut self, index: usize) {
        self.touched |= 1 << index.min(63);
    }

    /// Hands over the keys that expired in this shard since the last call
    /// (each [`Db::expired`]), with their database.
    pub fn drain_expired(&mut self, mut f: impl FnMut(usize, Key)) {
        let mut touched = std::mem::take(&mut self.touched);
        while touched != 0 {
            let bit = touched.trailing_zeros() as usize;
            touched &= touched - 1;
            let last = if bit == 63 { self.dbs.len() } else { (bit + 1).min(self.dbs.len()) };
            for index in bit..last {
                self.dbs[index].expired.drain(..).for_each(|key| f(index, key));
            }
        }
    }

    /// Hands over the keys created in this shard since the last call
    /// (each [`Db::created`]), with their database.
    pub fn drain_created(&mut self, mut f: impl FnMut(usize, Key)) {
        for (index, db) in self.dbs.iter_mut().enumerate() {
            db.created.drain(..).for_each(|key| f(index, key));
        }
    }

    /// Remembers that client `id` may cache `key` (Redis's
    /// `trackingRememberKeys`). Returns whether the table gained a key, and
    /// whether it gained an item (a client for a key).
    pub fn track(&mut self, key: &[u8], id: u64) -> (bool, bool) {
        match self.tracked.get_mut(key) {
            Some(ids) if ids.contains(&id) => (false, false),
            Some(ids) => {
                ids.push(id);
                (false, true)
            }
            None => {
                self.tracked.insert(key.into(), smallvec::smallvec![id]);
                (true, true)
            }
        }
    }

    /// Hands over the keys modified in this shard since the last call,
    /// database by database in the order of their changes, each with whether its time ran out
    /// and the clients that tracked it, which the table forgets (Redis's
    /// `trackingInvalidateKey`).
    pub fn take_modified(&mut self, mut f: impl FnMut(&[u8], bool, Trackers)) {
        for db in self.dbs.iter_mut() {
            if db.modified.is_empty() {
                continue;
            }
            for (key, by_expiry) in std::mem::take(&mut db.modified) {
                let ids = if self.tracked.is_empty() { None } else { self.tracked.remove(&key[..]) };
                f(&key, by_expiry, ids.unwrap_or_default());
            }
        }
    }

    /// Forgets every tracked key (FLUSHALL, FLUSHDB); returns how many
    /// keys and items went.
    pub fn untrack_all(&mut self) -> (usize, usize) {
        let items = self.tracked.values().map(|ids| ids.len()).sum();
        let keys = self.tracked.len();
        self.tracked = HashMap::new();
        (keys, items)
    }

    /// Forgets up to `n` tracked keys, whichever come first, handing each
    /// over with its clients (the table's size limit).
    pub fn untrack_some(&mut self, n: usize) -> Vec<(Key, Trackers)> {
        let keys: Vec<Key> = self.tracked.keys().take(n).cloned().collect();
        keys.into_iter().filter_map(|k| self.tracked.remove(&k[..]).map(|ids| (k, ids))).collect()
    }

    /// How many keys the table holds.
    pub fn tracked_len(&self) -> usize {
        self.tracked.len()
    }

    /// SWAPDB's part in this shard (see [`Db::swap_data`]).
    pub fn swap_dbs(&mut self, a: usize, b: usize, now_ms: u64) {
        if a != b {
            let (da, db) = self.two_dbs(a, b);
            Db::swap_data(da, db, now_ms);
        }
    }
}

/// Where [`Keyspace::prefetch_bucket`] found a key: its shard, and its
/// hash in that shard's table, for the passes after it.
#[derive(Clone, Copy)]
pub struct Prefetch {
    shard: usize,
    hash: u64,
}

pub struct Keyspace {
    shards: Box<[Mutex<Shard>]>,
    /// slot >> shift = shard index; shards own contiguous slot ranges so
    /// that moving a range to another node later is one cut.
    shift: u32,
    databases: usize,
}

impl Keyspace {
    /// `shards` must be a power of two no greater than the slot count.
    pub fn new(shards: usize, databases: usize) -> Keyspace {
        assert!(shards.is_power_of_two() && shards <= SLOTS, "shard count {shards}");
        let shift = (SLOTS / shards).trailing_zeros();
        let shards = (0..shards).map(|index| Mutex::new(Shard::new(index, databases))).collect();
        Keyspace { shards, shift, databases }
    }

    pub fn shard_count(&self) -> usize {
        self.shards.len()
    }

    pub fn databases(&self) -> usize {
        self.databases
    }

    pub fn shard_of_slot(&self, slot: u16) -> usize {
        usize::from(slot) >> self.shift
    }

    pub fn shard_of_key(&self, key: &[u8]) -> usize {
        self.shard_of_slot(key_slot(key))
    }

    /// Locks the given shards in ascending order. `indexes` may be
    /// unsorted and contain duplicates.
    pub fn lock(&self, indexes: &mut SmallVec<[usize; 4]>) -> Locked<'_> {
        indexes.sort_unstable();
        indexes.dedup();
        let guards = indexes.iter().map(|&i| lock(&self.shards[i])).collect();
        Locked { guards, all: false }
    }

    pub fn lock_one(&self, index: usize) -> Locked<'_> {
        let mut guards = SmallVec::new();
        guards.push(lock(&self.shards[index]));
        Locked { guards, all: false }
    }

    pub fn lock_all(&self) -> Locked<'_> {
        let guards = self.shards.iter().map(lock).collect();
        Locked { guards, all: true }
    }

    /// Locks `shards`, as `lock_all`, `lock_one` or `lock` does.
    pub fn lock_shards(&self, shards: Shards) -> Locked<'_> {
        match shards {
            Shards::All => self.lock_all(),
            Shards::One(index) => self.lock_one(index),
            Shards::Some(mut indexes) => self.lock(&mut indexes),
        }
    }

    /// `lock_shards` without waiting: None, holding nothing, if another
    /// thread holds one of them.
    pub fn try_lock_shards(&self, shards: Shards) -> Option<Locked<'_>> {
        let all = matches!(shards, Shards::All);
        let mut indexes = match shards {
            Shards::All => (0..self.shards.len()).collect(),
            Shards::One(index) => smallvec::smallvec![index],
            Shards::Some(indexes) => indexes,
        };
        indexes.sort_unstable();
        indexes.dedup();
        let guards = indexes.iter().map(|&i| self.try_lock_shard(i)).collect::<Option<_>>()?;
        Some(Locked { guards, all })
    }

    /// Step 1 of a snapshot (`crate::snapshot`): on each shard in turn,
    /// pauses new shrinks of the key tables and finishes the ones under way,
    /// holding the shard's lock for one `Shard::finish_shrink_step` of
    /// `budget` buckets at a time, so clients wait at most one step.
    pub fn prepare_snapshot(&self, budget: usize) {
        for shard in self.shards.iter() {
            loop {
                // The guard is dropped at the end of this statement: other
                // threads get the shard between steps.
                let more = lock(shard).finish_shrink_step(budget);
                if !more {
                    break;
                }
            }
        }
    }

    /// Step 2 of a snapshot, the instant S: with every shard locked, calls
    /// `Shard::begin_snapshot` on each, then `at_s` (with the locks still
    /// held: the place to read the journal position that S corresponds to),
    /// and returns what `at_s` returns. O(shards x databases) under the
    /// locks after `prepare_snapshot`.
    pub fn begin_snapshot<T>(&self, at_s: impl FnOnce(&mut Locked<'_>) -> T) -> T {
        let mut all = self.lock_all();
        for shard in all.iter_mut() {
            shard.begin_snapshot();
        }
        at_s(&mut all)
    }

    /// The first of three passes over a batch of keys about to be looked
    /// up in database `db`: asks for each key's bucket
    /// ([`crate::dict::Dict::prefetch_bucket`]) and returns its shard and
    /// hash for the others, [`Keyspace::prefetch_chain`] and
    /// [`Keyspace::prefetch_value`]. `shard` is `key`'s. Waits for
    /// nothing: a locked shard is skipped (None).
    pub fn prefetch_bucket(&self, db: usize, shard: usize, key: &[u8]) -> Option<Prefetch> {
        debug_assert_eq!(shard, self.shard_of_key(key));
        let guard = self.try_lock_shard(shard)?;
        let keys = &guard.dbs.get(db)?.data.keys;
        let hash = keys.hash_of(key);
        keys.prefetch_bucket(hash);
        Some(Prefetch { shard, hash })
    }

    /// The second pass: asks for the first node of the chain the bucket
    /// found in the first points to.
    pub fn prefetch_chain(&self, db: usize, at: Prefetch) {
        if let Some(shard) = self.try_lock_shard(at.shard) {
            if let Some(d) = shard.dbs.get(db) {
                d.data.keys.prefetch_chain(at.hash);
            }
        }
    }

    /// The third pass: asks for the heap bytes of `key`'s string value,
    /// if the chain's first node holds it.
    pub fn prefetch_value(&self, db: usize, at: Prefetch, key: &[u8]) {
        if let Some(shard) = self.try_lock_shard(at.shard) {
            if let Some(d) = shard.dbs.get(db) {
                d.data.keys.prefetch_value(at.hash, key, crate::value::Entry::prefetch_value);
            }
        }
    }

    /// Tries a shard without waiting (for background chores that must
    /// never queue behind clients).
    pub fn try_lock_shard(&self, index: usize) -> Option<MutexGuard<'_, Shard>> {
        match self.shards[index].try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }
}

/// A shard's lock, waited for without yielding the core.
///
/// Why std's mutex and not parking_lot's: a BGSAVE's snapshot thread runs
/// in the idle scheduling class and takes shard locks. When a worker finds
/// one held by it, parking_lot spins with `sched_yield`, which hands the
/// core to the holder until the next scheduler tick (4 ms at HZ=250): an
/// idle-class thread is only preempted by a *waking* thread, and a yielding
/// one never sleeps. std's mutex spins briefly, then sleeps on a futex; the
/// holder's unlock wakes it, and waking preempts the idle class at once.
/// Measured under W1 on one core during BGSAVE: ~500 yields a second.
///
/// A panic while a shard is held (a bug) poisons nothing: the process goes
/// on as it would with parking_lot, whose locks do not poison.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Which shards a command needs.
#[derive(Clone)]
pub enum Shards {
    All,
    One(usize),
    /// In any order, with repeats.
    Some(SmallVec<[usize; 4]>),
}

/// The shards a command holds while it runs.
pub struct Locked<'a> {
    guards: SmallVec<[MutexGuard<'a, Shard>; 2]>,
    all: bool,
}

impl<'a> Locked<'a> {
    /// The locked shard that holds `key`'s slot.
    ///
    /// Panics if the command did not lock it: that is a bug in the
    /// command's key specification, and running on would break atomicity.
    pub fn shard_for(&mut self, keyspace: &Keyspace, key: &[u8]) -> &mut Shard {
        // Most commands hold exactly the one shard of their key: skip the
        // hash. Debug builds still check that the key really lives there.
        if !self.all && self.guards.len() == 1 {
            debug_assert_eq!(self.guards[0].index, keyspace.shard_of_key(key), "key's shard not locked");
            return &mut self.guards[0];
        }
        let index = keyspace.shard_of_key(key);
        self.shard(index)
    }

    pub fn shard(&mut self, index: usize) -> &mut Shard {
        if self.all {
            return &mut self.guards[index];
        }
        match self.guards.iter_mut().find(|g| g.index == index) {
            Some(g) => g,
            None => panic!("shard {index} used without being locked"),
        }
    }

    pub fn holds_all(&self) -> bool {
        self.all
    }

    pub fn holds(&self, index: usize) -> bool {
        self.all || self.guards.iter().any(|g| g.index == index)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Shard> + use<'_, 'a> {
        self.guards.iter_mut().map(|g| &mut **g)
    }

    /// Drops the watches no client reads any more: those whose flag only
    /// the watch tables still reference (its client let go of it while a
    /// script held the shards, and could not unwatch). A flag left on
    /// several keys keeps each of them referenced, so a key's own writes
    /// never let go of it: this counts the references in every table
    /// held, which must be all of them. O(watches).
    pub fn drop_unread_watches(&mut self) {
        debug_assert!(self.all, "every shard's references count");
        // Per flag: references in the tables, and in all.
        let mut refs: HashMap<*const AtomicBool, (usize, usize)> = HashMap::new();
        for shard in self.iter_mut() {
            for flag in shard.dbs.iter().flat_map(Db::watch_flags) {
                refs.entry(Arc::as_ptr(flag)).or_insert((0, Arc::strong_count(flag))).0 += 1;
            }
        }
        let unread: HashSet<*const AtomicBool> = refs.into_iter().filter(|(_, (tables, all))| tables == all).map(|(flag, _)| flag).collect();
        if unread.is_empty() {
            return;
        }
        for shard in self.iter_mut() {
            for db in &mut shard.dbs {
                db.drop_watchers(|flag| unread.contains(&Arc::as_ptr(flag)));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tracked_key_leaves_the_table_at_its_first_change_with_its_clients() {
        // Other tests' writes are noted too while this is on: harmless.
        crate::db::track_modified(true);
        let mut shard = Shard::new(0, 2);
        assert_eq!(shard.track(b"k", 7), (true, true));
        assert_eq!(shard.track(b"k", 7), (false, false));
        assert_eq!(shard.track(b"k", 9), (false, true));
        shard.track(b"other", 7);
        let s = |v: &str| crate::Value::Str(crate::value::Str::Raw(v.as_bytes().into()));
        // The table is per name: a write in another database counts.
        shard.db(1).set(b"k", s("v"), false, 0);
        shard.db(0).set(b"untracked", s("v"), false, 0);
        let mut seen = Vec::new();
        shard.take_modified(|key, by_expiry, ids| seen.push((key.to_vec(), by_expiry, ids.to_vec())));
        // Database by database.
        assert_eq!(seen, [(b"untracked".to_vec(), false, vec![]), (b"k".to_vec(), false, vec![7, 9])]);
        assert_eq!(shard.tracked_len(), 1);
        // A key that expires on a lookup is nobody's write.
        shard.track(b"t", 1);
        shard.db(0).set(b"t", s("v"), false, 0);
        shard.db(0).set_expire(b"t", 10, 5);
        shard.take_modified(|_, _, _| {});
        shard.track(b"t", 1);
        assert!(shard.db(0).get(b"t", 20).is_none());
        let mut seen = Vec::new();
        shard.take_modified(|key, by_expiry, ids| seen.push((key.to_vec(), by_expiry, ids.to_vec())));
        assert_eq!(seen, [(b"t".to_vec(), true, vec![1])]);
        assert_eq!(shard.untrack_all(), (1, 1));
        crate::db::track_modified(false);
    }

    /// A flag its client let go of is dropped from every key it watches,
    /// in every shard and database, even where it watches several keys
    /// (each keeps the others referenced); a flag a client still holds
    /// stays.
    #[test]
    fn unread_watches_go_and_read_ones_stay() {
        let keyspace = Keyspace::new(4, 2);
        let (gone, kept) = (crate::WatchFlag::default(), crate::WatchFlag::default());
        let keys: [&[u8]; 4] = [b"a", b"b", b"c", b"d"];
        let mut locked = keyspace.lock_all();
        for (i, key) in keys.iter().enumerate() {
            let db = locked.shard_for(&keyspace, key).db(i % 2);
            db.watch(key, &gone, 0);
            db.watch(key, &kept, 0);
        }
        locked.shard_for(&keyspace, b"e").db(0).watch(b"e", &gone, 0);
        let watched = |locked: &mut Locked<'_>| -> usize { locked.iter_mut().flat_map(|s| s.dbs().iter().map(Db::watched_keys).collect::<Vec<_>>()).sum() };
        locked.drop_unread_watches();
        assert_eq!(watched(&mut locked), 5, "both flags are held");
        drop(gone);
        locked.drop_unread_watches();
        assert_eq!(watched(&mut locked), 4, "e had only the dropped flag");
        drop(kept);
        locked.drop_unread_watches();
        assert_eq!(watched(&mut locked), 0);
    }

    #[test]
    fn shards_own_contiguous_slot_ranges() {
        let ks = Keyspace::new(64, 16);
        assert_eq!(ks.shard_of_slot(0), 0);
        assert_eq!(ks.shard_of_slot(255), 0);
        assert_eq!(ks.shard_of_slot(256), 1);
        assert_eq!(ks.shard_of_slot(16383), 63);
    }

    #[test]
    fn drain_expired_finds_keys_expired_in_any_database_lent_out() {
        use crate::value::{Str, Value};
        let mut shard = Shard::new(0, 70);
        let now = 1_000_000;
        for db in [2, 65] {
            shard.db(db).set(b"k", Value::Str(Str::from_bytes(b"v")), false, 0);
            shard.db(db).set_expire(b"k", now + 10, now);
        }
        // Nothing has expired yet; this drain also forgets the sets above.
        shard.drain_expired(|db, key| panic!("{db} {key:?}"));
        for db in [2, 65] {
            assert!(shard.db(db).get(b"k", now + 20).is_none());
        }
        let mut found = Vec::new();
        shard.drain_expired(|db, key| found.push((db, key.to_vec())));
        assert_eq!(found, [(2, b"k".to_vec()), (65, b"k".to_vec())]);
        shard.drain_expired(|db, key| panic!("drained twice: {db} {key:?}"));
        // Through the whole slice, too.
        shard.db(3).set(b"k", Value::Str(Str::from_bytes(b"v")), false, 0);
        shard.db(3).set_expire(b"k", now + 10, now);
        shard.drain_expired(|_, _| {});
        assert!(shard.dbs_mut()[3].get(b"k", now + 20).is_none());
        let mut found = Vec::new();
        shard.drain_expired(|db, key| found.push((db, key.to_vec())));
        assert_eq!(found, [(3, b"k".to_vec())]);
    }

    #[test]
    fn locking_many_is_ordered_and_deduplicated() {
        let ks = Keyspace::new(8, 1);
        let mut idx: SmallVec<[usize; 4]> = [5, 1, 5, 3].into_iter().collect();
        let mut locked = ks.lock(&mut idx);
        assert_eq!(locked.iter_mut().map(|s| s.index).collect::<Vec<_>>(), [1, 3, 5]);
        assert!(locked.holds(3) && !locked.holds(2));
    }
}
