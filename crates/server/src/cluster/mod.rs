//! Cluster mode (`cluster-enabled yes`), as Redis 7.0 runs it: the 16384
//! hash slots are served by masters, each with its replicas; clients are
//! redirected (-MOVED, -ASK) to the node serving a key's slot; the nodes
//! talk on the cluster bus in Redis's own binary format (`keel-cluster`),
//! so Keel and Redis nodes can form one cluster, and `redis-cli --cluster`
//! creates, checks and reshards it. Under `tls-cluster` the bus speaks
//! TLS and nodes announce their TLS client ports, with the plaintext ones
//! beside them for plain clients ([`use_pport`]).
//!
//! - [`state`]: the node's view (nodes, slots, epochs), the handling of
//!   each bus message, failure detection and the replicas' election.
//! - [`bus`]: the `keel-cluster-bus` thread: the bus listener, the links,
//!   the 100 ms cron.
//! - here: start-up (nodes.conf), the slot table the workers read without
//!   a lock, the redirection of a command ([`redirect`]), and the effects
//!   a change has on the rest of the server.
//!
//! The keyspace has one shard per slot in cluster mode (`Server::new`), so
//! CLUSTER COUNTKEYSINSLOT is a length, GETKEYSINSLOT a walk of one table,
//! and dropping a lost slot's keys empties one shard.

pub mod bus;
pub mod state;

use crate::pause::{Mode, Purpose};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use keel_cluster::{flags, NodeLine, NodeName, NodesFile, SLOTS};
use keel_engine::slot::key_slot;
use parking_lot::Mutex;
use smallvec::SmallVec;

use crate::client::{Client, Multi};
use crate::command::CommandSpec;
use crate::config::Config;
use crate::server::{unix_ms, Server};
use state::{Effect, Env, Node, State};

/// The slot table's bits, per slot: what a command's check reads.
const MINE: u8 = 1;
const MIGRATING: u8 = 2;
const IMPORTING: u8 = 4;
/// Served by this replica's master (READONLY reads are served here).
const MASTER_OWNS: u8 = 8;
/// Served by some node.
const ASSIGNED: u8 = 16;

/// A message to publish on the bus: (shard channel, channel, message).
type Publish = (bool, Vec<u8>, Vec<u8>);

pub struct Cluster {
    state: Mutex<State>,
    /// Per slot, the bits above: mirrored from `state` after every change.
    slots: Box<[AtomicU8]>,
    ok: AtomicBool,
    /// Wakes the bus thread (a MEET to send, a message to publish).
    waker: mio::Waker,
    /// PUBLISHes to send on the bus: kept apart from `state` because a
    /// command that publishes may hold shard locks, which must never wait
    /// for the cluster lock while the bus thread's own work needs them.
    publishes: Mutex<Vec<Publish>>,
    /// The port the bus listens on since start (`port` + 10000 unless
    /// `cluster-port`): what this node announces even after CONFIG SET
    /// port, where Redis would announce a port it does not listen on.
    pub bus_port: u16,
}

/// Why cluster mode could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("Unrecoverable error: corrupted cluster config file \"{0}\": {1}")]
    Corrupt(String, String),
    #[error("Can't open the cluster config file {0}: {1}")]
    Io(String, io::Error),
    #[error("Can't bind the cluster bus port {0}: {1}")]
    Bind(u16, io::Error),
}

impl Cluster {
    /// Loads nodes.conf (or makes a new node) and binds the bus port.
    pub fn open(config: &Config) -> Result<(Cluster, bus::Bus), StartError> {
        let path = config.dir.join(&config.cluster.config_file);
        let poll = mio::Poll::new().map_err(|e| StartError::Io(path.display().to_string(), e))?;
        let waker = mio::Waker::new(poll.registry(), bus::WAKER)
            .map_err(|e| StartError::Io(path.display().to_string(), e))?;
        let registry = poll.registry().try_clone().map_err(|e| StartError::Io(path.display().to_string(), e))?;
        let env = Env { now: unix_ms(), ..Env::default() };
        let mut state = match fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => load(&text, path.clone(), registry, env)
                .map_err(|e| StartError::Corrupt(path.display().to_string(), e))?,
            Ok(_) => State::new(NodeName::random(), path.clone(), registry, env),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let state = State::new(NodeName::random(), path.clone(), registry, env);
                tracing::info!("No cluster configuration found, I'm {}", state.myself);
                state
            }
            Err(e) => return Err(StartError::Io(path.display().to_string(), e)),
        };
        let bus_port = bus_port(config);
        let listeners = crate::listen::bind_plain(config, bus_port).map_err(|e| StartError::Bind(bus_port, e))?;
        state.dirty = true;
        save(&mut state).map_err(|e| StartError::Io(path.display().to_string(), e))?;
        let cluster = Cluster {
            state: Mutex::new(state),
            slots: (0..SLOTS).map(|_| AtomicU8::new(0)).collect(),
            ok: AtomicBool::new(false),
            waker,
            publishes: Mutex::new(Vec::new()),
            bus_port,
        };
        cluster.mirror(&cluster.state.lock());
        Ok((cluster, bus::Bus::new(poll, listeners)))
    }

    /// Runs `f` on the state under the lock, with the server's settings
    /// read afresh; then saves what changed, mirrors the slot table and,
    /// with the lock released, applies what `f` asked of the server (and
    /// has blocked clients redirected if a slot left).
    pub fn with<R>(&self, server: &Server, f: impl FnOnce(&mut State) -> R) -> R {
        let (result, effects, lost) = {
            let mut st = self.state.lock();
            st.env = env(server, &st, self.bus_port);
            st.announce_myself();
            let result = f(&mut st);
            if st.update_state {
                st.judge_state();
            }
            if st.dirty {
                if let Err(e) = save(&mut st) {
                    tracing::warn!("Could not save the cluster configuration: {e}");
                }
            }
            let lost = self.mirror(&st);
            (result, std::mem::take(&mut st.effects), lost)
        };
        for effect in effects {
            apply(server, effect);
        }
        if lost && server.blocking.any() {
            server.broadcast(|| crate::client::Message::RedirectBlocked);
        }
        result
    }

    /// Publishes the slots' bits for the lock-free redirection. Each cell
    /// is written once with its whole value: clearing it and then setting
    /// MIGRATING or IMPORTING in a second step would let a concurrent
    /// redirection see a moving slot as stable. True if a slot left this
    /// node's shard or the cluster went down: blocked clients may have to
    /// go elsewhere.
    fn mirror(&self, st: &State) -> bool {
        let me = Some(st.myself);
        let master = st.me().master.filter(|_| st.me().is_replica());
        let mut lost = false;
        for (slot, (cell, owner)) in self.slots.iter().zip(&st.owners).enumerate() {
            let mut bits = 0;
            if owner.is_some() {
                bits |= ASSIGNED;
                if *owner == me {
                    bits |= MINE;
                }
                if *owner == master {
                    bits |= MASTER_OWNS;
                }
            }
            let slot = slot as u16;
            if st.migrating.contains_key(&slot) {
                bits |= MIGRATING;
            }
            if st.importing.contains_key(&slot) {
                bits |= IMPORTING;
            }
            // One writer (under the state lock): a cell left as it was is
            // not written, so the workers' cached copies stay valid.
            let was = cell.load(Ordering::Relaxed);
            if was != bits {
                cell.store(bits, Ordering::Relaxed);
                lost |= was & (MINE | MASTER_OWNS) & !bits != 0;
            }
        }
        let was_ok = self.ok.swap(st.ok, Ordering::Relaxed);
        lost || (was_ok && !st.ok)
    }

    /// Queues a PUBLISH (or SPUBLISH) for the other nodes.
    pub fn publish(&self, shard: bool, channel: &[u8], message: &[u8]) {
        self.publishes.lock().push((shard, channel.to_vec(), message.to_vec()));
        let _ = self.waker.wake();
    }

    /// Asks the bus thread to look at the state now (a MEET to send).
    pub fn wake(&self) {
        let _ = self.waker.wake();
    }

    /// The bus's open links, both ways (INFO cluster_connections).
    pub fn links(&self) -> usize {
        self.state.lock().links.len()
    }

    /// What the bus's links hold (INFO mem_cluster_links).
    pub fn links_memory(&self) -> u64 {
        self.state.lock().links.values().map(|l| l.memory() as u64).sum()
    }

    pub fn is_ok(&self) -> bool {
        self.ok.load(Ordering::Relaxed)
    }

    pub fn serves(&self, slot: u16) -> bool {
        self.slots[slot as usize].load(Ordering::Relaxed) & MINE != 0
    }
}

/// The bus port: `cluster-port`, or the client port + 10000 (under
/// `tls-cluster`, the TLS one).
pub fn bus_port(config: &Config) -> u16 {
    let client_port = if config.tls.cluster { config.tls.port } else { config.port };
    match config.cluster.port {
        0 => client_port.wrapping_add(10_000),
        port => port,
    }
}

/// Redis's deriveAnnouncedPorts: the client port this node announces and,
/// under `tls-cluster`, where the announced one is TLS, the plaintext one.
fn announced_ports(config: &Config) -> (u16, u16) {
    let c = &config.cluster;
    let or = |announced: u16, own: u16| if announced != 0 { announced } else { own };
    match config.tls.cluster {
        true if c.announce_tls_port != 0 => (c.announce_tls_port, c.announce_port),
        true => (config.tls.port, config.port),
        false => (or(c.announce_port, config.port), 0),
    }
}

/// Redis's `use_pport`: under `tls-cluster`, a client on a plain
/// connection is told nodes' plaintext ports ([`Node::client_port`]).
pub fn use_pport(config: &Config, client_tls: bool) -> bool {
    !client_tls && config.tls.cluster
}

/// The server's settings and replication offsets as the state reads them;
/// `bus_port` is the one the bus has listened on since start.
fn env(server: &Server, st: &State, bus_port: u16) -> Env {
    let config = server.config.read();
    let c = &config.cluster;
    let replica = st.me().is_replica().then(|| crate::replica::status(server)).flatten();
    let (repl_offset, master_silence_ms) = match &replica {
        Some(status) => {
            let silence_s = if status.link_up { status.last_io_seconds_ago } else { status.link_down_since_seconds };
            (status.offset.max(0) as u64, silence_s.max(0) as u64 * 1000)
        }
        None => (server.repl.end(), 0),
    };
    let (port, pport) = announced_ports(&config);
    let tls = match (config.tls.cluster, server.tls.read().as_ref()) {
        (true, Some(crate::tls::Contexts { bus: Some(bus), client: Some(client), .. })) => Some((bus.clone(), client.clone())),
        _ => None,
    };
    Env {
        now: unix_ms(),
        port,
        pport,
        tls,
        cport: if c.announce_bus_port != 0 { c.announce_bus_port } else { bus_port },
        announce_ip: c.announce_ip.clone(),
        hostname: c.announce_hostname.clone(),
        source_addr: config.bind_source_addr.clone(),
        node_timeout: c.node_timeout,
        link_sendbuf_limit: c.link_sendbuf_limit,
        require_full_coverage: c.require_full_coverage,
        replica_validity_factor: u64::from(c.replica_validity_factor),
        repl_ping_period_s: config.repl_ping_replica_period,
        replica_no_failover: c.replica_no_failover,
        allow_replica_migration: c.allow_replica_migration,
        migration_barrier: u64::from(c.migration_barrier),
        repl_offset,
        master_silence_ms,
    }
}

fn apply(server: &Server, effect: Effect) {
    match effect {
        Effect::Follow(host, port) => crate::replica::follow(server, host, port),
        Effect::StopFollowing => {
            crate::replica::stop_following(server);
        }
        Effect::DropSlotKeys(slot) => {
            let dropped = drop_slot_keys(server, slot);
            if dropped > 0 {
                tracing::warn!("Deleted {dropped} keys from slot {slot}: it is served by another node now");
            }
        }
        Effect::DropSlotChannels(slot) => crate::pubsub::drop_slot_channels(server, slot),
        Effect::Publish { shard, channel, message } => {
            let kind = if shard { crate::pubsub::Kind::Shard } else { crate::pubsub::Kind::Channel };
            let published = server.pubsub.publish(None, kind, &channel, &message);
            crate::pubsub::deliver(server, published.others);
        }
        Effect::PauseWrites(until_ms) => {
            server.pauses.pause(Purpose::Failover, until_ms, Mode::Writes, crate::server::unix_ms());
        }
        Effect::ResumeWrites => {
            // Only the failover's own pause: a CLIENT PAUSE stays.
            server.pauses.unpause(Purpose::Failover);
            server.broadcast(|| crate::client::Message::Resume);
        }
    }
}

/// Redis's delKeysInSlot: each key goes as a DEL in the journal and the
/// replication stream, with its keyspace event.
pub fn drop_slot_keys(server: &Server, slot: u16) -> usize {
    let index = server.keyspace.shard_of_slot(slot);
    let mut locked = server.keyspace.lock_one(index);
    let shard = locked.shard(index);
    let keys: Vec<Box<[u8]>> =
        shard.db(0).iter().filter(|(k, _)| key_slot(k) == slot).map(|(k, _)| Box::from(k)).collect();
    for key in &keys {
        shard.db(0).remove(key);
        shard.db(0).signal_modified(key);
        if crate::durability::changes_logged(server) {
            let (lsn, _) = crate::durability::append(server, 0, &[b"DEL".as_slice(), key], None);
            shard.removed_lsn = shard.removed_lsn.max(lsn);
        }
        let mut out = Vec::new();
        crate::notify::event(server, crate::notify::GENERIC, "del", key, 0, &mut out);
        crate::pubsub::deliver(server, out);
    }
    // Clients caching these keys hear they are gone, as Redis's
    // delKeysInSlot signals each.
    if server.tracking.active() {
        crate::tracking::collect(server, std::iter::once(shard), None);
        drop(locked);
        crate::tracking::flush(server, None);
    }
    keys.len()
}

/// How many keys `slot` holds.
pub fn count_keys_in_slot(server: &Server, slot: u16) -> usize {
    let index = server.keyspace.shard_of_slot(slot);
    let mut locked = server.keyspace.lock_one(index);
    // A cluster node's keyspace has one shard per slot (`Server::new`).
    locked.shard(index).db(0).len()
}

/// Keys in database `db`, every shard counted.
pub fn keys_in_db(server: &Server, db: usize) -> usize {
    (0..server.keyspace.shard_count()).map(|i| server.keyspace.lock_one(i).shard(i).db(db).len()).sum()
}

/// Whether `key` is in database 0 and alive (Redis's lookup without
/// expiring it), its shard locked for the look.
pub fn key_exists(server: &Server, key: &[u8]) -> bool {
    let index = server.keyspace.shard_of_key(key);
    alive(server.keyspace.lock_one(index).shard(index).db(0).peek(key))
}

/// A key past its time is missing to a migration, as to Redis's lookup.
fn alive(entry: Option<&keel_engine::Entry>) -> bool {
    entry.is_some_and(|e| !e.is_expired(unix_ms()))
}

/// Redis's scriptVerifyClusterState: a command a script calls must touch
/// keys this node serves and, unless the script allows cross-slot keys,
/// keys of one slot (`slot`: the one the script's keys so far hashed to).
pub fn script_refusal(
    ctx: &mut crate::command::Ctx<'_>,
    spec: &CommandSpec,
    argv: &[&[u8]],
    slot: &std::cell::Cell<Option<u16>>,
    allow_cross_slot: bool,
) -> Option<&'static str> {
    let server = ctx.server;
    if server.cluster.is_none() || ctx.client.is_master || ctx.client.is_loader {
        return None;
    }
    // The script holds every shard: keys are looked up through its locks.
    let dbs = &mut ctx.dbs;
    if let Some(error) = redirect(server, ctx.client, spec, argv, None, |key| alive(dbs.of_in(0, key).peek(key))) {
        return Some(match error.as_str() {
            "CLUSTERDOWN The cluster is down and only accepts read commands" => {
                "Script attempted to execute a write command while the cluster is down and readonly"
            }
            "CLUSTERDOWN The cluster is down" => "Script attempted to execute a command while the cluster is down",
            _ => "Script attempted to access a non local key in a cluster node",
        });
    }
    if !allow_cross_slot {
        if let Some(&at) = spec.key_indexes(argv).first() {
            let this = key_slot(argv[at]);
            match slot.get() {
                None => slot.set(Some(this)),
                Some(first) if first != this => {
                    return Some("Script attempted to access keys that do not hash to the same slot");
                }
                Some(_) => {}
            }
        }
    }
    None
}

// ---- nodes.conf ----

fn load(text: &str, path: PathBuf, registry: mio::Registry, env: Env) -> Result<State, String> {
    let file = NodesFile::parse(text).map_err(|e| e.to_string())?;
    let myself = file
        .nodes
        .iter()
        .find(|n| n.flags & flags::MYSELF != 0)
        .map(|n| n.name)
        .ok_or_else(|| "no node is flagged myself".to_string())?;
    let mut st = State::new(myself, path, registry, env);
    st.current_epoch = file.current_epoch;
    st.last_vote_epoch = file.last_vote_epoch;
    for line in &file.nodes {
        let mut node = Node::new(line.name, line.flags, st.env.now);
        node.ip = line.ip.clone();
        node.port = line.port;
        node.cport = line.cport;
        node.hostname = line.hostname.clone().unwrap_or_default();
        node.master = line.master;
        node.config_epoch = line.config_epoch;
        // As Redis: a loaded node is not trusted to be reachable.
        node.ping_sent = 0;
        node.pong_received = line.pong_received_ms;
        if node.name != myself {
            node.flags &= !(flags::MYSELF | flags::PFAIL);
        }
        st.nodes.insert(node.name, node);
    }
    for line in &file.nodes {
        for &(from, to) in &line.slots {
            for slot in from..=to {
                st.add_slot(line.name, slot);
            }
        }
        if line.name == myself {
            st.migrating.extend(line.migrating.iter().copied());
            st.importing.extend(line.importing.iter().copied());
        }
        // A master with a replica is a migration target should it lose
        // them all (Redis's loader adds each replica to its master).
        if let Some(master) = line.master.filter(|_| line.flags & flags::REPLICA != 0).and_then(|m| st.nodes.get_mut(&m)) {
            master.flags |= flags::MIGRATE_TO;
        }
    }
    if st.me().is_replica() {
        if let Some(master) = st.me().master.and_then(|m| st.nodes.get(&m)) {
            st.effects.push(Effect::Follow(master.ip.clone(), master.port));
        }
    }
    Ok(st)
}

/// The node as CLUSTER NODES (`use_pport`: for a plain client under
/// `tls-cluster`) and nodes.conf describe it.
pub fn node_line(st: &State, node: &Node, use_pport: bool) -> NodeLine {
    let me = node.name == st.myself;
    NodeLine {
        name: node.name,
        ip: node.ip.clone(),
        port: node.client_port(use_pport),
        cport: node.cport,
        hostname: Some(node.hostname.clone()).filter(|h| !h.is_empty()),
        flags: node.flags,
        master: node.master.filter(|_| node.is_replica()),
        ping_sent_ms: node.ping_sent,
        pong_received_ms: node.pong_received,
        config_epoch: node.config_epoch,
        connected: me || node.link.is_some(),
        slots: node.slots.ranges(),
        migrating: if me { st.migrating.iter().map(|(s, n)| (*s, *n)).collect() } else { Vec::new() },
        importing: if me { st.importing.iter().map(|(s, n)| (*s, *n)).collect() } else { Vec::new() },
    }
}

/// nodes.conf's contents: every node but those in a handshake, myself
/// first, then by name (Redis's order is its dict's, arbitrary).
pub fn nodes_file(st: &State) -> NodesFile {
    let mut nodes: Vec<&Node> = st.nodes.values().filter(|n| !n.in_handshake() || n.name == st.myself).collect();
    nodes.sort_by_key(|n| (n.name != st.myself, n.name));
    NodesFile {
        nodes: nodes.into_iter().map(|n| node_line(st, n, false)).collect(),
        current_epoch: st.current_epoch,
        last_vote_epoch: st.last_vote_epoch,
    }
}

/// Writes nodes.conf. When an epoch or a vote changed it goes to a
/// temporary file, synced, renamed over the old one, the directory synced:
/// a vote given twice, or an epoch reused, could elect two masters. Other
/// changes (slots, addresses, flags), which gossip restores, are written
/// over the old file in place without a sync, as Redis's
/// clusterSaveConfig does: a rename makes the file system write its data
/// out, and resharding saves after each of its thousands of commands.
pub fn save(st: &mut State) -> io::Result<()> {
    let text = nodes_file(st).write();
    let epochs = (st.current_epoch, st.last_vote_epoch, st.me().config_epoch);
    if epochs != st.saved_epochs {
        write_synced(&st.path, text.as_bytes())?;
    } else {
        write_in_place(&st.path, text.as_bytes())?;
    }
    st.saved_epochs = epochs;
    st.dirty = false;
    Ok(())
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp-keel");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        File::open(if dir.as_os_str().is_empty() { Path::new(".") } else { dir })?.sync_all()?;
    }
    Ok(())
}

/// Overwrites from the start, padding with newlines to the old length,
/// then cuts the padding: the file is never shorter than a whole
/// description while it is written.
fn write_in_place(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = fs::OpenOptions::new().write(true).create(true).truncate(false).open(path)?;
    let old_len = file.metadata()?.len() as usize;
    let mut padded = bytes.to_vec();
    padded.resize(old_len.max(bytes.len()), b'\n');
    file.write_all(&padded)?;
    if padded.len() > bytes.len() {
        file.set_len(bytes.len() as u64)?;
    }
    Ok(())
}

// ---- Redirection ----

/// Redis's clusterRedirectBlockedClientIfNeeded: the error that ends the
/// wait of a client blocked on `key` once the cluster is down or the key's
/// slot is served elsewhere (unless it is being imported here, or the
/// client reads on its master's replica: `replica_read`). `client_tls`:
/// the client came over TLS.
pub fn blocked_redirect(server: &Server, key: &[u8], replica_read: bool, client_tls: bool) -> Option<String> {
    let cluster = server.cluster.as_ref()?;
    if !cluster.is_ok() {
        return Some("CLUSTERDOWN The cluster is down".into());
    }
    let slot = key_slot(key);
    let bits = cluster.slots[slot as usize].load(Ordering::Relaxed);
    if bits & (MINE | IMPORTING) != 0 || (replica_read && bits & MASTER_OWNS != 0) {
        return None;
    }
    let st = cluster.state.lock();
    let (preferred, use_pport) = {
        let config = server.config.read();
        (config.cluster.preferred_endpoint.clone(), use_pport(&config, client_tls))
    };
    Some(match st.owners[slot as usize].and_then(|o| st.nodes.get(&o)) {
        Some(owner) => format!("MOVED {slot} {}:{}", owner.endpoint(&preferred), owner.client_port(use_pport)),
        None => "CLUSTERDOWN Hash slot not served".into(),
    })
}

/// The arguments a command is routed by: its keys, or a shard pub/sub
/// command's channels (Redis routes by their legacy key range).
fn routed_by(spec: &CommandSpec, argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    match spec.name {
        "ssubscribe" | "sunsubscribe" => (1..argv.len()).collect(),
        "spublish" => smallvec::smallvec![1],
        _ => spec.key_indexes(argv),
    }
}

/// Redis's getNodeByQuery and clusterRedirectClient: the error that sends
/// the command elsewhere, if it must go elsewhere. `queued` is EXEC's
/// transaction; `exists` says whether a key is here (asked only for a
/// slot being migrated or imported). None: run it here.
pub fn redirect<'a>(
    server: &Server,
    client: &Client,
    spec: &CommandSpec,
    argv: &[&'a [u8]],
    queued: Option<&'a Multi>,
    mut exists: impl FnMut(&[u8]) -> bool,
) -> Option<String> {
    let cluster = server.cluster.as_ref()?;
    let mut first: Option<&[u8]> = None;
    let mut slot = 0u16;
    let mut multiple_keys = false;
    let mut keys: SmallVec<[&[u8]; 4]> = SmallVec::new();
    // Whether a queued command writes; the command's own is asked only
    // off the common path below, as a script's costs a lookup.
    let mut any_write = false;
    // Each key of the command (or of every queued one), in order, as
    // Redis's getNodeByQuery visits them.
    let mut visit = |key: &'a [u8]| -> Result<(), String> {
        match first {
            None => {
                first = Some(key);
                slot = key_slot(key);
                // As Redis, an unserved first key answers before any
                // other key is looked at.
                if cluster.slots[slot as usize].load(Ordering::Relaxed) & ASSIGNED == 0 {
                    return Err("CLUSTERDOWN Hash slot not served".into());
                }
            }
            Some(f) if f != key => {
                if key_slot(key) != slot {
                    return Err("CROSSSLOT Keys in request don't hash to the same slot".into());
                }
                multiple_keys = true;
            }
            Some(_) => {}
        }
        keys.push(key);
        Ok(())
    };
    let visited = match queued {
        Some(multi) => multi.queued.iter().try_for_each(|args| {
            let argv: SmallVec<[&[u8]; 8]> = args.iter().map(|a| a.as_slice()).collect();
            let Ok((_, spec)) = crate::command::resolve(&argv) else { return Ok(()) };
            any_write |= crate::scripting::writes(server, spec, &argv);
            routed_by(spec, &argv).into_iter().try_for_each(|at| visit(args[at].as_slice()))
        }),
        None => routed_by(spec, argv).into_iter().try_for_each(|at| visit(argv[at])),
    };
    if let Err(e) = visited {
        return Some(e);
    }
    let shard_pubsub = matches!(spec.name, "ssubscribe" | "sunsubscribe" | "spublish");
    first?;
    let bits = cluster.slots[slot as usize].load(Ordering::Relaxed);
    let ok = cluster.is_ok();
    // The common case: a slot of ours, stable, a healthy cluster.
    if bits == MINE | ASSIGNED && ok {
        return None;
    }
    let (owner_addr, migrating_to, config) = {
        let st = cluster.state.lock();
        let config = server.config.read();
        let preferred = config.cluster.preferred_endpoint.as_str();
        let use_pport = use_pport(&config, client.tls);
        let addr = |name: &NodeName| st.nodes.get(name).map(|n| format!("{}:{}", n.endpoint(preferred), n.client_port(use_pport)));
        let owner = st.owners[slot as usize];
        (
            owner.map(|o| addr(&o)),
            st.migrating.get(&slot).and_then(addr),
            (config.cluster.allow_reads_when_down, config.cluster.allow_pubsubshard_when_down),
        )
    };
    let Some(owner_addr) = owner_addr else {
        return Some("CLUSTERDOWN Hash slot not served".into());
    };
    let any_write = any_write || crate::scripting::writes(server, spec, argv);
    if !ok {
        let (reads_when_down, pubsub_when_down) = config;
        if shard_pubsub {
            if !pubsub_when_down {
                return Some("CLUSTERDOWN The cluster is down".into());
            }
        } else if !reads_when_down {
            return Some("CLUSTERDOWN The cluster is down".into());
        } else if any_write {
            return Some("CLUSTERDOWN The cluster is down and only accepts read commands".into());
        }
    }
    let migrating = bits & MINE != 0 && bits & MIGRATING != 0;
    let importing = bits & MINE == 0 && bits & IMPORTING != 0;
    if (migrating || importing) && spec.name == "migrate" {
        return None;
    }
    let (mut missing, mut existing) = (0, 0);
    if (migrating || importing) && !shard_pubsub {
        for key in &keys {
            if exists(key) {
                existing += 1;
            } else {
                missing += 1;
            }
        }
    }
    if migrating && missing > 0 {
        if existing > 0 {
            return Some("TRYAGAIN Multiple keys request during rehashing of slot".into());
        }
        return migrating_to.map(|to| format!("ASK {slot} {to}"));
    }
    let asking = client.asking || spec.has(crate::command::flags::ASKING);
    if importing && asking {
        if multiple_keys && missing > 0 {
            return Some("TRYAGAIN Multiple keys request during rehashing of slot".into());
        }
        return None;
    }
    if (client.readonly || shard_pubsub) && !any_write && bits & MASTER_OWNS != 0 {
        return None;
    }
    if bits & MINE != 0 {
        return None;
    }
    owner_addr.map(|to| format!("MOVED {slot} {to}"))
}
