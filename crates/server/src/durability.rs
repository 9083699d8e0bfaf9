//! Durability: the bridge between command execution and `keel-journal`.
//!
//! Every write command, while it still holds the locks of the shards it
//! touched, appends its effect to the one journal and stamps the keys it
//! wrote with the journal position (LSN) of that record. A reply then
//! depends on a position: its own write's, or the stamps of the keys it
//! read. While replicas are attached, the same record goes to the
//! replication backlog at the same moment ([`append`]; `crate::replication`).
//! Under `appendfsync always` the worker holds the reply until the
//! journal is durable at that position; under `everysec` and `no` it
//! writes the journal's gathered records itself before it sends a loop
//! turn's replies (`Journal::write_through`), as Redis does, so that a
//! process crash loses nothing acknowledged. Execution itself never waits.
//!
//! What is logged is the command as Redis would propagate it: deterministic
//! on replay. Relative expiry times become absolute (`SET ... PXAT`,
//! `PEXPIREAT`), INCRBYFLOAT becomes the SET of its result, GETDEL a DEL.
//! An expiry (lazy or active) is logged as a DEL of the key, ahead of any
//! write that follows it, and nothing expires while the journal replays
//! (time stands still at 0 for the replay, as Redis does not expire while
//! loading): the replayed state does not depend on when the replay runs.
//!
//! # Compaction (AOF rewrite)
//!
//! The log only grows; a rewrite (`rewrite.rs`, and `keel_journal`'s
//! `rewrite.rs` for the files) replaces it with a base file holding the
//! dataset at an instant S plus the incr file of what came after S. S is
//! taken with every shard locked, and records are appended under the shard
//! locks of the keys they touch, so S falls between two records: the
//! switch to the new incr file needs no other coordination with this
//! module. The writer syncs the old file completely before its first byte
//! goes to the new one, and acknowledgements keep following the durable
//! LSN across the switch (LSNs go on increasing; the files are segments of
//! the one stream).
//!
//! When rewrites happen by themselves is a policy (`rewrite.rs`): Redis's
//! `auto-aof-rewrite-percentage`/`-min-size`, or Keel's greedy one, which
//! puts a rewrite off until the AOF's estimated replay time
//! (`keel-aof-max-recovery-seconds`) or its disk footprint with the base a
//! rewrite would add (`keel-aof-max-disk-bytes`) would otherwise pass its
//! bound, and starts it at 90% of that bound. Rewrites cost CPU, disk
//! bandwidth and snapshot memory while they run; the greedy policy spends
//! them only when the recovery or disk budget asks for it.
//!
//! # Switching at run time
//!
//! [`Aof`] holds the journal and Redis's `aof_state`; [`apply_config`] is
//! CONFIG SET's hook. `appendonly no` stops logging (in-flight commands may
//! still append: harmless, the files are no longer what start-up loads
//! once the next `yes` rewrites them) and releases replies held for the
//! log. `appendonly yes` opens the journal if it never was and asks for a
//! rewrite; logging starts at that rewrite's S, so the base and the
//! records after it meet exactly. BGREWRITEAOF with `appendonly no` opens
//! it too and writes a base, without logging after it, as Redis's.
//! `appendfsync` changes the journal's policy and whether replies are
//! held.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use keel_engine::{Entry, Value};
use keel_journal::{BaseFormat, FsyncPolicy, Journal, JournalConfig, JournalError, Lsn, Replay, Replayed};

use crate::client::{Client, ClientInfo, Message};
use crate::command::{self, CommandSpec, Ctx};
use crate::config::{AppendFsync, Config};
use crate::loading::Pacer;
use crate::server::Server;
use crate::snapshot::Inserters;

/// A key or shard whose journal position a logged write must stamp.
pub enum Stamp {
    Key { db: usize, key: Vec<u8> },
    /// The write touched the locked shards as a whole.
    Shards,
}

/// Opens the append-only directory of `config`, if `appendonly` is on.
pub fn open(config: &Config) -> Result<Option<(Journal, Replay)>, JournalError> {
    if !config.appendonly {
        return Ok(None);
    }
    open_dir(config, false).map(Some)
}

/// Opens the append-only directory of `config`, whatever `appendonly`
/// says; `idle` while it is off (nothing is created or listed then).
fn open_dir(config: &Config, idle: bool) -> Result<(Journal, Replay), JournalError> {
    let fsync = fsync_policy(config.appendfsync);
    let journal_config = JournalConfig {
        dir: config.dir.join(&config.appenddirname),
        filename: config.appendfilename.clone(),
        fsync,
        load_truncated: config.aof_load_truncated,
        base_format: base_format(config),
        timestamps: config.aof_timestamp_enabled,
        space_ahead: space_ahead(config),
        sync_gap: Duration::from_micros(config.keel_aof_sync_gap_us),
        writer_batch_class: config.keel_aof_writer_batch_class,
        idle,
        keep_history: config.aof_disable_auto_gc,
    };
    Journal::open(journal_config)
}

/// `keel-aof-space-ahead` under `appendfsync always`, within a 32nd of
/// `keel-aof-max-disk-bytes` (the space counts against the directory's
/// bound); none under `everysec` and `no`. There the sync is off the
/// replies' path, once a second at most, so the space saves nothing, and
/// its upkeep costs: the helper fdatasyncs each piece it writes, flushing
/// the log's unsynced pages with it, and at high write rates chases the
/// log's end (on W2 with 6000-byte values, about a hundred such syncs a
/// second against the journal's one: BENCHMARKS.md).
fn space_ahead(config: &Config) -> u64 {
    if config.appendfsync != AppendFsync::Always {
        return 0;
    }
    match config.keel_aof_max_disk_bytes {
        0 => config.keel_aof_space_ahead,
        bound => config.keel_aof_space_ahead.min(bound / 32),
    }
}

/// The base format `aof-use-rdb-preamble` asks for.
pub fn base_format(config: &Config) -> BaseFormat {
    if config.aof_use_rdb_preamble {
        BaseFormat::Rdb
    } else {
        BaseFormat::Aof
    }
}

/// Replays the journal into the keyspace: an RDB base's keys are inserted
/// as they are, by [`Inserters`] on every
/// core, and commands executed as a client would run them. Returns how
/// many keys and commands it replayed, and tells the rewrite policy how
/// fast each part went (their rates per byte differ).
pub fn replay(server: &Server, replay: Replay) -> Result<u64, String> {
    std::thread::scope(|scope| replay_in(server, replay, scope))
}

fn replay_in<'scope, 'env>(server: &'env Server, mut replay: Replay, scope: &'scope std::thread::Scope<'scope, 'env>) -> Result<u64, String> {
    let info = Arc::new(ClientInfo::detached(0));
    let mut client = Client::new(info, true);
    client.is_loader = true;
    let stats = &server.workers[0];
    let mut pacer = Pacer::new(server, replay.total_bytes());
    let started = Instant::now();
    // The RDB base comes first: its part ends at the first command, when
    // its inserters are done.
    let mut inserters: Option<Inserters<'scope>> = None;
    let mut rdb_took = None;
    let mut reply = Vec::new();
    let mut count = 0u64;
    // The command replayed last: `#item-flags` annotations are about its key.
    let mut last: Option<(usize, Vec<Vec<u8>>)> = None;
    while let Some(item) = replay.next() {
        let item = item.map_err(|e| e.to_string())?;
        let databases = server.keyspace.databases();
        let (db, argv) = match item {
            Replayed::Command { db, argv } => (db, argv),
            Replayed::ItemFlags { flags } => {
                if let Some((db, argv)) = &last {
                    let shard = server.keyspace.shard_of_key(argv.get(1).map_or(&[][..], Vec::as_slice));
                    restore_item_flags(&mut server.keyspace.lock_one(shard), server, *db, argv, flags);
                }
                continue;
            }
            Replayed::Resize { db, keys, with_expiry } if db < databases => {
                let per_shard = |n| crate::snapshot::keys_per_shard(server, n, replay.total_bytes());
                base_inserters(&mut inserters, scope, server)?.reserve(db, per_shard(keys), per_shard(with_expiry));
                continue;
            }
            Replayed::Resize { .. } => continue,
            Replayed::Key(entry) if entry.db as usize >= databases => {
                return Err(format!("AOF base: key in database {} but databases is {databases}", entry.db));
            }
            Replayed::Key(entry) => {
                count += 1;
                pacer.key(|| replay.loaded_bytes()).map_err(|e| e.to_string())?;
                // A closed channel: `finish` below names the inserter's error.
                if base_inserters(&mut inserters, scope, server)?.send(entry).is_err() {
                    break;
                }
                continue;
            }
        };
        if let Some(base) = inserters.take() {
            base.finish()?;
        }
        count += 1;
        pacer.command(|| replay.loaded_bytes()).map_err(|e| e.to_string())?;
        rdb_took.get_or_insert_with(|| started.elapsed());
        if command::Names::Logged.lookup(&argv[0]).is_none() {
            return Err(unknown_command(&replay, &argv[0]));
        }
        client.db = db;
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        reply.clear();
        // Time stands still while loading (as in Redis): nothing expires, so
        // the replay's result does not depend on when it runs; expiries that
        // happened are in the journal as DELs.
        command::execute(server, stats, &mut client, &mut reply, &args, 0);
        if reply.first() == Some(&b'-') {
            crate::process::propagation_error(server, crate::process::Propagated::Journal, &argv[0], &reply);
        }
        last = Some((db, argv));
    }
    if let Some(base) = inserters.take() {
        base.finish()?;
    }
    pacer.done(replay.total_bytes());
    let took = started.elapsed();
    let rdb_took = rdb_took.unwrap_or(took);
    let rdb_bytes = replay.rdb_bytes();
    server.rewrite.note_replay(
        (replay.total_bytes().saturating_sub(rdb_bytes), took.saturating_sub(rdb_took)),
        (rdb_bytes, rdb_took),
    );
    Ok(count)
}

/// DEBUG LOADAOF, with every shard held (DEBUG takes them all), as
/// Redis's: what was logged is written and synced, the dataset emptied and
/// loaded again from the files the manifest on disk lists (with
/// `appendonly no` too). Meanwhile `loading` is set, so nothing replayed
/// is logged again (and other clients wait, then are answered -LOADING:
/// [`crate::loading`]). An error before the dataset is emptied is the
/// reply; one while loading stops the process, as in Redis: what is in
/// memory is then no dataset at all, and the files are intact.
pub fn debug_loadaof(ctx: &mut Ctx<'_>) -> Result<(), String> {
    let server = ctx.server;
    if server.loading.load(Ordering::Relaxed) {
        return Err(command::LOADING_ERROR.into());
    }
    if server.rewrite.in_progress() {
        return Err("ERR Background append only file rewriting in progress: DEBUG LOADAOF after it ends".into());
    }
    if let Some(journal) = server.aof.enabled() {
        journal.flush_and_sync().map_err(|e| format!("ERR {e}"))?;
    }
    let replay = {
        let config = server.config.read();
        Replay::listed(&config.dir.join(&config.appenddirname), &config.appendfilename)
            .map_err(|e| format!("ERR {e}"))?
    };
    for shard in ctx.dbs.shards() {
        for db in shard.dbs_mut().iter_mut() {
            drop(db.take_all());
        }
    }
    if server.tracking.active() {
        crate::tracking::flushed(server, ctx.dbs.shards());
    }
    // The log's function libraries replace ours, as Redis's emptyData
    // takes them with the keys.
    server.scripts.functions.flush();
    server.begin_load();
    keel_engine::db::loading(true);
    let loaded = replay_held(ctx, replay);
    keel_engine::db::loading(false);
    server.end_load();
    match loaded {
        Ok(()) => {}
        // The shutdown that stopped it goes on, with nothing saved.
        Err(e) if server.shutdown.load(Ordering::Relaxed) => return Err(format!("ERR {e}")),
        Err(e) => {
            tracing::error!("DEBUG LOADAOF: {e}");
            std::process::exit(1);
        }
    }
    // What the replay counted is already on disk (Redis zeroes it too).
    server.dirty.store(0, Ordering::Relaxed);
    tracing::warn!("Append Only File loaded by DEBUG LOADAOF");
    Ok(())
}

/// Replays into the shards `ctx` holds, through the DEBUG client: its
/// database and its replies are put back afterwards. MULTI and EXEC are
/// left out (EXEC would lock the shards again): the whole load is one
/// step for every other client anyway.
fn replay_held(ctx: &mut Ctx<'_>, mut replay: Replay) -> Result<(), String> {
    let server = ctx.server;
    let limits = server.config.read().encoding;
    let lru_s = server.lru_s();
    let (selected, client_db, now_ms) = (ctx.dbs.selected, ctx.client.db, ctx.now_ms);
    let reply_len = ctx.out.buf.len();
    // Time stands still while loading (see `replay_in`).
    ctx.now_ms = 0;
    // The caller replays as the loading client does at start: what the
    // journal holds was rewritten to run as it did (XADD's exact trim
    // with its LIMIT, for one).
    ctx.client.is_loader = true;
    let mut pacer = Pacer::new(server, replay.total_bytes());
    let mut result = Ok(());
    let mut last: Option<(usize, Vec<Vec<u8>>)> = None;
    while let Some(item) = replay.next() {
        let step = match item.map_err(|e| e.to_string()) {
            Ok(Replayed::ItemFlags { flags }) => {
                if let Some((db, argv)) = &last {
                    restore_item_flags(&mut ctx.dbs.locked, server, *db, argv, flags);
                }
                Ok(())
            }
            Ok(Replayed::Key(entry)) => pacer
                .key(|| replay.loaded_bytes())
                .map_err(|e| e.to_string())
                .and_then(|()| crate::snapshot::insert_held(server, &mut ctx.dbs.locked, entry, &limits, lru_s, false)),
            Ok(Replayed::Resize { .. }) => Ok(()),
            Ok(Replayed::Command { db, argv }) => {
                let ran = pacer
                    .command(|| replay.loaded_bytes())
                    .map_err(|e| e.to_string())
                    .and_then(|()| run_replayed(ctx, &replay, db, &argv));
                last = Some((db, argv));
                ran
            }
            Err(e) => Err(e),
        };
        ctx.out.buf.truncate(reply_len);
        if let Err(e) = step {
            result = Err(e);
            break;
        }
    }
    (ctx.dbs.selected, ctx.client.db, ctx.now_ms) = (selected, client_db, now_ms);
    ctx.client.is_loader = false;
    result
}

/// Gives the key the replayed command `argv` wrote (its first argument)
/// its memcached flags back.
fn restore_item_flags(locked: &mut keel_engine::Locked<'_>, server: &Server, db: usize, argv: &[Vec<u8>], flags: u32) {
    let Some(key) = argv.get(1) else { return };
    let shard = locked.shard_for(&server.keyspace, key);
    shard.db(db).set_item_meta(key, keel_engine::ItemMeta { flags, ..Default::default() });
}

fn run_replayed(ctx: &mut Ctx<'_>, replay: &Replay, db: usize, argv: &[Vec<u8>]) -> Result<(), String> {
    let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    if command::parse::eq(args[0], "multi") || command::parse::eq(args[0], "exec") {
        return Ok(());
    }
    if command::Names::Logged.lookup(args[0]).is_none() {
        return Err(unknown_command(replay, args[0]));
    }
    (ctx.dbs.selected, ctx.client.db) = (db, db);
    // A failing command is skipped, as at start.
    let ran = command::resolve_by(command::Names::Logged, &args).and_then(|(index, spec)| command::run(ctx, index, spec, &args));
    if let Err(e) = ran {
        crate::process::propagation_error(ctx.server, crate::process::Propagated::Journal, args[0], e.to_string().as_bytes());
    }
    ctx.durability = Default::default();
    Ok(())
}

/// A command Keel cannot run, in a file being loaded: loading without it
/// would drop its effect, so loading stops, as Redis's does.
fn unknown_command(replay: &Replay, name: &[u8]) -> String {
    let file = replay.current_file().map(|p| p.display().to_string()).unwrap_or_default();
    format!("Unknown command '{}' reading the append only file {file}", String::from_utf8_lossy(name))
}


/// The inserters of an RDB base, started at its first key or hint.
fn base_inserters<'a, 'scope, 'env>(
    slot: &'a mut Option<Inserters<'scope>>,
    scope: &'scope std::thread::Scope<'scope, 'env>,
    server: &'env Server,
) -> Result<&'a mut Inserters<'scope>, String> {
    match slot {
        Some(base) => Ok(base),
        None => Ok(slot.insert(Inserters::start(scope, server, true)?)),
    }
}

/// Journals as DEL the keys the running command found expired (and so
/// deleted), ahead of the command's own record: a later write to such a
/// key must replay onto an absent key. Without a journal or replicas,
/// forgets them.
pub fn log_expired(ctx: &mut Ctx<'_>) {
    ctx.take_expired();
    let expired = std::mem::take(&mut ctx.durability.expired);
    if !changes_logged(ctx.server) || ctx.server.loading.load(Ordering::Relaxed) {
        return;
    }
    for (db, key) in expired {
        let del = vec![b"DEL".to_vec(), key.to_vec()];
        if ctx.durability.in_transaction {
            ctx.durability.log.push((db, del));
        } else {
            append(ctx.server, db, &del, None);
        }
    }
}

/// Whether changes go anywhere: to the journal, or to replicas.
pub fn changes_logged(server: &Server) -> bool {
    server.journal().is_some() || server.repl.feeding()
}

/// Appends one record (with the memcached flags of the key it wrote, if
/// any) to the journal while it logs, and to the replication stream while
/// replicas read it. Returns the journal position (0: not journaled) and
/// the stream's end after it (0: not fed).
pub fn append<A: AsRef<[u8]>>(server: &Server, db: usize, argv: &[A], item_flags: Option<u32>) -> (Lsn, u64) {
    let lsn = match (server.journal(), item_flags) {
        (Some(journal), Some(flags)) => journal.append_with_item_flags(db, argv, flags),
        (Some(journal), None) => journal.append(db, argv),
        (None, _) => 0,
    };
    let fed = match server.repl.feeding() {
        true => server.repl.feed(db, argv, replicas_wait_for(server, lsn)),
        false => 0,
    };
    (lsn, fed)
}

/// The journal position replicas must wait for before they are sent a
/// record at `lsn`: the record itself under `appendfsync always`, where
/// a reply waits for it too; nothing otherwise.
pub fn replicas_wait_for(server: &Server, lsn: Lsn) -> Lsn {
    if server.gate_replies() {
        lsn
    } else {
        0
    }
}

/// Records the effect of a command that changed the keyspace: the commands
/// to log (in `ctx.log`) and what to stamp (in `ctx.stamps`). Runs under
/// the command's locks, after its handler, so it sees the result.
///
/// Outside a transaction the common case costs no copy besides the
/// journal's own: a command logged as it came is appended straight from
/// its arguments and its keys are stamped at once.
pub fn record(ctx: &mut Ctx<'_>, spec: &CommandSpec, argv: &[&[u8]]) {
    let db = ctx.dbs.selected;
    let whole_shards = spec.has(command::flags::ALL_SHARDS) || matches!(spec.name, "move" | "copy" | "swapdb");
    let replaced = ctx.durability.replaced.take();
    let replicas_only = std::mem::take(&mut ctx.durability.replicas_only);
    if replaced.is_none() && !ctx.durability.in_transaction && logged_as_is(spec, argv) {
        if !changes_logged(ctx.server) {
            return;
        }
        if replicas_only {
            if ctx.server.repl.feeding() {
                ctx.client.woff = ctx.server.repl.feed(db, argv, 0);
            }
            return;
        }
        let flags = ctx.durability.item_flags.take();
        let (lsn, fed) = append(ctx.server, db, argv, flags);
        if fed > 0 {
            ctx.client.woff = fed;
        }
        ctx.durability.write_lsn = lsn;
        if whole_shards {
            ctx.dbs.shards().for_each(|s| s.floor_lsn = lsn);
        }
        for i in spec.key_indexes(argv) {
            stamp_key(ctx, db, argv[i], lsn);
        }
        return;
    }
    if whole_shards {
        ctx.durability.stamps.push(Stamp::Shards);
    }
    for i in spec.key_indexes(argv) {
        ctx.durability.stamps.push(Stamp::Key { db, key: argv[i].to_vec() });
    }
    let propagated = match replaced {
        Some(commands) => commands,
        None => propagate(ctx, spec, argv),
    };
    let first = ctx.durability.log.len();
    ctx.durability.log.extend(propagated.into_iter().map(|a| (db, a)));
    if replicas_only {
        let end = ctx.durability.log.len();
        ctx.durability.log_replicas_only.extend(first..end);
    }
}

/// Whether `propagate` would log `argv` unchanged.
fn logged_as_is(spec: &CommandSpec, argv: &[&[u8]]) -> bool {
    match spec.name {
        // A plain SET key value has nothing relative to rewrite.
        "set" => argv.len() == 3,
        "setex" | "psetex" | "incrbyfloat" | "getex" | "expire" | "pexpire" | "expireat" | "pexpireat" | "getdel"
        | "getset" | "flushall" | "flushdb" => false,
        _ => true,
    }
}

fn stamp_key(ctx: &mut Ctx<'_>, db: usize, key: &[u8], lsn: Lsn) {
    let shard = ctx.dbs.locked.shard_for(ctx.dbs.keyspace, key);
    match shard.db(db).peek_mut(key) {
        Some(entry) => entry.set_lsn(lsn),
        None => shard.removed_lsn = lsn,
    }
}

fn owned(argv: &[&[u8]]) -> Vec<Vec<u8>> {
    argv.iter().map(|a| a.to_vec()).collect()
}

/// The command(s) to log for `argv`, computed from the state it left.
fn propagate(ctx: &mut Ctx<'_>, spec: &CommandSpec, argv: &[&[u8]]) -> Vec<Vec<Vec<u8>>> {
    let key = || argv.get(1).copied().unwrap_or_default();
    match spec.name {
        // As Redis's setCommand: a SET without an expiry goes as it came
        // but for GET (KEEPTTL, NX and XX kept), one with it as the state
        // it left (`SET k v PXAT ms`).
        "set" if !argv.iter().skip(3).any(|a| [&b"ex"[..], b"px", b"exat", b"pxat"].iter().any(|o| a.eq_ignore_ascii_case(o))) => {
            let (head, options) = argv.split_at(3.min(argv.len()));
            vec![head.iter().chain(options.iter().filter(|o| !o.eq_ignore_ascii_case(b"get"))).map(|a| a.to_vec()).collect()]
        }
        // Relative or computed results: log the key's resulting state.
        "set" | "setex" | "psetex" => vec![state_of(ctx, key(), true)],
        // Redis's: the value it computed, with the TTL kept.
        "incrbyfloat" => match state_of(ctx, key(), true) {
            mut set if set[0] == b"SET" => {
                set.truncate(3);
                set.push(b"KEEPTTL".to_vec());
                vec![set]
            }
            gone => vec![gone],
        },
        "getex" | "expire" | "pexpire" | "expireat" | "pexpireat" => vec![state_of(ctx, key(), false)],
        "getdel" => vec![vec![b"DEL".to_vec(), key().to_vec()]],
        "getset" => vec![vec![b"SET".to_vec(), key().to_vec(), argv[2].to_vec()]],
        "flushall" | "flushdb" => vec![vec![argv[0].to_vec()]],
        _ => vec![owned(argv)],
    }
}

/// The command that recreates `key`'s current state: its value (when
/// `with_value`) and TTL, or its deletion.
fn state_of(ctx: &mut Ctx<'_>, key: &[u8], with_value: bool) -> Vec<Vec<u8>> {
    let now = ctx.now_ms;
    let entry: Option<&Entry> = ctx.dbs.of(key).get(key, now);
    let Some(entry) = entry else {
        return vec![b"DEL".to_vec(), key.to_vec()];
    };
    let ttl = entry.has_expiry().then(|| entry.expire_at_ms.to_string().into_bytes());
    match (&entry.value, with_value) {
        (Value::Str(s), true) => {
            let mut out = vec![b"SET".to_vec(), key.to_vec(), s.as_bytes(&mut itoa::Buffer::new()).to_vec()];
            if let Some(t) = ttl {
                out.push(b"PXAT".to_vec());
                out.push(t);
            }
            out
        }
        _ => match ttl {
            Some(t) => vec![b"PEXPIREAT".to_vec(), key.to_vec(), t],
            None => vec![b"PERSIST".to_vec(), key.to_vec()],
        },
    }
}

/// After a top-level command: appends what it logged (one record, or a
/// MULTI/EXEC unit for a transaction), stamps what it wrote, and returns
/// the journal position its reply depends on (0: none).
pub fn commit(ctx: &mut Ctx<'_>) -> Lsn {
    let server = ctx.server;
    if !changes_logged(server) {
        return 0;
    }
    let state = &mut ctx.durability;
    if state.log.is_empty() {
        return state.read_lsn.max(state.write_lsn);
    }
    let flags = state.item_flags.take();
    let lsn = match state.log_replicas_only.is_empty() {
        true => journal_records(server, &state.log, flags),
        false => {
            let only = std::mem::take(&mut state.log_replicas_only);
            let journaled: Vec<_> = state.log.iter().enumerate().filter(|(i, _)| !only.contains(i)).map(|(_, r)| r.clone()).collect();
            journal_records(server, &journaled, flags)
        }
    };
    let fed = match (server.repl.feeding(), state.log.as_slice()) {
        (false, _) => 0,
        (true, [(db, argv)]) => server.repl.feed(*db, argv, replicas_wait_for(server, lsn)),
        (true, records) => server.repl.feed_transaction(records, replicas_wait_for(server, lsn)),
    };
    if fed > 0 {
        ctx.client.woff = fed;
    }
    let state = &mut ctx.durability;
    state.log.clear();
    for stamp in std::mem::take(&mut state.stamps) {
        match stamp {
            Stamp::Shards => ctx.dbs.shards().for_each(|s| s.floor_lsn = lsn),
            Stamp::Key { db, key } => stamp_key(ctx, db, &key, lsn),
        }
    }
    lsn.max(ctx.durability.read_lsn).max(ctx.durability.write_lsn)
}

/// Appends `records` to the journal while it logs: one record as it is
/// (with the memcached flags of the key it wrote), several as one
/// MULTI ... EXEC unit. Returns the journal position (0: not journaled).
fn journal_records(server: &Server, records: &[(usize, Vec<Vec<u8>>)], item_flags: Option<u32>) -> Lsn {
    let Some(journal) = server.journal() else { return 0 };
    match (records, item_flags) {
        ([], _) => 0,
        ([(db, argv)], Some(flags)) => journal.append_with_item_flags(*db, argv, flags),
        ([(db, argv)], None) => journal.append(*db, argv),
        (records, _) => journal.append_transaction(records),
    }
}

/// Notes the journal position the keys a command read depend on, when
/// replies are gated on durability and the journal has undurable records.
pub fn note_reads(ctx: &mut Ctx<'_>, spec: &CommandSpec, argv: &[&[u8]]) {
    let Some(journal) = ctx.server.journal() else { return };
    if !ctx.server.gate_replies() || journal.durable_lsn() >= journal.appended_lsn() {
        return;
    }
    // A script holds every shard, but the commands it ran noted what they
    // read themselves. WATCH's +OK tells nothing of its keys (and beside
    // a busy script it holds no shard).
    if spec.group == "scripting" || spec.has(command::flags::OWN_LOCKS) {
        return;
    }
    let db = ctx.dbs.selected;
    let appended = journal.appended_lsn();
    let mut lsn = 0;
    if spec.has(command::flags::ALL_SHARDS) {
        if !(spec.reads_data)(argv) {
            return;
        }
        lsn = ctx.dbs.shards().map(|s| s.floor_lsn.max(s.removed_lsn)).max().unwrap_or(0);
        // Conservative for whole-keyspace reads: any write in them counts.
        lsn = lsn.max(appended);
    } else {
        for i in spec.key_indexes(argv) {
            let shard = ctx.dbs.locked.shard_for(ctx.dbs.keyspace, argv[i]);
            let found = shard.dbs()[db].peek(argv[i]).map(|e| e.lsn(appended));
            lsn = lsn.max(shard.floor_lsn).max(found.unwrap_or(shard.removed_lsn));
        }
    }
    ctx.durability.read_lsn = ctx.durability.read_lsn.max(lsn);
}

/// Refuses writes while the journal cannot write (Redis's MISCONF). The
/// master's stream is never refused: a replica whose disk failed (a
/// write or sync of its log, or a BGSAVE under `stop-writes-on-bgsave-error`)
/// stops, or applies it with a warning (`replica-ignore-disk-write-errors`);
/// one whose log only lags behind its disk applies it, the log catching up.
pub fn check_writable(server: &Server, spec: &CommandSpec, from_master: bool) -> Result<(), command::CmdError> {
    if !spec.has(command::flags::WRITE) || server.loading.load(Ordering::Relaxed) {
        return Ok(());
    }
    if from_master {
        let log_failed = server.journal().is_some_and(|j| matches!(j.health(), Err(JournalError::Poisoned(_))));
        if log_failed || crate::snapshot::refuses_writes(server) {
            apply_despite_the_disk(server);
        }
        return Ok(());
    }
    let Some(journal) = server.journal() else { return Ok(()) };
    journal.health().map_err(|e| command::CmdError::other(misconf(&e)))
}

/// Redis's `-MISCONF` for a journal that cannot write, with Keel's reason.
pub fn misconf(error: &JournalError) -> String {
    format!("MISCONF Errors writing to the AOF file: {error}.")
}

/// Redis's processCommand for a write of its master that it cannot
/// persist: a replica whose copy on disk would silently fall behind its
/// master stops, unless told to go on, then warning every 10 s.
fn apply_despite_the_disk(server: &Server) {
    if !server.config.read().replica_ignore_disk_write_errors {
        crate::process::server_panic("Replica was unable to write command to disk.");
    }
    static WARNED_MS: AtomicU64 = AtomicU64::new(0);
    let (now, last) = (crate::server::unix_ms(), WARNED_MS.load(Ordering::Relaxed));
    if now > last + 10_000 && WARNED_MS.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        tracing::warn!("Replica is applying a command even though it is unable to write to disk.");
    }
}

/// Per-command durability state carried in `Ctx`.
#[derive(Default)]
pub struct Pending {
    /// Records gathered for one append (a transaction's, or rewritten ones).
    pub log: Vec<(usize, Vec<Vec<u8>>)>,
    pub stamps: Vec<Stamp>,
    /// What the reply depends on: keys read, and a record already appended.
    pub read_lsn: Lsn,
    pub write_lsn: Lsn,
    /// Inside EXEC: everything goes into one MULTI/EXEC unit at the end.
    pub in_transaction: bool,
    /// What the running command logs instead of itself (`Ctx::propagate_as`).
    pub replaced: Option<Vec<Vec<Vec<u8>>>>,
    /// Logged although it changed nothing, as Redis's
    /// `forceCommandPropagation` (FLUSHDB and FLUSHALL of empty databases).
    pub forced: bool,
    /// Keys the command found expired, announced (`Ctx::take_expired`)
    /// and not yet journaled.
    pub expired: Vec<(usize, keel_engine::Key)>,
    /// The memcached flags of the key the command wrote, logged after its
    /// record (`Journal::append_with_item_flags`); None for none.
    pub item_flags: Option<u32>,
    /// The running command goes to replicas and not to the journal:
    /// PUBLISH, which Redis propagates to replicas only.
    pub replicas_only: bool,
    /// Which of `log`'s records go to replicas only.
    pub log_replicas_only: Vec<usize>,
}

/// Redis's `aof_state`, and whether writes are logged.
///
/// * `Off`: no logging (`appendonly no`). The journal, if it was ever
///   opened, stays open and idle.
/// * `WaitRewrite`: `CONFIG SET appendonly yes` was accepted; the rewrite
///   that creates the base from the current data is scheduled or running.
///   Logging starts at that rewrite's instant S (under every shard lock,
///   so the base and the records after S meet exactly), into an incr file
///   that the manifest lists only with the new base.
/// * `On`: logging (from start-up with `appendonly yes`, or once that
///   rewrite committed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AofState {
    Off,
    WaitRewrite,
    On,
}

/// The journal as `appendonly` and `appendfsync` have it at run time.
pub struct Aof {
    /// Opened at start (`appendonly yes`) or by the first `CONFIG SET
    /// appendonly yes`, and kept: the directory and file name are fixed.
    journal: OnceLock<Arc<Journal>>,
    state: AtomicU8,
    /// Writes are appended: `On`, or `WaitRewrite` past S.
    logging: AtomicBool,
    /// Replies wait for the durable LSN: logging under `appendfsync always`.
    gate: AtomicBool,
    /// `no-appendfsync-on-rewrite`, mirrored from the configuration.
    pub no_fsync_on_rewrite: AtomicBool,
    /// DEBUG AOF-FLUSH-SLEEP, in microseconds: kept for a journal opened
    /// later.
    flush_sleep_us: AtomicU64,
}

impl Aof {
    /// The state at start: the journal opened for `appendonly yes`.
    pub fn new(journal: Option<Arc<Journal>>, fsync: AppendFsync) -> Aof {
        let on = journal.is_some();
        let aof = Aof {
            journal: OnceLock::new(),
            state: AtomicU8::new(if on { AofState::On } else { AofState::Off } as u8),
            logging: AtomicBool::new(on),
            gate: AtomicBool::new(on && fsync == AppendFsync::Always),
            no_fsync_on_rewrite: AtomicBool::new(false),
            flush_sleep_us: AtomicU64::new(0),
        };
        if let Some(j) = journal {
            let _ = aof.journal.set(j);
        }
        aof
    }

    /// DEBUG AOF-FLUSH-SLEEP: for the journal now, and one opened later.
    pub fn set_flush_sleep(&self, micros: u64) {
        self.flush_sleep_us.store(micros, Ordering::Relaxed);
        if let Some(journal) = self.journal.get() {
            journal.set_flush_sleep(Duration::from_micros(micros));
        }
    }

    /// The journal writes are appended to, if they are logged.
    pub fn logging(&self) -> Option<&Journal> {
        if self.logging.load(Ordering::Acquire) {
            self.journal.get().map(|j| &**j)
        } else {
            None
        }
    }

    /// The journal if it was ever opened, whatever `appendonly` says now.
    pub fn opened(&self) -> Option<&Journal> {
        self.journal.get().map(|j| &**j)
    }

    /// The journal, logging or not, unless `appendonly` is off.
    pub fn enabled(&self) -> Option<&Journal> {
        match self.state() {
            AofState::Off => None,
            AofState::WaitRewrite | AofState::On => self.journal.get().map(|j| &**j),
        }
    }

    pub fn state(&self) -> AofState {
        match self.state.load(Ordering::Acquire) {
            0 => AofState::Off,
            1 => AofState::WaitRewrite,
            _ => AofState::On,
        }
    }

    fn set_state(&self, state: AofState) {
        self.state.store(state as u8, Ordering::Release);
    }

    pub fn gate_replies(&self) -> bool {
        self.gate.load(Ordering::Acquire)
    }

    /// At the end of an orderly shutdown: the files as a clean close leaves
    /// them (`Journal::close`).
    pub fn close(&self) {
        if let Some(journal) = self.journal.get() {
            journal.close();
        }
    }
}

/// Redis's `no-appendfsync-on-rewrite`: while a BGSAVE or an AOF rewrite
/// runs (Redis: while it has a child process), the journal writes without
/// fdatasync, so the disk serves the save; under `always` a reply then
/// waits for the write alone. Called whenever one of them starts or ends
/// and when the directive changes (`starting`: one is about to, and is not
/// shown in progress yet, so that INFO never shows a save whose fsyncs still
/// run); reads atomics only (it may run under the configuration's lock).
pub fn suspend_fsync_while_saving(server: &Server, starting: bool) {
    if let Some(journal) = server.aof.journal.get() {
        let saving = starting || server.rdb.in_progress() || server.rewrite.in_progress();
        journal.suspend_fsync(saving && server.aof.no_fsync_on_rewrite.load(Ordering::Acquire));
    }
}

/// Registers the wake-up of workers holding replies, and of replicas'
/// senders, on each durable advance of `journal`, and the latency
/// monitor's AOF events (once, when it is opened).
pub fn attach(server: &Server, journal: &Journal) {
    journal.set_flush_sleep(Duration::from_micros(server.aof.flush_sleep_us.load(Ordering::Relaxed)));
    let mailboxes = server.mailboxes.read().clone();
    let replication = Arc::clone(&server.repl.shared);
    journal.on_durable(Box::new(move |_lsn| {
        for mailbox in &mailboxes {
            if mailbox.awaiting_durable.load(Ordering::Acquire) {
                mailbox.send(Message::Durable);
            }
        }
        // Replicas' senders that wait for the disk.
        replication.durable_advanced();
    }));
    let monitor = Arc::clone(&server.latency_monitor);
    journal.on_latency(Box::new(move |event, took| monitor.record(event, took)));
}

fn fsync_policy(fsync: AppendFsync) -> FsyncPolicy {
    match fsync {
        AppendFsync::Always => FsyncPolicy::Always,
        AppendFsync::EverySec => FsyncPolicy::EverySec,
        AppendFsync::No => FsyncPolicy::No,
    }
}

/// Applies a `CONFIG SET` of `appendonly` or `appendfsync` (`old` the
/// configuration before, `new` after), as Redis 7.0's `startAppendOnly`,
/// `stopAppendOnly` and `appendfsync` apply functions do. Runs under the
/// configuration's write lock: it must not read `server.config`. `Err` is
/// the reason for CONFIG SET's error.
pub fn apply_config(server: &Server, old: &Config, new: &Config) -> Result<(), String> {
    let aof = &server.aof;
    if new.appendfsync != old.appendfsync {
        if let Some(journal) = aof.journal.get() {
            journal.set_fsync(fsync_policy(new.appendfsync));
        }
        set_gate(server, aof.logging.load(Ordering::Acquire) && new.appendfsync == AppendFsync::Always);
    }
    if let Some(journal) = aof.journal.get() {
        journal.set_space_ahead(space_ahead(new));
        journal.set_sync_gap(Duration::from_micros(new.keel_aof_sync_gap_us));
        journal.set_writer_batch_class(new.keel_aof_writer_batch_class);
        journal.set_timestamps(new.aof_timestamp_enabled);
        if new.aof_disable_auto_gc != old.aof_disable_auto_gc {
            journal.set_keep_history(new.aof_disable_auto_gc);
        }
    }
    match (aof.state(), new.appendonly) {
        (AofState::Off, true) => start(server, new),
        (AofState::WaitRewrite | AofState::On, false) => {
            stop(server);
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Sets whether replies wait for the journal; releasing them wakes every
/// worker, since replies held until now may leave at once.
fn set_gate(server: &Server, gate: bool) {
    if server.aof.gate.swap(gate, Ordering::AcqRel) && !gate {
        server.broadcast(|| Message::Durable);
    }
}

/// `appendonly yes` at run time: opens the journal if it never was, and
/// asks for the rewrite that writes the base (`AofState::WaitRewrite`).
fn start(server: &Server, config: &Config) -> Result<(), String> {
    let aof = &server.aof;
    let journal = open_journal(server, config).map_err(|e| {
        tracing::warn!("Keel needs to enable the AOF but can't open the AOF directory: {e}");
        "Unable to turn on AOF. Check server logs.".to_string()
    })?;
    journal.set_fsync(fsync_policy(config.appendfsync));
    aof.set_state(AofState::WaitRewrite);
    crate::rewrite::start_for_enable(server);
    Ok(())
}

/// The journal, opened now if it never was (by `appendonly yes` at start
/// or since): for turning the AOF on, and for BGREWRITEAOF with it off,
/// which writes a new base as Redis's does. What the directory holds is
/// stale then (logging was off): the rewrite replaces it, so its replay is
/// dropped unread.
pub fn open_journal<'s>(server: &'s Server, config: &Config) -> Result<&'s Journal, JournalError> {
    if let Some(journal) = server.aof.opened() {
        return Ok(journal);
    }
    let (journal, _stale) = open_dir(config, true)?;
    attach(server, &journal);
    Ok(server.aof.journal.get_or_init(|| Arc::new(journal)))
}

/// `appendonly no` at run time: stops logging, flushes and syncs what was
/// logged (best effort, as Redis), cancels a rewrite, and lets held
/// replies go.
fn stop(server: &Server) {
    let aof = &server.aof;
    aof.set_state(AofState::Off);
    aof.logging.store(false, Ordering::Release);
    set_gate(server, false);
    crate::rewrite::cancel(server);
    if let Some(journal) = aof.journal.get() {
        if let Err(e) = journal.flush_and_sync() {
            tracing::warn!("Fail to fsync the AOF file: {e}");
        }
    }
}

/// At the instant S of a rewrite (every shard locked): a journal waiting
/// for its base starts logging here, if an earlier attempt has not
/// already. Returns whether it was waiting (the rewrite's commit then
/// turns the AOF on).
pub fn begin_logging_at_s(server: &Server, fsync: AppendFsync) -> bool {
    let aof = &server.aof;
    if aof.state() != AofState::WaitRewrite {
        return false;
    }
    if !aof.logging.swap(true, Ordering::AcqRel) {
        aof.gate.store(fsync == AppendFsync::Always, Ordering::Release);
    }
    true
}

/// The rewrite that created the base committed: `WaitRewrite` becomes `On`
/// (unless `appendonly no` came meanwhile).
pub fn rewrite_committed(server: &Server) {
    let _ = server.aof.state.compare_exchange(
        AofState::WaitRewrite as u8,
        AofState::On as u8,
        Ordering::AcqRel,
        Ordering::Acquire,
    );
}
