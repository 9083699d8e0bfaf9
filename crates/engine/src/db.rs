//! One logical database (SELECT 0..15) inside one shard: its keys, the
//! subset that carries a TTL, the clients WATCHing its keys and the
//! clients blocked on them (BLPOP and friends).
//!
//! Every write goes through a method here, so that expiry bookkeeping and
//! WATCH invalidation cannot be forgotten by a command.
//!
//! The same holds for snapshots (`crate::snapshot`): while one runs, every
//! write method here first keeps the key's entry as it was when the
//! snapshot began ([`Db::preserve`]), so that deletions nobody names (lazy
//! expiry on a read, the active expiry cycle) and MOVE, RENAME, FLUSHDB and
//! SWAPDB need nothing from the caller. The exceptions are `get_mut` and
//! `peek_mut`: reads use `get_mut` too (to refresh the access time), so a
//! command that mutates an entry through them calls `preserve` first.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::dict::Dict;
use crate::snapshot::DbSnapshot;
use crate::value::{Entry, Value, NO_EXPIRY};

/// Keys of the keyspace: inline up to 15 bytes (see `crate::compact`).
pub type Key = crate::compact::CompactBytes;

/// Set when a key a client WATCHes is modified; EXEC then aborts.
pub type WatchFlag = Arc<AtomicBool>;

/// One client watching one key of this database.
struct Watcher {
    flag: WatchFlag,
    /// The key existed but had already expired when WATCH ran (Redis's
    /// `watchedKey.expired`). Such a key is logically absent, so its lazy
    /// deletion later is no change and must not abort EXEC; only its
    /// coming back to life is.
    stale: bool,
}

/// The part of a database that SWAPDB exchanges.
#[derive(Default)]
pub struct DbData {
    pub(crate) keys: Dict<Key, Entry>,
    /// Keys that have an expiry, so the active cycle samples only those
    /// (Redis keeps the same second table).
    pub(crate) expires: Dict<Key, ()>,
    /// Where the active expiry cycle resumes its scan of `expires`.
    expire_cursor: u64,
    /// The running snapshot's state for these contents, until it has
    /// emitted them all. It lives with the contents rather than with the
    /// database number so that SWAPDB carries it along (it knows which
    /// database the contents were at the snapshot's instant) and FLUSHDB
    /// can hand both over together ([`Db::take_all`]).
    pub(crate) snap: Option<Box<DbSnapshot>>,
    /// What memcached keeps per item besides its value, for the keys that
    /// have some: non-zero flags, a CAS value handed out, or a read by a
    /// memcached client. Keys only Redis clients use have none of these,
    /// so a side table costs them nothing; any change to a
    /// key through anything but the memcached commands drops its entry
    /// ([`Db::signal_modified`]), which resets its flags and gives it a
    /// fresh CAS value when next asked.
    pub(crate) items: HashMap<Key, ItemMeta>,
}

/// [`Db::table_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableBytes {
    pub main: usize,
    pub expires: usize,
}

/// A memcached item's flags and CAS value; 0 for either means none (a CAS
/// value is handed out when a client first asks for one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItemMeta {
    pub flags: u32,
    pub cas: u64,
    /// A memcached client has read the item since it was written
    /// (memcached's ITEM_FETCHED, which `mg`'s `h` flag reports).
    pub fetched: bool,
    /// An `mg` with `R` has handed out the item's recache token since it
    /// was written (memcached's ITEM_TOKEN_SENT: the next ones see `Z`).
    pub token_sent: bool,
}

#[derive(Default)]
pub struct Db {
    pub data: DbData,
    watched: HashMap<Key, Vec<Watcher>>,
    /// Keys removed because their time ran out (INFO stats expired_keys).
    pub expired_keys: u64,
    /// Those keys, until the server has journaled each as a DEL (Redis
    /// propagates expiries the same way): replayed later, the log must not
    /// depend on when the replay runs.
    pub expired: Vec<Key>,
    /// Clients blocked on each key, by client id, first blocked first.
    pub blocked: HashMap<Key, VecDeque<u64>>,
    /// Keys with blocked clients that came into existence since the server
    /// last served them (Redis's `signalKeyAsReady`). A blocked key is
    /// always absent (or of another type), so creation is the only event
    /// that can make it servable.
    pub ready: Vec<Key>,
    /// Keys created since the server last looked, while it asks for them
    /// ([`record_created_keys`]): Redis's new-key notifications.
    pub created: Vec<Key>,
    /// Contents flushed (FLUSHDB, FLUSHALL) while the snapshot still had to
    /// emit them: the snapshot owns them now and frees them as it goes.
    pub(crate) detached: Vec<DbData>,
    /// Keys modified since the server last looked, while some client
    /// tracks keys ([`track_modified`]), each with whether its time ran
    /// out (no client wrote it): client-side caching's invalidations,
    /// which `Shard::take_modified` matches against the shard's table.
    pub(crate) modified: Vec<(Key, bool)>,
}

/// Whether every database notes the keys modified in `Db::modified`: on
/// while a client tracks keys or the tracking table holds any, so that a
/// write costs one relaxed load when nobody does.
static TRACK_MODIFIED: AtomicBool = AtomicBool::new(false);

/// Turns the noting of modified keys (`Db::modified`) on or off.
pub fn track_modified(on: bool) {
    TRACK_MODIFIED.store(on, Ordering::Relaxed);
}

thread_local! {
    /// Writes on this thread are not noted in `Db::modified` ([`loading`]).
    static LOADING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// This thread noted a modified key since [`take_noted`] last looked.
    static NOTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether this thread noted a modified key (`Db::modified`) since the
/// last call: a command that wrote nothing need not look at the shards it
/// holds (every shard, for a script in cluster mode). A write notes its key
/// in the shard it holds locked, so the thread that wrote is the one that
/// takes the key (`Shard::take_modified`) before it lets the shard go.
pub fn take_noted() -> bool {
    NOTED.with(|n| n.replace(false))
}

/// Notes again what [`take_noted`] took, for the command it was taken
/// from (a script, when commands ran beside it).
pub fn note_modified() {
    NOTED.with(|n| n.set(true));
}

/// While on, writes on the calling thread are not noted as modified: a
/// dataset loaded in place of a flushed one (DEBUG RELOAD, a replica's
/// full sync), whose flush already told every tracking client, as Redis's
/// loading signals no key.
pub fn loading(on: bool) {
    LOADING.with(|l| l.set(on));
}

/// Whether every database notes the keys it creates in `Db::created`.
/// One flag for the process rather than one per database: the server sets
/// it from `notify-keyspace-events`, and the two places that create keys
/// read it without a way to reach the server's configuration.
static RECORD_CREATED: AtomicBool = AtomicBool::new(false);

/// Turns the noting of created keys (`Db::created`) on or off.
pub fn record_created_keys(on: bool) {
    RECORD_CREATED.store(on, Ordering::Relaxed);
}

/// Whether deleting an expired key is timed ([`take_slowest_expired_delete`]):
/// on while the server's latency monitor is, for its `expire-del` event.
/// One flag for the process, as [`RECORD_CREATED`].
static TIME_EXPIRED_DELETES: AtomicBool = AtomicBool::new(false);

/// Turns the timing of expired keys' deletions on or off.
pub fn time_expired_deletes(on: bool) {
    TIME_EXPIRED_DELETES.store(on, Ordering::Relaxed);
}

thread_local! {
    /// Lookups on this thread treat a key past its time as absent but
    /// leave it in place ([`hide_expired`]).
    static HIDE_EXPIRED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// The longest deletion of an expired key on this thread since the
    /// last [`take_slowest_expired_delete`], while they are timed.
    static SLOWEST_EXPIRED_DELETE: std::cell::Cell<Option<std::time::Duration>> = const { std::cell::Cell::new(None) };
}

/// The longest deletion of an expired key (its removal and freeing) on
/// the calling thread since the last call, if any was timed
/// ([`time_expired_deletes`]).
pub fn take_slowest_expired_delete() -> Option<std::time::Duration> {
    SLOWEST_EXPIRED_DELETE.with(std::cell::Cell::take)
}

/// While on, lookups on the calling thread answer a key past its time as
/// absent without deleting it: a replica's reads, as Redis's
/// `expireIfNeeded` on a replica, where only the master's DELs remove
/// keys. Read only when a key has expired, so it costs the common path
/// nothing.
pub fn hide_expired(on: bool) {
    HIDE_EXPIRED.with(|h| h.set(on));
}

/// How hard the active expiry works, from `active-expire-effort` (1-10)
/// as Redis scales its cycle: each step above 1 samples a quarter more
/// keys per pass, tolerates one point less of expired keys before it
/// stops, and gives the cycle two points more of the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpireEffort {
    /// Samples per pass (Redis samples 20 per loop; a bigger batch
    /// amortises the clock read).
    pub batch: usize,
    /// Another pass follows while more than this percentage of a pass's
    /// samples had expired.
    pub stale_percent: usize,
    /// The share of each tick the cycle may take, in percent (Redis's slow
    /// cycle's 25% at effort 1); the server sets the deadline from it.
    pub time_percent: u32,
}

impl ExpireEffort {
    pub fn new(effort: u32) -> ExpireEffort {
        let step = effort.clamp(1, 10) as usize - 1;
        ExpireEffort { batch: 64 + 64 / 4 * step, stale_percent: 10 - step, time_percent: 25 + 2 * step as u32 }
    }
}

/// What an active expiry pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ExpirePass {
    pub sampled: usize,
    pub expired: usize,
}

impl Db {
    pub fn len(&self) -> usize {
        self.data.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.data.keys.is_empty()
    }

    pub fn expires_len(&self) -> usize {
        self.data.expires.len()
    }

    /// Whether `key`'s time has run out; if so it is removed, unless
    /// lookups hide expired keys ([`hide_expired`]).
    fn expire_if_needed(&mut self, key: &[u8], now_ms: u64) -> bool {
        let expired = matches!(self.data.keys.get(key), Some(e) if e.is_expired(now_ms));
        if expired {
            self.expire(key);
        }
        expired
    }

    /// Deletes `key`, found past its time, as an expiry (unless expired
    /// keys are only hidden).
    fn expire(&mut self, key: &[u8]) {
        if !HIDE_EXPIRED.with(std::cell::Cell::get) {
            let started = TIME_EXPIRED_DELETES.load(Ordering::Relaxed).then(std::time::Instant::now);
            drop(self.remove(key));
            if let Some(started) = started {
                let took = started.elapsed();
                SLOWEST_EXPIRED_DELETE.with(|slowest| slowest.set(Some(slowest.get().map_or(took, |s| s.max(took)))));
            }
            // Expiry is nobody's write: a NOLOOP client in BCAST mode
            // hears of it even when its own command found the key expired.
            if let Some((last, by_expiry)) = self.modified.last_mut() {
                if &last[..] == key {
                    *by_expiry = true;
                }
            }
            self.expired_keys += 1;
            self.expired.push(key.into());
        }
    }

    /// The live entry of `key`, expiring it first if its time has run out.
    /// One lookup: these run on nearly every command.
    pub fn get(&mut self, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let at = self.data.keys.find(key)?;
        if self.data.keys.at(at).is_expired(now_ms) {
            self.expire(key);
            return None;
        }
        Some(self.data.keys.at(at))
    }

    pub fn get_mut(&mut self, key: &[u8], now_ms: u64) -> Option<&mut Entry> {
        let at = self.data.keys.find_mut(key)?;
        if self.data.keys.at(at).is_expired(now_ms) {
            self.expire(key);
            return None;
        }
        Some(self.data.keys.at_mut(at))
    }

    /// Whether `key` exists and is live, without touching its access time.
    pub fn contains(&mut self, key: &[u8], now_ms: u64) -> bool {
        self.get(key, now_ms).is_some()
    }

    /// Changes an entry's bookkeeping without expiring it or signalling
    /// watchers (the journal stamps written entries with their position).
    pub fn peek_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        self.data.keys.get_mut(key)
    }

    /// Sizes an empty database for `keys` keys, `with_expiry` of them with
    /// a TTL, before a load inserts them (`Dict::reserve_when_empty`).
    pub fn reserve_when_empty(&mut self, keys: usize, with_expiry: usize) {
        self.data.keys.reserve_when_empty(keys);
        self.data.expires.reserve_when_empty(with_expiry);
    }

    /// Looks at an entry without expiring it (for WATCH and admin paths).
    pub fn peek(&self, key: &[u8]) -> Option<&Entry> {
        self.data.keys.get(key)
    }

    /// Stores `value` under `key`. The TTL is kept when `keep_ttl`, else
    /// removed, as SET does. A new key gets `access_s`; an existing one
    /// keeps its access word (the command's lookup refreshed it), as
    /// Redis's `dbSetValue` keeps the LFU counter of a key it overwrites.
    /// Returns the value overwritten, for the caller to free (lazily, if
    /// it is big).
    pub fn set(&mut self, key: &[u8], value: Value, keep_ttl: bool, access_s: u32) -> Option<Value> {
        self.preserve(key);
        let (entry, inserted) = self.data.keys.entry_or_insert_with(
            key,
            || key.into(),
            || Entry::new(Value::Str(crate::value::Str::Int(0)), access_s),
        );
        let old = std::mem::replace(&mut entry.value, value);
        if !inserted && !keep_ttl && entry.has_expiry() {
            entry.expire_at_ms = NO_EXPIRY;
            self.data.expires.remove(key);
        }
        if !inserted && matches!(old, Value::Stream(_)) {
            self.signal_ready(key);
        }
        if inserted {
            self.signal_created(key);
        }
        self.signal_modified(key);
        (!inserted).then_some(old)
    }

    /// Redis's `setKey`, as STORE destinations and MSET use it: a lookup
    /// first (a key past its time expires there, and counts as expired),
    /// then `set` without the old TTL. Returns the value overwritten.
    pub fn set_key(&mut self, key: &[u8], value: Value, now_ms: u64, access_s: u32) -> Option<Value> {
        self.contains(key, now_ms);
        self.set(key, value, false, access_s)
    }

    /// Inserts a whole entry (value and TTL), replacing any old one.
    pub fn insert_entry(&mut self, key: &[u8], entry: Entry) {
        self.preserve(key);
        let has_expiry = entry.has_expiry();
        match self.data.keys.insert(key.into(), entry) {
            Some(old) if old.has_expiry() && !has_expiry => {
                self.data.expires.remove(key);
            }
            Some(_) => {}
            None => self.signal_created(key),
        }
        if has_expiry && !self.data.expires.contains_key(key) {
            self.data.expires.insert(key.into(), ());
        }
        self.signal_modified(key);
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        self.preserve_existing(key);
        let entry = self.data.keys.remove(key)?;
        if entry.has_expiry() {
            self.data.expires.remove(key);
        }
        if matches!(entry.value, Value::Stream(_)) {
            self.signal_ready(key);
        }
        self.signal_modified(key);
        Some(entry)
    }

    /// Sets the absolute expiry of an existing key. An instant already
    /// past deletes the key, as Redis does; returns false if absent.
    pub fn set_expire(&mut self, key: &[u8], at_ms: u64, now_ms: u64) -> bool {
        if at_ms <= now_ms {
            return self.remove(key).is_some();
        }
        self.preserve_existing(key);
        let Some(entry) = self.data.keys.get_mut(key) else {
            return false;
        };
        let had = entry.has_expiry();
        entry.expire_at_ms = at_ms;
        if !had {
            self.data.expires.insert(key.into(), ());
        }
        self.signal_modified(key);
        true
    }

    /// Removes the TTL of `key`; true if it had one.
    pub fn persist(&mut self, key: &[u8]) -> bool {
        if self.data.snap.is_some() && self.data.keys.get(key).is_some_and(Entry::has_expiry) {
            self.preserve(key);
        }
        match self.data.keys.get_mut(key) {
            Some(entry) if entry.has_expiry() => {
                entry.expire_at_ms = NO_EXPIRY;
                self.data.expires.remove(key);
                self.signal_modified(key);
                true
            }
            _ => false,
        }
    }

    /// The memcached flags and CAS value of `key` (zeros when it has none).
    pub fn item_meta(&self, key: &[u8]) -> ItemMeta {
        self.data.items.get(key).copied().unwrap_or_default()
    }

    /// Sets the memcached flags and CAS value of `key`, which exists; the
    /// memcached commands call this after the write that replaced the
    /// value (which dropped the old ones).
    pub fn set_item_meta(&mut self, key: &[u8], meta: ItemMeta) {
        if meta == ItemMeta::default() {
            self.data.items.remove(key);
        } else if self.data.keys.contains_key(key) {
            self.data.items.insert(key.into(), meta);
        }
    }

    /// Marks a key as modified for the clients WATCHing it (Redis's
    /// `touchWatchedKey`). A watcher that saw the key already expired is
    /// not disturbed by the key's deletion (its lazy or active expiry, or a
    /// DEL): the key was logically absent before and still is. It forgets
    /// the staleness then, so that any later change counts.
    pub fn signal_modified(&mut self, key: &[u8]) {
        if !self.data.items.is_empty() {
            self.data.items.remove(key);
        }
        if TRACK_MODIFIED.load(Ordering::Relaxed) && !LOADING.with(std::cell::Cell::get) {
            self.modified.push((key.into(), false));
            NOTED.with(|n| n.set(true));
        }
        if self.watched.is_empty() {
            return;
        }
        let Some(watchers) = self.watched.get_mut(key) else { return };
        // Flags only this table holds: watches their clients left behind
        // (UNWATCH beside a busy script).
        watchers.retain(|w| Arc::strong_count(&w.flag) > 1);
        if watchers.is_empty() {
            self.watched.remove(key);
            return;
        }
        let present = self.data.keys.contains_key(key);
        let watchers = self.watched.get_mut(key).expect("kept above");
        for w in watchers {
            if w.stale && !present {
                w.stale = false;
                continue;
            }
            w.flag.store(true, Ordering::Release);
        }
    }

    /// Marks every watched key that exists as modified, whatever the
    /// staleness of watchers (kept for callers outside the key commands;
    /// FLUSHDB and SWAPDB use [`Db::take_all`] and [`Db::swap_data`]).
    pub fn signal_all_watched(&mut self, also_missing: bool) {
        for (key, watchers) in &self.watched {
            if also_missing || self.data.keys.contains_key(&key[..]) {
                for w in watchers {
                    w.flag.store(true, Ordering::Release);
                }
            }
        }
    }

    /// Redis's `touchAllWatchedKeysInDb`: this database's contents are
    /// about to be replaced by `replacement` (None: emptied, as FLUSHDB
    /// does). A watcher is dirtied when its key's logical state changes:
    /// it existed, or it will exist. Stale keys replaced by nothing, or by
    /// another stale key, are no change; an absent key replaced by a stale
    /// one becomes a stale watch.
    fn touch_all_watched(&mut self, replacement: Option<&DbData>, now_ms: u64) {
        for (key, watchers) in self.watched.iter_mut() {
            let exists_here = self.data.keys.contains_key(&key[..]);
            let there = replacement.and_then(|r| r.keys.get(&key[..]));
            if !exists_here && there.is_none() {
                continue;
            }
            let stale_there = there.is_some_and(|e| e.is_expired(now_ms));
            for w in watchers.iter_mut() {
                if w.stale {
                    if there.is_none() {
                        w.stale = false;
                        continue;
                    }
                    if stale_there {
                        continue;
                    }
                } else if !exists_here && stale_there {
                    w.stale = true;
                    continue;
                }
                w.flag.store(true, Ordering::Release);
            }
        }
    }

    /// Queues `key` for serving if clients are blocked on it, and notes
    /// it as created while the server asks for that.
    fn signal_created(&mut self, key: &[u8]) {
        if RECORD_CREATED.load(Ordering::Relaxed) {
            self.created.push(key.into());
        }
        self.signal_ready(key);
    }

    /// Queues `key` for serving if clients are blocked on it: at its
    /// creation, and for streams, whose readers wait on existing keys, at
    /// each XADD and when the stream goes (a waiting XREADGROUP then gets
    /// an error, as in Redis 7.0).
    pub fn signal_ready(&mut self, key: &[u8]) {
        if !self.blocked.is_empty() && self.blocked.contains_key(key) && !self.ready.iter().any(|k| &k[..] == key) {
            self.ready.push(key.into());
        }
    }

    /// SWAPDB within one shard: exchanges the contents of `a` and `b`,
    /// signalling the watchers of both as Redis does. Watches stay with
    /// their database number, as clients stay in the database they chose.
    pub fn swap_data(a: &mut Db, b: &mut Db, now_ms: u64) {
        a.touch_all_watched(Some(&b.data), now_ms);
        b.touch_all_watched(Some(&a.data), now_ms);
        std::mem::swap(&mut a.data, &mut b.data);
        for db in [a, b] {
            let keys: Vec<Key> = db.blocked.keys().filter(|k| db.data.keys.contains_key(&k[..])).cloned().collect();
            keys.iter().for_each(|k| db.signal_created(k));
        }
    }

    /// Starts watching `key` for the client owning `flag`. A key that is
    /// present but expired at this instant is remembered as stale.
    pub fn watch(&mut self, key: &[u8], flag: &WatchFlag, now_ms: u64) {
        let stale = self.data.keys.get(key).is_some_and(|e| e.is_expired(now_ms));
        let watchers = self.watched.entry(key.into()).or_default();
        if !watchers.iter().any(|w| Arc::ptr_eq(&w.flag, flag)) {
            watchers.push(Watcher { flag: flag.clone(), stale });
        }
    }

    /// How many keys have watchers (INFO's `total_watched_keys`).
    pub fn watched_keys(&self) -> usize {
        self.watched.len()
    }

    /// Every watcher's flag, once per key it watches.
    pub(crate) fn watch_flags(&self) -> impl Iterator<Item = &WatchFlag> {
        self.watched.values().flatten().map(|w| &w.flag)
    }

    /// Drops the watchers whose flags `unread` picks.
    pub(crate) fn drop_watchers(&mut self, unread: impl Fn(&WatchFlag) -> bool) {
        self.watched.retain(|_, watchers| {
            watchers.retain(|w| !unread(&w.flag));
            !watchers.is_empty()
        });
    }

    pub fn unwatch(&mut self, key: &[u8], flag: &WatchFlag) {
        if let Some(watchers) = self.watched.get_mut(key) {
            watchers.retain(|w| !Arc::ptr_eq(&w.flag, flag));
            if watchers.is_empty() {
                self.watched.remove(key);
            }
        }
    }

    /// Redis's `isWatchedKeyExpired` for one key: the key has expired since
    /// the client WATCHed it (not yet deleted, so no write signalled it).
    /// Keys that were already expired at WATCH time do not count.
    pub fn watched_key_expired(&self, key: &[u8], flag: &WatchFlag, now_ms: u64) -> bool {
        let stale = self
            .watched
            .get(key)
            .and_then(|ws| ws.iter().find(|w| Arc::ptr_eq(&w.flag, flag)))
            .is_some_and(|w| w.stale);
        !stale && self.data.keys.get(key).is_some_and(|e| e.is_expired(now_ms))
    }

    /// Removes every key (FLUSHDB, FLUSHALL), signalling watchers as Redis
    /// does. The tables are handed back so that a caller can free a big one
    /// off the serving path.
    ///
    /// While a snapshot still has to emit these contents, the snapshot keeps
    /// them instead (they are what it must write, less what `saved` already
    /// holds) and an empty `DbData` comes back: no copy, and the snapshot
    /// frees them piece by piece as it emits them. The fresh contents that
    /// replace them are all newer than the snapshot, so they take no part.
    pub fn take_all(&mut self) -> DbData {
        self.touch_all_watched(None, 0);
        // Readers blocked on a stream learn that it went.
        let streams: Vec<Key> =
            self.blocked.keys().filter(|k| matches!(self.data.keys.get(&k[..]), Some(e) if matches!(e.value, Value::Stream(_)))).cloned().collect();
        for key in streams {
            self.signal_ready(&key);
        }
        let data = std::mem::take(&mut self.data);
        if data.snap.is_some() {
            self.detached.push(data);
            return DbData::default();
        }
        data
    }

    /// Before a write to `key` while a snapshot runs: keeps `key`'s entry as
    /// it is now (or that it is absent) for the snapshot, unless the
    /// snapshot has already emitted it or kept it. One branch when no
    /// snapshot is running. The write methods of `Db` call this
    /// themselves; a caller that mutates an entry through `get_mut` or
    /// `peek_mut` calls it first (see `Shard::preserve`).
    #[inline]
    pub fn preserve(&mut self, key: &[u8]) {
        if let Some(snap) = self.data.snap.as_deref_mut() {
            snap.preserve(&self.data.keys, &self.data.items, key);
        }
    }

    /// As `preserve`, for writes that change nothing when `key` is absent
    /// (removals, TTL changes): an absent key then costs no entry.
    #[inline]
    fn preserve_existing(&mut self, key: &[u8]) {
        if self.data.snap.is_some() && self.data.keys.contains_key(key) {
            self.preserve(key);
        }
    }

    /// One step of SCAN over this database (see `Dict::scan`).
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&[u8], &Entry)) -> u64 {
        self.data.keys.scan(cursor, |k, e| f(k, e))
    }

    pub fn random_key<R: rand::Rng>(&self, rng: &mut R) -> Option<(&[u8], &Entry)> {
        self.data.keys.random_entry(rng).map(|(k, e)| (&k[..], e))
    }

    /// Calls `f` for `n` keys drawn at random (with replacement), from
    /// those with a TTL when `volatile`: what eviction samples, as Redis's
    /// `dictGetSomeKeys` on its main or expires table.
    pub fn sample<R: rand::Rng>(&self, rng: &mut R, n: usize, volatile: bool, mut f: impl FnMut(&[u8], &Entry)) {
        if volatile {
            let keys = &self.data.keys;
            self.data.expires.random_entries(rng, n, |key, ()| {
                if let Some(entry) = keys.get(&key[..]) {
                    f(key, entry);
                }
            });
        } else {
            self.data.keys.random_entries(rng, n, |key, entry| f(key, entry));
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &Entry)> {
        self.data.keys.iter().map(|(k, e)| (&k[..], e))
    }

    /// Samples up to `max_samples` keys with a TTL, resuming where the
    /// previous pass stopped, and removes the expired ones. Bounded work per
    /// call is what keeps the active cycle from stalling the shard.
    pub fn active_expire(&mut self, now_ms: u64, max_samples: usize) -> ExpirePass {
        let mut pass = ExpirePass::default();
        if self.data.expires.is_empty() {
            return pass;
        }
        let mut due: Vec<Key> = Vec::new();
        let mut cursor = self.data.expire_cursor;
        loop {
            let keys = &self.data.keys;
            cursor = self.data.expires.scan(cursor, |k, ()| {
                pass.sampled += 1;
                if keys.get(&k[..]).is_some_and(|e| e.is_expired(now_ms)) {
                    due.push(k.clone());
                }
            });
            if cursor == 0 || pass.sampled >= max_samples {
                break;
            }
        }
        self.data.expire_cursor = cursor;
        for key in due {
            if self.expire_if_needed(&key, now_ms) {
                pass.expired += 1;
            }
        }
        pass
    }

    /// Redis's adaptive active expiry for one database: passes of
    /// `effort.batch` samples, repeated while more than
    /// `effort.stale_percent` of what a pass sampled had expired (so a mass
    /// expiry is reclaimed quickly, a healthy table costs one pass), until
    /// `deadline`.
    pub fn active_expire_cycle(&mut self, now_ms: u64, deadline: std::time::Instant, effort: ExpireEffort) -> ExpirePass {
        let mut total = ExpirePass::default();
        loop {
            let pass = self.active_expire(now_ms, effort.batch);
            total.sampled += pass.sampled;
            total.expired += pass.expired;
            let few_expired = pass.expired * 100 <= pass.sampled * effort.stale_percent;
            if pass.sampled == 0 || few_expired || std::time::Instant::now() >= deadline {
                return total;
            }
        }
    }

    /// Moves some buckets of an ongoing rehash; true if more remain.
    pub fn rehash_step(&mut self, buckets: usize) -> bool {
        let keys = self.data.keys.rehash_step(buckets);
        let expires = self.data.expires.rehash_step(buckets);
        keys || expires
    }

    /// Sum of the TTLs left on keys with an expiry, for INFO's avg_ttl; a
    /// sample keeps this cheap on big databases.
    pub fn avg_ttl_ms(&self, now_ms: u64) -> u64 {
        let mut sum = 0u64;
        let mut n = 0u64;
        let keys = &self.data.keys;
        let mut cursor = 0;
        loop {
            cursor = self.data.expires.scan(cursor, |k, ()| {
                if let Some(e) = keys.get(&k[..]) {
                    sum += e.expire_at_ms.saturating_sub(now_ms);
                    n += 1;
                }
            });
            if cursor == 0 || n >= 128 {
                break;
            }
        }
        sum.checked_div(n).unwrap_or(0)
    }

    /// What the tables cost beside the keys and values they hold (Redis's
    /// `overhead.hashtable.main` and `.expires`): buckets and entries,
    /// memcached's side table counted with the main one.
    pub fn table_bytes(&self) -> TableBytes {
        let items = self.data.items.capacity() * (std::mem::size_of::<(Key, ItemMeta)>() + 1);
        TableBytes { main: self.data.keys.memory_usage() + items, expires: self.data.expires.memory_usage() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::Str;

    fn s(v: &[u8]) -> Value {
        Value::Str(Str::from_bytes(v))
    }

    #[test]
    fn samples_come_from_the_keys_or_only_those_with_a_ttl() {
        let mut rng = rand::thread_rng();
        let mut db = Db::default();
        let mut seen = 0;
        db.sample(&mut rng, 5, false, |_, _| seen += 1);
        assert_eq!(seen, 0, "an empty database gives no sample");
        for i in 0..100 {
            db.set(format!("k{i}").as_bytes(), s(b"v"), false, 0);
        }
        for i in 0..10 {
            db.set_expire(format!("k{i}").as_bytes(), u64::MAX / 2, 1);
        }
        let mut all = Vec::new();
        db.sample(&mut rng, 500, false, |k, _| all.push(k.to_vec()));
        assert_eq!(all.len(), 500);
        assert!(all.iter().any(|k| !db.peek(k).is_some_and(|e| e.has_expiry())));
        let mut volatile = Vec::new();
        db.sample(&mut rng, 50, true, |k, e| {
            assert!(e.has_expiry());
            volatile.push(k.to_vec());
        });
        assert_eq!(volatile.len(), 50);
        // k0..k9, the keys with a TTL, are the two-byte ones.
        assert!(volatile.iter().all(|k| k.len() == 2));
    }

    #[test]
    fn item_meta_goes_with_any_write_and_never_outlives_its_key() {
        let mut db = Db::default();
        let meta = ItemMeta { flags: 7, cas: 9, ..ItemMeta::default() };
        db.set_item_meta(b"absent", meta);
        assert_eq!(db.item_meta(b"absent"), ItemMeta::default(), "no meta without a key");
        db.set(b"k", s(b"v"), false, 0);
        db.set_item_meta(b"k", meta);
        assert_eq!(db.item_meta(b"k"), meta);
        db.set_expire(b"k", u64::MAX, 0);
        assert_eq!(db.item_meta(b"k"), ItemMeta::default(), "a TTL change is a write");
        db.set_item_meta(b"k", meta);
        db.signal_modified(b"k");
        assert_eq!(db.item_meta(b"k"), ItemMeta::default(), "an in-place change is a write");
        db.set_item_meta(b"k", meta);
        db.remove(b"k");
        db.set(b"k", s(b"again"), false, 0);
        assert_eq!(db.item_meta(b"k"), ItemMeta::default(), "a new key starts bare");
        db.set_item_meta(b"k", meta);
        let taken = db.take_all();
        drop(taken);
        db.set(b"k", s(b"v"), false, 0);
        assert_eq!(db.item_meta(b"k"), ItemMeta::default(), "FLUSHDB takes the table along");
    }

    #[test]
    fn expired_keys_vanish_on_access() {
        let mut db = Db::default();
        db.set(b"k", s(b"v"), false, 0);
        assert!(db.set_expire(b"k", 1_000, 500));
        assert!(db.get(b"k", 999).is_some());
        assert!(db.get(b"k", 1_000).is_none());
        assert_eq!(db.expires_len(), 0);
        assert_eq!(db.expired_keys, 1);
    }

    #[test]
    fn set_clears_ttl_unless_kept() {
        let mut db = Db::default();
        db.set(b"k", s(b"v"), false, 0);
        db.set_expire(b"k", 10_000, 0);
        db.set(b"k", s(b"w"), true, 0);
        assert_eq!(db.peek(b"k").map(|e| e.expire_at_ms), Some(10_000));
        db.set(b"k", s(b"x"), false, 0);
        assert_eq!(db.peek(b"k").map(|e| e.expire_at_ms), Some(NO_EXPIRY));
        assert_eq!(db.expires_len(), 0);
    }

    #[test]
    fn watch_flags_are_raised_by_writes_only_on_watched_keys() {
        let mut db = Db::default();
        let flag: WatchFlag = Arc::default();
        db.watch(b"a", &flag, 0);
        db.set(b"b", s(b"1"), false, 0);
        assert!(!flag.load(Ordering::Acquire));
        db.set(b"a", s(b"1"), false, 0);
        assert!(flag.load(Ordering::Acquire));
        db.unwatch(b"a", &flag);
        assert!(db.watched.is_empty());
    }

    #[test]
    fn active_expiry_reclaims_without_access() {
        let mut db = Db::default();
        for i in 0..1000u32 {
            let key = i.to_string();
            db.set(key.as_bytes(), s(b"v"), false, 0);
            db.set_expire(key.as_bytes(), if i % 2 == 0 { 100 } else { 10_000 }, 0);
        }
        let mut expired = 0;
        for _ in 0..200 {
            expired += db.active_expire(5_000, 20).expired;
        }
        assert_eq!(expired, 500);
        assert_eq!(db.len(), 500);
        assert_eq!(db.expires_len(), 500);
    }

    #[test]
    fn expired_deletes_are_timed_only_while_asked() {
        let mut db = Db::default();
        for key in [&b"a"[..], b"b"] {
            db.set(key, s(b"v"), false, 0);
            db.set_expire(key, 10, 0);
        }
        assert!(db.get(b"a", 20).is_none());
        assert_eq!(take_slowest_expired_delete(), None);
        time_expired_deletes(true);
        assert!(db.get(b"b", 20).is_none());
        time_expired_deletes(false);
        assert!(take_slowest_expired_delete().is_some());
        assert_eq!(take_slowest_expired_delete(), None);
    }

    fn flagged(flag: &WatchFlag) -> bool {
        flag.load(Ordering::Acquire)
    }

    #[test]
    fn stale_watch_survives_deletion_but_not_resurrection() {
        let mut db = Db::default();
        db.set(b"x", s(b"v"), false, 0);
        db.set_expire(b"x", 10, 0);
        let flag: WatchFlag = Arc::default();
        db.watch(b"x", &flag, 20);
        assert!(!db.watched_key_expired(b"x", &flag, 20));
        assert!(db.get(b"x", 20).is_none());
        assert!(!flagged(&flag));
        db.set(b"x", s(b"w"), false, 0);
        assert!(flagged(&flag));
    }

    #[test]
    fn live_watch_sees_expiry() {
        let mut db = Db::default();
        db.set(b"x", s(b"v"), false, 0);
        db.set_expire(b"x", 10, 0);
        let flag: WatchFlag = Arc::default();
        db.watch(b"x", &flag, 5);
        assert!(db.watched_key_expired(b"x", &flag, 10));
        db.active_expire(10, 10);
        assert!(flagged(&flag));
    }

    #[test]
    fn flush_touches_only_live_watched_keys() {
        let mut db = Db::default();
        let (live, stale, absent): (WatchFlag, WatchFlag, WatchFlag) = Default::default();
        db.set(b"l", s(b"v"), false, 0);
        db.set(b"s", s(b"v"), false, 0);
        db.set_expire(b"s", 10, 0);
        db.watch(b"l", &live, 20);
        db.watch(b"s", &stale, 20);
        db.watch(b"a", &absent, 20);
        let data = db.take_all();
        assert_eq!(data.keys.len(), 2);
        assert!(flagged(&live) && !flagged(&stale) && !flagged(&absent));
    }

    #[test]
    fn swap_follows_redis_watch_rules() {
        let mut a = Db::default();
        let mut b = Db::default();
        // a: x stale; b: nothing. Stale replaced by nothing: no change.
        a.set(b"x", s(b"v"), false, 0);
        a.set_expire(b"x", 10, 0);
        // b: y live; a: nothing. Watcher on a's y sees it appear.
        b.set(b"y", s(b"v"), false, 0);
        // b: z stale; a: nothing. Absent replaced by stale: no change.
        b.set(b"z", s(b"v"), false, 0);
        b.set_expire(b"z", 10, 0);
        let (fx, fy, fz): (WatchFlag, WatchFlag, WatchFlag) = Default::default();
        a.watch(b"x", &fx, 20);
        a.watch(b"y", &fy, 20);
        a.watch(b"z", &fz, 20);
        Db::swap_data(&mut a, &mut b, 20);
        assert!(!flagged(&fx) && flagged(&fy) && !flagged(&fz));
        assert!(!a.watched_key_expired(b"z", &fz, 30));
        assert_eq!(a.len(), 2);
        assert_eq!(b.len(), 1);
    }

    #[test]
    fn active_cycle_reclaims_a_mass_expiry_in_one_call() {
        let mut db = Db::default();
        for i in 0..10_000u32 {
            let key = i.to_string();
            db.set(key.as_bytes(), s(b"v"), false, 0);
            db.set_expire(key.as_bytes(), 100, 0);
        }
        let far = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let pass = db.active_expire_cycle(200, far, ExpireEffort::new(1));
        assert_eq!(pass.expired, 10_000);
        assert!(db.is_empty());
    }

    #[test]
    fn more_effort_samples_more_and_stops_at_fewer_expired_keys() {
        assert_eq!(ExpireEffort::new(1), ExpireEffort { batch: 64, stale_percent: 10, time_percent: 25 });
        assert_eq!(ExpireEffort::new(10), ExpireEffort { batch: 208, stale_percent: 1, time_percent: 43 });
        // 5% of the keys expired: the default effort stops after a pass or
        // a few (a pass of 64 finds 7 or more, 10%, about one time in 30:
        // the sample is random), the most effort goes on until the stale
        // ones are gone.
        let run = |effort| {
            let mut db = Db::default();
            for i in 0..2_000u32 {
                let key = i.to_string();
                db.set(key.as_bytes(), s(b"v"), false, 0);
                db.set_expire(key.as_bytes(), if i % 20 == 0 { 100 } else { 1_000_000 }, 0);
            }
            let far = std::time::Instant::now() + std::time::Duration::from_secs(60);
            db.active_expire_cycle(200, far, ExpireEffort::new(effort)).sampled
        };
        let (least, most) = (run(1), run(10));
        assert!(least < 1_000, "passes of 64 until fewer than 10% expired: {least}");
        assert!(most > 1_000, "{most}");
    }
}
