//! A node's view of the cluster and what the bus changes in it: Redis
//! 7.0's `clusterState` and `clusterProcessPacket`, `clusterCron`,
//! `clusterUpdateState` and the replica's election, with the links to the
//! other nodes in the same struct so that one lock covers a message and
//! the replies it causes.
//!
//! Nothing here takes a shard lock or touches the replication link: what
//! the server must do about a change (drop a lost slot's keys, follow a
//! new master, deliver a message published elsewhere) is queued as an
//! [`Effect`] and done by the caller once the lock is released, so that
//! the cluster lock always comes after any shard lock.

use std::collections::{BTreeMap, HashMap};
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use keel_cluster::{flags, mflags, Body, Extension, Gossip, Header, Message, MessageType, NodeName, SlotBitmap, SLOTS};
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};

/// A link's token in the bus thread's poll; 0 and 1 are the listener and
/// the waker.
pub type LinkId = usize;
pub const FIRST_LINK: LinkId = 2;

/// Redis's CLUSTER_FAIL_REPORT_VALIDITY_MULT: a failure report counts for
/// this many node timeouts.
const FAIL_REPORT_VALIDITY_MULT: u64 = 2;
/// CLUSTER_FAIL_UNDO_TIME_MULT: a failed master that still has its slots
/// is cleared after this many node timeouts without a replacement.
const FAIL_UNDO_TIME_MULT: u64 = 2;
/// CLUSTER_MF_TIMEOUT: how long a manual failover may take, ms.
pub const MF_TIMEOUT_MS: u64 = 5000;
/// CLUSTER_SLAVE_MIGRATION_DELAY: a master must stay orphaned this long,
/// ms, before a replica migrates to it (its own replicas may just be
/// announcing a failover).
const REPLICA_MIGRATION_DELAY_MS: u64 = 5000;
/// CLUSTER_WRITABLE_DELAY: a master starts in the fail state this long.
const WRITABLE_DELAY_MS: u64 = 2000;
/// Redis's CLUSTERMSG_TYPE_COUNT: the message types counted in CLUSTER INFO.
pub const MESSAGE_TYPES: usize = 11;
/// A forgotten node is not re-added from gossip for this long (CLUSTER
/// FORGET's blacklist), seconds.
pub const BLACKLIST_TTL_S: u64 = 60;

/// What the server must do after a change, outside the cluster lock.
#[derive(Debug)]
pub enum Effect {
    /// Replicate this master (`replicaof ip port`).
    Follow(String, u16),
    /// Become a master, keeping the data.
    StopFollowing,
    /// The slot went to another node: its keys are dropped.
    DropSlotKeys(u16),
    /// A slot of this node's shard (served by it or by its master) lost
    /// its owner: its shard channels' subscribers are unsubscribed.
    DropSlotChannels(u16),
    /// A message published on another node (`shard`: SPUBLISH).
    Publish { shard: bool, channel: Vec<u8>, message: Vec<u8> },
    /// Pause writes until this Unix ms (a manual failover's master side).
    PauseWrites(u64),
    /// End that pause early.
    ResumeWrites,
}

/// What the state reads from the server's settings and replication at the
/// start of each locked operation.
#[derive(Clone, Default)]
pub struct Env {
    pub now: u64,
    /// The client port announced, and under `tls-cluster` the plaintext
    /// one (`port` is then the TLS one); 0, none.
    pub port: u16,
    pub pport: u16,
    pub cport: u16,
    /// Under `tls-cluster`: the bus's links speak TLS, accepted with the
    /// first configuration and opened with the second.
    pub tls: Option<(Arc<rustls::ServerConfig>, Arc<rustls::ClientConfig>)>,
    pub announce_ip: String,
    pub hostname: String,
    /// `bind-source-addr`: where links to other nodes are made from.
    pub source_addr: Option<String>,
    pub node_timeout: u64,
    /// `cluster-link-sendbuf-limit`: a link holding more unsent bytes than
    /// this (0: no limit) is freed by the cron.
    pub link_sendbuf_limit: u64,
    pub require_full_coverage: bool,
    pub replica_validity_factor: u64,
    pub repl_ping_period_s: u64,
    pub replica_no_failover: bool,
    pub allow_replica_migration: bool,
    /// `cluster-migration-barrier`: the working replicas a master keeps
    /// before one of them may migrate to an orphaned master.
    pub migration_barrier: u64,
    /// The master's replication offset, or what a replica processed.
    pub repl_offset: u64,
    /// A replica's link: ms since the master was last heard from, or since
    /// the link went down (Redis's data age).
    pub master_silence_ms: u64,
}

pub struct Node {
    pub name: NodeName,
    pub flags: u16,
    pub ip: String,
    pub port: u16,
    pub pport: u16,
    pub cport: u16,
    pub hostname: String,
    pub master: Option<NodeName>,
    pub config_epoch: u64,
    pub slots: SlotBitmap,
    pub numslots: usize,
    pub ctime: u64,
    pub ping_sent: u64,
    pub pong_received: u64,
    pub data_received: u64,
    pub fail_time: u64,
    pub voted_time: u64,
    /// Since when this master has been orphaned (no working replica left
    /// of those it had); 0 while it is not.
    pub orphaned_time: u64,
    pub repl_offset: u64,
    /// Masters that said this node fails, and when they said it last.
    pub fail_reports: Vec<(NodeName, u64)>,
    /// The link this node opened to us and the one we opened to it.
    pub link: Option<LinkId>,
    pub inbound_link: Option<LinkId>,
}

impl Node {
    pub fn new(name: NodeName, flags: u16, now: u64) -> Node {
        Node {
            name,
            flags,
            ip: String::new(),
            port: 0,
            pport: 0,
            cport: 0,
            hostname: String::new(),
            master: None,
            config_epoch: 0,
            slots: SlotBitmap::empty(),
            numslots: 0,
            ctime: now,
            ping_sent: 0,
            pong_received: 0,
            data_received: 0,
            fail_time: 0,
            voted_time: 0,
            orphaned_time: 0,
            repl_offset: 0,
            fail_reports: Vec::new(),
            link: None,
            inbound_link: None,
        }
    }

    pub fn has(&self, flag: u16) -> bool {
        self.flags & flag != 0
    }

    pub fn is_master(&self) -> bool {
        self.has(flags::MASTER)
    }

    pub fn is_replica(&self) -> bool {
        self.has(flags::REPLICA)
    }

    pub fn in_handshake(&self) -> bool {
        self.has(flags::HANDSHAKE)
    }

    /// Where a client is sent to reach this node (Redis's
    /// getPreferredEndpoint), by `cluster-preferred-endpoint-type`.
    pub fn endpoint(&self, preferred: &str) -> &str {
        match preferred {
            "ip" => &self.ip,
            "hostname" if !self.hostname.is_empty() => &self.hostname,
            "hostname" => "?",
            _ => "",
        }
    }

    /// The port a client is sent to: under `tls-cluster` a plain client
    /// gets the plaintext one, where the node announced one
    /// (`super::use_pport`).
    pub fn client_port(&self, use_pport: bool) -> u16 {
        if use_pport && self.pport != 0 {
            self.pport
        } else {
            self.port
        }
    }

    pub fn failed(&self) -> bool {
        self.has(flags::FAIL)
    }

    pub fn timed_out(&self) -> bool {
        self.has(flags::PFAIL)
    }
}

/// One TCP connection of the bus, either way.
pub struct Link {
    stream: BusStream,
    rbuf: Vec<u8>,
    wbuf: Vec<u8>,
    pub node: Option<NodeName>,
    pub inbound: bool,
    pub ctime: u64,
}

impl Link {
    /// Bytes waiting to be written.
    pub fn pending_out(&self) -> usize {
        self.wbuf.len()
    }

    /// What the link holds: itself and its buffers (Redis's
    /// `mem_cluster_links` counts the same).
    pub fn memory(&self) -> usize {
        std::mem::size_of::<Link>() + self.rbuf.capacity() + self.wbuf.capacity()
    }
}

/// A link's socket, with a TLS session over it under `tls-cluster`
/// (`keel_tls`: the bus thread polls it, as a worker polls a client's).
enum BusStream {
    Plain(TcpStream),
    Tls(Box<keel_tls::TlsStream>),
}

impl BusStream {
    fn tcp(&self) -> &TcpStream {
        match self {
            BusStream::Plain(s) => s,
            BusStream::Tls(s) => &s.sock,
        }
    }

    fn socket(&mut self) -> &mut TcpStream {
        match self {
            BusStream::Plain(s) => s,
            BusStream::Tls(s) => &mut s.sock,
        }
    }
}

impl Read for BusStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            BusStream::Plain(s) => s.read(buf),
            BusStream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for BusStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            BusStream::Plain(s) => s.write(buf),
            BusStream::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Default)]
pub struct Election {
    pub auth_time: u64,
    pub auth_count: usize,
    pub auth_sent: bool,
    pub auth_rank: u64,
    pub auth_epoch: u64,
}

/// A manual failover (CLUSTER FAILOVER) in progress, on either side.
#[derive(Default)]
pub struct Manual {
    /// When it gives up (0: none running).
    pub end: u64,
    /// The replica side may start the election.
    pub can_start: bool,
    /// The master side: the replica that asked.
    pub replica: Option<NodeName>,
    /// The replica side: the paused master's offset, once it said.
    pub master_offset: Option<u64>,
    /// The master side: its writes are paused until then (Unix ms).
    pub paused_until: u64,
}

pub struct State {
    pub myself: NodeName,
    pub nodes: HashMap<NodeName, Node>,
    pub current_epoch: u64,
    pub last_vote_epoch: u64,
    pub owners: Vec<Option<NodeName>>,
    /// How many slots have an owner.
    assigned: usize,
    pub migrating: BTreeMap<u16, NodeName>,
    pub importing: BTreeMap<u16, NodeName>,
    pub ok: bool,
    /// Masters serving at least one slot.
    pub size: usize,
    pub blacklist: HashMap<NodeName, u64>,
    pub links: HashMap<LinkId, Link>,
    next_link: LinkId,
    registry: Registry,
    pub election: Election,
    pub manual: Manual,
    among_minority_time: u64,
    first_update_time: u64,
    pub stats_sent: [u64; MESSAGE_TYPES],
    pub stats_received: [u64; MESSAGE_TYPES],
    /// DEBUG DROP-CLUSTER-PACKET-FILTER: received messages of this type
    /// are dropped unread (-1: none), as Redis's tests cut a kind of
    /// message off.
    pub drop_filter: i64,
    /// Links freed over `cluster-link-sendbuf-limit` (CLUSTER INFO's
    /// `total_cluster_links_buffer_limit_exceeded`).
    pub links_buffer_limit_exceeded: u64,
    pub effects: Vec<Effect>,
    pub env: Env,
    /// nodes.conf.
    pub path: PathBuf,
    /// The configuration changed since it was last saved.
    pub dirty: bool,
    /// (current epoch, last vote epoch, config epoch) when last saved.
    pub saved_epochs: (u64, u64, u64),
    /// The state must be judged again (nodes or slots changed).
    pub update_state: bool,
    /// Cron ticks so far.
    iteration: u64,
}

impl State {
    pub fn new(myself: NodeName, path: PathBuf, registry: Registry, env: Env) -> State {
        let mut nodes = HashMap::new();
        nodes.insert(myself, Node::new(myself, flags::MYSELF | flags::MASTER, env.now));
        State {
            myself,
            nodes,
            current_epoch: 0,
            last_vote_epoch: 0,
            owners: vec![None; SLOTS],
            assigned: 0,
            migrating: BTreeMap::new(),
            importing: BTreeMap::new(),
            ok: false,
            // As Redis's clusterInit, until the first judgement counts.
            size: 1,
            blacklist: HashMap::new(),
            links: HashMap::new(),
            next_link: FIRST_LINK,
            registry,
            election: Election::default(),
            manual: Manual::default(),
            among_minority_time: 0,
            first_update_time: 0,
            stats_sent: [0; MESSAGE_TYPES],
            stats_received: [0; MESSAGE_TYPES],
            drop_filter: -1,
            links_buffer_limit_exceeded: 0,
            effects: Vec::new(),
            env,
            path,
            dirty: false,
            saved_epochs: (u64::MAX, u64::MAX, u64::MAX),
            update_state: true,
            iteration: 0,
        }
    }

    pub fn me(&self) -> &Node {
        &self.nodes[&self.myself]
    }

    /// Keeps this node's own entry on the ports and names it announces
    /// (Redis's clusterUpdateMyselfAnnouncedPorts and hostname).
    pub fn announce_myself(&mut self) {
        let (port, pport, cport, ip, hostname) =
            (self.env.port, self.env.pport, self.env.cport, self.env.announce_ip.clone(), self.env.hostname.clone());
        let me = self.me_mut();
        let changed = me.port != port
            || me.pport != pport
            || me.cport != cport
            || me.hostname != hostname
            || (!ip.is_empty() && me.ip != ip);
        if changed {
            me.port = port;
            me.pport = pport;
            me.cport = cport;
            me.hostname = hostname;
            if !ip.is_empty() {
                me.ip = ip;
            }
            self.dirty = true;
        }
        // `cluster-replica-no-failover` as a flag the others see (Redis's
        // clusterUpdateMyselfFlags): they pass this node over, in CLUSTER
        // NODES as in a failover's ranking.
        let nofailover = if self.env.replica_no_failover { flags::NOFAILOVER } else { 0 };
        let me = self.me_mut();
        if me.flags & flags::NOFAILOVER != nofailover {
            me.flags = (me.flags & !flags::NOFAILOVER) | nofailover;
            self.dirty = true;
        }
    }

    pub fn me_mut(&mut self) -> &mut Node {
        self.nodes.get_mut(&self.myself).expect("myself is a node")
    }

    /// The master whose slots this node serves: itself, or its master.
    pub fn my_master(&self) -> Option<NodeName> {
        let me = self.me();
        if me.is_master() {
            Some(self.myself)
        } else {
            me.master
        }
    }

    pub fn replicas_of(&self, master: &NodeName) -> impl Iterator<Item = &Node> {
        let master = *master;
        self.nodes.values().filter(move |n| n.is_replica() && n.master == Some(master))
    }

    // ---- Slots ----

    pub fn add_slot(&mut self, node: NodeName, slot: u16) -> bool {
        if self.owners[slot as usize].is_some() {
            return false;
        }
        let masters_have_replicas = self.nodes.values().any(|n| n.is_replica() && n.master.is_some());
        let Some(n) = self.nodes.get_mut(&node) else { return false };
        if !n.slots.get(slot) {
            n.slots.set(slot);
            n.numslots += 1;
            if n.numslots == 1 && masters_have_replicas {
                n.flags |= flags::MIGRATE_TO;
            }
        }
        self.owners[slot as usize] = Some(node);
        self.assigned += 1;
        true
    }

    pub fn del_slot(&mut self, slot: u16) -> bool {
        let Some(owner) = self.owners[slot as usize].take() else { return false };
        self.assigned -= 1;
        // Redis's clusterDelSlot: the slot leaves this node's shard.
        if owner == self.myself || self.me().master.is_some_and(|m| m == owner && self.me().is_replica()) {
            self.effects.push(Effect::DropSlotChannels(slot));
        }
        if let Some(n) = self.nodes.get_mut(&owner) {
            if n.slots.get(slot) {
                n.slots.clear(slot);
                n.numslots -= 1;
            }
        }
        true
    }

    fn del_node_slots(&mut self, node: &NodeName) {
        for slot in 0..SLOTS as u16 {
            if self.owners[slot as usize] == Some(*node) {
                self.del_slot(slot);
            }
        }
    }

    // ---- Nodes ----

    pub fn add_node(&mut self, node: Node) {
        self.nodes.insert(node.name, node);
    }

    /// Forgets a node: its slots, its links, the reports it made.
    pub fn del_node(&mut self, name: &NodeName) {
        for slot in 0..SLOTS as u16 {
            if self.importing.get(&slot) == Some(name) {
                self.importing.remove(&slot);
            }
            if self.migrating.get(&slot) == Some(name) {
                self.migrating.remove(&slot);
            }
        }
        for other in self.nodes.values_mut() {
            other.fail_reports.retain(|(by, _)| by != name);
        }
        self.del_node_slots(name);
        if let Some(node) = self.nodes.remove(name) {
            for link in [node.link, node.inbound_link].into_iter().flatten() {
                self.close_link(link);
            }
            // A master that loses its last replica no longer draws one
            // (Redis's clusterNodeRemoveSlave).
            self.replica_left(node.master);
        }
        self.dirty = true;
        self.update_state = true;
    }

    fn rename_node(&mut self, old: &NodeName, new: NodeName) {
        if let Some(mut node) = self.nodes.remove(old) {
            node.name = new;
            for link in [node.link, node.inbound_link].into_iter().flatten() {
                if let Some(l) = self.links.get_mut(&link) {
                    l.node = Some(new);
                }
            }
            self.nodes.insert(new, node);
        }
    }

    fn set_node_as_master(&mut self, name: &NodeName) {
        let myself = self.myself;
        let Some(n) = self.nodes.get_mut(name) else { return };
        if n.is_master() {
            return;
        }
        n.flags &= !flags::REPLICA;
        n.flags |= flags::MASTER;
        // A replica that took over from its master is a migration target
        // as that master was (Redis's clusterSetNodeAsMaster).
        if n.master.is_some() && *name != myself {
            n.flags |= flags::MIGRATE_TO;
        }
        let old = n.master.take();
        self.replica_left(old);
        self.dirty = true;
        self.update_state = true;
    }

    /// A replica left `master`: one left with none is no migration target
    /// any more (Redis's clusterNodeRemoveSlave).
    fn replica_left(&mut self, master: Option<NodeName>) {
        let Some(master) = master else { return };
        if self.replicas_of(&master).next().is_none() {
            if let Some(m) = self.nodes.get_mut(&master) {
                m.flags &= !flags::MIGRATE_TO;
            }
        }
    }

    /// The replicas of `master` not flagged as failed (Redis's
    /// clusterCountNonFailingSlaves).
    fn working_replicas(&self, master: &NodeName) -> usize {
        self.replicas_of(master).filter(|r| !r.failed()).count()
    }

    /// CLUSTER MEET and gossip-free discovery: a node known only by its
    /// address, under a random name until it answers.
    pub fn start_handshake(&mut self, ip: &str, port: u16, cport: u16) -> bool {
        let pending = self.nodes.values().any(|n| n.in_handshake() && n.ip == ip && n.port == port && n.cport == cport);
        if pending {
            return false;
        }
        let mut node = Node::new(NodeName::random(), flags::HANDSHAKE | flags::MEET, self.env.now);
        node.ip = ip.to_string();
        node.port = port;
        node.cport = cport;
        self.add_node(node);
        true
    }

    fn failure_reports(&mut self, name: &NodeName) -> usize {
        let validity = self.env.node_timeout * FAIL_REPORT_VALIDITY_MULT;
        let now = self.env.now;
        let Some(node) = self.nodes.get_mut(name) else { return 0 };
        node.fail_reports.retain(|(_, at)| now.saturating_sub(*at) <= validity);
        node.fail_reports.len()
    }

    // ---- Links ----

    /// Opens a link to `name` at its bus address (non-blocking; a failure
    /// shows as an error event).
    fn connect(&mut self, name: NodeName) -> io::Result<LinkId> {
        let node = &self.nodes[&name];
        let addr: SocketAddr = format!("{}:{}", bracketed(&node.ip), node.cport)
            .parse()
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad node address"))?;
        let stream = crate::listen::connect_nonblocking(self.env.source_addr.as_deref(), addr)?;
        let _ = stream.set_nodelay(true);
        let stream = match &self.env.tls {
            Some((_, client)) => {
                // The peer's certificate chain is checked, not its name (`crate::tls`).
                let name = rustls_pki_types::ServerName::from(addr.ip());
                let session = rustls::ClientConnection::new(client.clone(), name).map_err(io::Error::other)?;
                BusStream::Tls(Box::new(keel_tls::TlsStream::new(stream, session.into())))
            }
            None => BusStream::Plain(stream),
        };
        Ok(self.register(stream, Some(name), false))
    }

    /// Takes a connection accepted on the bus port.
    pub fn accept(&mut self, stream: TcpStream) -> io::Result<LinkId> {
        let _ = stream.set_nodelay(true);
        let stream = match &self.env.tls {
            Some((server, _)) => {
                let session = rustls::ServerConnection::new(server.clone()).map_err(io::Error::other)?;
                BusStream::Tls(Box::new(keel_tls::TlsStream::new(stream, session.into())))
            }
            None => BusStream::Plain(stream),
        };
        Ok(self.register(stream, None, true))
    }

    fn register(&mut self, mut stream: BusStream, node: Option<NodeName>, inbound: bool) -> LinkId {
        let id = self.next_link;
        self.next_link += 1;
        // A registration can only fail for a closed poll: the link then
        // stays silent and the cron's timeouts drop it.
        let _ = self.registry.register(stream.socket(), Token(id), Interest::READABLE | Interest::WRITABLE);
        let ctime = self.env.now;
        self.links.insert(id, Link { stream, rbuf: Vec::new(), wbuf: Vec::new(), node, inbound, ctime });
        id
    }

    pub fn close_link(&mut self, id: LinkId) {
        let Some(mut link) = self.links.remove(&id) else { return };
        let _ = self.registry.deregister(link.stream.socket());
        if let Some(node) = link.node.and_then(|n| self.nodes.get_mut(&n)) {
            if node.link == Some(id) {
                node.link = None;
            }
            if node.inbound_link == Some(id) {
                node.inbound_link = None;
            }
        }
    }

    /// Redis's clusterCron for a node's links: a send buffer mostly empty
    /// gives its room back, and one still over `cluster-link-sendbuf-limit`
    /// (a peer that stopped reading) is freed, to be made again.
    fn limit_link_buffers(&mut self, name: &NodeName) {
        let Some(n) = self.nodes.get(name) else { return };
        for id in [n.link, n.inbound_link].into_iter().flatten() {
            let Some(link) = self.links.get_mut(&id) else { continue };
            if link.wbuf.capacity() / 4 > link.wbuf.len() {
                link.wbuf.shrink_to_fit();
            }
            let held = link.wbuf.capacity() as u64;
            if self.env.link_sendbuf_limit > 0 && held > self.env.link_sendbuf_limit {
                let way = if link.inbound { "from" } else { "to" };
                tracing::warn!(
                    "Freeing cluster link({way} node {name}, used memory: {held}) due to exceeding send buffer memory limit."
                );
                self.close_link(id);
                self.links_buffer_limit_exceeded += 1;
            }
        }
    }

    /// DEBUG CLUSTERLINK KILL: drops the links with `node` of `direction`
    /// (`to`, `from` or `all`); the cron opens ours again.
    pub fn kill_links(&mut self, direction: &[u8], node: &[u8]) -> Result<(), String> {
        let name = NodeName::parse(node).filter(|n| self.nodes.contains_key(n));
        let name = name.ok_or_else(|| format!("Unknown node {}", String::from_utf8_lossy(node)))?;
        let n = &self.nodes[&name];
        let links = match direction.to_ascii_lowercase().as_slice() {
            b"to" => vec![n.link],
            b"from" => vec![n.inbound_link],
            b"all" => vec![n.link, n.inbound_link],
            _ => return Err(format!("Unknown direction {}", String::from_utf8_lossy(direction))),
        };
        for link in links.into_iter().flatten() {
            self.close_link(link);
        }
        Ok(())
    }

    fn send(&mut self, id: LinkId, message: &Message) {
        let kind = usize::from(message.kind().code());
        let Some(link) = self.links.get_mut(&id) else { return };
        link.wbuf.extend_from_slice(&message.encode());
        self.stats_sent[kind] += 1;
        if self.flush(id).is_err() {
            self.close_link(id);
        }
    }

    /// Writes what the link holds, as far as the socket takes it.
    pub fn flush(&mut self, id: LinkId) -> io::Result<()> {
        let Some(link) = self.links.get_mut(&id) else { return Ok(()) };
        if let BusStream::Tls(tls) = &mut link.stream {
            // What the session sealed before (a handshake's messages too)
            // goes first.
            match tls.send_held() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::NotConnected => return Ok(()),
                done => done?,
            }
        }
        while !link.wbuf.is_empty() {
            match link.stream.write(&link.wbuf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    link.wbuf.drain(..n);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::NotConnected => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Reads what arrived and processes each whole message; the link is
    /// closed on an error or a message that is not valid.
    pub fn readable(&mut self, id: LinkId) {
        let mut frames = Vec::new();
        let failed = {
            let Some(link) = self.links.get_mut(&id) else { return };
            let mut buf = [0u8; 16 * 1024];
            let mut failed = false;
            loop {
                match link.stream.read(&mut buf) {
                    Ok(0) => {
                        failed = true;
                        break;
                    }
                    Ok(n) => link.rbuf.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            loop {
                match keel_cluster::frame_len(&link.rbuf) {
                    Ok(Some(len)) if link.rbuf.len() >= len => {
                        frames.push(link.rbuf.drain(..len).collect::<Vec<u8>>());
                    }
                    Ok(_) => break,
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            failed
        };
        for frame in frames {
            // The type is at bytes 12-13 of the header, after the
            // signature, the length, the version and the port.
            let kind = frame.get(12..14).map_or(u16::MAX, |b| u16::from_be_bytes([b[0], b[1]]));
            if let Some(counter) = self.stats_received.get_mut(kind as usize) {
                *counter += 1;
            }
            if i64::from(kind) == self.drop_filter {
                tracing::warn!("Dropping packet that matches debug drop filter");
                continue;
            }
            match Message::decode(&frame) {
                Ok(message) => {
                    if !self.process(id, message) {
                        self.close_link(id);
                        return;
                    }
                }
                Err(e) => {
                    tracing::warn!("Dropping a cluster bus link after an invalid message: {e}");
                    self.close_link(id);
                    return;
                }
            }
            if !self.links.contains_key(&id) {
                return;
            }
        }
        if failed {
            self.close_link(id);
        }
    }

    fn link_addrs(&self, id: LinkId) -> (String, String) {
        let Some(link) = self.links.get(&id) else { return Default::default() };
        let ip = |a: io::Result<SocketAddr>| a.map(|a| a.ip().to_string()).unwrap_or_default();
        let sock = link.stream.tcp();
        (ip(sock.local_addr()), ip(sock.peer_addr()))
    }

    // ---- Messages out ----

    /// Redis's clusterBuildMessageHdr: a replica speaks for its master's
    /// slots and configuration epoch.
    fn header(&self) -> Header {
        let me = self.me();
        let master = me.master.and_then(|m| self.nodes.get(&m)).filter(|_| me.is_replica());
        let (slots, config_epoch) = match master {
            Some(m) => (m.slots.clone(), m.config_epoch),
            None => (me.slots.clone(), me.config_epoch),
        };
        let mut mf = [0u8; 3];
        if me.is_master() && self.manual.end != 0 {
            mf[0] |= mflags::PAUSED;
        }
        Header {
            port: self.env.port,
            pport: self.env.pport,
            cport: self.env.cport,
            current_epoch: self.current_epoch,
            config_epoch,
            offset: self.env.repl_offset,
            sender: self.myself,
            slots,
            replica_of: if me.is_replica() { me.master } else { None },
            ip: self.env.announce_ip.clone(),
            flags: me.flags,
            state_ok: self.ok,
            mflags: mf,
        }
    }

    fn message(&self, body: Body) -> Message {
        Message { header: self.header(), body }
    }

    /// Redis's clusterSendPing: a PING, PONG or MEET with gossip about a
    /// tenth of the nodes (at least three), and every node we think fails.
    pub fn send_ping(&mut self, id: LinkId, kind: MessageType) {
        let Some(link) = self.links.get(&id) else { return };
        let target = link.node;
        if kind == MessageType::Ping {
            if let Some(node) = target.and_then(|n| self.nodes.get_mut(&n)) {
                node.ping_sent = self.env.now;
            }
        }
        let fresh = self.nodes.len().saturating_sub(2);
        let wanted = (self.nodes.len() / 10).max(3).min(fresh);
        let mut gossip: Vec<Gossip> = Vec::new();
        let candidates: Vec<&Node> = self
            .nodes
            .values()
            .filter(|n| {
                let skipped = n.has(flags::MYSELF | flags::PFAIL | flags::HANDSHAKE | flags::NOADDR);
                // Nodes with neither a link nor slots say nothing useful.
                !skipped && (n.link.is_some() || n.numslots > 0)
            })
            .collect();
        let mut tries = wanted * 3;
        while gossip.len() < wanted && tries > 0 && !candidates.is_empty() {
            tries -= 1;
            let n = candidates[rand::random::<usize>() % candidates.len()];
            if gossip.iter().any(|g| g.name == n.name) {
                continue;
            }
            gossip.push(gossip_of(n));
        }
        for n in self.nodes.values().filter(|n| n.timed_out() && !n.has(flags::HANDSHAKE | flags::NOADDR)) {
            gossip.push(gossip_of(n));
        }
        let mut extensions = Vec::new();
        if !self.env.hostname.is_empty() {
            extensions.push(Extension::Hostname(self.env.hostname.clone()));
        }
        let body = match kind {
            MessageType::Pong => Body::Pong { gossip, extensions },
            MessageType::Meet => Body::Meet { gossip, extensions },
            _ => Body::Ping { gossip, extensions },
        };
        let message = self.message(body);
        self.send(id, &message);
    }

    /// A message to every node we have a link to (handshakes excluded).
    fn broadcast(&mut self, body: Body) {
        let message = self.message(body);
        self.broadcast_message(&message);
    }

    fn broadcast_message(&mut self, message: &Message) {
        let targets: Vec<LinkId> = self
            .nodes
            .values()
            .filter(|n| !n.has(flags::MYSELF | flags::HANDSHAKE))
            .filter_map(|n| n.link)
            .collect();
        for id in targets {
            self.send(id, message);
        }
    }

    /// PONGs to every node (`local_replicas_only`: to my master's replicas).
    pub fn broadcast_pong(&mut self, local_replicas_only: bool) {
        let my_master = self.my_master();
        let targets: Vec<LinkId> = self
            .nodes
            .values()
            .filter(|n| !n.has(flags::MYSELF | flags::HANDSHAKE))
            .filter(|n| !local_replicas_only || (n.is_replica() && n.master == my_master))
            .filter_map(|n| n.link)
            .collect();
        for id in targets {
            self.send_ping(id, MessageType::Pong);
        }
    }

    pub fn broadcast_publish(&mut self, shard: bool, channel: Vec<u8>, message: Vec<u8>) {
        let body = if shard { Body::PublishShard { channel, message } } else { Body::Publish { channel, message } };
        if shard {
            // Only the nodes serving the same slots hear a shard message.
            let my_master = self.my_master();
            let message = self.message(body);
            let targets: Vec<LinkId> = self
                .nodes
                .values()
                .filter(|n| !n.has(flags::MYSELF | flags::HANDSHAKE))
                .filter(|n| Some(n.name) == my_master || (n.is_replica() && n.master == my_master))
                .filter_map(|n| n.link)
                .collect();
            for id in targets {
                self.send(id, &message);
            }
        } else {
            self.broadcast(body);
        }
    }

    fn send_update(&mut self, link: Option<LinkId>, about: &NodeName) {
        let (Some(link), Some(node)) = (link, self.nodes.get(about)) else { return };
        let body = Body::Update { config_epoch: node.config_epoch, name: node.name, slots: node.slots.clone() };
        let message = self.message(body);
        self.send(link, &message);
    }

    // ---- Messages in ----

    /// Redis's clusterProcessPacket. Returns false when the link must be
    /// closed.
    fn process(&mut self, id: LinkId, message: Message) -> bool {
        let now = self.env.now;
        let hdr = &message.header;
        let kind = message.kind();
        let (link_node, inbound) = match self.links.get(&id) {
            Some(l) => (l.node, l.inbound),
            None => return false,
        };
        // The sender: the link's node, or (an inbound link not yet bound)
        // the node the header names.
        let mut sender = link_node.filter(|n| self.nodes.get(n).is_some_and(|n| !n.in_handshake()));
        if sender.is_none() {
            sender = Some(hdr.sender).filter(|n| self.nodes.contains_key(n) && !self.nodes[n].in_handshake());
            if let Some(name) = sender {
                if inbound {
                    let old = self.nodes[&name].inbound_link;
                    if let Some(old) = old.filter(|&o| o != id) {
                        self.close_link(old);
                    }
                    if let Some(l) = self.links.get_mut(&id) {
                        l.node = Some(name);
                    }
                    if let Some(n) = self.nodes.get_mut(&name) {
                        n.inbound_link = Some(id);
                    }
                }
            }
        }
        let mut sender_config_epoch = 0;
        if let Some(name) = sender {
            let current = self.current_epoch;
            let n = self.nodes.get_mut(&name).expect("sender is known");
            n.data_received = now;
            self.current_epoch = current.max(hdr.current_epoch);
            sender_config_epoch = hdr.config_epoch;
            if hdr.config_epoch > n.config_epoch {
                n.config_epoch = hdr.config_epoch;
                self.dirty = true;
            }
            n.repl_offset = hdr.offset;
            let my = self.me();
            if self.manual.end != 0
                && my.is_replica()
                && my.master == Some(name)
                && hdr.mflags[0] & mflags::PAUSED != 0
                && self.manual.master_offset.is_none()
            {
                self.manual.master_offset = Some(hdr.offset);
                tracing::info!("Received replication offset for paused master manual failover: {}", hdr.offset);
            }
        }

        if matches!(kind, MessageType::Ping | MessageType::Meet) {
            // A node learns its own address from the first MEET (or any
            // PING while it has none), unless it announces one.
            if (kind == MessageType::Meet || self.me().ip.is_empty()) && self.env.announce_ip.is_empty() {
                let (local, _) = self.link_addrs(id);
                if !local.is_empty() && local != self.me().ip {
                    self.me_mut().ip = local;
                    self.dirty = true;
                }
            }
            if sender.is_none() && kind == MessageType::Meet {
                let mut node = Node::new(NodeName::random(), flags::HANDSHAKE, now);
                node.ip = self.message_ip(id, hdr);
                node.port = hdr.port;
                node.pport = hdr.pport;
                node.cport = hdr.cport;
                self.add_node(node);
                self.dirty = true;
                self.process_gossip(&message, None);
            }
            self.send_ping(id, MessageType::Pong);
        }

        match &message.body {
            Body::Ping { .. } | Body::Pong { .. } | Body::Meet { .. } => {
                if !inbound {
                    let Some(node_name) = link_node else { return false };
                    let in_handshake = self.nodes.get(&node_name).is_some_and(Node::in_handshake);
                    if in_handshake {
                        if let Some(known) = sender {
                            // We know it under its real name already.
                            if self.update_address(&known, id, hdr) {
                                self.dirty = true;
                                self.update_state = true;
                            }
                            self.del_node(&node_name);
                            return self.links.contains_key(&id);
                        }
                        if self.nodes.contains_key(&hdr.sender) {
                            self.del_node(&node_name);
                            return false;
                        }
                        self.rename_node(&node_name, hdr.sender);
                        let n = self.nodes.get_mut(&hdr.sender).expect("renamed");
                        n.flags &= !flags::HANDSHAKE;
                        n.flags |= hdr.flags & (flags::MASTER | flags::REPLICA);
                        tracing::info!("Handshake with node {} completed.", hdr.sender);
                        self.dirty = true;
                    } else if node_name != hdr.sender {
                        // The address now answers with another name.
                        if let Some(n) = self.nodes.get_mut(&node_name) {
                            n.flags |= flags::NOADDR;
                            n.ip.clear();
                            n.port = 0;
                            n.pport = 0;
                            n.cport = 0;
                        }
                        self.dirty = true;
                        return false;
                    }
                }
                if let Some(name) = sender {
                    let n = self.nodes.get_mut(&name).expect("sender is known");
                    n.flags = (n.flags & !flags::NOFAILOVER) | (hdr.flags & flags::NOFAILOVER);
                    if kind == MessageType::Ping && self.update_address(&name, id, hdr) {
                        self.dirty = true;
                        self.update_state = true;
                    }
                }
                if !inbound && kind == MessageType::Pong {
                    if let Some(name) = self.links.get(&id).and_then(|l| l.node) {
                        if let Some(n) = self.nodes.get_mut(&name) {
                            n.pong_received = now;
                            n.ping_sent = 0;
                            if n.timed_out() {
                                n.flags &= !flags::PFAIL;
                                self.dirty = true;
                                self.update_state = true;
                            } else if n.failed() {
                                self.clear_failure_if_needed(&name);
                            }
                        }
                    }
                }
                let Some(name) = sender else { return true };
                // The sender's role.
                match hdr.replica_of {
                    None => self.set_node_as_master(&name),
                    Some(master) => {
                        if self.nodes[&name].is_master() {
                            self.del_node_slots(&name);
                            let n = self.nodes.get_mut(&name).expect("sender is known");
                            n.flags &= !(flags::MASTER | flags::MIGRATE_TO);
                            n.flags |= flags::REPLICA;
                            self.dirty = true;
                            self.update_state = true;
                        }
                        if self.nodes.contains_key(&master) && self.nodes[&name].master != Some(master) {
                            let old = self.nodes.get_mut(&name).expect("sender is known").master.replace(master);
                            self.replica_left(old);
                            self.nodes.get_mut(&master).expect("checked").flags |= flags::MIGRATE_TO;
                            self.dirty = true;
                        }
                    }
                }
                // The sender's slots, as it claims them.
                let sender_master = if self.nodes[&name].is_master() { Some(name) } else { self.nodes[&name].master };
                let dirty_slots = sender_master.and_then(|m| self.nodes.get(&m)).is_some_and(|m| m.slots != hdr.slots);
                if dirty_slots && self.nodes[&name].is_master() {
                    self.update_slots_with(name, sender_config_epoch, &hdr.slots);
                }
                if dirty_slots {
                    // It claims slots whose owner we know has a newer
                    // configuration: tell it.
                    let stale = hdr.slots.iter().find_map(|slot| {
                        let owner = self.owners[slot as usize]?;
                        (owner != name && self.nodes[&owner].config_epoch > sender_config_epoch).then_some(owner)
                    });
                    if let Some(owner) = stale {
                        tracing::info!("Node {name} has old slots configuration, sending an UPDATE message about {owner}");
                        let link = self.nodes[&name].link;
                        self.send_update(link, &owner);
                    }
                }
                if self.me().is_master()
                    && self.nodes[&name].is_master()
                    && sender_config_epoch == self.me().config_epoch
                {
                    self.config_epoch_collision(&name);
                }
                self.process_gossip(&message, Some(name));
                if let Body::Ping { extensions, .. } | Body::Pong { extensions, .. } | Body::Meet { extensions, .. } =
                    &message.body
                {
                    let hostname = extensions.iter().map(|Extension::Hostname(h)| h.clone()).next();
                    let n = self.nodes.get_mut(&name).expect("sender is known");
                    let hostname = hostname.unwrap_or_default();
                    if n.hostname != hostname {
                        n.hostname = hostname;
                        self.dirty = true;
                    }
                }
            }
            Body::Fail { name } => {
                if sender.is_none() {
                    return true;
                }
                if let Some(failing) = self.nodes.get_mut(name) {
                    if !failing.has(flags::FAIL | flags::MYSELF) {
                        tracing::info!("FAIL message received from {} about {}", hdr.sender, name);
                        failing.flags |= flags::FAIL;
                        failing.flags &= !flags::PFAIL;
                        failing.fail_time = now;
                        self.dirty = true;
                        self.update_state = true;
                    }
                }
            }
            Body::Publish { channel, message: text } | Body::PublishShard { channel, message: text } => {
                if sender.is_some() {
                    let shard = kind == MessageType::PublishShard;
                    self.effects.push(Effect::Publish { shard, channel: channel.clone(), message: text.clone() });
                }
            }
            Body::FailoverAuthRequest => {
                if let Some(name) = sender {
                    self.vote_if_needed(&name, hdr);
                }
            }
            Body::FailoverAuthAck => {
                if let Some(name) = sender {
                    let n = &self.nodes[&name];
                    if n.is_master() && n.numslots > 0 && hdr.current_epoch >= self.election.auth_epoch {
                        self.election.auth_count += 1;
                        self.handle_replica_failover();
                    }
                }
            }
            Body::MfStart => {
                let Some(name) = sender else { return true };
                if self.nodes[&name].master != Some(self.myself) {
                    return true;
                }
                self.reset_manual();
                let paused_until = now + MF_TIMEOUT_MS * 2;
                self.manual = Manual { end: now + MF_TIMEOUT_MS, replica: Some(name), paused_until, ..Manual::default() };
                self.effects.push(Effect::PauseWrites(paused_until));
                tracing::warn!("Manual failover requested by replica {name}.");
                self.send_ping(id, MessageType::Ping);
            }
            Body::Update { config_epoch, name, slots } => {
                if sender.is_none() {
                    return true;
                }
                let Some(n) = self.nodes.get(name) else { return true };
                if n.config_epoch >= *config_epoch {
                    return true;
                }
                if n.is_replica() {
                    self.set_node_as_master(name);
                }
                self.nodes.get_mut(name).expect("known").config_epoch = *config_epoch;
                self.dirty = true;
                self.update_slots_with(*name, *config_epoch, slots);
            }
            Body::Module { .. } => {}
        }
        true
    }

    /// The address a message's sender has: the one it announces, else the
    /// link's peer address.
    fn message_ip(&self, id: LinkId, hdr: &Header) -> String {
        if hdr.ip.is_empty() {
            self.link_addrs(id).1
        } else {
            hdr.ip.clone()
        }
    }

    /// Redis's nodeUpdateAddressIfNeeded: a known node that speaks from a
    /// new address (a restart elsewhere) is reconnected there.
    fn update_address(&mut self, name: &NodeName, id: LinkId, hdr: &Header) -> bool {
        let ip = self.message_ip(id, hdr);
        let n = &self.nodes[name];
        if n.link == Some(id) || ip.is_empty() {
            return false;
        }
        if n.port == hdr.port && n.cport == hdr.cport && n.pport == hdr.pport && n.ip == ip {
            return false;
        }
        let link = n.link;
        let n = self.nodes.get_mut(name).expect("known");
        n.ip = ip;
        n.port = hdr.port;
        n.pport = hdr.pport;
        n.cport = hdr.cport;
        n.flags &= !flags::NOADDR;
        if let Some(link) = link {
            self.close_link(link);
        }
        tracing::info!("Address updated for node {name}");
        if self.me().is_replica() && self.me().master == Some(*name) {
            let n = &self.nodes[name];
            self.effects.push(Effect::Follow(n.ip.clone(), n.port));
        }
        true
    }

    fn process_gossip(&mut self, message: &Message, sender: Option<NodeName>) {
        let (Body::Ping { gossip, .. } | Body::Pong { gossip, .. } | Body::Meet { gossip, .. }) = &message.body else {
            return;
        };
        let now = self.env.now;
        let sender_is_master = sender.and_then(|s| self.nodes.get(&s)).is_some_and(Node::is_master);
        for g in gossip {
            if self.nodes.contains_key(&g.name) {
                if let Some(by) = sender.filter(|_| sender_is_master && g.name != self.myself) {
                    let n = self.nodes.get_mut(&g.name).expect("known");
                    if g.flags & (flags::FAIL | flags::PFAIL) != 0 {
                        match n.fail_reports.iter_mut().find(|(r, _)| *r == by) {
                            Some(report) => report.1 = now,
                            None => n.fail_reports.push((by, now)),
                        }
                        self.fail_if_needed(&g.name);
                    } else {
                        n.fail_reports.retain(|(r, _)| *r != by);
                    }
                }
                let reports = self.failure_reports(&g.name);
                let n = self.nodes.get_mut(&g.name).expect("known");
                if g.flags & (flags::FAIL | flags::PFAIL) == 0 && n.ping_sent == 0 && reports == 0 {
                    let pong = u64::from(g.pong_received) * 1000;
                    if pong <= now + 500 && pong > n.pong_received {
                        n.pong_received = pong;
                    }
                }
                if n.has(flags::FAIL | flags::PFAIL)
                    && g.flags & (flags::NOADDR | flags::FAIL | flags::PFAIL) == 0
                    && (n.ip != g.ip || n.port != g.port || n.cport != g.cport)
                {
                    let link = n.link.take();
                    n.ip = g.ip.clone();
                    n.port = g.port;
                    n.pport = g.pport;
                    n.cport = g.cport;
                    n.flags &= !flags::NOADDR;
                    if let Some(link) = link {
                        self.close_link(link);
                    }
                }
            } else if sender.is_some() && g.flags & flags::NOADDR == 0 && !self.blacklisted(&g.name) {
                // Known to a node we trust: added under its own name.
                let mut node = Node::new(g.name, g.flags & !flags::MYSELF, now);
                node.ip = g.ip.clone();
                node.port = g.port;
                node.pport = g.pport;
                node.cport = g.cport;
                self.add_node(node);
                self.dirty = true;
            }
        }
    }

    fn blacklisted(&mut self, name: &NodeName) -> bool {
        let now_s = self.env.now / 1000;
        self.blacklist.retain(|_, until| *until > now_s);
        self.blacklist.contains_key(name)
    }

    /// Redis's clusterUpdateSlotsConfigWith: `sender` claims `slots` with
    /// `epoch`; each slot whose owner has an older epoch goes to it.
    fn update_slots_with(&mut self, sender: NodeName, epoch: u64, slots: &SlotBitmap) {
        if sender == self.myself {
            return;
        }
        let cur_master = self.my_master();
        let mut new_master = None;
        let mut dirty = Vec::new();
        let (mut sender_slots, mut migrated_ours) = (0, 0);
        for slot in slots.iter() {
            sender_slots += 1;
            let owner = self.owners[slot as usize];
            if owner == Some(sender) || self.importing.contains_key(&slot) {
                continue;
            }
            let older = owner.is_none_or(|o| self.nodes.get(&o).is_none_or(|n| n.config_epoch < epoch));
            if !older {
                continue;
            }
            if owner == Some(self.myself) {
                dirty.push(slot);
            }
            if owner.is_some() && owner == cur_master {
                new_master = Some(sender);
                migrated_ours += 1;
            }
            self.del_slot(slot);
            self.add_slot(sender, slot);
            self.dirty = true;
            self.update_state = true;
        }
        let cur_master_empty = cur_master.and_then(|m| self.nodes.get(&m)).is_some_and(|m| m.numslots == 0);
        if new_master.is_some()
            && cur_master_empty
            && (self.env.allow_replica_migration || sender_slots == migrated_ours)
        {
            tracing::warn!("Configuration change detected. Reconfiguring myself as a replica of {sender}");
            self.set_my_master(sender);
        } else if let Some(grand) = self
            .me()
            .master
            .and_then(|m| self.nodes.get(&m))
            .and_then(|m| m.master)
            .filter(|g| *g != self.myself)
        {
            tracing::warn!("I'm a sub-replica! Reconfiguring myself as a replica of grandmaster {grand}");
            self.set_my_master(grand);
        } else {
            self.effects.extend(dirty.into_iter().map(Effect::DropSlotKeys));
        }
    }

    /// Redis's clusterSetMaster: this node replicates `master`.
    pub fn set_my_master(&mut self, master: NodeName) {
        let me = self.me_mut();
        if me.is_master() {
            me.flags &= !(flags::MASTER | flags::MIGRATE_TO);
            me.flags |= flags::REPLICA;
            self.migrating.clear();
            self.importing.clear();
        }
        let old = self.me_mut().master.replace(master).filter(|&old| old != master);
        self.replica_left(old);
        if let Some(m) = self.nodes.get_mut(&master) {
            m.flags |= flags::MIGRATE_TO;
        }
        if let Some(m) = self.nodes.get(&master) {
            self.effects.push(Effect::Follow(m.ip.clone(), m.port));
        }
        self.reset_manual();
        self.dirty = true;
        self.update_state = true;
    }

    fn config_epoch_collision(&mut self, sender: &NodeName) {
        if *sender <= self.myself {
            return;
        }
        self.current_epoch += 1;
        let epoch = self.current_epoch;
        self.me_mut().config_epoch = epoch;
        self.dirty = true;
        tracing::warn!("WARNING: configEpoch collision with node {sender}. configEpoch set to {epoch}");
    }

    /// Redis's clusterBumpConfigEpochWithoutConsensus. Returns whether it
    /// bumped.
    pub fn bump_epoch_without_consensus(&mut self) -> bool {
        let max = self.nodes.values().map(|n| n.config_epoch).max().unwrap_or(0).max(self.current_epoch);
        let mine = self.me().config_epoch;
        if mine == 0 || mine != max {
            self.current_epoch += 1;
            let epoch = self.current_epoch;
            self.me_mut().config_epoch = epoch;
            self.dirty = true;
            tracing::warn!("New configEpoch set to {epoch}");
            true
        } else {
            false
        }
    }

    // ---- Failure detection ----

    fn fail_if_needed(&mut self, name: &NodeName) {
        let needed = self.size / 2 + 1;
        let n = &self.nodes[name];
        if !n.timed_out() || n.failed() {
            return;
        }
        let mut failures = self.failure_reports(name);
        if self.me().is_master() {
            failures += 1;
        }
        if failures < needed {
            return;
        }
        tracing::warn!("Marking node {name} as failing (quorum reached).");
        let now = self.env.now;
        let n = self.nodes.get_mut(name).expect("known");
        n.flags &= !flags::PFAIL;
        n.flags |= flags::FAIL;
        n.fail_time = now;
        self.broadcast(Body::Fail { name: *name });
        self.dirty = true;
        self.update_state = true;
    }

    fn clear_failure_if_needed(&mut self, name: &NodeName) {
        let timeout = self.env.node_timeout;
        let now = self.env.now;
        let n = self.nodes.get_mut(name).expect("known");
        if n.is_replica() || n.numslots == 0 || now.saturating_sub(n.fail_time) > timeout * FAIL_UNDO_TIME_MULT {
            tracing::info!("Clear FAIL state for node {name}: it is reachable again.");
            n.flags &= !flags::FAIL;
            self.dirty = true;
            self.update_state = true;
        }
    }

    /// Redis's clusterUpdateState.
    pub fn judge_state(&mut self) {
        self.update_state = false;
        let now = self.env.now;
        if self.first_update_time == 0 {
            self.first_update_time = now;
        }
        if self.me().is_master() && !self.ok && now.saturating_sub(self.first_update_time) < WRITABLE_DELAY_MS {
            return;
        }
        let mut ok = true;
        if self.env.require_full_coverage {
            // Every slot assigned, none to a failed master.
            let failed: Vec<NodeName> = self.nodes.values().filter(|n| n.failed() && n.numslots > 0).map(|n| n.name).collect();
            ok = self.assigned == SLOTS && (failed.is_empty() || self.owners.iter().all(|o| o.is_some_and(|o| !failed.contains(&o))));
        }
        let masters = self.nodes.values().filter(|n| n.is_master() && n.numslots > 0);
        let (mut size, mut reachable) = (0, 0);
        for n in masters {
            size += 1;
            if !n.has(flags::FAIL | flags::PFAIL) {
                reachable += 1;
            }
        }
        self.size = size;
        if reachable < size / 2 + 1 {
            ok = false;
            self.among_minority_time = now;
        }
        if ok != self.ok {
            let rejoin_delay = self.env.node_timeout.clamp(500, 5000);
            if ok && self.me().is_master() && now.saturating_sub(self.among_minority_time) < rejoin_delay {
                return;
            }
            tracing::warn!("Cluster state changed: {}", if ok { "ok" } else { "fail" });
            self.ok = ok;
        }
    }

    // ---- Cron ----

    /// Redis's clusterCron, every 100 ms.
    pub fn cron(&mut self) {
        self.iteration += 1;
        let now = self.env.now;
        let timeout = self.env.node_timeout;
        let handshake_timeout = timeout.max(1000);
        let names: Vec<NodeName> = self.nodes.keys().copied().collect();
        for name in &names {
            let Some(n) = self.nodes.get(name) else { continue };
            if n.has(flags::MYSELF | flags::NOADDR) {
                continue;
            }
            self.limit_link_buffers(name);
            let Some(n) = self.nodes.get(name) else { continue };
            if n.in_handshake() && now.saturating_sub(n.ctime) > handshake_timeout {
                self.del_node(name);
                continue;
            }
            if n.link.is_none() {
                match self.connect(*name) {
                    Ok(id) => {
                        let n = self.nodes.get_mut(name).expect("known");
                        n.link = Some(id);
                        let meet = n.has(flags::MEET);
                        n.flags &= !flags::MEET;
                        let old_ping = n.ping_sent;
                        self.send_ping(id, if meet { MessageType::Meet } else { MessageType::Ping });
                        // A reconnection does not restart the failure clock.
                        if old_ping != 0 {
                            self.nodes.get_mut(name).expect("known").ping_sent = old_ping;
                        }
                    }
                    Err(e) => {
                        let n = self.nodes.get_mut(name).expect("known");
                        if n.ping_sent == 0 {
                            n.ping_sent = now;
                        }
                        tracing::debug!("Unable to connect to Cluster Node [{}]:{} -> {e}", n.ip, n.cport);
                    }
                }
            }
        }
        // Every second, a PING to the node among five random ones that
        // answered longest ago.
        if self.iteration.is_multiple_of(10) && !names.is_empty() {
            let mut oldest: Option<(u64, LinkId)> = None;
            for _ in 0..5 {
                let n = &self.nodes.get(&names[rand::random::<usize>() % names.len()]);
                let Some(n) = n else { continue };
                let Some(link) = n.link else { continue };
                if n.ping_sent != 0 || n.has(flags::MYSELF | flags::HANDSHAKE) {
                    continue;
                }
                if oldest.is_none_or(|(pong, _)| n.pong_received < pong) {
                    oldest = Some((n.pong_received, link));
                }
            }
            if let Some((_, link)) = oldest {
                self.send_ping(link, MessageType::Ping);
            }
        }
        for name in &names {
            let Some(n) = self.nodes.get(name) else { continue };
            if n.has(flags::MYSELF | flags::NOADDR | flags::HANDSHAKE) {
                continue;
            }
            let ping_delay = now.saturating_sub(n.ping_sent);
            let data_delay = now.saturating_sub(n.data_received);
            if let Some(link) = n.link {
                let link_age = self.links.get(&link).map_or(0, |l| now.saturating_sub(l.ctime));
                if link_age > timeout && n.ping_sent != 0 && ping_delay > timeout / 2 && data_delay > timeout / 2 {
                    // Connected but silent: try a fresh connection.
                    self.close_link(link);
                }
            }
            let n = &self.nodes[name];
            if let Some(link) = n.link {
                if n.ping_sent == 0 && now.saturating_sub(n.pong_received) > timeout / 2 {
                    self.send_ping(link, MessageType::Ping);
                    continue;
                }
                if self.manual.end != 0 && self.me().is_master() && self.manual.replica == Some(*name) {
                    self.send_ping(link, MessageType::Ping);
                    continue;
                }
            }
            let n = &self.nodes[name];
            if n.ping_sent == 0 {
                continue;
            }
            if ping_delay.min(data_delay) > timeout && !n.has(flags::PFAIL | flags::FAIL) {
                tracing::info!("*** NODE {name} possibly failing");
                self.nodes.get_mut(name).expect("known").flags |= flags::PFAIL;
                self.update_state = true;
            }
        }
        if self.manual.end != 0 && self.manual.end < now {
            tracing::warn!("Manual failover timed out.");
            self.reset_manual();
        }
        if self.me().is_replica() {
            self.handle_manual_failover();
            self.handle_replica_failover();
            self.consider_replica_migration();
        }
        if self.update_state || !self.ok {
            self.judge_state();
        }
    }

    /// Redis's clusterReset: every other node forgotten, no slots, no
    /// migrations; `hard` also zeroes the epochs and takes a new name. A
    /// replica becomes a master (its caller empties the data).
    pub fn reset(&mut self, hard: bool) {
        if self.me().is_replica() {
            let me = self.me_mut();
            me.flags &= !flags::REPLICA;
            me.flags |= flags::MASTER;
            me.master = None;
            self.effects.push(Effect::StopFollowing);
        }
        self.migrating.clear();
        self.importing.clear();
        self.reset_manual();
        for slot in 0..SLOTS as u16 {
            self.del_slot(slot);
        }
        let others: Vec<NodeName> = self.nodes.keys().filter(|n| **n != self.myself).copied().collect();
        for name in others {
            self.del_node(&name);
        }
        if hard {
            self.current_epoch = 0;
            self.last_vote_epoch = 0;
            let mut me = self.nodes.remove(&self.myself).expect("myself is a node");
            me.config_epoch = 0;
            me.name = NodeName::random();
            self.myself = me.name;
            self.nodes.insert(me.name, me);
            tracing::info!("Node hard reset, now I'm {}", self.myself);
        }
        self.dirty = true;
        self.update_state = true;
    }

    // ---- Failover ----

    /// Redis's resetManualFailover: the master side's pause ends with it.
    fn reset_manual(&mut self) {
        if self.manual.paused_until != 0 {
            self.effects.push(Effect::ResumeWrites);
        }
        self.manual = Manual::default();
    }

    /// How many replicas of my master have processed more than I have.
    fn replica_rank(&self) -> u64 {
        let Some(master) = self.me().master else { return 0 };
        let mine = self.env.repl_offset;
        self.replicas_of(&master)
            .filter(|r| r.name != self.myself && !r.has(flags::NOFAILOVER) && r.repl_offset > mine)
            .count() as u64
    }

    fn handle_manual_failover(&mut self) {
        if self.manual.end == 0 || self.manual.can_start {
            return;
        }
        // At least (Redis: exactly) the paused master's offset: a PING the
        // master's stream carries after it adds nothing to wait for.
        if self.manual.master_offset.is_some_and(|offset| self.env.repl_offset >= offset) {
            self.manual.can_start = true;
            tracing::warn!("All master replication stream processed, manual failover can start.");
        }
    }

    /// Redis's clusterCron's look at the masters from a replica: if some
    /// master is orphaned (serves slots, had replicas, has no working one)
    /// and this replica's master is among those with the most working
    /// replicas, at least two, it may migrate
    /// ([`State::handle_replica_migration`]).
    fn consider_replica_migration(&mut self) {
        let mine = self.me().master;
        let (mut orphaned, mut most, mut mine_count) = (0, 0, 0);
        for n in self.nodes.values().filter(|n| n.is_master() && !n.failed()) {
            let working = self.working_replicas(&n.name);
            if working == 0 && n.numslots > 0 && n.has(flags::MIGRATE_TO) {
                orphaned += 1;
            }
            most = most.max(working);
            if mine == Some(n.name) {
                mine_count = working;
            }
        }
        if orphaned > 0 && most >= 2 && mine_count == most && self.env.allow_replica_migration {
            self.handle_replica_migration(most);
        }
    }

    /// Redis's clusterHandleSlaveMigration: a replica whose master keeps
    /// more than `cluster-migration-barrier` working replicas, and which
    /// has the smallest name among the replicas of the masters with the
    /// most (`most`), follows a master orphaned for
    /// [`REPLICA_MIGRATION_DELAY_MS`] instead.
    fn handle_replica_migration(&mut self, most: usize) {
        let now = self.env.now;
        let Some(my_master) = self.me().master else { return };
        if !self.ok {
            return;
        }
        let working = self.replicas_of(&my_master).filter(|r| !r.failed() && !r.timed_out()).count() as u64;
        if working <= self.env.migration_barrier {
            return;
        }
        let mut candidate = self.myself;
        let mut target = None;
        let names: Vec<NodeName> = self.nodes.keys().copied().collect();
        for name in names {
            let n = &self.nodes[&name];
            let working = if n.is_master() { self.working_replicas(&name) } else { 0 };
            let orphaned = n.is_master() && !n.failed() && n.has(flags::MIGRATE_TO) && working == 0;
            if orphaned && target.is_none() && n.numslots > 0 {
                target = Some(name);
            }
            if working == most {
                if let Some(smallest) = self.replicas_of(&name).map(|r| r.name).filter(|r| r.0 < candidate.0).min_by_key(|r| r.0) {
                    candidate = smallest;
                }
            }
            let n = self.nodes.get_mut(&name).expect("listed");
            if !orphaned {
                n.orphaned_time = 0;
            } else if n.orphaned_time == 0 {
                n.orphaned_time = now;
            }
        }
        let Some(target) = target else { return };
        if candidate == self.myself && now.saturating_sub(self.nodes[&target].orphaned_time) > REPLICA_MIGRATION_DELAY_MS {
            tracing::warn!("Migrating to orphaned master {target}");
            self.set_my_master(target);
        }
    }

    /// Redis's clusterHandleSlaveFailover: a replica of a failed master
    /// asks the masters for their votes after a delay that ranks replicas
    /// by how much they processed, and takes over with a majority.
    pub fn handle_replica_failover(&mut self) {
        let now = self.env.now;
        let needed = self.size / 2 + 1;
        let manual = self.manual.end != 0 && self.manual.can_start;
        let auth_timeout = (self.env.node_timeout * 2).max(2000);
        let auth_retry = auth_timeout * 2;
        let me = self.me();
        let Some(master) = me.master.filter(|_| me.is_replica()) else { return };
        let Some(m) = self.nodes.get(&master) else { return };
        let wanted = manual || (m.failed() && !self.env.replica_no_failover);
        if !wanted || m.numslots == 0 {
            return;
        }
        let mut data_age = self.env.master_silence_ms;
        if data_age > self.env.node_timeout {
            data_age -= self.env.node_timeout;
        }
        let validity = self.env.repl_ping_period_s * 1000 + self.env.node_timeout * self.env.replica_validity_factor;
        if self.env.replica_validity_factor != 0 && data_age > validity && !manual {
            return;
        }
        let auth_age = now.saturating_sub(self.election.auth_time);
        if self.election.auth_time == 0 || auth_age > auth_retry {
            let rank = self.replica_rank();
            self.election = Election {
                auth_time: now + 500 + rand::random::<u64>() % 500 + rank * 1000,
                auth_rank: rank,
                ..Election::default()
            };
            if self.manual.end != 0 {
                self.election.auth_time = now;
                self.election.auth_rank = 0;
            }
            tracing::warn!(
                "Start of election delayed for {} milliseconds (rank #{}, offset {}).",
                self.election.auth_time.saturating_sub(now),
                self.election.auth_rank,
                self.env.repl_offset
            );
            self.broadcast_pong(true);
            if self.manual.end == 0 {
                return;
            }
        }
        if !self.election.auth_sent && self.manual.end == 0 {
            let rank = self.replica_rank();
            if rank > self.election.auth_rank {
                self.election.auth_time += (rank - self.election.auth_rank) * 1000;
                self.election.auth_rank = rank;
            }
        }
        if now < self.election.auth_time {
            return;
        }
        if now - self.election.auth_time > auth_timeout {
            return;
        }
        if !self.election.auth_sent {
            self.current_epoch += 1;
            self.election.auth_epoch = self.current_epoch;
            tracing::warn!("Starting a failover election for epoch {}.", self.current_epoch);
            let mut message = self.message(Body::FailoverAuthRequest);
            if self.manual.end != 0 {
                message.header.mflags[0] |= mflags::FORCEACK;
            }
            self.broadcast_message(&message);
            self.election.auth_sent = true;
            self.dirty = true;
            self.update_state = true;
            return;
        }
        if self.election.auth_count >= needed {
            if self.me().config_epoch < self.election.auth_epoch {
                let epoch = self.election.auth_epoch;
                self.me_mut().config_epoch = epoch;
                tracing::warn!("configEpoch set to {epoch} after successful failover");
            }
            self.replace_my_master();
        }
    }

    /// Redis's clusterFailoverReplaceYourMaster.
    pub fn replace_my_master(&mut self) {
        let me = self.me();
        let Some(old) = me.master.filter(|_| me.is_replica()) else { return };
        tracing::warn!("Failover election won: I'm the new master.");
        let me = self.me_mut();
        me.flags &= !flags::REPLICA;
        me.flags |= flags::MASTER;
        me.master = None;
        self.effects.push(Effect::StopFollowing);
        let slots: Vec<u16> = self.nodes[&old].slots.iter().collect();
        for slot in slots {
            self.del_slot(slot);
            self.add_slot(self.myself, slot);
        }
        self.judge_state();
        self.dirty = true;
        self.broadcast_pong(false);
        self.reset_manual();
    }

    /// Redis's clusterSendFailoverAuthIfNeeded: a master's vote.
    fn vote_if_needed(&mut self, replica: &NodeName, request: &Header) {
        let me = self.me();
        if me.is_replica() || me.numslots == 0 {
            return;
        }
        if request.current_epoch < self.current_epoch || self.last_vote_epoch == self.current_epoch {
            return;
        }
        let node = &self.nodes[replica];
        let force = request.mflags[0] & mflags::FORCEACK != 0;
        let Some(master) = node.master.filter(|_| node.is_replica()) else { return };
        let Some(m) = self.nodes.get(&master) else { return };
        if !m.failed() && !force {
            return;
        }
        let now = self.env.now;
        if now.saturating_sub(m.voted_time) < self.env.node_timeout * 2 {
            return;
        }
        let stale = request.slots.iter().any(|slot| {
            self.owners[slot as usize].and_then(|o| self.nodes.get(&o)).is_some_and(|o| o.config_epoch > request.config_epoch)
        });
        if stale {
            return;
        }
        self.last_vote_epoch = self.current_epoch;
        self.nodes.get_mut(&master).expect("known").voted_time = now;
        self.dirty = true;
        let link = self.nodes[replica].link;
        if let Some(link) = link {
            let message = self.message(Body::FailoverAuthAck);
            self.send(link, &message);
        }
        tracing::warn!("Failover auth granted to {replica} for epoch {}", self.current_epoch);
    }

    /// CLUSTER FAILOVER on a replica: without `force`, the master pauses
    /// its writes until this replica has processed them all.
    pub fn start_manual_failover(&mut self, force: bool) {
        self.manual = Manual { end: self.env.now + MF_TIMEOUT_MS, ..Manual::default() };
        if force {
            self.manual.can_start = true;
            return;
        }
        let link = self.me().master.and_then(|m| self.nodes.get(&m)).and_then(|m| m.link);
        if let Some(link) = link {
            let message = self.message(Body::MfStart);
            self.send(link, &message);
        }
    }
}

fn gossip_of(n: &Node) -> Gossip {
    Gossip {
        name: n.name,
        ping_sent: (n.ping_sent / 1000) as u32,
        pong_received: (n.pong_received / 1000) as u32,
        ip: n.ip.clone(),
        port: n.port,
        cport: n.cport,
        flags: n.flags,
        pport: n.pport,
    }
}

/// An IPv6 address in brackets, for `ip:port`.
pub fn bracketed(ip: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]")
    } else {
        ip.to_string()
    }
}
