//! List commands: pushes, pops, ranges, LMOVE and LMPOP (the blocking forms
//! are in `blocking`, which uses [`pop`], [`lmove`], [`parse_mpop`] and
//! [`parse_end`] from here).
//!
//! Each handler checks its arguments in Redis 7.0's order (`t_list.c`):
//! most parse their numbers before looking the key up, but LINDEX and LSET
//! look the key up (and check its type) first, and LPOS parses every
//! option before it looks. Write lookups do not count keyspace hits or
//! misses, as in Redis; LRANGE, LINDEX, LLEN and LPOS do.
//!
//! A list never stays empty: the command that takes its last element
//! deletes the key. A list is created with `list-max-listpack-size` as
//! configured at that moment, as Redis's `createQuicklistObject` does.

use keel_engine::{Db, Entry, List, Value};
use smallvec::SmallVec;

use super::parse::{eq, i64_arg};
use super::keyspec::*;
use super::{cmd, flags::*, range, CmdError, CmdResult, CommandSpec, Ctx, Keys, KEY1};
use crate::notify;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("lpush", -3, WRITE | DENYOOM | FAST, KEY1, "list", lpush)
        .doc("Prepend one or multiple elements to a list", "1.0.0")
        .specs(&[key_at(1, RW | INSERT)]),
    cmd("rpush", -3, WRITE | DENYOOM | FAST, KEY1, "list", rpush)
        .doc("Append one or multiple elements to a list", "1.0.0")
        .specs(&[key_at(1, RW | INSERT)]),
    cmd("lpushx", -3, WRITE | DENYOOM | FAST, KEY1, "list", lpushx)
        .doc("Prepend an element to a list, only if the list exists", "2.2.0")
        .specs(&[key_at(1, RW | INSERT)]),
    cmd("rpushx", -3, WRITE | DENYOOM | FAST, KEY1, "list", rpushx)
        .doc("Append an element to a list, only if the list exists", "2.2.0")
        .specs(&[key_at(1, RW | INSERT)]),
    cmd("lpop", -2, WRITE | FAST, KEY1, "list", lpop)
        .doc("Remove and get the first elements in a list", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | DELETE)]),
    cmd("rpop", -2, WRITE | FAST, KEY1, "list", rpop)
        .doc("Remove and get the last elements in a list", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | DELETE)]),
    cmd("lrange", 4, READONLY, KEY1, "list", lrange)
        .doc("Get a range of elements from a list", "1.0.0"),
    cmd("lindex", 3, READONLY, KEY1, "list", lindex)
        .doc("Get an element from a list by its index", "1.0.0"),
    cmd("lset", 4, WRITE | DENYOOM, KEY1, "list", lset)
        .doc("Set the value of an element in a list by its index", "1.0.0"),
    cmd("llen", 2, READONLY | FAST, KEY1, "list", llen)
        .doc("Get the length of a list", "1.0.0")
        .specs(&[key_at(1, RO)]),
    cmd("lrem", 4, WRITE, KEY1, "list", lrem)
        .doc("Remove elements from a list", "1.0.0")
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("ltrim", 4, WRITE, KEY1, "list", ltrim)
        .doc("Trim a list to the specified range", "1.0.0")
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("linsert", 5, WRITE | DENYOOM, KEY1, "list", linsert)
        .doc("Insert an element before or after another element in a list", "2.2.0")
        .specs(&[key_at(1, RW | INSERT)]),
    cmd("lpos", -3, READONLY, KEY1, "list", lpos)
        .doc("Return the index of matching elements on a list", "6.0.6"),
    cmd("lmove", 5, WRITE | DENYOOM, range(1, 2, 1), "list", lmove_command)
        .doc("Pop an element from a list, push it to another list and return it", "6.2.0")
        .specs(&[key_at(1, RW | ACCESS | DELETE), key_at(2, RW | INSERT)]),
    cmd("rpoplpush", 3, WRITE | DENYOOM, range(1, 2, 1), "list", rpoplpush)
        .doc("Remove the last element in a list, prepend it to another list and return it", "1.2.0")
        .specs(&[key_at(1, RW | ACCESS | DELETE), key_at(2, RW | INSERT)]),
    cmd("lmpop", -4, WRITE, Keys::Custom(lmpop_keys), "list", lmpop)
        .doc("Pop elements from a list", "7.0.0")
        .specs(&[ks(RW | ACCESS | DELETE, index(1), keynum(0, 1, 1))]),
];

/// Which end of a list a command works on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum End {
    Left,
    Right,
}

/// LEFT or RIGHT, case-insensitively (Redis's syntax error otherwise).
pub(crate) fn parse_end(arg: &[u8]) -> Result<End, CmdError> {
    if eq(arg, "left") {
        Ok(End::Left)
    } else if eq(arg, "right") {
        Ok(End::Right)
    } else {
        Err(CmdError::Syntax)
    }
}

/// The list in `entry`, or WRONGTYPE if the key holds another type.
fn list_of(entry: Option<&Entry>) -> Result<Option<&List>, CmdError> {
    match entry.map(|e| &e.value) {
        None => Ok(None),
        Some(Value::List(l)) => Ok(Some(l)),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn list_mut(entry: Option<&mut Entry>) -> Result<Option<&mut List>, CmdError> {
    match entry.map(|e| &mut e.value) {
        None => Ok(None),
        Some(Value::List(l)) => Ok(Some(l)),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Redis's `lookupKeyRead` for a list: expires the key if due, counts a
/// hit or a miss, checks the type.
fn read_list<'d>(
    stats: &crate::server::WorkerStats,
    db: &'d mut Db,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'d List>, CmdError> {
    let entry = db.get(key, now_ms);
    stats.hit(entry.is_some());
    list_of(entry)
}

fn push_end(list: &mut List, end: End, data: &[u8]) {
    match end {
        End::Left => list.push_front(data),
        End::Right => list.push_back(data),
    }
}

fn pop_end(list: &mut List, end: End) -> Option<Vec<u8>> {
    match end {
        End::Left => list.pop_front(),
        End::Right => list.pop_back(),
    }
}

fn push_event(end: End) -> &'static str {
    if end == End::Left { "lpush" } else { "rpush" }
}

fn pop_event(end: End) -> &'static str {
    if end == End::Left { "lpop" } else { "rpop" }
}

/// Appends `items` at `end` of the list at `key`, creating it unless
/// `only_existing` (the X forms). Returns the new length, or None when the
/// key is absent and `only_existing`.
fn push_items(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    end: End,
    items: &[&[u8]],
    only_existing: bool,
) -> Result<Option<usize>, CmdError> {
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    if let Some(list) = list_mut(db.get_mut(key, now))? {
        items.iter().for_each(|v| push_end(list, end, v));
        let len = list.len();
        db.signal_modified(key);
        ctx.wrote(items.len() as u64);
        ctx.notify(notify::LIST, push_event(end), key);
        return Ok(Some(len));
    }
    if only_existing {
        return Ok(None);
    }
    let mut list = List::new(ctx.encoding_limits().list_max_listpack_size);
    items.iter().for_each(|v| push_end(&mut list, end, v));
    let len = list.len();
    // Creating the key wakes the clients blocked on it.
    ctx.dbs.of(key).set(key, Value::List(list), false, ctx.lru_s);
    ctx.wrote(items.len() as u64);
    ctx.notify(notify::LIST, push_event(end), key);
    Ok(Some(len))
}

fn push_command(ctx: &mut Ctx<'_>, argv: &[&[u8]], end: End, only_existing: bool) -> CmdResult {
    let len = push_items(ctx, argv[1], end, &argv[2..], only_existing)?;
    ctx.out.int(len.unwrap_or(0) as i64);
    Ok(())
}

fn lpush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    push_command(ctx, argv, End::Left, false)
}

fn rpush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    push_command(ctx, argv, End::Right, false)
}

fn lpushx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    push_command(ctx, argv, End::Left, true)
}

fn rpushx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    push_command(ctx, argv, End::Right, true)
}

/// Pops up to `count` elements from `end` of the list at `key` (selected
/// db), in pop order; removes the key when emptied; calls `ctx.wrote`
/// and notifies as Redis's `listElementsRemoved`.
/// Ok(None) when the key is absent, Err(WrongType) when not a list.
/// `count == 0` on a list pops nothing and changes nothing.
pub(crate) fn pop(ctx: &mut Ctx<'_>, key: &[u8], end: End, count: usize) -> Result<Option<Vec<Vec<u8>>>, CmdError> {
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    let Some(list) = list_mut(db.get_mut(key, now))? else { return Ok(None) };
    let items = match count {
        0 => return Ok(Some(Vec::new())),
        1 => pop_end(list, end).into_iter().collect(),
        n => list.pop_many(n, end == End::Right),
    };
    let emptied = list.is_empty();
    if emptied {
        db.remove(key);
    } else {
        db.signal_modified(key);
    }
    ctx.wrote(items.len() as u64);
    ctx.notify_removal(notify::LIST, pop_event(end), key, emptied);
    Ok(Some(items))
}

fn pop_command(ctx: &mut Ctx<'_>, argv: &[&[u8]], end: End) -> CmdResult {
    if argv.len() > 3 {
        let name = if end == End::Left { "lpop" } else { "rpop" };
        return Err(CmdError::Arity(name.into()));
    }
    let count = match argv.get(2) {
        Some(arg) => Some(positive(arg, "ERR value is out of range, must be positive")?),
        None => None,
    };
    let popped = pop(ctx, argv[1], end, count.unwrap_or(1))?;
    let out = &mut ctx.out;
    match (popped, count) {
        (None, Some(_)) => out.null_array(),
        (None, None) => out.null(),
        (Some(items), Some(_)) => {
            out.array(items.len());
            items.iter().for_each(|v| out.bulk(v));
        }
        (Some(items), None) => out.bulk(&items[0]),
    }
    Ok(())
}

fn lpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    pop_command(ctx, argv, End::Left)
}

fn rpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    pop_command(ctx, argv, End::Right)
}

/// Redis's `getPositiveLongFromObjectOrReply` with a message: `msg` for a
/// non-integer and for a negative number alike.
fn positive(arg: &[u8], msg: &str) -> Result<usize, CmdError> {
    match i64_arg(arg) {
        Ok(n) if n >= 0 => Ok(n as usize),
        _ => Err(CmdError::other(msg)),
    }
}

/// The first index and the number of elements of Redis's inclusive
/// `start..=end` range over a list of `len` (negative indexes count from
/// the end); None when empty.
fn range_of(len: usize, start: i64, end: i64) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    let end = end.min(len - 1);
    Some((start as usize, (end - start + 1) as usize))
}

fn lrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let start = i64_arg(argv[2])?;
    let end = i64_arg(argv[3])?;
    let db = ctx.dbs.of(argv[1]);
    let Some(list) = read_list(ctx.stats, db, argv[1], ctx.now_ms)? else {
        ctx.out.array(0);
        return Ok(());
    };
    match range_of(list.len(), start, end) {
        None => ctx.out.array(0),
        Some((first, count)) => {
            ctx.out.array(count);
            list.iter_from(first).take(count).for_each(|v| ctx.out.bulk(v));
        }
    }
    Ok(())
}

fn lindex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let Some(list) = read_list(ctx.stats, db, argv[1], ctx.now_ms)? else {
        ctx.out.null();
        return Ok(());
    };
    match list.get(i64_arg(argv[2])?) {
        Some(v) => ctx.out.bulk(v),
        None => ctx.out.null(),
    }
    Ok(())
}

fn lset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let db = ctx.dbs.of(key);
    let Some(list) = list_mut(db.get_mut(key, ctx.now_ms))? else { return Err(CmdError::NoSuchKey) };
    let index = i64_arg(argv[2])?;
    if !list.set(index, argv[3]) {
        return Err(CmdError::other("ERR index out of range"));
    }
    db.signal_modified(key);
    ctx.wrote(1);
    ctx.notify(notify::LIST, "lset", key);
    ctx.out.ok();
    Ok(())
}

fn llen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let len = read_list(ctx.stats, db, argv[1], ctx.now_ms)?.map_or(0, List::len);
    ctx.out.int(len as i64);
    Ok(())
}

fn lrem(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let count = i64_arg(argv[2])?;
    let db = ctx.dbs.of(key);
    let Some(list) = list_mut(db.get_mut(key, ctx.now_ms))? else {
        ctx.out.int(0);
        return Ok(());
    };
    let removed = list.remove(argv[3], count);
    let emptied = list.is_empty();
    if emptied {
        db.remove(key);
    } else if removed > 0 {
        db.signal_modified(key);
    }
    // A stored list is never empty: emptied means something was removed.
    if removed > 0 {
        ctx.wrote(removed as u64);
        ctx.notify_removal(notify::LIST, "lrem", key, emptied);
    }
    ctx.out.int(removed as i64);
    Ok(())
}

fn ltrim(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let start = i64_arg(argv[2])?;
    let end = i64_arg(argv[3])?;
    let db = ctx.dbs.of(key);
    let Some(list) = list_mut(db.get_mut(key, ctx.now_ms))? else {
        ctx.out.ok();
        return Ok(());
    };
    let len = list.len();
    let (ltrim, rtrim) = match range_of(len, start, end) {
        None => (len, 0),
        Some((first, count)) => (first, len - first - count),
    };
    list.remove_range(0, ltrim);
    list.remove_range(list.len() - rtrim, rtrim);
    // Redis signals and notifies even when nothing was trimmed.
    let emptied = list.is_empty();
    if emptied {
        db.remove(key);
    } else {
        db.signal_modified(key);
    }
    if ltrim + rtrim > 0 {
        ctx.wrote((ltrim + rtrim) as u64);
    }
    ctx.notify_removal(notify::LIST, "ltrim", key, emptied);
    ctx.out.ok();
    Ok(())
}

fn linsert(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let after = if eq(argv[2], "after") {
        true
    } else if eq(argv[2], "before") {
        false
    } else {
        return Err(CmdError::Syntax);
    };
    let db = ctx.dbs.of(key);
    let Some(list) = list_mut(db.get_mut(key, ctx.now_ms))? else {
        ctx.out.int(0);
        return Ok(());
    };
    if !list.insert(argv[3], argv[4], after) {
        ctx.out.int(-1);
        return Ok(());
    }
    let len = list.len();
    db.signal_modified(key);
    ctx.wrote(1);
    ctx.notify(notify::LIST, "linsert", key);
    ctx.out.int(len as i64);
    Ok(())
}

fn lpos(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let element = argv[2];
    let mut rank: i64 = 1;
    let mut count: Option<i64> = None;
    let mut maxlen: usize = 0;
    let mut j = 3;
    while j < argv.len() {
        let more = j + 1 < argv.len();
        if eq(argv[j], "rank") && more {
            j += 1;
            rank = i64_arg(argv[j])?;
            if rank == 0 {
                return Err(CmdError::other(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... \
                     or use negative to start from the end of the list",
                ));
            }
        } else if eq(argv[j], "count") && more {
            j += 1;
            count = Some(positive(argv[j], "ERR COUNT can't be negative")? as i64);
        } else if eq(argv[j], "maxlen") && more {
            j += 1;
            maxlen = positive(argv[j], "ERR MAXLEN can't be negative")?;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    // A negative rank searches from the tail. Redis negates a long without
    // checking: RANK -9223372036854775808 stays negative, so every match
    // "reaches" it. The wrapping arithmetic below reproduces that.
    let from_tail = rank < 0;
    if from_tail {
        rank = rank.wrapping_neg();
    }
    let db = ctx.dbs.of(argv[1]);
    let Some(list) = read_list(ctx.stats, db, argv[1], ctx.now_ms)? else {
        match count {
            Some(_) => ctx.out.array(0),
            None => ctx.out.null(),
        }
        return Ok(());
    };
    let len = list.len();
    let scan = if maxlen == 0 { len } else { maxlen.min(len) };
    let hits = |(i, v): (usize, &[u8])| (v == element).then_some(i);
    let found: Box<dyn Iterator<Item = usize> + '_> = if from_tail {
        Box::new(list.iter().rev().take(scan).enumerate().filter_map(hits).map(move |i| len - i - 1))
    } else {
        Box::new(list.iter().take(scan).enumerate().filter_map(hits))
    };
    let mut matches: i64 = 0;
    let mut positions: Vec<usize> = Vec::new();
    for index in found {
        matches += 1;
        if matches >= rank {
            positions.push(index);
            match count {
                None => break,
                Some(c) if c != 0 && matches.wrapping_sub(rank).wrapping_add(1) >= c => break,
                Some(_) => {}
            }
        }
    }
    match (count, positions.first()) {
        (Some(_), _) => {
            ctx.out.array(positions.len());
            positions.iter().for_each(|&i| ctx.out.int(i as i64));
        }
        (None, Some(&i)) => ctx.out.int(i as i64),
        (None, None) => ctx.out.null(),
    }
    Ok(())
}

/// LMOVE's effect: pops from `from` of `src` and pushes at `to` of `dst`
/// (which may be the same key, and may live on another shard). Ok(None)
/// when the source is absent; the types of both keys are checked before
/// anything changes, as Redis does. Creating `dst` wakes its blocked
/// clients. Notifies the push on `dst`, then the pop (and "del") on `src`,
/// in Redis's order.
pub(crate) fn lmove(ctx: &mut Ctx<'_>, src: &[u8], dst: &[u8], from: End, to: End) -> Result<Option<Vec<u8>>, CmdError> {
    let now = ctx.now_ms;
    if src == dst {
        // One list: a rotation, the key (and its TTL) stays.
        let db = ctx.dbs.of(src);
        let Some(list) = list_mut(db.get_mut(src, now))? else { return Ok(None) };
        let value = pop_end(list, from).expect("a stored list is never empty");
        push_end(list, to, &value);
        db.signal_modified(src);
        ctx.wrote(1);
        ctx.notify(notify::LIST, push_event(to), dst);
        ctx.notify(notify::LIST, pop_event(from), src);
        return Ok(Some(value));
    }
    if list_of(ctx.dbs.of(src).get(src, now))?.is_none() {
        return Ok(None);
    }
    let dst_exists = list_of(ctx.dbs.of(dst).get(dst, now))?.is_some();
    let db = ctx.dbs.of(src);
    let list = list_mut(db.get_mut(src, now))?.expect("looked up above");
    let value = pop_end(list, from).expect("a stored list is never empty");
    let emptied = list.is_empty();
    if emptied {
        db.remove(src);
    } else {
        db.signal_modified(src);
    }
    if dst_exists {
        let db = ctx.dbs.of(dst);
        let list = list_mut(db.get_mut(dst, now))?.expect("looked up above");
        push_end(list, to, &value);
        db.signal_modified(dst);
    } else {
        let mut list = List::new(ctx.encoding_limits().list_max_listpack_size);
        push_end(&mut list, to, &value);
        ctx.dbs.of(dst).set(dst, Value::List(list), false, ctx.lru_s);
    }
    ctx.wrote(1);
    ctx.notify(notify::LIST, push_event(to), dst);
    ctx.notify_removal(notify::LIST, pop_event(from), src, emptied);
    Ok(Some(value))
}

fn reply_moved(ctx: &mut Ctx<'_>, moved: Option<Vec<u8>>) {
    match moved {
        Some(v) => ctx.out.bulk(&v),
        None => ctx.out.null(),
    }
}

fn lmove_command(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let from = parse_end(argv[3])?;
    let to = parse_end(argv[4])?;
    let moved = lmove(ctx, argv[1], argv[2], from, to)?;
    reply_moved(ctx, moved);
    Ok(())
}

fn rpoplpush(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let moved = lmove(ctx, argv[1], argv[2], End::Right, End::Left)?;
    reply_moved(ctx, moved);
    Ok(())
}

/// Parses LMPOP's arguments after the command name (`numkeys key...
/// LEFT|RIGHT [COUNT count]`) with Redis's checks and error texts, in its
/// order; returns (numkeys, end, count), count 1 when not given.
pub(crate) fn parse_mpop(args: &[&[u8]]) -> Result<(usize, End, usize), CmdError> {
    let numkeys = match args.first().map(|a| i64_arg(a)) {
        Some(Ok(n)) if n > 0 => n as usize,
        _ => return Err(CmdError::other("ERR numkeys should be greater than 0")),
    };
    if numkeys >= args.len() - 1 {
        return Err(CmdError::Syntax);
    }
    let where_at = numkeys + 1;
    let end = parse_end(args[where_at])?;
    let mut count = None;
    let mut j = where_at + 1;
    while j < args.len() {
        if count.is_none() && eq(args[j], "count") && j + 1 < args.len() {
            j += 1;
            count = match i64_arg(args[j]) {
                Ok(n) if n > 0 => Some(n as usize),
                _ => return Err(CmdError::other("ERR count should be greater than 0")),
            };
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok((numkeys, end, count.unwrap_or(1)))
}

/// LMPOP's keys: `numkeys` of them after argument 1 (none when numkeys is
/// not a positive integer; the handler then answers the error).
fn lmpop_keys(argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    match argv.get(1).map(|a| i64_arg(a)) {
        Some(Ok(n)) if n > 0 => (2..argv.len()).take(n as usize).collect(),
        _ => SmallVec::new(),
    }
}

fn lmpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (numkeys, end, count) = parse_mpop(&argv[1..])?;
    for &key in &argv[2..2 + numkeys] {
        let Some(items) = pop(ctx, key, end, count)? else { continue };
        let out = &mut ctx.out;
        out.array(2);
        out.bulk(key);
        out.array(items.len());
        items.iter().for_each(|v| out.bulk(v));
        // Replayed as the pop it made, as Redis propagates it.
        let name: &[u8] = if end == End::Left { b"LPOP" } else { b"RPOP" };
        let n = items.len().to_string().into_bytes();
        ctx.propagate_as(vec![vec![name.to_vec(), key.to_vec(), n]]);
        return Ok(());
    }
    ctx.out.null_array();
    Ok(())
}
