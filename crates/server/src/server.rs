//! The state every worker thread shares, and start-up: binding listeners
//! and spawning one worker per thread.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use keel_engine::Keyspace;
use parking_lot::{Mutex, RwLock};

use crate::client::{Clients, Message};
use crate::config::Config;

/// Counters of one command, kept per worker so that threads never share a
/// cache line on the hot path; INFO sums them.
#[derive(Default)]
pub struct CommandStats {
    pub calls: AtomicU64,
    pub usec: AtomicU64,
    pub rejected_calls: AtomicU64,
    pub failed_calls: AtomicU64,
}

/// Where the LRU clock starts, in seconds: far enough above zero that an
/// access time can lie before the server started (RESTORE ... IDLETIME),
/// far enough below `u32::MAX` for a century of uptime.
pub const LRU_EPOCH_S: u32 = 1 << 30;

const LFU_FIELD: u32 = i32::MAX as u32;

/// Progress of the running snapshot (a BGSAVE, SAVE or AOF rewrite): INFO's
/// `current_save_keys_*` and `current_fork_perc`, which Redis's fork child
/// reports, and its copy-on-write figures. Redis's child counts the pages
/// the kernel copied; Keel's copy is per key, the old versions a snapshot
/// keeps of keys written during it (`keel_engine::snapshot`), so those
/// bytes are what INFO shows as `current_cow_size` and the rest. Reset
/// when a snapshot begins; zero between snapshots.
#[derive(Default)]
pub struct SnapshotProgress {
    /// Keys in the dataset at S.
    pub keys_total: AtomicU64,
    /// Keys written so far.
    pub keys_processed: AtomicU64,
    /// The most the running snapshot was seen keeping (`current_cow_peak`),
    /// sampled by INFO and by the watch on a scan behind the workers.
    kept_peak: AtomicU64,
    /// `kept_peak` when the last BGSAVE and the last AOF rewrite ended
    /// (`rdb_last_cow_size`, `aof_last_cow_size`).
    pub last_bgsave_kept: AtomicU64,
    pub last_rewrite_kept: AtomicU64,
}

impl SnapshotProgress {
    pub fn begin(&self, total: u64) {
        self.keys_processed.store(0, Ordering::Relaxed);
        self.keys_total.store(total, Ordering::Relaxed);
        self.kept_peak.store(0, Ordering::Relaxed);
    }

    /// A sample of what the running snapshot keeps; returns the peak.
    pub fn note_kept(&self, bytes: u64) -> u64 {
        self.kept_peak.fetch_max(bytes, Ordering::Relaxed).max(bytes)
    }

    /// The snapshot is over: returns the peak of what it kept.
    pub fn end(&self) -> u64 {
        let peak = self.kept_peak.load(Ordering::Relaxed);
        self.begin(0);
        peak
    }
}

/// One worker's counters. Only its own thread writes them.
pub struct WorkerStats {
    pub commands: Box<[CommandStats]>,
    pub total_commands: AtomicU64,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    /// Socket reads and writes (INFO total_reads_processed/total_writes_processed).
    pub reads_processed: AtomicU64,
    pub writes_processed: AtomicU64,
    /// Connections this worker serves or has been handed and not yet
    /// taken: where the next accepted connection goes is read from these.
    pub connections: AtomicUsize,
    /// A busy script runs on this worker: its hook serves the worker's
    /// connections, and new ones go elsewhere if they can.
    pub beside_busy_script: AtomicBool,
    /// Each command's latency histogram (INFO latencystats), made at its
    /// first call. Behind a mutex only INFO and CONFIG RESETSTAT contend
    /// for: the worker's own thread records.
    pub latency: Mutex<Vec<Option<Box<LatencyHistogram>>>>,
}

/// Nanoseconds, 1 ns to 1 s at two significant figures, as Redis's
/// (`LATENCY_HISTOGRAM_*`): longer calls count as one second.
pub type LatencyHistogram = hdrhistogram::Histogram<u64>;
const LATENCY_MAX_NS: u64 = 1_000_000_000;

impl WorkerStats {
    fn new(commands: usize) -> WorkerStats {
        WorkerStats {
            commands: (0..commands).map(|_| CommandStats::default()).collect(),
            total_commands: AtomicU64::new(0),
            net_input_bytes: AtomicU64::new(0),
            net_output_bytes: AtomicU64::new(0),
            keyspace_hits: AtomicU64::new(0),
            keyspace_misses: AtomicU64::new(0),
            connections_received: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            reads_processed: AtomicU64::new(0),
            writes_processed: AtomicU64::new(0),
            connections: AtomicUsize::new(0),
            beside_busy_script: AtomicBool::new(false),
            latency: Mutex::new((0..commands).map(|_| None).collect()),
        }
    }

    /// CONFIG RESETSTAT: zeroes every counter.
    pub fn reset(&self) {
        for c in self.commands.iter() {
            c.calls.store(0, Ordering::Relaxed);
            c.usec.store(0, Ordering::Relaxed);
            c.rejected_calls.store(0, Ordering::Relaxed);
            c.failed_calls.store(0, Ordering::Relaxed);
        }
        for counter in [
            &self.total_commands,
            &self.net_input_bytes,
            &self.net_output_bytes,
            &self.keyspace_hits,
            &self.keyspace_misses,
            &self.connections_received,
            &self.rejected_connections,
            &self.reads_processed,
            &self.writes_processed,
        ] {
            counter.store(0, Ordering::Relaxed);
        }
        self.latency.lock().iter_mut().for_each(|h| *h = None);
    }

    /// Records a call of command `index` that took `ns`.
    pub fn record_latency(&self, index: usize, ns: u64) {
        let mut latency = self.latency.lock();
        let histogram = latency[index].get_or_insert_with(|| {
            Box::new(LatencyHistogram::new_with_bounds(1, LATENCY_MAX_NS, 2).expect("valid histogram bounds"))
        });
        histogram.saturating_record(ns.clamp(1, LATENCY_MAX_NS));
    }

    pub fn hit(&self, hit: bool) {
        let counter = if hit { &self.keyspace_hits } else { &self.keyspace_misses };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// A worker's inbox: other threads push, then wake its poll loop.
pub struct Mailbox {
    pub queue: Mutex<Vec<Message>>,
    pub waker: mio::Waker,
    /// Set while the worker holds replies until the journal is durable, so
    /// that durable advances wake only workers that care.
    pub awaiting_durable: AtomicBool,
}

impl Mailbox {
    pub fn send(&self, message: Message) {
        self.queue.lock().push(message);
        // A failed wake means the poller is gone: the server is stopping.
        let _ = self.waker.wake();
    }
}

pub struct Server {
    pub config: RwLock<Config>,
    /// Users, their permissions and the ACL log (`acl.rs`).
    pub acl: crate::acl::Acl,
    pub keyspace: Keyspace,
    pub clients: Clients,
    /// Clients waiting in blocking pops.
    pub blocking: crate::blocking::Registry,
    /// Who listens to which channel (SUBSCRIBE and its kin).
    pub pubsub: crate::pubsub::Registry,
    /// Client-side caching: who tracks, BCAST prefixes (`tracking.rs`).
    pub tracking: crate::tracking::Tracking,
    /// The memcached protocol's counters and CAS values (`crate::memcache`).
    pub memcache: crate::memcache::State,
    pub workers: Vec<Arc<WorkerStats>>,
    /// Which workers have work, and where: BGSAVE steps aside for them.
    pub worker_cores: crate::give_way::WorkerCores,
    pub watchdog: Arc<crate::watchdog::Watchdog>,
    pub mailboxes: RwLock<Vec<Arc<Mailbox>>>,
    pub errorstats: Mutex<BTreeMap<String, u64>>,
    pub started: Instant,
    pub run_id: String,
    /// Replication, master side: its ids, the backlog, the replicas.
    pub repl: crate::replication::Replication,
    /// Writes since the last save (INFO rdb_changes_since_last_save).
    pub dirty: AtomicU64,
    /// Errors in answer to a master's command or a journal replay's (INFO
    /// unexpected_error_replies): see `crate::process::propagation_error`.
    pub unexpected_error_replies: AtomicU64,
    pub lastsave_s: AtomicU64,
    pub shutdown: AtomicBool,
    /// A SIGTERM or SIGINT waits here to be acted on (Redis's
    /// `shutdown_asap`): only while `cron_paused`, since Keel acts on a
    /// signal at once otherwise; SHUTDOWN ABORT clears it.
    pub shutdown_asap: AtomicBool,
    /// The shutdown under way (SHUTDOWN or a signal), if any.
    pub shutting_down: crate::shutdown::Shutdown,
    /// DEBUG PAUSE-CRON: the periodic chores (active expiry, rehashing,
    /// client timeouts, save rules, automatic rewrites, a signal's
    /// shutdown) wait while set, as Redis's serverCron skips its work.
    pub cron_paused: AtomicBool,
    /// DEBUG SLEEP: until this Unix ms (0: not) the replicas' links send
    /// nothing either, no stream and no keepalive, as nothing leaves
    /// Redis's one thread while it sleeps.
    pub sleeping_until_ms: AtomicU64,
    /// DEBUG SET-SKIP-CHECKSUM-VALIDATION: RESTORE takes payloads whatever
    /// their CRC64 (the value itself is still checked in full).
    pub skip_dump_checksum: AtomicBool,
    /// The LRU clock: `LRU_EPOCH_S` + seconds since start, refreshed by the cron.
    pub lru_clock: AtomicU32,
    /// CLIENT PAUSE's, a shutdown's and a failover's pauses.
    pub pauses: crate::pause::Pauses,
    pub thread_count: usize,
    /// The workers' listeners on `port`, which CONFIG SET may replace.
    pub listeners: crate::listen::PortListeners,
    /// The same on `memcached-port`, and the metrics thread's on
    /// `metrics-port`.
    pub memcache_listeners: crate::listen::PortListeners,
    pub metrics_listeners: crate::listen::PortListeners,
    /// The workers' listeners on `tls-port`, and what TLS connections
    /// start from (`crate::tls`): those accepted there, a replica's link
    /// under `tls-replication`, the cluster bus's links and MIGRATE's under
    /// `tls-cluster`. Set while any of these is, and made again when CONFIG
    /// SET changes a `tls-*` setting (new connections take the new one).
    pub tls_listeners: crate::listen::PortListeners,
    pub tls: RwLock<Option<crate::tls::Contexts>>,
    /// The one stream of changes and whether `appendonly` logs to it now
    /// (switchable at run time): see [`Server::journal`].
    pub aof: crate::durability::Aof,
    /// True while a load runs ([`crate::loading`]): nothing it replays is
    /// logged, and clients wait for it or are answered -LOADING.
    pub loading: AtomicBool,
    /// True while a replica's `swapdb` load of the same history runs with
    /// the old data serving (Redis's async loading, `replica.rs`).
    pub async_loading: AtomicBool,
    /// How far that load has come (INFO loading_*).
    pub load_progress: crate::loading::LoadProgress,
    /// The active expiry cycle runs (DEBUG SET-ACTIVE-EXPIRE 0 stops it).
    pub active_expire: AtomicBool,
    /// INFO's instantaneous_ops_per_sec and friends, sampled by a cron.
    pub meter: Mutex<Meter>,
    /// `maxmemory`, mirrored out of `config` (kept in step by CONFIG SET)
    /// so that the check before each command takes no lock.
    pub maxmemory: AtomicU64,
    /// Eviction under `maxmemory` (`evict.rs`), with the policy mirrored.
    pub evictor: crate::evict::Evictor,
    /// MIGRATE's connections to its targets (`migrate.rs`).
    pub migrate: crate::migrate::Cache,
    /// `notify-keyspace-events` (`notify::*` bits), mirrored likewise.
    pub notify_flags: AtomicU32,
    /// `latency-tracking`, mirrored likewise.
    pub latency_tracking: AtomicBool,
    pub slowlog: crate::slowlog::SlowLog,
    /// The latency monitor (LATENCY LATEST, HISTORY, GRAPH, DOCTOR).
    pub latency_monitor: Arc<crate::latency::LatencyMonitor>,
    /// `client-output-buffer-limit` (hard, soft, soft seconds) by class
    /// (`config::OUTPUT_LIMIT_CLASSES`), mirrored for the workers, which
    /// check it at every flush.
    pub output_limit: [[AtomicU64; 3]; 3],
    /// `min-replicas-to-write` and `-max-lag` both set, mirrored likewise:
    /// with no replicas, writes are refused.
    pub min_replicas_unmet: AtomicBool,
    /// How lookups record accesses, mirrored out of `config` likewise
    /// (see [`Server::lfu_params`]).
    lfu: AtomicU64,
    /// A point-in-time snapshot of the keyspace is running (or about to
    /// begin): write commands then preserve the keys they name first
    /// (`command::run`). It is also the token that makes snapshots one at a
    /// time: whoever runs one (the AOF rewrite; BGSAVE later) sets it with a
    /// compare-exchange from false before `prepare_snapshot` and clears it
    /// once every shard is done or aborted. Set before S under every shard
    /// lock, so a command that takes a lock after S sees it.
    pub snapshot_active: AtomicBool,
    /// How far the running snapshot has come (INFO current_save_keys_*).
    pub snapshot_progress: SnapshotProgress,
    /// BGREWRITEAOF and automatic rewrites (`rewrite.rs`).
    pub rewrite: crate::rewrite::Rewriter,
    /// SAVE and BGSAVE (`snapshot.rs`).
    pub rdb: crate::snapshot::Saver,
    /// The link to the master while Keel is a replica (`replica.rs`).
    pub replica: crate::replica::Replica,
    /// The Lua script cache and the running script (`scripting`).
    pub scripts: crate::scripting::Scripts,
    /// Cluster mode's state and bus, when `cluster-enabled` (`cluster`).
    pub cluster: Option<Box<crate::cluster::Cluster>>,
}

/// Samples of the running totals taken every ~100 ms; the instantaneous
/// rates are the mean over the last `METER_SAMPLES` intervals, as Redis
/// computes them.
pub struct Meter {
    last_ms: u64,
    last: [u64; 3],
    samples: [[u64; METER_SAMPLES]; 3],
    next: usize,
}

const METER_SAMPLES: usize = 16;

/// What the meter tracks: commands, input bytes, output bytes.
#[derive(Clone, Copy)]
pub enum Metric {
    Commands = 0,
    NetInput = 1,
    NetOutput = 2,
}

impl Meter {
    fn new() -> Meter {
        Meter { last_ms: 0, last: [0; 3], samples: [[0; METER_SAMPLES]; 3], next: 0 }
    }

    /// Records the totals at `now_ms`; ignored if called within 100 ms of
    /// the previous sample (every worker's cron calls it).
    pub fn sample(&mut self, now_ms: u64, totals: [u64; 3]) {
        if self.last_ms == 0 {
            self.last_ms = now_ms;
            self.last = totals;
            return;
        }
        let elapsed = now_ms.saturating_sub(self.last_ms);
        if elapsed < 100 {
            return;
        }
        for (m, &total) in totals.iter().enumerate() {
            let delta = total.saturating_sub(self.last[m]);
            self.samples[m][self.next] = delta * 1000 / elapsed;
        }
        self.next = (self.next + 1) % METER_SAMPLES;
        self.last_ms = now_ms;
        self.last = totals;
    }

    /// Per-second rate of `metric`.
    pub fn rate(&self, metric: Metric) -> u64 {
        self.samples[metric as usize].iter().sum::<u64>() / METER_SAMPLES as u64
    }

    /// CONFIG RESETSTAT.
    pub fn reset(&mut self) {
        *self = Meter::new();
    }
}

/// The Redis version Keel reports to clients that check it (HELLO, INFO).
pub const REDIS_VERSION: &str = "7.0.15";

pub fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

pub fn unix_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

impl Server {
    /// The command statistics are sized from the command table,
    /// subcommands included.
    pub fn new(
        config: Config,
        thread_count: usize,
        journal: Option<Arc<keel_journal::Journal>>,
        cluster: Option<crate::cluster::Cluster>,
    ) -> Server {
        let command_count = crate::command::table().stat_count();
        // Enough shards that two threads rarely want the same lock at the
        // same instant, few enough that ALL_SHARDS commands stay cheap.
        let shards = (thread_count * 16).next_power_of_two().clamp(16, 1024);
        // A cluster node serves database 0 only, one shard per slot
        // (`crate::cluster`).
        let keyspace = match cluster {
            Some(_) => Keyspace::new(keel_engine::slot::SLOTS, 1),
            None => Keyspace::new(shards, config.databases),
        };
        let run_id = crate::replication::random_id();
        let config_fsync = config.appendfsync;
        let mirrored = config.clone();
        let server = Server {
            config: RwLock::new(config),
            acl: Default::default(),
            keyspace,
            clients: Clients::default(),
            blocking: Default::default(),
            pubsub: Default::default(),
            tracking: Default::default(),
            memcache: crate::memcache::State::new(),
            workers: (0..thread_count).map(|_| Arc::new(WorkerStats::new(command_count))).collect(),
            worker_cores: crate::give_way::WorkerCores::new(thread_count),
            watchdog: Arc::new(crate::watchdog::Watchdog::new(thread_count)),
            mailboxes: RwLock::new(Vec::new()),
            errorstats: Mutex::new(BTreeMap::new()),
            started: Instant::now(),
            run_id,
            repl: crate::replication::Replication::new(mirrored.replicaof.is_some()),
            dirty: AtomicU64::new(0),
            unexpected_error_replies: AtomicU64::new(0),
            lastsave_s: AtomicU64::new(unix_ms() / 1000),
            shutdown: AtomicBool::new(false),
            shutdown_asap: AtomicBool::new(false),
            shutting_down: Default::default(),
            cron_paused: AtomicBool::new(false),
            sleeping_until_ms: AtomicU64::new(0),
            skip_dump_checksum: AtomicBool::new(false),
            lru_clock: AtomicU32::new(LRU_EPOCH_S),
            pauses: Default::default(),
            thread_count,
            listeners: crate::listen::PortListeners::resp(),
            memcache_listeners: crate::listen::PortListeners::memcache(),
            metrics_listeners: crate::listen::PortListeners::metrics(),
            tls_listeners: crate::listen::PortListeners::tls(),
            tls: RwLock::new(None),
            aof: crate::durability::Aof::new(journal, config_fsync),
            loading: AtomicBool::new(false),
            async_loading: AtomicBool::new(false),
            load_progress: Default::default(),
            active_expire: AtomicBool::new(true),
            meter: Mutex::new(Meter::new()),
            maxmemory: AtomicU64::new(0),
            evictor: Default::default(),
            migrate: Default::default(),
            notify_flags: AtomicU32::new(0),
            latency_tracking: AtomicBool::new(true),
            output_limit: Default::default(),
            // Configured by `mirror_config` below, as at each CONFIG SET.
            slowlog: crate::slowlog::SlowLog::new(-1, 0),
            latency_monitor: Arc::new(crate::latency::LatencyMonitor::new()),
            min_replicas_unmet: AtomicBool::new(false),
            lfu: AtomicU64::new(0),
            snapshot_active: AtomicBool::new(false),
            snapshot_progress: SnapshotProgress::default(),
            rewrite: Default::default(),
            rdb: Default::default(),
            replica: Default::default(),
            scripts: Default::default(),
            cluster: cluster.map(Box::new),
        };
        server.mirror_config(&mirrored);
        server
    }

    /// The journal writes are logged to, while they are (`appendonly`).
    pub fn journal(&self) -> Option<&keel_journal::Journal> {
        self.aof.logging()
    }

    /// Whether replies wait for the journal to be durable (`appendfsync
    /// always` while logging).
    pub fn gate_replies(&self) -> bool {
        self.aof.gate_replies()
    }

    pub fn lru_s(&self) -> u32 {
        self.lru_clock.load(Ordering::Relaxed)
    }

    /// `lfu-log-factor` and `lfu-decay-time` under an LFU policy, `None`
    /// under any other (entries then record the LRU clock).
    pub fn lfu_params(&self) -> Option<(u32, u32)> {
        let packed = self.lfu.load(Ordering::Relaxed);
        (packed != 0).then_some(((packed >> 32) as u32 & LFU_FIELD, packed as u32 & LFU_FIELD))
    }

    /// Whether `min-replicas-to-write` is unmet, from the replicas' lag now.
    /// Called with `config` held (read or written): the replication
    /// cron's count can then never overwrite the one a CONFIG SET made
    /// from the settings before it.
    pub fn count_good_replicas(&self, config: &Config) {
        let good = self.repl.count_good(config.min_replicas_max_lag);
        let unmet = config.min_replicas_to_write > 0 && config.min_replicas_max_lag > 0 && good < u64::from(config.min_replicas_to_write);
        self.min_replicas_unmet.store(unmet, Ordering::Relaxed);
    }

    /// Mirrors the settings that the hot path reads out of `config`.
    pub fn mirror_config(&self, config: &Config) {
        self.maxmemory.store(config.maxmemory, Ordering::Relaxed);
        crate::process::apply_panic_settings(config);
        self.clients.memory.set_limit(config.maxmemory_clients.bytes(config.maxmemory));
        self.evictor.set_policy(config.maxmemory_policy);
        self.notify_flags.store(config.notify_keyspace_events, Ordering::Relaxed);
        self.latency_tracking.store(config.latency_tracking, Ordering::Relaxed);
        self.tracking.set_max_keys(config.tracking_table_max_keys);
        keel_engine::db::record_created_keys(config.notify_keyspace_events & crate::notify::NEW != 0);
        self.slowlog.configure(config.slowlog_log_slower_than, config.slowlog_max_len);
        self.latency_monitor.configure(config.latency_monitor_threshold);
        self.watchdog.configure(config.watchdog_period);
        keel_engine::db::time_expired_deletes(config.latency_monitor_threshold != 0);
        for (cells, limit) in self.output_limit.iter().zip(config.output_limits) {
            for (cell, v) in cells.iter().zip([limit.hard, limit.soft, limit.soft_seconds]) {
                cell.store(v, Ordering::Relaxed);
            }
        }
        // Counted now: a CONFIG SET of the lag applies to the next write.
        self.count_good_replicas(config);
        self.repl.set_backlog_size(config.repl_backlog_size);
        self.repl.set_output_hard_limit(config.output_limits[crate::config::REPLICA_CLASS].hard);
        // Both settings are at most i32::MAX: bit 63 says LFU.
        let lfu = config.maxmemory_policy.lfu().then(|| {
            1 << 63 | u64::from(config.lfu_log_factor & LFU_FIELD) << 32 | u64::from(config.lfu_decay_time & LFU_FIELD)
        });
        self.lfu.store(lfu.unwrap_or(0), Ordering::Relaxed);
        self.aof.no_fsync_on_rewrite.store(config.no_appendfsync_on_rewrite, Ordering::Release);
        self.replica.mirror(config);
        self.acl.log_max_len.store(config.acllog_max_len, Ordering::Relaxed);
        self.acl.trim_log();
        self.acl.pubsub_all.store(config.acl_pubsub_default == "allchannels", Ordering::Relaxed);
        crate::durability::suspend_fsync_while_saving(self, false);
    }

    /// Whether DEBUG SLEEP holds the server now.
    pub fn sleeping(&self) -> bool {
        let until = self.sleeping_until_ms.load(Ordering::Acquire);
        until != 0 && unix_ms() < until
    }

    /// Waits out a DEBUG SLEEP under way.
    pub fn wait_while_sleeping(&self) {
        while self.sleeping() {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    pub fn count_error(&self, text: &str) {
        let prefix = crate::command::CmdError::prefix(text).to_string();
        *self.errorstats.lock().entry(prefix).or_insert(0) += 1;
    }

    /// Whether clients are paused at `now_ms`, and for writes only (see
    /// [`crate::pause`]). The common case costs one atomic load and no
    /// clock read.
    pub fn paused(&self, now_ms: impl FnOnce() -> u64) -> Option<bool> {
        self.pauses.in_effect(now_ms).map(|mode| mode == crate::pause::Mode::Writes)
    }

    /// Tells every worker to look at its paused connections again.
    pub fn broadcast(&self, message: impl Fn() -> Message) {
        for mailbox in self.mailboxes.read().iter() {
            mailbox.send(message());
        }
    }

    /// Sums of every worker's counters.
    pub fn total(&self, counter: impl Fn(&WorkerStats) -> &AtomicU64) -> u64 {
        self.workers.iter().map(|w| counter(w).load(Ordering::Relaxed)).sum()
    }

    /// Each command's latency histogram (by stat index) merged over the
    /// workers, for INFO latencystats and LATENCY HISTOGRAM; `None` for a
    /// command not called since the last CONFIG RESETSTAT.
    pub fn command_latencies(&self) -> Vec<Option<LatencyHistogram>> {
        let locked: Vec<_> = self.workers.iter().map(|w| w.latency.lock()).collect();
        (0..locked.first().map_or(0, |l| l.len()))
            .map(|index| {
                let mut merged: Option<LatencyHistogram> = None;
                for histogram in locked.iter().filter_map(|l| l[index].as_deref()) {
                    match merged.as_mut() {
                        Some(m) => m.add(histogram).expect("histograms of the same bounds"),
                        None => merged = Some(histogram.clone()),
                    }
                }
                merged
            })
            .collect()
    }

    /// Starts an orderly stop: every worker leaves its loop at its next wake.
    pub fn request_shutdown(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        for mailbox in self.mailboxes.read().iter() {
            let _ = mailbox.waker.wake();
        }
    }

    pub fn send(&self, worker: usize, message: Message) {
        if let Some(mailbox) = self.mailboxes.read().get(worker) {
            mailbox.send(message);
        }
    }
}
