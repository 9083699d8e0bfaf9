//! A worker thread: one mio event loop that accepts connections, reads
//! requests, executes them to completion against the locked shards, and
//! writes the replies. Every worker accepts on its own SO_REUSEPORT
//! listener, and passes each connection it admits to the worker serving
//! the fewest ([`Worker::admit`]). While one of its clients runs a busy
//! script, the script's hook serves the others ([`beside`]).

mod beside;

pub use beside::{beside_a_script, serve_beside_busy_script};

use std::collections::{HashMap, VecDeque};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use mio::{Events, Interest, Poll, Token};
use slab::Slab;

use crate::client::{Client, ClientInfo, Message};
use crate::command;
use crate::link::Link;
use crate::server::{unix_ms, Mailbox, Server, WorkerStats};

const WAKER: Token = Token(usize::MAX - 1);
/// The first `port` listener's token; the next ones count down by two from it.
const TCP_LISTENER: Token = Token(usize::MAX - 2);
const UNIX_LISTENER: Token = Token(usize::MAX - 3);
/// The first memcached listener's token; the next ones count down from it.
const MEMCACHE_LISTENER: Token = Token(usize::MAX - 200);
/// The first `tls-port` listener's token; the next ones count down from it.
const TLS_LISTENER: Token = Token(usize::MAX - 400);
/// At most this many listeners per protocol (`bind` addresses).
const LISTENERS_MAX: usize = 64;

/// The token of a worker's `i`th listener on `port`.
pub fn tcp_listener_token(i: usize) -> Token {
    Token(TCP_LISTENER.0 - 2 * i)
}

/// The token of a worker's `i`th listener on `memcached-port`.
pub fn memcache_listener_token(i: usize) -> Token {
    Token(MEMCACHE_LISTENER.0 - i)
}

/// The token of a worker's `i`th listener on `tls-port`.
pub fn tls_listener_token(i: usize) -> Token {
    Token(TLS_LISTENER.0 - i)
}

/// Read granularity; the buffer grows past it only for a request that
/// does not fit.
const READ_CHUNK: usize = 16 * 1024;
/// An idle client's read buffer is freed after this long (Redis's 2 s).
const QUERY_BUFFER_IDLE_MS: u64 = 2000;
/// A read buffer past this size shrinks to its recent peak when that peak
/// is under half of it (Redis's PROTO_RESIZE_THRESHOLD).
const QUERY_BUFFER_RESIZE_OVER: usize = 32 * 1024;
/// Replies are flushed when this much is pending even mid-pipeline, so a
/// huge pipeline does not buffer all its replies.
const WRITE_HIGH_WATER: usize = 256 * 1024;

/// Whether a drained reply buffer over 1 MB is given back (DEBUG
/// REPLYBUFFER RESIZING, Redis's switch for its reply buffer resizing),
/// process-wide as Redis's.
pub static REPLY_BUFFER_RESIZING: AtomicBool = AtomicBool::new(true);
/// A worker that has been holding replies for the journal this long
/// without a break yields its core at the end of each loop turn ([`Worker::yield_to_a_late_writer`]):
/// about two fdatasyncs of a fast disk, far under a 4 ms scheduler tick.
/// Not after each event: a yield per event, after 200 us or after 1 ms,
/// cut the records per sync of pipelined 100-byte SETs from about 200 to
/// 30 and their rate by half.
const YIELD_TO_WRITER_AFTER: Duration = Duration::from_micros(200);

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    /// On `tls-port`.
    Tls(Box<keel_tls::TlsStream>),
}

impl Stream {
    fn raw_fd(&self) -> std::os::fd::RawFd {
        match self {
            Stream::Tcp(s) => std::os::fd::AsRawFd::as_raw_fd(s),
            Stream::Unix(s) => std::os::fd::AsRawFd::as_raw_fd(s),
            Stream::Tls(s) => std::os::fd::AsRawFd::as_raw_fd(&s.sock),
        }
    }

    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
            Stream::Tls(s) => &mut s.sock,
        }
    }

    /// Whether a short read may leave bytes behind: a TLS session hands
    /// out one record's plaintext at a time, so only `WouldBlock` says the
    /// socket is drained.
    fn reads_by_record(&self) -> bool {
        matches!(self, Stream::Tls(_))
    }

    /// Sends what a TLS session holds (encrypted replies the socket did
    /// not take before); what it still does not take waits for the next
    /// writable event.
    fn send_held(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.send_held_now(),
            _ => Ok(()),
        }
    }

    /// Whether output the worker counts as written still waits in a TLS
    /// session.
    fn holds_output(&self) -> bool {
        matches!(self, Stream::Tls(s) if s.holds_output())
    }
}

impl Stream {
    /// The socket in blocking mode, for a thread of its own.
    fn into_blocking(self) -> io::Result<Link> {
        let link = match self {
            Stream::Tcp(s) => Link::Tcp(s.into()),
            Stream::Unix(s) => Link::Unix(s.into()),
            Stream::Tls(s) => return Ok(Link::Tls(Arc::new(keel_tls::BlockingTls::from_polled(*s)?))),
        };
        match &link {
            Link::Tcp(s) => s.set_nonblocking(false)?,
            Link::Unix(s) => s.set_nonblocking(false)?,
            Link::Tls(_) => {}
        }
        Ok(link)
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(buf),
            Stream::Unix(s) => s.write(buf),
            Stream::Tls(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

struct Conn {
    stream: Stream,
    client: Client,
    /// Bytes read and not yet parsed live in `rbuf[rstart..rend]`.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// The most bytes `rbuf` held since the cron last looked at it (Redis's
    /// `querybuf_peak`).
    rpeak: usize,
    wbuf: Vec<u8>,
    wpos: usize,
    /// CLIENT PAUSE or the start of a load ([`crate::loading`]) holds this
    /// connection's next request: its input stays buffered until the hold
    /// ends (each loop turn and `Message::Resume` look).
    paused: bool,
    /// Replies that may not leave before the journal is durable at a
    /// position (under `everysec` and `no`, written there: `durable_lsn`):
    /// (offset in `wbuf` where the reply starts, position), in reply order.
    /// Only the prefix before the first unmet one is written.
    gate: VecDeque<(usize, u64)>,
    /// In the worker's list of connections waiting for durability.
    gated: bool,
    /// In the worker's list of connections whose replies leave at the end
    /// of the loop turn, after the journal's write.
    unsent: bool,
    /// Since when (Unix seconds) the pending output has been at or over the
    /// soft `client-output-buffer-limit`.
    over_soft_since: Option<u64>,
    /// A memcached client's state; None for a Redis client.
    memcache: Option<Box<McConn>>,
    /// Its ended wait still holds places in queues a busy script's shards
    /// hold ([`Worker::leaving`]): its next request waits for them to go.
    leaving: bool,
}

/// What a connection on `memcached-port` keeps besides a Redis client's.
#[derive(Default)]
struct McConn {
    /// Bytes still to drop: the rest of a refused storage command's data.
    swallow: usize,
    /// Takes the replies of the Redis commands requests run as.
    scratch: Vec<u8>,
}

/// What the parsers of both protocols are bounded by.
struct ParseLimits {
    resp: keel_protocol::Limits,
    /// `client-query-buffer-limit`.
    query_buffer: usize,
    memcache: keel_protocol::memcache::McLimits,
}

/// A connection one worker admitted, on its way to the worker that will
/// serve it ([`Message::Adopt`]).
pub struct Accepted {
    stream: Stream,
    addr: String,
    laddr: String,
    /// From `memcached-port`: speaks the memcached text protocol.
    memcache: bool,
    /// The error a client turned away over TLS is sent once its handshake
    /// is done, before it is closed (`admitted`).
    refusal: Option<&'static [u8]>,
}

impl std::fmt::Debug for Accepted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Accepted").field("addr", &self.addr).field("laddr", &self.laddr).finish_non_exhaustive()
    }
}

/// A worker's listeners as bound at start.
pub struct Listeners {
    /// On `port`.
    pub tcp: Vec<TcpListener>,
    /// On `memcached-port`.
    pub memcache: Vec<TcpListener>,
    /// On `tls-port`.
    pub tls: Vec<TcpListener>,
    pub unix: Option<UnixListener>,
}

/// A worker's listeners as its loop, and a busy script's hook, accept on
/// them: those on `port` and `memcached-port` shared with CONFIG SET,
/// which replaces them ([`crate::listen::PortListeners`]).
pub(crate) struct Doors {
    tcp: crate::listen::SharedListeners,
    memcache: crate::listen::SharedListeners,
    tls: crate::listen::SharedListeners,
    unix: Option<UnixListener>,
}

pub struct Worker {
    index: usize,
    server: Arc<Server>,
    stats: Arc<WorkerStats>,
    poll: Poll,
    mailbox: Arc<Mailbox>,
    /// Boxed, so that taking one out while it runs a command
    /// ([`Worker::with_conn_out`]) moves a pointer.
    conns: Slab<Box<Conn>>,
    /// Client id to position in `conns`, for what other threads send a
    /// client (messages, served pops).
    by_id: HashMap<u64, usize>,
    /// Shared with a busy script's hook.
    doors: Arc<Doors>,
    /// Some connection may be held by a pause (saves scanning every
    /// connection on every loop turn).
    any_paused: bool,
    /// `Pauses::weakened` when held connections were last looked at: a
    /// pause that got weaker since (ALL to WRITE) may release some.
    pauses_weakened: u64,
    /// Connections holding replies until the journal is durable.
    gated: Vec<usize>,
    /// When `gated` last went from empty to not: no later than its oldest
    /// reply was held. Under a steady stream of held replies it stays
    /// old, and the worker yields at the end of every turn: see
    /// [`YIELD_TO_WRITER_AFTER`].
    gated_since: Option<Instant>,
    /// The durable position `gated` was last released at.
    released_at: u64,
    /// Connections whose client waits in a blocking pop.
    blocked: Vec<usize>,
    /// Ended waits whose queue places a busy script's shards kept from
    /// being removed ([`crate::blocking::forget`]): each loop turn tries
    /// again.
    leaving: Vec<Arc<crate::blocking::Waiter>>,
    /// This loop turn's replies wait for the journal's `write(2)` (logging
    /// under `everysec` or `no`; see [`Worker::send_unsent`]).
    write_first: bool,
    /// Connections with replies held until the end of the loop turn.
    unsent: Vec<usize>,
    /// Where the cron's walk over the connections' read buffers goes on
    /// (a position in `conns`).
    swept_to: usize,
}

impl Worker {
    pub fn new(index: usize, server: Arc<Server>, listeners: Listeners) -> io::Result<Worker> {
        let poll = Poll::new()?;
        let Listeners { tcp, memcache, tls, mut unix } = listeners;
        let tcp = server.listeners.attach(poll.registry().try_clone()?, tcp)?;
        let memcache = server.memcache_listeners.attach(poll.registry().try_clone()?, memcache)?;
        let tls = server.tls_listeners.attach(poll.registry().try_clone()?, tls)?;
        if let Some(l) = unix.as_mut() {
            poll.registry().register(l, UNIX_LISTENER, Interest::READABLE)?;
        }
        let waker = mio::Waker::new(poll.registry(), WAKER)?;
        let mailbox = Arc::new(Mailbox { queue: Default::default(), waker, awaiting_durable: false.into() });
        let stats = server.workers[index].clone();
        let doors = Arc::new(Doors { tcp, memcache, tls, unix });
        Ok(Worker {
            index,
            server,
            stats,
            poll,
            mailbox,
            conns: Slab::new(),
            by_id: HashMap::new(),
            doors,
            any_paused: false,
            pauses_weakened: 0,
            gated: Vec::new(),
            gated_since: None,
            released_at: 0,
            blocked: Vec::new(),
            leaving: Vec::new(),
            write_first: false,
            unsent: Vec::new(),
            swept_to: 0,
        })
    }

    pub fn mailbox(&self) -> Arc<Mailbox> {
        self.mailbox.clone()
    }

    pub fn run(mut self) {
        beside::attach(self.index, &self.server, &self.stats, &self.doors, &self.mailbox);
        self.server.watchdog.attach(self.index);
        let mut events = Events::with_capacity(1024);
        let mut next_cron = Instant::now();
        loop {
            if self.server.shutdown.load(Ordering::Relaxed) {
                return;
            }
            let mut timeout = next_cron.saturating_duration_since(Instant::now());
            // Wake when a pause that holds one of our clients runs out,
            // rather than up to a cron period later.
            if self.any_paused {
                // None: no pause (a load's start holds them; its end wakes us).
                if let Some(until) = self.server.pauses.next_end_ms() {
                    timeout = timeout.min(Duration::from_millis(until.saturating_sub(unix_ms())));
                }
            }
            // Blocking timeouts are to the millisecond.
            if let Some(deadline) = self.next_block_deadline() {
                timeout = timeout.min(Duration::from_millis((deadline + 1).saturating_sub(unix_ms())));
            }
            // Work a busy script put off is tried again every millisecond.
            if !self.leaving.is_empty() || self.server.blocking.any_deferred() {
                timeout = timeout.min(Duration::from_millis(1));
            }
            self.server.worker_cores.idle(self.index);
            self.server.watchdog.turn(self.index, false);
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::error!("poll failed: {e}");
                    return;
                }
            }
            self.server.worker_cores.busy(self.index);
            self.server.watchdog.turn(self.index, true);
            self.write_first = self.server.journal().is_some() && !self.server.gate_replies();
            for event in events.iter() {
                match event.token() {
                    WAKER => self.drain_mailbox(),
                    UNIX_LISTENER => self.accept(Door::Unix),
                    t if t.0 <= TCP_LISTENER.0
                        && t.0 > TCP_LISTENER.0 - 2 * LISTENERS_MAX
                        && (TCP_LISTENER.0 - t.0).is_multiple_of(2) =>
                    {
                        self.accept(Door::Tcp((TCP_LISTENER.0 - t.0) / 2))
                    }
                    t if t.0 <= MEMCACHE_LISTENER.0 && t.0 > MEMCACHE_LISTENER.0 - LISTENERS_MAX => {
                        self.accept(Door::Memcache(MEMCACHE_LISTENER.0 - t.0))
                    }
                    t if t.0 <= TLS_LISTENER.0 && t.0 > TLS_LISTENER.0 - LISTENERS_MAX => self.accept(Door::Tls(TLS_LISTENER.0 - t.0)),
                    Token(key) => self.serve(key, event.is_read_closed()),
                }
                self.release_durable_if_advanced();
            }
            if self.server.shutdown.load(Ordering::Relaxed) {
                self.send_unsent();
                return;
            }
            self.yield_to_a_late_writer();
            self.resume_if_unpaused();
            if !self.blocked.is_empty() {
                self.expire_blocked();
            }
            if !self.leaving.is_empty() {
                self.retry_leaving();
            }
            if self.server.blocking.any_deferred() {
                crate::blocking::retry_deferred(&self.server, &self.stats);
            }
            if Instant::now() >= next_cron {
                let hz = self.server.config.read().effective_hz(self.server.clients.connected.load(Ordering::Relaxed));
                next_cron = Instant::now() + Duration::from_millis(1000 / u64::from(hz));
                self.cron();
            }
            self.send_unsent();
        }
    }

    /// Sends the loop turn's replies held by `write_first`, once the
    /// journal has written what they may depend on. Redis writes its AOF
    /// buffer before it sends a turn's replies whatever `appendfsync`
    /// says, so a process crash loses no acknowledged write; without
    /// this, replies under `everysec` left before the writer thread's
    /// `write(2)`, and a kill -9 lost the last instants (BENCHMARKS.md).
    /// Sending replies as soon as each connection is served, after a
    /// round trip through the writer thread, cost 15-24% of the pipelined
    /// mixes' throughput; one write per turn on the worker's own thread
    /// is what Redis pays.
    fn send_unsent(&mut self) {
        if self.unsent.is_empty() {
            return;
        }
        write_journal_first(&self.server);
        for key in std::mem::take(&mut self.unsent) {
            if let Some(conn) = self.conns.get_mut(key) {
                conn.unsent = false;
                self.flush_now(key);
            }
        }
    }

    /// Takes what waits at `door`, each connection as [`Worker::admit`]
    /// decides.
    fn accept(&mut self, door: Door) {
        let (server, doors) = (self.server.clone(), self.doors.clone());
        accept_at(&server, &doors, door, |accepted, local| self.admit(accepted, local));
    }

    /// Lets a new connection in, or refuses it as Redis does
    /// ([`admitted`]), and hands it to the worker serving the fewest
    /// connections ([`least_loaded`]).
    fn admit(&mut self, mut accepted: Accepted, local: bool) {
        if !admitted(&self.server, &self.stats, &mut accepted, local) {
            return;
        }
        match least_loaded(&self.server, self.index) {
            target if target == self.index => self.adopt(accepted),
            target => self.server.send(target, Message::Adopt(accepted)),
        }
    }

    /// Starts serving a connection admitted here or by another worker.
    fn adopt(&mut self, accepted: Accepted) {
        let conn = new_conn(&self.server, self.index, accepted);
        self.install(conn);
    }

    /// Takes a new connection into the loop.
    fn install(&mut self, mut conn: Box<Conn>) {
        let entry = self.conns.vacant_entry();
        let token = Token(entry.key());
        if let Err(e) = self.poll.registry().register(conn.stream.source(), token, Interest::READABLE | Interest::WRITABLE) {
            tracing::warn!("register failed: {e}");
            self.stats.connections.fetch_sub(1, Ordering::Relaxed);
            return;
        }
        let info = conn.client.info.clone();
        let memcache = conn.memcache.is_some();
        self.server.clients.register(info.clone(), self.index);
        self.by_id.insert(info.id, token.0);
        entry.insert(conn);
        crate::client_memory::account(&self.server, &info, memory_of(&self.conns[token.0]));
        if memcache {
            let state = &self.server.memcache;
            state.curr_connections.fetch_add(1, Ordering::Relaxed);
            state.total_connections.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn drain_mailbox(&mut self) {
        let messages = std::mem::take(&mut *self.mailbox.queue.lock());
        for message in messages {
            match message {
                Message::Deliver { client, bytes } => {
                    if let Some(key) = self.conn_of(client) {
                        self.conns[key].wbuf.extend_from_slice(&bytes);
                        self.flush(key);
                    }
                }
                Message::Publish { messages, lsn } => {
                    for (client, frame) in messages {
                        if let Some(key) = self.conn_of(client) {
                            let conn = &mut self.conns[key];
                            let start = conn.wbuf.len();
                            conn.wbuf.extend_from_slice(&frame);
                            if lsn > 0 {
                                conn.gate.push_back((start, lsn));
                            }
                            self.flush(key);
                        }
                    }
                }
                Message::Unblock { client, reply, lsn } => {
                    if let Some(key) = self.conn_of(client) {
                        self.unblock(key, &reply, lsn);
                    }
                }
                Message::CheckKills => {
                    let killed: Vec<usize> = self
                        .conns
                        .iter()
                        .filter(|(_, c)| c.client.info.kill.load(Ordering::Relaxed))
                        .map(|(k, _)| k)
                        .collect();
                    for key in killed {
                        self.close(key);
                    }
                }
                Message::Resume => self.resume_if_unpaused(),
                Message::Durable => self.release_durable(),
                Message::Adopt(accepted) => self.adopt(accepted),
                Message::RedirectBlocked => self.redirect_blocked(),
                Message::BecameReplica => self.unblock_all_for_replica(),
                Message::ShardChannelsGone { client, channels } => {
                    if let Some(key) = self.conn_of(client) {
                        let conn = &mut self.conns[key];
                        crate::pubsub::unsubscribe_gone(&self.server, &mut conn.client, &channels, &mut conn.wbuf);
                        self.flush(key);
                    }
                }
            }
        }
    }

    /// Reads what the socket has, executes every complete request
    /// ([`read_and_process`]), and writes the replies.
    fn serve(&mut self, key: usize, read_closed: bool) {
        let limits = self.limits();
        let Some(conn) = self.conns.get(key) else { return };
        // Evicted or killed from another thread: nothing more of it runs.
        if conn.client.info.kill.load(Ordering::Acquire) {
            self.close(key);
            return;
        }
        let write_first = self.write_first;
        let Some(eof) = self.with_conn_out(key, |server, stats, conn| {
            read_and_process(server, stats, conn, &limits, read_closed, write_first)
        }) else {
            return;
        };
        let conn = &mut self.conns[key];
        self.any_paused |= conn.paused;
        if conn.client.blocked.is_some() && !self.blocked.contains(&key) {
            self.blocked.push(key);
        }
        if conn.rstart == conn.rend {
            conn.rstart = 0;
            conn.rend = 0;
        }
        let qbuf = query_buffer_used(&self.server, conn, &limits.resp);
        conn.client.info.qbuf.store(qbuf as u64, Ordering::Relaxed);
        conn.client.info.qbuf_free.store((conn.rbuf.len() - conn.rend) as u64, Ordering::Relaxed);
        conn.client.info.rbs.store(conn.wbuf.capacity() as u64, Ordering::Relaxed);
        if eof {
            self.close(key);
            return;
        }
        self.flush(key);
    }

    /// Runs `f` on connection `key`, taken out of `conns` meanwhile, with
    /// the others lent to this thread's [`beside`] for as long as it runs:
    /// a script `f` runs serves them from its hook once it is busy, as
    /// Redis does (`processEventsWhileBlocked`), where they would
    /// otherwise wait for its end, SCRIPT KILL among them. What the hook
    /// did is then taken into the loop.
    fn with_conn_out<R>(&mut self, key: usize, f: impl FnOnce(&Server, &WorkerStats, &mut Conn) -> R) -> Option<R> {
        let mut conn = self.conns.try_remove(key)?;
        beside::lend(std::mem::take(&mut self.conns));
        let result = f(&self.server, &self.stats, &mut conn);
        let (conns, served) = beside::reclaim();
        self.conns = conns;
        // Nothing entered or left `conns` meanwhile, so `key` is the slab's
        // next free place again.
        let entry = self.conns.vacant_entry();
        assert_eq!(entry.key(), key, "a connection came back to another place");
        entry.insert(conn);
        if let Some(served) = served {
            self.take_in(served);
        }
        Some(result)
    }

    /// Takes into the loop what a busy script's hook did: the connections
    /// it accepted and the replies it wrote.
    fn take_in(&mut self, served: beside::Served) {
        for conn in served.newcomers {
            self.install(conn);
        }
        // Some client may have been held by a pause meanwhile.
        self.any_paused = true;
        let mut touched = served.touched;
        touched.sort_unstable();
        touched.dedup();
        for key in touched {
            self.flush(key);
        }
    }

    /// Runs the input that held connections keep, once neither a pause nor
    /// the start of a load holds them, or a pause got weaker (a write
    /// held again is held as before).
    fn resume_if_unpaused(&mut self) {
        if !self.any_paused || self.server.held_by_load() {
            return;
        }
        let paused = self.server.paused(unix_ms);
        let weakened = self.server.pauses.weakened();
        if paused == Some(false) || paused.is_some() && weakened == self.pauses_weakened {
            return;
        }
        self.pauses_weakened = weakened;
        self.any_paused = false;
        let paused: Vec<usize> = self.conns.iter().filter(|(_, c)| c.paused).map(|(k, _)| k).collect();
        let limits = self.limits();
        for key in paused {
            let ran = self.with_conn_out(key, |server, stats, conn| {
                conn.paused = false;
                conn.client.info.blocked.store(false, Ordering::Relaxed);
                process(server, stats, conn, &limits);
            });
            if ran.is_none() {
                continue;
            }
            let conn = &mut self.conns[key];
            self.any_paused |= conn.paused;
            if conn.client.blocked.is_some() && !self.blocked.contains(&key) {
                self.blocked.push(key);
            }
            self.flush(key);
        }
    }

    fn conn_of(&self, client: u64) -> Option<usize> {
        self.by_id.get(&client).copied()
    }

    /// The earliest deadline of this worker's blocked clients.
    fn next_block_deadline(&self) -> Option<u64> {
        self.blocked
            .iter()
            .filter_map(|&k| self.conns.get(k)?.client.blocked.as_ref().map(|w| w.deadline_ms))
            .filter(|&d| d > 0)
            .min()
    }

    /// Answers the blocked clients whose timeout has passed. One being
    /// served right now has lost nothing: its reply is on the way.
    fn expire_blocked(&mut self) {
        let now = unix_ms();
        let due: Vec<usize> = self
            .blocked
            .iter()
            .copied()
            .filter(|&k| {
                // Strictly past, as Redis: the clock is read in whole ms, so
                // the wait lasts at least the time asked for.
                self.conns.get(k).and_then(|c| c.client.blocked.as_ref()).is_some_and(|w| w.deadline_ms > 0 && w.deadline_ms < now)
            })
            .collect();
        for key in due {
            let waiter = self.conns[key].client.blocked.clone().expect("filtered on blocked");
            if waiter.claim() {
                self.unblock(key, &crate::blocking::timeout_reply(&self.server, &waiter), 0);
            }
        }
    }

    /// Ends, with a -MOVED or -CLUSTERDOWN, the waits whose keys this
    /// node no longer serves: the push that would serve them can only
    /// happen elsewhere now.
    fn redirect_blocked(&mut self) {
        let redirected: Vec<(usize, String)> = self
            .blocked
            .iter()
            .filter_map(|&k| {
                let client = &self.conns.get(k)?.client;
                let waiter = client.blocked.as_ref()?;
                // Every key of a blocking command is in one slot.
                let key = waiter.keys.first()?;
                let replica_read = client.readonly && waiter.argv[0].eq_ignore_ascii_case(b"xread");
                Some((k, crate::cluster::blocked_redirect(&self.server, key, replica_read, client.tls)?))
            })
            .collect();
        for (key, error) in redirected {
            let waiter = self.conns[key].client.blocked.clone().expect("filtered on blocked");
            if waiter.claim() {
                self.server.count_error(&error);
                let mut reply = Vec::new();
                keel_protocol::ReplyWriter::new(&mut reply, waiter.resp3).error(&error);
                self.unblock(key, &reply, 0);
            }
        }
    }

    /// [`Message::BecameReplica`]: every blocked client gets Redis's
    /// -UNBLOCKED error, and is closed once it is sent.
    fn unblock_all_for_replica(&mut self) {
        const ERROR: &str = "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)";
        for key in self.blocked.clone() {
            let Some(waiter) = self.conns.get(key).and_then(|c| c.client.blocked.clone()) else { continue };
            if waiter.claim() {
                self.server.count_error(ERROR);
                let mut reply = Vec::new();
                keel_protocol::ReplyWriter::new(&mut reply, waiter.resp3).error(ERROR);
                self.conns[key].client.close_after_reply = true;
                self.unblock(key, &reply, 0);
            }
        }
    }

    /// Ends the wait of the client on `key` with `reply` (gated on `lsn`),
    /// then runs the requests it sent meanwhile.
    fn unblock(&mut self, key: usize, reply: &[u8], lsn: u64) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        let Some(waiter) = conn.client.blocked.take() else { return };
        conn.client.info.blocked.store(false, Ordering::Relaxed);
        self.blocked.retain(|&k| k != key);
        let start = conn.wbuf.len();
        conn.wbuf.extend_from_slice(reply);
        if lsn > 0 {
            conn.gate.push_back((start, lsn));
        }
        if !crate::blocking::forget(&self.server, &waiter) {
            conn.leaving = true;
            self.leaving.push(waiter);
            self.flush(key);
            return;
        }
        self.run_held(key);
    }

    /// Tries again to forget the waits in [`Worker::leaving`]; runs what
    /// the clients still connected sent meanwhile.
    fn retry_leaving(&mut self) {
        for waiter in std::mem::take(&mut self.leaving) {
            if !crate::blocking::forget(&self.server, &waiter) {
                self.leaving.push(waiter);
            } else if let Some(&key) = self.by_id.get(&waiter.client) {
                self.conns[key].leaving = false;
                self.run_held(key);
            }
        }
    }

    /// Runs the requests a connection sent while its client waited, and
    /// sends their replies.
    fn run_held(&mut self, key: usize) {
        let limits = self.limits();
        self.with_conn_out(key, |server, stats, conn| process(server, stats, conn, &limits));
        let conn = &mut self.conns[key];
        self.any_paused |= conn.paused;
        if conn.client.blocked.is_some() {
            self.blocked.push(key);
        }
        self.flush(key);
    }

    fn limits(&self) -> ParseLimits {
        ParseLimits::of(&self.server)
    }

    /// Writes what may leave of a connection's output, or, under
    /// `write_first`, holds it until the end of the loop turn.
    fn flush(&mut self, key: usize) {
        if self.write_first {
            if let Some(conn) = self.conns.get_mut(key).filter(|c| !c.unsent) {
                conn.unsent = true;
                self.unsent.push(key);
            }
            return;
        }
        self.flush_now(key);
    }

    fn flush_now(&mut self, key: usize) {
        let Some(conn) = self.conns.get_mut(key) else { return };
        if conn.client.handoff.is_some() {
            self.hand_off(key);
            return;
        }
        // Checked before writing, as Redis checks as it adds a reply: a
        // reply over the hard limit closes the client however much of it
        // the socket would take.
        if output_limit_reached(&self.server, conn) {
            self.close(key);
            return;
        }
        let failed = write_out(conn, &self.stats, durable_lsn(&self.server)).is_err();
        let done = conn.wpos == conn.wbuf.len() && !conn.stream.holds_output();
        if failed || (done && (conn.client.close_after_reply || conn.client.info.kill.load(Ordering::Relaxed))) {
            self.close(key);
            return;
        }
        // After the output limit, which closes a client before eviction
        // would pick one, as Redis checks it first.
        crate::client_memory::account(&self.server, &conn.client.info, memory_of(conn));
        if !conn.gate.is_empty() && !conn.gated {
            conn.gated = true;
            self.gated.push(key);
            self.gated_since.get_or_insert_with(Instant::now);
            self.mailbox.awaiting_durable.store(true, Ordering::SeqCst);
            // A durable advance between the write above and the flag would
            // wake nobody: look once more now that the flag is up.
            if durable_lsn(&self.server) >= conn.gate.front().map_or(0, |g| g.1) {
                self.release_durable();
            }
        }
    }

    /// Releases held replies as soon as the journal's durable position
    /// has moved, between two events of a turn, rather than at the turn's
    /// end when the writer's wake-up is read: a turn under load lasts
    /// hundreds of microseconds, and on a core of its own the writer
    /// publishes in the middle of one. A few atomic loads per event while
    /// replies are held. W1 `always` on one core: p99 24% lower,
    /// throughput unchanged (BENCHMARKS.md).
    fn release_durable_if_advanced(&mut self) {
        if !self.gated.is_empty() && durable_lsn(&self.server) != self.released_at {
            self.release_durable();
        }
    }

    /// Writes the replies the journal's durable position now allows.
    fn release_durable(&mut self) {
        self.released_at = durable_lsn(&self.server);
        let waiting = std::mem::take(&mut self.gated);
        let since = self.gated_since.take();
        self.mailbox.awaiting_durable.store(false, Ordering::SeqCst);
        for key in waiting {
            if let Some(conn) = self.conns.get_mut(key) {
                conn.gated = false;
                self.flush(key);
            }
        }
        // Replies still held have waited since before this release.
        if !self.gated.is_empty() {
            self.gated_since = since.or(self.gated_since);
        }
    }

    /// Hands the core to the journal's writer when a reply has waited for
    /// it too long. The writer runs in `SCHED_BATCH`
    /// (`keel-aof-writer-batch-class`) and so never preempts a worker on
    /// its core: it runs when the worker sleeps, which under a closed loop
    /// of durable writes is soon, or when the worker's time slice ends,
    /// which under a flood of other requests can take several
    /// milliseconds, scheduler ticks apart (BENCHMARKS.md). A yield with
    /// nothing else to run costs one syscall.
    fn yield_to_a_late_writer(&self) {
        if self.gated_since.is_some_and(|since| since.elapsed() >= YIELD_TO_WRITER_AFTER) {
            std::thread::yield_now();
        }
    }

    fn close(&mut self, key: usize) {
        drop(self.remove(key));
    }

    /// Gives a connection that sent PSYNC or SYNC to replication, with
    /// the output it has not sent yet and the input it sent after.
    fn hand_off(&mut self, key: usize) {
        let Some(mut conn) = self.remove(key) else { return };
        let Some(handoff) = conn.client.handoff.take() else { return };
        let pending = conn.wbuf[conn.wpos..].to_vec();
        let unread = conn.rbuf[conn.rstart..conn.rend].to_vec();
        let info = Arc::clone(&conn.client.info);
        let link = match conn.stream.into_blocking() {
            Ok(link) => link,
            Err(e) => {
                tracing::warn!("replica {}: {e}", info.ip());
                return;
            }
        };
        crate::replication::master::serve(Arc::clone(&self.server), link, *handoff, info, pending, unread);
    }

    /// Takes a connection out of the worker, its client out of every
    /// registry; dropping what is returned closes it.
    fn remove(&mut self, key: usize) -> Option<Box<Conn>> {
        let mut removed = None;
        if let Some(mut conn) = self.conns.try_remove(key) {
            self.by_id.remove(&conn.client.id);
            let _ = self.poll.registry().deregister(conn.stream.source());
            if let Some(waiter) = conn.client.blocked.take() {
                // Whether or not a server is serving it right now, the
                // client is gone: its queue places go.
                waiter.claim();
                if !crate::blocking::forget(&self.server, &waiter) {
                    self.leaving.push(waiter);
                }
                self.blocked.retain(|&k| k != key);
            }
            command::transactions::unwatch_all(&self.server, &mut conn.client);
            self.server.pubsub.forget(&mut conn.client);
            crate::tracking::disable(&self.server, &mut conn.client);
            if conn.memcache.is_some() {
                self.server.memcache.curr_connections.fetch_sub(1, Ordering::Relaxed);
            }
            // Before the client leaves the registry: whoever sees it gone
            // sees this worker serving one fewer.
            self.stats.connections.fetch_sub(1, Ordering::Relaxed);
            self.server.clients.unregister(conn.client.id);
            crate::client_memory::forget(&self.server, &conn.client.info);
            removed = Some(conn);
        }
        removed
    }

    /// Periodic chores: expire keys in the shards this worker looks after,
    /// advance rehashing, close idle clients.
    fn cron(&mut self) {
        let now = unix_ms();
        // A safety net for a durable wake-up that raced with the flag.
        if !self.gated.is_empty() {
            self.release_durable();
        }
        if self.server.cron_paused.load(Ordering::Relaxed) {
            return;
        }
        self.server.lru_clock.store(
            crate::server::LRU_EPOCH_S + self.server.started.elapsed().as_secs() as u32,
            Ordering::Relaxed,
        );
        let shards = self.server.keyspace.shard_count();
        let workers = self.server.thread_count;
        // Bounded work per shard per tick. Active expiry repeats while a
        // pass finds many expired keys (Redis's adaptive cycle), within a
        // quarter of the tick (more with `active-expire-effort`) spread over
        // this worker's shards, as Redis gives its slow cycle 25% of the CPU.
        // A replica leaves expiry to its master, whose DELs come in the
        // stream (Redis's replicas run no active cycle either); nothing
        // expires while clients are paused.
        let active_expire = self.server.active_expire.load(Ordering::Relaxed)
            && !self.server.replica.is_replica()
            && self.server.paused(unix_ms).is_none();
        let loading = self.server.loading.load(Ordering::Relaxed);
        let (hz, active_rehashing, effort) = {
            let config = self.server.config.read();
            let clients = self.server.clients.connected.load(Ordering::Relaxed);
            (u64::from(config.effective_hz(clients)), config.activerehashing, config.active_expire_effort)
        };
        let own_shards = (shards / workers.max(1)).max(1) as u64;
        let effort = keel_engine::ExpireEffort::new(effort);
        let shard_budget = Duration::from_micros(10_000 * u64::from(effort.time_percent) / hz / own_shards);
        // The latency monitor's `expire-cycle`: this tick's expiry over
        // the worker's shards, the DELs it journals included, as Redis's
        // activeExpireCycle times its run and the DELs it propagates.
        let mut expiring = Duration::ZERO;
        for index in (self.index..shards).step_by(workers) {
            if let Some(mut shard) = self.server.keyspace.try_lock_shard(index) {
                let deadline = Instant::now() + shard_budget;
                for (index, db) in shard.dbs_mut().iter_mut().enumerate() {
                    if !db.is_empty() {
                        // Nothing expires while the journal replays.
                        if active_expire && !loading {
                            let started = self.server.latency_monitor.start();
                            db.active_expire_cycle(now, deadline, effort);
                            expiring += started.map_or(Duration::ZERO, |t| t.elapsed());
                        }
                        // Without it a table rehashes only as commands touch it.
                        // Not while loading (Redis's databasesCron does not run
                        // then either): a step also starts a pending shrink, and
                        // a table sized from RESIZEDB is nearly empty at first,
                        // so the load would grow it all over again, leaving its
                        // last doubling to be rehashed under the first clients.
                        if active_rehashing && !loading {
                            db.rehash_step(100);
                        }
                    }
                    // Expiries are journaled as DELs under the shard's lock,
                    // so they take their place among the shard's writes.
                    let started = if db.expired.is_empty() { None } else { self.server.latency_monitor.start() };
                    for key in db.expired.drain(..) {
                        if crate::durability::changes_logged(&self.server) {
                            crate::durability::append(&self.server, index, &[&b"DEL"[..], &key], None);
                        }
                        crate::notify::expired(&self.server, index, &key);
                    }
                    expiring += started.map_or(Duration::ZERO, |t| t.elapsed());
                }
                if self.server.tracking.active() {
                    crate::tracking::collect(&self.server, std::iter::once(&mut *shard), None);
                }
            }
        }
        if active_expire && !loading && self.server.latency_monitor.is_on() {
            self.server.latency_monitor.record("expire-cycle", expiring);
            self.server.latency_monitor.record_expired_deletes();
        }
        let totals = [
            self.server.total(|w| &w.total_commands),
            self.server.total(|w| &w.net_input_bytes),
            self.server.total(|w| &w.net_output_bytes),
        ];
        self.server.meter.lock().sample(now, totals);
        if self.index == 0 {
            crate::rewrite::cron(&self.server);
            // The keys a writable replica's own clients made volatile
            // (a replica's active expiry is otherwise off, above).
            if self.server.replica.is_replica()
                && self.server.active_expire.load(Ordering::Relaxed)
                && self.server.paused(unix_ms).is_none()
                && !loading
            {
                crate::replica::expire_own_keys(&self.server);
            }
            // What a command's time limit left over the limit, or a
            // CONFIG SET maxmemory below the used memory, is evicted here
            // while no command comes (Redis's eviction time proc).
            crate::evict::perform(&self.server);
            // Clients over `maxmemory-clients` that a pass left because
            // the rest could not be evicted, once that may have changed.
            crate::client_memory::evict(&self.server, false);
            if self.server.tracking.clients() > 0 {
                crate::tracking::limit(&self.server);
            }
            crate::memcache::flush_when_due(&self.server, now);
            self.server.migrate.close_idle();
        }
        // What expiry and eviction invalidated leaves now: this worker's
        // own clients hear of it before the next request they sent is
        // served, as Redis tells them before it runs the next command.
        if self.server.tracking.active() {
            crate::tracking::flush(&self.server, None);
            self.drain_mailbox();
        }
        // As Redis's clientsCron: each tick looks at a hz-th of the
        // clients, at least 5, so each once a second or more often.
        let step = (self.conns.len() / hz as usize).max(5);
        if self.swept_to >= self.conns.len() {
            self.swept_to = 0;
        }
        let mut over_output_limit = Vec::new();
        for (key, c) in self.conns.iter_mut().skip(self.swept_to).take(step) {
            let idle_ms = now.saturating_sub(c.client.info.last_interaction_ms.load(Ordering::Relaxed));
            resize_query_buffer(c, idle_ms);
            crate::client_memory::account(&self.server, &c.client.info, memory_of(c));
            // A soft limit passes its time with no new output too.
            if output_limit_reached(&self.server, c) {
                over_output_limit.push(key);
            }
        }
        for key in over_output_limit {
            self.close(key);
        }
        self.swept_to += step;
        let timeout_s = self.server.config.read().timeout_s;
        if timeout_s > 0 {
            // As Redis: monitors, subscribers and clients held by a pause
            // never time out.
            let idle: Vec<usize> = self
                .conns
                .iter()
                .filter(|(_, c)| {
                    !c.paused
                        && c.client.blocked.is_none()
                        && !c.client.info.monitor.load(Ordering::Relaxed)
                        && !c.client.subscriptions.any()
                        && now.saturating_sub(c.client.info.last_interaction_ms.load(Ordering::Relaxed))
                            > timeout_s * 1000
                })
                .map(|(k, _)| k)
                .collect();
            for key in idle {
                self.close(key);
            }
        }
    }
}

/// Parses and executes every complete request in the read buffer.
/// Reads what the socket has, executing every complete request as it
/// goes, so that a deep pipeline is not buffered whole before the first
/// reply. Returns whether the connection ended (or passed its query
/// buffer limit).
///
/// A read that leaves room in the buffer has drained the socket: under
/// edge-triggered polling, data that arrives later raises a new event, so
/// the extra read that would only answer EAGAIN is skipped (one syscall
/// fewer per request). A peer that half-closed raised its only event
/// already (`read_closed`), so then reading goes on to the end.
fn read_and_process(server: &Server, stats: &WorkerStats, conn: &mut Conn, limits: &ParseLimits, read_closed: bool, write_first: bool) -> bool {
    let mut eof = false;
    loop {
        if conn.rend == conn.rbuf.len() {
            if conn.rstart > 0 {
                conn.rbuf.copy_within(conn.rstart..conn.rend, 0);
                conn.rend -= conn.rstart;
                conn.rstart = 0;
            } else {
                grow_read_buffer(server, conn, &limits.resp);
            }
        }
        match conn.stream.read(&mut conn.rbuf[conn.rend..]) {
            Ok(0) => {
                eof = true;
                break;
            }
            Ok(n) => {
                conn.rend += n;
                conn.rpeak = conn.rpeak.max(conn.rend - conn.rstart);
                stats.reads_processed.fetch_add(1, Ordering::Relaxed);
                stats.net_input_bytes.fetch_add(n as u64, Ordering::Relaxed);
                if conn.rend - conn.rstart > limits.query_buffer {
                    tracing::warn!("closing client that reached max query buffer length");
                    eof = true;
                    break;
                }
                // Execute as we go so that a deep pipeline is not
                // buffered whole before the first reply.
                if conn.rend == conn.rbuf.len() {
                    process(server, stats, conn, limits);
                    if conn.wbuf.len() - conn.wpos >= WRITE_HIGH_WATER {
                        if write_first {
                            // As at the end of the turn (`send_unsent`).
                            write_journal_first(server);
                        }
                        if write_out(conn, stats, durable_lsn(server)).is_err() {
                            eof = true;
                            break;
                        }
                    }
                } else if !read_closed && !conn.stream.reads_by_record() {
                    break;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => {
                eof = true;
                break;
            }
        }
    }
    process(server, stats, conn, limits);
    eof
}

impl ParseLimits {
    fn of(server: &Server) -> ParseLimits {
        let config = server.config.read();
        ParseLimits {
            resp: keel_protocol::Limits { max_bulk_len: config.proto_max_bulk_len, ..keel_protocol::Limits::default() },
            memcache: keel_protocol::memcache::McLimits { max_item_size: config.memcached_max_item_size },
            query_buffer: config.client_query_buffer_limit,
        }
    }
}

/// A connection's state, its client made, for worker `worker` to serve.
fn new_conn(server: &Server, worker: usize, accepted: Accepted) -> Box<Conn> {
    let Accepted { stream, addr, laddr, memcache, refusal } = accepted;
    let unix = matches!(stream, Stream::Unix(_));
    let info = Arc::new(ClientInfo::new(server.clients.next_id(), addr, laddr, stream.raw_fd(), unix));
    let mut client = Client::new(info, server.acl.starts_authenticated() || memcache);
    client.set_user(server.acl.default_user());
    client.worker = worker;
    client.tls = matches!(stream, Stream::Tls(_));
    client.close_after_reply = refusal.is_some();
    Box::new(Conn {
        stream,
        client,
        rbuf: vec![0; READ_CHUNK],
        rstart: 0,
        rend: 0,
        rpeak: 0,
        wbuf: refusal.map(<[u8]>::to_vec).unwrap_or_default(),
        wpos: 0,
        paused: false,
        gate: VecDeque::new(),
        gated: false,
        unsent: false,
        over_soft_since: None,
        memcache: memcache.then(Box::default),
        leaving: false,
    })
}

/// One of a worker's listeners.
#[derive(Clone, Copy)]
enum Door {
    /// The `i`th on `port`.
    Tcp(usize),
    /// The `i`th on `memcached-port`.
    Memcache(usize),
    /// The `i`th on `tls-port`.
    Tls(usize),
    Unix,
}

/// Accepts every connection waiting at `door`, passing each to `admit`
/// with whether it is local (Redis's `islocalClient`: the unix socket or
/// exactly the loopback address).
fn accept_at(server: &Server, doors: &Doors, door: Door, mut admit: impl FnMut(Accepted, bool)) {
    loop {
        // The lock on a port's listeners is released before anything reads
        // the settings: CONFIG SET holds the settings' lock while it takes
        // this one.
        let arrival = match door {
            Door::Tcp(i) | Door::Memcache(i) | Door::Tls(i) => {
                let listeners = match door {
                    Door::Tcp(_) => &doors.tcp,
                    Door::Memcache(_) => &doors.memcache,
                    _ => &doors.tls,
                };
                let accepted = listeners.lock().get(i).map(TcpListener::accept);
                accepted.map(|a| a.map(|a| tcp_arrival(server, a, door)))
            }
            Door::Unix => doors.unix.as_ref().map(|l| l.accept().map(|(stream, _)| Some(unix_arrival(server, stream)))),
        };
        // An event of a listener CONFIG SET has just closed.
        let Some(arrival) = arrival else { return };
        match arrival {
            Ok(Some((accepted, local))) => admit(accepted, local),
            // Dropped at once (said in the log).
            Ok(None) => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                return;
            }
        }
    }
}

/// A connection accepted at a door of `port`, `memcached-port` or
/// `tls-port`; None if its TLS session cannot start.
fn tcp_arrival(server: &Server, (stream, peer): (TcpStream, SocketAddr), door: Door) -> Option<(Accepted, bool)> {
    let _ = stream.set_nodelay(true);
    let keepalive = server.config.read().tcp_keepalive_s;
    if keepalive > 0 {
        let sock = socket2::SockRef::from(&stream);
        let _ = sock.set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(Duration::from_secs(keepalive)));
    }
    let laddr = stream.local_addr().map(|a| fmt_addr(&a)).unwrap_or_default();
    let local = peer.ip() == Ipv4Addr::LOCALHOST || peer.ip() == Ipv6Addr::LOCALHOST;
    let stream = match door {
        Door::Tls(_) => {
            let started = match &*server.tls.read() {
                Some(contexts) => crate::tls::accept(stream, contexts),
                None => Err(io::Error::other("TLS is not configured")),
            };
            match started {
                Ok(s) => Stream::Tls(Box::new(s)),
                Err(e) => {
                    tracing::warn!("Error accepting a client connection: {e}");
                    return None;
                }
            }
        }
        _ => Stream::Tcp(stream),
    };
    let memcache = matches!(door, Door::Memcache(_));
    Some((Accepted { stream, addr: fmt_addr(&peer), laddr, memcache, refusal: None }, local))
}

fn unix_arrival(server: &Server, stream: UnixStream) -> (Accepted, bool) {
    let path = server.config.read().unixsocket.clone().unwrap_or_default();
    let path = path.display().to_string();
    (Accepted { stream: Stream::Unix(stream), addr: format!("{path}:0"), laddr: path, memcache: false, refusal: None }, true)
}

/// Whether a new connection may come in: Redis refuses it past
/// `maxclients`, and in protected mode one that is not local; Keel also a
/// memcached client when a password is needed. A refused one is told why,
/// but a TLS client only once its handshake is done, so it comes in for
/// that (Redis checks protected mode after the handshake; past
/// `maxclients` a TLS client is dropped before it, as by Redis).
fn admitted(server: &Server, stats: &WorkerStats, accepted: &mut Accepted, local: bool) -> bool {
    stats.connections_received.fetch_add(1, Ordering::Relaxed);
    let memcache = accepted.memcache;
    let (maxclients, protected) = {
        let config = server.config.read();
        (config.maxclients, config.protected_mode)
    };
    // A memcached client cannot authenticate: only a default user
    // that needs no password serves it. Protected mode looks at
    // nopass alone, as Redis's.
    let needs_auth = !server.acl.default_open();
    let nopass = server.acl.default_user().rules().flags & crate::acl::USER_NOPASS != 0;
    // The refusal, and whether Redis makes it after a TLS handshake.
    let refusal: Option<(&[u8], bool)> = if server.clients.connected.load(Ordering::Relaxed) >= maxclients {
        Some((if memcache { b"SERVER_ERROR max number of clients reached\r\n" } else { b"-ERR max number of clients reached\r\n" }, false))
    } else if memcache && needs_auth {
        // The text protocol has no way to give a password.
        Some((b"SERVER_ERROR requirepass is set: Keel serves memcached clients only without a password\r\n", false))
    } else if protected && nopass && !local {
        Some((if memcache { MEMCACHE_PROTECTED_MODE_DENIED } else { PROTECTED_MODE_DENIED }, true))
    } else {
        None
    };
    let Some((refusal, after_handshake)) = refusal else { return true };
    // Counted first: a client that has read the refusal must find it in INFO.
    stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
    if after_handshake && matches!(accepted.stream, Stream::Tls(_)) {
        accepted.refusal = Some(refusal);
        return true;
    }
    let _ = accepted.stream.write_all(refusal);
    false
}

/// The worker serving the fewest connections (`me` among equals),
/// counted as serving one more from now on; one whose busy script's hook
/// serves its connections only if all are. The kernel's SO_REUSEPORT
/// hash alone split 70 connections 40/30 over two workers, and the unix
/// socket is worker 0's alone.
fn least_loaded(server: &Server, me: usize) -> usize {
    let workers = &server.workers;
    let rank = |i: usize| {
        let worker = &workers[i];
        (worker.beside_busy_script.load(Ordering::Relaxed), worker.connections.load(Ordering::Relaxed))
    };
    let mut target = me;
    for index in 0..workers.len() {
        if rank(index) < rank(target) {
            target = index;
        }
    }
    workers[target].connections.fetch_add(1, Ordering::Relaxed);
    target
}

fn process(server: &Server, stats: &WorkerStats, conn: &mut Conn, limits: &ParseLimits) {
    if conn.client.close_after_reply {
        conn.rstart = conn.rend;
        return;
    }
    if conn.paused || conn.client.blocked.is_some() || conn.leaving || conn.client.handoff.is_some() {
        return;
    }
    if conn.memcache.is_some() {
        return process_memcache(server, stats, conn, &limits.memcache);
    }
    let limits = resp_limits(server, conn, &limits.resp);
    let now_ms = unix_ms();
    conn.client.info.last_interaction_ms.store(now_ms, Ordering::Relaxed);
    while conn.rstart < conn.rend {
        // Parse a pipeline's requests ahead of running them, so that the
        // memory their keys need is asked for first (`prefetch_keys`).
        let mut batch: smallvec::SmallVec<[(keel_protocol::Request<'_>, usize); PARSE_AHEAD]> = smallvec::SmallVec::new();
        let mut failed = None;
        let mut pos = conn.rstart;
        while batch.len() < PARSE_AHEAD && pos < conn.rend {
            match keel_protocol::parse_request(&conn.rbuf[pos..conn.rend], &limits) {
                Ok(Some((request, consumed))) => {
                    pos += consumed;
                    batch.push((request, consumed));
                }
                Ok(None) => break,
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let names = command::Names::of(&conn.client);
        // Each request's arguments and command, found once for both the
        // prefetch and the run; filled in place, as `collect` would move
        // the 2 KiB arrays. The batch itself (3 KiB) is read by reference.
        let mut argvs: smallvec::SmallVec<[Argv<'_>; PARSE_AHEAD]> = smallvec::SmallVec::new();
        argvs.extend(batch.iter().map(|(request, _)| request.argv.iter().map(|a| &**a).collect()));
        let mut resolved: smallvec::SmallVec<[Option<command::Resolved>; PARSE_AHEAD]> = smallvec::SmallVec::new();
        resolved.extend(argvs.iter().map(|argv| command::Resolved::find(&server.keyspace, names, argv)));
        if batch.len() > 1 {
            prefetch_keys(server, conn.client.db, &argvs, &resolved);
        }
        let parsed_all_it_could = batch.len() == PARSE_AHEAD;
        for ((argv, &(_, consumed)), &resolved) in argvs.iter().zip(&batch).zip(&resolved) {
            if server.held_by_load() || !argv.is_empty() && held_by_pause(server, &conn.client, argv) {
                conn.paused = true;
                conn.client.info.blocked.store(true, Ordering::Relaxed);
                return;
            }
            if !argv.is_empty() {
                // As Redis's query buffer, which holds the command while it
                // runs (CLIENT LIST's `qbuf`).
                conn.client.info.qbuf.store((conn.rend - conn.rstart) as u64, Ordering::Relaxed);
                let start = conn.wbuf.len();
                let lsn = command::execute_resolved(server, stats, &mut conn.client, &mut conn.wbuf, argv, now_ms, resolved);
                if lsn > 0 && conn.wbuf.len() > start {
                    conn.gate.push_back((start, lsn));
                }
            }
            conn.rstart += consumed;
            if conn.client.close_after_reply {
                conn.rstart = conn.rend;
                return;
            }
            // Blocked, or a replica now: what follows waits, or is the
            // replication link's.
            if conn.client.blocked.is_some() || conn.client.handoff.is_some() {
                return;
            }
        }
        if let Some(e) = failed {
            let text = format!("ERR {e}");
            server.count_error(&text);
            keel_protocol::ReplyWriter::new(&mut conn.wbuf, conn.client.resp3).error(&text);
            conn.client.close_after_reply = true;
            conn.rstart = conn.rend;
            return;
        }
        if !parsed_all_it_could {
            // The rest is an incomplete request, or nothing.
            return;
        }
    }
}

/// `process` for a memcached client.
fn process_memcache(server: &Server, stats: &WorkerStats, conn: &mut Conn, limits: &keel_protocol::memcache::McLimits) {
    let now_ms = unix_ms();
    conn.client.info.last_interaction_ms.store(now_ms, Ordering::Relaxed);
    let Conn { rbuf, rstart, rend, wbuf, gate, client, paused, memcache, .. } = conn;
    let mc = memcache.as_mut().expect("a memcached connection");
    while *rstart < *rend {
        if mc.swallow > 0 {
            let n = mc.swallow.min(*rend - *rstart);
            *rstart += n;
            mc.swallow -= n;
            continue;
        }
        match keel_protocol::memcache::parse(&rbuf[*rstart..*rend], limits) {
            Ok(None) => return,
            Ok(Some((request, consumed))) => {
                if server.held_by_load() || held_by_pause_memcache(server, &request) {
                    *paused = true;
                    client.info.blocked.store(true, Ordering::Relaxed);
                    return;
                }
                client.info.qbuf.store((*rend - *rstart) as u64, Ordering::Relaxed);
                let start = wbuf.len();
                let lsn = crate::memcache::execute(server, stats, client, wbuf, &mut mc.scratch, &request, now_ms);
                // A memcached write invalidates what Redis clients track.
                if server.tracking.active() {
                    crate::tracking::flush(server, None);
                }
                if lsn > 0 && wbuf.len() > start {
                    gate.push_back((start, lsn));
                }
                if let keel_protocol::memcache::McRequest::SetTooLarge { swallow, .. } = request {
                    mc.swallow = swallow;
                }
                *rstart += consumed;
            }
            Err(refused) => {
                if let Some(reply) = refused.reply {
                    wbuf.extend_from_slice(reply.as_bytes());
                    wbuf.extend_from_slice(b"\r\n");
                }
                *rstart += refused.consumed;
                mc.swallow = refused.swallow;
                client.close_after_reply |= refused.close;
            }
        }
        if client.close_after_reply {
            *rstart = *rend;
            return;
        }
    }
}

/// Whether CLIENT PAUSE holds a memcached request back: under `WRITE`,
/// those that may write.
fn held_by_pause_memcache(server: &Server, request: &keel_protocol::memcache::McRequest<'_>) -> bool {
    use keel_protocol::memcache::McRequest;
    let Some(writes_only) = server.paused(unix_ms) else { return false };
    !writes_only
        || matches!(
            request,
            McRequest::Store { .. }
                | McRequest::SetTooLarge { .. }
                | McRequest::Delete { .. }
                | McRequest::Arith { .. }
                | McRequest::Touch { .. }
                | McRequest::FlushAll { .. }
                | McRequest::Get { touch: Some(_), .. }
                | McRequest::MetaSet { .. }
                | McRequest::MetaDelete(_)
                | McRequest::MetaArith(_)
        )
        || matches!(request, McRequest::MetaGet(meta) if meta.flags.ttl.is_some())
}

/// How many pipelined requests are parsed before the first of them runs.
const PARSE_AHEAD: usize = 16;

/// Asks the processor for the memory each request's first key needs
/// before any of the batch runs, in three passes, each finding the last
/// one's lines arrived: the buckets, the chains' first nodes, and a string
/// value's bytes. The cache misses of a pipeline then overlap instead of
/// coming one after another (Redis 8 prefetches the same way). On W2
/// against a million keys a lookup's two misses were a third of the
/// worker's time, and copying a GET's value the next largest wait.
fn prefetch_keys(server: &Server, db: usize, argvs: &[Argv<'_>], resolved: &[Option<command::Resolved>]) {
    let mut found: smallvec::SmallVec<[(&[u8], keel_engine::keyspace::Prefetch); PARSE_AHEAD]> = smallvec::SmallVec::new();
    for (argv, resolved) in argvs.iter().zip(resolved) {
        let Some((key, shard)) = resolved.and_then(|r| r.first_key(&server.keyspace, argv)) else { continue };
        found.extend(server.keyspace.prefetch_bucket(db, shard, key).map(|at| (key, at)));
    }
    for &(_, at) in &found {
        server.keyspace.prefetch_chain(db, at);
    }
    for &(key, at) in &found {
        server.keyspace.prefetch_value(db, at, key);
    }
}

/// A request's arguments as the commands take them.
type Argv<'a> = smallvec::SmallVec<[&'a [u8]; 8]>;

/// Whether CLIENT PAUSE holds this request back: under `ALL` every
/// command that would run, under `WRITE` those that may write (EXEC of a
/// transaction with a write included), as Redis 7.0 decides. Requests
/// that fail to resolve are answered at once.
fn held_by_pause(server: &Server, client: &Client, argv: &[&[u8]]) -> bool {
    let Some(writes_only) = server.paused(unix_ms) else { return false };
    let Ok((_, spec)) = command::resolve(argv) else { return false };
    if !writes_only {
        return true;
    }
    if may_replicate(server, spec, argv) {
        return true;
    }
    spec.name == "exec"
        && client.multi.as_ref().is_some_and(|m| {
            m.queued.iter().any(|q| {
                let argv: Vec<&[u8]> = q.iter().map(Vec::as_slice).collect();
                command::resolve(&argv).is_ok_and(|(_, s)| may_replicate(server, s, &argv))
            })
        })
}

/// Redis's `CMD_WRITE | CMD_MAY_REPLICATE`: writes, and the commands that
/// feed the replication stream without writing keys. A script that
/// declares its flags is judged by them (`scriptFlagsToCmdFlags`): one
/// with `no-writes` is a read, one without is a write, whatever command
/// runs it.
fn may_replicate(server: &Server, spec: &command::CommandSpec, argv: &[&[u8]]) -> bool {
    if spec.group == "scripting" {
        let declared = crate::scripting::declared_flags(server, spec, argv);
        if let Some(declared) = declared.filter(|d| d & crate::scripting::flags::COMPAT == 0) {
            return crate::scripting::command_flags(spec.flags, declared) & command::flags::WRITE != 0;
        }
    }
    spec.has(command::flags::WRITE)
        || matches!(spec.name, "publish" | "spublish" | "pfcount" | "eval" | "evalsha" | "fcall")
}

/// Under `everysec` and `no`: the journal's gathered records written
/// before replies leave (`Journal::write_through`). When the worker may
/// not write now (the writer thread's cycle may wait for the disk: a sync
/// begun under `always`, a retry after a failure), the replies that
/// depend on a record stay held ([`Conn::gate`]) until the writer thread
/// has written it: sent before it, a kill -9 then lost acknowledged
/// writes.
fn write_journal_first(server: &Server) {
    if let Some(journal) = server.journal() {
        journal.write_through();
    }
}

/// Where the replies [`Conn::gate`] holds may leave up to: where the
/// journal is durable under `always`; under `everysec` and `no`, where it
/// is written (so replies held before a switch away from `always` leave
/// once their records are written, not at once); everything when nothing
/// is logged.
fn durable_lsn(server: &Server) -> u64 {
    match server.journal() {
        Some(journal) if server.gate_replies() => journal.durable_lsn(),
        Some(journal) => journal.written_lsn(),
        None => u64::MAX,
    }
}

/// Writes what may leave of the output buffer: everything before the first
/// reply that waits for a journal position beyond `durable`.
fn write_out(conn: &mut Conn, stats: &WorkerStats, durable: u64) -> io::Result<()> {
    while conn.gate.front().is_some_and(|&(_, lsn)| lsn <= durable) {
        conn.gate.pop_front();
    }
    let limit = conn.gate.front().map_or(conn.wbuf.len(), |&(start, _)| start);
    while conn.wpos < limit {
        match conn.stream.write(&conn.wbuf[conn.wpos..limit]) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                conn.wpos += n;
                stats.writes_processed.fetch_add(1, Ordering::Relaxed);
                stats.net_output_bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    conn.stream.send_held()?;
    if conn.wpos == conn.wbuf.len() {
        conn.wbuf.clear();
        conn.wpos = 0;
        if conn.wbuf.capacity() > 1 << 20 && REPLY_BUFFER_RESIZING.load(Ordering::Relaxed) {
            conn.wbuf = Vec::new();
        }
    }
    conn.client.info.obl.store((conn.wbuf.len() - conn.wpos) as u64, Ordering::Relaxed);
    Ok(())
}

/// Whether `conn`'s pending output passes its class's
/// `client-output-buffer-limit` (a subscriber's is the `pubsub` class, as
/// in Redis); logs it if so.
fn output_limit_reached(server: &Server, conn: &mut Conn) -> bool {
    let class = if conn.client.subscriptions.any() { crate::config::PUBSUB_CLASS } else { crate::config::NORMAL_CLASS };
    let reached = conn.wpos < conn.wbuf.len() && over_output_limit(conn, &server.output_limit[class]);
    if reached {
        tracing::warn!(
            "Client addr={} scheduled to be closed ASAP for overcoming of output buffer limits.",
            conn.client.info.addr
        );
    }
    reached
}

/// Whether `conn`'s pending output passes `client-output-buffer-limit`
/// (`limit`: hard, soft, soft seconds), as Redis's
/// `checkClientOutputBufferLimits`: the hard limit at once, the soft one
/// once held for more than its seconds. Like Redis, which counts only what
/// overflows a client's 16 KB reply buffer, the first 16 KB are not counted.
fn over_output_limit(conn: &mut Conn, limit: &[AtomicU64; 3]) -> bool {
    let [hard, soft, soft_s] = [0, 1, 2].map(|i| limit[i].load(Ordering::Relaxed));
    let used = ((conn.wbuf.len() - conn.wpos) as u64).saturating_sub(16 << 10);
    if hard > 0 && used >= hard {
        return true;
    }
    if soft == 0 || used < soft {
        conn.over_soft_since = None;
        return false;
    }
    let now = crate::server::unix_ms() / 1000;
    let since = *conn.over_soft_since.get_or_insert(now);
    now - since > soft_s
}

/// Redis 7.0's answer to a client `protected-mode` turns away, word for word.
/// A memcached client's refusal by protected mode, on one line.
const MEMCACHE_PROTECTED_MODE_DENIED: &[u8] = b"SERVER_ERROR Keel is running in protected mode: no password is set and the client is not local\r\n";

const PROTECTED_MODE_DENIED: &[u8] = b"-DENIED Redis is running in protected mode because protected \
mode is enabled and no password is set for the default user. In this mode connections are only accepted \
from the loopback interface. If you want to connect from external computers to Redis you may adopt one of \
the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' \
from the loopback interface by connecting to Redis from the same host the server is running, however MAKE \
SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change \
permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration \
file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the \
server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an \
authentication password for the default user. NOTE: You only need to do one of the above things in order \
for the server to start accepting connections from the outside.\r\n";

/// As Redis's clientsCronResizeQueryBuffer, where the buffer wastes over
/// 4 KB: an idle client's goes (16 KB per idle connection) and comes back
/// at its next read; a big one shrinks to the most it held since the last
/// look (not under one read's worth), so that one large request does not
/// keep its buffer for good while a client that keeps sending large ones
/// is not made to grow it each time.
fn resize_query_buffer(c: &mut Conn, idle_ms: u64) {
    let held = c.rend - c.rstart;
    if c.rbuf.len() - held > 4 * 1024 {
        if held == 0 && idle_ms > QUERY_BUFFER_IDLE_MS {
            (c.rbuf, c.rstart, c.rend) = (Vec::new(), 0, 0);
        } else if c.rbuf.len() > QUERY_BUFFER_RESIZE_OVER && c.rbuf.len() / 2 > c.rpeak {
            c.rbuf.copy_within(c.rstart..c.rend, 0);
            (c.rstart, c.rend) = (0, held);
            c.rbuf.truncate(held.max(c.rpeak).max(READ_CHUNK));
            c.rbuf.shrink_to_fit();
        }
        c.client.info.qbuf_free.store((c.rbuf.len() - c.rend) as u64, Ordering::Relaxed);
    }
    c.rpeak = held;
}

/// Makes room in a read buffer that is full from its start: for the whole
/// of a big argument the request waits for, as Redis sizes its query
/// buffer for one (one copy, and the client's memory is known from the
/// argument's header on), else twice the size.
fn grow_read_buffer(server: &Server, conn: &mut Conn, limits: &keel_protocol::Limits) {
    let awaited = match conn.memcache {
        None => keel_protocol::request::pending_big_argument(&conn.rbuf[..conn.rend], &resp_limits(server, conn, limits)),
        Some(_) => None,
    };
    let grown = match awaited {
        Some(payload) if payload.end > conn.rbuf.len() => payload.end,
        // From nothing when the cron freed an idle client's.
        _ => (conn.rbuf.len() * 2).max(READ_CHUNK),
    };
    // Zeroed by the allocator, unlike a resize, so that the pages an
    // argument has not reached yet stay untouched.
    let mut bigger = vec![0; grown];
    bigger[..conn.rend].copy_from_slice(&conn.rbuf[..conn.rend]);
    conn.rbuf = bigger;
}

/// What CLIENT LIST shows as `qbuf`: the bytes not yet run, less the
/// headers before a big argument still arriving, which Redis's query
/// buffer no longer holds by then.
fn query_buffer_used(server: &Server, conn: &Conn, limits: &keel_protocol::Limits) -> usize {
    let held = &conn.rbuf[conn.rstart..conn.rend];
    if held.len() < keel_protocol::request::BIG_ARG || conn.memcache.is_some() {
        return held.len();
    }
    match keel_protocol::request::pending_big_argument(held, &resp_limits(server, conn, limits)) {
        Some(payload) => held.len() - payload.start,
        None => held.len(),
    }
}

/// The bounds `process` parses a client's requests with.
fn resp_limits(server: &Server, conn: &Conn, limits: &keel_protocol::Limits) -> keel_protocol::Limits {
    let unauthenticated = !conn.client.authenticated && !server.acl.default_open();
    keel_protocol::Limits { unauthenticated, ..*limits }
}

/// Bytes per watched key, subscription and tracking prefix: the entry in
/// the client's own list and the one in the table that finds it, an
/// estimate, as Redis's per-item figures are.
const BOOKKEEPING_ITEM_BYTES: u64 = 64;

/// What a connection holds in memory, as CLIENT LIST's `tot-mem` and
/// client eviction count it: its state, its buffers as allocated, what it
/// queued under MULTI, and its watched keys, subscriptions and tracking
/// prefixes.
fn memory_of(conn: &Conn) -> u64 {
    let client = &conn.client;
    let subscriptions: u64 = client.info.subscriptions.iter().map(|n| u64::from(n.load(Ordering::Relaxed))).sum();
    let items = client.watching.len() as u64 + subscriptions + client.tracking_prefixes.len() as u64;
    (std::mem::size_of::<Conn>() + conn.rbuf.len() + conn.wbuf.capacity()) as u64
        + client.info.multi_mem.load(Ordering::Relaxed)
        + items * BOOKKEEPING_ITEM_BYTES
}

/// A socket address as CLIENT LIST shows it (`ip:port`, no brackets).
pub fn fmt_addr(addr: &SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("{}:{}", a.ip(), a.port()),
    }
}
