//! Durability: the bridge between command execution and `keel-journal`.
//!
//! Every write command, while it still holds the locks of the shards it
//! touched, appends its effect to the one journal and stamps the keys it
//! wrote with the journal position (LSN) of that record. A reply then
//! depends on a position: its own write's, or the stamps of the keys it
//! read. Under `appendfsync always` the worker holds the reply until the
//! journal is durable at that position; execution itself never waits.
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

use std::sync::atomic::Ordering;
use std::sync::Arc;

use keel_engine::{Entry, Value};
use keel_journal::{FsyncPolicy, Journal, JournalConfig, JournalError, Lsn, Replay};

use crate::client::{Client, ClientInfo};
use crate::command::{self, CommandSpec, Ctx};
use crate::config::{AppendFsync, Config};
use crate::server::Server;

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
    let fsync = match config.appendfsync {
        AppendFsync::Always => FsyncPolicy::Always,
        AppendFsync::EverySec => FsyncPolicy::EverySec,
        AppendFsync::No => FsyncPolicy::No,
    };
    let journal_config = JournalConfig {
        dir: config.dir.join(&config.appenddirname),
        filename: config.appendfilename.clone(),
        fsync,
        load_truncated: config.aof_load_truncated,
    };
    Journal::open(journal_config).map(Some)
}

/// Replays the journal into the keyspace, executing each command as a
/// client would. Returns how many commands ran.
pub fn replay(server: &Server, replay: Replay) -> Result<u64, String> {
    let info = Arc::new(ClientInfo::detached(0));
    let mut client = Client::new(info, true);
    client.is_loader = true;
    let stats = &server.workers[0];
    let progress = &server.load_progress;
    progress.total_bytes.store(replay.total_bytes(), Ordering::Relaxed);
    let mut reply = Vec::new();
    let mut count = 0u64;
    let mut replay = replay;
    while let Some(item) = replay.next() {
        let (db, argv) = item.map_err(|e| e.to_string())?;
        if count.is_multiple_of(1024) {
            progress.loaded_bytes.store(replay.loaded_bytes(), Ordering::Relaxed);
        }
        client.db = db;
        let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        reply.clear();
        // Time stands still while loading (as in Redis): nothing expires, so
        // the replay's result does not depend on when it runs; expiries that
        // happened are in the journal as DELs.
        command::execute(server, stats, &mut client, &mut reply, &args, 0);
        if reply.first() == Some(&b'-') {
            tracing::warn!(
                "journal command {} failed on replay: {}",
                String::from_utf8_lossy(&argv[0]),
                String::from_utf8_lossy(&reply).trim_end()
            );
        }
        count += 1;
    }
    Ok(count)
}

/// Journals as DEL the keys the running command found expired (and so
/// deleted), ahead of the command's own record: a later write to such a
/// key must replay onto an absent key. Without a journal, forgets them.
pub fn log_expired(ctx: &mut Ctx<'_>) {
    let mut expired: Vec<(usize, keel_engine::Key)> = Vec::new();
    for shard in ctx.dbs.shards() {
        for (index, db) in shard.dbs.iter_mut().enumerate() {
            expired.extend(db.expired.drain(..).map(|k| (index, k)));
        }
    }
    let Some(journal) = ctx.server.journal.as_deref() else { return };
    if ctx.server.loading.load(Ordering::Relaxed) {
        return;
    }
    for (db, key) in expired {
        let del = vec![b"DEL".to_vec(), key.to_vec()];
        if ctx.durability.in_transaction {
            ctx.durability.log.push((db, del));
        } else {
            journal.append(db, &del);
        }
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
    if replaced.is_none() && !ctx.durability.in_transaction && logged_as_is(spec, argv) {
        let Some(journal) = ctx.server.journal.as_deref() else { return };
        let lsn = journal.append(db, argv);
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
    ctx.durability.log.extend(propagated.into_iter().map(|a| (db, a)));
}

/// Whether `propagate` would log `argv` unchanged.
fn logged_as_is(spec: &CommandSpec, argv: &[&[u8]]) -> bool {
    match spec.name {
        // A plain SET key value has nothing relative to rewrite.
        "set" => argv.len() == 3,
        "setex" | "psetex" | "incrbyfloat" | "getex" | "expire" | "pexpire" | "expireat" | "pexpireat" | "getdel"
        | "flushall" | "flushdb" => false,
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
        // Relative or computed results: log the key's resulting state.
        "set" | "setex" | "psetex" | "incrbyfloat" => vec![state_of(ctx, key(), true)],
        "getex" | "expire" | "pexpire" | "expireat" | "pexpireat" => vec![state_of(ctx, key(), false)],
        "getdel" => vec![vec![b"DEL".to_vec(), key().to_vec()]],
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
    let Some(journal) = ctx.server.journal.as_deref() else { return 0 };
    let state = &mut ctx.durability;
    if state.log.is_empty() {
        return state.read_lsn.max(state.write_lsn);
    }
    let lsn = if state.log.len() == 1 {
        let (db, argv) = &state.log[0];
        journal.append(*db, argv)
    } else {
        journal.append_transaction(&state.log)
    };
    state.log.clear();
    for stamp in std::mem::take(&mut state.stamps) {
        match stamp {
            Stamp::Shards => ctx.dbs.shards().for_each(|s| s.floor_lsn = lsn),
            Stamp::Key { db, key } => stamp_key(ctx, db, &key, lsn),
        }
    }
    lsn.max(ctx.durability.read_lsn).max(ctx.durability.write_lsn)
}

/// Notes the journal position the keys a command read depend on, when
/// replies are gated on durability and the journal has undurable records.
pub fn note_reads(ctx: &mut Ctx<'_>, spec: &CommandSpec, argv: &[&[u8]]) {
    let Some(journal) = ctx.server.journal.as_deref() else { return };
    if !ctx.server.gate_replies || journal.durable_lsn() >= journal.appended_lsn() {
        return;
    }
    let db = ctx.dbs.selected;
    let appended = journal.appended_lsn();
    let mut lsn = 0;
    if spec.has(command::flags::ALL_SHARDS) {
        lsn = ctx.dbs.shards().map(|s| s.floor_lsn.max(s.removed_lsn)).max().unwrap_or(0);
        // Conservative for whole-keyspace reads: any write in them counts.
        lsn = lsn.max(appended);
    } else {
        for i in spec.key_indexes(argv) {
            let shard = ctx.dbs.locked.shard_for(ctx.dbs.keyspace, argv[i]);
            let found = shard.dbs[db].peek(argv[i]).map(|e| e.lsn(appended));
            lsn = lsn.max(shard.floor_lsn).max(found.unwrap_or(shard.removed_lsn));
        }
    }
    ctx.durability.read_lsn = ctx.durability.read_lsn.max(lsn);
}

/// Refuses writes while the journal cannot write (Redis's MISCONF).
pub fn check_writable(server: &Server, spec: &CommandSpec) -> Result<(), command::CmdError> {
    let Some(journal) = server.journal.as_deref() else { return Ok(()) };
    if !spec.has(command::flags::WRITE) || server.loading.load(Ordering::Relaxed) {
        return Ok(());
    }
    journal.health().map_err(|e| {
        command::CmdError::other(format!(
            "MISCONF Errors writing to the AOF file: {e}. Keel refuses writes until the disk accepts them again."
        ))
    })
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
}
