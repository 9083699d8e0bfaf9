//! Serving one replica, from its PSYNC on: the partial or full sync, the
//! stream, and the acknowledgements it sends back.
//!
//! A replica is served by two threads of its own rather than by a worker's
//! event loop: a full sync writes a whole RDB to it, for seconds or
//! minutes, and a worker must never wait for that; replicas are few. The
//! sender writes with blocking calls (and a `repl-timeout` write timeout,
//! so a replica that stopped reading is dropped); the reader takes
//! `REPLCONF ACK`s. Over TLS both share the connection's session
//! (`crate::link`).

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use thiserror::Error;

use super::backlog::Backlog;
use super::{Replication, SyncPoint};
use crate::client::ClientInfo;
use crate::command::flags;
use crate::link::Link;
use crate::server::{unix_ms, Server};
use crate::snapshot::RdbParts;

/// Most bytes of the stream copied out of the backlog per write: the copy
/// holds the backlog's mutex, which writers take under their shard locks,
/// so it stays short (a few microseconds).
const CHUNK: u64 = 64 << 10;

/// What a replica said of itself with REPLCONF before its PSYNC.
#[derive(Debug, Default, Clone)]
pub struct ReplConf {
    /// `listening-port`: where the replica serves (INFO's `port=`).
    pub listening_port: u16,
    /// `ip-address`: what it asked to be listed as.
    pub ip: Option<String>,
    /// `capa eof`: takes a diskless RDB (`$EOF:<mark>` framing).
    pub capa_eof: bool,
    /// `capa psync2`: understands `+CONTINUE <replid>`.
    pub capa_psync2: bool,
    /// `rdb-only 1`: wants the RDB of a full sync and nothing after it
    /// (`redis-cli --rdb`).
    pub rdb_only: bool,
    /// `rdb-filter-only`: what of the dataset its RDB holds.
    pub parts: RdbParts,
}

/// A connection that asked to replicate: the worker hands it here.
#[derive(Debug)]
pub struct Handoff {
    /// PSYNC's replid and offset (`?` and -1: no history), or SYNC's.
    pub replid: String,
    pub offset: i64,
    /// SYNC: the RDB comes with no `+FULLRESYNC` line first.
    pub pre_psync: bool,
    pub conf: ReplConf,
}

/// INFO's `state=` of a replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ReplicaState {
    /// Its full sync's RDB is being produced and sent.
    WaitBgsave = 0,
    /// Its RDB is being sent from a file.
    SendBulk = 1,
    Online = 2,
}

impl ReplicaState {
    pub fn name(self) -> &'static str {
        match self {
            ReplicaState::WaitBgsave => "wait_bgsave",
            ReplicaState::SendBulk => "send_bulk",
            ReplicaState::Online => "online",
        }
    }
}

/// An attached replica, as INFO, ROLE, WAIT and the cron see it.
pub struct AttachedReplica {
    pub id: u64,
    pub ip: String,
    pub port: u16,
    state: AtomicU8,
    /// The offset it last acknowledged, and when (Unix ms).
    ack: AtomicU64,
    ack_ms: AtomicU64,
    gone: AtomicBool,
    /// It has sent an ACK: it has loaded its full sync's RDB.
    acked_once: AtomicBool,
    /// Since when (Unix ms) it has been past the soft output limit; 0:
    /// it is not.
    pub(super) over_soft_limit_since_ms: AtomicU64,
    /// A handle on its socket, to end the link from any thread, and for
    /// a shared diskless sync to write to (`super::diskless`).
    pub(super) link: Link,
    /// The connection's client, which CLIENT LIST shows and CLIENT KILL
    /// matches (flag `S`), out of the workers' registry since its PSYNC.
    pub info: Arc<ClientInfo>,
}

impl AttachedReplica {
    pub fn state(&self) -> ReplicaState {
        match self.state.load(Ordering::Acquire) {
            0 => ReplicaState::WaitBgsave,
            1 => ReplicaState::SendBulk,
            _ => ReplicaState::Online,
        }
    }

    fn set_state(&self, state: ReplicaState) {
        self.state.store(state as u8, Ordering::Release);
    }

    pub fn ack(&self) -> u64 {
        self.ack.load(Ordering::Acquire)
    }

    pub fn ack_ms(&self) -> u64 {
        self.ack_ms.load(Ordering::Relaxed)
    }

    /// `ip:port` as Redis names a replica in its log.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }

    /// Ends the link; the replica's threads then clean up.
    pub fn disconnect(&self) {
        self.gone.store(true, Ordering::Release);
        self.link.shutdown();
    }

    /// Its link ended (its reader saw the connection close, or it was
    /// dropped), though its threads may not have detached it yet.
    pub fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }
}

/// Why a replica's link ended.
#[derive(Debug, Error)]
enum LinkError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("the snapshot for its full sync failed: {0}")]
    Snapshot(String),
    #[error("the backlog no longer holds what it needs")]
    Overrun,
}

/// Serves a replica on threads of its own. `pending` is output its
/// connection had not sent yet (replies to REPLCONF), `unread` input it had
/// sent after its PSYNC.
pub fn serve(server: Arc<Server>, link: Link, handoff: Handoff, info: Arc<ClientInfo>, pending: Vec<u8>, unread: Vec<u8>) {
    let spawned = std::thread::Builder::new().name("keel-repl-out".into()).spawn(move || {
        let repl = &server.repl;
        let (Ok(handle), Ok(reader)) = (link.try_clone(), link.try_clone()) else {
            tracing::warn!("replica {}: could not duplicate its socket", info.ip());
            return;
        };
        let replica = Arc::new(AttachedReplica {
            id: repl.next_replica_id.fetch_add(1, Ordering::Relaxed),
            ip: handoff.conf.ip.clone().unwrap_or_else(|| info.ip().to_string()),
            port: handoff.conf.listening_port,
            state: AtomicU8::new(ReplicaState::WaitBgsave as u8),
            ack: AtomicU64::new(0),
            ack_ms: AtomicU64::new(unix_ms()),
            gone: AtomicBool::new(false),
            acked_once: AtomicBool::new(false),
            over_soft_limit_since_ms: AtomicU64::new(0),
            link: handle,
            info,
        });
        replica.info.set_link_role(crate::client::LinkRole::Replica);
        if let (Some(socket), true) = (replica.link.tcp(), server.config.read().repl_disable_tcp_nodelay) {
            // Redis's syncCommand does the same; a failure costs nothing.
            let _ = socket.set_nodelay(false);
        }
        // What the worker last showed of its buffers is no more.
        replica.info.qbuf.store(0, Ordering::Relaxed);
        replica.info.obl.store(0, Ordering::Relaxed);
        tracing::info!("Replica {} asks for synchronization", replica.addr());
        repl.replicas.lock().push(Arc::clone(&replica));
        repl.start_cron(&server);
        let acks = {
            let (server, replica) = (Arc::clone(&server), Arc::clone(&replica));
            std::thread::Builder::new().name("keel-repl-in".into()).spawn(move || read_acks(&server, &replica, reader, unread))
        };
        if let Err(e) = run(&server, &replica, &link, &handoff, &pending) {
            if !replica.is_gone() && !server.shutdown.load(Ordering::Relaxed) {
                tracing::warn!("Connection with replica {} lost: {e}", replica.addr());
            }
        }
        replica.disconnect();
        if let Ok(acks) = acks {
            let _ = acks.join();
        }
        repl.detach(replica.id);
    });
    if let Err(e) = spawned {
        tracing::warn!("could not start a replica's thread: {e}");
    }
}

fn run(server: &Server, replica: &Arc<AttachedReplica>, link: &Link, handoff: &Handoff, pending: &[u8]) -> Result<(), LinkError> {
    let timeout_s = server.config.read().repl_timeout_s.max(1);
    link.set_write_timeout(Duration::from_secs(timeout_s))?;
    let mut out = link;
    out.write_all(pending)?;
    let repl = &server.repl;
    // At one point of the command order, as Redis's single thread answers
    // a PSYNC: after any write under way (a transaction that killed this
    // replica's old link, say) has been fed.
    let partial = {
        let _all = server.keyspace.lock_all();
        repl.try_partial(replica, handoff)
    };
    let pos = match partial {
        Some(pos) => {
            let reply = match handoff.conf.capa_psync2 {
                true => format!("+CONTINUE {}\r\n", repl.replid()),
                false => "+CONTINUE\r\n".to_string(),
            };
            out.write_all(reply.as_bytes())?;
            replica.set_state(ReplicaState::Online);
            pos
        }
        None => full_sync(server, replica, link, handoff)?,
    };
    if handoff.conf.rdb_only {
        return Ok(());
    }
    stream(server, replica, link, pos)
}

/// A full sync: the snapshot at S (where the replica's position is
/// pinned at the stream's end), `+FULLRESYNC`, the RDB. Returns the
/// position the stream goes on from.
fn full_sync(server: &Server, replica: &Arc<AttachedReplica>, link: &Link, handoff: &Handoff) -> Result<u64, LinkError> {
    let repl = &server.repl;
    repl.sync_full.fetch_add(1, Ordering::Relaxed);
    let stop = || server.shutdown.load(Ordering::Relaxed) || replica.is_gone();
    // A filtered RDB goes over the socket whatever `repl-diskless-sync`
    // says, as Redis forces it: it is no snapshot to keep in a file.
    let filtered = handoff.conf.parts != RdbParts::ALL;
    let pos = if handoff.conf.capa_eof && (server.config.read().repl_diskless_sync || filtered) {
        let pos = super::diskless::sync(server, replica, handoff.pre_psync, handoff.conf.parts).map_err(LinkError::Snapshot)?;
        // A replica finds the mark in the last bytes it read: nothing may
        // follow it until the replica says it has loaded, with its first
        // ACK (Redis puts such a replica online on that ACK too).
        while !replica.acked_once.load(Ordering::Acquire) {
            if stop() {
                return Err(LinkError::Snapshot("the replica left before it loaded".into()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        pos
    } else {
        // A replica without `capa eof` needs the length first, and
        // `repl-diskless-sync no` asks for it: the RDB goes through a
        // file, unlinked as soon as it is open again.
        let size = server.config.read().repl_backlog_size;
        // Created before the snapshot, whose token only its writing gives back.
        let path = server.config.read().dir.join(format!("temp-repl-{}-{}.rdb", std::process::id(), replica.id));
        let file = File::create(&path)?;
        let mut point = None;
        let taken = with_keepalive(server, link, || crate::snapshot::take_for_sync(server, || point = Some(repl.attach_at_s(replica.id, size)), &stop));
        let (Some(taken), Some(point)) = (taken, point) else {
            let _ = std::fs::remove_file(&path);
            return Err(LinkError::Snapshot("stopped before it began".into()));
        };
        let pos = point.offset;
        tracing::info!("Starting a snapshot for replica {} at offset {pos}", replica.addr());
        let mut out = link;
        let header = match handoff.pre_psync {
            false => out.write_all(format!("+FULLRESYNC {} {pos}\r\n", point.replid).as_bytes()).map_err(LinkError::Io),
            true => Ok(()),
        };
        // Written even if the header failed (stopping at its first step):
        // that gives the token back.
        if header.is_err() {
            replica.disconnect();
        }
        let written = with_keepalive(server, link, || crate::snapshot::write_for_sync(server, taken, &point, RdbParts::ALL, BufWriter::new(file), &stop))
            .map_err(LinkError::Snapshot)
            .and_then(|sink| sink.into_inner().map_err(|e| LinkError::Io(e.into_error())))
            .and(header);
        let opened = written.and_then(|_| File::open(&path).map_err(LinkError::Io));
        let _ = std::fs::remove_file(&path);
        let mut file = opened?;
        replica.set_state(ReplicaState::SendBulk);
        out.write_all(format!("${}\r\n", file.metadata()?.len()).as_bytes())?;
        io::copy(&mut file, &mut out)?;
        pos
    };
    replica.set_state(ReplicaState::Online);
    tracing::info!("Synchronization with replica {} succeeded", replica.addr());
    Ok(pos)
}

/// Runs `work` while the replica gets a newline every second, as Redis's
/// cron sends one to a replica waiting for a disk-based sync: nothing else
/// goes to it while the snapshot token is waited for and the file written,
/// and its `repl-timeout` must not pass meanwhile. A failed write is left
/// for the link's own next write to find.
fn with_keepalive<T>(server: &Server, link: &Link, work: impl FnOnce() -> T) -> T {
    let (done, wait) = std::sync::mpsc::channel::<()>();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            while wait.recv_timeout(super::diskless::KEEPALIVE) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                if !server.sleeping() {
                    let _ = (&*link).write_all(b"\n");
                }
            }
        });
        let out = work();
        drop(done);
        out
    })
}

/// Sends the stream from `pos` on, as far as the journal's durability
/// allows, until the link ends or the server stops.
fn stream(server: &Server, replica: &AttachedReplica, link: &Link, mut pos: u64) -> Result<(), LinkError> {
    let shared = &server.repl.shared;
    let stop = || server.shutdown.load(Ordering::Relaxed) || replica.is_gone();
    let mut chunk = Vec::new();
    let mut out = link;
    loop {
        {
            let mut g = shared.backlog.lock();
            loop {
                if stop() {
                    return Ok(());
                }
                let backlog = g.as_mut().ok_or(LinkError::Overrun)?;
                if backlog.behind(replica.id).is_none() {
                    // Dropped past its output limit (`feed_with`): not
                    // one byte more.
                    return Ok(());
                }
                let mut upto = backlog.sendable_end(pos, durable_lsn(server)).min(pos + CHUNK);
                if upto == pos && backlog.end() > pos {
                    // Waiting for the disk: say so, then look again, so
                    // that an advance in between is not missed.
                    shared.waiting_durable.store(true, Ordering::Release);
                    upto = backlog.sendable_end(pos, durable_lsn(server)).min(pos + CHUNK);
                }
                if upto > pos {
                    chunk.clear();
                    chunk.extend_from_slice(backlog.read(pos, upto).ok_or(LinkError::Overrun)?);
                    pos = upto;
                    // Sent, as far as the backlog is concerned: the bytes are copied.
                    backlog.pin(replica.id, pos);
                    break;
                }
                shared.more.wait_for(&mut g, Duration::from_millis(100));
            }
        }
        server.wait_while_sleeping();
        out.write_all(&chunk)?;
    }
}

/// What a replica may be sent up to: the journal's durable position when
/// replies wait for it, everything otherwise.
fn durable_lsn(server: &Server) -> u64 {
    match server.journal() {
        Some(journal) if server.gate_replies() => journal.durable_lsn(),
        _ => u64::MAX,
    }
}

/// Reads the replica's `REPLCONF ACK <offset>`s until the link ends.
fn read_acks(server: &Server, replica: &AttachedReplica, link: Link, unread: Vec<u8>) {
    let mut buf = unread;
    let mut start = 0;
    let mut input = &link;
    let limits = keel_protocol::Limits::default();
    loop {
        while let Ok(Some((request, consumed))) = keel_protocol::parse_request(&buf[start..], &limits) {
            let argv: Vec<&[u8]> = request.argv.iter().map(|a| &**a).collect();
            start += consumed;
            if argv.is_empty() {
                // The newline a replica sends while it loads: it is alive,
                // as Redis's processInlineBuffer takes it.
                replica.ack_ms.store(unix_ms(), Ordering::Relaxed);
                continue;
            }
            let replconf = |sub: &str| argv.len() >= 2 && argv[0].eq_ignore_ascii_case(b"replconf") && argv[1].eq_ignore_ascii_case(sub.as_bytes());
            if let Ok((index, _)) = crate::command::resolve(&argv) {
                replica.info.last_cmd.store(index as u16 + 1, Ordering::Relaxed);
                replica.info.last_interaction_ms.store(unix_ms(), Ordering::Relaxed);
            }
            if replconf("ack") && argv.len() >= 3 {
                if let Some(offset) = std::str::from_utf8(argv[2]).ok().and_then(|s| s.parse::<u64>().ok()) {
                    replica.ack.fetch_max(offset, Ordering::AcqRel);
                    replica.ack_ms.store(unix_ms(), Ordering::Relaxed);
                    replica.acked_once.store(true, Ordering::Release);
                    server.repl.acks_advanced(server);
                }
            } else if !replconf("getack") {
                refuse_command(server, replica, &argv);
                return;
            }
        }
        buf.drain(..start);
        start = 0;
        let mut piece = [0u8; 4096];
        match input.read(&mut piece) {
            Ok(0) | Err(_) => {
                // What the backlog kept for it goes now, not when its
                // sender next wakes: Redis frees a closed replica at once.
                server.repl.drop_replica(replica);
                return;
            }
            Ok(n) => buf.extend_from_slice(&piece[..n]),
        }
    }
}

/// A replica sent a command that would be answered (anything but
/// `REPLCONF ACK` or `GETACK`): as Redis, which never writes a reply on a
/// replication link, the link goes, and a command touching the keyspace
/// counts as an error sent to the replica (Redis refuses those from
/// replicas: they are exempt from CLIENT PAUSE).
fn refuse_command(server: &Server, replica: &AttachedReplica, argv: &[&[u8]]) {
    let (name, error) = match crate::command::resolve(argv) {
        Ok((_, spec)) if spec.has(flags::READONLY) || spec.has(flags::WRITE) => {
            (spec.name, Some("Replica can't interact with the keyspace".to_string()))
        }
        Ok((_, spec)) => (spec.name, None),
        Err(e) => ("<unknown>", Some(e.to_string())),
    };
    if let Some(error) = error {
        let error = error.strip_prefix("ERR ").unwrap_or(&error);
        tracing::warn!("== CRITICAL == This master is sending an error to its replica: '{error}' after processing the command '{name}'");
        server.unexpected_error_replies.fetch_add(1, Ordering::Relaxed);
    }
    let (addr, laddr) = (&replica.info.addr, &replica.info.laddr);
    tracing::warn!("Replica generated a reply to command '{name}', disconnecting it: addr={addr} laddr={laddr}");
    server.repl.drop_replica(replica);
}

impl Replication {
    /// At a full sync's S, under every shard lock (and, on a replica,
    /// between two applied pieces of its master's stream): the backlog
    /// (created by the first replica) keeps everything from its end on for
    /// replica `id`; a master's own stream starts its next record with a
    /// SELECT, a proxied one goes on in the master's database.
    pub(super) fn attach_at_s(&self, id: u64, size: u64) -> SyncPoint {
        let mut g = self.shared.backlog.lock();
        let backlog = g.get_or_insert_with(|| Backlog::new(self.freed_at.load(Ordering::Relaxed), size));
        let proxying = self.proxying.load(Ordering::Relaxed);
        if !proxying {
            backlog.selected_db = None;
        }
        let offset = backlog.end();
        backlog.pin(id, offset);
        let stream_db = backlog.selected_db.unwrap_or(0);
        self.active.store(!proxying, Ordering::Relaxed);
        SyncPoint { replid: self.replid(), offset, stream_db }
    }

    /// Redis's `masterTryPartialResynchronization`: the position to go on
    /// from if the replica's history is ours (or our secondary one, up to
    /// where it ended) and the backlog still holds what follows its offset
    /// (pinned for it then), or `None`.
    fn try_partial(&self, replica: &AttachedReplica, handoff: &Handoff) -> Option<u64> {
        let (asked, offset) = (handoff.replid.as_str(), handoff.offset);
        if asked == "?" {
            tracing::info!("Full resync requested by replica {}", replica.addr());
            return None;
        }
        let refused = |why: String| {
            tracing::info!("{why}");
            self.sync_partial_err.fetch_add(1, Ordering::Relaxed);
            None
        };
        let (replid, replid2, second_offset) = self.ids();
        if asked != replid && asked != replid2 {
            return refused(format!(
                "Partial resynchronization not accepted: Replication ID mismatch (Replica asked for '{asked}', my replication IDs are '{replid}' and '{replid2}')"
            ));
        }
        if asked != replid && offset > second_offset {
            return refused(format!(
                "Partial resynchronization not accepted: Requested offset for second ID was {offset}, but I can reply up to {second_offset}"
            ));
        }
        let mut g = self.shared.backlog.lock();
        let Some(backlog) = g.as_mut().filter(|b| offset >= b.first_byte_offset() as i64 && offset <= b.end() as i64 + 1) else {
            drop(g);
            return refused(format!(
                "Unable to partial resync with replica {} for lack of backlog (Replica request was: {offset}).",
                replica.addr()
            ));
        };
        let pos = offset as u64 - 1;
        backlog.pin(replica.id, pos);
        self.sync_partial_ok.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            "Partial resynchronization request from {} accepted. Sending {} bytes of backlog starting from offset {offset}.",
            replica.addr(),
            backlog.end() - pos
        );
        Some(pos)
    }

    /// A replica's link ended.
    fn detach(&self, id: u64) {
        if let Some(backlog) = self.shared.backlog.lock().as_mut() {
            backlog.unpin(id);
        }
        self.replicas.lock().retain(|r| r.id != id);
    }
}
