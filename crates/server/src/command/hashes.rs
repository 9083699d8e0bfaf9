//! Hash commands: HSET, HGET and the rest of Redis 7.0's hash group.
//!
//! Each handler checks its arguments in Redis 7.0's order (`t_hash.c`):
//! HINCRBY and HINCRBYFLOAT parse the increment before they look the key
//! up, HRANDFIELD parses its count first, HSCAN parses the cursor, then
//! looks the key up, and parses its options only for an existing hash.
//! Reads count keyspace hits and misses; write lookups do not, as in
//! Redis.
//!
//! A hash never stays empty: HDEL of its last field deletes the key. The
//! encoding (listpack or table) is the engine's business, driven by the
//! `hash-max-listpack-*` limits as configured when the command runs.

use std::collections::HashSet;

use keel_engine::{Db, EncodingLimits, Entry, Hash, Value};
use rand::Rng;

use super::keys::{parse_cursor, parse_member_scan_options};
use super::parse::{eq, i64_arg};
use super::strings::incr_float_error;
use super::strings::long_double::{IncrFloatError, LongDouble, Parsed};
use super::keyspec::*;
use super::{cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, KEY1};
use crate::notify;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("hset", -4, WRITE | DENYOOM | FAST, KEY1, "hash", hset).doc("Set the string value of a hash field", "2.0.0"),
    cmd("hsetnx", 4, WRITE | DENYOOM | FAST, KEY1, "hash", hsetnx)
        .doc("Set the value of a hash field, only if the field does not exist", "2.0.0")
        .specs(&[key_at(1, RW | INSERT)]),
    cmd("hget", 3, READONLY | FAST, KEY1, "hash", hget).doc("Get the value of a hash field", "2.0.0"),
    cmd("hmget", -3, READONLY | FAST, KEY1, "hash", hmget)
        .doc("Get the values of all the given hash fields", "2.0.0"),
    cmd("hmset", -4, WRITE | DENYOOM | FAST, KEY1, "hash", hmset)
        .doc("Set multiple hash fields to multiple values", "2.0.0"),
    cmd("hdel", -3, WRITE | FAST, KEY1, "hash", hdel)
        .doc("Delete one or more hash fields", "2.0.0")
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("hlen", 2, READONLY | FAST, KEY1, "hash", hlen)
        .doc("Get the number of fields in a hash", "2.0.0")
        .specs(&[key_at(1, RO)]),
    cmd("hstrlen", 3, READONLY | FAST, KEY1, "hash", hstrlen)
        .doc("Get the length of the value of a hash field", "3.2.0")
        .specs(&[key_at(1, RO)]),
    cmd("hexists", 3, READONLY | FAST, KEY1, "hash", hexists)
        .doc("Determine if a hash field exists", "2.0.0")
        .specs(&[key_at(1, RO)]),
    cmd("hkeys", 2, READONLY, KEY1, "hash", hkeys)
        .doc("Get all the fields in a hash", "2.0.0")
        .tips(&["nondeterministic_output_order"]),
    cmd("hvals", 2, READONLY, KEY1, "hash", hvals)
        .doc("Get all the values in a hash", "2.0.0")
        .tips(&["nondeterministic_output_order"]),
    cmd("hgetall", 2, READONLY, KEY1, "hash", hgetall)
        .doc("Get all the fields and values in a hash", "2.0.0")
        .tips(&["nondeterministic_output_order"]),
    cmd("hincrby", 4, WRITE | DENYOOM | FAST, KEY1, "hash", hincrby)
        .doc("Increment the integer value of a hash field by the given number", "2.0.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("hincrbyfloat", 4, WRITE | DENYOOM | FAST, KEY1, "hash", hincrbyfloat)
        .doc("Increment the float value of a hash field by the given amount", "2.6.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("hrandfield", -2, READONLY, KEY1, "hash", hrandfield)
        .doc("Get one or multiple random fields from a hash", "6.2.0")
        .tips(&["nondeterministic_output"]),
    cmd("hscan", -3, READONLY, KEY1, "hash", hscan)
        .doc("Incrementally iterate hash fields and associated values", "2.8.0")
        .tips(&["nondeterministic_output"]),
];

/// The hash in `entry`, or WRONGTYPE if the key holds another type.
fn hash_of(entry: Option<&Entry>) -> Result<Option<&Hash>, CmdError> {
    match entry.map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Hash(h)) => Ok(Some(h)),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn hash_mut(entry: Option<&mut Entry>) -> Result<Option<&mut Hash>, CmdError> {
    match entry.map(|e| &mut e.value) {
        None => Ok(None),
        Some(Value::Hash(h)) => Ok(Some(h)),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Redis's `lookupKeyRead` for a hash: expires the key if due, counts a
/// hit or a miss, checks the type.
fn read_hash<'d>(
    stats: &crate::server::WorkerStats,
    db: &'d mut Db,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'d Hash>, CmdError> {
    let entry = db.get(key, now_ms);
    stats.hit(entry.is_some());
    hash_of(entry)
}

/// Redis's `hashTypeLookupWriteOrCreate` followed by an edit: runs `edit`
/// on the hash at `key` (a new empty one when absent) and signals the key
/// when `edit` succeeds. A new hash is stored only then, so an error never
/// leaves an empty key behind. The caller counts the change (`ctx.wrote`).
fn edit_hash<T>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    edit: impl FnOnce(&mut Hash, &EncodingLimits) -> Result<T, CmdError>,
) -> Result<T, CmdError> {
    let limits = ctx.encoding_limits();
    let (now, lru) = (ctx.now_ms, ctx.lru_s);
    let db = ctx.dbs.of(key);
    if let Some(hash) = hash_mut(db.get_mut(key, now))? {
        let out = edit(hash, &limits)?;
        db.signal_modified(key);
        return Ok(out);
    }
    let mut hash = Hash::new();
    let out = edit(&mut hash, &limits)?;
    db.set(key, Value::Hash(hash), false, lru);
    Ok(out)
}

/// HSET and HMSET: the pairs after the key, or the arity error Redis
/// answers for an odd count.
fn set_pairs(ctx: &mut Ctx<'_>, argv: &[&[u8]], name: &str) -> Result<usize, CmdError> {
    if argv.len() % 2 == 1 {
        return Err(CmdError::Arity(name.into()));
    }
    let created = edit_hash(ctx, argv[1], |hash, limits| {
        Ok(argv[2..].chunks(2).filter(|pair| hash.insert(pair[0], pair[1], limits)).count())
    })?;
    // Redis counts every pair, new or updated.
    ctx.wrote((argv.len() as u64 - 2) / 2);
    ctx.notify(notify::HASH, "hset", argv[1]);
    Ok(created)
}

fn hset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let created = set_pairs(ctx, argv, "hset")?;
    ctx.out.int(created as i64);
    Ok(())
}

fn hmset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    set_pairs(ctx, argv, "hmset")?;
    ctx.out.ok();
    Ok(())
}

fn hsetnx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (key, field) = (argv[1], argv[2]);
    let now = ctx.now_ms;
    // An existing field changes nothing: no conversion, no signal.
    if hash_of(ctx.dbs.of(key).get(key, now))?.is_some_and(|h| h.contains(field)) {
        ctx.out.int(0);
        return Ok(());
    }
    edit_hash(ctx, key, |hash, limits| Ok(hash.insert(field, argv[3], limits)))?;
    ctx.wrote(1);
    ctx.notify(notify::HASH, "hset", key);
    ctx.out.int(1);
    Ok(())
}

fn hget(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    match read_hash(ctx.stats, db, argv[1], ctx.now_ms)?.and_then(|h| h.get(argv[2])) {
        Some(v) => ctx.out.bulk(v),
        None => ctx.out.null(),
    }
    Ok(())
}

fn hmget(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let hash = read_hash(ctx.stats, db, argv[1], ctx.now_ms)?;
    ctx.out.array(argv.len() - 2);
    for field in &argv[2..] {
        match hash.and_then(|h| h.get(field)) {
            Some(v) => ctx.out.bulk(v),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

fn hdel(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let db = ctx.dbs.of(key);
    let Some(hash) = hash_mut(db.get_mut(key, ctx.now_ms))? else {
        ctx.out.int(0);
        return Ok(());
    };
    let mut deleted = 0;
    for field in &argv[2..] {
        if hash.remove(field) {
            deleted += 1;
            if hash.is_empty() {
                break;
            }
        }
    }
    let emptied = hash.is_empty();
    if emptied {
        db.remove(key);
    } else if deleted > 0 {
        db.signal_modified(key);
    }
    if deleted > 0 {
        ctx.wrote(deleted);
        ctx.notify_removal(notify::HASH, "hdel", key, emptied);
    }
    ctx.out.int(deleted as i64);
    Ok(())
}

fn hlen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let len = read_hash(ctx.stats, db, argv[1], ctx.now_ms)?.map_or(0, Hash::len);
    ctx.out.int(len as i64);
    Ok(())
}

fn hstrlen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let hash = read_hash(ctx.stats, db, argv[1], ctx.now_ms)?;
    let len = hash.and_then(|h| h.get(argv[2])).map_or(0, <[u8]>::len);
    ctx.out.int(len as i64);
    Ok(())
}

fn hexists(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let found = read_hash(ctx.stats, db, argv[1], ctx.now_ms)?.is_some_and(|h| h.contains(argv[2]));
    ctx.out.int(i64::from(found));
    Ok(())
}

/// What HKEYS, HVALS and HGETALL answer.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Part {
    Fields,
    Values,
    Both,
}

/// Redis's `genericHgetallCommand`: HGETALL is a map in RESP3 (an empty
/// one for a missing key), HKEYS and HVALS arrays.
fn get_all(ctx: &mut Ctx<'_>, argv: &[&[u8]], part: Part) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let hash = read_hash(ctx.stats, db, argv[1], ctx.now_ms)?;
    let len = hash.map_or(0, Hash::len);
    let out = &mut ctx.out;
    match part {
        Part::Both => out.map(len),
        Part::Fields | Part::Values => out.array(len),
    }
    for (field, value) in hash.into_iter().flat_map(Hash::iter) {
        if part != Part::Values {
            out.bulk(field);
        }
        if part != Part::Fields {
            out.bulk(value);
        }
    }
    Ok(())
}

fn hkeys(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    get_all(ctx, argv, Part::Fields)
}

fn hvals(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    get_all(ctx, argv, Part::Values)
}

fn hgetall(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    get_all(ctx, argv, Part::Both)
}

fn hincrby(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let incr = i64_arg(argv[3])?;
    let field = argv[2];
    let value = edit_hash(ctx, argv[1], |hash, limits| {
        let old = match hash.get(field) {
            None => 0,
            Some(v) => i64_arg(v).map_err(|_| CmdError::other("ERR hash value is not an integer"))?,
        };
        let new = old.checked_add(incr).ok_or(CmdError::Overflow)?;
        hash.insert(field, itoa::Buffer::new().format(new).as_bytes(), limits);
        Ok(new)
    })?;
    ctx.wrote(1);
    ctx.notify(notify::HASH, "hincrby", argv[1]);
    ctx.out.int(value);
    Ok(())
}

fn hincrbyfloat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let incr = match LongDouble::parse(argv[3]) {
        None => return Err(CmdError::NotFloat),
        Some(Parsed::Infinite) => return Err(CmdError::other("ERR value is NaN or Infinity")),
        Some(Parsed::Finite(v)) => v,
    };
    let (key, field) = (argv[1], argv[2]);
    let text = edit_hash(ctx, key, |hash, limits| {
        let old = match hash.get(field).map(LongDouble::parse) {
            None => LongDouble::ZERO,
            Some(Some(Parsed::Finite(v))) => v,
            // inf + a finite increment is still infinite.
            Some(Some(Parsed::Infinite)) => return Err(incr_float_error(IncrFloatError::NanOrInfinity)),
            Some(None) => return Err(CmdError::other("ERR hash value is not a float")),
        };
        let sum = old.checked_add(incr).ok_or(incr_float_error(IncrFloatError::NanOrInfinity))?;
        let text = sum.to_human_string();
        hash.insert(field, text.as_bytes(), limits);
        Ok(text)
    })?;
    ctx.wrote(1);
    ctx.notify(notify::HASH, "hincrbyfloat", key);
    ctx.out.bulk(text.as_bytes());
    // Logged as the value it produced, as Redis propagates it, so that a
    // replay never depends on float formatting.
    ctx.propagate_as(vec![vec![b"HSET".to_vec(), key.to_vec(), field.to_vec(), text.into_bytes()]]);
    Ok(())
}

fn hrandfield(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if argv.len() >= 3 {
        let count = i64_arg(argv[2])?;
        if count == i64::MIN {
            return Err(CmdError::other(
                "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
            ));
        }
        let with_values = match argv.len() {
            3 => false,
            4 if eq(argv[3], "withvalues") => true,
            _ => return Err(CmdError::Syntax),
        };
        // Redis doubles the count for the reply's length.
        if with_values && !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
            return Err(CmdError::other("ERR value is out of range"));
        }
        return hrandfield_count(ctx, argv[1], count, with_values);
    }
    let db = ctx.dbs.of(argv[1]);
    let hash = read_hash(ctx.stats, db, argv[1], ctx.now_ms)?;
    match hash.and_then(|h| h.random_pair(&mut rand::thread_rng())) {
        Some((field, _)) => ctx.out.bulk(field),
        None => ctx.out.null(),
    }
    Ok(())
}

/// HRANDFIELD with a count, Redis's cases: a negative count (or 1) picks
/// that many with repetition; a count at least the size answers the whole
/// hash; a smaller one picks that many distinct fields.
fn hrandfield_count(ctx: &mut Ctx<'_>, key: &[u8], count: i64, with_values: bool) -> CmdResult {
    let db = ctx.dbs.of(key);
    let Some(hash) = read_hash(ctx.stats, db, key, ctx.now_ms)? else {
        ctx.out.array(0);
        return Ok(());
    };
    let out = &mut ctx.out;
    let resp3 = out.resp3;
    // RESP2 answers a flat array; RESP3 nests each pair WITHVALUES.
    let header = |out: &mut keel_protocol::ReplyWriter<'_>, n: usize| {
        out.array(if with_values && !resp3 { n * 2 } else { n });
    };
    let emit = |out: &mut keel_protocol::ReplyWriter<'_>, (field, value): (&[u8], &[u8])| {
        if with_values && resp3 {
            out.array(2);
        }
        out.bulk(field);
        if with_values {
            out.bulk(value);
        }
    };
    let wanted = count.unsigned_abs() as usize;
    let size = hash.len();
    let mut rng = rand::thread_rng();
    if wanted == 0 {
        header(out, 0);
    } else if count < 0 || wanted == 1 {
        header(out, wanted);
        match hash {
            Hash::Table(_) => {
                for _ in 0..wanted {
                    emit(out, hash.random_pair(&mut rng).expect("a stored hash is never empty"));
                }
            }
            // A listpack is walked once, not once per pick.
            Hash::Listpack(_) => {
                let pairs: Vec<(&[u8], &[u8])> = hash.iter().collect();
                for _ in 0..wanted {
                    emit(out, pairs[rng.gen_range(0..pairs.len())]);
                }
            }
        }
    } else if wanted >= size {
        header(out, size);
        hash.iter().for_each(|pair| emit(out, pair));
    } else if matches!(hash, Hash::Table(_)) && wanted * 3 <= size {
        // Few of many: draw until enough distinct ones (Redis's case 4).
        header(out, wanted);
        let mut seen: HashSet<&[u8]> = HashSet::with_capacity(wanted);
        while seen.len() < wanted {
            let pair = hash.random_pair(&mut rng).expect("a stored hash is never empty");
            if seen.insert(pair.0) {
                emit(out, pair);
            }
        }
    } else {
        // Most of them, or a listpack: sample positions, keep hash order.
        header(out, wanted);
        let mut picked = rand::seq::index::sample(&mut rng, size, wanted).into_vec();
        picked.sort_unstable();
        let mut picked = picked.into_iter().peekable();
        for (i, pair) in hash.iter().enumerate() {
            if picked.peek() == Some(&i) {
                picked.next();
                emit(out, pair);
            }
        }
    }
    Ok(())
}

fn hscan(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let cursor = parse_cursor(argv[2])?;
    let db = ctx.dbs.of(argv[1]);
    let Some(hash) = read_hash(ctx.stats, db, argv[1], ctx.now_ms)? else {
        ctx.out.array(2);
        ctx.out.bulk(b"0");
        ctx.out.array(0);
        return Ok(());
    };
    let (count, pattern) = parse_member_scan_options(&argv[3..])?;
    // Copies: a scan step's references last only for its callback. The
    // pattern filters after the step, as in Redis, so `seen` counts all.
    let mut found: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let seen = std::cell::Cell::new(0usize);
    let mut take = |f: &[u8], v: &[u8]| {
        seen.set(seen.get() + 1);
        if pattern.is_none_or(|p| crate::glob::matches(p, f, false)) {
            found.push((f.to_vec(), v.to_vec()));
        }
    };
    let next = match hash {
        Hash::Listpack(_) => hash.scan(cursor, take),
        Hash::Table(_) => {
            // Redis's loop: up to count*10 buckets, until `count` items
            // (a field and a value are two) are gathered.
            let mut cursor = cursor;
            let mut budget = count.saturating_mul(10);
            loop {
                cursor = hash.scan(cursor, &mut take);
                if cursor == 0 || budget == 0 || seen.get() * 2 >= count {
                    break cursor;
                }
                budget -= 1;
            }
        }
    };
    let out = &mut ctx.out;
    out.array(2);
    out.bulk(itoa::Buffer::new().format(next).as_bytes());
    out.array(found.len() * 2);
    for (field, value) in &found {
        out.bulk(field);
        out.bulk(value);
    }
    Ok(())
}
