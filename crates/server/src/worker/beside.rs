//! Serving a worker's other connections while one of its clients runs a
//! busy script, as Redis's `processEventsWhileBlocked` does from the
//! script's hook: their commands get -BUSY, but SCRIPT KILL, FUNCTION
//! KILL, SHUTDOWN NOSAVE and the others Redis allows then run. Without it
//! a script past `busy-reply-threshold` would hold every connection of its
//! worker until it ended (with one worker, the whole server).
//!
//! While a connection runs commands the worker lends the others here
//! ([`lend`], [`reclaim`]); the hook ([`serve_beside_busy_script`]) then
//! polls them, and the worker's listeners, through an epoll of its own,
//! made when a script first turns busy. Output a socket did not take
//! (a large reply, or one from before the script) is offered again at
//! each of the hook's turns, as Redis's `beforeSleep` writes replies
//! while a script is busy. What it did goes back to the worker
//! ([`Served`]): the connections it accepted (when no other worker can
//! take them) or that other workers had handed over, and the ones it
//! wrote to.

use std::cell::{Cell, RefCell};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use slab::Slab;

use super::{
    accept_at, admitted, durable_lsn, least_loaded, new_conn, read_and_process, write_journal_first, write_out, Accepted,
    Conn, Door, Doors, ParseLimits,
};
use crate::client::Message;
use crate::server::{Mailbox, Server, WorkerStats};

thread_local! {
    static BESIDE: RefCell<Option<Beside>> = const { RefCell::new(None) };
    /// Set while the hook runs commands: on the script's thread, which
    /// holds every shard.
    static SERVING: Cell<bool> = const { Cell::new(false) };
}

/// Epoll data of a listener (its [`Door`] below) and of a connection
/// accepted beside the script (its place in [`Served::newcomers`]); a lent
/// connection's is its key.
const LISTENER: u64 = 1 << 62;
const NEWCOMER: u64 = 1 << 61;

/// What the hook did, for the worker to take in.
#[derive(Default)]
pub struct Served {
    /// Accepted beside the script with no other worker to take them, or
    /// handed over by other workers; boxed as the worker's slab holds
    /// them.
    #[allow(clippy::vec_box)]
    pub newcomers: Vec<Box<Conn>>,
    /// Lent connections the hook read or wrote, to flush (or close);
    /// one may be listed more than once.
    pub touched: Vec<usize>,
}

/// A worker thread's way to its connections from a script's hook.
struct Beside {
    index: usize,
    server: Arc<Server>,
    stats: Arc<WorkerStats>,
    doors: Arc<Doors>,
    /// Where other workers hand this one the connections they admitted.
    mailbox: Arc<Mailbox>,
    /// The worker's connections but the one running commands, while one
    /// does.
    conns: Option<Slab<Box<Conn>>>,
    /// Made when a script first turns busy during a lend.
    busy: Option<Busy>,
}

/// What serving beside one busy script keeps.
struct Busy {
    epoll: OwnedFd,
    served: Served,
    /// The connections, by epoll data, with output still to leave.
    unsent: Vec<u64>,
}

/// Makes this thread worker `index`'s, with what its hook serves through.
pub(super) fn attach(
    index: usize,
    server: &Arc<Server>,
    stats: &Arc<WorkerStats>,
    doors: &Arc<Doors>,
    mailbox: &Arc<Mailbox>,
) {
    let beside = Beside {
        index,
        server: server.clone(),
        stats: stats.clone(),
        doors: doors.clone(),
        mailbox: mailbox.clone(),
        conns: None,
        busy: None,
    };
    BESIDE.set(Some(beside));
}

/// Lends the worker's other connections for as long as one runs commands.
pub(super) fn lend(conns: Slab<Box<Conn>>) {
    BESIDE.with_borrow_mut(|beside| beside.as_mut().expect("a worker thread's").conns = Some(conns));
}

/// Gives the lent connections back, with what a busy script's hook did
/// meanwhile, if one ran.
pub(super) fn reclaim() -> (Slab<Box<Conn>>, Option<Served>) {
    BESIDE.with_borrow_mut(|beside| {
        let beside = beside.as_mut().expect("a worker thread's");
        let conns = beside.conns.take().expect("lent");
        let served = beside.busy.take().map(|busy| {
            beside.stats.beside_busy_script.store(false, Ordering::Relaxed);
            busy.served
        });
        (conns, served)
    })
}

/// Whether the calling thread runs a command beside a busy script, whose
/// thread it is: it can take no shard.
pub fn beside_a_script() -> bool {
    SERVING.get()
}

/// Called by a busy script's hook: serves what waits on its worker's
/// other connections and listeners. Returns whether the server is
/// stopping, when the script must end without finishing (SHUTDOWN NOSAVE
/// beside it, or from another worker): a worker inside a script would
/// never stop.
pub fn serve_beside_busy_script() -> bool {
    BESIDE.with(|cell| {
        // Borrowed already: this is a command run beside the script.
        let Ok(mut beside) = cell.try_borrow_mut() else { return false };
        let Some(beside) = beside.as_mut() else { return false };
        if beside.conns.is_some() {
            if let Err(e) = beside.serve() {
                tracing::warn!("serving clients beside a busy script: {e}");
            }
        }
        beside.server.shutdown.load(Ordering::Relaxed)
    })
}

impl Beside {
    fn serve(&mut self) -> io::Result<()> {
        if self.busy.is_none() {
            // Output from before the script leaves beside it too.
            let touched: Vec<usize> = self.conns.iter().flat_map(Slab::iter).filter(|(_, c)| unsent(c)).map(|(k, _)| k).collect();
            let unsent = touched.iter().map(|&k| k as u64).collect();
            self.busy = Some(Busy { epoll: self.poll_all()?, served: Served { touched, ..Served::default() }, unsent });
            self.stats.beside_busy_script.store(true, Ordering::Relaxed);
        }
        let epoll = self.busy.as_ref().map(|busy| busy.epoll.as_raw_fd()).expect("made above");
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: the buffer holds 64 events; a zero timeout never waits.
        let ready = unsafe { libc::epoll_wait(epoll, events.as_mut_ptr(), events.len() as i32, 0) };
        if ready < 0 {
            return Err(io::Error::last_os_error());
        }
        // The script's writes so far are still to be seen by client
        // tracking once it ends, whatever these commands note.
        let noted = keel_engine::db::take_noted();
        SERVING.set(true);
        let limits = ParseLimits::of(&self.server);
        self.adopt_handed(epoll);
        for event in &events[..ready as usize] {
            // Copied out: the kernel's struct is packed.
            let data = event.u64;
            if data & LISTENER != 0 {
                self.accept(door_of(data & !LISTENER), epoll);
                continue;
            }
            let busy = self.busy.as_mut().expect("made above");
            let Some(conn) = conn_at(&mut self.conns, &mut busy.served, data) else { continue };
            if serve_conn(&self.server, &self.stats, conn, &limits) {
                unwatch(epoll, conn.stream.raw_fd());
            }
            if unsent(conn) && !busy.unsent.contains(&data) {
                busy.unsent.push(data);
            }
            // A lent connection the worker flushes (or closes) after the
            // script.
            if data & NEWCOMER == 0 {
                busy.served.touched.push(data as usize);
            }
        }
        self.send_unsent();
        SERVING.set(false);
        if noted {
            keel_engine::db::note_modified();
        }
        Ok(())
    }

    /// Offers again the output sockets did not take; a connection whose
    /// socket fails is left for the worker to close after the script.
    fn send_unsent(&mut self) {
        let durable = durable_lsn(&self.server);
        let busy = self.busy.as_mut().expect("made in serve");
        for data in std::mem::take(&mut busy.unsent) {
            let Some(conn) = conn_at(&mut self.conns, &mut busy.served, data) else { continue };
            if write_out(conn, &self.stats, durable).is_err() {
                conn.client.close_after_reply = true;
                unwatch(busy.epoll.as_raw_fd(), conn.stream.raw_fd());
            } else if unsent(conn) {
                busy.unsent.push(data);
            }
        }
    }

    /// A level-triggered epoll over the lent connections and the listeners.
    fn poll_all(&self) -> io::Result<OwnedFd> {
        // SAFETY: a new descriptor, owned from here.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `epoll` was just made and is owned by nothing else.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        let fd = epoll.as_raw_fd();
        for (i, listener) in self.doors.tcp.lock().iter().enumerate() {
            watch(fd, listener.as_raw_fd(), LISTENER | door_data(Door::Tcp(i)))?;
        }
        for (i, listener) in self.doors.memcache.lock().iter().enumerate() {
            watch(fd, listener.as_raw_fd(), LISTENER | door_data(Door::Memcache(i)))?;
        }
        for (i, listener) in self.doors.tls.lock().iter().enumerate() {
            watch(fd, listener.as_raw_fd(), LISTENER | door_data(Door::Tls(i)))?;
        }
        if let Some(listener) = &self.doors.unix {
            watch(fd, listener.as_raw_fd(), LISTENER | door_data(Door::Unix))?;
        }
        for (key, conn) in self.conns.iter().flat_map(Slab::iter) {
            watch(fd, conn.stream.raw_fd(), key as u64)?;
        }
        Ok(epoll)
    }

    /// Takes what waits at `door`: to another worker if there is one, as
    /// a newcomer served here until the script ends otherwise.
    fn accept(&mut self, door: Door, epoll: RawFd) {
        let (server, stats, index) = (&self.server, &self.stats, self.index);
        let served = &mut self.busy.as_mut().expect("made in serve").served;
        accept_at(server, &self.doors, door, |mut accepted: Accepted, local| {
            if !admitted(server, stats, &mut accepted, local) {
                return;
            }
            let target = least_loaded(server, index);
            if target != index {
                server.send(target, Message::Adopt(accepted));
                return;
            }
            newcomer(server, index, served, accepted, epoll);
        });
    }

    /// Serves as newcomers the connections other workers handed this one
    /// before they saw it busy: they are in no table yet. The worker takes
    /// the rest of its mail after the script.
    fn adopt_handed(&mut self, epoll: RawFd) {
        let mut handed = Vec::new();
        let mut queue = self.mailbox.queue.lock();
        for message in std::mem::take(&mut *queue) {
            match message {
                Message::Adopt(accepted) => handed.push(accepted),
                other => queue.push(other),
            }
        }
        drop(queue);
        let served = &mut self.busy.as_mut().expect("made in serve").served;
        for accepted in handed {
            newcomer(&self.server, self.index, served, accepted, epoll);
        }
    }
}

fn newcomer(server: &Server, index: usize, served: &mut Served, accepted: Accepted, epoll: RawFd) {
    let conn = new_conn(server, index, accepted);
    if let Err(e) = watch(epoll, conn.stream.raw_fd(), NEWCOMER | served.newcomers.len() as u64) {
        tracing::warn!("serving a client beside a busy script: {e}");
    }
    served.newcomers.push(conn);
}

/// The connection behind epoll `data`: a newcomer, or a lent one.
fn conn_at<'a>(conns: &'a mut Option<Slab<Box<Conn>>>, served: &'a mut Served, data: u64) -> Option<&'a mut Conn> {
    match data & NEWCOMER {
        0 => conns.as_mut()?.get_mut(data as usize).map(|conn| &mut **conn),
        _ => served.newcomers.get_mut((data & !NEWCOMER) as usize).map(|conn| &mut **conn),
    }
}

/// Whether `conn` holds output its socket has not taken yet (or that
/// waits for the log).
fn unsent(conn: &Conn) -> bool {
    conn.wpos < conn.wbuf.len() || conn.stream.holds_output()
}

/// Reads and runs what a connection sent, and writes the replies.
/// Returns whether it ended: the worker closes it after the script.
fn serve_conn(server: &Server, stats: &WorkerStats, conn: &mut Conn, limits: &ParseLimits) -> bool {
    let mut ended = conn.client.info.kill.load(Ordering::Acquire) || read_and_process(server, stats, conn, limits, false, false);
    // Replies leave after what the journal holds for them, as at the end
    // of the worker's loop turn.
    if server.journal().is_some() && !server.gate_replies() {
        write_journal_first(server);
    }
    ended |= write_out(conn, stats, durable_lsn(server)).is_err();
    if ended {
        conn.client.close_after_reply = true;
    }
    ended
}

fn door_data(door: Door) -> u64 {
    match door {
        Door::Tcp(i) => 4 * i as u64,
        Door::Memcache(i) => 4 * i as u64 + 1,
        Door::Tls(i) => 4 * i as u64 + 2,
        Door::Unix => 3,
    }
}

fn door_of(data: u64) -> Door {
    match data % 4 {
        0 => Door::Tcp((data / 4) as usize),
        1 => Door::Memcache((data / 4) as usize),
        2 => Door::Tls((data / 4) as usize),
        _ => Door::Unix,
    }
}

fn watch(epoll: RawFd, fd: RawFd, data: u64) -> io::Result<()> {
    let mut event = libc::epoll_event { events: libc::EPOLLIN as u32, u64: data };
    // SAFETY: both descriptors are open; the kernel copies the event.
    if unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_ADD, fd, &mut event) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Stops polling a connection that ended: it would stay readable.
fn unwatch(epoll: RawFd, fd: RawFd) {
    // SAFETY: both descriptors are open; no event is passed.
    unsafe { libc::epoll_ctl(epoll, libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
}
