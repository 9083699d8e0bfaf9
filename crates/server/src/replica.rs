//! The replica side of Redis 7.0's replication: while `replicaof` is set
//! (in the configuration, or by REPLICAOF / SLAVEOF at run time), Keel
//! keeps a copy of a Redis (or Keel) master's dataset and refuses writes
//! from its own clients (`replica-read-only`).
//!
//! # One thread, one link
//!
//! Redis runs the link as a state machine on its event loop because it
//! has one thread. Keel gives it a thread of its own, `keel-replica`,
//! spawned at start, and a blocking socket (`crate::link`, TLS under
//! `tls-replication`): the handshake then reads in the order the
//! protocol is written. Reads return every [`POLL`] so
//! that the thread sees a REPLICAOF change or a shutdown, keeps its ACK
//! clock, and drops a link silent for `repl-timeout`. A dropped link is
//! tried again every second, as Redis's cron does; REPLICAOF rings the
//! thread's [`Doorbell`] to connect at once.
//!
//! The master's address lives in `Config::replicaof` (what CONFIG GET
//! shows). [`Replica::generation`] counts its changes: a link belongs to
//! one generation and ends as soon as another begins. The thread applies
//! what the master sends while holding [`Replica::applying`], and checks
//! the generation under it, so REPLICAOF NO ONE, which takes that lock
//! after changing the generation, replies only once no master write can
//! land any more.
//!
//! # The protocol, as Redis 7.0's `syncWithMaster`
//!
//! 1. PING; then, pipelined, AUTH (`masteruser`, `masterauth`), REPLCONF
//!    listening-port (`replica-announce-port` if set), REPLCONF ip-address
//!    (if `replica-announce-ip` is set), REPLCONF capa eof capa psync2;
//!    then PSYNC with the
//!    master's replid and the offset processed plus one, as the last link
//!    left them (kept while the process lives), or PSYNC ? -1.
//! 2. `+FULLRESYNC <replid> <offset>`: the RDB comes as `$<len>` or, from a
//!    diskless master, `$EOF:<mark>` ... `<mark>`, after any `\n`
//!    keepalives. It goes to a temporary file in `dir`; then, with every
//!    shard locked and clients answered -LOADING, it is renamed over
//!    `dbfilename` and replaces the dataset (`snapshot::replace_held`).
//!    With `repl-diskless-load swapdb` (or `on-empty-db` and no keys) the
//!    parser reads it off the link instead ([`Payload`]) into a dataset
//!    of its own, swapped in only once the whole payload is in
//!    (`snapshot::load_detached`, `snapshot::install_held`): a failure
//!    leaves the old data.
//!    With `appendonly yes` the AOF is switched off before and on after,
//!    as Redis's `restartAOFAfterSYNC`: switching it on starts the rewrite
//!    whose base holds the synced data, and logging resumes at that
//!    rewrite's instant S, so the journal ends up holding the new dataset.
//! 3. `+CONTINUE [<replid>]`: the stream resumes after the offset processed.
//! 4. The stream: each command is parsed with `keel_protocol::parse_request`
//!    and run by `command::execute` as a client flagged `is_master` (exempt
//!    from READONLY and the write refusals), its reply discarded; the
//!    journal logs it as any write. The processed offset (Redis's
//!    `reploff`) moves past each command run outside MULTI, so a link lost
//!    inside a transaction resumes at its MULTI. REPLCONF GETACK is
//!    answered with `REPLCONF ACK <offset>`, the GETACK itself excluded, and
//!    an ACK goes every second. Before an ACK the journal has written (or,
//!    under `appendfsync always`, synced) what it acknowledges: an
//!    acknowledged offset survives a kill -9.
//!
//! Expiry is the master's, as in Redis: a replica runs no active expiry
//! cycle, keys never expire under the master's commands (time stands
//! still for them, as for a replay), and an ordinary client's read sees a
//! key past its time as absent without deleting it
//! (`keel_engine::db::hide_expired`), so the copy changes only as the
//! stream says. A writable replica's own writes expire such a key, as
//! Redis's do; unlike Redis, a writable replica does not expire the keys
//! with a TTL that its own clients wrote.
//!
//! A `swapdb` load of the same history (the `+FULLRESYNC` names the replid
//! the data came from) leaves the old data serving meanwhile, as Redis's
//! async loading; any other load answers clients -LOADING.
//!
//! # One history down the chain
//!
//! A replica's own replicas see its master's history, as in Redis: each
//! piece of the stream applied is passed on as it came, to the backlog
//! (`Replication::proxy`), under the same hold, so the backlog's end is
//! always the master's offset of the data; a transaction goes at its
//! EXEC. A full sync takes up the master's replid and offset (and the
//! stream's database from the RDB's `repl-stream-db`, since a stream
//! proxied from further up has no SELECT first), dropping this server's
//! replicas and backlog first; a `+CONTINUE` with a new replid keeps the
//! old one as the secondary id. Promotion makes the master's history the
//! secondary id, up to the offset applied; turning a master into a replica
//! PSYNCs with its own history (Redis's cached master "using myself"), so
//! a new master that was its replica continues it. A replica started from
//! an RDB that recorded a history PSYNCs with it ([`restore_history`]).
//!
//! Not done (yet): SYNC for masters without PSYNC.

use std::fs::{self, File};
use std::io::{self, BufWriter, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_journal::FsyncPolicy;
use parking_lot::Mutex;
use smallvec::SmallVec;
use thiserror::Error;

use crate::client::{Client, ClientInfo};
use crate::command::parse::eq;
use crate::command::{self, CmdError, CmdResult, Ctx};
use crate::config::Config;
use crate::doorbell::{Doorbell, Wake};
use crate::durability::AofState;
use crate::link::Link;
use crate::server::{unix_ms, Server};

/// How long a read waits before the thread looks at REPLICAOF changes,
/// shutdown, its ACK clock and `repl-timeout`.
const POLL: Duration = Duration::from_millis(100);
/// Redis's `repl_syncio_timeout`: the wait for a handshake reply.
const SYNCIO_TIMEOUT: Duration = Duration::from_secs(5);
/// Redis's replica acknowledges once a second (replicationCron).
const ACK_EVERY: Duration = Duration::from_secs(1);
/// Redis's `CONFIG_RUN_ID_SIZE`: a replid, and the diskless EOF mark.
const RUN_ID_SIZE: usize = 40;
/// Bytes asked of the socket per read.
const READ_CHUNK: usize = 64 << 10;
/// The longest one connection attempt waits (see [`connect`]).
const CONNECT_STEP: Duration = Duration::from_secs(1);
/// The longest an ACK waits for the journal to make its commands durable.
const ACK_DURABLE_WAIT: Duration = Duration::from_secs(1);

/// Why a link ended.
#[derive(Debug, Error)]
pub enum LinkError {
    #[error("I/O error with the master: {0}")]
    Io(#[from] io::Error),
    #[error("can't resolve the master's address {0}")]
    Resolve(String),
    #[error("TLS with the master failed: {0}")]
    Tls(String),
    #[error("connection lost")]
    Closed,
    #[error("timeout: nothing from the master for {0} seconds")]
    Timeout(u64),
    #[error("error reply to PING from master: '{0}'")]
    Ping(String),
    #[error("Unable to AUTH to MASTER: {0}")]
    Auth(String),
    #[error("master is currently unable to PSYNC but should be in the future: {0}")]
    TryLater(String),
    #[error("unexpected reply to PSYNC from master: {0}")]
    Psync(String),
    #[error("MASTER aborted replication with an error: {0}")]
    Aborted(String),
    #[error("bad protocol from MASTER: {0}")]
    Protocol(String),
    #[error("failed trying to load the MASTER synchronization DB: {0}")]
    Load(String),
    #[error("can't turn the AOF back on after the sync: {0}")]
    Aof(String),
    /// REPLICAOF changed the master, or the server stops: not a failure.
    #[error("replication link no longer wanted")]
    Stopped,
}

/// Redis's `repl_state`, as ROLE names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Phase {
    /// Waiting to connect (at the next try).
    #[default]
    Connect,
    Connecting,
    /// PING to the PSYNC reply.
    Handshake,
    /// Receiving (or loading) the RDB of a full sync.
    Transfer,
    Connected,
}

impl Phase {
    fn role_name(self) -> &'static str {
        match self {
            Phase::Connect => "connect",
            Phase::Connecting => "connecting",
            Phase::Handshake => "handshake",
            Phase::Transfer => "sync",
            Phase::Connected => "connected",
        }
    }

    /// What Redis's cron logs when `repl-timeout` passes in this phase.
    fn timed_out(self) -> &'static str {
        match self {
            Phase::Connect | Phase::Connecting | Phase::Handshake => "Timeout connecting to the MASTER...",
            Phase::Transfer => {
                "Timeout receiving bulk data from MASTER... If the problem persists try to set the 'repl-timeout' \
                 parameter in redis.conf to a larger value."
            }
            Phase::Connected => "MASTER timed out: no data nor PING received...",
        }
    }
}

/// Where the data stands in the master's history: what a PSYNC continues
/// from (Redis's cached master).
#[derive(Clone, Debug)]
struct Cursor {
    replid: String,
    /// The master's offset of the last byte processed (Redis's `reploff`).
    offset: i64,
    /// The database the stream has selected.
    db: usize,
}

#[derive(Default)]
struct LinkState {
    phase: Phase,
    /// None before the first sync, and after REPLICAOF NO ONE.
    cursor: Option<Cursor>,
    /// The master's offset of the last byte read (`slave_read_repl_offset`).
    read_offset: i64,
    last_io_ms: u64,
    /// When an established link was lost; 0: never, or up since.
    down_since_ms: u64,
    /// The full sync's payload: its size (-1 before its header, 0 with an
    /// EOF mark), bytes read, and when the last came.
    transfer_size: i64,
    transfer_read: i64,
    transfer_last_io_ms: u64,
}

/// The replica side's state (`Server::replica`).
#[derive(Default)]
pub struct Replica {
    bell: Doorbell,
    /// `replicaof` is set, mirrored for the write check.
    is_replica: AtomicBool,
    /// `replica-read-only`, mirrored likewise.
    read_only: AtomicBool,
    /// `replica-serve-stale-data`, mirrored likewise.
    serve_stale: AtomicBool,
    /// Changes of master (REPLICAOF): a link of an older one ends.
    generation: AtomicU64,
    /// Held while the link applies what the master sent.
    applying: Mutex<()>,
    state: Mutex<LinkState>,
    /// A handle on the link's socket while it is open: CLIENT KILL TYPE
    /// master ends the link through it.
    socket: Mutex<Option<TcpStream>>,
    /// The client that runs the master's stream, while it streams (Redis's
    /// master client): CLIENT LIST shows it (flag `M`).
    master_client: Mutex<Option<Arc<ClientInfo>>>,
    /// Keys (database, name) a writable replica's own clients gave a TTL
    /// (Redis's `slaveKeysWithExpire`): no DEL of the master's will ever
    /// expire them, so the replica does ([`expire_own_keys`]), its active
    /// expiry being otherwise off. `any_own` saves the lock when empty.
    own_volatile: Mutex<std::collections::HashSet<(usize, Box<[u8]>)>>,
    any_own: AtomicBool,
}

impl Replica {
    /// Mirrors `replicaof` and `replica-read-only` (at start, CONFIG SET
    /// and REPLICAOF).
    pub fn mirror(&self, config: &Config) {
        self.is_replica.store(config.replicaof.is_some(), Ordering::Relaxed);
        self.read_only.store(config.replica_read_only, Ordering::Relaxed);
        self.serve_stale.store(config.replica_serve_stale_data, Ordering::Relaxed);
    }

    pub fn is_replica(&self) -> bool {
        self.is_replica.load(Ordering::Relaxed)
    }

    /// Writes from ordinary clients get -READONLY.
    pub fn refuses_writes(&self) -> bool {
        self.is_replica() && self.read_only.load(Ordering::Relaxed)
    }

    /// A replica whose link is not up, with `replica-serve-stale-data
    /// no`: commands without the `stale` flag get -MASTERDOWN.
    pub fn is_stale(&self) -> bool {
        self.is_replica() && !self.serve_stale.load(Ordering::Relaxed) && self.state.lock().phase != Phase::Connected
    }

    /// INFO's `slave_expires_tracked_keys`: the names of the keys its own
    /// clients gave a TTL, as Redis counts `slaveKeysWithExpire` (one per
    /// name, whatever the databases).
    pub fn own_volatile_keys(&self) -> usize {
        let own = self.own_volatile.lock();
        own.iter().map(|(_, key)| key).collect::<std::collections::HashSet<_>>().len()
    }

    /// CLIENT KILL TYPE master: drops the link to the master, which the
    /// thread then connects again (a partial resync where the master still
    /// holds what follows). Whether there was a link to drop.
    pub fn kill_link(&self) -> bool {
        match self.socket.lock().as_ref() {
            Some(socket) => socket.shutdown(std::net::Shutdown::Both).is_ok(),
            None => false,
        }
    }

    /// The client running the master's stream, while it streams.
    pub fn master_client(&self) -> Option<Arc<ClientInfo>> {
        self.master_client.lock().clone()
    }

    /// Ends the thread (a link under way ends at its next poll).
    pub fn stop(&self) {
        self.bell.stop();
    }

    fn set_phase(&self, phase: Phase) {
        self.state.lock().phase = phase;
    }

    /// Holds the master's stream still: while held, no piece of it is
    /// being applied and proxied, so the backlog's end is the master's
    /// offset of the data (a full sync's instant S on a replica).
    pub fn hold_stream(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.applying.lock()
    }

    /// [`Replica::hold_stream`], waiting at most `wait`: `None` if the
    /// link holds it longer (it loads a full sync).
    pub fn hold_stream_for(&self, wait: Duration) -> Option<parking_lot::MutexGuard<'_, ()>> {
        self.applying.try_lock_for(wait)
    }

    /// The link to the master is up (Redis's `REPL_STATE_CONNECTED`).
    pub fn link_up(&self) -> bool {
        self.state.lock().phase == Phase::Connected
    }
}

/// The link as INFO and ROLE show it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub host: String,
    pub port: u16,
    /// ROLE's: "connect", "connecting", "handshake", "sync", "connected".
    pub state: &'static str,
    pub link_up: bool,
    /// -1 while the link is not up.
    pub last_io_seconds_ago: i64,
    pub sync_in_progress: bool,
    /// The master's replication ID ("" before the first sync).
    pub master_replid: String,
    /// The master's offset processed, -1 before the first sync.
    pub offset: i64,
    pub sync_total_bytes: i64,
    pub sync_read_bytes: i64,
    /// -1 if the link was never up or is up.
    pub link_down_since_seconds: i64,
}

/// The link's status, None when Keel is not a replica.
pub fn status(server: &Server) -> Option<Status> {
    details(server).map(|(status, _)| status)
}

/// What INFO adds to [`Status`]: the offset read, and seconds since the
/// sync's last I/O.
fn details(server: &Server) -> Option<(Status, (i64, i64))> {
    let (host, port) = server.config.read().replicaof.clone()?;
    let st = server.replica.state.lock();
    let now = unix_ms();
    let ago = |ms: u64| (now.saturating_sub(ms) / 1000) as i64;
    let up = st.phase == Phase::Connected;
    let status = Status {
        host,
        port,
        state: st.phase.role_name(),
        link_up: up,
        last_io_seconds_ago: if up { ago(st.last_io_ms) } else { -1 },
        sync_in_progress: st.phase == Phase::Transfer,
        master_replid: st.cursor.as_ref().map(|c| c.replid.clone()).unwrap_or_default(),
        offset: st.cursor.as_ref().map_or(-1, |c| c.offset),
        sync_total_bytes: st.transfer_size,
        sync_read_bytes: st.transfer_read,
        link_down_since_seconds: if up || st.down_since_ms == 0 { -1 } else { ago(st.down_since_ms) },
    };
    let read_offset = if st.cursor.is_some() { st.read_offset } else { 1 };
    Some((status, (read_offset, ago(st.transfer_last_io_ms))))
}

macro_rules! field {
    ($out:expr, $name:expr, $value:expr) => {
        let _ = std::fmt::Write::write_fmt($out, format_args!("{}:{}\r\n", $name, $value));
    };
}

/// INFO replication's replica lines, after `role:slave`, as Redis 7.0's
/// `genRedisInfoString` writes them.
pub fn info(server: &Server, out: &mut String) {
    let Some((s, (read_offset, transfer_io_ago))) = details(server) else { return };
    field!(out, "master_host", s.host);
    field!(out, "master_port", s.port);
    field!(out, "master_link_status", if s.link_up { "up" } else { "down" });
    field!(out, "master_last_io_seconds_ago", s.last_io_seconds_ago);
    field!(out, "master_sync_in_progress", u8::from(s.sync_in_progress));
    // Redis shows 1 while it has no master's offset at all.
    field!(out, "slave_read_repl_offset", read_offset);
    field!(out, "slave_repl_offset", if s.offset < 0 { 1 } else { s.offset });
    if s.sync_in_progress {
        // Redis's figures as they are: -1 before the payload's header, 0
        // for a payload with an EOF mark.
        let total = s.sync_total_bytes;
        let perc = if total != 0 { s.sync_read_bytes as f64 / total as f64 * 100.0 } else { 0.0 };
        field!(out, "master_sync_total_bytes", total);
        field!(out, "master_sync_read_bytes", s.sync_read_bytes);
        field!(out, "master_sync_left_bytes", total - s.sync_read_bytes);
        field!(out, "master_sync_perc", format!("{perc:.2}"));
        field!(out, "master_sync_last_io_seconds_ago", transfer_io_ago);
    }
    if !s.link_up {
        field!(out, "master_link_down_since_seconds", s.link_down_since_seconds);
    }
    field!(out, "slave_priority", server.config.read().replica_priority);
    field!(out, "slave_read_only", u8::from(server.replica.read_only.load(Ordering::Relaxed)));
    field!(out, "replica_announced", u8::from(server.config.read().replica_announced));
}

/// REPLICAOF (and SLAVEOF) `<host> <port>` | `NO ONE`, as Redis 7.0's
/// `replicaofCommand`.
pub fn replicaof(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let server = ctx.server;
    // A cluster node follows the master CLUSTER REPLICATE names.
    if server.cluster.is_some() {
        return Err(CmdError::other("ERR REPLICAOF not allowed in cluster mode."));
    }
    let who = || command::connection::client_line(&ctx.client.info, unix_ms());
    if server.repl.failover.state() != crate::replication::failover::State::None {
        return Err(CmdError::other("ERR REPLICAOF not allowed while failing over."));
    }
    if eq(argv[1], "no") && eq(argv[2], "one") {
        if stop_following(server) {
            tracing::info!("MASTER MODE enabled (user request from '{}')", who());
        }
        ctx.out.ok();
        return Ok(());
    }
    let port = std::str::from_utf8(argv[2])
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
        .ok_or_else(|| CmdError::other("ERR Invalid master port"))?;
    let host = String::from_utf8_lossy(argv[1]).into_owned();
    {
        let mut config = server.config.write();
        if config.replicaof.as_ref().is_some_and(|(h, p)| h.eq_ignore_ascii_case(&host) && *p == port) {
            drop(config);
            tracing::info!("REPLICAOF would result into synchronization with the master we are already connected with. No operation performed.");
            ctx.out.simple("OK Already connected to specified master");
            return Ok(());
        }
        config.replicaof = Some((host.clone(), port));
        server.replica.mirror(&config);
    }
    set_master(server);
    tracing::info!("REPLICAOF {host}:{port} enabled (user request from '{}')", who());
    ctx.out.ok();
    Ok(())
}

/// Cluster mode's REPLICAOF: follow `host:port` (a new master, or the same
/// one at a new address).
pub fn follow(server: &Server, host: String, port: u16) {
    {
        let mut config = server.config.write();
        if config.replicaof.as_ref().is_some_and(|(h, p)| *h == host && *p == port) {
            return;
        }
        config.replicaof = Some((host, port));
        server.replica.mirror(&config);
    }
    set_master(server);
}

/// REPLICAOF NO ONE, and cluster mode's promotion: the link ends, the
/// data stays. Returns whether there was a master.
pub fn stop_following(server: &Server) -> bool {
    let was = {
        let mut config = server.config.write();
        let was = config.replicaof.take();
        server.replica.mirror(&config);
        was
    };
    if was.is_some() {
        unset_master(server);
    }
    was.is_some()
}

/// A new master: the link to the old one (if any) ends before the reply.
/// What was processed stays the PSYNC's cursor, as Redis keeps its cached
/// master (a new master that shares the history continues it).
fn set_master(server: &Server) {
    // As Redis's replicationSetMaster and replicationUnsetMaster: the OOM
    // score of the new role (a failure is only logged).
    let _ = crate::process::apply_oom_score(&server.config.read());
    let replica = &server.replica;
    replica.generation.fetch_add(1, Ordering::AcqRel);
    let _applying = replica.applying.lock();
    if let Some((replid, offset)) = server.repl.start_proxying() {
        tracing::info!(
            "Before turning into a replica, using my own master parameters to synthesize a cached master: \
             I may be able to synchronize with the new master with just a partial transfer."
        );
        replica.state.lock().cursor = Some(Cursor { replid, offset: offset as i64, db: 0 });
    }
    replica.set_phase(Phase::Connect);
    replica.bell.ring();
    server.broadcast(|| crate::client::Message::BecameReplica);
}

/// The history an RDB loaded at start was saved with (its `repl-id`,
/// `repl-offset`, `repl-stream-db`), as Redis's `loadDataFromDisk` takes
/// it up: a replica PSYNCs with it (a cached master from it); a master
/// keeps it as its secondary id, up to that offset, and goes on from
/// there, its first records the DELs of the keys the load found expired,
/// so that replicas that had everything continue after a restart.
pub fn restore_history(server: &Arc<Server>, history: crate::snapshot::SavedHistory) {
    let size = server.config.read().repl_backlog_size;
    let (replid, offset, db) = (history.replid, history.offset, history.stream_db);
    if server.replica.is_replica() {
        server.repl.adopt_master_history(&replid, offset, db, size);
        server.replica.state.lock().cursor = Some(Cursor { replid, offset: offset as i64, db });
        return;
    }
    server.repl.restore_as_master(server, &replid, offset, size);
    for (db, key) in &history.expired {
        server.repl.feed(*db, &[&b"DEL"[..], key], 0);
    }
}

/// Commands by which a client gives a key a TTL (Redis's setExpire callers).
const SETS_TTL: [&str; 10] = ["set", "setex", "psetex", "getex", "expire", "pexpire", "expireat", "pexpireat", "restore", "copy"];

/// After a write by a replica's own client (not its master): remembers
/// the keys it left with a TTL, as Redis's rememberSlaveKeyWithExpire.
pub fn note_own_write(ctx: &mut Ctx<'_>, spec: &crate::command::CommandSpec, argv: &[&[u8]]) {
    if !SETS_TTL.contains(&spec.name) {
        return;
    }
    let db = ctx.client.db;
    let volatile: Vec<Box<[u8]>> = spec
        .key_indexes(argv)
        .iter()
        .map(|&i| argv[i])
        .filter(|key| ctx.dbs.of(key).peek(key).is_some_and(|e| e.has_expiry()))
        .map(Box::from)
        .collect();
    if !volatile.is_empty() {
        let replica = &ctx.server.replica;
        replica.own_volatile.lock().extend(volatile.into_iter().map(|key| (db, key)));
        replica.any_own.store(true, Ordering::Relaxed);
    }
}

/// A replica's cron: deletes the remembered keys whose time has run out
/// (journaled as DELs, with the `expired` event; its own replicas, which
/// get the master's stream, never had them), and forgets those gone or no longer volatile, as
/// Redis's expireSlaveKeys.
pub fn expire_own_keys(server: &Server) {
    let replica = &server.replica;
    if !replica.any_own.load(Ordering::Relaxed) {
        return;
    }
    let now = unix_ms();
    let keys: Vec<(usize, Box<[u8]>)> = replica.own_volatile.lock().iter().cloned().collect();
    let mut done = Vec::new();
    for (db, key) in keys {
        // A shard held (by a busy script, maybe for long) is looked at
        // again at the next cron.
        let Some(mut locked) = server.keyspace.try_lock_shards(keel_engine::Shards::One(server.keyspace.shard_of_key(&key))) else { continue };
        let shard = locked.shard_for(&server.keyspace, &key);
        let Some(d) = shard.dbs_mut().get_mut(db) else { continue };
        match d.peek(&key).map(|e| (e.has_expiry(), e.is_expired(now))) {
            Some((true, false)) => continue,
            Some((true, true)) => {
                // Under the shard's lock, as the active expiry's DELs.
                let _ = d.get(&key, now);
                for gone in d.expired.drain(..) {
                    if crate::durability::changes_logged(server) {
                        crate::durability::append(server, db, &[&b"DEL"[..], &gone], None);
                    }
                    crate::notify::expired(server, db, &gone);
                }
                if server.tracking.active() {
                    crate::tracking::collect(server, std::iter::once(&mut *shard), None);
                }
            }
            _ => {}
        }
        done.push((db, key));
    }
    let mut own = replica.own_volatile.lock();
    for k in &done {
        own.remove(k);
    }
    replica.any_own.store(!own.is_empty(), Ordering::Relaxed);
}

/// REPLICAOF NO ONE: the link ends before the reply; the data stays.
fn unset_master(server: &Server) {
    let _ = crate::process::apply_oom_score(&server.config.read());
    let replica = &server.replica;
    // A master's active expiry covers them from now on.
    replica.own_volatile.lock().clear();
    replica.any_own.store(false, Ordering::Relaxed);
    replica.generation.fetch_add(1, Ordering::AcqRel);
    let cursor = {
        let _applying = replica.applying.lock();
        let mut st = replica.state.lock();
        let cursor = st.cursor.take();
        *st = LinkState::default();
        cursor
    };
    replica.bell.ring();
    let history = cursor.as_ref().filter(|c| c.offset >= 0).map(|c| (c.replid.as_str(), c.offset as u64));
    server.repl.stop_proxying(history);
    if let Some((old, _)) = history {
        let (replid, _, second) = server.repl.ids();
        tracing::warn!("Setting secondary replication ID to {old}, valid up to offset: {second}. New replication ID is {replid}");
    }
    // As Redis's replicationUnsetMaster: an AOF a failed sync left off
    // comes back on.
    if server.config.read().appendonly && server.aof.state() == AofState::Off {
        if let Err(e) = switch_aof(server, true) {
            tracing::warn!("Failed enabling the AOF after the promotion: {e}");
        }
    }
}

/// Starts the link thread.
pub fn spawn(server: Arc<Server>) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("keel-replica".into()).spawn(move || run(&server))
}

fn run(server: &Server) {
    let replica = &server.replica;
    // The dataset at start loads first: a sync would race it.
    while server.loading.load(Ordering::Acquire) {
        if replica.bell.stopping() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    loop {
        let generation = replica.generation.load(Ordering::Acquire);
        let master = server.config.read().replicaof.clone();
        if let Some((host, port)) = master {
            match link(server, &host, port, generation) {
                Ok(()) | Err(LinkError::Stopped) => {}
                Err(LinkError::Timeout(_)) => tracing::warn!("{}", replica.state.lock().phase.timed_out()),
                Err(e) => tracing::warn!("Replication link with MASTER {host}:{port} ended: {e}"),
            }
            link_down(server, generation);
        }
        // Redis's cron tries again every second; REPLICAOF rings at once.
        if replica.bell.wait_up_to(Duration::from_secs(1)) == Wake::Stop {
            return;
        }
    }
}

/// Whether the link of `generation` is still wanted.
fn wanted(server: &Server, generation: u64) -> bool {
    let replica = &server.replica;
    replica.generation.load(Ordering::Acquire) == generation
        && !server.shutdown.load(Ordering::Relaxed)
        && !replica.bell.stopping()
}

fn link_down(server: &Server, generation: u64) {
    *server.replica.socket.lock() = None;
    let _applying = server.replica.applying.lock();
    if !wanted(server, generation) {
        return;
    }
    let mut st = server.replica.state.lock();
    if st.phase == Phase::Connected {
        tracing::warn!("Connection with master lost.");
        st.down_since_ms = unix_ms();
    }
    st.phase = Phase::Connect;
    st.transfer_size = 0;
    st.transfer_read = 0;
}

/// One link: handshake, sync, stream, until it fails or is no longer wanted.
fn link(server: &Server, host: &str, port: u16, generation: u64) -> Result<(), LinkError> {
    let replica = &server.replica;
    let timeout = Duration::from_secs(server.config.read().repl_timeout_s);
    replica.set_phase(Phase::Connecting);
    tracing::info!("Connecting to MASTER {host}:{port}");
    let addr = (host, port).to_socket_addrs()?.next().ok_or_else(|| LinkError::Resolve(format!("{host}:{port}")))?;
    let stream = connect(server, generation, addr, timeout)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(POLL))?;
    stream.set_write_timeout(Some(timeout))?;
    tracing::info!("MASTER <-> REPLICA sync started");
    *replica.socket.lock() = stream.try_clone().ok();
    let stream = match server.config.read().tls.replication {
        true => Link::Tls(Arc::new(tls_handshake(server, host, stream)?)),
        false => Link::Tcp(stream),
    };
    let mut conn = Conn { stream, buf: Vec::new(), start: 0, server, generation };
    replica.set_phase(Phase::Handshake);
    conn.send(&["PING"])?;
    let pong = conn.line(SYNCIO_TIMEOUT)?;
    let accepted = ["+", "-NOAUTH", "-NOPERM", "-ERR operation not permitted"];
    if !accepted.iter().any(|a| pong.starts_with(a)) {
        return Err(LinkError::Ping(pong));
    }
    tracing::info!("Master replied to PING, replication can continue...");
    let (auth, user) = {
        let c = server.config.read();
        (c.masterauth.clone(), c.masteruser.clone())
    };
    // Pipelined, as Redis sends them; the replies come in order.
    if let Some(password) = &auth {
        let mut argv = vec!["AUTH"];
        argv.extend(user.as_deref());
        argv.push(password);
        conn.send(&argv)?;
    }
    // What the master lists this replica as: the announced address where
    // one is set (Redis's `slave-announce-port` and `-ip`), else where
    // clients of the link's kind connect.
    let (port, announce_ip) = {
        let c = server.config.read();
        let port = match (c.replica_announce_port, c.tls.replication && c.tls.port != 0) {
            (0, true) => c.tls.port,
            (0, false) => c.port,
            (announced, _) => announced,
        };
        (port, c.replica_announce_ip.clone())
    };
    conn.send(&["REPLCONF", "listening-port", &port.to_string()])?;
    if let Some(ip) = &announce_ip {
        conn.send(&["REPLCONF", "ip-address", ip])?;
    }
    conn.send(&["REPLCONF", "capa", "eof", "capa", "psync2"])?;
    if auth.is_some() {
        let reply = conn.line(SYNCIO_TIMEOUT)?;
        if reply.starts_with('-') {
            return Err(LinkError::Auth(reply));
        }
    }
    let asked: &[&str] = if announce_ip.is_some() { &["listening-port", "ip-address", "capa"] } else { &["listening-port", "capa"] };
    for what in asked {
        let reply = conn.line(SYNCIO_TIMEOUT)?;
        if reply.starts_with('-') {
            tracing::info!("(Non critical) Master does not understand REPLCONF {what}: {reply}");
        }
    }
    let cursor = replica.state.lock().cursor.clone();
    // A master handing over in a FAILOVER asks its target to take over.
    let failing_over = server.repl.failover.state() == crate::replication::failover::State::InProgress;
    match &cursor {
        Some(c) => {
            let next = (c.offset + 1).to_string();
            tracing::info!("Trying a partial resynchronization (request {}:{next}).", c.replid);
            let failover: &[&str] = if failing_over { &["FAILOVER"] } else { &[] };
            conn.send(&[&["PSYNC", &c.replid, &next][..], failover].concat())?;
        }
        None => {
            tracing::info!("Partial resynchronization not possible (no cached master)");
            conn.send(&["PSYNC", "?", "-1"])?;
        }
    }
    // Before it answers, the master may send newlines to keep the link up.
    let reply = loop {
        let line = conn.line(timeout)?;
        if !line.is_empty() {
            break line;
        }
    };
    if failing_over {
        crate::replication::failover::target_answered(server, reply.starts_with("+FULLRESYNC") || reply.starts_with("+CONTINUE"));
    }
    if let Some(rest) = reply.strip_prefix("+FULLRESYNC") {
        let mut words = rest.split_whitespace();
        let replid = words.next().filter(|r| r.len() == RUN_ID_SIZE);
        let offset = words.next().and_then(|o| o.parse::<i64>().ok());
        let (Some(replid), Some(offset)) = (replid, offset) else {
            return Err(LinkError::Psync(format!("wrong +FULLRESYNC syntax: {reply}")));
        };
        tracing::info!("Full resync from master: {replid}:{offset}");
        let mut cursor = Cursor { replid: replid.to_string(), offset, db: 0 };
        full_sync(&mut conn, timeout, &mut cursor)?;
        tracing::info!("MASTER <-> REPLICA sync: Finished with success");
        crate::supervision::notify_systemd(
            "STATUS=MASTER <-> REPLICA sync: Finished with success. Ready to accept connections in read-write mode.\n",
        );
        apply_stream(conn, cursor)
    } else if let Some(rest) = reply.strip_prefix("+CONTINUE") {
        let Some(mut cursor) = cursor else {
            return Err(LinkError::Psync(format!("{reply} to a PSYNC ? -1")));
        };
        tracing::info!("Successful partial resynchronization with master.");
        crate::supervision::notify_systemd(
            "STATUS=MASTER <-> REPLICA sync: Partial Resynchronization accepted. Ready to accept connections in read-write mode.\n",
        );
        let new_id = rest.trim();
        if new_id.len() == RUN_ID_SIZE && new_id != cursor.replid {
            tracing::warn!("Master replication ID changed to {new_id}");
            cursor.replid = new_id.to_string();
        }
        {
            let _applying = replica.applying.lock();
            conn.still_wanted()?;
            let size = server.config.read().repl_backlog_size;
            server.repl.continue_master_history(&cursor.replid, cursor.offset as u64, cursor.db, size);
        }
        apply_stream(conn, cursor)
    } else if reply.starts_with("-NOMASTERLINK") || reply.starts_with("-LOADING") {
        Err(LinkError::TryLater(reply))
    } else {
        Err(LinkError::Psync(reply))
    }
}

/// Connects within `timeout`, a second at a time, so that a shutdown or a
/// REPLICAOF is not held up by an unreachable master.
fn connect(server: &Server, generation: u64, addr: std::net::SocketAddr, timeout: Duration) -> Result<TcpStream, LinkError> {
    let deadline = Instant::now() + timeout;
    let source = server.config.read().bind_source_addr.clone();
    loop {
        let attempt = deadline.saturating_duration_since(Instant::now()).min(CONNECT_STEP);
        match crate::listen::connect_timeout(source.as_deref(), addr, attempt.max(Duration::from_millis(1))) {
            Ok(stream) => return Ok(stream),
            Err(e) if e.kind() == io::ErrorKind::TimedOut && Instant::now() < deadline => {
                if !wanted(server, generation) {
                    return Err(LinkError::Stopped);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// The client side of a TLS link to the master, with the CAs of
/// `tls-ca-cert-file` and `-dir` checking the master's certificate chain
/// (not its name, as Redis's).
fn tls_handshake(server: &Server, host: &str, stream: TcpStream) -> Result<keel_tls::BlockingTls, LinkError> {
    let config = server.tls.read().as_ref().and_then(|c| c.client.clone());
    let config = config.ok_or_else(|| LinkError::Tls("TLS is not configured".into()))?;
    let name = rustls_pki_types::ServerName::try_from(host.to_string()).map_err(|e| LinkError::Tls(e.to_string()))?;
    let session = rustls::ClientConnection::new(config, name).map_err(|e| LinkError::Tls(e.to_string()))?;
    let tls = keel_tls::BlockingTls::handshake(stream, session.into(), Instant::now() + SYNCIO_TIMEOUT);
    tls.map_err(|e| LinkError::Tls(e.to_string()))
}

/// The link's socket and what was read from it and not consumed yet.
struct Conn<'s> {
    stream: Link,
    buf: Vec<u8>,
    start: usize,
    server: &'s Server,
    generation: u64,
}

impl Conn<'_> {
    fn send(&mut self, argv: &[&str]) -> Result<(), LinkError> {
        (&self.stream).write_all(&encode(argv))?;
        Ok(())
    }

    fn buffered(&self) -> usize {
        self.buf.len() - self.start
    }

    /// One read of at most `READ_CHUNK` bytes; 0 when none came within
    /// [`POLL`]. The end of the connection is an error.
    fn fill(&mut self) -> Result<usize, LinkError> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        let len = self.buf.len();
        self.buf.resize(len + READ_CHUNK, 0);
        let read = (&self.stream).read(&mut self.buf[len..]);
        let n = match read {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted) => {
                self.buf.truncate(len);
                return Ok(0);
            }
            Err(e) => {
                self.buf.truncate(len);
                return Err(e.into());
            }
        };
        self.buf.truncate(len + n);
        if n == 0 {
            return Err(LinkError::Closed);
        }
        Ok(n)
    }

    /// Returns once bytes are buffered, reading if none are; fails when
    /// none came within `timeout`, or the link is no longer wanted.
    fn await_bytes(&mut self, timeout: Duration) -> Result<(), LinkError> {
        let since = Instant::now();
        while self.buffered() == 0 {
            self.still_wanted()?;
            if self.fill()? == 0 && since.elapsed() >= timeout {
                return Err(LinkError::Timeout(timeout.as_secs()));
            }
        }
        Ok(())
    }

    /// Fails the link if it is no longer wanted.
    fn still_wanted(&self) -> Result<(), LinkError> {
        if wanted(self.server, self.generation) {
            Ok(())
        } else {
            Err(LinkError::Stopped)
        }
    }

    /// The next line, its `\r\n` taken off, within `timeout`.
    fn line(&mut self, timeout: Duration) -> Result<String, LinkError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.buf[self.start..].iter().position(|&b| b == b'\n') {
                let line = &self.buf[self.start..self.start + i];
                let text = String::from_utf8_lossy(line.strip_suffix(b"\r").unwrap_or(line)).into_owned();
                self.start += i + 1;
                return Ok(text);
            }
            self.still_wanted()?;
            if self.fill()? == 0 && Instant::now() >= deadline {
                return Err(LinkError::Timeout(timeout.as_secs()));
            }
        }
    }
}

/// A command as a RESP multibulk (the journal's record format).
fn encode(argv: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    keel_journal::encode_command(&mut out, argv);
    out
}

/// A full sync: receives the RDB into a temporary file, then replaces the
/// dataset with it.
fn full_sync(conn: &mut Conn<'_>, timeout: Duration, cursor: &mut Cursor) -> Result<(), LinkError> {
    let server = conn.server;
    let replica = &server.replica;
    {
        let mut st = replica.state.lock();
        st.phase = Phase::Transfer;
        st.transfer_size = -1;
        st.transfer_read = 0;
        st.transfer_last_io_ms = unix_ms();
    }
    // Newlines keep the link up while the master prepares the payload.
    let header = loop {
        let line = conn.line(timeout)?;
        if !line.is_empty() {
            break line;
        }
        replica.state.lock().transfer_last_io_ms = unix_ms();
    };
    if let Some(error) = header.strip_prefix('-') {
        return Err(LinkError::Aborted(error.to_string()));
    }
    let Some(spec) = header.strip_prefix('$') else {
        return Err(LinkError::Protocol(format!(
            "the first byte is not '$' (we received '{header}'), are you sure the host and port are right?"
        )));
    };
    let mark = spec.strip_prefix("EOF:").filter(|m| m.len() >= RUN_ID_SIZE).map(|m| m.as_bytes()[..RUN_ID_SIZE].to_vec());
    let size = match mark {
        Some(_) => 0,
        None => spec.parse::<i64>().ok().filter(|&n| n >= 0).ok_or_else(|| LinkError::Protocol(format!("bad bulk length '{header}'")))?,
    };
    let diskless = diskless_load(server);
    let target = if diskless == DisklessLoad::No { "to disk" } else { "to parser" };
    match mark {
        Some(_) => tracing::info!("MASTER <-> REPLICA sync: receiving streamed RDB from master with EOF {target}"),
        None => tracing::info!("MASTER <-> REPLICA sync: receiving {size} bytes from master {target}"),
    }
    replica.state.lock().transfer_size = size;
    let generation = conn.generation;
    if diskless != DisklessLoad::No {
        // Redis's async loading: the same history, later (this server's
        // replid is the one its data came from, its master's).
        let same_history = server.repl.replid() == cursor.replid;
        let serving = diskless == DisklessLoad::SwapDb && same_history;
        let mut payload = Payload { conn, left: (mark.is_none()).then_some(size as u64), timeout, failure: None, consumed: 0 };
        return replace_data(server, generation, cursor, || load_from_link(&mut payload, mark.as_deref(), diskless, serving));
    }
    let dir = server.config.read().dir.clone();
    let temp = dir.join(format!("temp-{}.{}.rdb", unix_ms() / 1000, std::process::id()));
    let loaded = receive(conn, timeout, &temp, size, mark.as_deref()).and_then(|()| replace_data(server, generation, cursor, || load(server, &temp)));
    // Gone once renamed; left behind by a failure before.
    let _ = fs::remove_file(&temp);
    loaded
}

/// Whether a full sync's RDB goes straight to the parser
/// (`repl-diskless-load`), as Redis's `useDisklessLoad`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum DisklessLoad {
    No,
    /// `on-empty-db` with an empty dataset: a failure leaves it empty.
    OnEmptyDb,
    /// `swapdb`: a failure leaves the old dataset.
    SwapDb,
}

fn diskless_load(server: &Server) -> DisklessLoad {
    let mode = server.config.read().repl_diskless_load.clone();
    match mode.as_str() {
        "swapdb" => DisklessLoad::SwapDb,
        "on-empty-db" if dataset_is_empty(server) => DisklessLoad::OnEmptyDb,
        _ => DisklessLoad::No,
    }
}

/// Redis's `dbTotalServerKeyCount() == 0`.
fn dataset_is_empty(server: &Server) -> bool {
    server.keyspace.lock_all().iter_mut().all(|shard| shard.dbs_mut().iter().all(|db| db.is_empty()))
}

/// Runs `load` as the replica's data changes hands: holding
/// [`Replica::applying`], with the old history dropped first (a failed
/// load must not PSYNC from it, Redis's `replicationDiscardCachedMaster`;
/// this server's own replicas go, and its backlog), and once it succeeded
/// the master's history taken up from the link's `cursor` on, in the
/// database the RDB names (`repl-stream-db`; a master's stream that
/// proxies its own master's has no SELECT first).
fn replace_data(
    server: &Server,
    generation: u64,
    cursor: &mut Cursor,
    load: impl FnOnce() -> Result<crate::snapshot::Loaded, LinkError>,
) -> Result<(), LinkError> {
    let replica = &server.replica;
    let _applying = replica.applying.lock();
    if !wanted(server, generation) {
        return Err(LinkError::Stopped);
    }
    replica.state.lock().cursor = None;
    server.repl.forget_history();
    let loaded = load()?;
    cursor.db = loaded.stream_db.unwrap_or(0);
    let size = server.config.read().repl_backlog_size;
    server.repl.adopt_master_history(&cursor.replid, cursor.offset as u64, cursor.db, size);
    let mut st = replica.state.lock();
    st.read_offset = cursor.offset;
    st.cursor = Some(cursor.clone());
    Ok(())
}

/// Writes the RDB payload to `temp`: `size` bytes, or up to the EOF `mark`.
fn receive(conn: &mut Conn<'_>, timeout: Duration, temp: &Path, size: i64, mark: Option<&[u8]>) -> Result<(), LinkError> {
    let replica = &conn.server.replica;
    let mut file = BufWriter::with_capacity(1 << 20, File::create(temp)?);
    let mut read = 0i64;
    let mut tail: Vec<u8> = Vec::with_capacity(2 * RUN_ID_SIZE);
    loop {
        conn.await_bytes(timeout)?;
        // With a size, bytes past it are the stream's: they stay buffered.
        let take = match mark {
            Some(_) => conn.buffered(),
            None => conn.buffered().min((size - read) as usize),
        };
        let chunk = &conn.buf[conn.start..conn.start + take];
        file.write_all(chunk)?;
        if mark.is_some() {
            tail.extend_from_slice(chunk);
            let excess = tail.len().saturating_sub(RUN_ID_SIZE);
            tail.drain(..excess);
        }
        conn.start += take;
        read += take as i64;
        {
            let mut st = replica.state.lock();
            st.transfer_read = read;
            st.transfer_last_io_ms = unix_ms();
        }
        let done = match mark {
            Some(mark) => tail == mark,
            None => read == size,
        };
        if done {
            break;
        }
    }
    let file = file.into_inner().map_err(|e| e.into_error())?;
    if mark.is_some() {
        // The mark is no part of the RDB.
        file.set_len((read as u64).saturating_sub(RUN_ID_SIZE as u64))?;
    }
    file.sync_all()?;
    Ok(())
}

/// Replaces the dataset with the received RDB, as Redis's
/// `readSyncBulkPayload` after the transfer.
fn load(server: &Server, received: &Path) -> Result<crate::snapshot::Loaded, LinkError> {
    replace_dataset(server, true, false, || crate::snapshot::replace_from_file(server, received).map_err(LinkError::Load))
}

/// What Redis's `readSyncBulkPayload` does around a load, `read`: the AOF
/// off before (nothing of the
/// load is logged, and a rewrite of the old data is cancelled, as by
/// `stopAppendOnly`) and on after; clients answered -LOADING meanwhile,
/// unless `serving`: Redis's async loading, where the old data goes on
/// serving and only the commands flagged `no-async-loading` are refused.
/// `flushing`: the old data goes first (all but `swapdb`).
fn replace_dataset(
    server: &Server,
    flushing: bool,
    serving: bool,
    read: impl FnOnce() -> Result<crate::snapshot::Loaded, LinkError>,
) -> Result<crate::snapshot::Loaded, LinkError> {
    let appendonly = server.config.read().appendonly;
    if server.aof.state() != AofState::Off {
        switch_aof(server, false).map_err(LinkError::Aof)?;
        crate::rewrite::wait_cancelled(server);
    }
    if flushing {
        tracing::info!("MASTER <-> REPLICA sync: Flushing old data");
    }
    tracing::info!("MASTER <-> REPLICA sync: Loading DB in memory");
    match serving {
        true => server.async_loading.store(true, Ordering::Release),
        false => server.begin_load(),
    }
    let started = Instant::now();
    let loaded = read();
    match serving {
        true => server.async_loading.store(false, Ordering::Release),
        false => server.end_load(),
    }
    let loaded = loaded?;
    tracing::info!("Done loading RDB, keys loaded: {}, keys expired: {} in {:?}", loaded.keys, loaded.expired, started.elapsed());
    // Redis's restartAOFAfterSYNC: the rewrite this starts writes the
    // synced data as the AOF's base.
    if appendonly {
        switch_aof(server, true).map_err(LinkError::Aof)?;
    }
    Ok(loaded)
}

/// A diskless load: the parser reads the payload straight off the link
/// into a dataset of its own ([`crate::snapshot::load_detached`]), which
/// takes the serving one's place only once the whole payload is in and
/// checked, so a failure leaves the data as it was (Redis's `swapdb`
/// keeps the old data aside for the same reason).
fn load_from_link(
    payload: &mut Payload<'_, '_>,
    mark: Option<&[u8]>,
    mode: DisklessLoad,
    serving: bool,
) -> Result<crate::snapshot::Loaded, LinkError> {
    let server = payload.conn.server;
    let loaded = replace_dataset(server, mode == DisklessLoad::OnEmptyDb, serving, || {
        let total = payload.left.unwrap_or(0);
        let detached = crate::snapshot::load_detached(server, &mut *payload, total).map_err(|e| {
            // Redis's rdbReportError lines: a link that failed is no damage.
            let offset = payload.consumed;
            match &payload.failure {
                Some(link) => tracing::warn!(
                    "Internal error in RDB reading offset {offset} -> {link}. \
                     Failure loading rdb format from socket, assuming connection error, resuming operation."
                ),
                None => tracing::warn!("Internal error in RDB reading offset {offset} -> {e}. Failure loading rdb format"),
            }
            let reason = payload.failure.as_ref().map_or_else(|| e.clone(), LinkError::to_string);
            tracing::warn!("Failed trying to load the MASTER synchronization DB from socket: {reason}");
            payload.failure.take().unwrap_or(LinkError::Load(e))
        })?;
        payload.finish(mark)?;
        let loaded = detached.loaded;
        let (old, old_keys) = {
            let mut locked = server.keyspace.lock_all();
            let installed = crate::snapshot::install_held(server, &mut locked, detached).map_err(LinkError::Load)?;
            crate::snapshot::forget_tracked(server, &mut locked);
            installed
        };
        if mode == DisklessLoad::SwapDb {
            tracing::info!("MASTER <-> REPLICA sync: Swapping active DB with loaded DB");
            tracing::info!("MASTER <-> REPLICA sync: Discarding old DB in background");
        }
        crate::lazyfree::drop_async(old, old_keys);
        Ok(loaded)
    });
    if loaded.is_err() && mode == DisklessLoad::SwapDb {
        tracing::info!("MASTER <-> REPLICA sync: Discarding temporary DB in background");
    }
    loaded
}

/// A full sync's RDB as it arrives on the link, read by the parser itself
/// (diskless load): `left` bytes of a sized payload, or everything up to
/// the EOF mark, which the parser does not read into since it stops at the
/// RDB's checksum. Bytes past the payload stay in the link's buffer.
struct Payload<'c, 's> {
    conn: &'c mut Conn<'s>,
    /// Bytes of a sized payload not read yet; `None` with an EOF mark.
    left: Option<u64>,
    timeout: Duration,
    /// Why the link failed under the parser, which sees an I/O error only.
    failure: Option<LinkError>,
    /// Bytes of the payload the parser has taken.
    consumed: u64,
}

impl Payload<'_, '_> {
    /// After the RDB: the EOF mark checked, or what is left of a sized
    /// payload passed over.
    fn finish(&mut self, mark: Option<&[u8]>) -> Result<(), LinkError> {
        let ended = match mark {
            Some(mark) => {
                let mut end = [0u8; RUN_ID_SIZE];
                io::Read::read_exact(self, &mut end).map(|()| end[..] == *mark)
            }
            None => loop {
                match io::BufRead::fill_buf(self).map(<[u8]>::len) {
                    Ok(0) => break Ok(true),
                    Ok(n) => io::BufRead::consume(self, n),
                    Err(e) => break Err(e),
                }
            },
        };
        match ended {
            Ok(true) => Ok(()),
            Ok(false) => {
                tracing::warn!("Replication stream EOF marker is broken");
                Err(LinkError::Load("Replication stream EOF marker is broken".into()))
            }
            Err(e) => Err(self.failure.take().unwrap_or(e.into())),
        }
    }
}

impl io::BufRead for Payload<'_, '_> {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.left == Some(0) {
            return Ok(&[]);
        }
        if self.conn.buffered() == 0 {
            if let Err(failure) = self.conn.await_bytes(self.timeout) {
                let error = io::Error::other(failure.to_string());
                self.failure = Some(failure);
                return Err(error);
            }
            let mut st = self.conn.server.replica.state.lock();
            st.transfer_read += self.conn.buffered() as i64;
            st.transfer_last_io_ms = unix_ms();
        }
        let available = self.left.map_or(usize::MAX, |left| usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.conn.buffered().min(available);
        Ok(&self.conn.buf[self.conn.start..self.conn.start + n])
    }

    fn consume(&mut self, n: usize) {
        self.conn.start += n;
        self.consumed += n as u64;
        if let Some(left) = &mut self.left {
            *left -= n as u64;
        }
    }
}

impl io::Read for Payload<'_, '_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = io::BufRead::fill_buf(self)?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        io::BufRead::consume(self, n);
        Ok(n)
    }
}

/// Turns the AOF off or on as CONFIG SET appendonly does (under the
/// configuration's write lock, as there), leaving the directive as it is.
fn switch_aof(server: &Server, on: bool) -> Result<(), String> {
    let config = server.config.write();
    let (mut old, mut new) = (config.clone(), config.clone());
    old.appendonly = !on;
    new.appendonly = on;
    crate::durability::apply_config(server, &old, &new)
}

/// Applies the master's stream until the link fails or is no longer wanted.
fn apply_stream(mut conn: Conn<'_>, mut cursor: Cursor) -> Result<(), LinkError> {
    let server = conn.server;
    let replica = &server.replica;
    // The master's offset of the first byte buffered.
    let mut consumed = cursor.offset;
    let tcp = conn.stream.tcp();
    let addr = tcp.and_then(|s| s.peer_addr().ok()).map(|a| crate::worker::fmt_addr(&a)).unwrap_or_default();
    let laddr = tcp.and_then(|s| s.local_addr().ok()).map(|a| crate::worker::fmt_addr(&a)).unwrap_or_default();
    let info = Arc::new(ClientInfo::new(server.clients.next_id(), addr, laddr, conn.stream.as_raw_fd(), false));
    info.db.store(cursor.db, Ordering::Relaxed);
    info.set_link_role(crate::client::LinkRole::Master);
    let mut client = Client::new(Arc::clone(&info), true);
    client.is_master = true;
    client.db = cursor.db;
    {
        let _applying = replica.applying.lock();
        conn.still_wanted()?;
        *replica.master_client.lock() = Some(info);
        let mut st = replica.state.lock();
        st.phase = Phase::Connected;
        st.down_since_ms = 0;
        st.last_io_ms = unix_ms();
        st.read_offset = consumed + conn.buffered() as i64;
        st.cursor = Some(cursor.clone());
    }
    let stats = &server.workers[0];
    // The master's arguments are not bounded by `proto-max-bulk-len`.
    let limits = keel_protocol::Limits { max_bulk_len: i64::MAX as usize, ..Default::default() };
    let mut reply = Vec::new();
    let mut last_ack: Option<Instant> = None;
    let mut last_lsn = 0u64;
    let mut last_io = Instant::now();
    // What was applied but not yet proxied to this server's replicas: a
    // transaction goes to them whole, at its EXEC, as it counts then.
    let mut unproxied: Vec<u8> = Vec::new();
    let result = loop {
        if let Err(e) = conn.still_wanted() {
            break Err(e);
        }
        // The first goes at once: a diskless master starts the stream on it.
        if last_ack.is_none_or(|t| t.elapsed() >= ACK_EVERY) {
            if let Err(e) = send_ack(server, &conn.stream, cursor.offset, last_lsn) {
                break Err(e);
            }
            last_ack = Some(Instant::now());
        }
        if conn.buffered() > 0 {
            let _applying = replica.applying.lock();
            if let Err(e) = conn.still_wanted() {
                break Err(e);
            }
            // Keys do not expire under the master's commands, as Redis's
            // expireIfNeeded for its master client: the master decides
            // (its DELs come in the stream). Time stands still for them, as
            // for a replay, so a key the replica's clock already sees
            // expired is still there for a command the master ran before it
            // expired there.
            let now_ms = 0;
            let mut failed = None;
            let batch_start = conn.start;
            let proxied_upto = cursor.offset;
            loop {
                let parsed = match keel_protocol::parse_request(&conn.buf[conn.start..], &limits) {
                    Ok(Some(parsed)) => parsed,
                    Ok(None) => break,
                    Err(e) => {
                        failed = Some(LinkError::Protocol(e.to_string()));
                        break;
                    }
                };
                let (request, used) = parsed;
                let argv: SmallVec<[&[u8]; 8]> = request.argv.iter().map(|a| &**a).collect();
                if argv.len() >= 2 && eq(argv[0], "replconf") && eq(argv[1], "getack") {
                    // Acknowledges what came before the GETACK, as Redis.
                    if let Err(e) = send_ack(server, &conn.stream, cursor.offset, last_lsn) {
                        failed = Some(e);
                        break;
                    }
                    last_ack = Some(Instant::now());
                } else if argv.first().is_some_and(|a| eq(a, "replconf")) {
                    // No other REPLCONF asks anything of a replica.
                } else if !argv.is_empty() {
                    last_lsn = last_lsn.max(command::execute(server, stats, &mut client, &mut reply, &argv, now_ms));
                    if reply.first() == Some(&b'-') {
                        crate::process::propagation_error(server, crate::process::Propagated::Master, argv[0], &reply);
                    }
                    reply.clear();
                }
                conn.start += used;
                consumed += used as i64;
                // Inside MULTI nothing counts until EXEC: a link lost
                // meanwhile resumes at the MULTI.
                if client.multi.is_none() {
                    cursor.offset = consumed;
                }
            }
            cursor.db = client.db;
            // Proxied under the same hold as applied: a snapshot for a
            // replica of this one sees both or neither. Straight from the
            // link's buffer unless a transaction began in an earlier batch.
            let ready = (cursor.offset - proxied_upto) as usize;
            let lsn = crate::durability::replicas_wait_for(server, last_lsn);
            let batch = &conn.buf[batch_start..conn.start];
            if unproxied.is_empty() {
                if ready > 0 {
                    server.repl.proxy(&batch[..ready], cursor.db, lsn);
                }
                unproxied.extend_from_slice(&batch[ready..]);
            } else {
                unproxied.extend_from_slice(batch);
                if ready > 0 {
                    server.repl.proxy(&unproxied[..ready], cursor.db, lsn);
                    unproxied.drain(..ready);
                }
            }
            replica.state.lock().cursor = Some(cursor.clone());
            if let Some(e) = failed {
                break Err(e);
            }
        }
        match conn.fill() {
            Ok(0) => {
                // Read at each check, as CONFIG SET may change it.
                let timeout_s = server.config.read().repl_timeout_s;
                if last_io.elapsed() >= Duration::from_secs(timeout_s) {
                    break Err(LinkError::Timeout(timeout_s));
                }
            }
            Ok(n) => {
                last_io = Instant::now();
                let now = unix_ms();
                client.info.last_interaction_ms.store(now, Ordering::Relaxed);
                let mut st = replica.state.lock();
                st.last_io_ms = now;
                st.read_offset += n as i64;
            }
            Err(e) => break Err(e),
        }
    };
    replica.master_client.lock().take();
    if client.multi.is_some() {
        command::transactions::discard_state(server, &mut client);
    }
    result
}

/// `REPLCONF ACK <offset>`, once the journal holds what it acknowledges.
fn send_ack(server: &Server, mut stream: &Link, offset: i64, lsn: u64) -> Result<(), LinkError> {
    if let Some(journal) = server.journal().filter(|_| lsn > 0) {
        let written = journal.write_through();
        if !written || journal.fsync() == FsyncPolicy::Always {
            let deadline = Instant::now() + ACK_DURABLE_WAIT;
            while journal.durable_lsn() < lsn && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    stream.write_all(&encode(&["REPLCONF", "ACK", &offset.to_string()]))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_encode_as_multibulk() {
        assert_eq!(encode(&["REPLCONF", "ACK", "42"]), b"*3\r\n$8\r\nREPLCONF\r\n$3\r\nACK\r\n$2\r\n42\r\n".to_vec());
    }

    #[test]
    fn phases_have_role_names() {
        assert_eq!(Phase::default().role_name(), "connect");
        assert_eq!(Phase::Transfer.role_name(), "sync");
        assert_eq!(Phase::Connected.role_name(), "connected");
    }
}
