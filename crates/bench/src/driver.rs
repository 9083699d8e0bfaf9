//! The connection driver: one OS thread per `-t`, each running its own
//! epoll loop (mio) over its `-c` connections. No locks and no allocation
//! on the request path: buffers are reused, replies are scanned in place,
//! histograms are thread-local and merged after the run.
//!
//! Closed loop (memtier's model): each connection keeps `--pipeline`
//! requests outstanding and sends the next as soon as a reply arrives;
//! latency is timed from the send.
//!
//! Open loop (`--rate R`): request k of connection g is *due* at
//! `t0 + (g + k * C) / R` for C connections in all. A due request is sent
//! as soon as the connection has a free pipeline slot; its latency is timed
//! from when it was due (corrected for coordinated omission, as wrk2 and
//! YCSB do) and, separately, from when it was sent (uncorrected). A
//! stalled server therefore shows up as queueing in the corrected figures
//! instead of as fewer, fast requests. The loop wakes for the next due
//! request from a min-heap of connections by due time, so a wake-up costs
//! O(log C), not a scan of every connection.
//!
//! Phases: every thread first connects all its clients and completes the
//! handshake (AUTH/HELLO/SELECT); then all threads meet at a barrier and
//! the measured run starts at once for everyone.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use mio::net::{TcpStream, UnixStream};
use mio::{Events, Interest, Poll, Token};

use crate::config::{Addr, Config, Limit};
use crate::protocol::{self, Scan};
use crate::stats::{CmdStats, Cpu, SecCmd, SecondReport, LATENCY_US_MAX};
use crate::workload::{ReqMeta, Values, Workload};

/// Read buffer starting size; it grows to fit a reply larger than this.
const RBUF_INITIAL: usize = 64 * 1024;
/// How often idle housekeeping (timeouts) runs at least.
const TICK: Duration = Duration::from_millis(50);
/// After --test-time ends, how long outstanding replies are awaited.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// Reconnect attempts per connection with --reconnect-on-error.
const RECONNECTS_MAX: u32 = 3;
/// Distinct error messages kept per thread.
const MESSAGES_MAX: usize = 5;

/// Token of the open-loop timer.
const TIMER_TOKEN: Token = Token(usize::MAX - 1);

/// A timerfd: epoll's own timeout has millisecond resolution, which would
/// send open-loop requests up to a millisecond late and add that to every
/// corrected latency. A timerfd wakes the loop at the nanosecond.
struct Timer {
    fd: libc::c_int,
    armed_ns: u64,
}

impl Timer {
    fn new(poll: &Poll) -> io::Result<Timer> {
        // SAFETY: plain syscall; the result is checked.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let t = Timer { fd, armed_ns: u64::MAX };
        poll.registry().register(&mut mio::unix::SourceFd(&t.fd), TIMER_TOKEN, Interest::READABLE)?;
        Ok(t)
    }

    /// Fires `delay_ns` from now (for the wake-up at `at_ns`, used to skip re-arming).
    fn arm(&mut self, at_ns: u64, delay_ns: u64) {
        if at_ns == self.armed_ns {
            return;
        }
        self.armed_ns = at_ns;
        let d = delay_ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: (d / 1_000_000_000) as libc::time_t, tv_nsec: (d % 1_000_000_000) as libc::c_long },
        };
        // SAFETY: fd is our timerfd; spec is a valid itimerspec.
        unsafe {
            libc::timerfd_settime(self.fd, 0, &spec, std::ptr::null_mut());
        }
    }

    /// Consumes an expiry so the (edge-triggered) fd can fire again.
    fn clear(&mut self) {
        let mut buf = [0u8; 8];
        // SAFETY: reading 8 bytes into an 8-byte buffer from our own fd.
        unsafe {
            libc::read(self.fd, buf.as_mut_ptr().cast(), 8);
        }
        self.armed_ns = u64::MAX;
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: we own the fd and close it once.
        unsafe {
            libc::close(self.fd);
        }
    }
}

/// Messages from worker threads to the main thread.
pub enum Msg {
    Second(SecondReport),
    /// The thread ended; it sent seconds `0..seconds` and will send no more.
    Done { thread: usize, seconds: u32 },
}

/// What a worker thread hands back when it ends.
pub struct ThreadResult {
    pub cmds: Vec<CmdStats>,
    pub connection_errors: u64,
    pub messages: Vec<String>,
    /// A setup failure (connect, auth) that makes the run invalid.
    pub fatal: Option<String>,
    /// CPU of this thread during the measured phase only.
    pub cpu: Cpu,
    pub end: Instant,
    pub clients: Vec<ClientStats>,
}

/// Per-connection totals for --client-stats.
#[derive(Clone, Debug, Default)]
pub struct ClientStats {
    pub ops: Vec<u64>,
    pub latency_us_sum: Vec<u64>,
    pub errors: u64,
}

/// Shared between the main thread and the workers.
pub struct Shared {
    pub cfg: Arc<Config>,
    pub addr: Addr,
    /// Set on a fatal error or an interrupt: everyone stops.
    pub abort: Arc<AtomicBool>,
    /// All worker threads meet here once connected.
    pub barrier: Barrier,
    /// t0 of the measured run: set by the first thread past the barrier.
    pub start: std::sync::OnceLock<Instant>,
    /// `--tls`: what each connection's session starts from.
    pub tls: Option<crate::tls::Tls>,
}

enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Tls(Box<keel_tls::TlsStream>),
}

impl Stream {
    fn connect(addr: &Addr, tls: Option<&crate::tls::Tls>) -> io::Result<Stream> {
        Ok(match (addr, tls) {
            (Addr::Tcp(a), None) => Stream::Tcp(TcpStream::connect(*a)?),
            // The handshake starts once the socket is connected.
            (Addr::Tcp(a), Some(tls)) => Stream::Tls(Box::new(tls.connect(TcpStream::connect(*a)?)?)),
            (Addr::Unix(p), _) => Stream::Unix(UnixStream::connect(p)?),
        })
    }
    fn source(&mut self) -> &mut dyn mio::event::Source {
        match self {
            Stream::Tcp(s) => s,
            Stream::Unix(s) => s,
            Stream::Tls(s) => &mut s.sock,
        }
    }
    /// Sends what a TLS session holds; what the socket does not take now
    /// leaves at the next writable event.
    fn send_held(&mut self) -> io::Result<()> {
        match self {
            Stream::Tls(s) => s.send_held_now(),
            _ => Ok(()),
        }
    }
    /// Whether a non-blocking connect finished, failed, or is still going.
    fn connected(&self) -> io::Result<bool> {
        match self {
            Stream::Tls(s) => Stream::tcp_connected(&s.sock),
            Stream::Tcp(s) => Stream::tcp_connected(s),
            Stream::Unix(s) => {
                if let Some(e) = s.take_error()? {
                    return Err(e);
                }
                Ok(true)
            }
        }
    }
    fn tcp_connected(s: &TcpStream) -> io::Result<bool> {
        if let Some(e) = s.take_error()? {
            return Err(e);
        }
        match s.peer_addr() {
            Ok(_) => {
                let _ = s.set_nodelay(true);
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(b),
            Stream::Unix(s) => s.read(b),
            Stream::Tls(s) => s.read(b),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.write(b),
            Stream::Unix(s) => s.write(b),
            Stream::Tls(s) => s.write(b),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Connecting,
    /// Waiting for this many handshake replies.
    Handshake(usize),
    Ready,
    /// Finished its requests (or the run's time is up) and has nothing in flight.
    Done,
    Dead,
}

/// A request on the wire.
#[derive(Clone, Copy)]
struct Inflight {
    meta: ReqMeta,
    /// ns since t0 when it was written.
    sent_ns: u64,
    /// ns since t0 when it was due (open loop) or = sent_ns.
    due_ns: u64,
}

struct Conn {
    global: u64,
    stream: Option<Stream>,
    state: State,
    since_ns: u64,
    wbuf: Vec<u8>,
    wpos: usize,
    rbuf: Vec<u8>,
    rpos: usize,
    rlen: usize,
    inflight: VecDeque<Inflight>,
    work: Workload,
    generated: u64,
    completed: u64,
    /// Completed since the last (re)connect, for --reconnect-interval.
    completed_here: u64,
    /// Open loop: requests scheduled so far.
    scheduled: u64,
    /// Open loop: the due time this connection waits for in the due queue
    /// (`NOT_QUEUED` when it waits for a reply or is not ready).
    queued_due_ns: u64,
    last_rx_ns: u64,
    reconnects: u32,
    stats: ClientStats,
}

/// One worker thread.
struct Worker<'a> {
    id: usize,
    sh: &'a Shared,
    cfg: Arc<Config>,
    poll: Poll,
    conns: Vec<Conn>,
    values: Values,
    t0: Instant,
    cmds: Vec<CmdStats>,
    sec: Vec<SecCmd>,
    sec_idx: u32,
    tx: Sender<Msg>,
    connection_errors: u64,
    messages: Vec<String>,
    fatal: Option<String>,
    /// Open loop: ns between two requests of one connection, and the
    /// spacing between consecutive connections' phases.
    interval_ns: f64,
    phase_ns: f64,
    /// No new requests after this (test time), ns since t0.
    stop_ns: Option<u64>,
    stopping: bool,
    /// Open loop: (due ns, connection) of connections that can send once
    /// their next request is due. Bounded: one live entry per connection
    /// (the one matching its `queued_due_ns`); an entry it superseded is
    /// due no later and is dropped when reached.
    due_queue: BinaryHeap<Reverse<(u64, usize)>>,
}

/// `Conn::queued_due_ns` when the connection is not in the due queue.
const NOT_QUEUED: u64 = u64::MAX;

fn now_ns(t0: Instant) -> u64 {
    Instant::now().saturating_duration_since(t0).as_nanos() as u64
}

/// Runs one worker thread to the end.
pub fn run_thread(id: usize, sh: &Shared, tx: Sender<Msg>) -> ThreadResult {
    let mut cpu0 = Cpu::now(true);
    let mut w = match Worker::new(id, sh, tx.clone()) {
        Ok(w) => w,
        Err(e) => {
            sh.abort.store(true, Ordering::SeqCst);
            sh.barrier.wait();
            let _ = tx.send(Msg::Done { thread: id, seconds: 0 });
            return ThreadResult {
                cmds: Vec::new(),
                connection_errors: 1,
                messages: vec![e.clone()],
                fatal: Some(e),
                cpu: Cpu::now(true).minus(&cpu0),
                end: Instant::now(),
                clients: Vec::new(),
            };
        }
    };
    w.connect_phase();
    if w.fatal.is_some() {
        sh.abort.store(true, Ordering::SeqCst);
    }
    sh.barrier.wait();
    if !sh.abort.load(Ordering::SeqCst) {
        w.t0 = *sh.start.get_or_init(Instant::now);
        cpu0 = Cpu::now(true);
        w.measure_phase();
    }
    let end = Instant::now();
    w.finish_seconds(now_ns(w.t0));
    let _ = w.tx.send(Msg::Done { thread: id, seconds: w.sec_idx });
    ThreadResult {
        cmds: w.cmds,
        connection_errors: w.connection_errors,
        messages: w.messages,
        fatal: w.fatal,
        cpu: Cpu::now(true).minus(&cpu0),
        end,
        clients: w.conns.into_iter().map(|c| c.stats).collect(),
    }
}

impl<'a> Worker<'a> {
    fn new(id: usize, sh: &'a Shared, tx: Sender<Msg>) -> Result<Worker<'a>, String> {
        let cfg = Arc::clone(&sh.cfg);
        let poll = Poll::new().map_err(|e| format!("cannot create epoll instance: {e}"))?;
        let total = cfg.connections();
        let nslots = cfg.stat_names().len();
        let open = cfg.rate.is_some();
        let mut conns = Vec::with_capacity(cfg.clients as usize);
        for c in 0..u64::from(cfg.clients) {
            let global = id as u64 * u64::from(cfg.clients) + c;
            conns.push(Conn {
                global,
                stream: None,
                state: State::Connecting,
                since_ns: 0,
                wbuf: Vec::with_capacity(4096),
                wpos: 0,
                rbuf: vec![0; RBUF_INITIAL],
                rpos: 0,
                rlen: 0,
                inflight: VecDeque::with_capacity(cfg.pipeline as usize),
                work: Workload::new(Arc::clone(&cfg), global, total),
                generated: 0,
                completed: 0,
                completed_here: 0,
                scheduled: 0,
                queued_due_ns: NOT_QUEUED,
                last_rx_ns: 0,
                reconnects: 0,
                stats: ClientStats { ops: vec![0; nslots], latency_us_sum: vec![0; nslots], errors: 0 },
            });
        }
        let (interval_ns, phase_ns) = match cfg.rate {
            Some(r) => (total as f64 * 1e9 / r, 1e9 / r),
            None => (0.0, 0.0),
        };
        let stop_ns = match cfg.limit {
            Limit::Time(s) => Some(s * 1_000_000_000),
            Limit::Requests(_) => None,
        };
        Ok(Worker {
            id,
            sh,
            values: Values::new(&cfg, cfg.seed.wrapping_add(id as u64)),
            poll,
            conns,
            t0: Instant::now(),
            cmds: (0..nslots).map(|_| CmdStats::new(open)).collect(),
            sec: (0..nslots).map(|_| SecCmd::new()).collect(),
            sec_idx: 0,
            tx,
            connection_errors: 0,
            messages: Vec::new(),
            fatal: None,
            interval_ns,
            phase_ns,
            stop_ns,
            stopping: false,
            due_queue: BinaryHeap::with_capacity(if open { cfg.clients as usize * 2 } else { 0 }),
            cfg,
        })
    }

    fn note(&mut self, msg: String) {
        if self.cfg.debug {
            eprintln!("[thread {}] {msg}", self.id);
        }
        if self.messages.len() < MESSAGES_MAX && !self.messages.contains(&msg) {
            self.messages.push(msg);
        }
    }

    fn target(&self) -> String {
        self.cfg.target.describe()
    }

    // ------------------------------------------------------------ phases

    /// Connects every client and completes its handshake, or fails.
    fn connect_phase(&mut self) {
        for i in 0..self.conns.len() {
            if let Err(e) = self.open(i) {
                let msg = format!("cannot connect to {}: {e}", self.target());
                self.fatal = Some(msg.clone());
                self.note(msg);
                return;
            }
        }
        let deadline = Instant::now() + self.cfg.connect_timeout;
        let mut events = Events::with_capacity(1024);
        loop {
            if self.fatal.is_some() || self.sh.abort.load(Ordering::Relaxed) {
                return;
            }
            let pending = self.conns.iter().filter(|c| matches!(c.state, State::Connecting | State::Handshake(_))).count();
            if pending == 0 {
                return;
            }
            let now = Instant::now();
            if now >= deadline {
                let msg = format!(
                    "cannot connect to {}: {pending} connection(s) not established after {:.1} s (--connection-timeout)",
                    self.target(),
                    self.cfg.connect_timeout.as_secs_f64()
                );
                self.fatal = Some(msg.clone());
                self.note(msg);
                return;
            }
            let timeout = (deadline - now).min(TICK);
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.fatal = Some(format!("epoll failed: {e}"));
                    return;
                }
            }
            let ids: Vec<usize> = events.iter().map(|e| e.token().0).collect();
            for i in ids {
                self.on_event(i, 0);
            }
        }
    }

    /// The measured run.
    fn measure_phase(&mut self) {
        let now = now_ns(self.t0);
        for i in 0..self.conns.len() {
            self.conns[i].last_rx_ns = now;
            self.conns[i].since_ns = now;
            self.pump(i, now);
        }
        let mut events = Events::with_capacity(1024);
        let mut next_check = 0u64;
        let mut timer = if self.rate_open() {
            match Timer::new(&self.poll) {
                Ok(t) => Some(t),
                Err(e) => {
                    self.note(format!("timerfd unavailable ({e}): open-loop send times have 1 ms resolution"));
                    None
                }
            }
        } else {
            None
        };
        loop {
            if self.sh.abort.load(Ordering::Relaxed) {
                return;
            }
            let now = now_ns(self.t0);
            self.roll_seconds(now);
            if let Some(stop) = self.stop_ns {
                if now >= stop && !self.stopping {
                    self.stopping = true;
                    for i in 0..self.conns.len() {
                        self.pump(i, now);
                    }
                }
                if now >= stop + DRAIN_GRACE.as_nanos() as u64 {
                    return;
                }
            }
            if now >= next_check {
                next_check = now + TICK.as_nanos() as u64;
                self.check_timeouts(now);
                if self.rate_open() {
                    for i in 0..self.conns.len() {
                        self.pump(i, now);
                    }
                }
            }
            if self.conns.iter().all(|c| matches!(c.state, State::Done | State::Dead)) {
                return;
            }
            // Sleep until the next event, the next due request, the next
            // second boundary or the next housekeeping tick.
            let mut wake = next_check.min((u64::from(self.sec_idx) + 1) * 1_000_000_000);
            if let Some(stop) = self.stop_ns {
                wake = wake.min(if self.stopping { stop + DRAIN_GRACE.as_nanos() as u64 } else { stop });
            }
            if !self.stopping {
                if let Some(due) = self.next_queued_due() {
                    wake = wake.min(due);
                }
            }
            let timeout = Duration::from_nanos(wake.saturating_sub(now));
            if let Some(t) = timer.as_mut() {
                t.arm(wake, wake.saturating_sub(now));
            }
            if let Err(e) = self.poll.poll(&mut events, Some(timeout)) {
                if e.kind() != io::ErrorKind::Interrupted {
                    self.note(format!("epoll failed: {e}"));
                    return;
                }
            }
            let now = now_ns(self.t0);
            self.pump_due(now);
            for ev in events.iter() {
                if ev.token() == TIMER_TOKEN {
                    if let Some(t) = timer.as_mut() {
                        t.clear();
                    }
                    continue;
                }
                let i = ev.token().0;
                self.on_event(i, now);
            }
        }
    }

    fn rate_open(&self) -> bool {
        self.cfg.rate.is_some()
    }

    /// Open loop: puts connection `i` in the due queue if it can send as
    /// soon as its next request is due (after `now`: one already due that
    /// `pump` did not send waits for something else, a reply before a
    /// reconnect, and its next reply pumps it).
    fn queue_due(&mut self, i: usize, now: u64) {
        if !self.rate_open() || self.stopping {
            return;
        }
        let c = &self.conns[i];
        if c.state != State::Ready || c.inflight.len() >= self.cfg.pipeline as usize || !self.can_generate(c) {
            return;
        }
        let due = self.due_ns(c);
        if due > now && c.queued_due_ns != due {
            self.conns[i].queued_due_ns = due;
            self.due_queue.push(Reverse((due, i)));
        }
    }

    /// The earliest due time in the queue, dropping superseded entries.
    fn next_queued_due(&mut self) -> Option<u64> {
        while let Some(&Reverse((due, i))) = self.due_queue.peek() {
            if self.conns[i].queued_due_ns == due {
                return Some(due);
            }
            self.due_queue.pop();
        }
        None
    }

    /// Open loop: lets every queued connection whose request is due send it.
    fn pump_due(&mut self, now: u64) {
        while let Some(due) = self.next_queued_due() {
            if due > now {
                break;
            }
            if let Some(Reverse((_, i))) = self.due_queue.pop() {
                self.conns[i].queued_due_ns = NOT_QUEUED;
                self.pump(i, now);
            }
        }
    }

    // ------------------------------------------------------------ connections

    /// (Re)opens connection `i`.
    fn open(&mut self, i: usize) -> io::Result<()> {
        let mut s = Stream::connect(&self.sh.addr, self.sh.tls.as_ref())?;
        self.poll.registry().register(s.source(), Token(i), Interest::READABLE | Interest::WRITABLE)?;
        let c = &mut self.conns[i];
        c.stream = Some(s);
        c.state = State::Connecting;
        c.wbuf.clear();
        c.wpos = 0;
        c.rpos = 0;
        c.rlen = 0;
        c.completed_here = 0;
        c.inflight.clear();
        Ok(())
    }

    fn close(&mut self, i: usize) {
        if let Some(mut s) = self.conns[i].stream.take() {
            let _ = self.poll.registry().deregister(s.source());
        }
    }

    /// Connection `i` broke: count it, maybe reconnect.
    fn fail(&mut self, i: usize, why: String, now: u64) {
        let setup = !matches!(self.conns[i].state, State::Ready | State::Done);
        self.close(i);
        self.connection_errors += 1;
        let lost = self.conns[i].inflight.len();
        self.conns[i].inflight.clear();
        self.conns[i].stats.errors += 1;
        let msg = if lost > 0 { format!("{why} ({lost} request(s) lost)") } else { why };
        self.note(msg.clone());
        if self.fatal.is_none() && setup && !self.measuring() {
            // Failure while setting up the run: the run is invalid.
            self.fatal = Some(msg);
            self.conns[i].state = State::Dead;
            return;
        }
        if self.cfg.reconnect_on_error && self.conns[i].reconnects < RECONNECTS_MAX {
            self.conns[i].reconnects += 1;
            if self.open(i).is_ok() {
                self.conns[i].since_ns = now;
                return;
            }
        }
        self.conns[i].state = State::Dead;
    }

    fn check_timeouts(&mut self, now: u64) {
        let reply_ns = self.cfg.reply_timeout.as_nanos() as u64;
        let connect_ns = self.cfg.connect_timeout.as_nanos() as u64;
        for i in 0..self.conns.len() {
            let c = &self.conns[i];
            match c.state {
                State::Ready | State::Handshake(_)
                    if (!c.inflight.is_empty() || matches!(c.state, State::Handshake(_))) && now.saturating_sub(c.last_rx_ns) > reply_ns =>
                {
                    let why = format!("{}: no reply for {:.1} s (--reply-timeout)", self.target(), self.cfg.reply_timeout.as_secs_f64());
                    self.fail(i, why, now);
                }
                State::Connecting if now.saturating_sub(c.since_ns) > connect_ns => {
                    let why = format!("{}: reconnect timed out", self.target());
                    self.fail(i, why, now);
                }
                _ => {}
            }
        }
    }

    fn on_event(&mut self, i: usize, now: u64) {
        if i >= self.conns.len() || self.conns[i].stream.is_none() {
            return;
        }
        if self.conns[i].state == State::Connecting {
            let r = self.conns[i].stream.as_ref().map(|s| s.connected()).unwrap_or(Ok(false));
            match r {
                Ok(true) => self.on_connected(i, now),
                Ok(false) => return,
                Err(e) => {
                    let why = format!("cannot connect to {}: {e}", self.target());
                    self.fail(i, why, now);
                    return;
                }
            }
        }
        let now = self.read_replies(i).max(now);
        if self.conns[i].state == State::Dead || self.conns[i].stream.is_none() {
            return;
        }
        self.pump(i, now);
    }

    fn on_connected(&mut self, i: usize, now: u64) {
        let cfg = Arc::clone(&self.cfg);
        let c = &mut self.conns[i];
        let n = protocol::encode_handshake(cfg.protocol, &mut c.wbuf, cfg.auth.as_ref(), cfg.select_db);
        c.last_rx_ns = now;
        c.since_ns = now;
        c.state = if n > 0 { State::Handshake(n) } else { State::Ready };
        self.flush(i);
    }

    fn measuring(&self) -> bool {
        self.sh.start.get().is_some()
    }

    // ------------------------------------------------------------ requests

    fn can_generate(&self, c: &Conn) -> bool {
        if self.stopping {
            return false;
        }
        match self.cfg.limit {
            Limit::Requests(n) => c.generated < n,
            Limit::Time(_) => true,
        }
    }

    /// When connection `c`'s next scheduled request is due (open loop).
    fn due_ns(&self, c: &Conn) -> u64 {
        (c.global as f64 * self.phase_ns + c.scheduled as f64 * self.interval_ns) as u64
    }

    /// Sends what connection `i` may send now, then flushes.
    fn pump(&mut self, i: usize, now: u64) {
        if !self.measuring() {
            return;
        }
        let pipeline = self.cfg.pipeline as usize;
        let reconnect_every = self.cfg.reconnect_interval;
        loop {
            let c = &self.conns[i];
            if c.state != State::Ready || c.inflight.len() >= pipeline || !self.can_generate(c) {
                break;
            }
            if reconnect_every > 0 && c.completed_here + c.inflight.len() as u64 >= reconnect_every {
                break;
            }
            let due = if self.rate_open() {
                let d = self.due_ns(c);
                // Only requests due within --test-time belong to the run,
                // though the loop may notice the end a little late.
                if d > now || self.stop_ns.is_some_and(|stop| d >= stop) {
                    break;
                }
                d
            } else {
                now
            };
            let c = &mut self.conns[i];
            let meta = c.work.next(&mut c.wbuf, &self.values);
            c.generated += 1;
            c.scheduled += 1;
            if c.inflight.is_empty() {
                c.last_rx_ns = now;
            }
            c.inflight.push_back(Inflight { meta, sent_ns: now, due_ns: due });
        }
        // Finished?
        let c = &self.conns[i];
        if c.state == State::Ready && c.inflight.is_empty() {
            if reconnect_every > 0 && c.completed_here >= reconnect_every && self.can_generate(c) {
                self.close(i);
                if let Err(e) = self.open(i) {
                    let why = format!("reconnect to {} failed: {e}", self.target());
                    self.fail(i, why, now);
                } else {
                    self.conns[i].since_ns = now;
                }
                return;
            }
            let finished = match self.cfg.limit {
                Limit::Requests(n) => c.generated >= n,
                Limit::Time(_) => self.stopping,
            };
            if finished {
                self.conns[i].state = State::Done;
                self.close(i);
                return;
            }
        }
        self.flush(i);
        self.queue_due(i, now);
    }

    fn flush(&mut self, i: usize) {
        let c = &mut self.conns[i];
        let Some(s) = c.stream.as_mut() else { return };
        // First what a TLS session still holds, then the buffer.
        let written = s.send_held().and_then(|()| {
            while c.wpos < c.wbuf.len() {
                match s.write(&c.wbuf[c.wpos..]) {
                    Ok(0) => break,
                    Ok(n) => c.wpos += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            }
            Ok(())
        });
        match written {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => {
                let why = format!("write to {} failed: {e}", self.target());
                let now = if self.measuring() { now_ns(self.t0) } else { 0 };
                self.fail(i, why, now);
                return;
            }
        }
        c.wbuf.clear();
        c.wpos = 0;
    }

    // ------------------------------------------------------------ replies

    /// Reads and accounts what connection `i` received; returns the time
    /// used as the replies' arrival (ns since t0, 0 before the run).
    fn read_replies(&mut self, i: usize) -> u64 {
        let mut eof = None;
        {
            let c = &mut self.conns[i];
            let Some(s) = c.stream.as_mut() else { return 0 };
            loop {
                if c.rlen == c.rbuf.len() {
                    if c.rpos > 0 {
                        c.rbuf.copy_within(c.rpos..c.rlen, 0);
                        c.rlen -= c.rpos;
                        c.rpos = 0;
                    } else {
                        let n = c.rbuf.len() * 2;
                        c.rbuf.resize(n, 0);
                    }
                }
                match s.read(&mut c.rbuf[c.rlen..]) {
                    Ok(0) => {
                        eof = Some("connection closed by the server".to_string());
                        break;
                    }
                    Ok(n) => c.rlen += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        eof = Some(format!("read failed: {e}"));
                        break;
                    }
                }
            }
        }
        let now = if self.measuring() { now_ns(self.t0) } else { 0 };
        if self.conns[i].rlen > self.conns[i].rpos {
            self.conns[i].last_rx_ns = now;
            if let Err(why) = self.consume(i, now) {
                self.fail(i, format!("{}: {why}", self.target()), now);
                return now;
            }
        }
        let c = &mut self.conns[i];
        if c.rpos == c.rlen {
            c.rpos = 0;
            c.rlen = 0;
        }
        if let Some(why) = eof {
            let c = &self.conns[i];
            if c.state == State::Ready && c.inflight.is_empty() && !self.can_generate(c) {
                self.conns[i].state = State::Done;
                self.close(i);
                return now;
            }
            self.fail(i, format!("{}: {why}", self.target()), now);
        }
        now
    }

    /// Accounts every complete reply in the read buffer.
    fn consume(&mut self, i: usize, now: u64) -> Result<(), String> {
        let proto = self.cfg.protocol;
        loop {
            let c = &mut self.conns[i];
            let scan = protocol::scan(proto, &c.rbuf[c.rpos..c.rlen]);
            let r = match scan {
                Scan::Incomplete => return Ok(()),
                Scan::Bad(e) => return Err(e),
                Scan::Reply(r) => r,
            };
            let start = c.rpos;
            c.rpos += r.len;
            if r.push {
                continue;
            }
            match c.state {
                State::Handshake(n) => {
                    if r.error {
                        let text = protocol::error_text(&c.rbuf[start..]);
                        let msg = format!("{}: connection setup (AUTH/HELLO/SELECT) failed: {text}", self.target());
                        self.fatal.get_or_insert(msg.clone());
                        self.sh.abort.store(true, Ordering::SeqCst);
                        return Err(msg);
                    }
                    c.state = if n <= 1 { State::Ready } else { State::Handshake(n - 1) };
                    continue;
                }
                State::Ready => {}
                _ => return Err("reply received while not expecting one".into()),
            }
            let Some(req) = c.inflight.pop_front() else {
                return Err("unsolicited reply".into());
            };
            c.completed += 1;
            c.completed_here += 1;
            let slot = req.meta.slot as usize;
            let lat_us = (now.saturating_sub(req.due_ns) / 1000).clamp(1, LATENCY_US_MAX);
            c.stats.ops[slot] += 1;
            c.stats.latency_us_sum[slot] += lat_us;
            if r.error {
                c.stats.errors += 1;
                let text = protocol::error_text(&c.rbuf[start..]);
                if self.messages.len() < MESSAGES_MAX {
                    self.note(format!("error reply: {text}"));
                }
            }
            let cs = &mut self.cmds[slot];
            cs.ops += 1;
            cs.bytes_rx += r.len as u64;
            cs.bytes_tx += u64::from(req.meta.tx_bytes);
            cs.latency_us_sum += lat_us;
            cs.hist.saturating_record(lat_us);
            if let Some(u) = cs.uncorrected.as_mut() {
                let us = (now.saturating_sub(req.sent_ns) / 1000).clamp(1, LATENCY_US_MAX);
                u.saturating_record(us);
                cs.uncorrected_us_sum += us;
            }
            if r.error {
                cs.errors += 1;
            } else if req.meta.read {
                let hits = u64::from(r.hits.min(u32::from(req.meta.keys)));
                cs.hits += hits;
                cs.misses += u64::from(req.meta.keys) - hits;
            }
            let ss = &mut self.sec[slot];
            ss.ops += 1;
            ss.bytes_rx += r.len as u64;
            ss.bytes_tx += u64::from(req.meta.tx_bytes);
            ss.latency_us_sum += lat_us;
            ss.hist.saturating_record(lat_us);
            if r.error {
                ss.errors += 1;
            }
        }
    }

    // ------------------------------------------------------------ seconds

    /// Sends the per-second reports of every second that has ended.
    fn roll_seconds(&mut self, now: u64) {
        let cur = (now / 1_000_000_000) as u32;
        while self.sec_idx < cur {
            self.send_second();
        }
    }

    fn send_second(&mut self) {
        let n = self.sec.len();
        let cmds = std::mem::replace(&mut self.sec, (0..n).map(|_| SecCmd::new()).collect());
        let _ = self.tx.send(Msg::Second(SecondReport { thread: self.id, second: self.sec_idx, cmds }));
        self.sec_idx += 1;
    }

    fn finish_seconds(&mut self, now: u64) {
        if !self.measuring() {
            return;
        }
        self.roll_seconds(now);
        // The last, partial second.
        if self.sec.iter().any(|s| s.ops > 0) {
            self.send_second();
        }
    }
}
