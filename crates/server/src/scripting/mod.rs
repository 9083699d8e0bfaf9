//! Lua scripting: EVAL, EVALSHA and their `_RO` forms, SCRIPT, as Redis
//! 7.0 runs them.
//!
//! - **The script cache** (`Scripts`) is the server's: SHA1 of the body to
//!   the body and its shebang flags. EVAL adds to it, SCRIPT FLUSH empties
//!   it.
//! - **The interpreters** are per worker thread (`engine.rs`): a Lua 5.1
//!   state, Redis's sandbox (`sandbox.lua`) and libraries (`libs.rs`),
//!   and the functions compiled from the cache's bodies. SCRIPT FLUSH
//!   bumps a generation and each thread starts a fresh state at its next
//!   script, as Redis's `scriptingReset` does.
//! - **Atomicity.** A script runs with every shard locked (the commands
//!   are ALL_SHARDS), since a script may touch keys it did not declare,
//!   so no other command runs while it does, as in Redis. Its commands
//!   run through `command::run`, as EXEC's do, and what they write is
//!   logged as one MULTI ... EXEC unit (Redis 7.0 replicates a script's
//!   effects, never the script), so the journal and replicas see it
//!   whole. Its reply waits, under `appendfsync always`, for what its
//!   commands wrote and read.
//! - **Busy scripts.** Past `busy-reply-threshold` a script is busy:
//!   other clients' commands get -BUSY, but for the few Redis allows then
//!   (SCRIPT KILL stops a script that has not written, SHUTDOWN NOSAVE
//!   stops the server without the script's writes). The script's hook
//!   serves its own worker's other connections meanwhile
//!   (`crate::worker::serve_beside_busy_script`), as Redis serves clients
//!   from inside a script, and commands on other workers that met the
//!   script's locks give up once it is busy ([`lock_or_busy`]).

mod engine;
pub mod functions;
mod libs;

pub use libs::decode_untrusted;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use crate::command::{parse, CmdError, CmdResult, Ctx};

/// Redis's `shared.slowevalerr`: an EVAL script is busy.
pub const BUSY: &str = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
/// Redis's `shared.slowscripterr`: a function is busy.
const BUSY_FUNCTION: &str = "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
/// Redis's `shared.noscripterr`.
const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

/// A script's shebang flags (`#!lua flags=...`).
pub mod flags {
    pub const NO_WRITES: u32 = 1 << 0;
    pub const ALLOW_OOM: u32 = 1 << 1;
    pub const ALLOW_STALE: u32 = 1 << 2;
    pub const NO_CLUSTER: u32 = 1 << 3;
    pub const ALLOW_CROSS_SLOT: u32 = 1 << 4;
    /// No shebang: Redis's backwards-compatible EVAL mode.
    pub const COMPAT: u32 = 1 << 31;

    pub const NAMES: &[(&str, u32)] = &[
        ("no-writes", NO_WRITES),
        ("allow-oom", ALLOW_OOM),
        ("allow-stale", ALLOW_STALE),
        ("no-cluster", NO_CLUSTER),
        ("allow-cross-slot-keys", ALLOW_CROSS_SLOT),
    ];
}

/// A cached script.
pub struct Script {
    /// Lower-case hex SHA1 of `body`.
    pub sha: String,
    pub body: Vec<u8>,
    pub flags: u32,
    /// Bytes of the shebang line, which is compiled as an empty line.
    shebang_len: usize,
}

/// The server's scripts: the cache, and the one running script's state.
#[derive(Default)]
pub struct Scripts {
    cache: Mutex<HashMap<String, Arc<Script>>>,
    /// Bumped by SCRIPT FLUSH: each thread's interpreter starts afresh.
    generation: AtomicU64,
    pub run: Arc<RunState>,
    /// FUNCTION's libraries.
    pub functions: functions::Functions,
    /// Each thread's interpreter's bytes, as of its last script.
    interpreters: Mutex<Vec<Arc<AtomicU64>>>,
    /// DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may call `noscript`
    /// commands (Redis's tests call DEBUG from scripts with it).
    pub allow_noscript: AtomicBool,
}

/// The running script, seen from other threads (SCRIPT KILL, -BUSY) and
/// from the interpreter's instruction hook. At most one script runs at a
/// time: each holds every shard.
#[derive(Default)]
pub struct RunState {
    running: AtomicBool,
    /// Commands about to run a script, or running one ([`RunState::claim`]).
    claims: AtomicUsize,
    /// Commands that found a shard held and, seeing no script, wait for
    /// it the plain way ([`lock_or_busy`]).
    deciding: AtomicUsize,
    /// Past `busy-reply-threshold`: other clients get -BUSY.
    busy: AtomicBool,
    killed: AtomicBool,
    /// Stopped half run because the server is stopping.
    abandoned: AtomicBool,
    /// The script has run a write command: it can no longer be killed.
    pub(super) wrote: AtomicBool,
    /// Sent by our master: never killed.
    from_master: AtomicBool,
    /// An EVAL script, not a function (which KILL and -BUSY name).
    is_eval: AtomicBool,
    started: Mutex<Option<Instant>>,
    threshold_ms: AtomicU64,
    /// The running function's name and its FCALL (FUNCTION STATS).
    function: Mutex<Option<(String, Vec<Vec<u8>>)>>,
    /// WATCHes that clients sent beside the script once it was busy, for
    /// its thread, which holds every shard, to install before its next
    /// command ([`RunState::install_watches`]): Redis runs such a WATCH
    /// between two of the script's commands too. `None` while no script
    /// runs.
    deferred_watches: Mutex<Option<Vec<DeferredWatch>>>,
    /// `deferred_watches` holds some: the script's commands look here
    /// first, not at the mutex.
    watches_deferred: AtomicBool,
    /// A client let go of watches while the script held their shards
    /// ([`RunState::leave_unread_watches`]): the script drops them at its
    /// end.
    unread_watches: AtomicBool,
}

/// A WATCH of one key, left for the running script to install.
struct DeferredWatch {
    db: usize,
    key: Box<[u8]>,
    flag: keel_engine::WatchFlag,
    /// When the client asked: a key expired then is stale to its watch.
    now_ms: u64,
}

impl RunState {
    pub fn busy(&self) -> bool {
        self.busy.load(Ordering::Relaxed)
    }

    /// The -BUSY answer while a script is busy.
    pub fn busy_error(&self) -> &'static str {
        if self.is_eval.load(Ordering::Relaxed) {
            BUSY
        } else {
            BUSY_FUNCTION
        }
    }

    fn start(&self, threshold_ms: u64, from_master: bool, is_eval: bool) {
        self.is_eval.store(is_eval, Ordering::Relaxed);
        *self.started.lock() = Some(Instant::now());
        self.threshold_ms.store(threshold_ms, Ordering::Relaxed);
        self.killed.store(false, Ordering::Relaxed);
        self.abandoned.store(false, Ordering::Relaxed);
        self.wrote.store(false, Ordering::Relaxed);
        self.from_master.store(from_master, Ordering::Relaxed);
        *self.deferred_watches.lock() = Some(Vec::new());
        self.running.store(true, Ordering::Release);
    }

    /// Ends the run: `dbs`, every shard, takes the watches still left.
    fn finish(&self, dbs: &mut crate::command::Dbs<'_>) {
        let deferred = self.deferred_watches.lock().take();
        install(dbs, deferred.unwrap_or_default());
        self.watches_deferred.store(false, Ordering::SeqCst);
        if self.unread_watches.swap(false, Ordering::SeqCst) {
            dbs.locked.drop_unread_watches();
        }
        *self.function.lock() = None;
        self.running.store(false, Ordering::Release);
        self.busy.store(false, Ordering::Release);
        self.killed.store(false, Ordering::Relaxed);
    }

    /// Called every 100,000 instructions: marks the script busy past the
    /// threshold, and says whether SCRIPT KILL asked it to stop.
    fn tick(&self) -> bool {
        if !self.running.load(Ordering::Relaxed) {
            return false;
        }
        let threshold = self.threshold_ms.load(Ordering::Relaxed);
        if threshold > 0 && !self.busy() {
            let elapsed = self.started.lock().map_or(0, |s| s.elapsed().as_millis() as u64);
            if elapsed >= threshold {
                tracing::warn!(
                    "Slow script detected: still in execution after {elapsed} milliseconds. You can try killing the script using the SCRIPT KILL command."
                );
                self.busy.store(true, Ordering::Release);
            }
        }
        self.killed.load(Ordering::Relaxed)
    }

    pub(super) fn killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    pub(super) fn abandon(&self) {
        self.abandoned.store(true, Ordering::Relaxed);
    }

    pub(super) fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::Relaxed)
    }

    /// SCRIPT KILL's answer (`eval`), or FUNCTION KILL's: each stops
    /// only its own kind.
    pub fn kill(&self, eval: bool) -> Result<(), CmdError> {
        if !self.running.load(Ordering::Acquire) {
            return Err(CmdError::other("NOTBUSY No scripts in execution right now."));
        }
        if self.from_master.load(Ordering::Relaxed) {
            return Err(CmdError::other(
                "UNKILLABLE The busy script was sent by a master instance in the context of replication and cannot be killed.",
            ));
        }
        if self.wrote.load(Ordering::Relaxed) {
            return Err(CmdError::other(
                "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.",
            ));
        }
        if eval != self.is_eval.load(Ordering::Relaxed) {
            return Err(CmdError::other(self.busy_error()));
        }
        self.killed.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// FUNCTION STATS's `running_script`: the function's name, its FCALL
    /// and how long it has run, while one runs.
    pub fn running_function(&self) -> Option<(String, Vec<Vec<u8>>, u64)> {
        if !self.running.load(Ordering::Acquire) || self.is_eval.load(Ordering::Relaxed) {
            return None;
        }
        let ms = self.started.lock().map_or(0, |s| s.elapsed().as_millis() as u64);
        let (name, command) = self.function.lock().clone()?;
        Some((name, command, ms))
    }

    pub fn running_eval(&self) -> bool {
        self.running.load(Ordering::Acquire) && self.is_eval.load(Ordering::Relaxed)
    }

    /// Leaves `keys` in `db` for the running script to watch for the
    /// client owning `flag`; false when no script runs any more, so the
    /// caller can take the shards itself.
    pub fn defer_watches(&self, db: usize, keys: &[&[u8]], flag: &keel_engine::WatchFlag, now_ms: u64) -> bool {
        let mut deferred = self.deferred_watches.lock();
        let Some(deferred) = deferred.as_mut() else { return false };
        deferred.extend(keys.iter().map(|key| DeferredWatch { db, key: (*key).into(), flag: flag.clone(), now_ms }));
        self.watches_deferred.store(true, Ordering::SeqCst);
        true
    }

    /// Says that a client let go of watches in shards the running script
    /// holds, for the script to drop them at its end; false when no
    /// script runs any more, so the caller can take the shards itself.
    pub fn leave_unread_watches(&self) -> bool {
        // Under the lock `finish` takes first: it cannot miss the mark.
        let deferred = self.deferred_watches.lock();
        if deferred.is_some() {
            self.unread_watches.store(true, Ordering::SeqCst);
        }
        deferred.is_some()
    }

    /// Installs the watches deferred so far in `dbs`, which hold every
    /// shard: the script calls it before each of its commands.
    pub(super) fn install_watches(&self, dbs: &mut crate::command::Dbs<'_>) {
        if !self.watches_deferred.swap(false, Ordering::SeqCst) {
            return;
        }
        let deferred = self.deferred_watches.lock().as_mut().map(std::mem::take);
        install(dbs, deferred.unwrap_or_default());
    }

    /// Taken by a command that may run a script before it locks every
    /// shard, for as long as it runs: from then on other threads that
    /// find a shard held wait in a way that notices the script turn busy
    /// ([`lock_or_busy`]). Those that already chose to wait the plain way
    /// get their shard first, from whoever holds it now: else one could
    /// end up waiting behind the script.
    pub fn claim(&self) -> Claim<'_> {
        self.claims.fetch_add(1, Ordering::SeqCst);
        while self.deciding.load(Ordering::SeqCst) > 0 {
            std::thread::yield_now();
        }
        Claim(self)
    }

    /// Whether a script may hold the shards: one is running, or claimed
    /// by another than the caller's `own` claims.
    fn may_hold_shards(&self, own: usize) -> bool {
        self.claims.load(Ordering::SeqCst) > own || self.running.load(Ordering::Acquire)
    }
}

fn install(dbs: &mut crate::command::Dbs<'_>, watches: Vec<DeferredWatch>) {
    for DeferredWatch { db, key, flag, now_ms } in watches {
        dbs.of_in(db, &key).watch(&key, &flag, now_ms);
    }
}

/// A command's [`RunState::claim`], given back when dropped.
pub struct Claim<'a>(&'a RunState);

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.0.claims.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Scripts {
    pub fn get(&self, sha: &[u8]) -> Option<Arc<Script>> {
        let sha = std::str::from_utf8(sha).ok()?.to_ascii_lowercase();
        self.cache.lock().get(&sha).cloned()
    }

    /// INFO memory's `number_of_cached_scripts` and
    /// `used_memory_scripts_eval` (the bodies and their names).
    pub fn cached(&self) -> (usize, usize) {
        let cache = self.cache.lock();
        (cache.len(), cache.values().map(|s| s.body.len() + s.sha.len()).sum())
    }

    /// The bytes of every thread's Lua interpreter (INFO
    /// `used_memory_vm_eval`): one per worker serves scripts and functions.
    pub fn interpreter_memory(&self) -> u64 {
        self.interpreters.lock().iter().map(|bytes| bytes.load(Ordering::Relaxed)).sum()
    }

    /// Where this thread's interpreter reports its size.
    fn interpreter_slot(&self) -> Arc<AtomicU64> {
        let slot = Arc::new(AtomicU64::new(0));
        self.interpreters.lock().push(Arc::clone(&slot));
        slot
    }

    /// SCRIPT FLUSH: forgets every script and every interpreter's state.
    pub fn flush(&self) {
        self.cache.lock().clear();
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The cached script of `body`, compiled in this thread's interpreter
    /// (so that a script that does not compile is refused and not
    /// cached), or Redis's error.
    pub fn load(&self, server: &crate::server::Server, body: &[u8]) -> Result<Arc<Script>, CmdError> {
        let sha = sha1_hex(body);
        if let Some(script) = self.cache.lock().get(&sha) {
            return Ok(script.clone());
        }
        let (flags, shebang_len) = shebang(body)?;
        let script = Arc::new(Script { sha: sha.clone(), body: body.to_vec(), flags, shebang_len });
        engine::compile(server, &script)?;
        self.cache.lock().entry(sha).or_insert(script.clone());
        Ok(script)
    }
}

/// Lower-case hex SHA1, as Redis names scripts.
pub fn sha1_hex(bytes: &[u8]) -> String {
    sha1_smol::Sha1::from(bytes).digest().to_string()
}

/// Redis's `evalExtractShebangFlags`: the flags of a `#!lua` first line,
/// and its length; no shebang is Redis's compatibility mode.
fn shebang(body: &[u8]) -> Result<(u32, usize), CmdError> {
    if !body.starts_with(b"#!") {
        return Ok((flags::COMPAT, 0));
    }
    let Some(end) = body.iter().position(|&b| b == b'\n') else {
        return Err(CmdError::other("ERR Invalid script shebang"));
    };
    let line = String::from_utf8_lossy(&body[..end]);
    let mut parts = line.split_ascii_whitespace();
    let engine = parts.next().unwrap_or_default();
    if engine != "#!lua" {
        return Err(CmdError::other(format!("ERR Unexpected engine in script shebang: {engine}")));
    }
    let mut found = 0;
    for part in parts {
        let Some(list) = part.strip_prefix("flags=") else {
            return Err(CmdError::other(format!("ERR Unknown lua shebang option: {part}")));
        };
        for name in list.split(',').filter(|n| !n.is_empty()) {
            let Some((_, flag)) = flags::NAMES.iter().find(|(n, _)| *n == name) else {
                return Err(CmdError::other(format!("ERR Unexpected flag in script shebang: {name}")));
            };
            found |= flag;
        }
    }
    Ok((found, end))
}

/// The flags the script that the EVAL or FCALL command `argv` runs
/// declares (its shebang's, its function's, or `COMPAT` without a
/// shebang), as Redis's `evalGetCommandFlags` and `fcallGetCommandFlags`
/// find them before the command runs; `None` for one not found (the
/// command answers for it itself).
pub fn declared_flags(server: &crate::server::Server, spec: &crate::command::CommandSpec, argv: &[&[u8]]) -> Option<u32> {
    match spec.name {
        "eval" | "eval_ro" => match server.scripts.get(sha1_hex(argv.get(1)?).as_bytes()) {
            Some(script) => Some(script.flags),
            None => shebang(argv[1]).ok().map(|(declared, _)| declared),
        },
        "evalsha" | "evalsha_ro" => Some(server.scripts.get(argv.get(1)?)?.flags),
        "fcall" | "fcall_ro" => Some(server.scripts.functions.find(argv.get(1)?)?.1.flags),
        _ => None,
    }
}

/// Redis's `scriptFlagsToCmdFlags`: the command flags of a run of a
/// script that declared `declared`, by which it is refused or not. A
/// script without a shebang keeps its command's, less `stale`: Redis
/// 7.0.15 answers it -MASTERDOWN on a stale replica (its own test
/// "allow-stale shebang flag" expects so).
pub fn command_flags(command: u32, declared: u32) -> u32 {
    use crate::command::flags::{DENYOOM, STALE, WRITE};
    if declared & flags::COMPAT != 0 {
        return command & !STALE;
    }
    let mut flags = command & !(STALE | DENYOOM | WRITE);
    if declared & (flags::ALLOW_OOM | flags::NO_WRITES) == 0 {
        flags |= DENYOOM;
    }
    if declared & flags::NO_WRITES == 0 {
        flags |= WRITE;
    }
    if declared & flags::ALLOW_STALE != 0 {
        flags |= STALE;
    }
    flags
}

/// Redis's `getCommandFlags`: the flags a command counts with before it
/// runs (queued in MULTI, for EXEC): a script's by the flags it declares,
/// one without a shebang's and any other command's its own.
pub fn effective_flags(server: &crate::server::Server, spec: &crate::command::CommandSpec, argv: &[&[u8]]) -> u32 {
    match declared_flags(server, spec, argv) {
        Some(declared) if declared & flags::COMPAT == 0 => command_flags(spec.flags, declared),
        _ => spec.flags,
    }
}

/// Whether a command counts as a write (Redis's `CMD_WRITE` in
/// `getCommandFlags`).
pub fn writes(server: &crate::server::Server, spec: &crate::command::CommandSpec, argv: &[&[u8]]) -> bool {
    effective_flags(server, spec, argv) & crate::command::flags::WRITE != 0
}

/// EVAL, EVALSHA and their `_RO` forms: `script numkeys key... arg...`.
pub fn eval(ctx: &mut Ctx<'_>, argv: &[&[u8]], by_sha: bool, read_only: bool) -> CmdResult {
    crate::command::send_to_monitors(ctx.server, ctx.client, argv, false);
    let numkeys = parse::i64_arg(argv[2])?;
    if numkeys > argv.len() as i64 - 3 {
        return Err(CmdError::other("ERR Number of keys can't be greater than number of args"));
    }
    if numkeys < 0 {
        return Err(CmdError::other("ERR Number of keys can't be negative"));
    }
    let scripts = &ctx.server.scripts;
    let script = match by_sha {
        true => scripts.get(argv[1]).ok_or_else(|| CmdError::other(NOSCRIPT))?,
        false => scripts.load(ctx.server, argv[1])?,
    };
    let mode = mode(ctx, script.flags, read_only)?;
    let split = 3 + numkeys as usize;
    engine::run(ctx, engine::Target::Script(&script), &argv[3..split], &argv[split..], mode)
}

/// FCALL and FCALL_RO: `function numkeys key... arg...`.
pub fn fcall(ctx: &mut Ctx<'_>, argv: &[&[u8]], read_only: bool) -> CmdResult {
    crate::command::send_to_monitors(ctx.server, ctx.client, argv, false);
    let (_, function) = ctx.server.scripts.functions.find(argv[1]).ok_or_else(|| CmdError::other("ERR Function not found"))?;
    let numkeys = parse::i64_arg(argv[2]).map_err(|_| CmdError::other("ERR Bad number of keys provided"))?;
    if numkeys > argv.len() as i64 - 3 {
        return Err(CmdError::other("ERR Number of keys can't be greater than number of args"));
    }
    if numkeys < 0 {
        return Err(CmdError::other("ERR Number of keys can't be negative"));
    }
    let mode = mode(ctx, function.flags, read_only)?;
    let split = 3 + numkeys as usize;
    *ctx.server.scripts.run.function.lock() = Some((function.name.clone(), argv.iter().map(|a| a.to_vec()).collect()));
    engine::run(ctx, engine::Target::Function(&function.name), &argv[3..split], &argv[split..], mode)
}

/// How a script with `script_flags` runs, called by a `_RO` command or
/// not; Redis's `scriptPrepareForRun` for a script with flags (a shebang,
/// or a function's), which say whether it writes: refuses one that may
/// write where writes are refused.
fn mode(ctx: &Ctx<'_>, script_flags: u32, read_only: bool) -> Result<engine::Mode, CmdError> {
    if script_flags & flags::COMPAT != 0 {
        return Ok(engine::Mode { read_only, allow_oom: false, allow_cross_slot: true });
    }
    let server = ctx.server;
    let obeyed = ctx.client.is_master;
    if script_flags & flags::NO_CLUSTER != 0 && server.cluster.is_some() {
        return Err(CmdError::other("ERR Can not run script on cluster, 'no-cluster' flag is set."));
    }
    if script_flags & flags::ALLOW_STALE == 0 && server.replica.is_stale() && !obeyed {
        return Err(CmdError::other(
            "MASTERDOWN Link with MASTER is down, replica-serve-stale-data is set to 'no' and 'allow-stale' flag is not set on the script.",
        ));
    }
    if script_flags & flags::NO_WRITES == 0 {
        if server.replica.refuses_writes() && !obeyed {
            return Err(CmdError::other("READONLY Can not run script with write flag on readonly replica"));
        }
        if let Some(error) = crate::command::disk_refusal(server, true) {
            if !obeyed {
                return Err(CmdError::other(format!(
                    "{error} Writable scripts are blocked. Use 'no-writes' flag for read only scripts."
                )));
            }
        }
        if read_only {
            return Err(CmdError::other("ERR Can not execute a script with write flag using *_ro command."));
        }
        if server.min_replicas_unmet.load(Ordering::Relaxed) && !server.replica.is_replica() {
            return Err(CmdError::other("NOREPLICAS Not enough good replicas to write."));
        }
    }
    if script_flags & (flags::ALLOW_OOM | flags::NO_WRITES) == 0 && ctx.client.oom && !obeyed {
        return Err(CmdError::other(
            "OOM allow-oom flag is not set on the script, can not run it when used memory > 'maxmemory'",
        ));
    }
    Ok(engine::Mode {
        read_only: read_only || script_flags & flags::NO_WRITES != 0,
        allow_oom: script_flags & flags::ALLOW_OOM != 0,
        allow_cross_slot: script_flags & flags::ALLOW_CROSS_SLOT != 0,
    })
}

/// -BUSY for a command from another connection while a script is busy,
/// unless the command is one Redis allows then.
pub fn busy_refusal(server: &crate::server::Server, spec: &crate::command::CommandSpec) -> Option<&'static str> {
    let run = &server.scripts.run;
    (run.busy() && !spec.has(crate::command::flags::ALLOW_BUSY)).then(|| run.busy_error())
}

/// Takes `shards` for a command, or for the work a worker does for a
/// client between commands (ending a wait, serving one, dropping its
/// watches): as any lock when no script may hold them, else by trying
/// until the script ends, giving up with -BUSY once it turns busy. Without this a worker that met the script's
/// locks before it turned busy would wait for its end, with its
/// connections, SCRIPT KILL's among them, unanswered. So is any command
/// on the script's own thread, where it runs beside the script
/// ([`crate::worker::beside_a_script`]) and holds them itself. (WATCH,
/// the one command Redis runs beside a busy script that needs shards,
/// then leaves its keys to the script: [`RunState::defer_watches`].) The
/// master's stream waits (as in `busy_refusal`). `claimed`: the caller
/// holds a [`RunState::claim`].
pub fn lock_or_busy(
    server: &crate::server::Server,
    (master, claimed): (bool, bool),
    shards: keel_engine::Shards,
) -> Result<keel_engine::Locked<'_>, CmdError> {
    let (run, keyspace) = (&server.scripts.run, &server.keyspace);
    if master {
        return Ok(keyspace.lock_shards(shards));
    }
    let own = usize::from(claimed);
    let mut yields = 0;
    loop {
        if let Some(locked) = keyspace.try_lock_shards(shards.clone()) {
            return Ok(locked);
        }
        run.deciding.fetch_add(1, Ordering::SeqCst);
        if !run.may_hold_shards(own) {
            // Held by a plain command: wait for it, with a claim waiting
            // for us in turn ([`RunState::claim`]).
            let locked = keyspace.lock_shards(shards);
            run.deciding.fetch_sub(1, Ordering::SeqCst);
            return Ok(locked);
        }
        run.deciding.fetch_sub(1, Ordering::SeqCst);
        if crate::worker::beside_a_script() || run.busy() {
            return Err(CmdError::other(run.busy_error()));
        }
        // A short script lets go within microseconds; a long one is
        // looked at again every millisecond.
        if yields < 100 {
            yields += 1;
            std::thread::yield_now();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}
