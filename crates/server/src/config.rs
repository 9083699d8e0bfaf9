//! Configuration: Redis's directive names and defaults, read from a
//! redis.conf-style file and `--directive value` flags, and served by
//! CONFIG GET/SET/REWRITE from the same table so that the three can never
//! disagree.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use thiserror::Error;

use crate::evict::Policy;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("Bad directive or wrong number of arguments")]
    Unknown,
    #[error("{0}")]
    Invalid(String),
    #[error("can't set immutable config")]
    Immutable,
}

/// A failure while reading the configuration at start-up, with where it was.
#[derive(Debug, Error)]
#[error("*** FATAL CONFIG FILE ERROR ***\n>>> {origin}: '{line}'\n{reason}")]
pub struct StartupConfigError {
    pub origin: String,
    pub line: String,
    pub reason: ConfigError,
}

/// One class's `client-output-buffer-limit`: a client whose pending output
/// reaches `hard` bytes, or stays at `soft` or more for over
/// `soft_seconds`, is closed. 0 turns a limit off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimit {
    pub hard: u64,
    pub soft: u64,
    pub soft_seconds: u64,
}

/// Redis's CONFIG_BINDADDR_MAX.
const BIND_ADDRESSES_MAX: usize = 16;

/// The classes of `client-output-buffer-limit`, in Redis's order: a
/// worker's clients are `normal`, or `pubsub` while subscribed; replicas
/// are held to `slave` by replication.
pub const OUTPUT_LIMIT_CLASSES: [&str; 3] = ["normal", "slave", "pubsub"];
/// Indexes into [`OUTPUT_LIMIT_CLASSES`].
pub const NORMAL_CLASS: usize = 0;
pub const REPLICA_CLASS: usize = 1;
pub const PUBSUB_CLASS: usize = 2;

/// `oom-score-adj`: whether and how the process's `oom_score_adj` follows
/// `oom-score-adj-values` (`process.rs`). Redis's `yes` is `relative`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OomScoreAdj {
    No,
    Relative,
    Absolute,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendFsync {
    Always,
    EverySec,
    No,
}

/// One `save` rule: BGSAVE once at least `changes` writes happened and more
/// than `seconds` passed since the last successful save.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaveRule {
    pub seconds: u64,
    pub changes: u64,
}

/// `save` arguments as Redis's `setConfigSaveOption` reads them: pairs of
/// seconds (at least 1) and changes; one empty argument means no rules.
fn parse_save_rules(args: &[&str]) -> Result<Vec<SaveRule>, ConfigError> {
    let invalid = || ConfigError::Invalid("Invalid save parameters".into());
    if let [""] = args {
        return Ok(Vec::new());
    }
    if !args.len().is_multiple_of(2) {
        return Err(invalid());
    }
    args.chunks(2)
        .map(|pair| {
            let seconds: u64 = pair[0].parse().map_err(|_| invalid())?;
            let changes: u64 = pair[1].parse().map_err(|_| invalid())?;
            if seconds < 1 {
                return Err(invalid());
            }
            Ok(SaveRule { seconds, changes })
        })
        .collect()
}

#[derive(Debug, Clone)]
pub struct Config {
    pub bind: Vec<String>,
    /// `bind-source-addr`: the address outgoing connections (a replica's
    /// to its master, the cluster bus's) are made from.
    pub bind_source_addr: Option<String>,
    pub port: u16,
    /// `memcached-port`: where the memcached text protocol is served, on
    /// the `bind` addresses; 0 (the default) serves none.
    pub memcached_port: u16,
    /// `memcached-max-item-size`: the largest value a memcached client
    /// may store (memcached's `-I`, 1 MiB by default).
    pub memcached_max_item_size: usize,
    /// `metrics-port`: where Prometheus scrapes `/metrics`, on the `bind`
    /// addresses; 0 (the default) serves none.
    pub metrics_port: u16,
    pub unixsocket: Option<PathBuf>,
    pub unixsocketperm: u32,
    /// Worker threads; 0 means one per core.
    pub threads: usize,
    pub databases: usize,
    pub requirepass: Option<Vec<u8>>,
    /// `protected-mode`: with no password, only clients on the loopback
    /// interface or the unix socket are served (`worker`).
    pub protected_mode: bool,
    /// `client-output-buffer-limit`, by class ([`OUTPUT_LIMIT_CLASSES`]).
    pub output_limits: [OutputLimit; 3],
    pub maxclients: usize,
    pub timeout_s: u64,
    pub tcp_keepalive_s: u64,
    pub tcp_backlog: i32,
    pub proto_max_bulk_len: usize,
    /// `hll-sparse-max-bytes`: the longest a sparse HyperLogLog may grow
    /// (header included) before it turns dense (`keel_engine::hyperloglog`).
    pub hll_sparse_max_bytes: usize,
    pub client_query_buffer_limit: usize,
    pub hz: u32,
    /// `slowlog-log-slower-than` (µs; negative: off) and `slowlog-max-len`.
    pub slowlog_log_slower_than: i64,
    pub slowlog_max_len: usize,
    /// `latency-tracking`: per-command latency histograms (INFO latencystats).
    pub latency_tracking: bool,
    /// `latency-tracking-info-percentiles`: the percentiles INFO reports.
    pub latency_tracking_info_percentiles: Vec<f64>,
    /// `latency-monitor-threshold` (ms): the latency monitor keeps the
    /// events that took at least this long; 0 turns it off.
    pub latency_monitor_threshold: u64,
    /// `watchdog-period` (ms, Redis's hidden debugging aid): a worker
    /// stuck in one loop turn this long logs its stack trace
    /// (`crate::watchdog`); 0 turns it off.
    pub watchdog_period: i64,
    /// `tracking-table-max-keys`: the most keys client-side caching's
    /// table holds before it forgets some (0: no limit).
    pub tracking_table_max_keys: u64,
    /// `busy-reply-threshold` (alias `lua-time-limit`, ms): how long a
    /// script runs before other clients get -BUSY and SCRIPT KILL may
    /// stop it (`scripting`).
    pub busy_reply_threshold: i64,
    /// `dynamic-hz`: the cron runs faster with many clients ([`Config::effective_hz`]).
    pub dynamic_hz: bool,
    /// `activerehashing`: the cron moves buckets of tables being rehashed
    /// (besides the moves every command on the table makes).
    pub activerehashing: bool,
    pub dir: PathBuf,
    pub dbfilename: String,
    pub appendonly: bool,
    pub appendfsync: AppendFsync,
    pub aof_load_truncated: bool,
    /// `aof-use-rdb-preamble`: rewrites write the base as an RDB.
    pub aof_use_rdb_preamble: bool,
    /// No fdatasync of the AOF while a BGSAVE or rewrite runs
    /// (`durability::suspend_fsync_while_saving`).
    pub no_appendfsync_on_rewrite: bool,
    /// `#TS:` annotations in the AOF (`keel_journal`'s `JournalConfig::timestamps`).
    pub aof_timestamp_enabled: bool,
    pub appendfilename: String,
    pub appenddirname: String,
    /// Redis's automatic rewrite rule (see `rewrite.rs`): grown by this
    /// percentage since the last rewrite, and larger than the minimum.
    pub auto_aof_rewrite_percentage: u64,
    pub auto_aof_rewrite_min_size: u64,
    /// Keel's greedy rewrite bounds (0: off); either one replaces Redis's rule.
    pub keel_aof_max_recovery_seconds: u64,
    pub keel_aof_max_disk_bytes: u64,
    /// Space the incr file keeps written ahead of its end under
    /// `appendfsync always`, so that each fdatasync flushes data only
    /// (`keel_journal`'s `prealloc.rs`); 0: none. Under
    /// `keel-aof-max-disk-bytes` at most a 32nd of that bound; none under
    /// `everysec` and `no` (`durability::space_ahead`).
    pub keel_aof_space_ahead: u64,
    /// Under `appendfsync always`, the least time in microseconds from the
    /// end of one fdatasync to the start of the next, while writes keep
    /// coming (`keel_journal::JournalConfig::sync_gap`). 0, the default:
    /// none. It pays where the server's cores are saturated (pipelined
    /// writes: fewer syncs leave more CPU) and costs latency where they are
    /// not (ten clients writing in a closed loop); BENCHMARKS.md has both.
    pub keel_aof_sync_gap_us: u64,
    /// Whether the journal's writer thread runs in `SCHED_BATCH`
    /// (`keel_journal::JournalConfig::writer_batch_class`): it then never
    /// preempts a worker on its core, and syncs what the worker gathered
    /// once it sleeps or its time slice ends. Yes, the default: on a
    /// saturated core, fewer and fuller syncs; the cost, a durable write
    /// alone amid a flood of other work on the same core waiting up to a
    /// time slice longer (BENCHMARKS.md has both).
    pub keel_aof_writer_batch_class: bool,
    /// Bytes per second replay is assumed to run at until start-up measures it.
    pub keel_aof_replay_rate: u64,
    /// `save <seconds> <changes>` rules (`snapshot.rs`'s cron BGSAVEs when
    /// one is met); empty: no automatic saves and none at shutdown.
    pub save: Vec<SaveRule>,
    /// Whether a `save` line was read at start: later ones add rules to it,
    /// and Redis's default rules are replaced (Redis's `save_loaded`).
    save_given_at_start: bool,
    /// `stop-writes-on-bgsave-error`: refuse writes with -MISCONF after a
    /// failed BGSAVE while save rules exist.
    pub stop_writes_on_bgsave_error: bool,
    /// `rdb-key-save-delay` (Redis's hidden test knob): microseconds a save
    /// sleeps per key written, outside every lock.
    pub rdb_key_save_delay_us: i64,
    /// `key-load-delay` (Redis's hidden test knob): microseconds a load
    /// sleeps per key or command; a negative -n sleeps 1 in n times.
    pub key_load_delay_us: i64,
    /// `loading-process-events-interval-bytes`: how much a load reads
    /// before clients are answered -LOADING; until then their requests
    /// wait for the load (Redis serves clients once per that many bytes).
    pub loading_process_events_interval_bytes: u64,
    /// Bytes per second an RDB base is assumed to load at until start-up
    /// measures it. Measured here: not faster per byte than commands (an
    /// RDB is denser: fewer bytes for the same keys), 0.6x to 0.9x.
    pub keel_aof_rdb_load_rate: u64,
    pub loglevel: String,
    pub logfile: String,
    pub pidfile: String,
    pub daemonize: bool,
    /// `supervised`: no, upstart, systemd or auto ([`crate::supervision`]).
    pub supervised: String,
    /// `syslog-enabled`, `syslog-ident` and `syslog-facility`
    /// ([`crate::syslog`]).
    pub syslog_enabled: bool,
    pub syslog_ident: String,
    pub syslog_facility: String,
    /// `always-show-logo`: print the start-up banner even when the log is
    /// not a terminal.
    pub always_show_logo: bool,
    /// `process.rs` applies these four.
    pub disable_thp: bool,
    pub jemalloc_bg_thread: bool,
    pub oom_score_adj: OomScoreAdj,
    /// For a master, a replica and a background child, in that order
    /// (Keel is always a master and forks no children: it uses the first).
    pub oom_score_adj_values: [i32; 3],
    pub enable_debug_command: String,
    /// Seconds a shutdown waits for lagging replicas (0: none).
    pub shutdown_timeout: u32,
    pub shutdown_on_sigint: crate::shutdown::Flags,
    pub shutdown_on_sigterm: crate::shutdown::Flags,
    /// Whether MODULE LOAD and UNLOAD may run (`yes`, `no`, `local`).
    pub enable_module_command: String,
    /// Whether CONFIG SET may change the [`PROTECTED`] settings.
    pub enable_protected_configs: String,
    pub lazyfree_lazy_user_del: bool,
    pub lazyfree_lazy_user_flush: bool,
    pub lazyfree_lazy_expire: bool,
    pub lazyfree_lazy_server_del: bool,
    /// `lazyfree-lazy-eviction`: evicted values are freed by the lazyfree
    /// thread, and evictions are logged as UNLINK.
    pub lazyfree_lazy_eviction: bool,
    /// Only says how Redis treats what Keel does not do yet (replicate
    /// with no sync files): kept and reported, with no effect.
    pub rdb_del_sync_files: bool,
    /// `sanitize-dump-payload`: kept and reported only. Keel checks every
    /// RDB and DUMP payload in full whatever it says, as Redis's `yes`:
    /// each is converted into Keel's own structures, which walks all of it.
    pub sanitize_dump_payload: String,
    /// `use-exit-on-panic`: a panic ends the process with exit code 1
    /// (`process::install_panic_hook`).
    pub use_exit_on_panic: bool,
    /// `crash-log-enabled`: a panic's report carries its stack trace.
    pub crash_log_enabled: bool,
    /// `ignore-warnings`: kept and reported; Keel raises none of the
    /// warnings Redis lets it silence (`ARM64-COW-BUG`).
    pub ignore_warnings: String,
    /// `io-threads` and `io-threads-do-reads`: kept and reported. Keel's
    /// workers (`threads`) each read, parse, run and write their own
    /// connections, which is what Redis's I/O threads are for.
    pub io_threads: u32,
    pub io_threads_do_reads: bool,
    /// `socket-mark-id`: the `SO_MARK` of the listening sockets (and so of
    /// the connections accepted on them), for routing and firewall rules.
    pub socket_mark_id: u32,
    /// `server_cpulist`, `bio_cpulist`, `aof_rewrite_cpulist` and
    /// `bgsave_cpulist`: the CPUs of each kind of thread
    /// (`process::apply_cpulists`).
    pub server_cpulist: Option<String>,
    pub bio_cpulist: Option<String>,
    pub aof_rewrite_cpulist: Option<String>,
    pub bgsave_cpulist: Option<String>,
    /// `replica-ignore-disk-write-errors`: a replica that cannot log its
    /// master's writes applies them with a warning instead of stopping.
    pub replica_ignore_disk_write_errors: bool,
    /// `activedefrag` and its tunables.
    pub defrag: DefragSettings,
    pub maxmemory: u64,
    /// `maxmemory-clients`: what client connections may hold together
    /// before the largest are closed (`client_memory.rs`).
    pub maxmemory_clients: ClientsLimit,
    pub maxmemory_policy: Policy,
    /// `maxmemory-samples`: keys sampled per database per eviction round.
    pub maxmemory_samples: u32,
    /// `maxmemory-eviction-tenacity`: how long one command may evict (`evict.rs`).
    pub maxmemory_eviction_tenacity: u32,
    /// `replica-ignore-maxmemory` (alias `slave-ignore-maxmemory`): a
    /// replica evicts nothing itself and takes its master's DELs.
    pub replica_ignore_maxmemory: bool,
    /// `notify-keyspace-events`, as `notify::*` class bits.
    pub notify_keyspace_events: u32,
    /// `lfu-log-factor`: how slowly the LFU counter grows (Redis's 10).
    pub lfu_log_factor: u32,
    /// `lfu-decay-time`: idle minutes per step down of the LFU counter.
    pub lfu_decay_time: u32,
    /// `min-replicas-to-write` / `-max-lag`: with both non-zero, writes
    /// need that many online replicas whose last acknowledgement is at
    /// most that many seconds old (else -NOREPLICAS).
    pub min_replicas_to_write: u32,
    pub min_replicas_max_lag: u32,
    /// `repl-backlog-size`: the stream kept for partial resyncs.
    pub repl_backlog_size: u64,
    /// `repl-ping-replica-period`: seconds between PINGs in the stream.
    pub repl_ping_replica_period: u64,
    /// `repl-backlog-ttl`: seconds without replicas after which the
    /// backlog is freed (0: never).
    pub repl_backlog_ttl: u64,
    /// `replica-priority`: what INFO tells Sentinel of this replica (lower
    /// is promoted first, 0 never).
    pub replica_priority: u32,
    /// `replica-announced`: whether INFO tells Sentinel to list this
    /// replica.
    pub replica_announced: bool,
    /// `active-expire-effort` (1-10): how much of its time and how many
    /// keys the active expiry spends (`keel_engine::ExpireEffort`).
    pub active_expire_effort: u32,
    /// `replica-announce-ip` and `-port`: the address a replica gives its
    /// master for itself (behind NAT or port forwarding), instead of the
    /// one its connection comes from and its own `port`.
    pub replica_announce_ip: Option<String>,
    pub replica_announce_port: u16,
    /// `replica-lazy-flush`: a full sync from a file frees the replica's
    /// old dataset on the lazyfree thread (a diskless one always does).
    pub replica_lazy_flush: bool,
    /// `repl-disable-tcp-nodelay`: a replica's link sends with Nagle's
    /// algorithm (fewer, bigger packets; more delay).
    pub repl_disable_tcp_nodelay: bool,
    /// `repl-diskless-sync`: a full sync's RDB goes straight to replicas
    /// that take it so (`capa eof`); with `no`, through a file first.
    pub repl_diskless_sync: bool,
    /// `repl-diskless-sync-delay`: seconds a diskless sync waits for more
    /// replicas to share its snapshot; `repl-diskless-sync-max-replicas`:
    /// that many waiting start it at once (0: no such number).
    pub repl_diskless_sync_delay_s: u64,
    pub repl_diskless_sync_max_replicas: u64,
    /// `propagation-error-behavior`: what a command from the master (or
    /// the journal's replay) that fails does: `ignore` (logged only),
    /// `panic`, `panic-on-replicas` (the master's stream only).
    pub propagation_error_behavior: String,
    /// `repl-diskless-load`: where a replica puts a full sync's RDB.
    /// `disabled`: a file, then the load; `swapdb`: straight from the
    /// socket into a dataset of its own, the old one kept until that
    /// succeeds; `on-empty-db`: as `swapdb` when the dataset is empty.
    pub repl_diskless_load: String,
    /// `repl-timeout`: seconds a replication link may stay silent or
    /// blocked before it is dropped.
    pub repl_timeout_s: u64,
    /// `rdbcompression`: LZF-compress strings in DUMP payloads (and RDB files).
    pub rdbcompression: bool,
    /// `rdbchecksum`: write (and check) the CRC64 trailer of RDB files.
    pub rdbchecksum: bool,
    /// `rdb-save-incremental-fsync`: fdatasync a dump every 4 MB written.
    pub rdb_save_incremental_fsync: bool,
    /// `aof-rewrite-incremental-fsync`: fdatasync a rewrite's base every
    /// 4 MB written.
    pub aof_rewrite_incremental_fsync: bool,
    /// `aof-disable-auto-gc`: keep the files a rewrite replaced, listed as
    /// history in the manifest.
    pub aof_disable_auto_gc: bool,
    /// The `*-max-listpack-*` thresholds of the collection encodings.
    pub encoding: keel_engine::EncodingLimits,
    /// Cluster mode's settings (`cluster-*`, `crate::cluster`).
    pub cluster: ClusterSettings,
    /// TLS's (`tls-*`, `crate::tls`).
    pub tls: TlsSettings,
    /// The file the configuration was read from, absolute (CONFIG REWRITE
    /// writes it back; INFO config_file shows it).
    pub config_file: Option<PathBuf>,
    /// `rename-command <name> <new name>` lines, in order: the names
    /// clients call commands by (`command::Renamed`); "" removes one.
    pub renamed_commands: Vec<(String, String)>,
    /// `set-proc-title` and `proc-title-template`: the process title
    /// (`crate::proc_title`).
    pub set_proc_title: bool,
    pub proc_title_template: String,
    /// `replicaof` (alias `slaveof`) `<host> <port>`: the master Keel
    /// replicates from (`replica.rs`); REPLICAOF changes it at run time.
    pub replicaof: Option<(String, u16)>,
    /// `masterauth` and `masteruser`: the AUTH the link sends to the master.
    pub masterauth: Option<String>,
    pub masteruser: Option<String>,
    /// `replica-read-only` (alias `slave-read-only`): while a replica,
    /// ordinary clients' writes are refused (-READONLY).
    pub replica_read_only: bool,
    /// `replica-serve-stale-data` (alias `slave-serve-stale-data`): while
    /// a replica's link is down, serve what it has (yes) or answer
    /// -MASTERDOWN to all but a few commands (no).
    pub replica_serve_stale_data: bool,
    /// `aclfile`: where ACL LOAD and SAVE read and write users; users
    /// come from it at start (`acl.rs`).
    pub aclfile: String,
    /// `user <name> <rules...>` lines of the config file, each its words
    /// after `user`: the users at start when there is no `aclfile`.
    pub users: Vec<Vec<String>>,
    /// `acllog-max-len`: entries the ACL LOG keeps.
    pub acllog_max_len: u64,
    /// `acl-pubsub-default`: whether a new user (or selector) may use
    /// every channel (`allchannels`) or none (`resetchannels`, 7.0's
    /// default).
    pub acl_pubsub_default: String,
}

/// `active-defrag-*`, kept and reported with Redis 7.0's ranges and
/// defaults. As Debian's redis-server, built on an unmodified jemalloc,
/// Keel cannot move live allocations, so `activedefrag` stays `no`.
#[derive(Debug, Clone)]
pub struct DefragSettings {
    pub ignore_bytes: u64,
    pub threshold_lower: u32,
    pub threshold_upper: u32,
    pub cycle_min: u32,
    pub cycle_max: u32,
    pub max_scan_fields: u64,
}

impl Default for DefragSettings {
    fn default() -> DefragSettings {
        DefragSettings {
            ignore_bytes: 100 << 20,
            threshold_lower: 10,
            threshold_upper: 100,
            cycle_min: 1,
            cycle_max: 25,
            max_scan_fields: 1000,
        }
    }
}

/// Redis's words where its allocator cannot defragment.
const NO_DEFRAG: &str = "Active defragmentation cannot be enabled: it requires a Redis server compiled with a modified \
                         Jemalloc like the one shipped by default with the Redis source distribution";

/// The `tls-*` settings Keel has (`crate::tls`), with Redis 7.0's
/// names and defaults; an unset file is None (Redis's
/// EMPTY_STRING_IS_NULL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `tls-port`: where clients connect over TLS; 0, nowhere.
    pub port: u16,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    /// `tls-key-file-pass`: the passphrase of an encrypted `tls-key-file`.
    pub key_file_pass: Option<String>,
    pub ca_cert_file: Option<String>,
    pub ca_cert_dir: Option<String>,
    /// `tls-auth-clients`: `yes` (a client must show a certificate the CAs
    /// signed), `optional` (one it shows must be), or `no`.
    pub auth_clients: String,
    /// `tls-protocols`: the versions offered; None, TLSv1.2 and TLSv1.3.
    pub protocols: Option<String>,
    /// `tls-prefer-server-ciphers`: the server's order of cipher suites
    /// wins over the client's.
    pub prefer_server_ciphers: bool,
    /// `tls-session-caching`, `tls-session-cache-size` and
    /// `tls-session-cache-timeout` (seconds): sessions kept for clients
    /// to resume.
    pub session_caching: bool,
    pub session_cache_size: u32,
    pub session_cache_timeout: u32,
    /// `tls-client-cert-file` and `tls-client-key-file`: what this server
    /// shows as a client (to its master); unset, its own certificate.
    pub client_cert_file: Option<String>,
    pub client_key_file: Option<String>,
    /// `tls-client-key-file-pass`: the passphrase of an encrypted
    /// `tls-client-key-file`.
    pub client_key_file_pass: Option<String>,
    /// `tls-replication`: a replica's link to its master speaks TLS.
    pub replication: bool,
    /// `tls-cluster`: the cluster bus speaks TLS, and so does MIGRATE;
    /// nodes announce `tls-port` (and `port` as the plaintext one).
    pub cluster: bool,
    /// `tls-dh-params-file`: read and checked as Redis does, but unused:
    /// rustls offers no finite-field DHE cipher suites.
    pub dh_params_file: Option<String>,
    /// `tls-ciphers` (TLS 1.2) and `tls-ciphersuites` (TLS 1.3): the
    /// cipher suites offered, by OpenSSL's names, in order; None, all.
    pub ciphers: Option<String>,
    pub ciphersuites: Option<String>,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            port: 0,
            cert_file: None,
            key_file: None,
            key_file_pass: None,
            ca_cert_file: None,
            ca_cert_dir: None,
            auth_clients: "yes".into(),
            protocols: None,
            prefer_server_ciphers: false,
            session_caching: true,
            session_cache_size: 20 * 1024,
            session_cache_timeout: 300,
            client_cert_file: None,
            client_key_file: None,
            client_key_file_pass: None,
            replication: false,
            cluster: false,
            dh_params_file: None,
            ciphers: None,
            ciphersuites: None,
        }
    }
}

/// The `cluster-*` settings, with Redis 7.0's names and defaults.
#[derive(Debug, Clone)]
pub struct ClusterSettings {
    /// `cluster-enabled`: the node serves its slots only, and talks to the
    /// others on the cluster bus.
    pub enabled: bool,
    /// `cluster-config-file`: the node's view of the cluster (nodes.conf),
    /// written by the node itself, relative to `dir`.
    pub config_file: String,
    /// `cluster-node-timeout`, ms: how long a node may not answer before
    /// it is suspected failing.
    pub node_timeout: u64,
    /// `cluster-port`: the bus port; 0 is the client port + 10000.
    pub port: u16,
    pub announce_ip: String,
    pub announce_port: u16,
    pub announce_bus_port: u16,
    /// `cluster-link-sendbuf-limit`: the most a bus link may hold unsent.
    pub link_sendbuf_limit: u64,
    /// `cluster-announce-tls-port`: the client port announced under
    /// `tls-cluster` (`announce_port` is then the plaintext one).
    pub announce_tls_port: u16,
    pub announce_hostname: String,
    /// `cluster-preferred-endpoint-type`: ip, hostname or unknown-endpoint.
    pub preferred_endpoint: String,
    pub require_full_coverage: bool,
    pub allow_reads_when_down: bool,
    pub allow_pubsubshard_when_down: bool,
    pub replica_validity_factor: u32,
    pub migration_barrier: u32,
    pub allow_replica_migration: bool,
    pub replica_no_failover: bool,
}

impl Default for ClusterSettings {
    fn default() -> ClusterSettings {
        ClusterSettings {
            enabled: false,
            config_file: "nodes.conf".into(),
            node_timeout: 15_000,
            port: 0,
            announce_ip: String::new(),
            announce_port: 0,
            announce_bus_port: 0,
            link_sendbuf_limit: 0,
            announce_tls_port: 0,
            announce_hostname: String::new(),
            preferred_endpoint: "ip".into(),
            require_full_coverage: true,
            allow_reads_when_down: false,
            allow_pubsubshard_when_down: true,
            replica_validity_factor: 10,
            migration_barrier: 1,
            allow_replica_migration: true,
            replica_no_failover: false,
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            // Redis's: every address, with protected mode turning away
            // clients from elsewhere until a password is set.
            bind: vec!["*".into(), "-::*".into()],
            bind_source_addr: None,
            port: 6379,
            unixsocket: None,
            unixsocketperm: 0,
            threads: 0,
            databases: 16,
            requirepass: None,
            protected_mode: true,
            output_limits: [
                OutputLimit { hard: 0, soft: 0, soft_seconds: 0 },
                OutputLimit { hard: 256 << 20, soft: 64 << 20, soft_seconds: 60 },
                OutputLimit { hard: 32 << 20, soft: 8 << 20, soft_seconds: 60 },
            ],
            maxclients: 10_000,
            timeout_s: 0,
            tcp_keepalive_s: 300,
            tcp_backlog: 511,
            proto_max_bulk_len: 512 << 20,
            hll_sparse_max_bytes: keel_engine::hyperloglog::SPARSE_MAX_BYTES_DEFAULT,
            memcached_port: 0,
            memcached_max_item_size: 1 << 20,
            metrics_port: 0,
            client_query_buffer_limit: 1 << 30,
            hz: 10,
            dynamic_hz: true,
            slowlog_log_slower_than: 10_000,
            slowlog_max_len: 128,
            latency_tracking: true,
            latency_tracking_info_percentiles: vec![50.0, 99.0, 99.9],
            latency_monitor_threshold: 0,
            watchdog_period: 0,
            tracking_table_max_keys: 1_000_000,
            busy_reply_threshold: 5000,
            activerehashing: true,
            dir: PathBuf::from("."),
            dbfilename: "dump.rdb".into(),
            // Durable by default: every acknowledged write is on disk.
            appendonly: true,
            appendfsync: AppendFsync::Always,
            aof_load_truncated: true,
            aof_use_rdb_preamble: true,
            aof_timestamp_enabled: false,
            no_appendfsync_on_rewrite: false,
            appendfilename: "appendonly.aof".into(),
            appenddirname: "appendonlydir".into(),
            auto_aof_rewrite_percentage: 100,
            auto_aof_rewrite_min_size: 64 << 20,
            keel_aof_max_recovery_seconds: 0,
            keel_aof_max_disk_bytes: 0,
            keel_aof_space_ahead: 4 << 20,
            keel_aof_sync_gap_us: 0,
            keel_aof_writer_batch_class: true,
            keel_aof_replay_rate: 64 << 20,
            // Redis 7.0's defaults (server.c, initServerConfig).
            save: vec![
                SaveRule { seconds: 3600, changes: 1 },
                SaveRule { seconds: 300, changes: 100 },
                SaveRule { seconds: 60, changes: 10_000 },
            ],
            save_given_at_start: false,
            stop_writes_on_bgsave_error: true,
            rdb_key_save_delay_us: 0,
            key_load_delay_us: 0,
            loading_process_events_interval_bytes: 2 << 20,
            keel_aof_rdb_load_rate: 48 << 20,
            loglevel: "notice".into(),
            logfile: String::new(),
            pidfile: String::new(),
            daemonize: false,
            supervised: "no".into(),
            syslog_enabled: false,
            syslog_ident: "redis".into(),
            syslog_facility: "local0".into(),
            always_show_logo: false,
            disable_thp: true,
            jemalloc_bg_thread: true,
            oom_score_adj: OomScoreAdj::No,
            oom_score_adj_values: [0, 200, 800],
            enable_debug_command: "no".into(),
            shutdown_timeout: 10,
            shutdown_on_sigint: Default::default(),
            shutdown_on_sigterm: Default::default(),
            enable_module_command: "no".into(),
            enable_protected_configs: "no".into(),
            lazyfree_lazy_user_del: false,
            lazyfree_lazy_user_flush: false,
            lazyfree_lazy_expire: false,
            lazyfree_lazy_server_del: false,
            lazyfree_lazy_eviction: false,
            rdb_del_sync_files: false,
            sanitize_dump_payload: "no".into(),
            use_exit_on_panic: false,
            crash_log_enabled: true,
            ignore_warnings: String::new(),
            io_threads: 1,
            io_threads_do_reads: false,
            socket_mark_id: 0,
            server_cpulist: None,
            bio_cpulist: None,
            aof_rewrite_cpulist: None,
            bgsave_cpulist: None,
            replica_ignore_disk_write_errors: false,
            defrag: DefragSettings::default(),
            maxmemory: 0,
            maxmemory_clients: ClientsLimit::Bytes(0),
            maxmemory_policy: Policy::NoEviction,
            maxmemory_samples: 5,
            maxmemory_eviction_tenacity: 10,
            replica_ignore_maxmemory: true,
            notify_keyspace_events: 0,
            lfu_log_factor: 10,
            lfu_decay_time: 1,
            min_replicas_to_write: 0,
            min_replicas_max_lag: 10,
            repl_backlog_size: 1 << 20,
            repl_ping_replica_period: 10,
            repl_backlog_ttl: 3600,
            replica_priority: 100,
            replica_announced: true,
            active_expire_effort: 1,
            replica_announce_ip: None,
            replica_announce_port: 0,
            repl_disable_tcp_nodelay: false,
            replica_lazy_flush: false,
            repl_diskless_sync: true,
            repl_diskless_load: "disabled".into(),
            propagation_error_behavior: "ignore".into(),
            repl_diskless_sync_delay_s: 5,
            repl_diskless_sync_max_replicas: 0,
            repl_timeout_s: 60,
            rdbcompression: true,
            rdbchecksum: true,
            rdb_save_incremental_fsync: true,
            aof_rewrite_incremental_fsync: true,
            aof_disable_auto_gc: false,
            encoding: Default::default(),
            cluster: Default::default(),
            tls: Default::default(),
            config_file: None,
            renamed_commands: Vec::new(),
            set_proc_title: true,
            proc_title_template: "{title} {listen-addr} {server-mode}".into(),
            replicaof: None,
            masterauth: None,
            masteruser: None,
            replica_read_only: true,
            replica_serve_stale_data: true,
            aclfile: String::new(),
            users: Vec::new(),
            acllog_max_len: 128,
            acl_pubsub_default: "resetchannels".into(),
        }
    }
}

type Getter = fn(&Config) -> String;
type Setter = fn(&mut Config, &[&str]) -> Result<(), ConfigError>;

/// One directive: its Redis name, whether CONFIG SET may change it at run
/// time, and how to read and write it.
pub struct Directive {
    pub name: &'static str,
    pub mutable: bool,
    get: Getter,
    set: Setter,
}

fn one<'a>(args: &[&'a str]) -> Result<&'a str, ConfigError> {
    match args {
        [v] => Ok(v),
        _ => Err(ConfigError::Unknown),
    }
}

pub fn parse_bool(v: &str) -> Result<bool, ConfigError> {
    match v.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(ConfigError::Invalid("argument must be 'yes' or 'no'".into())),
    }
}

/// `maxmemory-clients`: bytes, or a percent of `maxmemory` (Redis's
/// PERCENT_CONFIG, written `N%`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientsLimit {
    Bytes(u64),
    Percent(u64),
}

impl ClientsLimit {
    fn parse(v: &str) -> Result<ClientsLimit, ConfigError> {
        if let Ok(bytes) = parse_memory(v) {
            return match i64::try_from(bytes) {
                Ok(_) => Ok(ClientsLimit::Bytes(bytes)),
                Err(_) => Err(ConfigError::Invalid(format!("argument must be between -100 and {} inclusive", i64::MAX))),
            };
        }
        let percent = v.strip_suffix('%').filter(|p| !p.is_empty()).and_then(|p| p.parse::<u64>().ok());
        match percent {
            // Stored as Redis stores it, negated: 0% is 0.
            Some(0) => Ok(ClientsLimit::Bytes(0)),
            Some(p) if p <= 100 => Ok(ClientsLimit::Percent(p)),
            Some(_) => Err(ConfigError::Invalid("percentage argument must be less or equal to 100".into())),
            None => Err(ConfigError::Invalid("argument must be a memory or percent value".into())),
        }
    }

    /// The limit in bytes, 0 for none, as Redis's getClientEvictionLimit:
    /// a percent of no `maxmemory` is no limit, and a limit is never under
    /// 128 KB, so that a mistaken setting cannot cut every client off.
    pub fn bytes(self, maxmemory: u64) -> u64 {
        let bytes = match self {
            ClientsLimit::Bytes(b) => b,
            ClientsLimit::Percent(p) if maxmemory > 0 => (maxmemory as f64 * p as f64 / 100.0) as u64,
            ClientsLimit::Percent(_) => 0,
        };
        match bytes {
            0 => 0,
            b => b.max(128 << 10),
        }
    }
}

impl std::fmt::Display for ClientsLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClientsLimit::Bytes(b) => write!(f, "{b}"),
            ClientsLimit::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// Redis's memory notation: 1k = 1000, 1kb = 1024, up to gb.
pub fn parse_memory(v: &str) -> Result<u64, ConfigError> {
    let lower = v.to_ascii_lowercase();
    let split = lower.find(|c: char| !c.is_ascii_digit() && c != '-').unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(split);
    let mul: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return Err(ConfigError::Invalid("argument must be a memory value".into())),
    };
    // As Redis's memtoull: no digits are 0, and too many saturate (a
    // directive's range then refuses what is past it).
    if digits.is_empty() {
        return Ok(0);
    }
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ConfigError::Invalid("argument must be a memory value".into()));
    }
    Ok(digits.parse::<u64>().unwrap_or(u64::MAX).saturating_mul(mul))
}

fn parse_num<T>(v: &str, min: T, max: T) -> Result<T, ConfigError>
where
    T: TryInto<i128> + TryFrom<i128> + Copy + std::fmt::Display,
{
    // Parsed as Redis's string2ll: a number past a long long is no number;
    // one within it but out of the directive's range reports the range.
    let n = v
        .parse::<i64>()
        .map(i128::from)
        .map_err(|_| ConfigError::Invalid("argument couldn't be parsed into an integer".into()))?;
    in_range(n, min, max)
}

/// A memory value (`1mb`) within a directive's range, as Redis's numeric
/// configs flagged `MEMORY_CONFIG`.
fn parse_memory_in<T>(v: &str, min: T, max: T) -> Result<T, ConfigError>
where
    T: TryInto<i128> + TryFrom<i128> + Copy + std::fmt::Display,
{
    in_range(i128::from(parse_memory(v)?), min, max)
}

fn in_range<T>(n: i128, min: T, max: T) -> Result<T, ConfigError>
where
    T: TryInto<i128> + TryFrom<i128> + Copy + std::fmt::Display,
{
    let (lo, hi): (i128, i128) = (min.try_into().unwrap_or(i128::MIN), max.try_into().unwrap_or(i128::MAX));
    if n < lo || n > hi {
        return Err(ConfigError::Invalid(format!("argument must be between {min} and {max} inclusive")));
    }
    T::try_from(n).map_err(|_| ConfigError::Invalid(format!("argument must be between {min} and {max} inclusive")))
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// Builds a `Directive` for a field of a simple kind.
macro_rules! directive {
    ($name:literal, $mutable:expr, bool, $($field:ident).+) => {
        Directive {
            name: $name,
            mutable: $mutable,
            get: |c| yes_no(c.$($field).+),
            set: |c, a| {
                c.$($field).+ = parse_bool(one(a)?)?;
                Ok(())
            },
        }
    };
    ($name:literal, $mutable:expr, num($min:expr, $max:expr), $($field:ident).+) => {
        Directive {
            name: $name,
            mutable: $mutable,
            get: |c| c.$($field).+.to_string(),
            set: |c, a| {
                c.$($field).+ = parse_num(one(a)?, $min, $max)?;
                Ok(())
            },
        }
    };
    ($name:literal, $mutable:expr, memory($min:expr, $max:expr), $($field:ident).+) => {
        Directive {
            name: $name,
            mutable: $mutable,
            get: |c| c.$($field).+.to_string(),
            set: |c, a| {
                c.$($field).+ = parse_memory_in(one(a)?, $min, $max)?;
                Ok(())
            },
        }
    };
    ($name:literal, $mutable:expr, string, $($field:ident).+) => {
        Directive {
            name: $name,
            mutable: $mutable,
            get: |c| c.$($field).+.to_string(),
            set: |c, a| {
                c.$($field).+ = one(a)?.into();
                Ok(())
            },
        }
    };
    // An empty value is none, as Redis's `EMPTY_STRING_IS_NULL`.
    ($name:literal, $mutable:expr, optional_string, $($field:ident).+) => {
        Directive {
            name: $name,
            mutable: $mutable,
            get: |c| c.$($field).+.clone().unwrap_or_default(),
            set: |c, a| {
                c.$($field).+ = Some(one(a)?.to_string()).filter(|s| !s.is_empty());
                Ok(())
            },
        }
    };
    ($name:literal, $mutable:expr, shutdown_flags, $($field:ident).+) => {
        Directive {
            name: $name,
            mutable: $mutable,
            get: |c| c.$($field).+.words(),
            set: |c, a| {
                c.$($field).+ = crate::shutdown::Flags::parse(a).map_err(ConfigError::Invalid)?;
                Ok(())
            },
        }
    };
    ($name:literal, $mutable:expr, enum [$($v:literal),+], $($field:ident).+) => {
        Directive {
            name: $name,
            mutable: $mutable,
            get: |c| c.$($field).+.to_string(),
            set: |c, a| {
                let v = one(a)?.to_ascii_lowercase();
                if ![$($v),+].contains(&v.as_str()) {
                    return Err(ConfigError::Invalid("argument(s) must be one of the following: ".to_string() + &[$($v),+].join(", ")));
                }
                c.$($field).+ = v;
                Ok(())
            },
        }
    };
}

/// A percentile as Redis writes it (`%f`, then trailing zeros and a
/// trailing point trimmed): 99.9 as `99.9`, 50 as `50`.
pub fn format_percentile(p: f64) -> String {
    let text = format!("{p:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A directive of a feature Keel does not have (a memory test after a
/// crash), accepted with Redis's default value only, so that a stock
/// redis.conf loads: that value asks for nothing Keel lacks. Any other
/// value is refused, saying why.
macro_rules! inert {
    ($name:literal, $default:literal) => {
        Directive {
            name: $name,
            mutable: true,
            get: |_| $default.into(),
            set: |_, a| {
                let given = one(a)?;
                // A value of the wrong kind gets Redis's own error first.
                if matches!($default, "yes" | "no") {
                    parse_bool(given)?;
                }
                if is_default_value(given, $default) {
                    Ok(())
                } else {
                    Err(ConfigError::Invalid(format!(
                        "Keel does not have the feature '{}' configures yet; only its default '{}' is accepted",
                        $name, $default
                    )))
                }
            },
        }
    };
}


pub static DIRECTIVES: &[Directive] = &[
    Directive {
        name: "bind",
        mutable: true,
        get: |c| c.bind.join(" "),
        set: |c, a| {
            if a.len() > BIND_ADDRESSES_MAX {
                return Err(ConfigError::Invalid("Too many bind addresses specified.".into()));
            }
            // A single empty argument is no address (no TCP listener).
            let a = if a == [""] { &[][..] } else { a };
            c.bind = a.iter().map(|s| s.to_string()).collect();
            Ok(())
        },
    },
    directive!("port", true, num(0, 65535), port),
    Directive {
        name: "bind-source-addr",
        mutable: true,
        get: |c| c.bind_source_addr.clone().unwrap_or_default(),
        set: |c, a| {
            c.bind_source_addr = Some(one(a)?.to_string()).filter(|v| !v.is_empty());
            Ok(())
        },
    },
    directive!("memcached-port", true, num(0, 65535), memcached_port),
    directive!("memcached-max-item-size", true, memory(0, usize::MAX), memcached_max_item_size),
    directive!("metrics-port", true, num(0, 65535), metrics_port),
    Directive {
        name: "unixsocket",
        mutable: false,
        get: |c| c.unixsocket.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        set: |c, a| {
            let v = one(a)?;
            c.unixsocket = (!v.is_empty()).then(|| PathBuf::from(v));
            Ok(())
        },
    },
    Directive {
        name: "unixsocketperm",
        mutable: false,
        get: |c| format!("{:o}", c.unixsocketperm),
        set: |c, a| {
            c.unixsocketperm = u32::from_str_radix(one(a)?, 8)
                .map_err(|_| ConfigError::Invalid("argument couldn't be parsed into an integer".into()))?;
            Ok(())
        },
    },
    directive!("threads", false, num(0, 1024), threads),
    directive!("databases", false, num(1, 1 << 20), databases),
    directive!("protected-mode", true, bool, protected_mode),
    Directive {
        name: "notify-keyspace-events",
        mutable: true,
        get: |c| crate::notify::format(c.notify_keyspace_events),
        set: |c, a| {
            c.notify_keyspace_events = crate::notify::parse(one(a)?).map_err(ConfigError::Invalid)?;
            Ok(())
        },
    },
    Directive {
        name: "client-output-buffer-limit",
        mutable: true,
        get: |c| {
            let class = |(name, l): (&&str, &OutputLimit)| format!("{name} {} {} {}", l.hard, l.soft, l.soft_seconds);
            OUTPUT_LIMIT_CLASSES.iter().zip(&c.output_limits).map(class).collect::<Vec<_>>().join(" ")
        },
        set: |c, a| {
            // `<class> <hard> <soft> <soft seconds>`, any number of times,
            // checked whole before any is taken (Redis's wording).
            if !a.len().is_multiple_of(4) {
                return Err(ConfigError::Invalid("Wrong number of arguments in buffer limit configuration.".into()));
            }
            let mut limits = c.output_limits;
            for class in a.chunks(4) {
                let index = match class[0].to_ascii_lowercase().as_str() {
                    "normal" => 0,
                    "slave" | "replica" => 1,
                    "pubsub" => 2,
                    _ => {
                        return Err(ConfigError::Invalid(
                            "Invalid client class specified in buffer limit configuration.".into(),
                        ))
                    }
                };
                let bad = || {
                    ConfigError::Invalid("Error in hard, soft or soft_seconds setting in buffer limit configuration.".into())
                };
                limits[index] = OutputLimit {
                    hard: parse_memory(class[1]).map_err(|_| bad())?,
                    soft: parse_memory(class[2]).map_err(|_| bad())?,
                    soft_seconds: class[3].parse().map_err(|_| bad())?,
                };
            }
            c.output_limits = limits;
            Ok(())
        },
    },
    Directive {
        name: "requirepass",
        mutable: true,
        get: |c| c.requirepass.as_deref().map(|p| String::from_utf8_lossy(p).into_owned()).unwrap_or_default(),
        set: |c, a| {
            let v = one(a)?;
            c.requirepass = (!v.is_empty()).then(|| v.as_bytes().to_vec());
            Ok(())
        },
    },
    directive!("maxclients", true, num(1, u32::MAX as usize), maxclients),
    directive!("timeout", true, num(0, i32::MAX as u64), timeout_s),
    directive!("tcp-keepalive", true, num(0, i32::MAX as u64), tcp_keepalive_s),
    directive!("tcp-backlog", false, num(0, i32::MAX), tcp_backlog),
    directive!("proto-max-bulk-len", true, memory(1 << 20, i64::MAX as _), proto_max_bulk_len),
    directive!("client-query-buffer-limit", true, memory(1 << 20, i64::MAX as _), client_query_buffer_limit),
    directive!("dynamic-hz", true, bool, dynamic_hz),
    directive!("slowlog-log-slower-than", true, num(-1, i64::MAX), slowlog_log_slower_than),
    directive!("slowlog-max-len", true, num(0, i64::MAX as usize), slowlog_max_len),
    directive!("latency-tracking", true, bool, latency_tracking),
    directive!("tracking-table-max-keys", true, num(0, i64::MAX as u64), tracking_table_max_keys),
    Directive {
        name: "latency-tracking-info-percentiles",
        mutable: true,
        get: |c| c.latency_tracking_info_percentiles.iter().map(|p| format_percentile(*p)).collect::<Vec<_>>().join(" "),
        set: |c, a| {
            let mut percentiles = Vec::with_capacity(a.len());
            // Redis's two errors, word for word.
            for word in a {
                let p = word.parse::<f64>().map_err(|_| ConfigError::Invalid("Invalid latency-tracking-info-percentiles parameters".into()))?;
                if !(0.0..=100.0).contains(&p) {
                    return Err(ConfigError::Invalid("latency-tracking-info-percentiles parameters should sit between [0.0,100.0]".into()));
                }
                percentiles.push(p);
            }
            c.latency_tracking_info_percentiles = percentiles;
            Ok(())
        },
    },
    directive!("busy-reply-threshold", true, num(0, i64::MAX), busy_reply_threshold),
    Directive {
        name: "watchdog-period",
        mutable: true,
        get: |c| c.watchdog_period.to_string(),
        set: |c, a| {
            let period = parse_num(one(a)?, 0, i64::from(i32::MAX))?;
            // Redis's applyWatchdogPeriod raises it to two cron periods.
            c.watchdog_period = crate::watchdog::Watchdog::effective_period(period, c.hz);
            Ok(())
        },
    },
    directive!("lua-time-limit", true, num(0, i64::MAX), busy_reply_threshold),
    directive!("activerehashing", true, bool, activerehashing),
    directive!("lfu-log-factor", true, num(0, i32::MAX as u32), lfu_log_factor),
    directive!("lfu-decay-time", true, num(0, i32::MAX as u32), lfu_decay_time),
    directive!("min-replicas-to-write", true, num(0, i32::MAX as u32), min_replicas_to_write),
    directive!("min-slaves-to-write", true, num(0, i32::MAX as u32), min_replicas_to_write),
    directive!("min-replicas-max-lag", true, num(0, i32::MAX as u32), min_replicas_max_lag),
    directive!("min-slaves-max-lag", true, num(0, i32::MAX as u32), min_replicas_max_lag),
    directive!("repl-backlog-size", true, memory(1, i64::MAX as _), repl_backlog_size),
    directive!("repl-backlog-ttl", true, num(0, i64::MAX as u64), repl_backlog_ttl),
    directive!("repl-disable-tcp-nodelay", true, bool, repl_disable_tcp_nodelay),
    directive!("replica-lazy-flush", true, bool, replica_lazy_flush),
    directive!("slave-lazy-flush", true, bool, replica_lazy_flush),
    directive!("repl-diskless-sync", true, bool, repl_diskless_sync),
    directive!("repl-diskless-load", true, enum ["disabled", "on-empty-db", "swapdb"], repl_diskless_load),
    directive!("propagation-error-behavior", true, enum ["ignore", "panic", "panic-on-replicas"], propagation_error_behavior),
    directive!("repl-diskless-sync-delay", true, num(0, i32::MAX as u64), repl_diskless_sync_delay_s),
    directive!("repl-diskless-sync-max-replicas", true, num(0, i32::MAX as u64), repl_diskless_sync_max_replicas),
    directive!("repl-ping-replica-period", true, num(1, i32::MAX as u64), repl_ping_replica_period),
    directive!("repl-ping-slave-period", true, num(1, i32::MAX as u64), repl_ping_replica_period),
    directive!("repl-timeout", true, num(1, i32::MAX as u64), repl_timeout_s),
    Directive {
        name: "dir",
        mutable: true,
        get: |c| std::fs::canonicalize(&c.dir).unwrap_or_else(|_| c.dir.clone()).display().to_string(),
        set: |c, a| {
            let dir = Path::new(one(a)?);
            if !dir.is_dir() {
                return Err(ConfigError::Invalid(format!("No such file or directory: {}", dir.display())));
            }
            // Absolute: the server works in it (`main`, CONFIG SET), and
            // paths under it must not depend on where it started.
            c.dir = std::fs::canonicalize(dir).map_err(|e| ConfigError::Invalid(e.to_string()))?;
            Ok(())
        },
    },
    Directive {
        name: "dbfilename",
        mutable: true,
        get: |c| c.dbfilename.clone(),
        set: |c, a| {
            let name = one(a)?;
            if name.contains('/') {
                return Err(ConfigError::Invalid("dbfilename can't be a path, just a filename".into()));
            }
            c.dbfilename = name.into();
            Ok(())
        },
    },
    directive!("rdbcompression", true, bool, rdbcompression),
    directive!("rdbchecksum", false, bool, rdbchecksum),
    directive!("rdb-save-incremental-fsync", true, bool, rdb_save_incremental_fsync),
    directive!("aof-rewrite-incremental-fsync", true, bool, aof_rewrite_incremental_fsync),
    // Switched at run time by `durability::apply_config` (CONFIG SET).
    directive!("appendonly", true, bool, appendonly),
    directive!("aof-load-truncated", true, bool, aof_load_truncated),
    directive!("aof-use-rdb-preamble", true, bool, aof_use_rdb_preamble),
    directive!("aof-timestamp-enabled", true, bool, aof_timestamp_enabled),
    directive!("aof-disable-auto-gc", true, bool, aof_disable_auto_gc),
    directive!("no-appendfsync-on-rewrite", true, bool, no_appendfsync_on_rewrite),
    Directive {
        name: "appendfsync",
        mutable: true,
        get: |c| {
            match c.appendfsync {
                AppendFsync::Always => "always",
                AppendFsync::EverySec => "everysec",
                AppendFsync::No => "no",
            }
            .into()
        },
        set: |c, a| {
            c.appendfsync = match one(a)?.to_ascii_lowercase().as_str() {
                "always" => AppendFsync::Always,
                "everysec" => AppendFsync::EverySec,
                "no" => AppendFsync::No,
                _ => {
                    return Err(ConfigError::Invalid(
                        "argument(s) must be one of the following: everysec, always, no".into(),
                    ))
                }
            };
            Ok(())
        },
    },
    directive!("appendfilename", false, string, appendfilename),
    directive!("appenddirname", false, string, appenddirname),
    directive!("auto-aof-rewrite-percentage", true, num(0, i32::MAX as u64), auto_aof_rewrite_percentage),
    directive!("auto-aof-rewrite-min-size", true, memory(0, i64::MAX as _), auto_aof_rewrite_min_size),
    directive!("keel-aof-max-recovery-seconds", true, num(0, i32::MAX as u64), keel_aof_max_recovery_seconds),
    directive!("keel-aof-max-disk-bytes", true, memory(0, u64::MAX), keel_aof_max_disk_bytes),
    directive!("keel-aof-space-ahead", true, memory(0, u64::MAX), keel_aof_space_ahead),
    directive!("keel-aof-sync-gap-us", true, num(0, 10_000), keel_aof_sync_gap_us),
    directive!("keel-aof-writer-batch-class", true, bool, keel_aof_writer_batch_class),
    directive!("keel-aof-replay-rate", true, memory(0, u64::MAX), keel_aof_replay_rate),
    directive!("keel-aof-rdb-load-rate", true, memory(0, u64::MAX), keel_aof_rdb_load_rate),
    Directive {
        name: "save",
        mutable: true,
        get: |c| c.save.iter().map(|r| format!("{} {}", r.seconds, r.changes)).collect::<Vec<_>>().join(" "),
        set: |c, a| {
            c.save = parse_save_rules(a)?;
            Ok(())
        },
    },
    directive!("stop-writes-on-bgsave-error", true, bool, stop_writes_on_bgsave_error),
    directive!("rdb-key-save-delay", true, num(i32::MIN as i64, i32::MAX as i64), rdb_key_save_delay_us),
    directive!("key-load-delay", true, num(i32::MIN as i64, i32::MAX as i64), key_load_delay_us),
    directive!("loading-process-events-interval-bytes", true, num(1024, i32::MAX as u64), loading_process_events_interval_bytes),
    // Applied at run time by `process::apply_loglevel` (CONFIG SET).
    directive!("loglevel", true, enum ["debug", "verbose", "notice", "warning", "nothing"], loglevel),
    directive!("logfile", false, string, logfile),
    directive!("pidfile", false, string, pidfile),
    directive!("daemonize", false, bool, daemonize),
    directive!("supervised", false, enum ["upstart", "systemd", "auto", "no"], supervised),
    directive!("syslog-enabled", false, bool, syslog_enabled),
    directive!("syslog-ident", false, string, syslog_ident),
    directive!(
        "syslog-facility",
        false,
        enum ["user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7"],
        syslog_facility
    ),
    directive!("always-show-logo", false, bool, always_show_logo),
    directive!("disable-thp", false, bool, disable_thp),
    directive!("jemalloc-bg-thread", true, bool, jemalloc_bg_thread),
    Directive {
        name: "oom-score-adj",
        mutable: true,
        get: |c| {
            match c.oom_score_adj {
                OomScoreAdj::No => "no",
                OomScoreAdj::Relative => "yes",
                OomScoreAdj::Absolute => "absolute",
            }
            .into()
        },
        set: |c, a| {
            c.oom_score_adj = match one(a)?.to_ascii_lowercase().as_str() {
                "no" => OomScoreAdj::No,
                "yes" | "relative" => OomScoreAdj::Relative,
                "absolute" => OomScoreAdj::Absolute,
                _ => {
                    return Err(ConfigError::Invalid(
                        "argument(s) must be one of the following: no, yes, relative, absolute".into(),
                    ))
                }
            };
            Ok(())
        },
    },
    Directive {
        name: "oom-score-adj-values",
        mutable: true,
        get: |c| c.oom_score_adj_values.map(|v| v.to_string()).join(" "),
        set: |c, a| {
            let values: [&str; 3] =
                a.try_into().map_err(|_| ConfigError::Invalid("wrong number of arguments".into()))?;
            let mut parsed = [0i32; 3];
            for (out, word) in parsed.iter_mut().zip(values) {
                *out = word.parse().ok().filter(|v| (-2000..=2000).contains(v)).ok_or_else(|| {
                    ConfigError::Invalid("Invalid oom-score-adj-values, elements must be between -2000 and 2000.".into())
                })?;
            }
            if parsed[1] < parsed[0] || parsed[2] < parsed[1] {
                tracing::warn!(
                    "The oom-score-adj-values configuration may not work for non-privileged processes! \
                     Please consult the documentation."
                );
            }
            c.oom_score_adj_values = parsed;
            Ok(())
        },
    },
    directive!("enable-debug-command", false, enum ["yes", "no", "local"], enable_debug_command),
    directive!("shutdown-timeout", true, num(0, i32::MAX as u32), shutdown_timeout),
    directive!("shutdown-on-sigint", true, shutdown_flags, shutdown_on_sigint),
    directive!("shutdown-on-sigterm", true, shutdown_flags, shutdown_on_sigterm),
    directive!("enable-module-command", false, enum ["yes", "no", "local"], enable_module_command),
    directive!("enable-protected-configs", false, enum ["yes", "no", "local"], enable_protected_configs),
    directive!("lazyfree-lazy-user-del", true, bool, lazyfree_lazy_user_del),
    directive!("lazyfree-lazy-user-flush", true, bool, lazyfree_lazy_user_flush),
    directive!("lazyfree-lazy-expire", true, bool, lazyfree_lazy_expire),
    directive!("lazyfree-lazy-server-del", true, bool, lazyfree_lazy_server_del),
    directive!("lazyfree-lazy-eviction", true, bool, lazyfree_lazy_eviction),
    directive!("rdb-del-sync-files", true, bool, rdb_del_sync_files),
    directive!("sanitize-dump-payload", true, enum ["no", "yes", "clients"], sanitize_dump_payload),
    directive!("use-exit-on-panic", true, bool, use_exit_on_panic),
    directive!("crash-log-enabled", true, bool, crash_log_enabled),
    // Keel runs no memory test when it crashes.
    inert!("crash-memcheck-enabled", "no"),
    directive!("ignore-warnings", true, string, ignore_warnings),
    directive!("io-threads", false, num(1, 128), io_threads),
    directive!("io-threads-do-reads", false, bool, io_threads_do_reads),
    directive!("socket-mark-id", false, num(0, u32::MAX), socket_mark_id),
    directive!("server_cpulist", false, optional_string, server_cpulist),
    directive!("bio_cpulist", false, optional_string, bio_cpulist),
    directive!("aof_rewrite_cpulist", false, optional_string, aof_rewrite_cpulist),
    directive!("bgsave_cpulist", false, optional_string, bgsave_cpulist),
    directive!("replica-ignore-disk-write-errors", true, bool, replica_ignore_disk_write_errors),
    Directive {
        name: "activedefrag",
        mutable: true,
        get: |_| yes_no(false),
        set: |_, a| match parse_bool(one(a)?)? {
            true => Err(ConfigError::Invalid(NO_DEFRAG.into())),
            false => Ok(()),
        },
    },
    directive!("active-defrag-ignore-bytes", true, memory(1, i64::MAX as u64), defrag.ignore_bytes),
    directive!("active-defrag-threshold-lower", true, num(0, 1000), defrag.threshold_lower),
    directive!("active-defrag-threshold-upper", true, num(0, 1000), defrag.threshold_upper),
    directive!("active-defrag-cycle-min", true, num(1, 99), defrag.cycle_min),
    directive!("active-defrag-cycle-max", true, num(1, 99), defrag.cycle_max),
    directive!("active-defrag-max-scan-fields", true, num(1, i64::MAX as u64), defrag.max_scan_fields),
    // Collection encodings, each under its Redis 7 name and the ziplist
    // name it replaced (Redis accepts both; CONFIG GET * lists both).
    directive!("hash-max-listpack-entries", true, num(0, i64::MAX as usize), encoding.hash_max_listpack_entries),
    directive!("hash-max-ziplist-entries", true, num(0, i64::MAX as usize), encoding.hash_max_listpack_entries),
    directive!("hash-max-listpack-value", true, memory(0, i64::MAX as usize), encoding.hash_max_listpack_value),
    directive!("hash-max-ziplist-value", true, memory(0, i64::MAX as usize), encoding.hash_max_listpack_value),
    directive!("set-max-intset-entries", true, num(0, i64::MAX as usize), encoding.set_max_intset_entries),
    directive!("zset-max-listpack-entries", true, num(0, i64::MAX as usize), encoding.zset_max_listpack_entries),
    directive!("zset-max-ziplist-entries", true, num(0, i64::MAX as usize), encoding.zset_max_listpack_entries),
    directive!("zset-max-listpack-value", true, memory(0, i64::MAX as usize), encoding.zset_max_listpack_value),
    directive!("zset-max-ziplist-value", true, memory(0, i64::MAX as usize), encoding.zset_max_listpack_value),
    directive!("list-max-listpack-size", true, num(i32::MIN as i64, i32::MAX as i64), encoding.list_max_listpack_size),
    directive!("list-max-ziplist-size", true, num(i32::MIN as i64, i32::MAX as i64), encoding.list_max_listpack_size),
    directive!("list-compress-depth", true, num(0, i32::MAX as usize), encoding.list_compress_depth),
    directive!("stream-node-max-bytes", true, memory(0, i64::MAX as _), encoding.stream_node.max_bytes),
    directive!("stream-node-max-entries", true, num(0, i64::MAX as usize), encoding.stream_node.max_entries),
    Directive {
        name: "hll-sparse-max-bytes",
        mutable: true,
        get: |c| c.hll_sparse_max_bytes.to_string(),
        set: |c, a| {
            // A memory value, up to LONG_MAX, as Redis's size_t config.
            let bytes = parse_memory(one(a)?)?;
            c.hll_sparse_max_bytes = usize::try_from(bytes).ok().filter(|&b| b <= i64::MAX as usize).ok_or_else(|| {
                ConfigError::Invalid(format!("argument must be between 0 and {} inclusive", i64::MAX))
            })?;
            Ok(())
        },
    },
    Directive {
        name: "maxmemory",
        mutable: true,
        get: |c| c.maxmemory.to_string(),
        set: |c, a| {
            c.maxmemory = parse_memory(one(a)?)?;
            Ok(())
        },
    },
    Directive {
        name: "maxmemory-clients",
        mutable: true,
        get: |c| c.maxmemory_clients.to_string(),
        set: |c, a| {
            c.maxmemory_clients = ClientsLimit::parse(one(a)?)?;
            Ok(())
        },
    },
    Directive {
        name: "maxmemory-policy",
        mutable: true,
        get: |c| c.maxmemory_policy.name().into(),
        set: |c, a| {
            c.maxmemory_policy = Policy::parse(one(a)?).ok_or_else(|| {
                let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
                ConfigError::Invalid(format!("argument(s) must be one of the following: {}", names.join(", ")))
            })?;
            Ok(())
        },
    },
    directive!("maxmemory-samples", true, num(1, i32::MAX as u32), maxmemory_samples),
    directive!("maxmemory-eviction-tenacity", true, num(0, 100), maxmemory_eviction_tenacity),
    directive!("replica-ignore-maxmemory", true, bool, replica_ignore_maxmemory),
    directive!("slave-ignore-maxmemory", true, bool, replica_ignore_maxmemory),
    // Replication, replica side (`replica.rs`).
    Directive { name: "hz", mutable: true, get: |c| c.hz.to_string(), set: set_hz },
    Directive { name: "replicaof", mutable: false, get: get_replicaof, set: set_replicaof },
    Directive { name: "slaveof", mutable: false, get: get_replicaof, set: set_replicaof },
    Directive {
        name: "masterauth",
        mutable: true,
        get: |c| c.masterauth.clone().unwrap_or_default(),
        set: |c, a| {
            c.masterauth = Some(one(a)?.to_string()).filter(|v| !v.is_empty());
            Ok(())
        },
    },
    Directive {
        name: "masteruser",
        mutable: true,
        get: |c| c.masteruser.clone().unwrap_or_default(),
        set: |c, a| {
            c.masteruser = Some(one(a)?.to_string()).filter(|v| !v.is_empty());
            Ok(())
        },
    },
    directive!("replica-read-only", true, bool, replica_read_only),
    directive!("slave-read-only", true, bool, replica_read_only),
    directive!("replica-serve-stale-data", true, bool, replica_serve_stale_data),
    directive!("slave-serve-stale-data", true, bool, replica_serve_stale_data),
    // Cluster mode (`crate::cluster`).
    directive!("cluster-enabled", false, bool, cluster.enabled),
    directive!("cluster-config-file", false, string, cluster.config_file),
    directive!("cluster-node-timeout", true, num(0, i64::MAX as u64), cluster.node_timeout),
    directive!("cluster-port", false, num(0, 65535), cluster.port),
    directive!("cluster-announce-ip", true, string, cluster.announce_ip),
    directive!("cluster-announce-port", true, num(0, 65535), cluster.announce_port),
    directive!("cluster-announce-bus-port", true, num(0, 65535), cluster.announce_bus_port),
    directive!("cluster-link-sendbuf-limit", true, memory(0, u64::MAX), cluster.link_sendbuf_limit),
    directive!("cluster-announce-tls-port", true, num(0, 65535), cluster.announce_tls_port),
    Directive {
        name: "cluster-announce-hostname",
        mutable: true,
        get: |c| c.cluster.announce_hostname.clone(),
        set: |c, a| {
            c.cluster.announce_hostname = valid_hostname(one(a)?)?.to_string();
            Ok(())
        },
    },
    directive!("cluster-preferred-endpoint-type", true, enum ["ip", "hostname", "unknown-endpoint"], cluster.preferred_endpoint),
    directive!("cluster-require-full-coverage", true, bool, cluster.require_full_coverage),
    directive!("cluster-allow-reads-when-down", true, bool, cluster.allow_reads_when_down),
    directive!("cluster-allow-pubsubshard-when-down", true, bool, cluster.allow_pubsubshard_when_down),
    directive!("cluster-replica-validity-factor", true, num(0, i32::MAX as u32), cluster.replica_validity_factor),
    directive!("cluster-slave-validity-factor", true, num(0, i32::MAX as u32), cluster.replica_validity_factor),
    directive!("cluster-migration-barrier", true, num(0, i32::MAX as u32), cluster.migration_barrier),
    directive!("cluster-allow-replica-migration", true, bool, cluster.allow_replica_migration),
    directive!("cluster-replica-no-failover", true, bool, cluster.replica_no_failover),
    directive!("cluster-slave-no-failover", true, bool, cluster.replica_no_failover),
    directive!("set-proc-title", false, bool, set_proc_title),
    Directive {
        name: "proc-title-template",
        mutable: true,
        get: |c| c.proc_title_template.clone(),
        set: |c, a| {
            let template = one(a)?;
            if !crate::proc_title::is_valid_template(template, c) {
                return Err(ConfigError::Invalid("template format is invalid or contains unknown variables".into()));
            }
            c.proc_title_template = template.into();
            Ok(())
        },
    },
    // TLS for clients and replication (`crate::tls`).
    directive!("tls-port", true, num(0, 65535), tls.port),
    directive!("tls-cert-file", true, optional_string, tls.cert_file),
    directive!("tls-key-file", true, optional_string, tls.key_file),
    directive!("tls-key-file-pass", true, optional_string, tls.key_file_pass),
    directive!("tls-ca-cert-file", true, optional_string, tls.ca_cert_file),
    directive!("tls-ca-cert-dir", true, optional_string, tls.ca_cert_dir),
    directive!("tls-auth-clients", true, enum ["no", "yes", "optional"], tls.auth_clients),
    directive!("tls-protocols", true, optional_string, tls.protocols),
    directive!("tls-prefer-server-ciphers", true, bool, tls.prefer_server_ciphers),
    directive!("tls-session-caching", true, bool, tls.session_caching),
    directive!("tls-session-cache-size", true, num(0, i32::MAX as u32), tls.session_cache_size),
    directive!("tls-session-cache-timeout", true, num(0, i32::MAX as u32), tls.session_cache_timeout),
    directive!("tls-client-cert-file", true, optional_string, tls.client_cert_file),
    directive!("tls-client-key-file", true, optional_string, tls.client_key_file),
    directive!("tls-client-key-file-pass", true, optional_string, tls.client_key_file_pass),
    directive!("tls-replication", true, bool, tls.replication),
    directive!("tls-cluster", true, bool, tls.cluster),
    directive!("tls-dh-params-file", true, optional_string, tls.dh_params_file),
    directive!("tls-ciphers", true, optional_string, tls.ciphers),
    directive!("tls-ciphersuites", true, optional_string, tls.ciphersuites),
    directive!("replica-priority", true, num(0, i32::MAX as u32), replica_priority),
    directive!("slave-priority", true, num(0, i32::MAX as u32), replica_priority),
    directive!("replica-announced", true, bool, replica_announced),
    directive!("active-expire-effort", true, num(1, 10), active_expire_effort),
    directive!("replica-announce-ip", true, optional_string, replica_announce_ip),
    directive!("slave-announce-ip", true, optional_string, replica_announce_ip),
    directive!("replica-announce-port", true, num(0, 65535), replica_announce_port),
    directive!("slave-announce-port", true, num(0, 65535), replica_announce_port),
    directive!("acllog-max-len", true, num(0, i64::MAX as u64), acllog_max_len),
    directive!("aclfile", false, string, aclfile),
    directive!("acl-pubsub-default", true, enum ["allchannels", "resetchannels"], acl_pubsub_default),
    directive!("latency-monitor-threshold", true, num(0, i64::MAX as u64), latency_monitor_threshold),
];

/// Redis's isValidAnnouncedHostname: what other nodes are told must
/// parse back as one word of a nodes.conf line.
fn valid_hostname(name: &str) -> Result<&str, ConfigError> {
    if name.len() >= 256 {
        return Err(ConfigError::Invalid("Hostnames must be less than 256 characters".into()));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.') {
        return Err(ConfigError::Invalid("Hostnames may only contain alphanumeric characters, hyphens or dots".into()));
    }
    Ok(name)
}

/// `hz`: any int is accepted and kept within 1..=500, as Redis's
/// updateHZ clamps it (CONFIG GET then shows the clamped value).
fn set_hz(c: &mut Config, args: &[&str]) -> Result<(), ConfigError> {
    let hz: i32 = parse_num(one(args)?, 0, i32::MAX)?;
    c.hz = hz.clamp(1, 500) as u32;
    Ok(())
}

/// `replicaof` as Redis's CONFIG GET shows it: `host port`, or empty.
fn get_replicaof(c: &Config) -> String {
    c.replicaof.as_ref().map(|(host, port)| format!("{host} {port}")).unwrap_or_default()
}

/// `replicaof <host> <port>` or `replicaof no one`, as Redis's
/// `setConfigReplicaOfOption`.
fn set_replicaof(c: &mut Config, args: &[&str]) -> Result<(), ConfigError> {
    let [host, port] = args[..] else {
        return Err(ConfigError::Invalid("wrong number of arguments".into()));
    };
    if host.eq_ignore_ascii_case("no") && port.eq_ignore_ascii_case("one") {
        c.replicaof = None;
        return Ok(());
    }
    let port: u16 = port.parse().map_err(|_| ConfigError::Invalid("Invalid master port".into()))?;
    c.replicaof = Some((host.to_string(), port));
    Ok(())
}

/// Whether a value given for an [`inert!`] directive is its default, as
/// Redis would compare it: words without case, numbers by value.
fn is_default_value(given: &str, default: &str) -> bool {
    given.eq_ignore_ascii_case(default)
        || matches!((given.parse::<i64>(), default.parse::<i64>()), (Ok(a), Ok(b)) if a == b)
}

/// Redis's `MULTI_ARG_CONFIG`s: their single non-empty argument in a file
/// or on the command line is split as Redis's `sdssplitargs` splits it,
/// and a CONFIG SET value on its spaces, so that each setter gets the
/// words.
const MULTI_ARG: [&str; 9] = [
    "save",
    "client-output-buffer-limit",
    "oom-score-adj-values",
    "bind",
    "replicaof",
    "slaveof",
    "latency-tracking-info-percentiles",
    "shutdown-on-sigint",
    "shutdown-on-sigterm",
];

/// Redis's `HIDDEN_CONFIG`s (test knobs): CONFIG GET shows them only when
/// asked by name, never for a pattern.
const HIDDEN: [&str; 4] = ["rdb-key-save-delay", "key-load-delay", "loading-process-events-interval-bytes", "watchdog-period"];

/// Redis's `DENY_LOADING_CONFIG`s (of those Keel has): CONFIG SET refuses
/// them with -LOADING while a load is under way.
pub const DENIED_WHILE_LOADING: [&str; 2] = ["appendonly", "dir"];

/// Redis's `PROTECTED_CONFIG`s: where the server writes its files, which
/// CONFIG SET changes only as `enable-protected-configs` allows (a client
/// that could point them anywhere could write a file anywhere).
pub const PROTECTED: [&str; 2] = ["dir", "dbfilename"];

/// Redis 7.0's old names of directives (`ALIAS_CONFIG`), with the name
/// each stands for: CONFIG REWRITE writes the latter only.
const ALIASES: [(&str, &str); 19] = [
    ("slaveof", "replicaof"),
    ("lua-time-limit", "busy-reply-threshold"),
    ("slave-lazy-flush", "replica-lazy-flush"),
    ("slave-serve-stale-data", "replica-serve-stale-data"),
    ("slave-read-only", "replica-read-only"),
    ("slave-ignore-maxmemory", "replica-ignore-maxmemory"),
    ("slave-announce-ip", "replica-announce-ip"),
    ("slave-announce-port", "replica-announce-port"),
    ("slave-priority", "replica-priority"),
    ("cluster-slave-no-failover", "cluster-replica-no-failover"),
    ("cluster-slave-validity-factor", "cluster-replica-validity-factor"),
    ("list-max-ziplist-size", "list-max-listpack-size"),
    ("repl-ping-slave-period", "repl-ping-replica-period"),
    ("min-slaves-to-write", "min-replicas-to-write"),
    ("min-slaves-max-lag", "min-replicas-max-lag"),
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
];

/// The directive `name` stands for: itself, or the one it is an old name of.
fn canonical(name: &str) -> Option<&'static Directive> {
    let name = ALIASES.iter().find(|(alias, _)| alias.eq_ignore_ascii_case(name)).map_or(name, |(_, canonical)| canonical);
    find(name)
}

pub fn find(name: &str) -> Option<&'static Directive> {
    DIRECTIVES.iter().find(|d| d.name.eq_ignore_ascii_case(name))
}

impl Config {
    /// The cron's frequency with `clients` connected: `hz`, doubled under
    /// `dynamic-hz` while there are more than 200 clients per tick, up to
    /// 500 (Redis's serverCron rule, which keeps per-tick client work
    /// bounded).
    pub fn effective_hz(&self, clients: usize) -> u32 {
        let mut hz = self.hz.max(1);
        if self.dynamic_hz {
            while clients / hz as usize > 200 {
                hz *= 2;
                if hz > 500 {
                    hz = 500;
                    break;
                }
            }
        }
        hz
    }

    /// Applies one directive at start-up (immutable ones allowed).
    pub fn apply(&mut self, name: &str, args: &[&str]) -> Result<(), ConfigError> {
        let d = find(name).ok_or(ConfigError::Unknown)?;
        if d.name != "save" {
            return (d.set)(self, args);
        }
        // The first `save` line replaces the defaults; later ones add rules
        // (several `save` lines in a file), and `save ""` clears them all.
        let before = std::mem::take(&mut self.save);
        (d.set)(self, args)?;
        if self.save_given_at_start && !self.save.is_empty() {
            let added = std::mem::replace(&mut self.save, before);
            self.save.extend(added);
        }
        self.save_given_at_start = true;
        Ok(())
    }

    /// CONFIG SET: only mutable directives; all-or-nothing is the caller's.
    pub fn set_at_runtime(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        let d = find(name).ok_or(ConfigError::Unknown)?;
        if !d.mutable {
            return Err(ConfigError::Immutable);
        }
        // Redis splits a multi-argument setting's value on spaces.
        let args: Vec<&str> = if MULTI_ARG.contains(&d.name) {
            value.split(' ').filter(|a| !a.is_empty()).collect()
        } else {
            vec![value]
        };
        (d.set)(self, &args)
    }

    pub fn get(&self, name: &str) -> Option<String> {
        find(name).map(|d| (d.get)(self))
    }

    /// Directives whose names match a glob pattern (CONFIG GET).
    pub fn matching<'a>(&'a self, pattern: &'a [u8]) -> impl Iterator<Item = (&'static str, String)> + 'a {
        DIRECTIVES
            .iter()
            .filter(|d| !HIDDEN.contains(&d.name))
            .filter(move |d| crate::glob::matches(pattern, d.name.as_bytes(), true))
            .map(move |d| (d.name, (d.get)(self)))
    }

    /// Reads a redis.conf-style file, then `--directive value ...` flags,
    /// as redis-server does: flags become lines appended to the file.
    pub fn load(args: &[String]) -> Result<Config, StartupConfigError> {
        let mut config = Config::default();
        let mut rest = args;
        if let Some(first) = args.first().filter(|a| !a.starts_with("--")) {
            let text = std::fs::read_to_string(first).map_err(|e| StartupConfigError {
                origin: first.clone(),
                line: String::new(),
                reason: ConfigError::Invalid(format!("Fatal error, can't open config file '{first}': {e}")),
            })?;
            config.apply_file_text(first, &text)?;
            rest = &args[1..];
            let path = PathBuf::from(first);
            config.config_file = Some(std::fs::canonicalize(&path).unwrap_or(path));
        }
        let mut line = String::new();
        let flush = |line: &mut String, config: &mut Config| -> Result<(), StartupConfigError> {
            if line.is_empty() {
                return Ok(());
            }
            let taken = std::mem::take(line);
            config.apply_line(&taken).map_err(|reason| StartupConfigError {
                origin: "command line".into(),
                line: taken,
                reason,
            })
        };
        // As Redis's: a `--name` alone takes the next argument as its value
        // even when that one starts with `--` too (`--port --bla` sets port
        // to "--bla"), but for `--save`, which then means `--save ""`.
        let mut wants_value = false;
        for (i, arg) in rest.iter().enumerate() {
            let name = arg.strip_prefix("--").filter(|_| !wants_value);
            if let Some(name) = name {
                flush(&mut line, &mut config)?;
                line.push_str(name);
                wants_value = !name.contains(' ');
                let next_is_a_name = rest.get(i + 1).is_none_or(|next| next.starts_with("--"));
                if wants_value && name.eq_ignore_ascii_case("save") && next_is_a_name {
                    line.push_str(" \"\"");
                    wants_value = false;
                }
            } else {
                // A word of the line (with no `--name` before it, the
                // directive's name itself, as Redis reads `loglevel verbose`).
                wants_value = false;
                if !line.is_empty() {
                    line.push(' ');
                }
                line.push_str(&keel_protocol::repr(arg.as_bytes()));
            }
        }
        flush(&mut line, &mut config)?;
        // Redis's sanity check after reading: a cluster node's master is
        // chosen by the cluster (CLUSTER REPLICATE), never by a directive.
        if config.cluster.enabled {
            if let Some((host, port)) = &config.replicaof {
                return Err(StartupConfigError {
                    origin: "configuration".into(),
                    line: format!("replicaof {host} {port}"),
                    reason: ConfigError::Invalid("replicaof directive not allowed in cluster mode".into()),
                });
            }
        }
        Ok(config)
    }

    /// Applies the lines of a configuration file, `file` naming it in an
    /// error.
    pub fn apply_file_text(&mut self, file: &str, text: &str) -> Result<(), StartupConfigError> {
        for (n, line) in text.lines().enumerate() {
            self.apply_line(line).map_err(|reason| StartupConfigError {
                origin: format!("'{file}' line {}", n + 1),
                line: line.into(),
                reason,
            })?;
        }
        Ok(())
    }

    fn apply_line(&mut self, line: &str) -> Result<(), ConfigError> {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            return Ok(());
        }
        let words = split_config_line(line).ok_or_else(|| ConfigError::Invalid("Unbalanced quotes in configuration line".into()))?;
        let Some((name, args)) = words.split_first() else {
            return Ok(());
        };
        // `user` lines add up (Redis's ACLAppendUserForLoading); the
        // rules are checked when the users are made, at start.
        if name.eq_ignore_ascii_case("user") && !args.is_empty() {
            self.users.push(args.to_vec());
            return Ok(());
        }
        // `rename-command` lines rename in turn (Redis's
        // loadServerConfigFromString); CONFIG never sees them.
        if let ("rename-command", [from, to]) = (name.to_ascii_lowercase().as_str(), args) {
            let mut renames = self.renamed_commands.clone();
            renames.push((from.clone(), to.clone()));
            crate::command::Renamed::new(&renames).map_err(|why| ConfigError::Invalid(why.into()))?;
            self.renamed_commands = renames;
            return Ok(());
        }
        // Redis's multi-argument directives take their values in one
        // argument too (`--bind "127.0.0.1 ::1"`, a quoted list in a file).
        let split = match args {
            [one] if !one.is_empty() && MULTI_ARG.iter().any(|m| m.eq_ignore_ascii_case(name)) => split_config_line(one),
            _ => None,
        };
        let args: Vec<&str> = split.as_deref().unwrap_or(args).iter().map(String::as_str).collect();
        // A directive named on a line with no value means "empty" for
        // strings (e.g. `--save ''` arrives as `save ""`).
        self.apply(name, &args)
    }

    /// CONFIG REWRITE: the directives that differ from the defaults (all
    /// with `every_directive`, DEBUG CONFIG-REWRITE-FORCE-ALL), and
    /// `dir`, in the file's own order where it has them (an old name's
    /// line under the name it stands for), each line as Redis writes it
    /// ([`rewritten_lines`]); with `users`, those `user` lines in place
    /// of the file's (the rest at the end). As Redis's, it writes no
    /// `replicaof` for a master or a cluster node (whose master is in
    /// nodes.conf, and which refuses the directive at start).
    pub fn rewrite(&self, path: &Path, users: Option<&[String]>, every_directive: bool) -> std::io::Result<()> {
        let defaults = Config::default();
        let dropped = |d: &Directive| d.name == "replicaof" && (self.cluster.enabled || self.replicaof.is_none());
        let old = std::fs::read_to_string(path).unwrap_or_default();
        let mut out = String::new();
        let mut written = std::collections::HashSet::new();
        let mut users = users.map(|u| u.iter());
        for line in old.lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if let Some(users) = users.as_mut().filter(|_| name.eq_ignore_ascii_case("user")) {
                if let Some(user) = users.next() {
                    let _ = writeln!(out, "{user}");
                }
                continue;
            }
            match canonical(name) {
                Some(d) if !line.trim_start().starts_with('#') => {
                    if written.insert(d.name) && !dropped(d) {
                        if let Some(lines) = rewritten_lines(d.name, &(d.get)(self), None) {
                            let _ = writeln!(out, "{lines}");
                        }
                    }
                }
                _ => {
                    let _ = writeln!(out, "{line}");
                }
            }
        }
        for d in DIRECTIVES.iter().filter(|d| !ALIASES.iter().any(|(alias, _)| *alias == d.name) && !dropped(d)) {
            // `dir` always, as Redis's, which writes its working directory.
            let (value, default) = ((d.get)(self), (d.get)(&defaults));
            if !written.contains(d.name) && (every_directive || value != default || d.name == "dir") {
                let unless = (!every_directive).then_some(default.as_str());
                if let Some(lines) = rewritten_lines(d.name, &value, unless) {
                    let _ = writeln!(out, "{lines}");
                }
            }
        }
        for user in users.into_iter().flatten() {
            let _ = writeln!(out, "{user}");
        }
        let tmp = path.with_extension("tmp-rewrite");
        std::fs::write(&tmp, out)?;
        std::fs::rename(tmp, path)
    }
}

/// Redis's string settings (and `dir`), whose values its CONFIG REWRITE
/// always quotes with `sdscatrepr`.
const QUOTED_ALWAYS: &[&str] = &[
    "dir", "aclfile", "unixsocket", "pidfile", "replica-announce-ip", "masteruser", "cluster-announce-ip",
    "cluster-config-file", "cluster-announce-hostname", "syslog-ident", "dbfilename", "appendfilename",
    "appenddirname", "server_cpulist", "bio_cpulist", "aof_rewrite_cpulist", "bgsave_cpulist",
    "ignore-warnings", "proc-title-template", "bind-source-addr", "logfile", "masterauth", "requirepass",
    "tls-cert-file", "tls-key-file", "tls-key-file-pass", "tls-client-cert-file", "tls-client-key-file",
    "tls-client-key-file-pass", "tls-dh-params-file", "tls-ca-cert-file", "tls-ca-cert-dir", "tls-protocols",
    "tls-ciphers", "tls-ciphersuites",
];

/// Those of [`QUOTED_ALWAYS`] whose empty value means unset (Redis's
/// `EMPTY_STRING_IS_NULL`): CONFIG REWRITE leaves them out of the file.
const EMPTY_IS_UNSET: &[&str] = &[
    "unixsocket", "pidfile", "replica-announce-ip", "masteruser", "cluster-announce-ip", "cluster-announce-hostname",
    "server_cpulist", "bio_cpulist", "aof_rewrite_cpulist", "bgsave_cpulist", "bind-source-addr", "masterauth",
    "requirepass", "tls-cert-file", "tls-key-file", "tls-key-file-pass", "tls-client-cert-file",
    "tls-client-key-file", "tls-client-key-file-pass", "tls-dh-params-file", "tls-ca-cert-file",
    "tls-ca-cert-dir", "tls-protocols", "tls-ciphers", "tls-ciphersuites",
];

/// Redis's `MEMORY_CONFIG`s, which its CONFIG REWRITE writes in the
/// largest of gb, mb and kb that divides them.
const IN_MEMORY_UNITS: &[&str] = &[
    "proto-max-bulk-len", "repl-backlog-size", "maxmemory", "cluster-link-sendbuf-limit", "active-defrag-ignore-bytes",
    "hash-max-listpack-value", "stream-node-max-bytes", "zset-max-listpack-value", "hll-sparse-max-bytes",
    "client-query-buffer-limit", "maxmemory-clients", "auto-aof-rewrite-min-size",
];

/// The lines CONFIG REWRITE writes for directive `name` at `value`, as
/// Redis's: a string setting quoted, a list as its words, a size in
/// Redis's units, each `client-output-buffer-limit` class on a line of
/// its own (with `unless_default`, only those that differ from it, as
/// Redis appends no line for a class at its default); None where Redis
/// writes none: an unset string setting, `bind` at its default.
fn rewritten_lines(name: &str, value: &str, unless_default: Option<&str>) -> Option<String> {
    let word = |w: &str| match keel_protocol::needs_repr(w.as_bytes()) {
        true => keel_protocol::repr(w.as_bytes()),
        false => w.to_string(),
    };
    let bytes = |v: &str| v.parse::<u64>().map_or_else(|_| v.to_string(), format_memory);
    if value.is_empty() && EMPTY_IS_UNSET.contains(&name) || name == "bind" && value == Config::default().bind.join(" ") {
        return None;
    }
    if name == "client-output-buffer-limit" {
        let default: Vec<&str> = unless_default.map(|d| d.split(' ').collect()).unwrap_or_default();
        let words: Vec<&str> = value.split(' ').collect();
        let lines: Vec<String> = (words.chunks(4).zip(default.chunks(4).map(Some).chain(std::iter::repeat(None))))
            .filter(|(class, default)| *default != Some(*class))
            .map(|(class, _)| {
                let class_name = if class[0] == "slave" { "replica" } else { class[0] };
                format!("{name} {class_name} {} {} {}", bytes(class[1]), bytes(class[2]), class[3])
            })
            .collect();
        return Some(lines.join("\n"));
    }
    // A list's words are joined by spaces in `value` (as CONFIG GET shows
    // them); each is quoted as it needs, so that a quote inside one reads
    // back as itself.
    let value = if MULTI_ARG.contains(&name) && !value.is_empty() {
        value.split(' ').filter(|w| !w.is_empty()).map(word).collect::<Vec<_>>().join(" ")
    } else if IN_MEMORY_UNITS.contains(&name) {
        bytes(value)
    } else if QUOTED_ALWAYS.contains(&name) {
        keel_protocol::repr(value.as_bytes())
    } else {
        word(value)
    };
    Some(format!("{name} {value}"))
}

/// Redis's `rewriteConfigFormatMemory`.
fn format_memory(bytes: u64) -> String {
    match bytes {
        0 => "0".into(),
        b if b.is_multiple_of(1 << 30) => format!("{}gb", b >> 30),
        b if b.is_multiple_of(1 << 20) => format!("{}mb", b >> 20),
        b if b.is_multiple_of(1 << 10) => format!("{}kb", b >> 10),
        b => b.to_string(),
    }
}

/// Splits a configuration line into words as Redis's `sdssplitargs`
/// does (`keel_protocol::split_args`); `None` on unbalanced quotes.
pub(crate) fn split_config_line(line: &str) -> Option<Vec<String>> {
    let words = keel_protocol::split_args(line.as_bytes())?;
    Some(words.iter().map(|w| String::from_utf8_lossy(w).into_owned()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    /// As Redis's MULTI_ARG_CONFIGs: one argument holding a list is split,
    /// an empty one is kept (`--save ''`), and other directives keep their
    /// spaces.
    #[test]
    fn a_list_in_one_argument_is_split_for_multi_argument_directives() {
        let c = Config::load(&args(&["--bind", "127.0.0.1 ::1", "--save", "3600 1 300 100", "--syslog-ident", "a b"])).expect("loads");
        assert_eq!(c.bind, ["127.0.0.1", "::1"]);
        assert_eq!(c.save.len(), 2);
        assert_eq!(c.syslog_ident, "a b");
        assert!(Config::load(&args(&["--save", ""])).expect("loads").save.is_empty());
    }

    /// Every old name is a directive of its own, for the one it names.
    #[test]
    fn each_alias_names_a_directive() {
        for (alias, name) in ALIASES {
            assert!(find(alias).is_some() && find(name).is_some(), "{alias} -> {name}");
        }
    }

    /// CONFIG REWRITE writes an old name's line under the name it stands
    /// for, adds no old name, and writes no `replicaof` on a cluster node
    /// (which would refuse it at its next start).
    #[test]
    fn a_rewrite_writes_current_names_and_no_replicaof_in_cluster_mode() {
        let dir = std::env::temp_dir().join(format!("keel-config-rewrite-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("keel.conf");
        std::fs::write(&path, "slave-read-only no\nslaveof 127.0.0.1 7000\n").expect("write");
        let mut c = Config::load(&args(&["--cluster-enabled", "yes", "--slave-priority", "7"])).expect("loads");
        c.replica_read_only = false;
        c.replicaof = Some(("127.0.0.1".into(), 7000));
        c.rewrite(&path, None, false).expect("rewrite");
        let text = std::fs::read_to_string(&path).expect("read");
        let _ = std::fs::remove_dir_all(&dir);
        assert!(text.starts_with("replica-read-only no\n"), "{text}");
        assert!(text.contains("\nreplica-priority 7\n"), "{text}");
        assert!(!text.contains("slave") && !text.contains("replicaof"), "{text}");
    }

    /// CONFIG REWRITE quotes a value where the file's reader would not
    /// read it back as it is: a quote anywhere, a backslash, a blank, a
    /// line end, a byte that is not ASCII.
    #[test]
    fn a_rewrite_reads_back_every_value_as_it_was() {
        let dir = std::env::temp_dir().join(format!("keel-config-quote-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("keel.conf");
        for value in ["it's", "say \"hi\"", "a\\b", "two\nlines\r\t", "caf\u{e9}", "'", "x y"] {
            let c = Config { masterauth: Some(value.into()), ..Config::default() };
            c.rewrite(&path, None, false).expect("rewrite");
            let read = Config::load(&args(&[path.to_str().expect("utf8")])).expect("reads back");
            assert_eq!(read.masterauth.as_deref(), Some(value), "{}", std::fs::read_to_string(&path).expect("read"));
        }
        // A list's words each quoted as they need (found by the
        // config_file fuzz target: a quote in one address lost them all).
        let bind: Vec<String> = ["a'b", "::1", "c\"d"].map(String::from).into();
        let c = Config { bind: bind.clone(), ..Config::default() };
        c.rewrite(&path, None, false).expect("rewrite");
        let read = Config::load(&args(&[path.to_str().expect("utf8")])).expect("reads back");
        assert_eq!(read.bind, bind, "{}", std::fs::read_to_string(&path).expect("read"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn flags_override_defaults() {
        let c = Config::load(&args(&["--port", "7000", "--appendonly", "no", "--save", ""])).expect("valid");
        assert_eq!(c.port, 7000);
        assert!(!c.appendonly);
        assert!(c.save.is_empty());
    }

    fn rules(pairs: &[(u64, u64)]) -> Vec<SaveRule> {
        pairs.iter().map(|&(seconds, changes)| SaveRule { seconds, changes }).collect()
    }

    #[test]
    fn save_rules_follow_redis() {
        let defaults = rules(&[(3600, 1), (300, 100), (60, 10_000)]);
        assert_eq!(Config::load(&[]).expect("valid").save, defaults);
        assert_eq!(Config::default().get("save").as_deref(), Some("3600 1 300 100 60 10000"));
        let c = Config::load(&args(&["--save", "10 2 20 3"])).expect("valid");
        assert_eq!(c.save, rules(&[(10, 2), (20, 3)]));
        // Several lines add up; `save ""` clears.
        let c = Config::load(&args(&["--save", "10", "2", "--save", "5 1"])).expect("valid");
        assert_eq!(c.save, rules(&[(10, 2), (5, 1)]));
        let c = Config::load(&args(&["--save", "10 2", "--save", ""])).expect("valid");
        assert!(c.save.is_empty());
        for bad in ["1", "0 1", "1 -1", "x 1", "1 2 3"] {
            let err = Config::load(&args(&["--save", bad])).expect_err(bad);
            assert!(err.to_string().contains("Invalid save parameters"), "{err}");
        }
        // CONFIG SET replaces.
        let mut c = Config::default();
        c.set_at_runtime("save", "100 5").expect("valid");
        assert_eq!(c.save, rules(&[(100, 5)]));
        c.set_at_runtime("save", "").expect("valid");
        assert!(c.save.is_empty());
        assert_eq!(c.set_at_runtime("save", "1 2 3"), Err(ConfigError::Invalid("Invalid save parameters".into())));
        assert!(c.set_at_runtime("dbfilename", "a/b.rdb").is_err());
    }

    #[test]
    fn bad_directives_fail_with_the_line_and_reason() {
        let err = Config::load(&args(&["--port", "99999"])).expect_err("out of range");
        assert!(err.to_string().contains("port \"99999\""), "{err}");
        assert!(err.to_string().contains("between 0 and 65535"), "{err}");
        let err = Config::load(&args(&["--no-such-thing", "1"])).expect_err("unknown");
        assert!(err.to_string().contains("Bad directive"), "{err}");
    }

    #[test]
    fn a_number_past_a_long_long_is_no_number_as_in_redis() {
        let mut c = Config::default();
        let err = c.set_at_runtime("hz", "99999999999999999999").expect_err("past i64");
        assert_eq!(err.to_string(), "argument couldn't be parsed into an integer");
        let err = c.set_at_runtime("hz", "9223372036854775807").expect_err("out of range");
        assert_eq!(err.to_string(), "argument must be between 0 and 2147483647 inclusive");
        // Within an int, hz is clamped to 1..=500, as Redis's updateHZ.
        for (value, kept) in [("1000", "500"), ("0", "1"), ("50", "50")] {
            c.set_at_runtime("hz", value).expect(value);
            assert_eq!(c.get("hz").as_deref(), Some(kept));
        }
    }

    #[test]
    fn a_cluster_node_refuses_a_replicaof_directive() {
        let err = Config::load(&args(&["--cluster-enabled", "yes", "--replicaof", "127.0.0.1", "6380"])).expect_err("refused");
        assert!(err.to_string().contains("replicaof directive not allowed in cluster mode"), "{err}");
        assert!(Config::load(&args(&["--replicaof", "127.0.0.1", "6380"])).is_ok());
    }

    #[test]
    fn directives_of_missing_features_take_their_defaults_only() {
        let c = Config::load(&args(&["--crash-memcheck-enabled", "NO", "--set-proc-title", "yes"])).expect("defaults");
        assert_eq!(c.get("replica-read-only").as_deref(), Some("yes"));
        let mut c = Config::default();
        c.set_at_runtime("slave-read-only", "YES").expect("slave-read-only");
        let err = c.set_at_runtime("crash-memcheck-enabled", "yes").expect_err("not the default");
        assert!(err.to_string().contains("only its default"), "{err}");
        let err = c.set_at_runtime("crash-memcheck-enabled", "1").expect_err("no boolean");
        assert!(err.to_string().contains("argument must be 'yes' or 'no'"), "{err}");
        let err = Config::load(&args(&["--crash-memcheck-enabled", "yes"])).expect_err("not the default");
        assert!(err.to_string().contains("crash-memcheck-enabled"), "{err}");
    }

    #[test]
    fn hll_sparse_max_bytes_is_a_memory_value_up_to_long_max() {
        let mut c = Config::default();
        assert_eq!(c.get("hll-sparse-max-bytes").as_deref(), Some("3000"));
        for (value, shown) in [("0", "0"), ("1kb", "1024"), ("9223372036854775807", "9223372036854775807")] {
            c.set_at_runtime("hll-sparse-max-bytes", value).expect(value);
            assert_eq!(c.get("hll-sparse-max-bytes").as_deref(), Some(shown));
            assert_eq!(c.hll_sparse_max_bytes.to_string(), shown);
        }
        let err = c.set_at_runtime("hll-sparse-max-bytes", "9223372036854775808").expect_err("past LONG_MAX");
        assert_eq!(err.to_string(), "argument must be between 0 and 9223372036854775807 inclusive");
        for bad in ["-1", "abc"] {
            let err = c.set_at_runtime("hll-sparse-max-bytes", bad).expect_err(bad);
            assert_eq!(err.to_string(), "argument must be a memory value");
        }
        let c = Config::load(&args(&["--hll-sparse-max-bytes", "100"])).expect("valid");
        assert_eq!(c.hll_sparse_max_bytes, 100);
    }

    #[test]
    fn maxmemory_clients_is_bytes_or_a_percent_of_maxmemory() {
        let mut c = Config::default();
        assert_eq!(c.get("maxmemory-clients").as_deref(), Some("0"));
        for (value, shown, limit) in [("1mb", "1048576", 1 << 20), ("7%", "7%", 440_401), ("0%", "0", 0), ("1", "1", 128 << 10)] {
            c.set_at_runtime("maxmemory-clients", value).expect(value);
            assert_eq!(c.get("maxmemory-clients").as_deref(), Some(shown));
            assert_eq!(c.maxmemory_clients.bytes(6 << 20), limit, "{value}");
        }
        assert_eq!(ClientsLimit::Percent(7).bytes(0), 0, "a percent of no maxmemory");
        let err = c.set_at_runtime("maxmemory-clients", "101%").expect_err("over 100%");
        assert_eq!(err.to_string(), "percentage argument must be less or equal to 100");
        for bad in ["-1", "abc", "%", "1.5%"] {
            let err = c.set_at_runtime("maxmemory-clients", bad).expect_err(bad);
            assert_eq!(err.to_string(), "argument must be a memory or percent value");
        }
    }

    #[test]
    fn memory_values_use_redis_units() {
        assert_eq!(parse_memory("1kb"), Ok(1024));
        assert_eq!(parse_memory("1k"), Ok(1000));
        assert_eq!(parse_memory("2gb"), Ok(2 << 30));
        assert!(parse_memory("1xb").is_err());
    }

    #[test]
    fn quoted_words_split_as_redis_does() {
        assert_eq!(split_config_line(r#"save "" "#), Some(vec![String::new()]).map(|mut v| {
            v.insert(0, "save".into());
            v
        }));
        assert_eq!(split_config_line(r#"a "b c" 'd'"#), Some(vec!["a".into(), "b c".into(), "d".into()]));
        assert_eq!(split_config_line(r#"a "b"c"#), None);
        // Escapes and quotes inside a word, as in Redis's config files.
        assert_eq!(split_config_line(r#"a "\x41\n" 'it\'s' b"c d""#), Some(vec!["a".into(), "A\n".into(), "it's".into(), "bc d".into()]));
    }
}
