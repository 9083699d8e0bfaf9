//! Set commands: SADD, SREM, membership and cardinality, SPOP and
//! SRANDMEMBER, SMOVE, the algebra (SINTER, SINTERCARD, SUNION, SDIFF and
//! their STORE forms) and SSCAN.
//!
//! Encodings are the engine's ([`keel_engine::set`]): `intset` while every
//! member is an integer and there are at most `set-max-intset-entries`,
//! `hashtable` after. Results of the STORE forms get the encoding Redis
//! gives them (as if their members were added one by one).
//!
//! Multi-key commands first look every key up in order as Redis's
//! `lookupKeyRead` does (lazy expiry, keyspace hits and misses, WRONGTYPE
//! at the first key of another type), then read the sets through shared
//! borrows of all the locked shards at once ([`with_sets`]): nothing is
//! copied, whichever shards the keys live in.
//!
//! SPOP is journaled as Redis 7.0 propagates it: `SREM key member` per
//! member popped (several make one MULTI/EXEC unit), or `DEL key` when the
//! count takes the whole set.

use std::collections::HashSet;

use keel_engine::set::{Member, Set};
use keel_engine::value::parse_canonical_i64;
use keel_engine::{Db, Entry, Shard, Value};
use keel_protocol::ReplyWriter;
use smallvec::SmallVec;

use super::keys::{parse_cursor, parse_member_scan_options};
use super::parse::i64_arg;
use super::keyspec::*;
use super::{cmd, flags::*, range, CmdError, CmdResult, CommandSpec, Ctx, Keys, KEY1};
use crate::notify;
use crate::server::WorkerStats;

const ORDER: &[&str] = &["nondeterministic_output_order"];
const RANDOM: &[&str] = &["nondeterministic_output"];

pub static COMMANDS: &[CommandSpec] = &[
    cmd("sadd", -3, WRITE | DENYOOM | FAST, KEY1, "set", sadd)
        .doc("Add one or more members to a set", "1.0.0")
        .specs(&[key_at(1, RW | INSERT)]),
    cmd("srem", -3, WRITE | FAST, KEY1, "set", srem)
        .doc("Remove one or more members from a set", "1.0.0")
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("smembers", 2, READONLY, KEY1, "set", smembers).doc("Get all the members in a set", "1.0.0").tips(ORDER),
    cmd("sismember", 3, READONLY | FAST, KEY1, "set", sismember)
        .doc("Determine if a given value is a member of a set", "1.0.0")
        .specs(&[key_at(1, RO)]),
    cmd("smismember", -3, READONLY | FAST, KEY1, "set", smismember)
        .doc("Returns the membership associated with the given elements for a set", "6.2.0"),
    cmd("scard", 2, READONLY | FAST, KEY1, "set", scard)
        .doc("Get the number of members in a set", "1.0.0")
        .specs(&[key_at(1, RO)]),
    cmd("spop", -2, WRITE | FAST, KEY1, "set", spop)
        .doc("Remove and return one or multiple random members from a set", "1.0.0")
        .tips(RANDOM)
        .specs(&[key_at(1, RW | ACCESS | DELETE)]),
    cmd("srandmember", -2, READONLY, KEY1, "set", srandmember)
        .doc("Get one or multiple random members from a set", "1.0.0")
        .tips(RANDOM),
    cmd("smove", 4, WRITE | FAST, range(1, 2, 1), "set", smove)
        .doc("Move a member from one set to another", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | DELETE), key_at(2, RW | INSERT)]),
    cmd("sinter", -2, READONLY, range(1, -1, 1), "set", sinter).doc("Intersect multiple sets", "1.0.0").tips(ORDER),
    cmd("sintercard", -3, READONLY, Keys::Custom(sintercard_keys), "set", sintercard)
        .doc("Intersect multiple sets and return the cardinality of the result", "7.0.0")
        .specs(&[ks(RO | ACCESS, index(1), keynum(0, 1, 1))]),
    cmd("sinterstore", -3, WRITE | DENYOOM, range(1, -1, 1), "set", sinterstore)
        .doc("Intersect multiple sets and store the resulting set in a key", "1.0.0")
        .specs(&[key_at(1, RW | UPDATE), ks(RO | ACCESS, index(2), span(-1, 1, 0))]),
    cmd("sunion", -2, READONLY, range(1, -1, 1), "set", sunion).doc("Add multiple sets", "1.0.0").tips(ORDER),
    cmd("sunionstore", -3, WRITE | DENYOOM, range(1, -1, 1), "set", sunionstore)
        .doc("Add multiple sets and store the resulting set in a key", "1.0.0")
        .specs(&[key_at(1, OW | UPDATE), ks(RO | ACCESS, index(2), span(-1, 1, 0))]),
    cmd("sdiff", -2, READONLY, range(1, -1, 1), "set", sdiff).doc("Subtract multiple sets", "1.0.0").tips(ORDER),
    cmd("sdiffstore", -3, WRITE | DENYOOM, range(1, -1, 1), "set", sdiffstore)
        .doc("Subtract multiple sets and store the resulting set in a key", "1.0.0")
        .specs(&[key_at(1, OW | UPDATE), ks(RO | ACCESS, index(2), span(-1, 1, 0))]),
    cmd("sscan", -3, READONLY, KEY1, "set", sscan).doc("Incrementally iterate Set elements", "2.8.0").tips(RANDOM),
];

// ---------------------------------------------------------------------------
// Lookups and replies.

/// Redis's `lookupKeyRead` for a set: expires the key if due, counts a
/// keyspace hit or miss, refreshes the access time, checks the type.
fn read_set<'d>(
    stats: &WorkerStats,
    db: &'d mut Db,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'d Set>, CmdError> {
    let entry = db.get_mut(key, now_ms);
    stats.hit(entry.is_some());
    let Some(entry) = entry else { return Ok(None) };
    match &entry.value {
        Value::Set(s) => Ok(Some(s)),
        _ => Err(CmdError::WrongType),
    }
}

/// Redis's `lookupKeyWrite` for a set: as [`read_set`], counting nothing.
fn write_set<'d>(db: &'d mut Db, key: &[u8], now_ms: u64) -> Result<Option<&'d mut Set>, CmdError> {
    let Some(entry) = db.get_mut(key, now_ms) else { return Ok(None) };
    match &mut entry.value {
        Value::Set(s) => Ok(Some(s)),
        _ => Err(CmdError::WrongType),
    }
}

/// Looks `keys` up in order as [`read_set`] does (stopping at the first of
/// another type, as Redis does), then runs `f` over their sets, `None`
/// where a key is missing. The sets are shared borrows of all the locked
/// shards at once, so no set is copied whichever shards hold them.
fn with_sets<T>(
    ctx: &mut Ctx<'_>,
    keys: &[&[u8]],
    f: impl FnOnce(&mut ReplyWriter<'_>, &[Option<&Set>]) -> T,
) -> Result<T, CmdError> {
    let (stats, now) = (ctx.stats, ctx.now_ms);
    for key in keys {
        read_set(stats, ctx.dbs.of(key), key, now)?;
    }
    let (keyspace, selected) = (ctx.dbs.keyspace, ctx.dbs.selected);
    let shards: SmallVec<[&Shard; 4]> = ctx.dbs.shards().map(|s| &*s).collect();
    // Every key is live now (expired ones were removed above, at this same
    // instant), so a plain look is the lookup.
    let sets: SmallVec<[Option<&Set>; 4]> = keys
        .iter()
        .map(|key| {
            let index = keyspace.shard_of_key(key);
            let shard = shards.iter().find(|s| s.index == index)?;
            match &shard.dbs()[selected].peek(key)?.value {
                Value::Set(s) => Some(s),
                _ => None,
            }
        })
        .collect();
    Ok(f(&mut ctx.out, &sets))
}

fn reply_member(out: &mut ReplyWriter<'_>, member: Member<'_>) {
    match member {
        Member::Int(i) => out.bulk_int(i),
        Member::Bytes(b) => out.bulk(b),
    }
}

/// A set reply of a computed result (SUNION, SDIFF). Redis replies from
/// the result set it built, so a result that is an intset comes sorted:
/// Keel sorts such results too rather than build the set.
fn reply_result(out: &mut ReplyWriter<'_>, members: Vec<Member<'_>>, max_intset_entries: usize) {
    out.set(members.len());
    let ints: Option<Vec<i64>> = members
        .iter()
        .map(|m| match m.canonical() {
            Member::Int(i) => Some(i),
            Member::Bytes(_) => None,
        })
        .collect();
    match ints {
        Some(mut ints) if ints.len() <= max_intset_entries.min(1 << 30) => {
            ints.sort_unstable();
            ints.into_iter().for_each(|i| out.bulk_int(i));
        }
        _ => members.into_iter().for_each(|m| reply_member(out, m)),
    }
}

/// Frees a removed entry, in the background when `lazy` and it is big
/// (`lazyfree-lazy-server-del`, as Redis's `dbDelete`/`dbOverwrite`).
fn release(entry: Entry, lazy: bool) {
    if lazy {
        crate::lazyfree::drop_value(entry);
    }
}

// ---------------------------------------------------------------------------
// Single-key commands.

fn sadd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let max = ctx.encoding_limits().set_max_intset_entries;
    let (now, key) = (ctx.now_ms, argv[1]);
    let db = ctx.dbs.of(key);
    let added = match write_set(db, key, now)? {
        Some(set) => {
            let added = argv[2..].iter().filter(|m| set.insert(m, max)).count();
            if added > 0 {
                db.signal_modified(key);
            }
            added
        }
        None => {
            let mut set = Set::default();
            let added = argv[2..].iter().filter(|m| set.insert(m, max)).count();
            db.set(key, Value::Set(set), false, ctx.lru_s);
            added
        }
    };
    if added > 0 {
        ctx.wrote(added as u64);
        ctx.notify(notify::SET, "sadd", key);
    }
    ctx.out.int(added as i64);
    Ok(())
}

fn srem(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (now, key) = (ctx.now_ms, argv[1]);
    let db = ctx.dbs.of(key);
    let Some(set) = write_set(db, key, now)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let mut removed = 0u64;
    for member in &argv[2..] {
        if set.remove(member) {
            removed += 1;
            if set.is_empty() {
                break;
            }
        }
    }
    let emptied = set.is_empty();
    if emptied {
        db.remove(key);
    } else if removed > 0 {
        db.signal_modified(key);
    }
    if removed > 0 {
        ctx.wrote(removed);
        ctx.notify_removal(notify::SET, "srem", key, emptied);
    }
    ctx.out.int(removed as i64);
    Ok(())
}

fn smembers(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (stats, now) = (ctx.stats, ctx.now_ms);
    match read_set(stats, ctx.dbs.of(argv[1]), argv[1], now)? {
        Some(set) => {
            ctx.out.set(set.len());
            set.iter().for_each(|m| reply_member(&mut ctx.out, m));
        }
        None => ctx.out.set(0),
    }
    Ok(())
}

fn sismember(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (stats, now) = (ctx.stats, ctx.now_ms);
    let set = read_set(stats, ctx.dbs.of(argv[1]), argv[1], now)?;
    ctx.out.int(i64::from(set.is_some_and(|s| s.contains(argv[2]))));
    Ok(())
}

fn smismember(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (stats, now) = (ctx.stats, ctx.now_ms);
    let set = read_set(stats, ctx.dbs.of(argv[1]), argv[1], now)?;
    ctx.out.array(argv.len() - 2);
    for member in &argv[2..] {
        ctx.out.int(i64::from(set.is_some_and(|s| s.contains(member))));
    }
    Ok(())
}

fn scard(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (stats, now) = (ctx.stats, ctx.now_ms);
    let set = read_set(stats, ctx.dbs.of(argv[1]), argv[1], now)?;
    ctx.out.int(set.map_or(0, |s| s.len() as i64));
    Ok(())
}

// ---------------------------------------------------------------------------
// SPOP and SRANDMEMBER.

fn spop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    match argv.len() {
        2 => {}
        3 => return spop_count(ctx, argv),
        _ => return Err(CmdError::Syntax),
    }
    let (now, key) = (ctx.now_ms, argv[1]);
    let db = ctx.dbs.of(key);
    let Some(member) = write_set(db, key, now)?.and_then(|set| set.pop_random(&mut rand::thread_rng())) else {
        ctx.out.null();
        return Ok(());
    };
    let emptied = matches!(db.peek(key), Some(Entry { value: Value::Set(s), .. }) if s.is_empty());
    if emptied {
        db.remove(key);
    } else {
        db.signal_modified(key);
    }
    ctx.out.bulk(&member);
    ctx.wrote(1);
    ctx.notify_removal(notify::SET, "spop", key, emptied);
    ctx.propagate_as(vec![vec![b"SREM".to_vec(), key.to_vec(), member]]);
    Ok(())
}

fn spop_count(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let count = match parse_canonical_i64(argv[2]) {
        Some(n) if n >= 0 => n as usize,
        _ => return Err(CmdError::other("ERR value is out of range, must be positive")),
    };
    let lazy = ctx.server.config.read().lazyfree_lazy_server_del;
    let (now, key) = (ctx.now_ms, argv[1]);
    let db = ctx.dbs.of(key);
    let Some(set) = write_set(db, key, now)? else {
        ctx.out.set(0);
        return Ok(());
    };
    let size = set.len();
    if count == 0 {
        ctx.out.set(0);
        return Ok(());
    }
    if count >= size {
        // The whole set: reply with it, delete the key, log a DEL.
        if let Some(entry) = db.remove(key) {
            if let Value::Set(set) = &entry.value {
                ctx.out.set(set.len());
                set.iter().for_each(|m| reply_member(&mut ctx.out, m));
            }
            release(entry, lazy);
        }
        ctx.wrote(size as u64);
        ctx.notify_removal(notify::SET, "spop", key, true);
        ctx.propagate_as(vec![vec![b"DEL".to_vec(), key.to_vec()]]);
        return Ok(());
    }
    let popped = set.pop_random_many(count, &mut rand::thread_rng());
    db.signal_modified(key);
    ctx.out.set(popped.len());
    popped.iter().for_each(|m| ctx.out.bulk(m));
    ctx.wrote(popped.len() as u64);
    ctx.notify(notify::SET, "spop", key);
    let srem = |m: Vec<u8>| vec![b"SREM".to_vec(), key.to_vec(), m];
    ctx.propagate_as(popped.into_iter().map(srem).collect());
    Ok(())
}

fn srandmember(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    match argv.len() {
        2 => {}
        3 => return srandmember_count(ctx, argv),
        _ => return Err(CmdError::Syntax),
    }
    let (stats, now) = (ctx.stats, ctx.now_ms);
    match read_set(stats, ctx.dbs.of(argv[1]), argv[1], now)?.and_then(|s| s.random(&mut rand::thread_rng())) {
        Some(member) => reply_member(&mut ctx.out, member),
        None => ctx.out.null(),
    }
    Ok(())
}

fn srandmember_count(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let n = i64_arg(argv[2])?;
    if n == i64::MIN {
        return Err(CmdError::other(format!(
            "ERR value is out of range, value must between {} and {}",
            -i64::MAX,
            i64::MAX
        )));
    }
    let (stats, now) = (ctx.stats, ctx.now_ms);
    let Some(set) = read_set(stats, ctx.dbs.of(argv[1]), argv[1], now)? else {
        ctx.out.array(0);
        return Ok(());
    };
    let count = n.unsigned_abs() as usize;
    let mut rng = rand::thread_rng();
    if n < 0 || count == 1 {
        // Repetitions allowed: independent draws.
        ctx.out.array(count);
        for _ in 0..count {
            if let Some(m) = set.random(&mut rng) {
                reply_member(&mut ctx.out, m);
            }
        }
        return Ok(());
    }
    let members = set.random_distinct(count, &mut rng);
    ctx.out.array(members.len());
    members.into_iter().for_each(|m| reply_member(&mut ctx.out, m));
    Ok(())
}

// ---------------------------------------------------------------------------
// SMOVE.

fn smove(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (src, dst, member) = (argv[1], argv[2], argv[3]);
    let max = ctx.encoding_limits().set_max_intset_entries;
    let now = ctx.now_ms;
    // Both keys are looked up (and expired) before any check, as in Redis;
    // a missing source answers 0 before the types are checked.
    let src_found = write_set(ctx.dbs.of(src), src, now).map(|s| s.is_some());
    let dst_found = write_set(ctx.dbs.of(dst), dst, now).map(|s| s.is_some());
    if !src_found? {
        ctx.out.int(0);
        return Ok(());
    }
    let dst_found = dst_found?;
    if src == dst {
        let has = write_set(ctx.dbs.of(src), src, now)?.is_some_and(|s| s.contains(member));
        ctx.out.int(i64::from(has));
        return Ok(());
    }
    let db = ctx.dbs.of(src);
    let Some(set) = write_set(db, src, now)?.filter(|set| set.contains(member)) else {
        ctx.out.int(0);
        return Ok(());
    };
    set.remove(member);
    let emptied = set.is_empty();
    if emptied {
        db.remove(src);
    } else {
        db.signal_modified(src);
    }
    ctx.wrote(1);
    ctx.notify_removal(notify::SET, "srem", src, emptied);
    let db = ctx.dbs.of(dst);
    let added = match write_set(db, dst, now)? {
        Some(set) => set.insert(member, max),
        None => {
            let mut set = Set::default();
            set.insert(member, max);
            db.set(dst, Value::Set(set), false, ctx.lru_s);
            true
        }
    };
    if added {
        if dst_found {
            db.signal_modified(dst);
        }
        ctx.wrote(1);
        ctx.notify(notify::SET, "sadd", dst);
    }
    ctx.out.int(1);
    Ok(())
}

// ---------------------------------------------------------------------------
// The algebra.

/// Calls `f` with each member common to every set, in the iteration order
/// of the smallest, until `f` returns false. Empty if a key is missing.
fn for_each_common<'s>(sets: &[Option<&'s Set>], mut f: impl FnMut(Member<'s>) -> bool) {
    let Some(mut sets) = sets.iter().copied().collect::<Option<SmallVec<[&Set; 4]>>>() else { return };
    sets.sort_by_key(|s| s.len());
    let Some((&first, rest)) = sets.split_first() else { return };
    for member in first.iter() {
        if rest.iter().all(|&s| std::ptr::eq(s, first) || s.contains_member(member)) && !f(member) {
            return;
        }
    }
}

/// Every member of any set, once.
fn union<'s>(sets: &[Option<&'s Set>]) -> Vec<Member<'s>> {
    let present: SmallVec<[&Set; 4]> = sets.iter().flatten().copied().collect();
    if let [only] = present[..] {
        return only.iter().collect();
    }
    let mut seen: HashSet<Member<'s>, foldhash::fast::RandomState> = HashSet::default();
    seen.reserve(present.iter().map(|s| s.len()).max().unwrap_or(0));
    let mut out = Vec::new();
    for set in present {
        out.extend(set.iter().filter(|&m| seen.insert(m)));
    }
    out
}

/// The members of the first set in none of the others, by whichever of
/// Redis's two algorithms its cost estimate picks: testing each member of
/// the first set against the others (O(N*M)), or removing every member of
/// the others from a copy of the first (O(total)).
fn difference<'s>(sets: &[Option<&'s Set>]) -> Vec<Member<'s>> {
    let Some(first) = sets[0] else { return Vec::new() };
    let mut others: SmallVec<[&Set; 4]> = sets[1..].iter().flatten().copied().collect();
    if others.iter().any(|&s| std::ptr::eq(s, first)) {
        return Vec::new();
    }
    let algo_one_work = first.len().saturating_mul(1 + others.len()) / 2;
    let algo_two_work = first.len() + others.iter().map(|s| s.len()).sum::<usize>();
    if algo_one_work <= algo_two_work {
        // Biggest first: the likeliest to hold a member.
        others.sort_by_key(|s| std::cmp::Reverse(s.len()));
        return first.iter().filter(|&m| !others.iter().any(|s| s.contains_member(m))).collect();
    }
    let mut left: HashSet<Member<'s>, foldhash::fast::RandomState> = first.iter().collect();
    for set in others {
        for member in set.iter() {
            left.remove(&member);
        }
        if left.is_empty() {
            break;
        }
    }
    left.into_iter().collect()
}

/// Stores the result of a STORE command at `dst`, replacing whatever was
/// there (its TTL too), or deletes `dst` when the result is empty; replies
/// with the result's size. `event` is the command's (`sinterstore`...).
fn store(ctx: &mut Ctx<'_>, dst: &[u8], set: Set, event: &str) {
    let lazy = ctx.server.config.read().lazyfree_lazy_server_del;
    let now = ctx.now_ms;
    let len = set.len();
    let db = ctx.dbs.of(dst);
    if len > 0 {
        // An overwrite, not a new key (a delete and insert would be).
        let old = db.set_key(dst, Value::Set(set), now, ctx.lru_s);
        ctx.wrote(1);
        ctx.notify(notify::SET, event, dst);
        if let Some(old) = old.filter(|_| lazy) {
            crate::lazyfree::drop_overwritten(old);
        }
    } else if let Some(old) = db.remove(dst) {
        // Its dbDelete of an empty result does not look up: even a key
        // past its time goes as `del`.
        ctx.wrote(1);
        ctx.notify(notify::GENERIC, "del", dst);
        release(old, lazy);
    }
    ctx.out.int(len as i64);
}

fn sinter(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    with_sets(ctx, &argv[1..], |out, sets| {
        let mut members = Vec::new();
        for_each_common(sets, |m| {
            members.push(m);
            true
        });
        out.set(members.len());
        members.into_iter().for_each(|m| reply_member(out, m));
    })
}

fn sinterstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let max = ctx.encoding_limits().set_max_intset_entries;
    let result = with_sets(ctx, &argv[2..], |_, sets| {
        let mut members = Vec::new();
        for_each_common(sets, |m| {
            members.push(m);
            true
        });
        Set::from_members(members, max)
    })?;
    store(ctx, argv[1], result, "sinterstore");
    Ok(())
}

/// SINTERCARD's keys: `numkeys` of them after it, when `numkeys` is valid
/// (else none: the command fails before touching a key).
fn sintercard_keys(argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    let numkeys = argv.get(1).and_then(|a| parse_canonical_i64(a)).and_then(|n| usize::try_from(n).ok());
    match numkeys {
        Some(n) if n >= 1 && n <= argv.len().saturating_sub(2) => (2..2 + n).collect(),
        _ => SmallVec::new(),
    }
}

fn sintercard(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let numkeys = match parse_canonical_i64(argv[1]) {
        Some(n) if n >= 1 => n as usize,
        _ => return Err(CmdError::other("ERR numkeys should be greater than 0")),
    };
    if numkeys > argv.len() - 2 {
        return Err(CmdError::other("ERR Number of keys can't be greater than number of args"));
    }
    let mut limit = 0usize;
    let mut options = argv[2 + numkeys..].iter();
    while let Some(option) = options.next() {
        match options.next() {
            Some(value) if option.eq_ignore_ascii_case(b"limit") => {
                limit = match parse_canonical_i64(value) {
                    Some(n) if n >= 0 => n as usize,
                    _ => return Err(CmdError::other("ERR LIMIT can't be negative")),
                };
            }
            _ => return Err(CmdError::Syntax),
        }
    }
    with_sets(ctx, &argv[2..2 + numkeys], |out, sets| {
        let mut cardinality = 0usize;
        for_each_common(sets, |_| {
            cardinality += 1;
            limit == 0 || cardinality < limit
        });
        out.int(cardinality as i64);
    })
}

fn sunion(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let max = ctx.encoding_limits().set_max_intset_entries;
    with_sets(ctx, &argv[1..], |out, sets| reply_result(out, union(sets), max))
}

fn sunionstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let max = ctx.encoding_limits().set_max_intset_entries;
    let result = with_sets(ctx, &argv[2..], |_, sets| Set::from_members(union(sets), max))?;
    store(ctx, argv[1], result, "sunionstore");
    Ok(())
}

fn sdiff(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let max = ctx.encoding_limits().set_max_intset_entries;
    with_sets(ctx, &argv[1..], |out, sets| reply_result(out, difference(sets), max))
}

fn sdiffstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let max = ctx.encoding_limits().set_max_intset_entries;
    let result = with_sets(ctx, &argv[2..], |_, sets| Set::from_members(difference(sets), max))?;
    store(ctx, argv[1], result, "sdiffstore");
    Ok(())
}

// ---------------------------------------------------------------------------
// SSCAN.

fn sscan(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let cursor = parse_cursor(argv[2])?;
    let (stats, now) = (ctx.stats, ctx.now_ms);
    let Some(set) = read_set(stats, ctx.dbs.of(argv[1]), argv[1], now)? else {
        ctx.out.array(2);
        ctx.out.bulk(b"0");
        ctx.out.array(0);
        return Ok(());
    };
    let (count, pattern) = parse_member_scan_options(&argv[3..])?;
    // Redis's scanGenericCommand: scan until `count` members were seen or
    // ten times as many buckets visited; the pattern filters afterwards
    // (here as they come, counting what it drops).
    let mut seen = 0usize;
    let mut found: Vec<Vec<u8>> = Vec::new();
    let mut cursor = cursor;
    let mut iterations = count.saturating_mul(10);
    let mut scratch = itoa::Buffer::new();
    loop {
        cursor = set.scan(cursor, |m| {
            seen += 1;
            let text = m.as_bytes(&mut scratch);
            if pattern.is_none_or(|p| crate::glob::matches(p, text, false)) {
                found.push(text.to_vec());
            }
        });
        if cursor == 0 || iterations == 0 {
            break;
        }
        iterations -= 1;
        if seen >= count {
            break;
        }
    }
    ctx.out.array(2);
    ctx.out.bulk(itoa::Buffer::new().format(cursor).as_bytes());
    ctx.out.array(found.len());
    found.iter().for_each(|m| ctx.out.bulk(m));
    Ok(())
}
