//! Replication, master side: Redis 7.0's protocol, so that Redis replicas
//! (and Keel's) follow a Keel master.
//!
//! # One stream of changes
//!
//! Every change is journaled under the locks of the keys it touched
//! (`durability.rs`); while any replica has ever attached, the same
//! records are also fed, in the same places and so under the same locks,
//! to the replication backlog ([`backlog`]): the journal's record format
//! (`keel_journal::encode_command`), SELECT when the database changes,
//! MULTI ... EXEC around a transaction. Two changes to one key reach both
//! in the same order; changes to different keys commute. Until the first
//! replica, feeding costs one relaxed load per write.
//!
//! # A replica's life ([`master`])
//!
//! REPLCONF notes what the replica says of itself; PSYNC (or SYNC) hands
//! the connection from its worker to a thread of its own. A partial
//! resync (`+CONTINUE`) goes on from the backlog when the replica's
//! history is ours and its offset still held. Otherwise a full one
//! (`+FULLRESYNC <replid> <offset>`): a forkless snapshot taken at an
//! instant S, with every shard locked, when the replica's position is
//! pinned at the stream's end, streamed as an RDB (diskless, `$EOF:`
//! framing, to replicas that announce `capa eof`; else through a file,
//! with its length first, and a newline every second while the file is
//! written); then the stream from S on. The snapshot scan
//! runs behind the workers, as BGSAVE's. Diskless syncs asked for within
//! `repl-diskless-sync-delay` of each other share one snapshot and one
//! stream of its RDB ([`diskless`]). A second thread reads the
//! replica's `REPLCONF ACK`s, which WAIT and `min-replicas-to-write`
//! count.
//!
//! Under `appendfsync always` a replica is sent a record only once the
//! journal has it on disk: no read on a replica shows a write that a
//! crash of the master could still take away (see [`backlog`]).
//!
//! # A replica's own replicas
//!
//! While this server follows a master it is one link of a chain, as a
//! Redis replica is: its backlog holds the master's stream as it came
//! (`crate::replica` proxies each applied piece), at the master's offsets
//! and under the master's replid, and its own writes feed nothing. So its
//! replicas see the top master's history, a replica moved to a sibling
//! can PSYNC there, and a promoted replica keeps serving PSYNCs of the
//! old history (its secondary id) up to where it left it.
//!
//! # FAILOVER ([`failover`])
//!
//! A master hands over to one of its replicas: writes pause until the
//! target has acknowledged the stream's end, then the master becomes its
//! replica and asks it, with `PSYNC ... FAILOVER`, to take over the shared
//! history, so neither side syncs in full.

pub mod backlog;
pub mod diskless;
pub mod failover;
pub mod master;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Once};
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::blocking::{WaitFor, Waiter};
use crate::client::Message;
use crate::server::{unix_ms, Server};
use backlog::Backlog;
pub use master::{AttachedReplica, Handoff, ReplicaState};

/// Redis's history ids: the current one, and the one it replaced with the
/// offset where that history ended (a promoted replica accepts PSYNCs of
/// its former master's history up to there).
struct Ids {
    replid: String,
    replid2: String,
    second_offset: i64,
}

/// What the writers, the replicas' threads and the durable hook share.
pub struct Shared {
    /// `None` until the first replica attaches (Redis creates its backlog
    /// then too).
    backlog: Mutex<Option<Backlog>>,
    /// Rung when the backlog grows, and when the journal becomes durable
    /// further while a sender waits for it.
    more: Condvar,
    /// A sender waits for the journal's disk.
    waiting_durable: AtomicBool,
}

impl Shared {
    /// The journal became durable further (its writer thread calls this).
    pub fn durable_advanced(&self) {
        if self.waiting_durable.swap(false, Ordering::AcqRel) {
            let _g = self.backlog.lock();
            self.more.notify_all();
        }
    }
}

pub struct Replication {
    ids: Mutex<Ids>,
    /// Writes feed the backlog: it exists, and this server is no replica.
    active: AtomicBool,
    /// This server follows a master: its backlog holds the master's
    /// stream, proxied (changed under the backlog's lock).
    proxying: AtomicBool,
    pub shared: Arc<Shared>,
    replicas: Mutex<Vec<Arc<AttachedReplica>>>,
    /// Clients blocked in WAIT.
    waits: Mutex<Vec<Arc<Waiter>>>,
    next_replica_id: AtomicU64,
    /// The replication cron (pings, good replicas) starts with the first
    /// replica.
    cron: Once,
    /// INFO stats' sync_full, sync_partial_ok, sync_partial_err.
    pub sync_full: AtomicU64,
    pub sync_partial_ok: AtomicU64,
    pub sync_partial_err: AtomicU64,
    /// `client-output-buffer-limit`'s hard limit for replicas, mirrored
    /// for `feed_with` (the cron reads the soft one from the server).
    output_hard_limit: AtomicU64,
    /// The stream's end when its backlog was freed: the next one goes on
    /// from there.
    freed_at: AtomicU64,
    /// Replicas whose lag is within `min-replicas-max-lag` (INFO
    /// min_slaves_good_slaves).
    pub good_replicas: AtomicU64,
    /// Replicas waiting for a diskless sync to start.
    groups: diskless::Groups,
    /// A FAILOVER under way.
    pub failover: failover::Failover,
}

/// A 40-hex-digit random id (run ids, replication ids).
pub fn random_id() -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..40).map(|_| char::from_digit(rng.gen_range(0..16), 16).unwrap_or('0')).collect()
}

/// What a full sync's replica is told at its instant S.
#[derive(Debug, Clone)]
pub struct SyncPoint {
    /// The history (`+FULLRESYNC <replid> <offset>`), and the offset the
    /// snapshot holds everything up to.
    pub replid: String,
    pub offset: u64,
    /// The database the stream after it runs in (the RDB's
    /// `repl-stream-db`): the proxied master's, on a replica; a master's
    /// own stream begins with a SELECT.
    pub stream_db: usize,
}

impl Replication {
    /// `following`: the server starts as a replica (`replicaof` set).
    pub fn new(following: bool) -> Replication {
        Replication {
            ids: Mutex::new(Ids { replid: random_id(), replid2: "0".repeat(40), second_offset: -1 }),
            active: AtomicBool::new(false),
            proxying: AtomicBool::new(following),
            shared: Arc::new(Shared { backlog: Mutex::new(None), more: Condvar::new(), waiting_durable: AtomicBool::new(false) }),
            replicas: Mutex::new(Vec::new()),
            waits: Mutex::new(Vec::new()),
            next_replica_id: AtomicU64::new(1),
            cron: Once::new(),
            sync_full: AtomicU64::new(0),
            sync_partial_ok: AtomicU64::new(0),
            sync_partial_err: AtomicU64::new(0),
            good_replicas: AtomicU64::new(0),
            output_hard_limit: AtomicU64::new(256 << 20),
            freed_at: AtomicU64::new(0),
            groups: diskless::Groups::default(),
            failover: failover::Failover::default(),
        }
    }

    /// Whether writes feed the backlog: one relaxed load. Set under every
    /// shard lock (a full sync's instant S), so a writer holding any shard
    /// lock sees it settled; off while this server follows a master (a
    /// write that saw it just before is dropped by `feed_with`).
    pub fn feeding(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Feeds one record (run in `db`) that needs the journal durable at
    /// `lsn` (0: nothing) before it is sent. Returns the stream's end
    /// after it: the offset a WAIT by its client waits for.
    pub fn feed<A: AsRef<[u8]>>(&self, db: usize, argv: &[A], lsn: u64) -> u64 {
        self.feed_with(Some(db), lsn, |out, _| keel_journal::encode_command(out, argv))
    }

    /// Feeds a transaction as Redis propagates one: MULTI, the commands
    /// (each after a SELECT where its database changes), EXEC.
    pub fn feed_transaction<A: AsRef<[u8]>>(&self, commands: &[(usize, Vec<A>)], lsn: u64) -> u64 {
        let Some(&(first_db, _)) = commands.first() else { return self.end() };
        self.feed_with(Some(first_db), lsn, |out, selected| {
            keel_journal::encode_command(out, &[b"MULTI"]);
            for (db, argv) in commands {
                if *selected != Some(*db) {
                    keel_journal::encode_select(out, *db);
                    *selected = Some(*db);
                }
                keel_journal::encode_command(out, argv);
            }
            keel_journal::encode_command(out, &[b"EXEC"]);
        })
    }

    fn feed_with(&self, db: Option<usize>, lsn: u64, encode: impl FnOnce(&mut Vec<u8>, &mut Option<usize>)) -> u64 {
        let mut g = self.shared.backlog.lock();
        // A write that saw `feeding()` just before this server became a
        // replica: the backlog now holds the master's stream only.
        let Some(backlog) = g.as_mut().filter(|_| !self.proxying.load(Ordering::Relaxed)) else { return 0 };
        let end = backlog.feed(db, lsn, encode);
        // As Redis's checkClientOutputBufferLimits (reached at the limit,
        // as the soft one), never below `repl-backlog-size`: a partial
        // resync may send that much at once.
        let hard = match self.output_hard_limit.load(Ordering::Relaxed) {
            0 => u64::MAX,
            hard => hard.max(backlog.size()),
        };
        let over = backlog.furthest_behind().filter(|&(_, behind)| behind >= hard);
        if let Some((id, _)) = over {
            // Under the lock, so that its sender copies nothing of what
            // was just fed (`master::stream`), as Redis writes nothing
            // more to a client it will close.
            backlog.unpin(id);
        }
        drop(g);
        self.shared.more.notify_all();
        if let Some((id, behind)) = over {
            self.enforce_output_limit(id, behind);
        }
        end
    }

    /// A piece of the master's stream that this replica applied, as it
    /// came, after which the stream is in database `db`: its replicas get
    /// the same bytes at the same offsets, once the journal holds `lsn`
    /// (0: nothing) where replies wait for the disk.
    pub fn proxy(&self, bytes: &[u8], db: usize, lsn: u64) {
        let mut g = self.shared.backlog.lock();
        let Some(backlog) = g.as_mut() else { return };
        backlog.feed(None, lsn, |out, selected| {
            out.extend_from_slice(bytes);
            *selected = Some(db);
        });
        drop(g);
        self.shared.more.notify_all();
    }

    /// Becoming a replica (REPLICAOF host port): writes stop feeding the
    /// backlog, which from the first sync on holds the master's stream.
    /// Returns, if this server was a master, its own history as a cached
    /// master to PSYNC with (replid, offset), as Redis's
    /// `replicationCacheMasterUsingMyself`: a new master that was its
    /// replica may continue it.
    pub fn start_proxying(&self) -> Option<(String, u64)> {
        let g = self.shared.backlog.lock();
        let was_proxying = self.proxying.swap(true, Ordering::Relaxed);
        self.active.store(false, Ordering::Relaxed);
        let end = g.as_ref().map_or(self.freed_at.load(Ordering::Relaxed), |b| b.end());
        drop(g);
        (!was_proxying).then(|| (self.replid(), end))
    }

    /// A full sync from the master begins to load: this server's replicas
    /// go, to sync again with the new data, and the backlog with them, so
    /// that none continues the history it held (Redis's
    /// `replicationAttachToNewMaster`).
    pub fn forget_history(&self) {
        self.disconnect_replicas();
        if let Some(backlog) = self.shared.backlog.lock().take() {
            self.freed_at.store(backlog.end(), Ordering::Relaxed);
        }
    }

    /// A full sync from the master loaded: the master's history is this
    /// server's from `offset` on, with the stream in database `db`, and no
    /// secondary id (the end of Redis's `readSyncBulkPayload`).
    pub fn adopt_master_history(&self, replid: &str, offset: u64, db: usize, size: u64) {
        *self.shared.backlog.lock() = Some(Backlog::proxied(offset, size, db));
        let mut ids = self.ids.lock();
        ids.replid = replid.to_string();
        ids.replid2 = "0".repeat(40);
        ids.second_offset = -1;
    }

    /// What an RDB saved at S records of the history (Redis's
    /// `rdbPopulateSaveInfo`): its replid, the offset at S and the
    /// stream's database, where a backlog holds it. Read at S, under every
    /// shard lock (on a replica, with its master's stream held still).
    pub fn save_point(&self) -> Option<SyncPoint> {
        let g = self.shared.backlog.lock();
        let backlog = g.as_ref()?;
        Some(SyncPoint { replid: self.replid(), offset: backlog.end(), stream_db: backlog.selected_db.unwrap_or(0) })
    }

    /// A master restarted from an RDB saved at `offset` of history
    /// `replid`: that becomes its secondary id, up to there, and its
    /// stream goes on from `offset` (Redis's `loadDataFromDisk`).
    pub fn restore_as_master(&self, server: &Arc<Server>, replid: &str, offset: u64, size: u64) {
        *self.shared.backlog.lock() = Some(Backlog::new(offset, size));
        self.active.store(true, Ordering::Relaxed);
        let mut ids = self.ids.lock();
        ids.replid2 = replid.to_string();
        ids.second_offset = offset as i64 + 1;
        drop(ids);
        // Its `repl-backlog-ttl` counts from now.
        self.start_cron(server);
    }

    /// A partial resync with the master (`+CONTINUE`) from `offset`, the
    /// stream in database `db`. A new replid (the master was promoted)
    /// becomes this server's, the old one its secondary id up to `offset`,
    /// and its replicas go, to learn it when they PSYNC again, as Redis's
    /// `replicaTryPartialResynchronization` does.
    pub fn continue_master_history(&self, replid: &str, offset: u64, db: usize, size: u64) {
        {
            let mut g = self.shared.backlog.lock();
            if g.as_ref().is_none_or(|b| b.end() != offset) {
                *g = Some(Backlog::proxied(offset, size, db));
            }
        }
        let mut ids = self.ids.lock();
        if ids.replid != replid {
            ids.replid2 = std::mem::replace(&mut ids.replid, replid.to_string());
            ids.second_offset = offset as i64 + 1;
            drop(ids);
            self.disconnect_replicas();
        }
    }

    /// Promotion (REPLICAOF NO ONE): writes feed the backlog again, the
    /// next one after a SELECT. With `history`, the master's replid and
    /// the offset applied, that history becomes the secondary one, which
    /// PSYNCs may still continue up to there (Redis's
    /// `shiftReplicationId`); the replicas go, to learn the new id.
    pub fn stop_proxying(&self, history: Option<(&str, u64)>) {
        {
            let mut g = self.shared.backlog.lock();
            self.proxying.store(false, Ordering::Relaxed);
            if let Some(backlog) = g.as_mut() {
                backlog.selected_db = None;
            }
            self.active.store(g.is_some(), Ordering::Relaxed);
        }
        if let Some((old, offset)) = history {
            let mut ids = self.ids.lock();
            ids.replid2 = old.to_string();
            ids.second_offset = offset as i64 + 1;
            ids.replid = random_id();
        }
        self.disconnect_replicas();
    }

    fn disconnect_replicas(&self) {
        for replica in self.replicas() {
            self.drop_replica(&replica);
        }
    }

    /// CONFIG RESETSTAT: the sync counters start again.
    pub fn reset_stats(&self) {
        for counter in [&self.sync_full, &self.sync_partial_ok, &self.sync_partial_err] {
            counter.store(0, Ordering::Relaxed);
        }
    }

    /// The backlog's bytes beyond its size ([`Backlog::beyond_size`]).
    pub fn beyond_backlog_size(&self) -> u64 {
        self.shared.backlog.lock().as_ref().map_or(0, |b| b.beyond_size())
    }

    /// The replication buffer's bytes and `repl-backlog-size`, while there
    /// is a backlog.
    pub fn buffer_memory(&self) -> Option<(u64, u64)> {
        self.shared.backlog.lock().as_ref().map(|b| (b.memory(), b.size()))
    }

    /// The stream's end (INFO master_repl_offset).
    pub fn end(&self) -> u64 {
        match self.shared.backlog.lock().as_ref() {
            Some(backlog) => backlog.end(),
            None => self.freed_at.load(Ordering::Relaxed),
        }
    }

    /// `repl-backlog-ttl` passed without replicas: the backlog goes, with
    /// the history id (a new one starts, as Redis's replicationCron does;
    /// no PSYNC can continue a history no backlog holds), and writes stop
    /// feeding it. The offset goes on from where it was.
    fn free_backlog(&self) {
        let mut g = self.shared.backlog.lock();
        let Some(backlog) = g.take() else { return };
        self.active.store(false, Ordering::Relaxed);
        self.freed_at.store(backlog.end(), Ordering::Relaxed);
        drop(g);
        let mut ids = self.ids.lock();
        ids.replid = random_id();
        ids.replid2 = "0".repeat(40);
        ids.second_offset = -1;
        tracing::info!("Replication backlog freed: no replica for repl-backlog-ttl seconds");
    }

    pub fn replid(&self) -> String {
        self.ids.lock().replid.clone()
    }

    /// (replid, replid2, second_repl_offset) for INFO.
    pub fn ids(&self) -> (String, String, i64) {
        let ids = self.ids.lock();
        (ids.replid.clone(), ids.replid2.clone(), ids.second_offset)
    }

    /// INFO's repl_backlog_* figures: (active, size, first byte offset, held).
    pub fn backlog_info(&self, configured_size: u64) -> (bool, u64, u64, u64) {
        match self.shared.backlog.lock().as_ref() {
            Some(b) => (true, b.size(), b.first_byte_offset(), b.held()),
            None => (false, configured_size, 0, 0),
        }
    }

    /// `client-output-buffer-limit`'s hard limit for the replica class,
    /// at run time.
    pub fn set_output_hard_limit(&self, hard: u64) {
        self.output_hard_limit.store(hard, Ordering::Relaxed);
    }

    /// Drops the replicas that have stayed past the replica class's soft
    /// limit for more than its seconds (Redis's
    /// checkClientOutputBufferLimits; run by the cron).
    fn enforce_soft_output_limit(&self, soft: u64, seconds: u64, now_ms: u64) {
        let replicas = self.replicas();
        let behind: Vec<Option<u64>> = match self.shared.backlog.lock().as_ref() {
            Some(backlog) => replicas.iter().map(|r| backlog.behind(r.id)).collect(),
            None => return,
        };
        for (replica, behind) in replicas.iter().zip(behind) {
            let Some(behind) = behind.filter(|&b| soft > 0 && b >= soft) else {
                replica.over_soft_limit_since_ms.store(0, Ordering::Relaxed);
                continue;
            };
            match replica.over_soft_limit_since_ms.load(Ordering::Relaxed) {
                0 => replica.over_soft_limit_since_ms.store(now_ms, Ordering::Relaxed),
                since if now_ms.saturating_sub(since) > seconds * 1000 => self.enforce_output_limit(replica.id, behind),
                _ => {}
            }
        }
    }

    /// `repl-backlog-size` at run time.
    pub fn set_backlog_size(&self, size: u64) {
        if let Some(b) = self.shared.backlog.lock().as_mut() {
            b.set_size(size);
        }
    }

    /// The replicas attached now, in attach order. One whose connection
    /// closed is gone at once, as Redis frees such a client at once: not
    /// when its sender next wakes to detach it.
    pub fn replicas(&self) -> Vec<Arc<AttachedReplica>> {
        self.replicas.lock().iter().filter(|r| !r.is_gone()).cloned().collect()
    }

    /// Counts the online replicas whose last ACK is at most `max_lag`
    /// seconds old (`min-replicas-max-lag`), and keeps the count for INFO.
    pub fn count_good(&self, max_lag: u32) -> u64 {
        let now = unix_ms();
        let good = self
            .replicas
            .lock()
            .iter()
            .filter(|r| r.state() == ReplicaState::Online && !r.is_gone())
            .filter(|r| now.saturating_sub(r.ack_ms()) / 1000 <= u64::from(max_lag))
            .count() as u64;
        self.good_replicas.store(good, Ordering::Relaxed);
        good
    }

    /// How many online replicas have acknowledged `offset`.
    pub fn acked(&self, offset: u64) -> u64 {
        self.replicas.lock().iter().filter(|r| r.state() == ReplicaState::Online && !r.is_gone() && r.ack() >= offset).count() as u64
    }

    /// Registers a client blocked in WAIT and asks every replica for its
    /// offset (`REPLCONF GETACK *` in the stream, as Redis does).
    pub fn add_wait(&self, waiter: Arc<Waiter>) {
        self.waits.lock().push(waiter);
        // Not while a FAILOVER waits for its target to reach the stream's
        // end: the replicas' own ACKs, every second, do then.
        if self.failover.state() == failover::State::None {
            self.request_acks();
        }
    }

    /// Asks every replica for its offset: `REPLCONF GETACK *` in the
    /// stream, as Redis's `sendGetackToReplicas`.
    pub fn request_acks(&self) {
        self.feed_with(None, 0, |out, _| keel_journal::encode_command(out, &[&b"REPLCONF"[..], b"GETACK", b"*"]));
    }

    /// A replica acknowledged more: answers the WAITs now satisfied.
    fn acks_advanced(&self, server: &Server) {
        let mut waits = self.waits.lock();
        waits.retain(|w| !w.is_done());
        if waits.is_empty() {
            return;
        }
        waits.retain(|w| {
            let WaitFor::Acks { offset, wanted } = w.wait_for else { return false };
            let acked = self.acked(offset);
            if acked < wanted || !w.claim() {
                return true;
            }
            server.send(w.worker, Message::Unblock { client: w.client, reply: format!(":{acked}\r\n").into_bytes(), lsn: 0 });
            false
        });
    }

    /// Drops a replica past `client-output-buffer-limit`'s hard limit
    /// for its class (Redis's `replica` class: 256 MB by default).
    fn enforce_output_limit(&self, id: u64, behind: u64) {
        let replica = self.replicas.lock().iter().find(|r| r.id == id).cloned();
        if let Some(replica) = replica {
            tracing::warn!("Client {} scheduled to be closed ASAP for overcoming of output buffer limits ({behind} bytes behind).", replica.addr());
            self.drop_replica(&replica);
        }
    }

    /// Ends a replica's link and releases at once what the backlog kept
    /// for it, as Redis frees a replica client at once: what is fed next
    /// is trimmed to `repl-backlog-size`, not kept for the replica's
    /// threads to notice the end.
    pub fn drop_replica(&self, replica: &AttachedReplica) {
        replica.disconnect();
        if let Some(b) = self.shared.backlog.lock().as_mut() {
            b.unpin(replica.id);
        }
    }

    /// Starts the replication cron once: `repl-ping-replica-period` PINGs
    /// in the stream (which keep replicas' links from timing out), and the
    /// count of good replicas for `min-replicas-to-write`.
    fn start_cron(&self, server: &Arc<Server>) {
        self.cron.call_once(|| {
            let server = Arc::clone(server);
            let spawned = std::thread::Builder::new().name("keel-repl-cron".into()).spawn(move || cron(&server));
            if let Err(e) = spawned {
                tracing::warn!("could not start the replication cron: {e}");
            }
        });
    }
}

/// Every 100 ms: the good replicas for `min-replicas-to-write`, a
/// FAILOVER's progress; every
/// `repl-ping-replica-period` seconds, a PING in the stream; after
/// `repl-backlog-ttl` seconds without replicas, the backlog freed.
fn cron(server: &Server) {
    let repl = &server.repl;
    let mut last_ping_ms = unix_ms();
    let mut alone_since_ms = None;
    while !server.shutdown.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        let (period_s, ttl_s) = {
            let c = server.config.read();
            server.count_good_replicas(&c);
            (c.repl_ping_replica_period, c.repl_backlog_ttl)
        };
        failover::tick(server);
        crate::shutdown::tick(server);
        let now = unix_ms();
        let [_, soft, soft_seconds] = server.output_limit[crate::config::REPLICA_CLASS].each_ref().map(|c| c.load(Ordering::Relaxed));
        repl.enforce_soft_output_limit(soft, soft_seconds, now);
        let replicas = repl.replicas();
        // (A replica's own replicas get its master's PINGs: `feed_with`
        // feeds nothing while it proxies.) None during a FAILOVER: the
        // target is to reach the stream's end, which must stay put.
        let failing_over = repl.failover.state() != failover::State::None;
        if !replicas.is_empty() && !failing_over && now.saturating_sub(last_ping_ms) >= period_s * 1000 {
            last_ping_ms = now;
            repl.feed_with(None, 0, |out, _| keel_journal::encode_command(out, &[b"PING"]));
        }
        let since = *alone_since_ms.get_or_insert(now);
        if !replicas.is_empty() {
            alone_since_ms = None;
        } else if ttl_s > 0 && now.saturating_sub(since) >= ttl_s * 1000 && !server.replica.is_replica() {
            repl.free_backlog();
            alone_since_ms = None;
        }
    }
}
