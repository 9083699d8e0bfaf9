//! HyperLogLog commands: PFADD, PFCOUNT, PFMERGE, PFDEBUG, PFSELFTEST.
//!
//! An HLL is a string value in Redis's exact format
//! (`keel_engine::hyperloglog`), so there is nothing to persist or
//! replicate besides the string: RDB, AOF rewrite, DUMP/RESTORE and
//! replicas carry its bytes. A string whose header is not an HLL's is
//! refused with Redis's WRONGTYPE text, one whose sparse opcodes are
//! corrupt with INVALIDOBJ.
//!
//! What is journaled, and why, is Redis 7.0's `call()` rule: a command
//! that counted a change (`ctx.wrote`, Redis's `dirty++`) is logged as it
//! came. The commands are deterministic given the value they find and
//! `hll-sparse-max-bytes`, so a replay and a replica reach the same bytes:
//!
//! * PFADD and PFMERGE, when they change the value (PFMERGE always);
//! * PFCOUNT of one key when it refreshes the cached count in the value's
//!   header (Redis counts that as a change and propagates the PFCOUNT:
//!   the command is flagged `may_replicate`); a later replay of it finds
//!   the same stale cache and writes the same count;
//! * PFDEBUG GETREG and TODENSE when they turn the value dense.
//!
//! As in Redis, a replaying server whose `hll-sparse-max-bytes` differs
//! from the one the writes ran under turns values dense at other points.

use keel_engine::hyperloglog::{self as hll, Encoding, HllError, REGISTERS};
use keel_engine::value::{Str, Value};
use keel_engine::Db;

use super::keyspec::*;
use super::parse::eq;
use super::strings::{string_of, string_of_mut};
use super::{cmd, flags::*, range, CmdError, CmdResult, CommandSpec, Ctx, Keys, KEY1};
use crate::notify;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("pfadd", -2, WRITE | DENYOOM | FAST, KEY1, "hyperloglog", pfadd)
        .doc("Adds the specified elements to the specified HyperLogLog.", "2.8.9")
        .specs(&[key_at(1, RW | INSERT)]),
    cmd("pfcount", -2, READONLY, range(1, -1, 1), "hyperloglog", pfcount)
        .doc("Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).", "2.8.9")
        .specs(&[ks(RW | ACCESS, index(1), span(-1, 1, 0))
            .notes("RW because it may change the internal representation of the key, and propagate to replicas")]),
    cmd("pfmerge", -2, WRITE | DENYOOM, range(1, -1, 1), "hyperloglog", pfmerge)
        .doc("Merge N different HyperLogLogs into a single one.", "2.8.9")
        .specs(&[key_at(1, RW | ACCESS | INSERT), ks(RO | ACCESS, index(2), span(-1, 1, 0))]),
    cmd("pfdebug", 3, WRITE | DENYOOM | ADMIN, range(2, 2, 1), "hyperloglog", pfdebug)
        .doc("Internal commands for debugging HyperLogLog values", "2.8.9")
        .specs(&[key_at(2, RW | ACCESS)]),
    cmd("pfselftest", 1, ADMIN, Keys::None, "hyperloglog", pfselftest)
        .doc("An internal command for testing HyperLogLog values", "2.8.9"),
];

/// Redis's reply to a string that is not an HLL.
const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
/// Redis's reply to an HLL whose registers cannot be read.
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

fn refused(e: HllError) -> CmdError {
    CmdError::other(match e {
        HllError::NotHll => NOT_HLL,
        HllError::Corrupt => CORRUPT,
    })
}

fn corrupt(_: HllError) -> CmdError {
    CmdError::other(CORRUPT)
}

/// The bytes of a string with a valid HLL header (Redis's
/// `isHLLObjectOrReply`; an integer-encoded string never is one).
fn hll_bytes(s: &Str) -> Result<&[u8], CmdError> {
    let bytes: &[u8] = match s {
        Str::Int(_) => return Err(CmdError::other(NOT_HLL)),
        Str::Embstr(b) => b,
        Str::Raw(v) => v,
    };
    hll::encoding(bytes).map_err(refused)?;
    Ok(bytes)
}

/// The HLL at `key` to change in place, made `raw` as Redis's
/// `dbUnshareStringValue` makes it; None when the key is absent.
fn writable<'d>(db: &'d mut Db, key: &[u8], now_ms: u64) -> Result<Option<&'d mut Vec<u8>>, CmdError> {
    let Some(s) = string_of_mut(db.get_mut(key, now_ms))? else { return Ok(None) };
    hll_bytes(s)?;
    Ok(Some(s.make_raw()))
}

/// The HLL at `key`, created empty (sparse) when absent; whether it was.
fn writable_or_new<'d>(db: &'d mut Db, key: &[u8], now_ms: u64, lru_s: u32) -> Result<(&'d mut Vec<u8>, bool), CmdError> {
    let created = db.get(key, now_ms).is_none();
    if created {
        db.set(key, Value::Str(Str::raw(hll::new())), false, lru_s);
    }
    let hll = writable(db, key, now_ms)?.ok_or(CmdError::NoSuchKey)?; // just stored under the same lock
    Ok((hll, created))
}

fn sparse_max_bytes(ctx: &Ctx<'_>) -> usize {
    ctx.server.config.read().hll_sparse_max_bytes
}

/// Every register of the HLLs at `keys` (a missing key is an empty HLL),
/// read as Redis's lookupKeyRead does (a hit or a miss each), and whether
/// any was dense.
fn union_of(ctx: &mut Ctx<'_>, keys: &[&[u8]]) -> Result<(Box<[u8; REGISTERS]>, bool), CmdError> {
    let mut max = Box::new([0u8; REGISTERS]);
    let mut any_dense = false;
    for key in keys {
        let entry = ctx.dbs.of(key).get(key, ctx.now_ms);
        ctx.stats.hit(entry.is_some());
        let Some(s) = string_of(entry)? else { continue };
        let bytes = hll_bytes(s)?;
        any_dense |= hll::encoding(bytes) == Ok(Encoding::Dense);
        hll::merge_into(&mut max, bytes).map_err(corrupt)?;
    }
    Ok((max, any_dense))
}

// ---------------------------------------------------------------------------
// Commands.

fn pfadd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let limit = sparse_max_bytes(ctx);
    let (now, lru) = (ctx.now_ms, ctx.lru_s);
    let db = ctx.dbs.of(key);
    let (value, created) = writable_or_new(db, key, now, lru)?;
    let mut updated = u64::from(created);
    for element in &argv[2..] {
        match hll::add(value, element, limit) {
            Ok(true) => updated += 1,
            Ok(false) => {}
            Err(_) => {
                // Redis answers at the first element it cannot add, with
                // the registers the ones before it raised left raised and
                // nothing counted or propagated. Keel logs the command all
                // the same (not counted as a change): replayed, it stops at
                // the same element with the same bytes, so the journal and
                // replicas keep the value memory has.
                if updated > 0 {
                    ctx.durability.forced = true;
                }
                return Err(CmdError::other(CORRUPT));
            }
        }
    }
    if updated > 0 {
        hll::invalidate_cache(value);
        db.signal_modified(key);
        ctx.notify(notify::STRING, "pfadd", key);
        ctx.wrote(updated);
    }
    ctx.out.int(i64::from(updated > 0));
    Ok(())
}

fn pfcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if argv.len() > 2 {
        // The count of the union, from a temporary: nothing is written.
        let (max, _) = union_of(ctx, &argv[1..])?;
        ctx.out.int(hll::count_registers(&max) as i64);
        return Ok(());
    }
    let key = argv[1];
    let now = ctx.now_ms;
    // PFCOUNT is no write to the dispatcher, which keeps the state at a
    // snapshot's start only of the keys writes name; refreshing the cache
    // below writes this one.
    if ctx.server.snapshot_active.load(std::sync::atomic::Ordering::Relaxed) {
        ctx.dbs.locked.shard_for(ctx.dbs.keyspace, key).preserve(key);
    }
    let db = ctx.dbs.of(key);
    let found = writable(db, key, now);
    // Any answer but "absent" found the key.
    ctx.stats.hit(!matches!(found, Ok(None)));
    let Some(value) = found? else {
        ctx.out.int(0);
        return Ok(());
    };
    let (count, refreshed) = match hll::cached_count(value) {
        Some(count) => (count, false),
        None => {
            let count = hll::count(value).map_err(corrupt)?;
            hll::set_cached_count(value, count);
            (count, true)
        }
    };
    if refreshed {
        // Redis's signalModifiedKey and dirty++: the PFCOUNT is logged
        // (see the module's comment).
        db.signal_modified(key);
        ctx.wrote(1);
    }
    ctx.out.int(count as i64);
    Ok(())
}

fn pfmerge(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    // The destination is a source too.
    let (max, any_dense) = union_of(ctx, &argv[1..])?;
    let dest = argv[1];
    let limit = sparse_max_bytes(ctx);
    let (now, lru) = (ctx.now_ms, ctx.lru_s);
    let db = ctx.dbs.of(dest);
    let (value, _) = writable_or_new(db, dest, now, lru)?;
    // Redis 7.0 turns the destination dense when a source is dense, and
    // otherwise raises its sparse registers one by one (which may turn it
    // dense at `hll-sparse-max-bytes`).
    if any_dense {
        hll::to_dense(value).map_err(corrupt)?;
    }
    for (index, &register) in max.iter().enumerate() {
        if register != 0 {
            // The destination was read above: it cannot be corrupt (and
            // Redis ignores the outcome here).
            let _ = hll::raise(value, index, register, limit);
        }
    }
    hll::invalidate_cache(value);
    db.signal_modified(dest);
    // Redis 7.0 announces a merge as `pfadd`, "a mass-add of elements".
    ctx.notify(notify::STRING, "pfadd", dest);
    ctx.wrote(1);
    ctx.out.ok();
    Ok(())
}

fn pfdebug(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (sub, key) = (argv[1], argv[2]);
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    // The key is looked at before the subcommand, as in Redis.
    let value = writable(db, key, now)?.ok_or_else(|| CmdError::other("ERR The specified key does not exist"))?;
    if eq(sub, "getreg") {
        let converted = hll::to_dense(value).map_err(corrupt)?;
        let registers = hll::registers(value).map_err(corrupt)?;
        if converted {
            // Redis counts the conversion as a change, so it is logged.
            ctx.wrote(1);
        }
        ctx.out.array(REGISTERS);
        for &r in registers.iter() {
            ctx.out.int(i64::from(r));
        }
    } else if eq(sub, "decode") {
        match hll::decode(value).map_err(corrupt)? {
            Some(text) => ctx.out.bulk(text.as_bytes()),
            None => return Err(CmdError::other("ERR HLL encoding is not sparse")),
        }
    } else if eq(sub, "encoding") {
        ctx.out.simple(hll::encoding(value).map_err(refused)?.name());
    } else if eq(sub, "todense") {
        let converted = hll::to_dense(value).map_err(corrupt)?;
        if converted {
            ctx.wrote(1);
        }
        ctx.out.int(i64::from(converted));
    } else {
        return Err(CmdError::other(format!("ERR Unknown PFDEBUG subcommand '{}'", String::from_utf8_lossy(sub))));
    }
    Ok(())
}

fn pfselftest(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let limit = sparse_max_bytes(ctx);
    hll::self_test(rand::random(), limit).map_err(|failure| CmdError::other(format!("ERR {failure}")))?;
    ctx.out.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_entries_are_redis_ones() {
        let (_, spec) = super::super::table().lookup(b"PFCOUNT").expect("in the table");
        assert!(spec.has(READONLY) && !spec.has(WRITE));
        assert_eq!(spec.key_indexes(&[b"pfcount", b"a", b"b"]).to_vec(), [1, 2]);
        let (_, spec) = super::super::table().lookup(b"pfdebug").expect("in the table");
        assert_eq!(spec.key_indexes(&[b"pfdebug", b"getreg", b"k"]).to_vec(), [2]);
    }
}
