//! The memcached text protocol (memcached 1.6's ASCII commands), served on
//! `memcached-port` over the keyspace Redis clients see: an item is a
//! string key of database 0, so a value stored through either protocol
//! reads back through the other.
//!
//! Each request runs as the Redis command it stands for
//! ([`command::run_locked`]): `set` as SET, `add` as SET NX, `delete` as
//! DEL, `touch` as PEXPIREAT, a key of `get` as GET. It is therefore
//! journaled, held until durable under `appendfsync always`, announced to
//! keyspace subscribers, shown to MONITOR and counted in INFO
//! commandstats as that command. What memcached keeps beside a value, its
//! flags and CAS value (and the fetched and recache-token marks the meta
//! flags `h` and `R` report), lives in the database's item table
//! ([`keel_engine::ItemMeta`]); a write through a Redis command drops them.
//!
//! The meta commands (`mg`, `ms`, `md`, `ma`, `mn`) run the same way and
//! write their own reply lines, echoing the flags in the order given.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use keel_engine::{ItemMeta, Str, Value};
use keel_protocol::memcache::{McRequest, Meta, StoreKind};

use crate::client::Client;
use crate::command::{self, Access, CmdError, CmdResult, Ctx};
use crate::notify;
use crate::server::{Server, WorkerStats};

/// The memcached version Keel answers `version` with: the one whose text
/// protocol it speaks. Clients read it to know what to expect (libmemcached's
/// memcapable expects 1.6's errors only from 1.6 on), as Redis clients
/// read `redis_version`.
pub const MEMCACHED_VERSION: &str = "1.6.18";

/// memcached's REALTIME_MAXDELTA: expiry times up to 30 days are relative
/// seconds, larger ones absolute Unix times.
const RELATIVE_EXPIRY_MAX_S: i64 = 60 * 60 * 24 * 30;

/// What `stats` reports beyond the keyspace, and where CAS values come from.
pub struct State {
    /// The next CAS value. It starts at the start time in microseconds, so
    /// that values handed out before a restart are never handed out again
    /// (a client holding one must not succeed against a later version);
    /// that holds unless a server averages more than one CAS value per
    /// microsecond over its life.
    next_cas: AtomicU64,
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
    counters: [AtomicU64; Counter::COUNT],
    /// When a `flush_all <delay>` empties the cache (Unix ms; 0: none
    /// pending). A later flush_all replaces it, as memcached's
    /// `oldest_live`.
    flush_at_ms: AtomicU64,
}

/// The counters of memcached's `stats` that Keel keeps, in its order.
#[derive(Clone, Copy)]
enum Counter {
    CmdGet,
    CmdSet,
    CmdFlush,
    CmdTouch,
    GetHits,
    GetMisses,
    DeleteMisses,
    DeleteHits,
    IncrMisses,
    IncrHits,
    DecrMisses,
    DecrHits,
    CasMisses,
    CasHits,
    CasBadval,
    TouchHits,
    TouchMisses,
}

impl Counter {
    const COUNT: usize = 17;
    const NAMES: [&'static str; Counter::COUNT] = [
        "cmd_get",
        "cmd_set",
        "cmd_flush",
        "cmd_touch",
        "get_hits",
        "get_misses",
        "delete_misses",
        "delete_hits",
        "incr_misses",
        "incr_hits",
        "decr_misses",
        "decr_hits",
        "cas_misses",
        "cas_hits",
        "cas_badval",
        "touch_hits",
        "touch_misses",
    ];
}

impl State {
    pub fn new() -> State {
        State {
            next_cas: AtomicU64::new(crate::server::unix_us().max(1)),
            curr_connections: AtomicU64::new(0),
            total_connections: AtomicU64::new(0),
            counters: std::array::from_fn(|_| AtomicU64::new(0)),
            flush_at_ms: AtomicU64::new(0),
        }
    }

    fn count(&self, counter: Counter) {
        self.counters[counter as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn next_cas(&self) -> u64 {
        self.next_cas.fetch_add(1, Ordering::Relaxed)
    }
}

impl Default for State {
    fn default() -> State {
        State::new()
    }
}

/// Runs one request, appending its reply to `wbuf` (nothing for
/// `noreply`), and returns the journal position the reply waits for.
/// `scratch` takes the replies of the Redis commands requests run as.
pub fn execute(
    server: &Server,
    stats: &WorkerStats,
    client: &mut Client,
    wbuf: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
    request: &McRequest<'_>,
    now_ms: u64,
) -> u64 {
    let mut run = Run { server, stats, client, scratch, now_ms, lsn: 0 };
    let (reply, noreply) = match request {
        McRequest::Get { cas, touch, keys } => {
            run.get(wbuf, keys, *cas, *touch);
            return run.lsn;
        }
        McRequest::Store { kind, key, flags, exptime, data, cas_unique, noreply } => {
            (run.store(*kind, key, *flags, *exptime, data, *cas_unique), *noreply)
        }
        McRequest::Delete { key, noreply } => (run.delete(key), *noreply),
        McRequest::Arith { incr, key, delta, noreply } => (run.arith(*incr, key, *delta), *noreply),
        McRequest::Touch { key, exptime, noreply } => (run.touch(key, *exptime), *noreply),
        McRequest::FlushAll { delay, noreply } => (run.flush_all(*delay), *noreply),
        McRequest::Version => (Ok(format!("VERSION {MEMCACHED_VERSION}").into()), false),
        McRequest::Verbosity { noreply } => (Ok("OK".into()), *noreply),
        McRequest::Stats { args } => {
            stats_reply(server, args, wbuf);
            return 0;
        }
        McRequest::Quit => {
            client.close_after_reply = true;
            return 0;
        }
        McRequest::SetTooLarge { key, noreply, .. } => (run.refuse_set(&key[..]), *noreply),
        McRequest::MetaGet(meta) => (run.meta_get(wbuf, meta), false),
        McRequest::MetaSet { meta, data } => (run.meta_set(wbuf, meta, data), false),
        McRequest::MetaDelete(meta) => (run.meta_delete(wbuf, meta), false),
        McRequest::MetaArith(meta) => (run.meta_arith(wbuf, meta), false),
        McRequest::MetaNoop => (Ok("MN".into()), false),
        McRequest::Unsupported { name } => (
            Err(Failure::Client(format!("Keel does not support the {} command", String::from_utf8_lossy(name)))),
            false,
        ),
    };
    let lsn = run.lsn;
    match reply {
        Ok(_) if noreply => {}
        // A meta command has written its reply itself.
        Ok(line) if line.is_empty() => {}
        Ok(line) => line_to(wbuf, &line),
        // memcached answers a client error only when a reply is wanted,
        // but always says when the server failed.
        Err(Failure::Client(_)) if noreply => {}
        Err(Failure::Client(text)) => line_to(wbuf, &format!("CLIENT_ERROR {text}")),
        Err(Failure::Server(e)) => {
            let text = e.to_string();
            server.count_error(&text);
            line_to(wbuf, &format!("SERVER_ERROR {text}"));
        }
    }
    lsn
}

/// Why a request failed: memcached's CLIENT_ERROR, or a Redis error of the
/// command it ran as (MISCONF, WRONGTYPE, ...), sent as SERVER_ERROR.
enum Failure {
    Client(String),
    Server(CmdError),
}

impl From<CmdError> for Failure {
    fn from(e: CmdError) -> Failure {
        Failure::Server(e)
    }
}

type Reply = Result<std::borrow::Cow<'static, str>, Failure>;

/// `VALUE <key> <flags> <bytes>[ <cas>]\r\n<data>\r\n`.
fn write_item(wbuf: &mut Vec<u8>, key: &[u8], meta: ItemMeta, cas: Option<u64>, value: &Str) {
    let mut digits = itoa::Buffer::new();
    let bytes = value.as_bytes(&mut digits);
    let mut number = itoa::Buffer::new();
    wbuf.extend_from_slice(b"VALUE ");
    wbuf.extend_from_slice(key);
    wbuf.push(b' ');
    wbuf.extend_from_slice(number.format(meta.flags).as_bytes());
    wbuf.push(b' ');
    wbuf.extend_from_slice(number.format(bytes.len()).as_bytes());
    if let Some(cas) = cas {
        wbuf.push(b' ');
        wbuf.extend_from_slice(number.format(cas).as_bytes());
    }
    wbuf.extend_from_slice(b"\r\n");
    wbuf.extend_from_slice(bytes);
    wbuf.extend_from_slice(b"\r\n");
}

fn line_to(wbuf: &mut Vec<u8>, line: &str) {
    wbuf.extend_from_slice(line.as_bytes());
    wbuf.extend_from_slice(b"\r\n");
}

/// One request's context: what running a Redis command needs.
struct Run<'r> {
    server: &'r Server,
    stats: &'r WorkerStats,
    client: &'r mut Client,
    scratch: &'r mut Vec<u8>,
    now_ms: u64,
    /// The highest journal position a reply waits for.
    lsn: u64,
}

impl Run<'_> {
    /// Runs `op` as the Redis command `argv` (resolved by name: its spec
    /// names the keys to lock and what to log), in database 0.
    fn run_as<T>(&mut self, argv: &[&[u8]], op: impl FnOnce(&mut Ctx<'_>, &[&[u8]]) -> Result<T, CmdError>) -> Result<T, CmdError> {
        let resolved = command::table().lookup(argv[0]).expect("memcached commands run as known Redis commands");
        // The default user's permissions hold for memcached clients too.
        if self.client.user.as_ref().is_some_and(|u| !u.unrestricted()) {
            let (index, spec) = resolved;
            command::check_acl(self.server, self.client, index, spec, argv, crate::acl::Context::Toplevel)
                .map_err(|denied| CmdError::other(denied.error(spec)))?;
        }
        // In cluster mode an item of another node's slot is not served
        // here: the error names the node (memcached has no redirection).
        if self.server.cluster.is_some() {
            let exists = |key: &[u8]| crate::cluster::key_exists(self.server, key);
            if let Some(error) = crate::cluster::redirect(self.server, self.client, resolved.1, argv, None, exists) {
                return Err(CmdError::other(error));
            }
        }
        // As a Redis command: room is made first, and past `maxmemory` with
        // nothing left to evict, what may grow memory is refused.
        if crate::evict::perform(self.server) == crate::evict::Outcome::Fail && resolved.1.has(command::flags::DENYOOM) {
            return Err(CmdError::other(command::OOM));
        }
        self.scratch.clear();
        self.client.db = 0;
        let mut result = None;
        let mut lsn = 0;
        command::run_locked(
            self.server,
            self.stats,
            self.client,
            self.scratch,
            command::Resolved::of(resolved),
            argv,
            self.now_ms,
            &mut lsn,
            |ctx, argv| {
                result = Some(op(ctx, argv)?);
                Ok(())
            },
        )?;
        self.lsn = self.lsn.max(lsn);
        Ok(result.expect("the operation ran"))
    }

    fn get(&mut self, wbuf: &mut Vec<u8>, keys: &[&[u8]], with_cas: bool, touch: Option<i64>) {
        let state = &self.server.memcache;
        let pxat = touch.and_then(|t| expire_at_ms(t, self.now_ms)).map(|at| at.to_string());
        for &key in keys {
            state.count(Counter::CmdGet);
            if touch.is_some() {
                state.count(Counter::CmdTouch);
            }
            let argv: smallvec::SmallVec<[&[u8]; 4]> = match (touch, &pxat) {
                (None, _) => smallvec::smallvec![&b"GET"[..], key],
                (Some(_), Some(at)) => smallvec::smallvec![&b"GETEX"[..], key, &b"PXAT"[..], at.as_bytes()],
                (Some(_), None) => smallvec::smallvec![&b"GETEX"[..], key, &b"PERSIST"[..]],
            };
            let item_start = wbuf.len();
            // The item goes straight from the table into the output, under
            // the lock: no copy of the value.
            let found = self.run_as(&argv, |ctx, argv| {
                let now = ctx.now_ms;
                let db = ctx.dbs.of(key);
                if !matches!(db.get(key, now).map(|e| &e.value), Some(Value::Str(_))) {
                    return Ok(false);
                }
                let mut meta = db.item_meta(key);
                if (with_cas && meta.cas == 0) || !meta.fetched {
                    if with_cas && meta.cas == 0 {
                        meta.cas = ctx.server.memcache.next_cas();
                    }
                    meta.fetched = true;
                    db.set_item_meta(key, meta);
                }
                if let Some(Value::Str(s)) = db.peek(key).map(|e| &e.value) {
                    write_item(wbuf, key, meta, with_cas.then_some(meta.cas), s);
                }
                if touch.is_some() {
                    // GETEX changes the expiry; the item keeps its flags and CAS value.
                    command::run_handler(ctx, argv)?;
                    keep_meta(ctx, key, meta);
                }
                Ok(true)
            });
            match found {
                Ok(true) => {
                    state.count(Counter::GetHits);
                    if touch.is_some() {
                        state.count(Counter::TouchHits);
                    }
                }
                Ok(false) => {
                    state.count(Counter::GetMisses);
                    if touch.is_some() {
                        state.count(Counter::TouchMisses);
                    }
                }
                Err(e) => {
                    // memcached ends a multi-key get at a failure, with no END.
                    wbuf.truncate(item_start);
                    let text = e.to_string();
                    self.server.count_error(&text);
                    line_to(wbuf, &format!("SERVER_ERROR {text}"));
                    return;
                }
            }
        }
        line_to(wbuf, "END");
    }

    fn store(&mut self, kind: StoreKind, key: &[u8], flags: u32, exptime: i64, data: &[u8], cas: u64) -> Reply {
        let compare = (kind == StoreKind::Cas).then_some(cas);
        let (outcome, _) = self.store_item(kind, key, flags, exptime, data, compare, false)?;
        Ok(outcome.into())
    }

    /// set, add, replace, append, prepend and cas, and ms in its modes:
    /// the line memcached answers the classic command with, and the item's
    /// new CAS value when `hand_out_cas` (0 unless stored). `compare` is
    /// the CAS value a cas (or an ms with `C`) must match; an item whose
    /// value no client was given one for matches none. An append or
    /// prepend compares only a non-zero one, an add none.
    #[allow(clippy::too_many_arguments)]
    fn store_item(
        &mut self,
        kind: StoreKind,
        key: &[u8],
        flags: u32,
        exptime: i64,
        data: &[u8],
        compare: Option<u64>,
        hand_out_cas: bool,
    ) -> Result<(&'static str, u64), CmdError> {
        let state = &self.server.memcache;
        state.count(Counter::CmdSet);
        let pxat = expire_at_ms(exptime, self.now_ms).map(|at| at.to_string());
        let mut argv: smallvec::SmallVec<[&[u8]; 6]> = match kind {
            StoreKind::Append => smallvec::smallvec![&b"APPEND"[..], key, data],
            _ => smallvec::smallvec![&b"SET"[..], key, data],
        };
        match kind {
            StoreKind::Add => argv.push(&b"NX"[..]),
            StoreKind::Replace => argv.push(&b"XX"[..]),
            _ => {}
        }
        let sets_expiry = !matches!(kind, StoreKind::Append | StoreKind::Prepend);
        if let (true, Some(at)) = (sets_expiry, &pxat) {
            argv.extend([&b"PXAT"[..], at.as_bytes()]);
        }
        let outcome = self.run_as(&argv, |ctx, argv| {
            let now = ctx.now_ms;
            let db = ctx.dbs.of(key);
            let meta = db.item_meta(key);
            let entry = db.get(key, now);
            let exists = entry.is_some();
            let is_string = matches!(entry.map(|e| &e.value), Some(Value::Str(_)));
            let mismatch = |cas: u64| meta.cas == 0 || meta.cas != cas;
            let refused = match kind {
                StoreKind::Add => exists.then_some("NOT_STORED"),
                StoreKind::Replace | StoreKind::Append | StoreKind::Prepend if !exists => Some("NOT_STORED"),
                StoreKind::Append | StoreKind::Prepend => compare.filter(|&c| c != 0 && mismatch(c)).map(|_| "EXISTS"),
                StoreKind::Cas if !exists => Some("NOT_FOUND"),
                StoreKind::Cas => compare.is_none_or(mismatch).then_some("EXISTS"),
                StoreKind::Replace | StoreKind::Set => None,
            };
            if let Some(refused) = refused {
                return Ok((refused, 0));
            }
            if !is_string && matches!(kind, StoreKind::Append | StoreKind::Prepend) {
                return Err(CmdError::WrongType);
            }
            let flags = match kind {
                // Appending keeps the item's flags, as memcached does.
                StoreKind::Append | StoreKind::Prepend => meta.flags,
                _ => flags,
            };
            if kind == StoreKind::Prepend {
                prepend(ctx, key, data)?;
            } else {
                command::run_handler(ctx, argv)?;
            }
            let cas = if hand_out_cas { ctx.server.memcache.next_cas() } else { 0 };
            keep_meta(ctx, key, ItemMeta { flags, cas, ..ItemMeta::default() });
            Ok(("STORED", cas))
        })?;
        match (kind, outcome.0) {
            (StoreKind::Cas, "STORED") => state.count(Counter::CasHits),
            (StoreKind::Cas, "EXISTS") => state.count(Counter::CasBadval),
            (StoreKind::Cas, _) => state.count(Counter::CasMisses),
            _ => {}
        }
        Ok(outcome)
    }

    /// A `set` refused for its size deletes the key it named, as
    /// memcached unlinks it.
    fn refuse_set(&mut self, key: &[u8]) -> Reply {
        self.server.memcache.count(Counter::CmdSet);
        self.run_as(&[b"DEL", key], command::run_handler)?;
        Ok(keel_protocol::memcache::TOO_LARGE.into())
    }

    fn delete(&mut self, key: &[u8]) -> Reply {
        let deleted = self.run_as(&[b"DEL", key], |ctx, argv| {
            let now = ctx.now_ms;
            if !ctx.dbs.of(key).contains(key, now) {
                return Ok(false);
            }
            command::run_handler(ctx, argv)?;
            Ok(true)
        })?;
        let state = &self.server.memcache;
        state.count(if deleted { Counter::DeleteHits } else { Counter::DeleteMisses });
        Ok(if deleted { "DELETED" } else { "NOT_FOUND" }.into())
    }

    /// incr and decr, as memcached computes them: unsigned 64-bit, incr
    /// wrapping, decr stopping at 0, and a shorter result padded with
    /// spaces to the old length (memcached rewrites the item in place
    /// then). Logged as the SET of the value they leave.
    fn arith(&mut self, incr: bool, key: &[u8], delta: u64) -> Reply {
        let delta_text = delta.to_string();
        let name: &[u8] = if incr { b"INCRBY" } else { b"DECRBY" };
        let result = self.run_as(&[name, key, delta_text.as_bytes()], |ctx, _| {
            let now = ctx.now_ms;
            let lru = ctx.lru_s;
            let db = ctx.dbs.of(key);
            let meta = db.item_meta(key);
            let Some(entry) = db.get(key, now) else { return Ok(None) };
            let Value::Str(s) = &entry.value else { return Ok(Some(None)) };
            let old = s.as_bytes(&mut itoa::Buffer::new()).to_vec();
            let Some((digits, stored)) = apply_delta(&old, incr, delta) else { return Ok(Some(None)) };
            db.set(key, Value::Str(Str::from_bytes(&stored)), true, lru);
            ctx.wrote(1);
            keep_meta(ctx, key, rewritten(meta, digits.len() <= old.len()));
            ctx.notify(notify::STRING, if incr { "incrby" } else { "decrby" }, key);
            ctx.propagate_as(vec![vec![b"SET".to_vec(), key.to_vec(), stored, b"KEEPTTL".to_vec()]]);
            Ok(Some(Some(digits)))
        })?;
        let state = &self.server.memcache;
        let (hit, miss) = if incr { (Counter::IncrHits, Counter::IncrMisses) } else { (Counter::DecrHits, Counter::DecrMisses) };
        match result {
            None => {
                state.count(miss);
                Ok("NOT_FOUND".into())
            }
            Some(None) => Err(Failure::Client("cannot increment or decrement non-numeric value".into())),
            Some(Some(digits)) => {
                state.count(hit);
                Ok(digits.into())
            }
        }
    }

    fn touch(&mut self, key: &[u8], exptime: i64) -> Reply {
        let state = &self.server.memcache;
        state.count(Counter::CmdTouch);
        let at = expire_at_ms(exptime, self.now_ms).map(|at| at.to_string());
        let argv: smallvec::SmallVec<[&[u8]; 3]> = match &at {
            Some(at) => smallvec::smallvec![&b"PEXPIREAT"[..], key, at.as_bytes()],
            None => smallvec::smallvec![&b"PERSIST"[..], key],
        };
        let touched = self.run_as(&argv, |ctx, argv| {
            let now = ctx.now_ms;
            let db = ctx.dbs.of(key);
            if !db.contains(key, now) {
                return Ok(false);
            }
            // memcached's touch is a fetch.
            let meta = ItemMeta { fetched: true, ..db.item_meta(key) };
            command::run_handler(ctx, argv)?;
            keep_meta(ctx, key, meta);
            Ok(true)
        })?;
        state.count(if touched { Counter::TouchHits } else { Counter::TouchMisses });
        Ok(if touched { "TOUCHED" } else { "NOT_FOUND" }.into())
    }

    /// flush_all: empties the cache now, or with a delay when its time
    /// comes (memcached invalidates then every item stored before; the
    /// cron's [`flush_when_due`] runs the FLUSHDB).
    fn flush_all(&mut self, delay: i64) -> Reply {
        let state = &self.server.memcache;
        state.count(Counter::CmdFlush);
        if delay > 0 {
            let at = expire_at_ms(delay, self.now_ms).unwrap_or(self.now_ms);
            state.flush_at_ms.store(at, Ordering::Relaxed);
            return Ok("OK".into());
        }
        state.flush_at_ms.store(0, Ordering::Relaxed);
        self.run_as(&[b"FLUSHDB"], command::run_handler)?;
        Ok("OK".into())
    }
}

/// The meta commands (mg, ms, md, ma): each writes its own reply line,
/// its flags echoed in the order the request gave them, as memcached's
/// `process_m*_command` do.
impl Run<'_> {
    /// `mg`: runs as GET, or with `T` as GETEX (the journal logs the new
    /// expiry). The item's last access and fetched mark are read before
    /// this read counts as an access, which `u` skips.
    fn meta_get(&mut self, wbuf: &mut Vec<u8>, meta: &Meta<'_>) -> Reply {
        let key = &meta.key[..];
        let f = &meta.flags;
        let state = &self.server.memcache;
        // A too-long opaque token ends the reply with an error where it
        // stands: the `T` before it has taken effect, the ones after not.
        let (tokens, opaque_error) = until_long_opaque(&meta.tokens);
        let ttl = f.ttl.filter(|_| tokens.iter().any(|t| t[0] == b'T'));
        let pxat = ttl.and_then(|t| expire_at_ms(t, self.now_ms));
        let at_text = pxat.map(|at| at.to_string());
        let argv: smallvec::SmallVec<[&[u8]; 4]> = match (ttl, &at_text) {
            (None, _) => smallvec::smallvec![&b"GET"[..], key],
            (Some(_), Some(at)) => smallvec::smallvec![&b"GETEX"[..], key, &b"PXAT"[..], at.as_bytes()],
            (Some(_), None) => smallvec::smallvec![&b"GETEX"[..], key, &b"PERSIST"[..]],
        };
        let start = wbuf.len();
        self.client.no_touch = true;
        let found = self.run_as(&argv, |ctx, argv| {
            let now = ctx.now_ms;
            let access = ctx.access;
            let db = ctx.dbs.of(key);
            let mut item = db.item_meta(key);
            let Some(entry) = db.get(key, now).filter(|e| matches!(e.value, Value::Str(_))) else {
                return Ok(false);
            };
            let expire_at = entry.has_expiry().then_some(entry.expire_at_ms);
            let idle_s = match access {
                Access::Lru(now_s) => Some(now_s.saturating_sub(entry.access_s)),
                Access::Lfu(_) => None,
            };
            let Value::Str(s) = &entry.value else { return Ok(false) };
            let mut digits = itoa::Buffer::new();
            let value = s.as_bytes(&mut digits);
            let mut number = itoa::Buffer::new();
            if f.value {
                wbuf.extend_from_slice(b"VA ");
                wbuf.extend_from_slice(number.format(value.len()).as_bytes());
            } else {
                wbuf.extend_from_slice(b"HD");
            }
            // The expiry as the flags before each one see it: `t` after a
            // `T` reports the new one.
            let mut expiry = expire_at;
            let mut won = false;
            for tok in tokens {
                match tok[0] {
                    b'T' => expiry = pxat,
                    b'R' => {
                        let recache_at = f.recache.and_then(|r| expire_at_ms(r, now));
                        if let (Some(at), Some(recache_at)) = (expiry, recache_at) {
                            won |= !item.token_sent && at < recache_at;
                        }
                    }
                    b's' => meta_number(wbuf, b's', value.len() as u64),
                    b't' => meta_ttl(wbuf, expiry, now),
                    b'c' => {
                        if item.cas == 0 {
                            item.cas = ctx.server.memcache.next_cas();
                        }
                        meta_number(wbuf, b'c', item.cas);
                    }
                    b'f' => meta_number(wbuf, b'f', u64::from(item.flags)),
                    b'l' => match idle_s {
                        Some(idle) => meta_number(wbuf, b'l', u64::from(idle)),
                        None => return Err(CmdError::other(NO_LAST_ACCESS)),
                    },
                    b'h' => meta_number(wbuf, b'h', u64::from(item.fetched)),
                    b'O' => meta_opaque(wbuf, tok),
                    b'k' => meta_key(wbuf, key, f.base64),
                    _ => {}
                }
            }
            if item.token_sent {
                wbuf.extend_from_slice(b" Z");
            }
            if won && opaque_error.is_none() {
                wbuf.extend_from_slice(b" W");
                item.token_sent = true;
            }
            wbuf.extend_from_slice(b"\r\n");
            if f.value {
                wbuf.extend_from_slice(value);
                wbuf.extend_from_slice(b"\r\n");
            }
            if opaque_error.is_none() && !f.no_bump {
                if let Some(entry) = db.peek_mut(key) {
                    access.touch(entry);
                }
                item.fetched = true;
            }
            if ttl.is_some() {
                command::run_handler(ctx, argv)?;
                keep_meta(ctx, key, item);
            } else {
                db.set_item_meta(key, item);
            }
            Ok(true)
        });
        self.client.no_touch = false;
        let found = found.inspect_err(|_| wbuf.truncate(start))?;
        if let Some(error) = opaque_error {
            wbuf.truncate(start);
            return Err(error);
        }
        match (found, ttl.is_some()) {
            (true, true) => {
                state.count(Counter::CmdTouch);
                state.count(Counter::TouchHits);
            }
            (true, false) => {
                state.count(Counter::CmdGet);
                state.count(Counter::GetHits);
            }
            (false, _) => {
                state.count(Counter::CmdGet);
                state.count(Counter::GetMisses);
            }
        }
        if !found && !f.quiet {
            wbuf.extend_from_slice(b"EN");
            meta_echo(wbuf, meta);
            wbuf.extend_from_slice(b"\r\n");
        }
        Ok("".into())
    }

    /// `ms`: the store its mode names (a set, or a cas with `C`; an add,
    /// append, prepend or replace), answered HD, NS, EX or NF.
    fn meta_set(&mut self, wbuf: &mut Vec<u8>, meta: &Meta<'_>, data: &[u8]) -> Reply {
        let f = &meta.flags;
        let kind = match (f.mode, f.compare_cas) {
            (Some(b'E'), _) => StoreKind::Add,
            (Some(b'A'), _) => StoreKind::Append,
            (Some(b'P'), _) => StoreKind::Prepend,
            // A replace with a CAS value is a cas, as a set is.
            (None | Some(b'S' | b'R'), Some(_)) => StoreKind::Cas,
            (Some(b'R'), None) => StoreKind::Replace,
            _ => StoreKind::Set,
        };
        let wants_cas = meta.tokens.iter().any(|t| t[0] == b'c');
        let exptime = f.ttl.unwrap_or(0);
        let (outcome, cas) =
            self.store_item(kind, &meta.key, f.client_flags, exptime, data, f.compare_cas, wants_cas)?;
        let code: &[u8] = match outcome {
            "STORED" if f.quiet => return Ok("".into()),
            "STORED" => b"HD",
            "EXISTS" => b"EX",
            "NOT_FOUND" => b"NF",
            _ => b"NS",
        };
        wbuf.extend_from_slice(code);
        for tok in &meta.tokens {
            match tok[0] {
                b'O' => meta_opaque(wbuf, tok),
                b'k' => meta_key(wbuf, &meta.key, f.base64),
                b'c' => meta_number(wbuf, b'c', cas),
                _ => {}
            }
        }
        wbuf.extend_from_slice(b"\r\n");
        Ok("".into())
    }

    /// `md`: runs as DEL; with `C`, only an item with that CAS value.
    fn meta_delete(&mut self, wbuf: &mut Vec<u8>, meta: &Meta<'_>) -> Reply {
        let key = &meta.key[..];
        let compare = meta.flags.compare_cas;
        let outcome = self.run_as(&[b"DEL", key], |ctx, argv| {
            let now = ctx.now_ms;
            let db = ctx.dbs.of(key);
            if !db.contains(key, now) {
                return Ok(&b"NF"[..]);
            }
            let cas = db.item_meta(key).cas;
            if compare.is_some_and(|c| cas == 0 || cas != c) {
                return Ok(b"EX");
            }
            command::run_handler(ctx, argv)?;
            Ok(b"HD")
        })?;
        let state = &self.server.memcache;
        state.count(if outcome == b"HD" { Counter::DeleteHits } else { Counter::DeleteMisses });
        if outcome == b"HD" && meta.flags.quiet {
            return Ok("".into());
        }
        wbuf.extend_from_slice(outcome);
        meta_echo(wbuf, meta);
        wbuf.extend_from_slice(b"\r\n");
        Ok("".into())
    }

    /// `ma`: incr or decr as memcached computes them (see [`Run::arith`]),
    /// or with `N` on a miss the item created with the `J` value. Logged as
    /// the SET of the value left, then the expiry `T` or `N` gave it.
    fn meta_arith(&mut self, wbuf: &mut Vec<u8>, meta: &Meta<'_>) -> Reply {
        let key = &meta.key[..];
        let f = &meta.flags;
        let incr = matches!(f.mode, None | Some(b'I' | b'+'));
        let delta = f.delta.unwrap_or(1);
        let (tokens, opaque_error) = until_long_opaque(&meta.tokens);
        let wants_cas = tokens.iter().any(|t| t[0] == b'c');
        let delta_text = delta.to_string();
        let name: &[u8] = if incr { b"INCRBY" } else { b"DECRBY" };
        let start = wbuf.len();
        let outcome = self.run_as(&[name, key, delta_text.as_bytes()], |ctx, _| {
            let now = ctx.now_ms;
            let lru = ctx.lru_s;
            let db = ctx.dbs.of(key);
            let mut item = db.item_meta(key);
            let (digits, stored, created, mut expiry) = match db.get(key, now) {
                None if f.vivify.is_none() => return Ok(Some(MetaArith::NotFound)),
                None => (f.initial.to_string(), f.initial.to_string().into_bytes(), true, None),
                Some(entry) => {
                    let expiry = entry.has_expiry().then_some(entry.expire_at_ms);
                    let Value::Str(s) = &entry.value else { return Ok(None) };
                    let old = s.as_bytes(&mut itoa::Buffer::new()).to_vec();
                    // memcached judges an empty value before the CAS value.
                    if old.is_empty() {
                        return Ok(None);
                    }
                    if f.compare_cas.is_some_and(|c| c != 0 && (item.cas == 0 || item.cas != c)) {
                        return Ok(Some(MetaArith::Exists));
                    }
                    let Some((digits, stored)) = apply_delta(&old, incr, delta) else { return Ok(None) };
                    item = rewritten(item, digits.len() <= old.len());
                    (digits, stored, false, expiry)
                }
            };
            db.set(key, Value::Str(Str::from_bytes(&stored)), true, lru);
            let event = match (created, incr) {
                (true, _) => "set",
                (false, true) => "incrby",
                (false, false) => "decrby",
            };
            ctx.wrote(1);
            ctx.notify(notify::STRING, event, key);
            if wants_cas {
                item.cas = ctx.server.memcache.next_cas();
            }
            let mut head = if f.value {
                format!("VA {}", digits.len()).into_bytes()
            } else {
                b"HD".to_vec()
            };
            let mut new_expiry = None;
            for tok in tokens {
                match tok[0] {
                    b'c' => meta_number(&mut head, b'c', item.cas),
                    b't' => meta_ttl(&mut head, expiry, now),
                    b'T' => new_expiry = Some(f.ttl.and_then(|t| expire_at_ms(t, now))),
                    b'N' if created => new_expiry = Some(f.vivify.and_then(|t| expire_at_ms(t, now))),
                    b'O' => meta_opaque(&mut head, tok),
                    b'k' => meta_key(&mut head, key, f.base64),
                    _ => {}
                }
                if let Some(at) = new_expiry {
                    expiry = at;
                }
            }
            let mut log = vec![vec![b"SET".to_vec(), key.to_vec(), stored, b"KEEPTTL".to_vec()]];
            let db = ctx.dbs.of(key);
            match new_expiry {
                Some(Some(at)) => {
                    db.set_expire(key, at, now);
                    log.push(vec![b"PEXPIREAT".to_vec(), key.to_vec(), at.to_string().into_bytes()]);
                }
                Some(None) if db.persist(key) => log.push(vec![b"PERSIST".to_vec(), key.to_vec()]),
                _ => {}
            }
            ctx.propagate_as(log);
            keep_meta(ctx, key, item);
            Ok(Some(MetaArith::Done { head, digits, created }))
        });
        let outcome = outcome.inspect_err(|_| wbuf.truncate(start))?;
        // memcached refuses a value that is no number before it looks at
        // the opaque token.
        let Some(outcome) = outcome else {
            return Err(Failure::Client("cannot increment or decrement non-numeric value".into()));
        };
        if let Some(error) = opaque_error {
            return Err(error);
        }
        let state = &self.server.memcache;
        let (hit, miss) = if incr { (Counter::IncrHits, Counter::IncrMisses) } else { (Counter::DecrHits, Counter::DecrMisses) };
        let code: &[u8] = match outcome {
            MetaArith::Done { head, digits, created } => {
                if !created {
                    state.count(hit);
                }
                // memcached answers an item it created even under `q`.
                if f.quiet && !created {
                    return Ok("".into());
                }
                wbuf.extend_from_slice(&head);
                wbuf.extend_from_slice(b"\r\n");
                if f.value {
                    wbuf.extend_from_slice(digits.as_bytes());
                    wbuf.extend_from_slice(b"\r\n");
                }
                return Ok("".into());
            }
            MetaArith::NotFound => {
                state.count(miss);
                b"NF"
            }
            MetaArith::Exists => b"EX",
        };
        wbuf.extend_from_slice(code);
        meta_echo(wbuf, meta);
        wbuf.extend_from_slice(b"\r\n");
        Ok("".into())
    }
}

/// What an `ma` did to a numeric value (None: the value is not one).
enum MetaArith {
    /// The reply line before its `\r\n`, and the number.
    Done { head: Vec<u8>, digits: String, created: bool },
    NotFound,
    Exists,
}

/// The refusal of mg's `l` flag under an LFU `maxmemory-policy`, where a
/// key's access word holds its frequency rather than its last access (as
/// OBJECT IDLETIME refuses).
const NO_LAST_ACCESS: &str = "an LFU maxmemory-policy is selected, last access not tracked";

/// The flag tokens up to the first opaque token too long to echo, and the
/// error that token ends the reply with.
fn until_long_opaque<'t, 'a>(tokens: &'t [&'a [u8]]) -> (&'t [&'a [u8]], Option<Failure>) {
    match tokens.iter().position(|t| t[0] == b'O' && t.len() > keel_protocol::memcache::OPAQUE_MAX_LEN) {
        Some(i) => (&tokens[..i], Some(Failure::Client("opaque token too long".into()))),
        None => (tokens, None),
    }
}

/// The `O` and `k` flags of a reply that has no item to describe (EN, NF,
/// EX, NS).
fn meta_echo(wbuf: &mut Vec<u8>, meta: &Meta<'_>) {
    for tok in &meta.tokens {
        match tok[0] {
            b'O' => meta_opaque(wbuf, tok),
            b'k' => meta_key(wbuf, &meta.key, meta.flags.base64),
            _ => {}
        }
    }
}

fn meta_opaque(wbuf: &mut Vec<u8>, tok: &[u8]) {
    wbuf.push(b' ');
    wbuf.extend_from_slice(tok);
}

/// ` k<key>`, or for a key sent in base64 ` k<base64> b`.
fn meta_key(wbuf: &mut Vec<u8>, key: &[u8], base64: bool) {
    wbuf.extend_from_slice(b" k");
    if base64 {
        keel_protocol::memcache::base64_encode(key, wbuf);
        wbuf.extend_from_slice(b" b");
    } else {
        wbuf.extend_from_slice(key);
    }
}

fn meta_number(wbuf: &mut Vec<u8>, flag: u8, n: u64) {
    wbuf.push(b' ');
    wbuf.push(flag);
    wbuf.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// ` t<seconds left>`, rounded up, or ` t-1` for an item that does not
/// expire.
fn meta_ttl(wbuf: &mut Vec<u8>, expire_at_ms: Option<u64>, now_ms: u64) {
    match expire_at_ms {
        Some(at) => meta_number(wbuf, b't', at.saturating_sub(now_ms).div_ceil(1000)),
        None => wbuf.extend_from_slice(b" t-1"),
    }
}

/// Gives `key` its memcached flags and CAS value after the Redis command
/// that wrote it dropped them, and logs the flags after that command's
/// record, for a replay of it to give them back too. A key the write
/// removed (an expiry time already past) keeps nothing.
fn keep_meta(ctx: &mut Ctx<'_>, key: &[u8], meta: ItemMeta) {
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    if db.get(key, now).is_some() {
        db.set_item_meta(key, meta);
        ctx.log_item_flags(meta.flags);
    }
}

/// The number an incr (or decr) by `delta` leaves in an item that holds
/// `old`, and the value stored: memcached's unsigned 64-bit arithmetic,
/// incr wrapping, decr stopping at 0, a shorter result padded with spaces
/// to the old length (memcached rewrites the item in place then). None
/// when `old` is not a number memcached reads.
fn apply_delta(old: &[u8], incr: bool, delta: u64) -> Option<(String, Vec<u8>)> {
    let value = keel_protocol::memcache::item_number(old)?;
    let value = if incr { value.wrapping_add(delta) } else { value.saturating_sub(delta) };
    let digits = value.to_string();
    let mut stored = digits.clone().into_bytes();
    if stored.len() < old.len() {
        stored.resize(old.len(), b' ');
    }
    Some((digits, stored))
}

/// What an item keeps through incr or decr: its flags, and a new CAS
/// value when next asked; memcached's fetched and token marks only when
/// it rewrote the item in place (the result no longer than the value).
fn rewritten(meta: ItemMeta, in_place: bool) -> ItemMeta {
    ItemMeta { flags: meta.flags, cas: 0, fetched: in_place && meta.fetched, token_sent: in_place && meta.token_sent }
}

/// PREPEND, which Redis lacks: the new value keeps the key's TTL and is
/// logged as the SET of it.
fn prepend(ctx: &mut Ctx<'_>, key: &[u8], data: &[u8]) -> CmdResult {
    let now = ctx.now_ms;
    let lru = ctx.lru_s;
    let db = ctx.dbs.of(key);
    let Some(Value::Str(s)) = db.get(key, now).map(|e| &e.value) else { return Err(CmdError::WrongType) };
    let mut value = data.to_vec();
    value.extend_from_slice(s.as_bytes(&mut itoa::Buffer::new()));
    db.set(key, Value::Str(Str::raw(value.clone())), true, lru);
    ctx.wrote(1);
    ctx.notify(notify::STRING, "set", key);
    ctx.propagate_as(vec![vec![b"SET".to_vec(), key.to_vec(), value, b"KEEPTTL".to_vec()]]);
    Ok(())
}

/// A memcached expiry time as an absolute Unix ms for PXAT, or None for
/// none (0). Negative times are already past: 1 ms after the epoch.
fn expire_at_ms(exptime: i64, now_ms: u64) -> Option<u64> {
    match exptime {
        0 => None,
        t if t < 0 => Some(1),
        t if t <= RELATIVE_EXPIRY_MAX_S => Some(now_ms + t as u64 * 1000),
        t => Some((t as u64).saturating_mul(1000).max(1)),
    }
}

/// Runs the FLUSHDB of a `flush_all <delay>` whose time has come, as
/// any command runs (journaled, replicated). Called by a worker's cron.
pub fn flush_when_due(server: &Server, now_ms: u64) {
    let state = &server.memcache;
    let at = state.flush_at_ms.load(Ordering::Relaxed);
    if at == 0 || at > now_ms || state.flush_at_ms.compare_exchange(at, 0, Ordering::Relaxed, Ordering::Relaxed).is_err() {
        return;
    }
    let mut client = Client::new(Arc::new(crate::client::ClientInfo::detached(0)), true);
    let mut reply = Vec::new();
    command::execute(server, &server.workers[0], &mut client, &mut reply, &[b"FLUSHDB"], now_ms);
    // Refused beside a busy script: due again at the next cron, unless a
    // new `flush_all` replaced it meanwhile.
    if reply.starts_with(b"-BUSY") {
        let _ = state.flush_at_ms.compare_exchange(0, at, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// `stats`: memcached's general statistics that Keel has.
fn stats_reply(server: &Server, args: &[&[u8]], wbuf: &mut Vec<u8>) {
    let state = &server.memcache;
    match args {
        [] => {}
        [group] if *group == b"reset" => {
            state.counters.iter().for_each(|c| c.store(0, Ordering::Relaxed));
            state.total_connections.store(0, Ordering::Relaxed);
            line_to(wbuf, "RESET");
            return;
        }
        _ => {
            // memcached's answer to a statistics group it does not know;
            // Keel keeps only the general ones.
            line_to(wbuf, "ERROR");
            return;
        }
    }
    let now = crate::server::unix_ms() / 1000;
    let items: usize =
        (0..server.keyspace.shard_count()).map(|i| server.keyspace.lock_one(i).shard(i).db(0).len()).sum();
    let mut stat = |name: &str, value: String| line_to(wbuf, &format!("STAT {name} {value}"));
    stat("pid", std::process::id().to_string());
    stat("uptime", server.started.elapsed().as_secs().to_string());
    stat("time", now.to_string());
    stat("version", MEMCACHED_VERSION.to_string());
    stat("pointer_size", (8 * std::mem::size_of::<usize>()).to_string());
    stat("curr_connections", state.curr_connections.load(Ordering::Relaxed).to_string());
    stat("total_connections", state.total_connections.load(Ordering::Relaxed).to_string());
    for (name, counter) in Counter::NAMES.iter().zip(&state.counters) {
        stat(name, counter.load(Ordering::Relaxed).to_string());
    }
    stat("threads", server.thread_count.to_string());
    stat("bytes", crate::alloc::stats().allocated.to_string());
    stat("curr_items", items.to_string());
    stat("limit_maxbytes", server.maxmemory.load(Ordering::Relaxed).to_string());
    line_to(wbuf, "END");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_times_follow_memcached() {
        let now = 1_700_000_000_000;
        assert_eq!(expire_at_ms(0, now), None);
        assert_eq!(expire_at_ms(-1, now), Some(1));
        assert_eq!(expire_at_ms(10, now), Some(now + 10_000));
        assert_eq!(expire_at_ms(RELATIVE_EXPIRY_MAX_S, now), Some(now + RELATIVE_EXPIRY_MAX_S as u64 * 1000));
        assert_eq!(expire_at_ms(1_800_000_000, now), Some(1_800_000_000_000));
    }
}
