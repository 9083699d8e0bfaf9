//! Generic key commands: DEL/UNLINK, EXISTS, TYPE, KEYS, SCAN, RANDOMKEY,
//! RENAME/RENAMENX, MOVE, COPY, the EXPIRE and TTL families, PERSIST,
//! TOUCH, OBJECT, and the keyspace-wide SWAPDB, FLUSHDB and FLUSHALL.
//!
//! Lookups follow Redis's kinds: a *read* lookup (`lookupKeyRead`) expires
//! the key if due and counts a keyspace hit or miss; a *write* lookup
//! (`lookupKeyWrite`) expires it without counting. Both refresh the key's
//! access time unless Redis passes `LOOKUP_NOTOUCH` (TTL, TYPE, EXISTS,
//! OBJECT).
//!
//! Commands that name two keys (RENAME, COPY) hold both keys' shards: the
//! dispatcher locks them from the key specs before the handler runs, so a
//! cross-shard rename is as atomic as a same-shard one. Commands that span
//! the keyspace (KEYS, SCAN, RANDOMKEY, SWAPDB, FLUSHDB, FLUSHALL) lock
//! every shard.
//!
//! SCAN's cursor spans the shards: `dict_cursor * shard_count + shard`.
//! Each shard's table is walked with Redis's reverse-binary cursor, which
//! survives growth and shrinking; when a shard's walk ends the scan moves
//! to the next shard, and the cursor is 0 after the last. So every key
//! present from the first call to the last is returned at least once.
//!
//! Every write ends in [`wrote`], the one place where the append-only log
//! will record the command (as Redis propagates it: EXPIRE family as
//! PEXPIREAT, or DEL/UNLINK when the time is already past).

use keel_engine::{Db, Entry, Key, Value};

use super::parse::{eq, i64_arg};
use super::keyspec::*;
use super::{acl, cmd, flags::*, range, Access, CmdError, CmdResult, CommandSpec, Ctx, Keys, KEY1};
use crate::lazyfree;
use crate::notify;

/// OBJECT's subcommands name their key at argument 2.
const KEY2: Keys = Keys::Range { first: 2, last: 2, step: 1 };
/// COPY and RENAME: source and destination.
const KEY1_2: Keys = Keys::Range { first: 1, last: 2, step: 1 };

pub static COMMANDS: &[CommandSpec] = &[
    cmd("del", -2, WRITE, range(1, -1, 1), "generic", del)
        .doc("Delete a key", "1.0.0")
        .tips(&["request_policy:multi_shard", "response_policy:agg_sum"])
        .specs(&[ks(RM | DELETE, index(1), span(-1, 1, 0))]),
    cmd("unlink", -2, WRITE | FAST, range(1, -1, 1), "generic", unlink)
        .doc(
            "Delete a key asynchronously in another thread. Otherwise it is just as DEL, but non blocking.",
            "4.0.0",
        )
        .tips(&["request_policy:multi_shard", "response_policy:agg_sum"])
        .specs(&[ks(RM | DELETE, index(1), span(-1, 1, 0))]),
    cmd("exists", -2, READONLY | FAST, range(1, -1, 1), "generic", exists)
        .doc("Determine if a key exists", "1.0.0")
        .tips(&["request_policy:multi_shard", "response_policy:agg_sum"])
        .specs(&[ks(RO, index(1), span(-1, 1, 0))]),
    cmd("type", 2, READONLY | FAST, KEY1, "generic", type_)
        .doc("Determine the type stored at key", "1.0.0")
        .specs(&[key_at(1, RO)]),
    cmd("keys", 2, READONLY | ALL_SHARDS, Keys::None, "generic", keys)
        .doc("Find all keys matching the given pattern", "1.0.0")
        .tips(&["request_policy:all_shards", "nondeterministic_output_order"])
        .acl(acl::KEYSPACE | acl::DANGEROUS),
    cmd("scan", -2, READONLY | ALL_SHARDS, Keys::None, "generic", scan)
        .doc("Incrementally iterate the keys space", "2.8.0")
        .tips(&["nondeterministic_output", "request_policy:special"]),
    cmd("randomkey", 1, READONLY | ALL_SHARDS, Keys::None, "generic", randomkey)
        .doc("Return a random key from the keyspace", "1.0.0")
        .tips(&["request_policy:all_shards", "nondeterministic_output"]),
    cmd("rename", 3, WRITE, KEY1_2, "generic", rename)
        .doc("Rename a key", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | DELETE), key_at(2, OW | UPDATE)]),
    cmd("renamenx", 3, WRITE | FAST, KEY1_2, "generic", renamenx)
        .doc("Rename a key, only if the new key does not exist", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | DELETE), key_at(2, OW | INSERT)]),
    cmd("move", 3, WRITE | FAST, KEY1, "generic", move_)
        .doc("Move a key to another database", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("copy", -3, WRITE | DENYOOM, KEY1_2, "generic", copy)
        .doc("Copy a key", "6.2.0")
        .specs(&[key_at(1, RO | ACCESS), key_at(2, OW | UPDATE)]),
    cmd("expire", -3, WRITE | FAST, KEY1, "generic", expire).doc("Set a key's time to live in seconds", "1.0.0"),
    cmd("pexpire", -3, WRITE | FAST, KEY1, "generic", pexpire)
        .doc("Set a key's time to live in milliseconds", "2.6.0"),
    cmd("expireat", -3, WRITE | FAST, KEY1, "generic", expireat)
        .doc("Set the expiration for a key as a UNIX timestamp", "1.2.0"),
    cmd("pexpireat", -3, WRITE | FAST, KEY1, "generic", pexpireat)
        .doc("Set the expiration for a key as a UNIX timestamp specified in milliseconds", "2.6.0"),
    cmd("ttl", 2, READONLY | FAST, KEY1, "generic", ttl)
        .doc("Get the time to live for a key in seconds", "1.0.0")
        .tips(&["nondeterministic_output"]),
    cmd("pttl", 2, READONLY | FAST, KEY1, "generic", pttl)
        .doc("Get the time to live for a key in milliseconds", "2.6.0")
        .tips(&["nondeterministic_output"]),
    cmd("expiretime", 2, READONLY | FAST, KEY1, "generic", expiretime)
        .doc("Get the expiration Unix timestamp for a key", "7.0.0"),
    cmd("pexpiretime", 2, READONLY | FAST, KEY1, "generic", pexpiretime)
        .doc("Get the expiration Unix timestamp for a key in milliseconds", "7.0.0"),
    cmd("persist", 2, WRITE | FAST, KEY1, "generic", persist).doc("Remove the expiration from a key", "2.2.0"),
    cmd("touch", -2, READONLY | FAST, range(1, -1, 1), "generic", touch)
        .doc(
            "Alters the last access time of a key(s). Returns the number of existing keys specified.",
            "3.2.1",
        )
        .tips(&["request_policy:multi_shard", "response_policy:agg_sum"])
        .specs(&[ks(RO, index(1), span(-1, 1, 0))]),
    cmd("object", -2, 0, Keys::None, "generic", super::server::container)
        .doc("A container for object introspection commands", "2.2.3")
        .subs(OBJECT_SUBCOMMANDS)
        .acl(acl::NONE),
    cmd("swapdb", 3, WRITE | FAST | ALL_SHARDS, Keys::None, "server", swapdb)
        .doc("Swaps two Redis databases", "4.0.0")
        .acl(acl::KEYSPACE | acl::DANGEROUS),
    cmd("flushdb", -1, WRITE | ALL_SHARDS, Keys::None, "server", flushdb)
        .doc("Remove all keys from the current database", "1.0.0")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"])
        .acl(acl::KEYSPACE | acl::DANGEROUS),
    cmd("flushall", -1, WRITE | ALL_SHARDS, Keys::None, "server", flushall)
        .doc("Remove all keys from all databases", "1.0.0")
        .tips(&["request_policy:all_shards", "response_policy:all_succeeded"])
        .acl(acl::KEYSPACE | acl::DANGEROUS),
];

const OBJECT_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("object|encoding", 3, READONLY, KEY2, "generic", object_encoding)
        .doc("Inspect the internal encoding of a Redis object", "2.2.3")
        .tips(&["nondeterministic_output"])
        .specs(&[key_at(2, RO)]),
    cmd("object|freq", 3, READONLY, KEY2, "generic", object_freq)
        .doc("Get the logarithmic access frequency counter of a Redis object", "4.0.0")
        .tips(&["nondeterministic_output"])
        .specs(&[key_at(2, RO)]),
    cmd("object|idletime", 3, READONLY, KEY2, "generic", object_idletime)
        .doc("Get the time since a Redis object was last accessed", "2.2.3")
        .tips(&["nondeterministic_output"])
        .specs(&[key_at(2, RO)]),
    cmd("object|refcount", 3, READONLY, KEY2, "generic", object_refcount)
        .doc("Get the number of references to the value of the key", "2.2.3")
        .tips(&["nondeterministic_output"])
        .specs(&[key_at(2, RO)]),
    cmd("object|help", 2, LOADING | STALE, Keys::None, "generic", object_help)
        .doc("Show helpful text about the different subcommands", "6.2.0"),
];

/// Frees a removed entry, in the background if `lazy` and it is big.
fn release(entry: Entry, lazy: bool) {
    if lazy {
        lazyfree::drop_value(entry);
    }
}

/// Redis's `lookupKeyRead`: expires if due and counts a hit or miss (the
/// access time was refreshed before the command ran: `command::run`).
fn lookup_read<'d>(ctx_stats: &crate::server::WorkerStats, db: &'d mut Db, key: &[u8], now_ms: u64) -> Option<&'d mut Entry> {
    let entry = db.get_mut(key, now_ms);
    ctx_stats.hit(entry.is_some());
    entry
}

/// Redis's `lookupKeyReadWithFlags(LOOKUP_NOTOUCH)`: as `lookup_read`
/// without refreshing the access time.
fn lookup_read_notouch<'d>(ctx_stats: &crate::server::WorkerStats, db: &'d mut Db, key: &[u8], now_ms: u64) -> Option<&'d Entry> {
    let entry = db.get(key, now_ms);
    ctx_stats.hit(entry.is_some());
    entry
}

/// Redis's `lookupKeyWrite`: expires if due, counts nothing.
fn lookup_write<'d>(db: &'d mut Db, key: &[u8], now_ms: u64) -> Option<&'d mut Entry> {
    db.get_mut(key, now_ms)
}

/// Redis's `getIntFromObjectOrReply`: an integer that fits an `int`.
fn int_arg(arg: &[u8], error: Option<&str>) -> Result<i64, CmdError> {
    let fail = || match error {
        Some(text) => CmdError::other(text),
        None => CmdError::NotInteger,
    };
    let v = i64_arg(arg).map_err(|_| fail())?;
    if i32::try_from(v).is_err() {
        return Err(fail());
    }
    Ok(v)
}

/// A database number for MOVE/COPY/SWAPDB: `selectDb` fails outside range.
fn db_index(ctx: &Ctx<'_>, n: i64) -> Result<usize, CmdError> {
    usize::try_from(n)
        .ok()
        .filter(|&i| i < ctx.dbs.keyspace.databases())
        .ok_or(CmdError::DbIndexOutOfRange)
}

const SAME_OBJECT: &str = "ERR source and destination objects are the same";

// ---------------------------------------------------------------- DEL & co

fn del(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let lazy = ctx.server.config.read().lazyfree_lazy_user_del;
    del_generic(ctx, argv, lazy)
}

/// UNLINK: DEL whose big values are freed by the lazyfree thread.
fn unlink(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    del_generic(ctx, argv, true)
}

fn del_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], lazy: bool) -> CmdResult {
    let now = ctx.now_ms;
    let mut deleted = 0;
    for key in &argv[1..] {
        let db = ctx.dbs.of(key);
        // An expired key is expired (and counted so), not deleted.
        if db.get(key, now).is_none() {
            continue;
        }
        if let Some(entry) = db.remove(key) {
            release(entry, lazy);
            deleted += 1;
            ctx.notify(notify::GENERIC, "del", key);
        }
    }
    if deleted > 0 {
        ctx.wrote(deleted);
    }
    ctx.out.int(deleted as i64);
    Ok(())
}

fn exists(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let now = ctx.now_ms;
    let mut count = 0;
    for key in &argv[1..] {
        if lookup_read_notouch(ctx.stats, ctx.dbs.of(key), key, now).is_some() {
            count += 1;
        }
    }
    ctx.out.int(count);
    Ok(())
}

fn type_(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let name = lookup_read_notouch(ctx.stats, ctx.dbs.of(key), key, ctx.now_ms).map_or("none", |e| e.value.type_name());
    ctx.out.simple(name);
    Ok(())
}

fn touch(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let now = ctx.now_ms;
    let mut touched = 0;
    for key in &argv[1..] {
        if lookup_read(ctx.stats, ctx.dbs.of(key), key, now).is_some() {
            touched += 1;
        }
    }
    ctx.out.int(touched);
    Ok(())
}

// ------------------------------------------------------- KEYS, SCAN, RANDOM

fn keys(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let pattern = argv[1];
    let all = pattern == b"*";
    let (now, selected) = (ctx.now_ms, ctx.dbs.selected);
    let mut found: Vec<&[u8]> = Vec::new();
    for shard in ctx.dbs.shards() {
        let db: &Db = &shard.dbs()[selected];
        // Expired keys are skipped, not deleted, as Redis does.
        found.extend(
            db.iter()
                .filter(|(k, e)| (all || crate::glob::matches(pattern, k, false)) && !e.is_expired(now))
                .map(|(k, _)| k),
        );
    }
    ctx.out.array(found.len());
    for key in found {
        ctx.out.bulk(key);
    }
    Ok(())
}

/// Redis's `parseScanCursorOrReply`: `strtoul` in base 10. A leading space
/// fails; a sign is allowed ("-1" wraps to the largest cursor); the empty
/// string is cursor 0; overflow fails.
pub fn parse_cursor(arg: &[u8]) -> Result<u64, CmdError> {
    let invalid = || CmdError::other("ERR invalid cursor");
    if arg.is_empty() {
        return Ok(0);
    }
    let (negative, digits) = match arg[0] {
        b'-' => (true, &arg[1..]),
        b'+' => (false, &arg[1..]),
        _ => (false, arg),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(invalid());
    }
    let mut v: u64 = 0;
    for &d in digits {
        v = v.checked_mul(10).and_then(|v| v.checked_add(u64::from(d - b'0'))).ok_or_else(invalid)?;
    }
    Ok(if negative { v.wrapping_neg() } else { v })
}

/// The options of HSCAN, SSCAN and ZSCAN after `key cursor`: COUNT (at
/// least 1, default 10) and MATCH (`None` for no pattern or "*").
pub(crate) fn parse_member_scan_options<'a>(options: &[&'a [u8]]) -> Result<(usize, Option<&'a [u8]>), CmdError> {
    let mut count = 10usize;
    let mut pattern = None;
    for pair in options.chunks(2) {
        match pair {
            [name, value] if eq(name, "count") => {
                let n = i64_arg(value)?;
                if n < 1 {
                    return Err(CmdError::Syntax);
                }
                count = usize::try_from(n).unwrap_or(usize::MAX);
            }
            [name, value] if eq(name, "match") => pattern = (*value != b"*").then_some(*value),
            _ => return Err(CmdError::Syntax),
        }
    }
    Ok((count, pattern))
}

fn scan(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let cursor = parse_cursor(argv[1])?;
    let mut count: i64 = 10;
    let mut pattern: Option<&[u8]> = None;
    let mut type_filter: Option<&[u8]> = None;
    let mut i = 2;
    while i < argv.len() {
        let more = argv.len() - i;
        if eq(argv[i], "count") && more >= 2 {
            count = i64_arg(argv[i + 1])?;
            if count < 1 {
                return Err(CmdError::Syntax);
            }
        } else if eq(argv[i], "match") && more >= 2 {
            // "*" matches everything: the same as no pattern.
            pattern = (argv[i + 1] != b"*").then_some(argv[i + 1]);
        } else if eq(argv[i], "type") && more >= 2 {
            type_filter = Some(argv[i + 1]);
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);

    // Step 1: walk the tables, shard after shard, until `count` keys are
    // collected or ten times as many buckets were visited (a sparse table
    // must not make one call slow).
    let shards = ctx.dbs.keyspace.shard_count() as u64;
    let selected = ctx.dbs.selected;
    let mut shard = (cursor % shards) as usize;
    let mut dict_cursor = cursor / shards;
    let mut found: Vec<(usize, Key)> = Vec::new();
    let mut budget = count.saturating_mul(10);
    let next = loop {
        let db = ctx.dbs.shard(shard).db(selected);
        dict_cursor = db.scan(dict_cursor, |k, _| found.push((shard, k.into())));
        if dict_cursor == 0 {
            shard += 1;
            if shard as u64 == shards {
                break 0;
            }
        }
        if budget == 0 || found.len() >= count {
            break dict_cursor * shards + shard as u64;
        }
        budget -= 1;
    };

    // Step 2: filter by pattern, then type, then expiry (which deletes).
    let now = ctx.now_ms;
    let mut keys: Vec<Key> = Vec::with_capacity(found.len());
    for (shard, key) in found {
        if pattern.is_some_and(|p| !crate::glob::matches(p, &key, false)) {
            continue;
        }
        let db = ctx.dbs.shard(shard).db(selected);
        if let Some(wanted) = type_filter {
            let name = lookup_read_notouch(ctx.stats, db, &key, now).map_or("none", |e| e.value.type_name());
            if !wanted.eq_ignore_ascii_case(name.as_bytes()) {
                continue;
            }
        }
        if db.get(&key, now).is_none() {
            continue;
        }
        keys.push(key);
    }

    ctx.out.array(2);
    ctx.out.bulk(itoa::Buffer::new().format(next).as_bytes());
    ctx.out.array(keys.len());
    for key in &keys {
        ctx.out.bulk(key);
    }
    Ok(())
}

fn randomkey(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    use rand::Rng;
    let (now, selected) = (ctx.now_ms, ctx.dbs.selected);
    let mut rng = rand::thread_rng();
    loop {
        // Pick a shard weighted by its key count, so every key is equally likely.
        let sizes: Vec<usize> = ctx.dbs.shards().map(|s| s.dbs()[selected].len()).collect();
        let total: usize = sizes.iter().sum();
        if total == 0 {
            ctx.out.null();
            return Ok(());
        }
        let mut pick = rng.gen_range(0..total);
        let mut shard = 0;
        while pick >= sizes[shard] {
            pick -= sizes[shard];
            shard += 1;
        }
        let db = ctx.dbs.shard(shard).db(selected);
        let Some((key, entry)) = db.random_key(&mut rng) else { continue };
        let (key, expired) = (key.to_vec(), entry.is_expired(now));
        if expired {
            // Delete it and draw again, as Redis does.
            db.get(&key, now);
            continue;
        }
        ctx.out.bulk(&key);
        return Ok(());
    }
}

// ------------------------------------------------- RENAME, MOVE and COPY

fn rename(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    rename_generic(ctx, argv, false)
}

fn renamenx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    rename_generic(ctx, argv, true)
}

/// The value moves with its TTL and access time; the destination's own
/// TTL, if any, goes with the value it had.
fn rename_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], nx: bool) -> CmdResult {
    let (src, dst) = (argv[1], argv[2]);
    let now = ctx.now_ms;
    if lookup_write(ctx.dbs.of(src), src, now).is_none() {
        return Err(CmdError::NoSuchKey);
    }
    if src == dst {
        if nx {
            ctx.out.int(0);
        } else {
            ctx.out.ok();
        }
        return Ok(());
    }
    let dst_db = ctx.dbs.of(dst);
    if lookup_write(dst_db, dst, now).is_some() {
        if nx {
            ctx.out.int(0);
            return Ok(());
        }
        if let Some(old) = dst_db.remove(dst) {
            release(old, ctx.server.config.read().lazyfree_lazy_server_del);
        }
    }
    let Some(entry) = ctx.dbs.of(src).remove(src) else {
        return Err(CmdError::NoSuchKey);
    };
    ctx.dbs.of(dst).insert_entry(dst, entry);
    ctx.wrote(1);
    ctx.notify(notify::GENERIC, "rename_from", src);
    ctx.notify(notify::GENERIC, "rename_to", dst);
    if nx {
        ctx.out.int(1);
    } else {
        ctx.out.ok();
    }
    Ok(())
}

fn move_(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if ctx.server.cluster.is_some() {
        return Err(CmdError::other("ERR MOVE is not allowed in cluster mode"));
    }
    let key = argv[1];
    let now = ctx.now_ms;
    let target = int_arg(argv[2], None)?;
    let target = db_index(ctx, target)?;
    let source = ctx.dbs.selected;
    if source == target {
        return Err(CmdError::other(SAME_OBJECT));
    }
    let shard = ctx.dbs.locked.shard_for(ctx.dbs.keyspace, key);
    let (src, dst) = shard.two_dbs(source, target);
    if lookup_write(src, key, now).is_none() || lookup_write(dst, key, now).is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    let Some(entry) = src.remove(key) else {
        ctx.out.int(0);
        return Ok(());
    };
    dst.insert_entry(key, entry);
    ctx.wrote(1);
    ctx.notify_in(source, notify::GENERIC, "move_from", key);
    ctx.notify_in(target, notify::GENERIC, "move_to", key);
    ctx.out.int(1);
    Ok(())
}

fn copy(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (src, dst) = (argv[1], argv[2]);
    let now = ctx.now_ms;
    let source = ctx.dbs.selected;
    let mut target = source;
    let mut replace = false;
    let mut j = 3;
    while j < argv.len() {
        let more = argv.len() - j - 1;
        if eq(argv[j], "replace") {
            replace = true;
        } else if eq(argv[j], "db") && more >= 1 {
            let n = int_arg(argv[j + 1], None)?;
            target = db_index(ctx, n)?;
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if ctx.server.cluster.is_some() && (source != 0 || target != 0) {
        return Err(CmdError::other("ERR Copying to another database is not allowed in cluster mode"));
    }
    if source == target && src == dst {
        return Err(CmdError::other(SAME_OBJECT));
    }
    let Some(entry) = lookup_read(ctx.stats, ctx.dbs.of_in(source, src), src, now) else {
        ctx.out.int(0);
        return Ok(());
    };
    // A deep copy: the two keys are independent from here on.
    let (value, expire_at_ms): (Value, u64) = (entry.value.clone(), entry.expire_at_ms);
    let dst_db = ctx.dbs.of_in(target, dst);
    if lookup_write(dst_db, dst, now).is_some() {
        if !replace {
            ctx.out.int(0);
            return Ok(());
        }
        if let Some(old) = dst_db.remove(dst) {
            release(old, ctx.server.config.read().lazyfree_lazy_server_del);
        }
    }
    let mut copied = Entry::new(value, ctx.lru_s);
    copied.expire_at_ms = expire_at_ms;
    dst_db.insert_entry(dst, copied);
    ctx.wrote(1);
    ctx.notify_in(target, notify::GENERIC, "copy_to", dst);
    ctx.out.int(1);
    Ok(())
}

// ------------------------------------------------------------ expiry

/// NX/XX/GT/LT of the EXPIRE family.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

/// Redis's `parseExtendedExpireArgumentsOrReply`: options are checked
/// (and their conflicts reported) before the time is parsed.
fn parse_expire_flags(args: &[&[u8]]) -> Result<ExpireFlags, CmdError> {
    let mut f = ExpireFlags::default();
    for arg in args {
        if eq(arg, "nx") {
            f.nx = true;
        } else if eq(arg, "xx") {
            f.xx = true;
        } else if eq(arg, "gt") {
            f.gt = true;
        } else if eq(arg, "lt") {
            f.lt = true;
        } else {
            return Err(CmdError::other(format!("ERR Unsupported option {}", String::from_utf8_lossy(arg))));
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(CmdError::other("ERR NX and XX, GT or LT options at the same time are not compatible"));
    }
    if f.gt && f.lt {
        return Err(CmdError::other("ERR GT and LT options at the same time are not compatible"));
    }
    Ok(f)
}

/// The absolute expiry in Unix ms that an EXPIRE-family argument names,
/// or Redis's overflow error. `base_ms` is 0 for the *AT forms.
fn expire_when(arg: &[u8], base_ms: i64, seconds: bool, name: &str) -> Result<i64, CmdError> {
    let invalid = || CmdError::InvalidExpire(name.to_string());
    let mut when = i64_arg(arg)?;
    if seconds {
        when = when.checked_mul(1000).ok_or_else(invalid)?;
    }
    when.checked_add(base_ms).filter(|_| when <= i64::MAX - base_ms).ok_or_else(invalid)
}

/// Whether NX/XX/GT/LT let a key whose current expiry is `current`
/// (None: no TTL, an infinite one) take `when`.
fn expire_allowed(f: ExpireFlags, current: Option<i64>, when: i64) -> bool {
    match current {
        Some(_) if f.nx => false,
        None if f.xx => false,
        // No TTL is infinite: nothing is greater.
        None if f.gt => false,
        Some(c) if f.gt && when <= c => false,
        Some(c) if f.lt && when >= c => false,
        _ => true,
    }
}

fn expire_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], relative: bool, seconds: bool, name: &str) -> CmdResult {
    let key = argv[1];
    let now = ctx.now_ms;
    let flags = parse_expire_flags(&argv[3..])?;
    let base = if relative { now as i64 } else { 0 };
    let when = expire_when(argv[2], base, seconds, name)?;
    let db = ctx.dbs.of(key);
    let Some(entry) = lookup_write(db, key, now) else {
        ctx.out.int(0);
        return Ok(());
    };
    let current = entry.has_expiry().then_some(entry.expire_at_ms as i64);
    if !expire_allowed(flags, current, when) {
        ctx.out.int(0);
        return Ok(());
    }
    let event = if when <= now as i64 {
        // Already past: the key goes now (logged as DEL, or UNLINK under
        // lazyfree-lazy-expire).
        if let Some(old) = db.remove(key) {
            release(old, ctx.server.config.read().lazyfree_lazy_expire);
        }
        "del"
    } else {
        // Logged as PEXPIREAT key `when`.
        db.set_expire(key, when as u64, now);
        "expire"
    };
    ctx.wrote(1);
    ctx.notify(notify::GENERIC, event, key);
    ctx.out.int(1);
    Ok(())
}

fn expire(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    expire_generic(ctx, argv, true, true, "expire")
}

fn pexpire(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    expire_generic(ctx, argv, true, false, "pexpire")
}

fn expireat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    expire_generic(ctx, argv, false, true, "expireat")
}

fn pexpireat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    expire_generic(ctx, argv, false, false, "pexpireat")
}

/// TTL, PTTL, EXPIRETIME, PEXPIRETIME: -2 for no key, -1 for no TTL.
fn ttl_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], millis: bool, absolute: bool) -> CmdResult {
    let key = argv[1];
    let now = ctx.now_ms;
    let reply = match lookup_read_notouch(ctx.stats, ctx.dbs.of(key), key, now) {
        None => -2,
        Some(e) if !e.has_expiry() => -1,
        Some(e) => {
            let at = i128::from(e.expire_at_ms);
            let ms = if absolute { at } else { (at - i128::from(now)).max(0) };
            // Seconds round to nearest, as Redis's (ttl+500)/1000.
            let v = if millis { ms } else { (ms + 500) / 1000 };
            i64::try_from(v).unwrap_or(i64::MAX)
        }
    };
    ctx.out.int(reply);
    Ok(())
}

fn ttl(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    ttl_generic(ctx, argv, false, false)
}

fn pttl(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    ttl_generic(ctx, argv, true, false)
}

fn expiretime(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    ttl_generic(ctx, argv, false, true)
}

fn pexpiretime(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    ttl_generic(ctx, argv, true, true)
}

fn persist(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let db = ctx.dbs.of(key);
    if lookup_write(db, key, ctx.now_ms).is_none() || !db.persist(key) {
        ctx.out.int(0);
        return Ok(());
    }
    // Logged as PERSIST key.
    ctx.wrote(1);
    ctx.notify(notify::GENERIC, "persist", key);
    ctx.out.int(1);
    Ok(())
}

// ------------------------------------------------------------ OBJECT

/// Redis's `objectCommandLookup`: no expiry of the access time, a hit or
/// miss counted; a missing key answers null.
pub(super) fn object_lookup<'c>(ctx: &'c mut Ctx<'_>, key: &[u8]) -> Option<&'c Entry> {
    let now = ctx.now_ms;
    let entry = ctx.dbs.of(key).get(key, now);
    ctx.stats.hit(entry.is_some());
    entry
}

fn object_encoding(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    match object_lookup(ctx, argv[2]).map(|e| e.value.encoding()) {
        Some(encoding) => ctx.out.bulk(encoding.as_bytes()),
        None => ctx.out.null(),
    }
    Ok(())
}

/// Integers Redis shares between keys instead of allocating (0..10000).
const SHARED_INTEGERS: i64 = 10_000;
/// The refcount Redis reports for a shared object (`OBJ_SHARED_REFCOUNT`).
const SHARED_REFCOUNT: i64 = i32::MAX as i64;

fn object_refcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    // Redis keeps small integers as shared objects unless maxmemory is set
    // with an LRU or LFU policy, which needs a private access field.
    let shares = {
        let config = ctx.server.config.read();
        config.maxmemory == 0 || !(config.maxmemory_policy.lru() || config.maxmemory_policy.lfu())
    };
    let refcount = match object_lookup(ctx, argv[2]).map(|e| &e.value) {
        None => None,
        Some(Value::Str(keel_engine::Str::Int(i))) if shares && (0..SHARED_INTEGERS).contains(i) => Some(SHARED_REFCOUNT),
        Some(_) => Some(1),
    };
    match refcount {
        Some(n) => ctx.out.int(n),
        None => ctx.out.null(),
    }
    Ok(())
}

fn object_idletime(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let access = ctx.access;
    let Some(entry) = object_lookup(ctx, argv[2]) else {
        ctx.out.null();
        return Ok(());
    };
    let Access::Lru(now_s) = access else {
        return Err(CmdError::other(
            "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
        ));
    };
    let idle = now_s.saturating_sub(entry.access_s);
    ctx.out.int(i64::from(idle));
    Ok(())
}

/// OBJECT FREQ: the key's LFU counter, decayed by its idle minutes
/// (Redis's `LFUDecrAndReturn`), without counting this as an access.
fn object_freq(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let access = ctx.access;
    let Some(entry) = object_lookup(ctx, argv[2]) else {
        ctx.out.null();
        return Ok(());
    };
    let Access::Lfu(lfu) = access else {
        return Err(CmdError::other(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
        ));
    };
    let counter = lfu.counter(entry.access_s);
    ctx.out.int(i64::from(counter));
    Ok(())
}

fn object_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    super::server::reply_help(
        ctx,
        b"OBJECT",
        &[
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access frequency index of the <key>. The returned integer is",
            "    proportional to the logarithm of the recent access frequency of the key.",
            "IDLETIME <key>",
            "    Return the idle time of the <key>, that is the approximated number of",
            "    seconds elapsed since the last access to the key.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key>.",
        ],
    );
    Ok(())
}

// ------------------------------------------------ SWAPDB, FLUSHDB, FLUSHALL

fn swapdb(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if ctx.server.cluster.is_some() {
        return Err(CmdError::other("ERR SWAPDB is not allowed in cluster mode"));
    }
    let a = int_arg(argv[1], Some("ERR invalid first DB index"))?;
    let b = int_arg(argv[2], Some("ERR invalid second DB index"))?;
    let (a, b) = (db_index(ctx, a)?, db_index(ctx, b)?);
    let now = ctx.now_ms;
    if a != b {
        for shard in ctx.dbs.shards() {
            shard.swap_dbs(a, b, now);
        }
    }
    // Logged as SWAPDB a b.
    ctx.wrote(1);
    ctx.out.ok();
    Ok(())
}

/// FLUSHDB/FLUSHALL's `[SYNC|ASYNC]`; without it, `lazyfree-lazy-user-flush`.
fn flush_async(ctx: &Ctx<'_>, argv: &[&[u8]]) -> Result<bool, CmdError> {
    match argv {
        [_] => Ok(ctx.server.config.read().lazyfree_lazy_user_flush),
        [_, mode] if eq(mode, "sync") => Ok(false),
        [_, mode] if eq(mode, "async") => Ok(true),
        _ => Err(CmdError::Syntax),
    }
}

/// Empties database `db` of every shard (all databases if None); returns
/// how many keys went. ASYNC hands the old tables to the lazyfree thread.
fn empty(ctx: &mut Ctx<'_>, db: Option<usize>, lazy: bool) -> u64 {
    let mut removed = 0u64;
    for shard in ctx.dbs.shards() {
        for (i, d) in shard.dbs_mut().iter_mut().enumerate() {
            if db.is_some_and(|want| want != i) {
                continue;
            }
            let keys = d.len() as u64;
            let data = d.take_all();
            removed += keys;
            if lazy && keys > 0 {
                lazyfree::drop_async(data, keys);
            }
        }
    }
    // Tracked keys are not per database: any flush tells every tracking
    // client that all its keys went, and empties the table (Redis's
    // trackingInvalidateKeysOnFlush).
    if ctx.server.tracking.active() {
        crate::tracking::flushed(ctx.server, ctx.dbs.shards());
    }
    removed
}

fn flushdb(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let lazy = flush_async(ctx, argv)?;
    let selected = ctx.dbs.selected;
    let removed = empty(ctx, Some(selected), lazy);
    ctx.wrote(removed);
    // Logged as FLUSHDB even when nothing was removed (Redis forces it).
    ctx.durability.forced = true;
    ctx.out.ok();
    Ok(())
}

fn flushall(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let lazy = flush_async(ctx, argv)?;
    let removed = empty(ctx, None, lazy);
    ctx.wrote(removed);
    // Logged as FLUSHALL even when nothing was removed.
    ctx.durability.forced = true;
    crate::snapshot::save_after_flushall(ctx.server, &mut ctx.dbs.locked);
    ctx.out.ok();
    Ok(())
}

/// INFO keyspace rows: (database, keys, keys with a TTL, average TTL left
/// in ms) for each database holding keys, summed over `shards` (which the
/// caller holds locked, as INFO does).
pub fn keyspace_info<'s>(
    shards: impl Iterator<Item = &'s mut keel_engine::Shard>,
    databases: usize,
    now_ms: u64,
) -> Vec<(usize, usize, usize, u64)> {
    let mut rows = vec![(0usize, 0usize, 0u128); databases];
    for shard in shards {
        for (i, db) in shard.dbs().iter().enumerate() {
            let expires = db.expires_len();
            rows[i].0 += db.len();
            rows[i].1 += expires;
            if expires > 0 {
                rows[i].2 += u128::from(db.avg_ttl_ms(now_ms)) * expires as u128;
            }
        }
    }
    rows.into_iter()
        .enumerate()
        .filter(|(_, (keys, _, _))| *keys > 0)
        .map(|(i, (keys, expires, weighted))| {
            let avg = weighted.checked_div(expires as u128).unwrap_or(0) as u64;
            (i, keys, expires, avg)
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn cursor_parses_like_strtoul() {
        assert_eq!(parse_cursor(b"0"), Ok(0));
        assert_eq!(parse_cursor(b""), Ok(0));
        assert_eq!(parse_cursor(b"+7"), Ok(7));
        assert_eq!(parse_cursor(b"-1"), Ok(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551615"), Ok(u64::MAX));
        for bad in [&b"18446744073709551616"[..], b" 1", b"1 ", b"abc", b"-", b"0x10", b"1.5"] {
            assert!(parse_cursor(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn expire_options_follow_redis_rules() {
        let f = |args: &[&str]| parse_expire_flags(&args.iter().map(|a| a.as_bytes()).collect::<Vec<_>>());
        assert_eq!(f(&["nx", "XX"]).unwrap_err().to_string(), "ERR NX and XX, GT or LT options at the same time are not compatible");
        assert_eq!(f(&["gt", "lt"]).unwrap_err().to_string(), "ERR GT and LT options at the same time are not compatible");
        assert_eq!(f(&["xx", "ab"]).unwrap_err().to_string(), "ERR Unsupported option ab");
        let lt_xx = f(&["lt", "xx"]).unwrap();
        assert!(!expire_allowed(lt_xx, None, 5));
        assert!(expire_allowed(lt_xx, Some(10), 5));
        let lt = f(&["lt"]).unwrap();
        assert!(expire_allowed(lt, None, 5));
        let gt = f(&["gt"]).unwrap();
        assert!(!expire_allowed(gt, None, 5));
        assert!(!expire_allowed(gt, Some(10), 10));
        assert!(expire_allowed(gt, Some(10), 11));
    }

    #[test]
    fn expire_times_overflow_like_redis() {
        let e = |arg: &str, base, secs| expire_when(arg.as_bytes(), base, secs, "expire");
        assert!(e("9223372036854776", 0, true).is_err());
        assert!(e("-9223372036854776", 0, true).is_err());
        assert_eq!(e("9223372036854775", 0, true), Ok(9_223_372_036_854_775_000));
        assert!(e("9223372036854770000", 1_700_000_000_000, false).is_err());
        assert_eq!(e("-9223372036854770000", 0, false), Ok(-9_223_372_036_854_770_000));
        assert_eq!(e("10", 1000, true), Ok(11_000));
    }
}
