//! MULTI/EXEC/DISCARD/WATCH/UNWATCH.
//!
//! EXEC locks, in ascending order, every shard that any queued command or
//! watched key lives in, checks the watches, and runs the queue under those
//! locks: the transaction is atomic across shards and no other client can
//! observe it half done.

use std::sync::atomic::Ordering;

use keel_engine::Shards;
use smallvec::SmallVec;

use super::keyspec::*;
use super::{cmd, flags::*, range, resolve_by, run, CmdError, CmdResult, CommandSpec, Ctx, Keys};
use crate::client::{Client, Multi};
use crate::server::Server;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("multi", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, Keys::None, "transactions", multi)
        .doc("Mark the start of a transaction block", "1.2.0"),
    cmd("exec", 1, NOSCRIPT | LOADING | STALE | SKIP_SLOWLOG, Keys::None, "transactions", exec)
        .doc("Execute all commands issued after MULTI", "1.2.0"),
    cmd("discard", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, Keys::None, "transactions", discard)
        .doc("Discard all commands issued after MULTI", "2.0.0"),
    cmd("watch", -2, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY | OWN_LOCKS, range(1, -1, 1), "transactions", watch)
        .doc("Watch the given keys to determine execution of the MULTI/EXEC block", "2.2.0")
        .specs(&[ks(RO, index(1), span(-1, 1, 0))]),
    cmd("unwatch", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, Keys::None, "transactions", unwatch)
        .doc("Forget about all watched keys", "2.2.0"),
];

fn multi(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    if ctx.client.multi.is_some() {
        return Err(CmdError::other("ERR MULTI calls can not be nested"));
    }
    ctx.client.multi = Some(Multi::default());
    ctx.client.info.in_multi.store(true, Ordering::Relaxed);
    ctx.out.ok();
    Ok(())
}

fn discard(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    if ctx.client.multi.is_none() {
        return Err(CmdError::other("ERR DISCARD without MULTI"));
    }
    discard_state(ctx.server, ctx.client);
    ctx.out.ok();
    Ok(())
}

/// Leaves MULTI and drops every watch.
pub fn discard_state(server: &Server, client: &mut Client) {
    client.multi = None;
    client.info.in_multi.store(false, Ordering::Relaxed);
    client.info.multi_len.store(0, Ordering::Relaxed);
    client.info.multi_mem.store(0, Ordering::Relaxed);
    unwatch_all(server, client);
}

/// Watches its keys in their shards; beside a busy script, which holds
/// them, leaves them to the script to install before its next command.
fn watch(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if ctx.client.multi.is_some() {
        return Err(CmdError::other("ERR WATCH inside MULTI is not allowed"));
    }
    let db = ctx.client.db;
    let mut keys: SmallVec<[&[u8]; 4]> = SmallVec::new();
    for &key in &argv[1..] {
        if !keys.contains(&key) && !ctx.client.watching.iter().any(|(d, k)| *d == db && **k == *key) {
            keys.push(key);
        }
    }
    let (server, keyspace) = (ctx.server, ctx.dbs.keyspace);
    let shards = Shards::Some(keys.iter().map(|k| keyspace.shard_of_key(k)).collect());
    loop {
        if let Ok(locked) = crate::scripting::lock_or_busy(server, (ctx.client.is_master, false), shards.clone()) {
            ctx.dbs.locked = locked;
            for key in &keys {
                ctx.dbs.of(key).watch(key, &ctx.client.watch_flag, ctx.now_ms);
            }
            break;
        }
        if server.scripts.run.defer_watches(db, &keys, &ctx.client.watch_flag, ctx.now_ms) {
            break;
        }
        // The script ended meanwhile: its shards are free again.
    }
    ctx.client.watching.extend(keys.iter().map(|k| (db, Box::from(*k))));
    ctx.out.ok();
    Ok(())
}

fn unwatch(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    unwatch_all(ctx.server, ctx.client);
    ctx.out.ok();
    Ok(())
}

/// Drops every watch of `client`, taking each shard's lock briefly. A
/// shard a busy script holds is not waited for: the client watches with
/// a new flag from then on, and the watches left behind, whose flag
/// nobody reads any more, go when the script ends
/// (`Locked::drop_unread_watches`).
pub fn unwatch_all(server: &Server, client: &mut Client) {
    let keyspace = &server.keyspace;
    let master = client.is_master;
    for (db, key) in std::mem::take(&mut client.watching) {
        let mut locked = loop {
            match crate::scripting::lock_or_busy(server, (master, false), Shards::One(keyspace.shard_of_key(&key))) {
                Ok(locked) => break locked,
                Err(_) if server.scripts.run.leave_unread_watches() => {
                    client.watch_flag = keel_engine::WatchFlag::default();
                    return;
                }
                // The script ended meanwhile: its shards are free again.
                Err(_) => {}
            }
        };
        locked.shard_for(keyspace, &key).db(db).unwatch(&key, &client.watch_flag);
    }
    client.watch_flag.store(false, Ordering::Release);
}

fn exec(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let Some(multi) = ctx.client.multi.take() else {
        return Err(CmdError::other("ERR EXEC without MULTI"));
    };
    ctx.client.info.in_multi.store(false, Ordering::Relaxed);
    ctx.client.info.multi_len.store(0, Ordering::Relaxed);
    ctx.client.info.multi_mem.store(0, Ordering::Relaxed);
    if multi.aborted {
        unwatch_all(ctx.server, ctx.client);
        return Err(CmdError::other("EXECABORT Transaction discarded because of previous errors."));
    }
    let queued: Vec<Vec<&[u8]>> = multi.queued.iter().map(|argv| argv.iter().map(Vec::as_slice).collect()).collect();

    // Every shard the transaction can touch, locked once, in order.
    let keyspace = ctx.dbs.keyspace;
    let (mut all, mut scripts) = (false, false);
    let mut shards: SmallVec<[usize; 4]> = SmallVec::new();
    let names = super::Names::of(ctx.client);
    for argv in &queued {
        if let Ok((_, spec)) = resolve_by(names, argv) {
            all |= spec.has(ALL_SHARDS);
            scripts |= spec.has(ALL_SHARDS) && spec.group == "scripting";
            shards.extend(spec.key_indexes(argv).iter().map(|&i| keyspace.shard_of_key(argv[i])));
        }
    }
    shards.extend(ctx.client.watching.iter().map(|(_, k)| keyspace.shard_of_key(k)));
    let needed = if all { Shards::All } else { Shards::Some(shards) };
    let _claim = scripts.then(|| ctx.server.scripts.run.claim());
    ctx.dbs.locked = match crate::scripting::lock_or_busy(ctx.server, (ctx.client.is_master, scripts), needed) {
        Ok(locked) => locked,
        Err(busy) => {
            unwatch_all(ctx.server, ctx.client);
            return Err(CmdError::other(format!("EXECABORT Transaction discarded because of: {busy}")));
        }
    };

    let touched = ctx.client.watch_flag.load(Ordering::Acquire);
    let now = ctx.now_ms;
    // A watched key that expired after WATCH (and was not deleted yet, so
    // nothing signalled it) aborts too; one already expired at WATCH time
    // does not (Redis 7.0 `isWatchedKeyExpired`).
    let flag = ctx.client.watch_flag.clone();
    let expired = ctx.client.watching.clone().iter().any(|(db, key)| {
        ctx.dbs.of_in(*db, key).watched_key_expired(key, &flag, now)
    });
    if touched || expired {
        ctx.dbs.locked = keyspace.lock(&mut SmallVec::new());
        unwatch_all(ctx.server, ctx.client);
        ctx.out.null_array();
        return Ok(());
    }

    // Watches end here, while their shards are held: a queued UNWATCH or
    // WATCH-related command then finds nothing left to lock.
    for (db, key) in std::mem::take(&mut ctx.client.watching) {
        ctx.dbs.of_in(db, &key).unwatch(&key, &flag);
    }
    flag.store(false, Ordering::Release);

    ctx.out.array(queued.len());
    ctx.durability.in_transaction = true;
    for argv in &queued {
        let result = match resolve_by(names, argv) {
            // The user's rules may have changed since the command was
            // queued: Redis checks them again at EXEC.
            Ok((index, spec)) if ctx.client.user.as_ref().is_some_and(|u| !u.unrestricted()) => {
                match super::check_acl(ctx.server, ctx.client, index, spec, argv, crate::acl::Context::Multi) {
                    Ok(()) => run_queued(ctx, index, spec, argv),
                    Err(denied) => Err(CmdError::other(format!(
                        "NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC \
                         call. This command is no longer allowed for the following reason: {}",
                        denied.exec_reason()
                    ))),
                }
            }
            Ok((index, spec)) => run_queued(ctx, index, spec, argv),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            e.count(ctx.server);
            ctx.out.error(&e.to_string());
        }
    }
    ctx.durability.in_transaction = false;
    Ok(())
}

/// Runs one queued command of EXEC and shows it to MONITOR.
fn run_queued(ctx: &mut Ctx<'_>, index: usize, spec: &CommandSpec, argv: &[&[u8]]) -> CmdResult {
    let result = run(ctx, index, spec, argv);
    super::feed_monitors(ctx.server, ctx.client, spec, argv, false);
    result
}
