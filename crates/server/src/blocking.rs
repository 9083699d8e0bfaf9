//! Blocking pops (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP, BZPOPMIN,
//! BZPOPMAX, BZMPOP) and stream reads (XREAD, XREADGROUP with BLOCK): how
//! a client waits for a key, and how it is served.
//!
//! # Waiting
//!
//! A blocking command that finds nothing to pop calls [`block`] while it
//! still holds the locks of its keys: the client's id joins the FIFO queue
//! of each key in that key's `Db::blocked`, and a [`Waiter`] describing the
//! wait goes into the server-wide [`Registry`]. Checking for data and
//! queueing happen under the same locks, so no push can slip in between.
//! The worker that owns the connection then parks it (its next requests
//! stay buffered) until the wait ends.
//!
//! # Serving
//!
//! A key blocked on by a pop is always absent (or holds another type), so
//! the only event that can serve it is the key's creation, which `Db`
//! notices and queues in `Db::ready`; a stream reader waits on a stream
//! that may exist, and XADD, XGROUP DESTROY and the stream's deletion
//! queue it too (`Db::signal_ready`). Each stream reader wants entries
//! past its own ID, so a reader the key cannot serve yet is passed over
//! for the next; one whose group or stream went gets Redis 7.0's error. After every command the dispatcher takes those
//! ready keys ([`take_ready`]) and, once its own locks are released,
//! [`serve`]s them: for each key, first blocked first served, the waiter's
//! command runs again on its behalf, narrowed to the ready key and unable
//! to block, under the locks that narrowed command needs. Its reply (and
//! the journal position that reply depends on) travels to the owning
//! worker in a `Message::Unblock`. A served BLMOVE may create its
//! destination: the keys that makes ready are served in the same pass.
//! Running the real command keeps one implementation of every pop, and its
//! journal record is the non-blocking command it amounts to (the handlers
//! call `Ctx::propagate_as`).
//!
//! # Ending a wait exactly once
//!
//! A wait ends by being served, by its timeout, by CLIENT UNBLOCK or by
//! the client going away, and these can race across threads. Whoever
//! flips `Waiter::done` first owns the ending; the others back off. The
//! owning worker then removes the client from its keys' queues
//! ([`forget`]); a server that meets a finished waiter's id in a queue
//! meanwhile just drops it.
//!
//! # Beside a busy script
//!
//! A busy script holds every shard until it ends, maybe for ever; a
//! worker must not wait for it ([`crate::scripting::lock_or_busy`]). A
//! queue place it cannot remove stays until the script ends, and the
//! client's next requests with it; a ready key it cannot serve is put
//! off ([`retry_deferred`]). Workers try both again every millisecond.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use keel_engine::{Key, Shards};
use keel_protocol::ReplyWriter;
use parking_lot::Mutex;

use crate::client::{Client, ClientInfo, Message};
use crate::command::streams::Readiness;
use crate::command::{self, CmdError, Ctx};
use crate::server::{Server, WorkerStats};

/// What a blocked client waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// One of its keys to be served (BLPOP and the rest).
    Keys,
    /// WAIT's: `wanted` replicas to acknowledge `offset` (replication
    /// answers it).
    Acks { offset: u64, wanted: u64 },
    /// SHUTDOWN's: the shutdown to fail or be aborted (`crate::shutdown`
    /// answers it). It never times out, and CLIENT UNBLOCK passes it by.
    Shutdown,
}

/// One client's wait.
#[derive(Debug)]
pub struct Waiter {
    pub client: u64,
    /// The worker that owns the connection.
    pub worker: usize,
    pub db: usize,
    pub resp3: bool,
    /// The blocking command as the client sent it.
    pub argv: Vec<Vec<u8>>,
    /// The keys it waits on, without repeats.
    pub keys: Vec<Key>,
    /// Unix ms at which the wait times out; 0 waits forever.
    pub deadline_ms: u64,
    pub wait_for: WaitFor,
    /// Set by whoever ends the wait (see the module doc).
    done: AtomicBool,
}

impl Waiter {
    /// Claims the ending of the wait; false if someone else has.
    pub fn claim(&self) -> bool {
        !self.done.swap(true, Ordering::AcqRel)
    }

    /// Whether the wait has ended (or its ending is under way).
    pub fn is_done(&self) -> bool {
        self.done.load(Ordering::Acquire)
    }

    /// The type a key must hold to serve this wait.
    fn serves_on(&self) -> &'static str {
        if self.reads_stream() {
            "stream"
        } else if self.argv[0].get(1).is_some_and(|c| c.eq_ignore_ascii_case(&b'z')) {
            "zset"
        } else {
            "list"
        }
    }

    /// XREAD and XREADGROUP: each waiter wants entries past its own ID, so
    /// the first in line may have to wait while others are served.
    fn reads_stream(&self) -> bool {
        self.argv[0].len() >= 5 && self.argv[0][..5].eq_ignore_ascii_case(b"xread")
    }
}

/// Every client currently blocked, by id.
#[derive(Default)]
pub struct Registry {
    waiters: Mutex<HashMap<u64, Arc<Waiter>>>,
    count: AtomicUsize,
    /// Ready keys, with their database, whose waiters a busy script's
    /// shards kept from being served: every worker's loop turn tries
    /// them again ([`retry_deferred`]).
    deferred: Mutex<Vec<(usize, Key)>>,
    any_deferred: AtomicBool,
}

impl Registry {
    /// Whether any client is blocked: one relaxed load, so that commands
    /// pay nothing for blocking support while nobody blocks.
    pub fn any(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }

    /// INFO's blocked_clients.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    pub fn get(&self, client: u64) -> Option<Arc<Waiter>> {
        self.waiters.lock().get(&client).cloned()
    }

    /// Whether some ready key waits for a busy script to end.
    pub fn any_deferred(&self) -> bool {
        self.any_deferred.load(Ordering::Relaxed)
    }

    fn defer(&self, ready: impl IntoIterator<Item = (usize, Key)>) {
        let mut deferred = self.deferred.lock();
        deferred.extend(ready);
        self.any_deferred.store(true, Ordering::Relaxed);
    }
}

/// Redis 7.0's timeout argument of the blocking commands: seconds as a
/// float, 0 for ever. Returns the absolute deadline in Unix ms (0: none).
pub fn parse_timeout(arg: &[u8], now_ms: u64) -> Result<u64, CmdError> {
    let secs = command::parse::parse_f64(arg)
        .ok_or_else(|| CmdError::other("ERR timeout is not a float or out of range"))?;
    // Redis converts with a C cast, which turns anything out of range
    // into a negative number: it then reports "negative", and so do we.
    let ms = (secs * 1000.0).ceil();
    if !(0.0..9.2e18).contains(&ms) {
        return Err(CmdError::other("ERR timeout is negative"));
    }
    Ok(if ms == 0.0 { 0 } else { now_ms.saturating_add(ms as u64) })
}

/// Blocks the running client on `keys` until `deadline_ms` (0: for ever).
/// The caller has found every key empty and replies nothing.
pub fn block(ctx: &mut Ctx<'_>, argv: &[&[u8]], keys: &[&[u8]], deadline_ms: u64) {
    block_waiting(ctx, argv, keys, deadline_ms, WaitFor::Keys);
}

/// Blocks the client in WAIT until `wanted` replicas acknowledge
/// `offset`; returns the wait for replication to answer.
pub fn block_for_acks(ctx: &mut Ctx<'_>, argv: &[&[u8]], offset: u64, wanted: u64, deadline_ms: u64) -> Arc<Waiter> {
    block_waiting(ctx, argv, &[], deadline_ms, WaitFor::Acks { offset, wanted })
}

/// Blocks the client in SHUTDOWN until the shutdown fails or is aborted
/// (`crate::shutdown` answers it then; a shutdown that succeeds closes it).
pub fn block_for_shutdown(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Arc<Waiter> {
    block_waiting(ctx, argv, &[], 0, WaitFor::Shutdown)
}

fn block_waiting(ctx: &mut Ctx<'_>, argv: &[&[u8]], keys: &[&[u8]], deadline_ms: u64, wait_for: WaitFor) -> Arc<Waiter> {
    let mut unique: Vec<Key> = Vec::with_capacity(keys.len());
    for key in keys {
        if !unique.iter().any(|k| &k[..] == *key) {
            unique.push((*key).into());
        }
    }
    let db = ctx.dbs.selected;
    for key in &unique {
        ctx.dbs.of(key).blocked.entry(key.clone()).or_default().push_back(ctx.client.id);
    }
    let waiter = Arc::new(Waiter {
        client: ctx.client.id,
        worker: ctx.client.worker,
        db,
        resp3: ctx.client.resp3,
        argv: argv.iter().map(|a| a.to_vec()).collect(),
        keys: unique,
        deadline_ms,
        wait_for,
        done: AtomicBool::new(false),
    });
    let registry = &ctx.server.blocking;
    registry.waiters.lock().insert(ctx.client.id, waiter.clone());
    registry.count.fetch_add(1, Ordering::Relaxed);
    ctx.client.info.blocked.store(true, Ordering::Relaxed);
    ctx.client.blocked = Some(Arc::clone(&waiter));
    waiter
}

/// Removes a finished wait from the registry and from the queues of its
/// keys. Called by the worker that owns the client, never under locks.
/// False if a busy script holds some of those queues: the worker calls
/// again later, and meanwhile holds the client's next requests, since a
/// new wait on one of those keys would queue behind its own old place.
/// A server that meets the old place first drops it.
#[must_use]
pub fn forget(server: &Server, waiter: &Waiter) -> bool {
    if server.blocking.waiters.lock().remove(&waiter.client).is_some() {
        server.blocking.count.fetch_sub(1, Ordering::Relaxed);
    }
    let keyspace = &server.keyspace;
    let mut all = true;
    for key in &waiter.keys {
        match crate::scripting::lock_or_busy(server, (false, false), Shards::One(keyspace.shard_of_key(key))) {
            Ok(mut locked) => remove_waiter(locked.shard_for(keyspace, key).db(waiter.db), key, waiter.client),
            Err(_) => all = false,
        }
    }
    all
}

/// The reply of a wait that timed out: Redis answers a null array to
/// every blocking pop, BLMOVE included, and to WAIT the replicas that
/// acknowledged its offset so far.
pub fn timeout_reply(server: &Server, waiter: &Waiter) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = ReplyWriter::new(&mut out, waiter.resp3);
    match waiter.wait_for {
        WaitFor::Acks { offset, .. } => w.int(server.repl.acked(offset) as i64),
        WaitFor::Keys | WaitFor::Shutdown => w.null_array(),
    }
    out
}

/// Takes the keys the running command made ready, with their database.
pub fn take_ready(ctx: &mut Ctx<'_>) -> Vec<(usize, Key)> {
    let mut ready = Vec::new();
    for shard in ctx.dbs.shards() {
        for (index, db) in shard.dbs_mut().iter_mut().enumerate() {
            ready.extend(db.ready.drain(..).map(|k| (index, k)));
        }
    }
    ready
}

/// Serves the clients blocked on `ready`, and on the keys that serving
/// them makes ready in turn (see the module doc). What a busy script's
/// shards keep from being served waits for its end ([`retry_deferred`]):
/// the caller's worker goes on serving its own clients meanwhile.
pub fn serve(server: &Server, stats: &WorkerStats, ready: Vec<(usize, Key)>) {
    let mut work: VecDeque<(usize, Key)> = ready.into();
    while let Some((db, key)) = work.pop_front() {
        let mut skip = 0;
        loop {
            match serve_nth(server, stats, db, &key, skip) {
                Served::Done(more) => work.extend(more),
                Served::Stale => {}
                Served::Skip => skip += 1,
                Served::Nothing => break,
                Served::Busy => {
                    work.push_front((db, key));
                    server.blocking.defer(work);
                    return;
                }
            }
        }
    }
}

/// Serves the ready keys [`serve`] put off while a script was busy.
pub fn retry_deferred(server: &Server, stats: &WorkerStats) {
    let ready = {
        let mut deferred = server.blocking.deferred.lock();
        server.blocking.any_deferred.store(false, Ordering::Relaxed);
        std::mem::take(&mut *deferred)
    };
    serve(server, stats, ready);
}

enum Served {
    /// A waiter was served; these keys became ready meanwhile.
    Done(Vec<(usize, Key)>),
    /// The waiter had already finished: dropped from the queue.
    Stale,
    /// A stream reader that the key cannot serve yet: try the next one.
    Skip,
    /// No waiter, or the key holds nothing that serves the first one.
    Nothing,
    /// A busy script holds the shards: nothing was done.
    Busy,
}

/// Serves the `nth` client waiting on `key` (the first, but for stream
/// readers, which the same XADD may serve or not), if the key can.
fn serve_nth(server: &Server, stats: &WorkerStats, db: usize, key: &[u8], nth: usize) -> Served {
    let keyspace = &server.keyspace;
    let waiter = {
        let Ok(mut locked) = crate::scripting::lock_or_busy(server, (false, false), Shards::One(keyspace.shard_of_key(key))) else {
            return Served::Busy;
        };
        let queue = locked.shard_for(keyspace, key).db(db).blocked.get(key);
        let Some(&first) = queue.and_then(|q| q.get(nth)) else { return Served::Nothing };
        match server.blocking.get(first) {
            Some(w) if !w.done.load(Ordering::Acquire) => w,
            _ => {
                remove_waiter(locked.shard_for(keyspace, key).db(db), key, first);
                return Served::Stale;
            }
        }
    };
    // The waiter's command, narrowed to this key, under its own locks
    // (BLMOVE also locks its destination, maybe on another shard).
    let argv = narrow(&waiter.argv, key);
    let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    let Ok((index, spec)) = command::resolve(&args) else { return Served::Nothing };
    let now_ms = crate::server::unix_ms();
    let Ok(locked) = crate::scripting::lock_or_busy(server, (false, false), command::shards_for(keyspace, spec, &args)) else {
        return Served::Busy;
    };
    let info = Arc::new(ClientInfo::detached(waiter.client));
    let mut client = Client::new(info, true);
    client.db = db;
    client.resp3 = waiter.resp3;
    let mut reply = Vec::new();
    let mut ctx = Ctx::new(server, stats, &mut client, &mut reply, locked, now_ms);
    ctx.may_block = false;
    let mut failed = None;
    if waiter.reads_stream() {
        match command::streams::readiness(&waiter.argv, ctx.dbs.of(key).get(key, now_ms), key) {
            Readiness::Serve => {}
            Readiness::Wait => return Served::Skip,
            Readiness::Fail(text) => failed = Some(text),
        }
    } else if ctx.dbs.of(key).get(key, now_ms).is_none_or(|e| e.value.type_name() != waiter.serves_on()) {
        return Served::Nothing;
    }
    if !waiter.claim() {
        remove_waiter(ctx.dbs.of(key), key, waiter.client);
        return Served::Stale;
    }
    remove_waiter(ctx.dbs.of(key), key, waiter.client);
    if let Some(text) = failed {
        // The blocked call counts as failed (Redis's updateStatsOnUnblock).
        stats.commands[index].failed_calls.fetch_add(1, Ordering::Relaxed);
        server.count_error(text);
        ctx.out.error(text);
        drop(ctx);
        server.send(waiter.worker, Message::Unblock { client: waiter.client, reply, lsn: 0 });
        return Served::Done(Vec::new());
    }
    if let Err(e) = command::run(&mut ctx, index, spec, &args) {
        let text = e.to_string();
        server.count_error(&text);
        ctx.out.error(&text);
    }
    let lsn = crate::durability::commit(&mut ctx);
    let events = std::mem::take(&mut ctx.published);
    let more = take_ready(&mut ctx);
    drop(ctx);
    if !events.is_empty() {
        crate::pubsub::deliver(server, events);
    }
    server.send(waiter.worker, Message::Unblock { client: waiter.client, reply, lsn });
    Served::Done(more)
}

/// The blocking command `argv`, reduced to wait on `key` alone: what runs
/// when `key` becomes ready.
fn narrow(argv: &[Vec<u8>], key: &[u8]) -> Vec<Vec<u8>> {
    let name = argv[0].to_ascii_lowercase();
    match name.as_slice() {
        // CMD key... timeout
        b"blpop" | b"brpop" | b"bzpopmin" | b"bzpopmax" => {
            vec![argv[0].clone(), key.to_vec(), argv[argv.len() - 1].clone()]
        }
        // CMD timeout numkeys key... rest
        b"blmpop" | b"bzmpop" => {
            let numkeys: usize = std::str::from_utf8(&argv[2]).ok().and_then(|n| n.parse().ok()).unwrap_or(0);
            let mut out = vec![argv[0].clone(), argv[1].clone(), b"1".to_vec(), key.to_vec()];
            out.extend(argv.iter().skip(3 + numkeys).cloned());
            out
        }
        b"xread" | b"xreadgroup" => command::streams::narrow(argv, key),
        // BLMOVE and BRPOPLPUSH wait on their one source key.
        _ => argv.to_vec(),
    }
}

fn remove_waiter(db: &mut keel_engine::Db, key: &[u8], client: u64) {
    if let Some(queue) = db.blocked.get_mut(key) {
        if let Some(at) = queue.iter().position(|&id| id == client) {
            queue.remove(at);
        }
        if queue.is_empty() {
            db.blocked.remove(key);
        }
    }
}
