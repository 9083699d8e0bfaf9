//! Eviction: removing keys chosen by `maxmemory-policy` so that used
//! memory stays under `maxmemory`, as Redis's `evict.c` does.
//!
//! Before each command (and in the cron, for what a time limit left)
//! [`perform`] compares used memory, less what a running snapshot holds
//! for itself, with the limit. Past it, one thread at a time evicts:
//!
//! - Under the LRU, LFU and TTL policies, Redis's pool of the 16 best
//!   candidates seen so far, fed each round with `maxmemory-samples`
//!   random keys of every database of one shard, gives up its best. A
//!   shard is a random subset of the keyspace (keys go to shards by hash
//!   slot), so a round samples as fairly as Redis's, which draws from
//!   each whole database, while taking one shard's lock.
//! - Under the random policies, a random key of the next database in
//!   turn goes.
//!
//! Each eviction is a write like any other under its shard's lock: DEL (or
//! UNLINK under `lazyfree-lazy-eviction`) in the journal and the
//! replication stream, the `evicted` keyspace event, WATCH invalidated.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use keel_engine::db::Key;
use keel_engine::{Entry, Locked, Shard, Shards};
use parking_lot::Mutex;

use crate::server::Server;

/// `maxmemory-policy`: what goes when memory is short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Policy {
    /// 0, so that a new [`Evictor`] evicts nothing.
    NoEviction = 0,
    AllKeysLru,
    AllKeysLfu,
    AllKeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
}

impl Policy {
    /// Every policy, in the order Redis's error message lists them.
    pub const ALL: [Policy; 8] = [
        Policy::VolatileLru,
        Policy::VolatileLfu,
        Policy::VolatileRandom,
        Policy::VolatileTtl,
        Policy::AllKeysLru,
        Policy::AllKeysLfu,
        Policy::AllKeysRandom,
        Policy::NoEviction,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::NoEviction => "noeviction",
            Policy::AllKeysLru => "allkeys-lru",
            Policy::AllKeysLfu => "allkeys-lfu",
            Policy::AllKeysRandom => "allkeys-random",
            Policy::VolatileLru => "volatile-lru",
            Policy::VolatileLfu => "volatile-lfu",
            Policy::VolatileRandom => "volatile-random",
            Policy::VolatileTtl => "volatile-ttl",
        }
    }

    /// The policy named `name`, in any case.
    pub fn parse(name: &str) -> Option<Policy> {
        Policy::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// Entries then keep an LFU counter rather than an access time.
    pub fn lfu(self) -> bool {
        matches!(self, Policy::AllKeysLfu | Policy::VolatileLfu)
    }

    pub fn lru(self) -> bool {
        matches!(self, Policy::AllKeysLru | Policy::VolatileLru)
    }

    /// Only keys with a TTL may go.
    fn volatile(self) -> bool {
        matches!(self, Policy::VolatileLru | Policy::VolatileLfu | Policy::VolatileRandom | Policy::VolatileTtl)
    }

    fn random(self) -> bool {
        matches!(self, Policy::AllKeysRandom | Policy::VolatileRandom)
    }
}

/// What [`perform`] found: Redis's `EVICT_OK`, `EVICT_RUNNING` and
/// `EVICT_FAIL`. Only `Fail` refuses commands that may grow memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Under the limit, or evicting is not for now.
    Ok,
    /// Still over after the time limit: the next command or the cron goes on.
    Running,
    /// Over, and nothing may be evicted (or `noeviction`).
    Fail,
}

/// Redis's `EVPOOL_SIZE`.
const POOL_SIZE: usize = 16;

/// Keys evicted between looks at the clock, as Redis.
const CLOCK_EVERY: u64 = 16;

/// One key worth evicting; the higher `score`, the sooner.
struct Candidate {
    score: u64,
    db: usize,
    key: Key,
}

/// Where eviction resumes: its candidate pool and its turns over shards
/// and databases. Behind a mutex: one thread evicts at a time, and the
/// others wait for it rather than evict more than was needed.
#[derive(Default)]
struct Rounds {
    /// Ascending by score: the best candidate is last.
    pool: Vec<Candidate>,
    next_shard: usize,
    next_db: usize,
}

/// The server's eviction state and counters.
#[derive(Default)]
pub struct Evictor {
    rounds: Mutex<Rounds>,
    policy: AtomicU8,
    /// INFO stats `evicted_keys`.
    pub evicted_keys: AtomicU64,
    /// Milliseconds spent over the limit (INFO stats
    /// `total_eviction_exceeded_time`), up to the start of the current
    /// stretch over it, if any (`exceeded_since_ms`, 0: none).
    exceeded_total_ms: AtomicU64,
    exceeded_since_ms: AtomicU64,
}

impl Evictor {
    pub fn set_policy(&self, policy: Policy) {
        self.policy.store(policy as u8, Ordering::Relaxed);
    }

    pub fn policy(&self) -> Policy {
        let stored = self.policy.load(Ordering::Relaxed);
        Policy::ALL.into_iter().find(|p| *p as u8 == stored).unwrap_or(Policy::NoEviction)
    }

    /// INFO's `total_eviction_exceeded_time` and
    /// `current_eviction_exceeded_time`, in ms.
    pub fn exceeded_ms(&self, now_ms: u64) -> (u64, u64) {
        let since = self.exceeded_since_ms.load(Ordering::Relaxed);
        let current = if since == 0 { 0 } else { now_ms.saturating_sub(since) };
        (self.exceeded_total_ms.load(Ordering::Relaxed) + current, current)
    }

    /// CONFIG RESETSTAT.
    pub fn reset_stats(&self) {
        self.evicted_keys.store(0, Ordering::Relaxed);
        self.exceeded_total_ms.store(0, Ordering::Relaxed);
    }

    /// Notes whether memory is over the limit now, for the exceeded times.
    fn note_over(&self, over: bool) {
        let now = crate::server::unix_ms();
        let since = self.exceeded_since_ms.load(Ordering::Relaxed);
        if over && since == 0 {
            self.exceeded_since_ms.store(now, Ordering::Relaxed);
        } else if !over && since != 0 {
            self.exceeded_since_ms.store(0, Ordering::Relaxed);
            self.exceeded_total_ms.fetch_add(now.saturating_sub(since), Ordering::Relaxed);
        }
    }
}

/// Evicts as the policy says while used memory is over `maxmemory`, for
/// at most the time `maxmemory-eviction-tenacity` allows. Call it holding
/// no shard lock. Costs one relaxed load without a limit, and under it
/// two thread-local counters' reads and a cached figure's comparison.
pub fn perform(server: &Server) -> Outcome {
    let limit = server.maxmemory.load(Ordering::Relaxed);
    if limit == 0 {
        return Outcome::Ok;
    }
    crate::alloc::note_thread_allocations();
    if crate::alloc::used_memory_recent() <= limit {
        return Outcome::Ok;
    }
    perform_over(server, limit)
}

#[cold]
fn perform_over(server: &Server, limit: u64) -> Outcome {
    if !safe_to_evict(server) {
        return Outcome::Ok;
    }
    let evictor = &server.evictor;
    let policy = evictor.policy();
    if policy == Policy::NoEviction {
        let over = excess(server, limit) > 0;
        evictor.note_over(over);
        return if over { Outcome::Fail } else { Outcome::Ok };
    }
    let (samples, time_limit, lazy) = {
        let config = server.config.read();
        (config.maxmemory_samples as usize, time_limit(config.maxmemory_eviction_tenacity), config.lazyfree_lazy_eviction)
    };
    let mut rounds = evictor.rounds.lock();
    // Measured afresh under the lock: another thread may have made room
    // while this one waited for it.
    let to_free = excess(server, limit);
    evictor.note_over(to_free > 0);
    let started = Instant::now();
    let mut freed = 0;
    let mut evicted = 0u64;
    let outcome = loop {
        if freed >= to_free {
            break Outcome::Ok;
        }
        let Some(bytes) = rounds.evict_one(server, policy, samples, lazy) else {
            break Outcome::Fail;
        };
        freed += bytes as u64;
        evicted += 1;
        if evicted.is_multiple_of(CLOCK_EVERY) && started.elapsed() > time_limit {
            break Outcome::Running;
        }
    };
    // The latency monitor's `eviction-cycle`, as Redis's performEvictions.
    server.latency_monitor.record("eviction-cycle", started.elapsed());
    // What a key frees is an estimate: the counter is read again within
    // a millisecond (`alloc::used_memory_recent`), and a shortfall is
    // evicted then. Reading it after every eviction would double its cost.
    crate::alloc::discount_recent(freed);
    outcome
}

/// Redis's `isSafeToPerformEvictions`: a replica leaves eviction to its
/// master (`replica-ignore-maxmemory`, whose DELs it gets), nothing goes
/// while a load replays or writes are paused, and a busy script holds
/// every shard.
fn safe_to_evict(server: &Server) -> bool {
    if server.loading.load(Ordering::Relaxed) || server.scripts.run.busy() {
        return false;
    }
    if server.replica.is_replica() && server.config.read().replica_ignore_maxmemory {
        return false;
    }
    server.paused(crate::server::unix_ms).is_none()
}

/// Bytes over `limit` now, less what [`not_counted`] leaves out.
fn excess(server: &Server, limit: u64) -> u64 {
    crate::alloc::refresh_used_memory().saturating_sub(not_counted(server, None)).saturating_sub(limit)
}

/// INFO's `mem_not_counted_for_evict`: the replication buffer beyond
/// `repl-backlog-size`, as Redis, and the entries and tables a running
/// snapshot keeps as they were at its start (`snapshot_kept`, given when
/// the caller holds every shard). Evicting a key a snapshot has not
/// written yet frees nothing until it has, so counting those would evict
/// the keyspace away during a rewrite.
pub fn not_counted(server: &Server, snapshot_kept: Option<u64>) -> u64 {
    let replication = server.repl.beyond_backlog_size();
    if !server.snapshot_active.load(Ordering::Relaxed) {
        return replication;
    }
    let kept = snapshot_kept.unwrap_or_else(|| {
        let keyspace = &server.keyspace;
        (0..keyspace.shard_count()).map(|i| keyspace.lock_one(i).shard(i).snapshot_saved_bytes() as u64).sum()
    });
    replication + kept
}

/// Redis's `evictionTimeLimitUs`: 50 us per step up to 10, then 15% more
/// per step, and no limit at 100.
fn time_limit(tenacity: u32) -> Duration {
    match tenacity {
        0..=10 => Duration::from_micros(50 * u64::from(tenacity)),
        11..=99 => Duration::from_micros((500.0 * 1.15f64.powi(tenacity as i32 - 10)) as u64),
        _ => Duration::MAX,
    }
}

/// Shard `index`'s lock, or None once a busy script holds it: eviction
/// does not wait for a script that may run for long (a cron that checked
/// `safe_to_evict` just before the script began would hold its worker).
fn lock_shard(server: &Server, index: usize) -> Option<Locked<'_>> {
    crate::scripting::lock_or_busy(server, (false, false), Shards::One(index)).ok()
}

impl Rounds {
    /// Evicts one key; returns about how many bytes that freed, or `None`
    /// when no key may go.
    fn evict_one(&mut self, server: &Server, policy: Policy, samples: usize, lazy: bool) -> Option<usize> {
        if policy.random() {
            self.evict_random(server, policy.volatile(), lazy)
        } else {
            self.evict_best(server, policy, samples, lazy)
        }
    }

    /// The next shard in turn.
    fn next_shard(&mut self, server: &Server) -> usize {
        let index = self.next_shard % server.keyspace.shard_count();
        self.next_shard = index + 1;
        index
    }

    fn evict_random(&mut self, server: &Server, volatile: bool, lazy: bool) -> Option<usize> {
        let keyspace = &server.keyspace;
        let mut rng = rand::thread_rng();
        for _ in 0..keyspace.shard_count() {
            let index = self.next_shard(server);
            let mut locked = lock_shard(server, index)?;
            let shard = locked.shard(index);
            let dbs = shard.dbs().len();
            for _ in 0..dbs {
                let db = self.next_db % dbs;
                self.next_db = db + 1;
                let mut picked = None;
                shard.dbs()[db].sample(&mut rng, 1, volatile, |key, _| picked = Some(Key::from(key)));
                if let Some(key) = picked {
                    return Some(evict(server, shard, db, &key, lazy));
                }
            }
        }
        None
    }

    /// Samples a shard into the pool, then evicts the best candidate still
    /// there (a candidate deleted or persisted since it was sampled is a
    /// ghost, passed over), sampling further shards while the pool is empty.
    fn evict_best(&mut self, server: &Server, policy: Policy, samples: usize, lazy: bool) -> Option<usize> {
        let keyspace = &server.keyspace;
        let volatile = policy.volatile();
        for _ in 0..keyspace.shard_count() {
            self.populate(server, policy, samples)?;
            while let Some(candidate) = self.pool.pop() {
                let index = keyspace.shard_of_key(&candidate.key);
                let mut locked = lock_shard(server, index)?;
                let shard = locked.shard(index);
                let present = shard.dbs()[candidate.db].peek(&candidate.key).is_some_and(|e| !volatile || e.has_expiry());
                if present {
                    return Some(evict(server, shard, candidate.db, &candidate.key, lazy));
                }
            }
        }
        None
    }

    /// Redis's `evictionPoolPopulate`, over the databases of the next
    /// shard; None if a busy script holds it.
    fn populate(&mut self, server: &Server, policy: Policy, samples: usize) -> Option<()> {
        let index = self.next_shard(server);
        let mut locked = lock_shard(server, index)?;
        let shard = locked.shard(index);
        let score = Scorer::new(server, policy);
        let mut rng = rand::thread_rng();
        for (db, data) in shard.dbs().iter().enumerate() {
            data.sample(&mut rng, samples, policy.volatile(), |key, entry| {
                self.offer(Candidate { score: score.of(entry), db, key: Key::from(key) });
            });
        }
        Some(())
    }

    /// Keeps `candidate` if the pool has room or holds a worse one.
    fn offer(&mut self, candidate: Candidate) {
        if self.pool.iter().any(|c| c.db == candidate.db && c.key == candidate.key) {
            return;
        }
        if self.pool.len() == POOL_SIZE {
            if self.pool[0].score >= candidate.score {
                return;
            }
            self.pool.remove(0);
        }
        let at = self.pool.partition_point(|c| c.score < candidate.score);
        self.pool.insert(at, candidate);
    }
}

/// How a policy ranks keys: Redis's pool "idle" value.
enum Scorer {
    /// Seconds since the last access, against the LRU clock now.
    Lru(u32),
    /// 255 less the decayed LFU counter.
    Lfu(keel_engine::lfu::Lfu),
    /// The sooner a key expires, the higher.
    Ttl,
}

impl Scorer {
    fn new(server: &Server, policy: Policy) -> Scorer {
        match (policy, server.lfu_params()) {
            (Policy::VolatileTtl, _) => Scorer::Ttl,
            (_, Some((factor, decay))) if policy.lfu() => {
                Scorer::Lfu(keel_engine::lfu::Lfu::new(crate::server::unix_ms(), factor, decay))
            }
            _ => Scorer::Lru(server.lru_s()),
        }
    }

    fn of(&self, entry: &Entry) -> u64 {
        match self {
            Scorer::Lru(now_s) => u64::from(now_s.saturating_sub(entry.access_s)),
            Scorer::Lfu(lfu) => 255 - u64::from(lfu.counter(entry.access_s)),
            Scorer::Ttl => u64::MAX - entry.expire_at_ms,
        }
    }
}

/// Removes `key` from database `db` of `shard` (locked) as an eviction;
/// returns about how many bytes its entry held.
fn evict(server: &Server, shard: &mut Shard, db: usize, key: &[u8], lazy: bool) -> usize {
    // The latency monitor's `eviction-del`: the removal and the freeing
    // (or its hand-off), as Redis times its dbSyncDelete / dbAsyncDelete.
    let started = server.latency_monitor.start();
    let Some(entry) = shard.db(db).remove(key) else { return 0 };
    let bytes = key.len() + std::mem::size_of::<Entry>() + entry.value.heap_size();
    if lazy {
        crate::lazyfree::drop_value(entry);
    } else {
        drop(entry);
    }
    server.latency_monitor.end("eviction-del", started);
    server.evictor.evicted_keys.fetch_add(1, Ordering::Relaxed);
    if crate::durability::changes_logged(server) {
        let del: [&[u8]; 2] = [if lazy { b"UNLINK" } else { b"DEL" }, key];
        let (lsn, _) = crate::durability::append(server, db, &del, None);
        // A read that finds the key gone waits for this record.
        shard.removed_lsn = shard.removed_lsn.max(lsn);
    }
    crate::notify::evicted(server, db, key);
    if server.tracking.active() {
        crate::tracking::collect(server, std::iter::once(shard), None);
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_by_name_in_any_case() {
        for policy in Policy::ALL {
            assert_eq!(Policy::parse(policy.name()), Some(policy));
            assert_eq!(Policy::parse(&policy.name().to_uppercase()), Some(policy));
        }
        assert_eq!(Policy::parse("allkeys"), None);
        let evictor = Evictor::default();
        assert_eq!(evictor.policy(), Policy::NoEviction);
        for policy in Policy::ALL {
            evictor.set_policy(policy);
            assert_eq!(evictor.policy(), policy);
        }
    }

    #[test]
    fn the_time_limit_follows_redis() {
        assert_eq!(time_limit(0), Duration::ZERO);
        assert_eq!(time_limit(10), Duration::from_micros(500));
        assert_eq!(time_limit(11), Duration::from_micros(575));
        assert!(time_limit(99) > Duration::from_secs(100));
        assert_eq!(time_limit(100), Duration::MAX);
    }

    #[test]
    fn the_pool_keeps_the_best_sixteen_without_duplicates() {
        let mut rounds = Rounds::default();
        for score in [5u64, 1, 9, 9, 3] {
            rounds.offer(Candidate { score, db: 0, key: Key::from(format!("k{score}").as_bytes()) });
        }
        assert_eq!(rounds.pool.iter().map(|c| c.score).collect::<Vec<_>>(), [1, 3, 5, 9]);
        for score in 100..120u64 {
            rounds.offer(Candidate { score, db: 1, key: Key::from(format!("k{score}").as_bytes()) });
        }
        assert_eq!(rounds.pool.len(), POOL_SIZE);
        assert_eq!(rounds.pool[0].score, 104);
        assert_eq!(rounds.pool.last().map(|c| c.score), Some(119));
        rounds.offer(Candidate { score: 2, db: 0, key: Key::from(&b"low"[..]) });
        assert_eq!(rounds.pool[0].score, 104, "a worse candidate than all is not kept");
    }
}
