//! What client connections hold in memory, and client eviction
//! (`maxmemory-clients`), as Redis 7's.
//!
//! Each worker counts the connections it serves after they read or were
//! written to (`worker`'s `memory_of`), stores the count in the
//! client's `ClientInfo::memory` (CLIENT LIST `tot-mem`) and adds the
//! change to one sum here. When a change takes the sum past the limit, the
//! largest clients that may be evicted are closed until it is back under:
//! flagged, gone from the registry at once (so that CLIENT LIST no longer
//! shows them, as Redis frees them at once), and closed by their workers
//! on their next turn. Redis sorts clients into buckets of powers of two to
//! find the largest quickly; here the pass sorts the live clients, which
//! happens only when the limit is passed.

use std::cmp::Reverse;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::client::{ClientInfo, Message};
use crate::server::Server;

/// How long a pass that could not get under the limit (the rest is held by
/// clients that may not be evicted) keeps later growth from starting
/// another: such a pass looks at every client.
const FUTILE_PASS_PAUSE: Duration = Duration::from_millis(100);

/// Futile passes this far apart are separate times of being stuck over
/// the limit, each warned of.
const STUCK_EPISODE_GAP: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct ClientMemory {
    /// The sum of the live connections' `ClientInfo::memory`.
    total: AtomicI64,
    /// `maxmemory-clients` in bytes, 0 for no limit.
    limit: AtomicU64,
    /// Clients evicted since start or CONFIG RESETSTAT (INFO `evicted_clients`).
    pub evicted: AtomicU64,
    /// Held by a pass; when the last one ended still over the limit.
    futile_since: Mutex<Option<Instant>>,
}

impl ClientMemory {
    /// What the connections hold together (INFO `mem_clients_normal`).
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed).max(0) as u64
    }

    pub fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    fn over_limit(&self) -> bool {
        let limit = self.limit.load(Ordering::Relaxed);
        limit > 0 && self.total() > limit
    }
}

/// Records what a connection holds now, from its own worker, and evicts
/// clients if that took the sum past the limit. A client already flagged
/// to close is not counted again.
pub fn account(server: &Server, info: &ClientInfo, bytes: u64) {
    // The common case, no change, costs two loads.
    if info.memory.load(Ordering::Relaxed) == bytes || info.kill.load(Ordering::Acquire) {
        return;
    }
    let before = info.memory.swap(bytes, Ordering::AcqRel);
    let memory = &server.clients.memory;
    memory.total.fetch_add(bytes as i64 - before as i64, Ordering::Relaxed);
    if bytes > before && memory.over_limit() {
        evict(server, false);
    }
}

/// A connection closed: what it held leaves the sum.
pub fn forget(server: &Server, info: &ClientInfo) {
    let held = info.memory.swap(0, Ordering::AcqRel);
    server.clients.memory.total.fetch_sub(held as i64, Ordering::Relaxed);
}

/// Closes the largest clients that may be evicted (not CLIENT NO-EVICT;
/// replicas and the master's link are no worker's clients) until what the
/// connections hold is at or under `maxmemory-clients`. `forced` after a
/// change that may make a pass succeed where the last failed: a lower
/// limit, a client losing NO-EVICT.
pub fn evict(server: &Server, forced: bool) {
    let memory = &server.clients.memory;
    if !memory.over_limit() {
        return;
    }
    let mut futile_since = memory.futile_since.lock();
    if !forced && futile_since.is_some_and(|at| at.elapsed() < FUTILE_PASS_PAUSE) {
        return;
    }
    let mut candidates: Vec<_> = server
        .clients
        .list()
        .into_iter()
        .filter(|(info, _)| !info.no_evict.load(Ordering::Relaxed) && !info.kill.load(Ordering::Relaxed))
        .collect();
    candidates.sort_by_key(|(info, _)| Reverse(info.memory.load(Ordering::Relaxed)));
    let mut evicted = Vec::new();
    for (info, worker) in candidates {
        if !memory.over_limit() {
            break;
        }
        info.kill.store(true, Ordering::Release);
        server.clients.unregister(info.id);
        forget(server, &info);
        memory.evicted.fetch_add(1, Ordering::Relaxed);
        evicted.push((info, worker));
    }
    // Warned once per time the evictable clients run out, not per pass:
    // while stuck, the cron's passes come every tick.
    let stuck_before = futile_since.is_some_and(|at| at.elapsed() < STUCK_EPISODE_GAP);
    *futile_since = memory.over_limit().then(Instant::now);
    let newly_stuck = futile_since.is_some() && !stuck_before;
    drop(futile_since);
    let mut told = Vec::new();
    for (_, worker) in &evicted {
        if !told.contains(worker) {
            server.send(*worker, Message::CheckKills);
            told.push(*worker);
        }
    }
    // Logged once they are gone, which is what other clients may see.
    let now = crate::server::unix_ms();
    for (info, _) in &evicted {
        tracing::info!("Evicting client: {}", crate::command::connection::client_line(info, now));
    }
    if newly_stuck {
        tracing::warn!("Over client maxmemory after evicting all evictable clients");
    }
}
