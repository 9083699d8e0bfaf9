//! A diskless full sync shared by the replicas that ask for one close
//! together, as Redis serves the replicas waiting in WAIT_BGSAVE_START
//! with one fork child: the first to come waits `repl-diskless-sync-delay`
//! seconds (or until `repl-diskless-sync-max-replicas` are waiting) for
//! others to join it; then one snapshot, taken at one instant S for all of
//! them, is streamed to each at once. A replica whose socket fails is
//! dropped from the stream and the others go on, as from Redis's rdb pipe.
//!
//! Keel takes one snapshot at a time (the snapshot token): without the
//! group, replicas that come together would be synced one after another,
//! each waiting for the whole transfer of the one before. A replica that
//! asked for part of the dataset (`rdb-filter-only`, `redis-cli
//! --functions-rdb`) gets an RDB of its own, at once.

use std::io::{self, BufWriter, Write};
use std::sync::atomic::Ordering;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::master::AttachedReplica;
use super::random_id;
use crate::link::Link;
use crate::server::Server;
use crate::snapshot::RdbParts;

/// How often a waiting group looks at its delay and its members.
const TICK: Duration = Duration::from_millis(10);
/// How often the replicas of a waiting group get a newline, as Redis's
/// cron sends one to replicas waiting for their sync: it keeps a replica's
/// `repl-timeout` from passing while the delay runs.
pub(super) const KEEPALIVE: Duration = Duration::from_secs(1);

/// The replicas waiting for the next diskless sync to start.
#[derive(Default)]
pub struct Groups {
    forming: Mutex<Option<Group>>,
}

struct Group {
    since: Instant,
    members: Vec<Member>,
}

/// A replica in a group, and where its own thread hears how the sync went.
struct Member {
    replica: Arc<AttachedReplica>,
    /// It came with SYNC: no `+FULLRESYNC` line before the RDB.
    pre_psync: bool,
    /// The position its stream goes on from, or why its sync failed.
    outcome: mpsc::Sender<Result<u64, String>>,
}

/// A replica's diskless full sync: joins the forming group, or forms one
/// and leads it (waits for it to fill, then runs it), and returns where
/// the replica's stream goes on once the group's RDB and EOF mark have
/// been sent to it.
pub fn sync(server: &Server, replica: &Arc<AttachedReplica>, pre_psync: bool, parts: RdbParts) -> Result<u64, String> {
    let groups = &server.repl.groups;
    let (outcome, heard) = mpsc::channel();
    if parts != RdbParts::ALL {
        let me = Member { replica: Arc::clone(replica), pre_psync, outcome };
        run(server, Group { since: Instant::now(), members: vec![me] }, parts);
        return heard.recv().unwrap_or_else(|_| Err("the sync ended".into()));
    }
    let leads = {
        let mut forming = groups.forming.lock();
        let group = forming.get_or_insert_with(|| Group { since: Instant::now(), members: Vec::new() });
        group.members.push(Member { replica: Arc::clone(replica), pre_psync, outcome });
        group.members.len() == 1
    };
    if leads {
        // The leader runs the group even if its own replica leaves: the
        // others still wait on it.
        run(server, wait_to_start(server), RdbParts::ALL);
    }
    loop {
        match heard.recv_timeout(Duration::from_millis(100)) {
            Ok(outcome) => return outcome,
            Err(RecvTimeoutError::Timeout) if replica.is_gone() || server.shutdown.load(Ordering::Relaxed) => {
                if let Some(group) = groups.forming.lock().as_mut() {
                    group.members.retain(|m| m.replica.id != replica.id);
                }
                return Err("the replica left before its sync".into());
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Err("the sync it waited for ended".into()),
        }
    }
}

/// The leader's wait: until its group has waited the delay, has the
/// number of replicas asked for, has none left, or the server stops
/// (Redis's `shouldStartChildForReplication`, checked every [`TICK`]
/// rather than every second). Takes the group out, so that replicas
/// coming later form the next one.
fn wait_to_start(server: &Server) -> Group {
    let mut last_newline = Instant::now();
    loop {
        let (delay, max) = {
            let c = server.config.read();
            (Duration::from_secs(c.repl_diskless_sync_delay_s), c.repl_diskless_sync_max_replicas)
        };
        {
            let mut forming = server.repl.groups.forming.lock();
            let group = forming.as_ref().expect("only the leader takes its group");
            let waiting = group.members.iter().filter(|m| !m.replica.is_gone()).count() as u64;
            let full = max > 0 && waiting >= max;
            if waiting == 0 || full || group.since.elapsed() >= delay || server.shutdown.load(Ordering::Relaxed) {
                return forming.take().expect("only the leader takes its group");
            }
            if last_newline.elapsed() >= KEEPALIVE && !server.sleeping() {
                last_newline = Instant::now();
                // A member whose write fails is gone: its threads notice.
                group.members.iter().for_each(|m| drop((&m.replica.link).write_all(b"\n")));
            }
        }
        std::thread::sleep(TICK);
    }
}

/// Takes one snapshot for `group` and streams `parts` of it to every
/// member, then tells each member's thread how its sync went. It runs on
/// `bgsave_cpulist`, as Redis's fork child for a diskless sync does.
fn run(server: &Server, group: Group, parts: RdbParts) {
    crate::process::pinned(crate::process::CpuRole::Bgsave, || run_pinned(server, group, parts));
}

fn run_pinned(server: &Server, group: Group, parts: RdbParts) {
    let mut members = group.members;
    members.retain(|m| {
        let gone = m.replica.is_gone();
        if gone {
            let _ = m.outcome.send(Err("the replica left before its sync".into()));
        }
        !gone
    });
    if members.is_empty() {
        return;
    }
    let repl = &server.repl;
    let size = server.config.read().repl_backlog_size;
    let mut point = None;
    let stop = || server.shutdown.load(Ordering::Relaxed) || members.iter().all(|m| m.replica.is_gone());
    let at_s = || members.iter().for_each(|m| point = Some(repl.attach_at_s(m.replica.id, size)));
    let taken = crate::snapshot::take_for_sync(server, at_s, &stop);
    let (Some(taken), Some(point)) = (taken, point) else {
        members.iter().for_each(|m| drop(m.outcome.send(Err("stopped before the snapshot began".into()))));
        return;
    };
    let (pos, replid) = (point.offset, &point.replid);
    let names: Vec<String> = members.iter().map(|m| m.replica.addr()).collect();
    tracing::info!("Starting a diskless sync at offset {pos} for {} replica(s): {}", members.len(), names.join(", "));
    let mark = random_id();
    let mut tee = Tee { links: members.iter().map(|m| &m.replica.link).collect(), failed: vec![None; members.len()] };
    for (i, m) in members.iter().enumerate() {
        let fullresync = if m.pre_psync { String::new() } else { format!("+FULLRESYNC {replid} {pos}\r\n") };
        tee.write_one(i, format!("{fullresync}$EOF:{mark}\r\n").as_bytes());
    }
    let sink = BufWriter::with_capacity(256 << 10, tee);
    let sent = crate::snapshot::write_for_sync(server, taken, &point, parts, sink, &stop).and_then(|mut sink| {
        sink.write_all(mark.as_bytes()).and_then(|()| sink.flush()).map_err(|e| e.to_string())?;
        sink.into_inner().map_err(|e| e.error().to_string())
    });
    match sent {
        Ok(tee) => {
            for (m, failed) in members.iter().zip(tee.failed) {
                let _ = m.outcome.send(failed.map_or(Ok(pos), Err));
            }
        }
        Err(e) => members.iter().for_each(|m| drop(m.outcome.send(Err(e.clone())))),
    }
}

/// The group's one RDB, written to every member's socket in turn (each
/// with its `repl-timeout` write timeout). A member whose write fails is
/// left out from then on; the stream fails only when none is left.
struct Tee<'g> {
    links: Vec<&'g Link>,
    /// Why each member was left out.
    failed: Vec<Option<String>>,
}

impl Tee<'_> {
    fn write_one(&mut self, i: usize, bytes: &[u8]) {
        if self.failed[i].is_none() {
            let mut link = self.links[i];
            if let Err(e) = link.write_all(bytes) {
                self.failed[i] = Some(e.to_string());
            }
        }
    }
}

impl Write for Tee<'_> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        (0..self.links.len()).for_each(|i| self.write_one(i, bytes));
        match self.failed.iter().any(Option::is_none) {
            true => Ok(bytes.len()),
            false => Err(io::Error::other("every replica of the sync failed")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
