//! Per-connection state, and the registry through which one connection can
//! see or act on another (CLIENT LIST, CLIENT KILL, MONITOR) whatever
//! thread serves it. Subscriptions have their own registry (`pubsub`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use keel_engine::WatchFlag;
use parking_lot::Mutex;

/// How a client wants replies (CLIENT REPLY).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    On,
    Off,
    /// Skip the reply of the next command only.
    SkipNext,
    /// Skipping the current command's reply (set from SkipNext).
    Skipping,
}

/// A transaction being queued between MULTI and EXEC.
#[derive(Debug)]
pub struct Multi {
    pub queued: Vec<Vec<Vec<u8>>>,
    /// The queued commands' flags, or-ed (Redis's `mstate.cmd_flags`): what
    /// EXEC is refused by when memory, the disk or replicas say no.
    pub flags: u32,
    /// Every queued command has the `stale` flag (Redis's
    /// `mstate.cmd_inv_flags` lacks it): EXEC may run on a stale replica.
    pub all_stale: bool,
    /// A command failed to queue (unknown, wrong arity): EXEC answers EXECABORT.
    pub aborted: bool,
    /// What the queued commands hold (CLIENT LIST `multi-mem`).
    pub bytes: usize,
}

impl Default for Multi {
    fn default() -> Multi {
        Multi { queued: Vec::new(), flags: 0, all_stale: true, aborted: false, bytes: 0 }
    }
}

/// What other threads may read about a client (CLIENT LIST / INFO) and the
/// flag through which they ask its owner to close it.
#[derive(Debug)]
pub struct ClientInfo {
    pub id: u64,
    pub addr: String,
    pub laddr: String,
    pub fd: i32,
    pub created_ms: u64,
    pub last_interaction_ms: AtomicU64,
    /// Index of the last command in the command table, +1 (0: none yet).
    pub last_cmd: AtomicU16,
    pub db: AtomicUsize,
    pub resp: AtomicU16,
    pub name: Mutex<Option<Vec<u8>>>,
    pub kill: AtomicBool,
    pub multi_len: AtomicU64,
    pub in_multi: AtomicBool,
    pub monitor: AtomicBool,
    pub qbuf: AtomicU64,
    pub obl: AtomicU64,
    pub no_evict: AtomicBool,
    pub unix: bool,
    /// Held by CLIENT PAUSE (CLIENT LIST flag `b`).
    pub blocked: AtomicBool,
    /// Free bytes of the query buffer and size of the reply buffer
    /// (CLIENT LIST qbuf-free, rbs), refreshed after each read.
    pub qbuf_free: AtomicU64,
    pub rbs: AtomicU64,
    /// Bytes of the arguments of the commands queued by MULTI.
    pub multi_mem: AtomicU64,
    /// What the connection holds in memory, as its worker last counted it
    /// (CLIENT LIST `tot-mem`; `client_memory.rs`).
    pub memory: AtomicU64,
    /// Channels, patterns and shard channels subscribed to (CLIENT LIST
    /// `sub`, `psub`, `ssub`), mirrored from `Client::subscriptions`.
    pub subscriptions: [AtomicU32; 3],
    /// The user the connection runs as (CLIENT LIST `user`, CLIENT KILL
    /// USER, ACL DELUSER), mirrored from `Client::user`; None for the
    /// server's own clients.
    pub user: Mutex<Option<Arc<crate::acl::UserHandle>>>,
    /// CLIENT TRACKING's flags (`tracking::flags`) and redirection, which
    /// writers on any worker read to invalidate (CLIENT LIST `t`, `R`,
    /// `B`, `redir`).
    pub tracking: AtomicU32,
    pub tracking_redirect: AtomicU64,
    /// A [`LinkRole`] as u8 (0: none) once the client is a replication link.
    link_role: AtomicU8,
}

/// What a replication link's client is, as CLIENT LIST's flags (`S`, `M`)
/// and TYPE name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkRole {
    /// A replica's connection, on its master, since its PSYNC.
    Replica = 1,
    /// The master's connection, on a replica, while it streams.
    Master = 2,
}

impl ClientInfo {
    /// The peer's address without its port (all of `addr` on a Unix socket).
    pub fn ip(&self) -> &str {
        self.addr.rsplit_once(':').map_or(self.addr.as_str(), |(ip, _)| ip)
    }

    pub fn new(id: u64, addr: String, laddr: String, fd: i32, unix: bool) -> ClientInfo {
        let now = crate::server::unix_ms();
        ClientInfo {
            id,
            addr,
            laddr,
            fd,
            created_ms: now,
            last_interaction_ms: now.into(),
            last_cmd: 0.into(),
            db: 0.into(),
            resp: 2.into(),
            name: Default::default(),
            kill: false.into(),
            multi_len: 0.into(),
            in_multi: false.into(),
            monitor: false.into(),
            qbuf: 0.into(),
            obl: 0.into(),
            no_evict: false.into(),
            unix,
            blocked: false.into(),
            qbuf_free: 0.into(),
            rbs: 0.into(),
            multi_mem: 0.into(),
            memory: 0.into(),
            subscriptions: Default::default(),
            user: Mutex::new(None),
            tracking: 0.into(),
            tracking_redirect: 0.into(),
            link_role: 0.into(),
        }
    }

    pub fn link_role(&self) -> Option<LinkRole> {
        match self.link_role.load(Ordering::Relaxed) {
            1 => Some(LinkRole::Replica),
            2 => Some(LinkRole::Master),
            _ => None,
        }
    }

    pub fn set_link_role(&self, role: LinkRole) {
        self.link_role.store(role as u8, Ordering::Relaxed);
    }

    /// A client with no connection (the journal's replay at start).
    pub fn detached(id: u64) -> ClientInfo {
        ClientInfo::new(id, String::new(), String::new(), -1, false)
    }
}

pub struct Client {
    pub id: u64,
    pub db: usize,
    pub resp3: bool,
    /// Authenticated by AUTH or HELLO, or at connection while the default
    /// user needed no password (Redis's `c->authenticated`).
    pub authenticated: bool,
    /// The user whose permissions the client's commands are checked
    /// against; None for the server's own clients (the journal's replay,
    /// the master's link), which may run anything, as Redis's
    /// user-less clients.
    pub user: Option<Arc<crate::acl::UserHandle>>,
    pub multi: Option<Multi>,
    /// Keys this client WATCHes, as (database, key).
    pub watching: Vec<(usize, Box<[u8]>)>,
    pub watch_flag: WatchFlag,
    pub reply: ReplyMode,
    /// QUIT, or a protocol error: close once the pending replies are written.
    pub close_after_reply: bool,
    /// The running command's keys are not marked accessed before it runs:
    /// a memcached `mg` reads the item's last access and fetched mark
    /// first, and records the access itself unless its `u` flag says not to.
    pub no_touch: bool,
    pub info: Arc<ClientInfo>,
    /// The worker thread that owns the connection.
    pub worker: usize,
    /// The journal's replay at start: runs while other clients are told
    /// -LOADING.
    pub is_loader: bool,
    /// Connected on `tls-port`: under `tls-cluster` it is sent to nodes'
    /// TLS ports, a plain client to their plaintext ones.
    pub tls: bool,
    /// The replication link's client (`replica.rs`): what the master
    /// sends runs as it, exempt from READONLY and the OOM and MISCONF
    /// refusals, as Redis's CLIENT_MASTER.
    pub is_master: bool,
    /// Waiting in a blocking pop: the worker holds the client's further
    /// requests until the wait ends.
    pub blocked: Option<Arc<crate::blocking::Waiter>>,
    pub subscriptions: crate::pubsub::Subscriptions,
    /// The replication stream's end after this client's last write: what
    /// its WAIT waits for replicas to acknowledge (Redis's `woff`).
    pub woff: u64,
    /// What the connection said of itself with REPLCONF, if anything.
    pub replconf: Option<Box<crate::replication::master::ReplConf>>,
    /// Set by PSYNC or SYNC: the worker hands the connection to
    /// replication once the command returns.
    pub handoff: Option<Box<crate::replication::Handoff>>,
    /// Where in the output the running command's pub/sub frames end:
    /// those leave even under CLIENT REPLY OFF (Redis's CLIENT_PUSHING).
    pub pushed_to: usize,
    /// Used memory was over `maxmemory` with nothing left to evict when
    /// the running command began (Redis's `pre_command_oom_state`): it,
    /// and the commands a script it runs calls, may not grow memory.
    pub oom: bool,
    /// ASKING: the next command may touch a slot this node is importing
    /// (cleared after it, outside MULTI).
    pub asking: bool,
    /// READONLY: a replica serves reads of its master's slots.
    pub readonly: bool,
    /// CLIENT CACHING yes (OPTIN) or no (OPTOUT): for the next command, or
    /// the next transaction (Redis's CLIENT_TRACKING_CACHING).
    pub caching: bool,
    /// CLIENT TRACKING BCAST's prefixes, in key order (CLIENT TRACKINGINFO).
    pub tracking_prefixes: std::collections::BTreeSet<Box<[u8]>>,
}

impl Client {
    pub fn new(info: Arc<ClientInfo>, authenticated: bool) -> Client {
        Client {
            id: info.id,
            db: 0,
            resp3: false,
            authenticated,
            user: None,
            multi: None,
            watching: Vec::new(),
            watch_flag: WatchFlag::default(),
            reply: ReplyMode::On,
            close_after_reply: false,
            no_touch: false,
            info,
            worker: 0,
            is_loader: false,
            tls: false,
            is_master: false,
            blocked: None,
            subscriptions: Default::default(),
            woff: 0,
            replconf: None,
            handoff: None,
            pushed_to: 0,
            oom: false,
            asking: false,
            readonly: false,
            caching: false,
            tracking_prefixes: Default::default(),
        }
    }

    /// Runs the client as `user` from now on.
    pub fn set_user(&mut self, user: Arc<crate::acl::UserHandle>) {
        *self.info.user.lock() = Some(user.clone());
        self.user = Some(user);
    }

    /// The name of the client's user, `default` for the server's own.
    pub fn user_name(&self) -> Vec<u8> {
        self.user.as_ref().map_or_else(|| b"default".to_vec(), |u| u.name.clone())
    }

    pub fn name(&self) -> Option<Vec<u8>> {
        self.info.name.lock().clone()
    }
}

/// Messages a worker thread receives from other threads.
#[derive(Debug)]
pub enum Message {
    /// Write these bytes to a client (MONITOR lines).
    Deliver { client: u64, bytes: Vec<u8> },
    /// PUBLISH's messages to clients of this worker, each `(client,
    /// frame)`, which may leave once the journal is durable at `lsn`.
    Publish { messages: Vec<(u64, Vec<u8>)>, lsn: u64 },
    /// Look at the kill flags of your clients.
    CheckKills,
    /// The journal became durable further: release the replies waiting.
    Durable,
    /// A blocked client's wait ended (served, or CLIENT UNBLOCK): its
    /// reply, which may leave once the journal is durable at `lsn`.
    Unblock { client: u64, reply: Vec<u8>, lsn: u64 },
    /// The server became a replica: end every blocked client's wait with
    /// an error and close it, as Redis's `disconnectAllBlockedClients`
    /// (what it waits for would now come from the master, or never).
    BecameReplica,
    /// A CLIENT PAUSE ended early (CLIENT UNPAUSE, or a shorter pause
    /// replaced it): run the input your paused connections hold.
    Resume,
    /// Serve this connection: another worker admitted it, and this one
    /// served the fewest.
    Adopt(crate::worker::Accepted),
    /// A slot left this node's shard, or the cluster went down: end the
    /// waits of blocked clients whose keys must now be asked elsewhere.
    RedirectBlocked,
    /// These shard channels of a client went with their slot: unsubscribe
    /// it from them, with a confirmation for each.
    ShardChannelsGone { client: u64, channels: Vec<Box<[u8]>> },
}

/// The registry of live clients and the mailboxes of the worker threads.
#[derive(Default)]
pub struct Clients {
    next_id: AtomicU64,
    live: Mutex<BTreeMap<u64, (Arc<ClientInfo>, usize)>>,
    pub monitors: Mutex<Vec<(u64, usize)>>,
    pub monitor_count: AtomicUsize,
    pub connected: AtomicUsize,
    /// What the connections hold together, and client eviction's state.
    pub memory: crate::client_memory::ClientMemory,
}

impl Clients {
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn register(&self, info: Arc<ClientInfo>, worker: usize) {
        self.live.lock().insert(info.id, (info, worker));
        self.connected.fetch_add(1, Ordering::Relaxed);
    }

    pub fn unregister(&self, id: u64) {
        if self.live.lock().remove(&id).is_some() {
            self.connected.fetch_sub(1, Ordering::Relaxed);
        }
        let mut monitors = self.monitors.lock();
        let before = monitors.len();
        monitors.retain(|(c, _)| *c != id);
        if monitors.len() != before {
            self.monitor_count.store(monitors.len(), Ordering::Relaxed);
        }
    }

    /// A snapshot of every live client, in id order.
    pub fn list(&self) -> Vec<(Arc<ClientInfo>, usize)> {
        self.live.lock().values().cloned().collect()
    }

    pub fn get(&self, id: u64) -> Option<(Arc<ClientInfo>, usize)> {
        self.live.lock().get(&id).cloned()
    }

    pub fn unregister_monitor(&self, id: u64) {
        let mut monitors = self.monitors.lock();
        monitors.retain(|(c, _)| *c != id);
        self.monitor_count.store(monitors.len(), Ordering::Relaxed);
    }

    pub fn add_monitor(&self, id: u64, worker: usize) {
        let mut monitors = self.monitors.lock();
        monitors.push((id, worker));
        self.monitor_count.store(monitors.len(), Ordering::Relaxed);
    }
}
