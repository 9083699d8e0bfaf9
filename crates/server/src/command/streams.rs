//! Stream commands: XADD, XRANGE, XREAD, the consumer groups (XGROUP,
//! XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM) and XINFO, as Redis
//! 7.0's `t_stream.c` has them: its argument order, errors and replies.
//!
//! What reaches the journal and replicas is what Redis propagates: XADD
//! with the ID it got and an approximate trim (`~`) as the exact one it
//! amounted to (`MAXLEN = <length>`, `MINID = <first id>`); XREADGROUP,
//! XCLAIM and XAUTOCLAIM as an XCLAIM ... FORCE JUSTID LASTID per entry
//! they hand out or drop, and an XGROUP SETID or CREATECONSUMER where the
//! group's position or a consumer changed without one. Replaying them
//! gives the same stream, groups and pending entries whatever the clock.
//!
//! Blocking XREAD and XREADGROUP wait through `crate::blocking`: XADD
//! (and the key's deletion, for XREADGROUP, which then answers Redis's
//! UNBLOCKED error) makes the key ready, and the waiter's command runs
//! again narrowed to that key, `$` resolved to the ID it blocked at.

use keel_engine::stream::{AddError, Consumer, Group, Pending, StreamEntry, StreamId, Trim, ENTRIES_READ_UNKNOWN};
use keel_engine::{Db, Entry, Stream, Value};
use keel_protocol::ReplyWriter;
use smallvec::SmallVec;

use super::keyspec::*;
use super::parse::{eq, i64_arg};
use super::server::{container, reply_help};
use super::{acl, cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, Keys, KEY1};
use crate::notify;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("xadd", -5, WRITE | DENYOOM | FAST, KEY1, "stream", xadd)
        .doc("Appends a new entry to a stream", "5.0.0")
        .tips(&["nondeterministic_output"])
        .specs(&[key_at(1, RW | UPDATE).notes("UPDATE instead of INSERT because of the optional trimming feature")]),
    cmd("xlen", 2, READONLY | FAST, KEY1, "stream", xlen)
        .doc("Return the number of entries in a stream", "5.0.0")
        .specs(&[key_at(1, RO)]),
    cmd("xrange", -4, READONLY, KEY1, "stream", xrange)
        .doc("Return a range of elements in a stream, with IDs matching the specified IDs interval", "5.0.0"),
    cmd("xrevrange", -4, READONLY, KEY1, "stream", xrevrange).doc(
        "Return a range of elements in a stream, with IDs matching the specified IDs interval, in reverse order (from greater to smaller IDs) compared to XRANGE",
        "5.0.0",
    ),
    cmd("xdel", -3, WRITE | FAST, KEY1, "stream", xdel)
        .doc(
            "Removes the specified entries from the stream. Returns the number of items actually deleted, that may be different from the number of IDs passed in case certain IDs do not exist.",
            "5.0.0",
        )
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("xtrim", -4, WRITE, KEY1, "stream", xtrim)
        .doc("Trims the stream to (approximately if '~' is passed) a certain size", "5.0.0")
        .tips(&["nondeterministic_output"])
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("xread", -4, READONLY | BLOCKING, Keys::Custom(xread_keys), "stream", xread)
        .doc(
            "Return never seen elements in multiple streams, with IDs greater than the ones reported by the caller for each stream. Can block.",
            "5.0.0",
        )
        .specs(&[ks(RO | ACCESS, keyword("STREAMS", 1), span(-1, 1, 2))]),
    cmd("xsetid", -3, WRITE | DENYOOM | FAST, KEY1, "stream", xsetid)
        .doc("An internal command for replicating stream values", "5.0.0")
        .specs(&[key_at(1, RW | UPDATE)]),
    cmd("xgroup", -2, 0, Keys::None, "stream", container)
        .doc("A container for consumer groups commands", "5.0.0")
        .subs(XGROUP_SUBCOMMANDS)
        .acl(acl::NONE),
    cmd("xreadgroup", -7, WRITE | BLOCKING, Keys::Custom(xreadgroup_keys), "stream", xreadgroup)
        .doc(
            "Return new entries from a stream using a consumer group, or access the history of the pending entries for a given consumer. Can block.",
            "5.0.0",
        )
        .specs(&[ks(RO | ACCESS, keyword("STREAMS", 4), span(-1, 1, 2))]),
    cmd("xack", -4, WRITE | FAST, KEY1, "stream", xack)
        .doc(
            "Marks a pending message as correctly processed, effectively removing it from the pending entries list of the consumer group. Return value of the command is the number of messages successfully acknowledged, that is, the IDs we were actually able to resolve in the PEL.",
            "5.0.0",
        ),
    cmd("xpending", -3, READONLY, KEY1, "stream", xpending)
        .doc(
            "Return information and entries from a stream consumer group pending entries list, that are messages fetched but never acknowledged.",
            "5.0.0",
        )
        .tips(&["nondeterministic_output"]),
    cmd("xclaim", -6, WRITE | FAST, KEY1, "stream", xclaim)
        .doc(
            "Changes (or acquires) ownership of a message in a consumer group, as if the message was delivered to the specified consumer.",
            "5.0.0",
        )
        .tips(&["nondeterministic_output"]),
    cmd("xautoclaim", -6, WRITE | FAST, KEY1, "stream", xautoclaim)
        .doc(
            "Changes (or acquires) ownership of messages in a consumer group, as if the messages were delivered to the specified consumer.",
            "6.2.0",
        )
        .tips(&["nondeterministic_output"])
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("xinfo", -2, 0, Keys::None, "stream", container)
        .doc("A container for stream introspection commands", "5.0.0")
        .subs(XINFO_SUBCOMMANDS)
        .acl(acl::NONE),
];

const KEY2: Keys = Keys::Range { first: 2, last: 2, step: 1 };

static XGROUP_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("xgroup|create", -5, WRITE | DENYOOM, KEY2, "stream", xgroup_create)
        .doc("Create a consumer group.", "5.0.0")
        .specs(&[key_at(2, RW | INSERT)]),
    cmd("xgroup|setid", -5, WRITE, KEY2, "stream", xgroup_setid)
        .doc("Set a consumer group to an arbitrary last delivered ID value.", "5.0.0")
        .specs(&[key_at(2, RW | UPDATE)]),
    cmd("xgroup|destroy", 4, WRITE, KEY2, "stream", xgroup_destroy)
        .doc("Destroy a consumer group.", "5.0.0")
        .specs(&[key_at(2, RW | DELETE)]),
    cmd("xgroup|createconsumer", 5, WRITE | DENYOOM, KEY2, "stream", xgroup_createconsumer)
        .doc("Create a consumer in a consumer group.", "6.2.0")
        .specs(&[key_at(2, RW | INSERT)]),
    cmd("xgroup|delconsumer", 5, WRITE, KEY2, "stream", xgroup_delconsumer)
        .doc("Delete a consumer from a consumer group.", "5.0.0")
        .specs(&[key_at(2, RW | DELETE)]),
    cmd("xgroup|help", 2, LOADING | STALE, Keys::None, "stream", xgroup_help)
        .doc("Show helpful text about the different subcommands", "5.0.0"),
];

static XINFO_SUBCOMMANDS: &[CommandSpec] = &[
    cmd("xinfo|consumers", 4, READONLY, KEY2, "stream", xinfo_consumers)
        .doc("List the consumers in a consumer group", "5.0.0")
        .tips(&["nondeterministic_output"])
        .specs(&[key_at(2, RO | ACCESS)]),
    cmd("xinfo|groups", 3, READONLY, KEY2, "stream", xinfo_groups)
        .doc("List the consumer groups of a stream", "5.0.0")
        .specs(&[key_at(2, RO | ACCESS)]),
    cmd("xinfo|stream", -3, READONLY, KEY2, "stream", xinfo_stream)
        .doc("Get information about a stream", "5.0.0")
        .specs(&[key_at(2, RO | ACCESS)]),
    cmd("xinfo|help", 2, LOADING | STALE, Keys::None, "stream", xinfo_help)
        .doc("Show helpful text about the different subcommands", "5.0.0"),
];

/// XREAD's keys: the first half of what follows STREAMS.
fn xread_keys(argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    streams_keys(argv, 1)
}

fn xreadgroup_keys(argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    streams_keys(argv, 4)
}

fn streams_keys(argv: &[&[u8]], from: usize) -> SmallVec<[usize; 4]> {
    let Some(at) = (from..argv.len()).find(|&i| eq(argv[i], "streams")) else { return SmallVec::new() };
    let n = (argv.len() - at - 1) / 2;
    (at + 1..at + 1 + n).collect()
}

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";

fn invalid_id() -> CmdError {
    CmdError::other(INVALID_ID)
}

/// Redis's `string2ull`: a canonical non-negative integer, or what
/// `strtoull` takes whole (leading spaces, a sign, leading zeros; a minus
/// negates modulo 2^64).
fn parse_u64(s: &[u8]) -> Option<u64> {
    if let Some(v) = keel_engine::value::parse_canonical_i64(s) {
        return u64::try_from(v).ok();
    }
    let mut rest = s;
    while let [b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r', tail @ ..] = rest {
        rest = tail;
    }
    let negative = match rest {
        [b'-', tail @ ..] => {
            rest = tail;
            true
        }
        [b'+', tail @ ..] => {
            rest = tail;
            false
        }
        _ => false,
    };
    if rest.is_empty() || !rest.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for &d in rest {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if negative { v.wrapping_neg() } else { v })
}

/// Redis's `streamGenericParseIDOrReply`: `-`, `+`, `<ms>` (the sequence
/// `missing_seq`) or `<ms>-<seq>`; with `strict`, `-` and `+` are refused.
/// Returns the ID and whether a sequence was given (`<ms>-*` gives false
/// where `star_seq` allows it).
fn parse_id_full(arg: &[u8], missing_seq: u64, strict: bool, star_seq: bool) -> Result<(StreamId, bool), CmdError> {
    if arg.len() > 127 {
        return Err(invalid_id());
    }
    match arg {
        b"-" | b"+" if strict => Err(invalid_id()),
        b"-" => Ok((StreamId::MIN, true)),
        b"+" => Ok((StreamId::MAX, true)),
        _ => {
            // Like C strings, the text ends at a NUL.
            let arg = &arg[..arg.iter().position(|&b| b == 0).unwrap_or(arg.len())];
            let (ms, seq) = match arg.iter().position(|&b| b == b'-') {
                Some(dash) => (&arg[..dash], Some(&arg[dash + 1..])),
                None => (arg, None),
            };
            let ms = parse_u64(ms).ok_or_else(invalid_id)?;
            match seq {
                Some(b"*") if star_seq => Ok((StreamId::new(ms, 0), false)),
                Some(seq) => Ok((StreamId::new(ms, parse_u64(seq).ok_or_else(invalid_id)?), true)),
                None => Ok((StreamId::new(ms, missing_seq), true)),
            }
        }
    }
}

fn parse_id(arg: &[u8], missing_seq: u64) -> Result<StreamId, CmdError> {
    parse_id_full(arg, missing_seq, false, false).map(|(id, _)| id)
}

fn parse_strict_id(arg: &[u8], missing_seq: u64) -> Result<StreamId, CmdError> {
    parse_id_full(arg, missing_seq, true, false).map(|(id, _)| id)
}

/// A range bound: `(` makes it exclusive (`streamParseIntervalIDOrReply`).
fn parse_interval(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), CmdError> {
    if arg.len() > 1 && arg[0] == b'(' {
        Ok((parse_strict_id(&arg[1..], missing_seq)?, true))
    } else {
        Ok((parse_id(arg, missing_seq)?, false))
    }
}

/// The start of a range: exclusive bounds move one up.
fn range_start(arg: &[u8]) -> Result<StreamId, CmdError> {
    let (id, exclusive) = parse_interval(arg, 0)?;
    if exclusive {
        return id.incr().ok_or_else(|| CmdError::other("ERR invalid start ID for the interval"));
    }
    Ok(id)
}

fn range_end(arg: &[u8]) -> Result<StreamId, CmdError> {
    let (id, exclusive) = parse_interval(arg, u64::MAX)?;
    if exclusive {
        return id.decr().ok_or_else(|| CmdError::other("ERR invalid end ID for the interval"));
    }
    Ok(id)
}

fn id_bytes(id: StreamId) -> Vec<u8> {
    id.to_string().into_bytes()
}

fn reply_id(out: &mut ReplyWriter<'_>, id: StreamId) {
    out.bulk(id.to_string().as_bytes());
}

/// One entry as Redis replies it: `[id, [field, value, ...]]`.
fn reply_entry(out: &mut ReplyWriter<'_>, e: &StreamEntry) {
    out.array(2);
    reply_id(out, e.id);
    out.array(e.fields.len());
    for f in &e.fields {
        out.bulk(f);
    }
}

fn reply_entries(out: &mut ReplyWriter<'_>, entries: &[StreamEntry]) {
    out.array(entries.len());
    for e in entries {
        reply_entry(out, e);
    }
}

fn stream_of(entry: Option<&Entry>) -> Result<Option<&Stream>, CmdError> {
    match entry.map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Stream(s)) => Ok(Some(s)),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn stream_mut(entry: Option<&mut Entry>) -> Result<Option<&mut Stream>, CmdError> {
    match entry.map(|e| &mut e.value) {
        None => Ok(None),
        Some(Value::Stream(s)) => Ok(Some(s)),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// `lookupKeyRead` for a stream: counts a hit or a miss.
fn read_stream<'d>(stats: &crate::server::WorkerStats, db: &'d mut Db, key: &[u8], now_ms: u64) -> Result<Option<&'d Stream>, CmdError> {
    let entry = db.get(key, now_ms);
    stats.hit(entry.is_some());
    stream_of(entry)
}

/// The time streams record (delivery and seen times, `*` IDs): the
/// command's time, or the wall clock while the journal replays, where the
/// command's time stands at 0 so that nothing expires (XCLAIM's TIME is
/// capped at it, and consumers are seen at it, as in Redis).
fn clock_ms(ctx: &Ctx<'_>) -> u64 {
    if ctx.now_ms == 0 {
        crate::server::unix_ms()
    } else {
        ctx.now_ms
    }
}

/// XGROUP's and XINFO's error for a group the stream lacks.
fn no_such_group(group: &[u8], key: &[u8]) -> CmdError {
    CmdError::other(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key)
    ))
}

fn nogroup(key: &[u8], group: &[u8], suffix: &str) -> CmdError {
    CmdError::other(format!(
        "NOGROUP No such key '{}' or consumer group '{}'{suffix}",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

// ------------------------------------------------------------ XADD, XTRIM

/// XADD's and XTRIM's options (`streamAddTrimArgs`).
#[derive(Default)]
struct AddTrim {
    trim: Option<Trim>,
    approx: bool,
    /// 0: no limit.
    limit: u64,
    /// The threshold's argument index (rewritten when `approx`).
    trim_at: usize,
    no_mkstream: bool,
    /// The ID's argument index (XADD), and the ID unless `*`.
    id_at: usize,
    id: Option<StreamId>,
    seq_given: bool,
}

/// Redis's `streamParseAddOrTrimArgsOrReply`.
fn parse_add_trim(ctx: &Ctx<'_>, argv: &[&[u8]], xadd: bool) -> Result<AddTrim, CmdError> {
    let mut a = AddTrim { seq_given: true, ..Default::default() };
    let mut limit_given = false;
    let mut i = 2;
    while i < argv.len() {
        let more = argv.len() - 1 - i;
        let opt = argv[i];
        if xadd && opt == b"*" {
            break;
        } else if (eq(opt, "maxlen") || eq(opt, "minid")) && more > 0 {
            if a.trim.is_some() {
                return Err(CmdError::other("ERR syntax error, MAXLEN and MINID options at the same time are not compatible"));
            }
            a.approx = false;
            let next = argv[i + 1];
            if more >= 2 && next == b"~" {
                a.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            if eq(opt, "maxlen") {
                let max = i64_arg(argv[i + 1])?;
                if max < 0 {
                    return Err(CmdError::other("ERR The MAXLEN argument must be >= 0."));
                }
                a.trim = Some(Trim::MaxLen(max as u64));
            } else {
                a.trim = Some(Trim::MinId(parse_strict_id(argv[i + 1], 0)?));
            }
            i += 1;
            a.trim_at = i;
        } else if eq(opt, "limit") && more > 0 {
            let limit = i64_arg(argv[i + 1])?;
            if limit < 0 {
                return Err(CmdError::other("ERR The LIMIT argument must be >= 0."));
            }
            a.limit = limit as u64;
            limit_given = true;
            i += 1;
        } else if xadd && eq(opt, "nomkstream") {
            a.no_mkstream = true;
        } else if xadd {
            let (id, seq_given) = parse_id_full(opt, 0, true, true)?;
            a.id = Some(id);
            a.seq_given = seq_given;
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    a.id_at = i;
    if a.limit != 0 && a.trim.is_none() {
        return Err(CmdError::other("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"));
    }
    if !xadd && a.trim.is_none() {
        return Err(CmdError::other("ERR syntax error, XTRIM must be called with a trimming strategy"));
    }
    if ctx.client.is_master || ctx.client.is_loader {
        // What the master or the journal sends was rewritten to trim
        // exactly (see `approx_as_exact`).
        a.limit = 0;
    } else if limit_given {
        if !a.approx {
            return Err(CmdError::other("ERR syntax error, LIMIT cannot be used without the special ~ option"));
        }
    } else if a.approx {
        // At most 100 nodes' worth of work, as Redis bounds it.
        let per_node = ctx.encoding_limits().stream_node.max_entries as u64;
        a.limit = per_node.saturating_mul(100);
        if a.limit == 0 {
            a.limit = 10_000;
        }
        a.limit = a.limit.min(1_000_000);
    } else {
        a.limit = 0;
    }
    Ok(a)
}

/// What an approximate trim is propagated as: `= <threshold>` that trims
/// exactly as much (`streamRewriteApproxSpecifier`, `streamRewriteTrimArgument`).
fn approx_as_exact(logged: &mut [Vec<u8>], a: &AddTrim, s: &Stream) {
    logged[a.trim_at - 1] = b"=".to_vec();
    logged[a.trim_at] = match a.trim {
        Some(Trim::MaxLen(_)) => s.len().to_string().into_bytes(),
        _ => id_bytes(s.first_id_with_tombstones()),
    };
}

fn xadd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let a = parse_add_trim(ctx, argv, true)?;
    let fields = &argv[a.id_at + 1..];
    if fields.len() < 2 || fields.len() % 2 == 1 {
        return Err(CmdError::Arity("xadd".into()));
    }
    if a.seq_given && a.id == Some(StreamId::MIN) {
        return Err(CmdError::other("ERR The ID specified in XADD must be greater than 0-0"));
    }
    let key = argv[1];
    let (now, lru, clock) = (ctx.now_ms, ctx.lru_s, clock_ms(ctx));
    let limits = ctx.encoding_limits().stream_node;
    let db = ctx.dbs.of(key);
    let mut fresh = None;
    let s = match stream_mut(db.get_mut(key, now))? {
        Some(s) => s,
        None if a.no_mkstream => {
            ctx.out.null();
            return Ok(());
        }
        None => fresh.insert(Box::new(Stream::new())),
    };
    if s.last_id == StreamId::MAX {
        return Err(CmdError::other("ERR The stream has exhausted the last possible ID, unable to add more items"));
    }
    let added = s.next_id(a.id, a.seq_given, clock).and_then(|id| s.append(id, fields, limits).map(|()| id));
    let id = match added {
        Ok(id) => id,
        Err(AddError::NotGreater) => {
            return Err(CmdError::other("ERR The ID specified in XADD is equal or smaller than the target stream top item"))
        }
        Err(AddError::TooLarge) => return Err(CmdError::other("ERR Elements are too large to be stored")),
    };
    let trimmed = a.trim.map_or(0, |t| s.trim(t, a.approx, a.limit));
    let mut logged: Vec<Vec<u8>> = argv.iter().map(|x| x.to_vec()).collect();
    if a.approx {
        approx_as_exact(&mut logged, &a, s);
    }
    if let Some(s) = fresh {
        db.set(key, Value::Stream(s), false, lru);
    } else {
        db.signal_modified(key);
    }
    db.signal_ready(key);
    if a.id.is_none() || !a.seq_given {
        logged[a.id_at] = id_bytes(id);
    }
    ctx.out.bulk(id.to_string().as_bytes());
    ctx.wrote(1);
    ctx.notify(notify::STREAM, "xadd", key);
    if trimmed > 0 {
        ctx.notify(notify::STREAM, "xtrim", key);
    }
    ctx.propagate_as(vec![logged]);
    Ok(())
}

fn xtrim(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let a = parse_add_trim(ctx, argv, false)?;
    let key = argv[1];
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    let Some(s) = stream_mut(db.get_mut(key, now))? else {
        ctx.out.int(0);
        return Ok(());
    };
    let deleted = s.trim(a.trim.expect("XTRIM requires a strategy"), a.approx, a.limit);
    if deleted > 0 {
        let mut logged: Vec<Vec<u8>> = argv.iter().map(|x| x.to_vec()).collect();
        if a.approx {
            approx_as_exact(&mut logged, &a, s);
        }
        db.signal_modified(key);
        ctx.propagate_as(vec![logged]);
        ctx.wrote(deleted);
        ctx.notify(notify::STREAM, "xtrim", key);
    }
    ctx.out.int(deleted as i64);
    Ok(())
}

fn xdel(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    let Some(s) = stream_mut(db.get_mut(key, now))? else {
        ctx.out.int(0);
        return Ok(());
    };
    // Every ID is checked before any is deleted.
    let ids = argv[2..].iter().map(|a| parse_strict_id(a, 0)).collect::<Result<Vec<_>, _>>()?;
    let (mut deleted, mut first) = (0u64, false);
    for id in ids {
        if s.delete(id) {
            first |= id == s.first_id;
            s.max_deleted_entry_id = s.max_deleted_entry_id.max(id);
            deleted += 1;
        }
    }
    if deleted > 0 {
        if s.is_empty() {
            s.first_id = StreamId::MIN;
        } else if first {
            s.first_id = s.edge(true).unwrap_or(StreamId::MAX);
        }
        db.signal_modified(key);
        ctx.wrote(deleted);
        ctx.notify(notify::STREAM, "xdel", key);
    }
    ctx.out.int(deleted as i64);
    Ok(())
}

fn xlen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let now = ctx.now_ms;
    let len = read_stream(ctx.stats, ctx.dbs.of(argv[1]), argv[1], now)?.map_or(0, |s| s.len());
    ctx.out.int(len as i64);
    Ok(())
}

fn xrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    range(ctx, argv, false)
}

fn xrevrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    range(ctx, argv, true)
}

fn range(ctx: &mut Ctx<'_>, argv: &[&[u8]], rev: bool) -> CmdResult {
    let (start_arg, end_arg) = if rev { (argv[3], argv[2]) } else { (argv[2], argv[3]) };
    let start = range_start(start_arg)?;
    let end = range_end(end_arg)?;
    let mut count: i64 = -1;
    let mut j = 4;
    while j < argv.len() {
        if eq(argv[j], "count") && j + 1 < argv.len() {
            count = i64_arg(argv[j + 1])?.max(0);
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let now = ctx.now_ms;
    let Some(s) = read_stream(ctx.stats, ctx.dbs.of(argv[1]), argv[1], now)? else {
        ctx.out.array(0);
        return Ok(());
    };
    if count == 0 {
        ctx.out.null_array();
        return Ok(());
    }
    let entries = s.range(start, end, rev, count.max(0) as usize);
    reply_entries(&mut ctx.out, &entries);
    Ok(())
}

fn xsetid(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let id = parse_strict_id(argv[2], 0)?;
    let (mut entries_added, mut max_deleted) = (None, StreamId::MIN);
    let mut i = 3;
    while i < argv.len() {
        let more = argv.len() - 1 - i;
        if eq(argv[i], "entriesadded") && more > 0 {
            let n = i64_arg(argv[i + 1])?;
            if n < 0 {
                return Err(CmdError::other("ERR entries_added must be positive"));
            }
            entries_added = Some(n as u64);
        } else if eq(argv[i], "maxdeletedid") && more > 0 {
            max_deleted = parse_strict_id(argv[i + 1], 0)?;
            if id < max_deleted {
                return Err(CmdError::other("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"));
            }
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let key = argv[1];
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    let Some(s) = stream_mut(db.get_mut(key, now))? else { return Err(CmdError::NoSuchKey) };
    if !s.is_empty() {
        if s.edge(false).is_some_and(|top| id < top) {
            return Err(CmdError::other("ERR The ID specified in XSETID is smaller than the target stream top item"));
        }
        if entries_added.is_some_and(|n| s.len() > n) {
            return Err(CmdError::other("ERR The entries_added specified in XSETID is smaller than the target stream length"));
        }
    }
    s.last_id = id;
    if let Some(n) = entries_added {
        s.entries_added = n;
    }
    if max_deleted != StreamId::MIN {
        s.max_deleted_entry_id = max_deleted;
    }
    db.signal_modified(key);
    ctx.out.ok();
    ctx.wrote(1);
    ctx.notify(notify::STREAM, "xsetid", key);
    Ok(())
}

// ------------------------------------------------------ XREAD, XREADGROUP

/// What XREAD and XREADGROUP were asked.
struct ReadArgs<'a> {
    /// Unix ms deadline (0: for ever), when BLOCK was given.
    block: Option<u64>,
    count: usize,
    group: Option<(&'a [u8], &'a [u8])>,
    noack: bool,
    keys: &'a [&'a [u8]],
    ids: &'a [&'a [u8]],
}

fn parse_read<'a>(ctx: &Ctx<'_>, argv: &'a [&'a [u8]], group_form: bool) -> Result<ReadArgs<'a>, CmdError> {
    let name = if group_form { "XREADGROUP" } else { "XREAD" };
    let (mut block, mut count, mut group, mut noack) = (None, 0usize, None, false);
    let mut streams_at = None;
    let mut i = 1;
    while i < argv.len() {
        let more = argv.len() - i - 1;
        let o = argv[i];
        if eq(o, "block") && more > 0 {
            if ctx.in_script {
                return Err(CmdError::other(format!(
                    "ERR {} command is not allowed with BLOCK option from scripts",
                    String::from_utf8_lossy(argv[0])
                )));
            }
            i += 1;
            let ms = i64_arg(argv[i]).map_err(|_| CmdError::other("ERR timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(CmdError::other("ERR timeout is negative"));
            }
            block = Some(if ms == 0 { 0 } else { ctx.now_ms.saturating_add(ms as u64) });
        } else if eq(o, "count") && more > 0 {
            i += 1;
            count = i64_arg(argv[i])?.max(0) as usize;
        } else if eq(o, "streams") && more > 0 {
            let n = argv.len() - i - 1;
            if !n.is_multiple_of(2) {
                return Err(CmdError::other(
                    "ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.",
                ));
            }
            streams_at = Some(i + 1);
            break;
        } else if eq(o, "group") && more >= 2 {
            if !group_form {
                return Err(CmdError::other("ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."));
            }
            group = Some((argv[i + 1], argv[i + 2]));
            i += 2;
        } else if eq(o, "noack") {
            if !group_form {
                return Err(CmdError::other("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead."));
            }
            noack = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let Some(at) = streams_at else { return Err(CmdError::Syntax) };
    if group_form && group.is_none() {
        return Err(CmdError::other(format!("ERR Missing GROUP option for {name}")));
    }
    let n = (argv.len() - at) / 2;
    Ok(ReadArgs { block, count, group, noack, keys: &argv[at..at + n], ids: &argv[at + n..] })
}

/// The ID a read starts after, for each key: `$` is the stream's last ID,
/// `>` (XREADGROUP) the group's next entries (None).
enum After {
    Id(StreamId),
    New,
}

fn xread(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    read(ctx, argv, false)
}

fn xreadgroup(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    read(ctx, argv, true)
}

/// Redis's `xreadCommand`, both forms.
fn read(ctx: &mut Ctx<'_>, argv: &[&[u8]], group_form: bool) -> CmdResult {
    let a = parse_read(ctx, argv, group_form)?;
    let (now, clock) = (ctx.now_ms, clock_ms(ctx));
    // First every key's type, group and ID, in Redis's order.
    let mut afters = Vec::with_capacity(a.keys.len());
    for (key, id) in a.keys.iter().zip(a.ids) {
        let s = stream_of(ctx.dbs.of(key).get(key, now))?;
        if let Some((group, _)) = a.group {
            if s.is_none_or(|s| !s.groups.contains_key(group)) {
                return Err(nogroup(key, group, " in XREADGROUP with GROUP option"));
            }
        }
        let after = match *id {
            b"$" if group_form => {
                return Err(CmdError::other(
                    "ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.",
                ))
            }
            b"$" => After::Id(s.map_or(StreamId::MIN, |s| s.last_id)),
            b">" if !group_form => {
                return Err(CmdError::other(
                    "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
                ))
            }
            b">" => After::New,
            id => After::Id(parse_strict_id(id, 0)?),
        };
        afters.push(after);
    }
    let mut served: Vec<(&[u8], Vec<StreamEntry>)> = Vec::new();
    let mut logged: Vec<Vec<Vec<u8>>> = Vec::new();
    for (key, after) in a.keys.iter().zip(&afters) {
        let key: &[u8] = key;
        let db = ctx.dbs.of(key);
        ctx.stats.hit(db.peek(key).is_some());
        let Some(s) = stream_mut(db.get_mut(key, now))? else { continue };
        let Some((group, consumer)) = a.group else {
            let After::Id(gt) = *after else { unreachable!("> is XREADGROUP's") };
            if s.is_empty() || s.edge(false).is_none_or(|top| top <= gt) {
                continue;
            }
            let Some(start) = gt.incr() else { continue };
            served.push((key, s.range(start, StreamId::MAX, false, a.count)));
            continue;
        };
        // History starts after the ID given (`streamIncrID` wraps the last
        // possible ID to 0-0).
        let history = match *after {
            After::Id(id) => Some(id.incr().unwrap_or(StreamId::MIN)),
            After::New => None,
        };
        let last = s.groups[group].last_id;
        if history.is_none() && (s.is_empty() || s.edge(false).is_none_or(|top| top <= last)) {
            continue;
        }
        let (entries, created) = read_group(s, key, group, consumer, history, a.count, a.noack, clock, &mut logged);
        db.signal_modified(key);
        ctx.wrote(1);
        if created {
            ctx.wrote(1);
            ctx.notify(notify::STREAM, "xgroup-createconsumer", key);
        }
        served.push((key, entries));
    }
    if !served.is_empty() {
        if !logged.is_empty() {
            ctx.propagate_as(logged);
        } else if group_form {
            // Nothing changed that needs replaying (history reads with
            // nothing pending): Redis propagates nothing either.
            ctx.propagate_as(Vec::new());
        }
        reply_read(&mut ctx.out, &served);
        return Ok(());
    }
    if group_form {
        ctx.propagate_as(Vec::new());
    }
    match a.block {
        Some(deadline) if ctx.can_block() => {
            // Wait with `$` resolved: new entries are those after the
            // last ID as it is now.
            let mut waiting: Vec<Vec<u8>> = argv.iter().map(|x| x.to_vec()).collect();
            let ids_at = argv.len() - a.ids.len();
            for (i, after) in afters.iter().enumerate() {
                if let After::Id(id) = after {
                    waiting[ids_at + i] = id_bytes(*id);
                }
            }
            let args: Vec<&[u8]> = waiting.iter().map(Vec::as_slice).collect();
            crate::blocking::block(ctx, &args, a.keys, deadline);
        }
        _ => ctx.out.null_array(),
    }
    Ok(())
}

/// XREAD's reply: per key served, its entries (a map in RESP3).
fn reply_read(out: &mut ReplyWriter<'_>, served: &[(&[u8], Vec<StreamEntry>)]) {
    if out.resp3 {
        out.map(served.len());
    } else {
        out.array(served.len());
    }
    for (key, entries) in served {
        if !out.resp3 {
            out.array(2);
        }
        out.bulk(key);
        reply_group_entries(out, entries);
    }
}

/// The XCLAIM Redis propagates for a delivery or a claim
/// (`streamPropagateXCLAIM`): idempotent, with the group's last ID.
fn xclaim_record(key: &[u8], group: &[u8], g: &Group, id: StreamId, p: &Pending) -> Vec<Vec<u8>> {
    [
        &b"XCLAIM"[..],
        key,
        group,
        &p.consumer,
        b"0",
        &id_bytes(id),
        b"TIME",
        p.delivery_time.to_string().as_bytes(),
        b"RETRYCOUNT",
        p.delivery_count.to_string().as_bytes(),
        b"FORCE",
        b"JUSTID",
        b"LASTID",
        &id_bytes(g.last_id),
    ]
    .iter()
    .map(|a| a.to_vec())
    .collect()
}

/// `streamPropagateGroupID`: XGROUP SETID with the group's entries-read.
fn setid_record(key: &[u8], group: &[u8], g: &Group) -> Vec<Vec<u8>> {
    [&b"XGROUP"[..], b"SETID", key, group, &id_bytes(g.last_id), b"ENTRIESREAD", g.entries_read.to_string().as_bytes()]
        .iter()
        .map(|a| a.to_vec())
        .collect()
}

fn createconsumer_record(key: &[u8], group: &[u8], consumer: &[u8]) -> Vec<Vec<u8>> {
    [&b"XGROUP"[..], b"CREATECONSUMER", key, group, consumer].iter().map(|a| a.to_vec()).collect()
}

/// The consumer `name` of `g`, created if missing (its seen time is now
/// either way, as `streamLookupConsumer` refreshes it). Returns whether it
/// was created.
fn touch_consumer(g: &mut Group, name: &[u8], clock: u64) -> bool {
    match g.consumers.get_mut(name) {
        Some(c) => {
            c.seen_time = clock;
            false
        }
        None => {
            g.consumers.insert(name.to_vec(), Consumer { seen_time: clock, pel: Default::default() });
            true
        }
    }
}

/// XREADGROUP on one stream: the consumer's history from `history`, or
/// (None) entries past the group's last ID, delivered and recorded in the
/// PEL unless `noack` (`streamReplyWithRange` with a group). Also returns
/// whether the consumer was created.
#[allow(clippy::too_many_arguments)]
fn read_group(
    s: &mut Stream,
    key: &[u8],
    group: &[u8],
    consumer: &[u8],
    history: Option<StreamId>,
    count: usize,
    noack: bool,
    clock: u64,
    logged: &mut Vec<Vec<Vec<u8>>>,
) -> (Vec<StreamEntry>, bool) {
    let mut g = s.groups.remove(group).expect("checked by the caller");
    let created = touch_consumer(&mut g, consumer, clock);
    if created && noack && history.is_none() {
        logged.push(createconsumer_record(key, group, consumer));
    }
    let mut out = Vec::new();
    if let Some(start) = history {
        // The consumer's pending entries from `start`; one deleted since
        // comes back as [id, nil] (an empty field list here).
        let ids: Vec<StreamId> = g.consumers[consumer].pel.range(start..).take(if count == 0 { usize::MAX } else { count }).copied().collect();
        for id in ids {
            match s.get(id) {
                Some(e) => {
                    let p = g.pel.get_mut(&id).expect("a consumer's PEL is in its group's");
                    p.delivery_time = clock;
                    p.delivery_count += 1;
                    out.push(e);
                }
                None => out.push(StreamEntry { id, fields: Vec::new() }),
            }
        }
        s.groups.insert(group.to_vec(), g);
        return (out, created);
    }
    let Some(start) = g.last_id.incr() else {
        s.groups.insert(group.to_vec(), g);
        return (out, created);
    };
    let entries = s.range(start, StreamId::MAX, false, count);
    let mut moved_last = false;
    for e in entries {
        if e.id > g.last_id {
            g.entries_read = s.entries_read_after(&g, e.id);
            g.last_id = e.id;
            moved_last = true;
        }
        if !noack {
            if let Some(old) = g.pel.get(&e.id).map(|p| p.consumer.clone()) {
                if let Some(c) = g.consumers.get_mut(&old) {
                    c.pel.remove(&e.id);
                }
            }
            let p = Pending { consumer: consumer.to_vec(), delivery_time: clock, delivery_count: 1 };
            g.consumers.get_mut(consumer).expect("touched above").pel.insert(e.id);
            logged.push(xclaim_record(key, group, &g, e.id, &p));
            g.pel.insert(e.id, p);
        }
        out.push(e);
    }
    // Redis propagates the group's new position only after a NOACK read
    // (the XCLAIMs carry it otherwise, but not its entries-read, which
    // its replicas and AOF then lose); Keel logs it after every read that
    // moved it, so that a replay gives the same counter.
    if moved_last {
        logged.push(setid_record(key, group, &g));
    }
    s.groups.insert(group.to_vec(), g);
    (out, created)
}

/// Entries read, where a consumer's history holds `[id, nil]` for an
/// entry deleted since its delivery (read back with no fields).
fn reply_group_entries(out: &mut ReplyWriter<'_>, entries: &[StreamEntry]) {
    out.array(entries.len());
    for e in entries {
        if e.fields.is_empty() {
            out.array(2);
            reply_id(out, e.id);
            out.null_array();
        } else {
            reply_entry(out, e);
        }
    }
}

// ------------------------------------------------------------------ XGROUP

fn xgroup_help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_help(
        ctx,
        argv[0],
        &[
            "CREATE <key> <groupname> <id|$> [option]",
            "    Create a new consumer group. Options are:",
            "    * MKSTREAM",
            "      Create the empty stream if it does not exist.",
            "    * ENTRIESREAD entries_read",
            "      Set the group's entries_read counter (internal use).",
            "CREATECONSUMER <key> <groupname> <consumer>",
            "    Create a new consumer in the specified group.",
            "DELCONSUMER <key> <groupname> <consumer>",
            "    Remove the specified consumer.",
            "DESTROY <key> <groupname>",
            "    Remove the specified group.",
            "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
            "    Set the current group ID and entries_read counter.",
        ],
    );
    Ok(())
}

/// XGROUP's shared checks (`xgroupCommand`'s preamble): the options after
/// the ID, the key's type, its existence unless MKSTREAM, the group's
/// existence for the subcommands that need one. Returns MKSTREAM and
/// ENTRIESREAD.
fn xgroup_prelude(ctx: &mut Ctx<'_>, argv: &[&[u8]], needs_group: bool) -> Result<(bool, i64), CmdError> {
    let sub = argv[1];
    let (create, setid) = (eq(sub, "create"), eq(sub, "setid"));
    let (mut mkstream, mut entries_read) = (false, ENTRIES_READ_UNKNOWN);
    let mut i = 5;
    while i < argv.len() {
        if create && eq(argv[i], "mkstream") {
            mkstream = true;
            i += 1;
        } else if (create || setid) && eq(argv[i], "entriesread") && i + 1 < argv.len() {
            entries_read = i64_arg(argv[i + 1])?;
            if entries_read < 0 && entries_read != ENTRIES_READ_UNKNOWN {
                return Err(CmdError::other("ERR value for ENTRIESREAD must be positive or -1"));
            }
            i += 2;
        } else {
            return Err(CmdError::subcommand_syntax(argv));
        }
    }
    let (key, group, now) = (argv[2], argv[3], ctx.now_ms);
    let s = stream_of(ctx.dbs.of(key).get(key, now))?;
    if !mkstream {
        let Some(s) = s else {
            return Err(CmdError::other(
                "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
            ));
        };
        if needs_group && !s.groups.contains_key(group) {
            return Err(no_such_group(group, key));
        }
    }
    Ok((mkstream, entries_read))
}

/// The group the XGROUP prelude found.
fn group_mut<'d>(db: &'d mut Db, key: &[u8], group: &[u8], now: u64) -> &'d mut Group {
    let s = stream_mut(db.get_mut(key, now)).ok().flatten().expect("checked by the prelude");
    s.groups.get_mut(group).expect("checked by the prelude")
}

/// An XGROUP change to `key`: signalled, counted and announced as `event`.
fn group_changed(ctx: &mut Ctx<'_>, key: &[u8], event: &str) {
    ctx.dbs.of(key).signal_modified(key);
    ctx.wrote(1);
    ctx.notify(notify::STREAM, event, key);
}

fn xgroup_create(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (mkstream, entries_read) = xgroup_prelude(ctx, argv, false)?;
    if argv.len() > 8 {
        return Err(CmdError::subcommand_syntax(argv));
    }
    let (key, group, now, lru) = (argv[2], argv[3], ctx.now_ms, ctx.lru_s);
    let db = ctx.dbs.of(key);
    let exists = db.get(key, now).is_some();
    let id = match argv[4] {
        b"$" => stream_of(db.get(key, now))?.map_or(StreamId::MIN, |s| s.last_id),
        id => parse_strict_id(id, 0)?,
    };
    if !exists {
        debug_assert!(mkstream);
        db.set(key, Value::Stream(Box::default()), false, lru);
    }
    let s = stream_mut(db.get_mut(key, now))?.expect("exists or created above");
    if s.groups.contains_key(group) {
        return Err(CmdError::other("BUSYGROUP Consumer Group name already exists"));
    }
    s.groups.insert(group.to_vec(), Group::new(id, entries_read));
    ctx.out.ok();
    group_changed(ctx, key, "xgroup-create");
    Ok(())
}

fn xgroup_setid(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (_, entries_read) = xgroup_prelude(ctx, argv, true)?;
    if argv.len() != 5 && argv.len() != 7 {
        return Err(CmdError::subcommand_syntax(argv));
    }
    let (key, group, now) = (argv[2], argv[3], ctx.now_ms);
    let db = ctx.dbs.of(key);
    let s = stream_mut(db.get_mut(key, now))?.expect("checked by the prelude");
    let id = match argv[4] {
        b"$" => s.last_id,
        id => parse_id(id, 0)?,
    };
    let g = s.groups.get_mut(group).expect("checked by the prelude");
    g.last_id = id;
    g.entries_read = entries_read;
    ctx.out.ok();
    group_changed(ctx, key, "xgroup-setid");
    Ok(())
}

fn xgroup_destroy(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    xgroup_prelude(ctx, argv, false)?;
    let (key, group, now) = (argv[2], argv[3], ctx.now_ms);
    let db = ctx.dbs.of(key);
    let s = stream_mut(db.get_mut(key, now))?.expect("checked by the prelude");
    if s.groups.remove(group).is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    // Its blocked readers learn that it is gone.
    db.signal_ready(key);
    ctx.out.int(1);
    group_changed(ctx, key, "xgroup-destroy");
    Ok(())
}

fn xgroup_createconsumer(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    xgroup_prelude(ctx, argv, true)?;
    let (key, group, consumer, now, clock) = (argv[2], argv[3], argv[4], ctx.now_ms, clock_ms(ctx));
    let g = group_mut(ctx.dbs.of(key), key, group, now);
    if g.consumers.contains_key(consumer) {
        ctx.out.int(0);
        return Ok(());
    }
    g.consumers.insert(consumer.to_vec(), Consumer { seen_time: clock, pel: Default::default() });
    ctx.out.int(1);
    group_changed(ctx, key, "xgroup-createconsumer");
    Ok(())
}

fn xgroup_delconsumer(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    xgroup_prelude(ctx, argv, true)?;
    let (key, group, consumer, now) = (argv[2], argv[3], argv[4], ctx.now_ms);
    let g = group_mut(ctx.dbs.of(key), key, group, now);
    let Some(c) = g.consumers.remove(consumer) else {
        ctx.out.int(0);
        return Ok(());
    };
    // Its pending entries leave the group's PEL with it.
    for id in &c.pel {
        g.pel.remove(id);
    }
    ctx.out.int(c.pel.len() as i64);
    group_changed(ctx, key, "xgroup-delconsumer");
    Ok(())
}

// ------------------------------------------------------- XACK, XPENDING

fn xack(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (key, group, now) = (argv[1], argv[2], ctx.now_ms);
    let db = ctx.dbs.of(key);
    let exists = match stream_of(db.get(key, now))? {
        Some(s) => s.groups.contains_key(group),
        None => false,
    };
    if !exists {
        ctx.out.int(0);
        return Ok(());
    }
    let ids = argv[3..].iter().map(|a| parse_strict_id(a, 0)).collect::<Result<Vec<_>, _>>()?;
    let s = stream_mut(db.get_mut(key, now))?.expect("checked above");
    let g = s.groups.get_mut(group).expect("checked above");
    let mut acked = 0u64;
    for id in ids {
        if let Some(p) = g.pel.remove(&id) {
            if let Some(c) = g.consumers.get_mut(&p.consumer) {
                c.pel.remove(&id);
            }
            acked += 1;
        }
    }
    if acked > 0 {
        db.signal_modified(key);
        ctx.wrote(acked);
    }
    ctx.out.int(acked as i64);
    Ok(())
}

fn xpending(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (key, group) = (argv[1], argv[2]);
    let summary = argv.len() == 3;
    if argv.len() != 3 && !(6..=9).contains(&argv.len()) {
        return Err(CmdError::Syntax);
    }
    let (mut start, mut end, mut count, mut min_idle, mut consumer) = (StreamId::MIN, StreamId::MAX, 0i64, 0i64, None);
    if argv.len() >= 6 {
        let mut at = 3;
        if eq(argv[3], "idle") {
            min_idle = i64_arg(argv[4])?;
            if argv.len() < 8 {
                return Err(CmdError::Syntax);
            }
            at += 2;
        }
        count = i64_arg(argv[at + 2])?.max(0);
        start = range_start(argv[at])?;
        end = range_end(argv[at + 1])?;
        consumer = argv.get(at + 3).copied();
    }
    let (now, clock) = (ctx.now_ms, clock_ms(ctx));
    let s = read_stream(ctx.stats, ctx.dbs.of(key), key, now)?;
    let Some(g) = s.and_then(|s| s.groups.get(group)) else { return Err(nogroup(key, group, "")) };
    let out = &mut ctx.out;
    if summary {
        out.array(4);
        out.int(g.pel.len() as i64);
        let (Some(first), Some(last)) = (g.pel.keys().next(), g.pel.keys().next_back()) else {
            out.null();
            out.null();
            out.null_array();
            return Ok(());
        };
        reply_id(out, *first);
        reply_id(out, *last);
        let owners: Vec<(&Vec<u8>, &Consumer)> = g.consumers.iter().filter(|(_, c)| !c.pel.is_empty()).collect();
        out.array(owners.len());
        for (name, c) in owners {
            out.array(2);
            out.bulk(name);
            out.bulk_int(c.pel.len() as i64);
        }
        return Ok(());
    }
    let ids: Vec<StreamId> = match consumer {
        Some(name) => match g.consumers.get(name) {
            Some(c) => c.pel.range(start..).take_while(|id| **id <= end).copied().collect(),
            None => Vec::new(),
        },
        None => g.pel.range(start..).take_while(|(id, _)| **id <= end).map(|(id, _)| *id).collect(),
    };
    let mut rows = Vec::new();
    for id in ids {
        if rows.len() as i64 >= count {
            break;
        }
        let p = &g.pel[&id];
        let idle = clock as i64 - p.delivery_time as i64;
        if min_idle != 0 && idle < min_idle {
            continue;
        }
        rows.push((id, p, idle.max(0)));
    }
    out.array(rows.len());
    for (id, p, idle) in rows {
        out.array(4);
        reply_id(out, id);
        out.bulk(&p.consumer);
        out.int(idle);
        out.int(p.delivery_count as i64);
    }
    Ok(())
}

// -------------------------------------------------- XCLAIM, XAUTOCLAIM

/// Drops the pending record of an entry that is gone (XCLAIM, XAUTOCLAIM),
/// returning what Redis propagates for it.
fn drop_pending(g: &mut Group, key: &[u8], group: &[u8], id: StreamId) -> Option<Vec<Vec<u8>>> {
    let p = g.pel.remove(&id)?;
    if let Some(c) = g.consumers.get_mut(&p.consumer) {
        c.pel.remove(&id);
    }
    Some(xclaim_record(key, group, g, id, &p))
}

/// Gives pending entry `id` to consumer `name` (which exists) as
/// delivered at `delivery`: its count becomes `retry` when given, else one
/// more unless `justid`. Returns what Redis propagates for it.
#[allow(clippy::too_many_arguments)]
fn claim(g: &mut Group, key: &[u8], group: &[u8], id: StreamId, name: &[u8], delivery: u64, retry: Option<u64>, justid: bool) -> Vec<Vec<u8>> {
    let p = g.pel.get_mut(&id).expect("a pending entry");
    let old = std::mem::replace(&mut p.consumer, name.to_vec());
    p.delivery_time = delivery;
    match retry {
        Some(n) => p.delivery_count = n,
        None if !justid => p.delivery_count += 1,
        None => {}
    }
    if old != name {
        if let Some(c) = g.consumers.get_mut(&old) {
            c.pel.remove(&id);
        }
        g.consumers.get_mut(name).expect("the claiming consumer").pel.insert(id);
    }
    xclaim_record(key, group, g, id, &g.pel[&id])
}

/// The entries (or, with JUSTID, the IDs) XCLAIM and XAUTOCLAIM claimed.
fn reply_claimed(out: &mut ReplyWriter<'_>, claimed: &[StreamEntry], justid: bool) {
    out.array(claimed.len());
    for e in claimed {
        if justid {
            reply_id(out, e.id);
        } else {
            reply_entry(out, e);
        }
    }
}

/// The end of XCLAIM and XAUTOCLAIM: the changes counted, a new consumer
/// announced, the records logged.
fn finish_claims(ctx: &mut Ctx<'_>, key: &[u8], changes: u64, created: bool, logged: Vec<Vec<Vec<u8>>>) {
    ctx.wrote(changes);
    if created {
        ctx.wrote(1);
        ctx.notify(notify::STREAM, "xgroup-createconsumer", key);
    }
    ctx.propagate_as(logged);
}

fn xclaim(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (key, group, name, now, clock) = (argv[1], argv[2], argv[3], ctx.now_ms, clock_ms(ctx));
    let exists = stream_of(ctx.dbs.of(key).get(key, now))?.is_some_and(|s| s.groups.contains_key(group));
    if !exists {
        return Err(nogroup(key, group, ""));
    }
    let min_idle = i64_arg(argv[4]).map_err(|_| CmdError::other("ERR Invalid min-idle-time argument for XCLAIM"))?.max(0);
    let mut ids = Vec::new();
    let mut j = 5;
    while j < argv.len() {
        match parse_strict_id(argv[j], 0) {
            Ok(id) => ids.push((id, j)),
            Err(_) => break,
        }
        j += 1;
    }
    let (mut force, mut justid, mut retry, mut delivery, mut last_id) = (false, false, None, None, StreamId::MIN);
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        let opt = argv[j];
        let int = |arg: &[u8], what: &str| i64_arg(arg).map_err(|_| CmdError::other(format!("ERR Invalid {what} option argument for XCLAIM")));
        if eq(opt, "force") {
            force = true;
        } else if eq(opt, "justid") {
            justid = true;
        } else if eq(opt, "idle") && more > 0 {
            j += 1;
            delivery = Some(clock as i64 - int(argv[j], "IDLE")?);
        } else if eq(opt, "time") && more > 0 {
            j += 1;
            delivery = Some(int(argv[j], "TIME")?);
        } else if eq(opt, "retrycount") && more > 0 {
            j += 1;
            retry = Some(int(argv[j], "RETRYCOUNT")?);
        } else if eq(opt, "lastid") && more > 0 {
            j += 1;
            last_id = parse_strict_id(argv[j], 0)?;
        } else {
            return Err(CmdError::other(format!("ERR Unrecognized XCLAIM option '{}'", String::from_utf8_lossy(opt))));
        }
        j += 1;
    }
    let delivery = match delivery {
        Some(t) if t < 0 || t > clock as i64 => clock,
        Some(t) => t as u64,
        None => clock,
    };
    let db = ctx.dbs.of(key);
    let s = stream_mut(db.get_mut(key, now))?.expect("checked above");
    let mut g = s.groups.remove(group).expect("checked above");
    let mut propagate_last_id = false;
    if last_id > g.last_id {
        g.last_id = last_id;
        propagate_last_id = true;
    }
    let mut logged = Vec::new();
    let mut replies: Vec<StreamEntry> = Vec::new();
    let mut changes = 0u64;
    let (mut consumer_ready, mut created) = (false, false);
    for (id, _) in ids {
        let Some(entry) = s.get(id) else {
            // The entry is gone: so goes its pending record.
            if let Some(record) = drop_pending(&mut g, key, group, id) {
                logged.push(record);
                propagate_last_id = false;
                changes += 1;
            }
            continue;
        };
        if force && !g.pel.contains_key(&id) {
            // Counted as delivered once, as Redis's streamCreateNACK: the
            // claim then counts once more (JUSTID and RETRYCOUNT aside).
            g.pel.insert(id, Pending { consumer: Vec::new(), delivery_time: 0, delivery_count: 1 });
        }
        let Some(p) = g.pel.get(&id) else { continue };
        if !p.consumer.is_empty() && min_idle != 0 && (clock as i64 - p.delivery_time as i64) < min_idle {
            continue;
        }
        if !consumer_ready {
            created = touch_consumer(&mut g, name, clock);
            consumer_ready = true;
        }
        let retry = retry.and_then(|n| u64::try_from(n).ok());
        logged.push(claim(&mut g, key, group, id, name, delivery, retry, justid));
        propagate_last_id = false;
        changes += 1;
        replies.push(entry);
    }
    if propagate_last_id {
        logged.push(setid_record(key, group, &g));
        changes += 1;
    }
    s.groups.insert(group.to_vec(), g);
    if changes > 0 || consumer_ready {
        db.signal_modified(key);
    }
    reply_claimed(&mut ctx.out, &replies, justid);
    finish_claims(ctx, key, changes, created, logged);
    Ok(())
}

fn xautoclaim(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (key, group, name, now, clock) = (argv[1], argv[2], argv[3], ctx.now_ms, clock_ms(ctx));
    let min_idle = i64_arg(argv[4]).map_err(|_| CmdError::other("ERR Invalid min-idle-time argument for XAUTOCLAIM"))?.max(0);
    let start = range_start(argv[5])?;
    let (mut count, mut justid) = (100i64, false);
    let mut j = 6;
    while j < argv.len() {
        let more = argv.len() - 1 - j;
        if eq(argv[j], "count") && more > 0 {
            let max = i64::MAX / 16;
            count = i64_arg(argv[j + 1]).ok().filter(|c| (1..=max).contains(c)).ok_or_else(|| CmdError::other("ERR COUNT must be > 0"))?;
            j += 1;
        } else if eq(argv[j], "justid") {
            justid = true;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let db = ctx.dbs.of(key);
    let exists = stream_of(db.get(key, now))?.is_some_and(|s| s.groups.contains_key(group));
    if !exists {
        return Err(nogroup(key, group, ""));
    }
    let s = stream_mut(db.get_mut(key, now))?.expect("checked above");
    let mut g = s.groups.remove(group).expect("checked above");
    let mut attempts = count.saturating_mul(10);
    let mut logged = Vec::new();
    let (mut claimed, mut deleted): (Vec<StreamEntry>, Vec<StreamId>) = (Vec::new(), Vec::new());
    let (mut consumer_ready, mut created) = (false, false);
    let mut cursor = start;
    let mut next = None;
    while let Some(id) = g.pel.range(cursor..).next().map(|(id, _)| *id) {
        if attempts == 0 || count == 0 {
            next = Some(id);
            break;
        }
        attempts -= 1;
        cursor = id.incr().unwrap_or(StreamId::MAX);
        let Some(entry) = s.get(id) else {
            logged.extend(drop_pending(&mut g, key, group, id));
            deleted.push(id);
            count -= 1;
            continue;
        };
        if min_idle == 0 || (clock as i64 - g.pel[&id].delivery_time as i64) >= min_idle {
            if !consumer_ready {
                created = touch_consumer(&mut g, name, clock);
                consumer_ready = true;
            }
            logged.push(claim(&mut g, key, group, id, name, clock, None, justid));
            claimed.push(entry);
            count -= 1;
        }
        if id == StreamId::MAX {
            break;
        }
    }
    s.groups.insert(group.to_vec(), g);
    if !logged.is_empty() || consumer_ready {
        db.signal_modified(key);
    }
    let out = &mut ctx.out;
    out.array(3);
    reply_id(out, next.unwrap_or(StreamId::MIN));
    reply_claimed(out, &claimed, justid);
    out.array(deleted.len());
    for id in &deleted {
        reply_id(out, *id);
    }
    finish_claims(ctx, key, logged.len() as u64, created, logged);
    Ok(())
}

// ------------------------------------------------------------------- XINFO

fn xinfo_help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_help(
        ctx,
        argv[0],
        &[
            "CONSUMERS <key> <groupname>",
            "    Show consumers of <groupname>.",
            "GROUPS <key>",
            "    Show the stream consumer groups.",
            "STREAM <key> [FULL [COUNT <count>]",
            "    Show information about the stream.",
        ],
    );
    Ok(())
}

/// The stream XINFO is about (an error for none), beside the reply writer.
fn lookup_info<'c, 'a>(ctx: &'c mut Ctx<'a>, key: &[u8]) -> Result<(&'c Stream, &'c mut ReplyWriter<'a>), CmdError> {
    let now = ctx.now_ms;
    let s = read_stream(ctx.stats, ctx.dbs.of(key), key, now)?.ok_or(CmdError::NoSuchKey)?;
    Ok((s, &mut ctx.out))
}

fn xinfo_consumers(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (key, group) = (argv[2], argv[3]);
    let clock = clock_ms(ctx);
    let (s, out) = lookup_info(ctx, key)?;
    let Some(g) = s.groups.get(group) else { return Err(no_such_group(group, key)) };
    out.array(g.consumers.len());
    for (name, c) in &g.consumers {
        out.map(3);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"pending");
        out.int(c.pel.len() as i64);
        out.bulk(b"idle");
        out.int((clock as i64 - c.seen_time as i64).max(0));
    }
    Ok(())
}

fn reply_lag(out: &mut ReplyWriter<'_>, s: &Stream, g: &Group) {
    match s.group_lag(g) {
        Some(lag) => out.int(lag as i64),
        None => out.null(),
    }
}

fn reply_entries_read(out: &mut ReplyWriter<'_>, g: &Group) {
    if g.entries_read == ENTRIES_READ_UNKNOWN {
        out.null();
    } else {
        out.int(g.entries_read);
    }
}

fn xinfo_groups(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (s, out) = lookup_info(ctx, argv[2])?;
    out.array(s.groups.len());
    for (name, g) in &s.groups {
        out.map(6);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"consumers");
        out.int(g.consumers.len() as i64);
        out.bulk(b"pending");
        out.int(g.pel.len() as i64);
        out.bulk(b"last-delivered-id");
        reply_id(out, g.last_id);
        out.bulk(b"entries-read");
        reply_entries_read(out, g);
        out.bulk(b"lag");
        reply_lag(out, s, g);
    }
    Ok(())
}

fn xinfo_stream(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[2];
    let now = ctx.now_ms;
    let s = read_stream(ctx.stats, ctx.dbs.of(key), key, now)?.ok_or(CmdError::NoSuchKey)?;
    let opts = &argv[3..];
    let full = match opts.len() {
        0 => false,
        1 | 3 if eq(opts[0], "full") => true,
        _ => return Err(CmdError::subcommand_syntax(argv)),
    };
    let mut count = 10;
    if opts.len() == 3 {
        if !eq(opts[1], "count") {
            return Err(CmdError::subcommand_syntax(argv));
        }
        count = i64_arg(opts[2])?;
        if count < 0 {
            count = 10;
        }
    }
    let out = &mut ctx.out;
    out.map(if full { 9 } else { 10 });
    out.bulk(b"length");
    out.int(s.len() as i64);
    out.bulk(b"radix-tree-keys");
    out.int(s.node_count() as i64);
    out.bulk(b"radix-tree-nodes");
    out.int(rax_nodes(s) as i64);
    out.bulk(b"last-generated-id");
    reply_id(out, s.last_id);
    out.bulk(b"max-deleted-entry-id");
    reply_id(out, s.max_deleted_entry_id);
    out.bulk(b"entries-added");
    out.int(s.entries_added as i64);
    out.bulk(b"recorded-first-entry-id");
    reply_id(out, s.first_id);
    if !full {
        out.bulk(b"groups");
        out.int(s.groups.len() as i64);
        for (name, rev) in [(&b"first-entry"[..], false), (b"last-entry", true)] {
            out.bulk(name);
            match s.range(StreamId::MIN, StreamId::MAX, rev, 1).first() {
                Some(e) => reply_entry(out, e),
                None => out.null(),
            }
        }
        return Ok(());
    }
    let count = count as usize;
    let limit = if count == 0 { usize::MAX } else { count };
    out.bulk(b"entries");
    reply_entries(out, &s.range(StreamId::MIN, StreamId::MAX, false, count));
    out.bulk(b"groups");
    out.array(s.groups.len());
    for (name, g) in &s.groups {
        out.map(7);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"last-delivered-id");
        reply_id(out, g.last_id);
        out.bulk(b"entries-read");
        reply_entries_read(out, g);
        out.bulk(b"lag");
        reply_lag(out, s, g);
        out.bulk(b"pel-count");
        out.int(g.pel.len() as i64);
        out.bulk(b"pending");
        let pel: Vec<_> = g.pel.iter().take(limit).collect();
        out.array(pel.len());
        for (id, p) in pel {
            out.array(4);
            reply_id(out, *id);
            out.bulk(&p.consumer);
            out.int(p.delivery_time as i64);
            out.int(p.delivery_count as i64);
        }
        out.bulk(b"consumers");
        out.array(g.consumers.len());
        for (cname, c) in &g.consumers {
            out.map(4);
            out.bulk(b"name");
            out.bulk(cname);
            out.bulk(b"seen-time");
            out.int(c.seen_time as i64);
            out.bulk(b"pel-count");
            out.int(c.pel.len() as i64);
            out.bulk(b"pending");
            let ids: Vec<_> = c.pel.iter().take(limit).collect();
            out.array(ids.len());
            for id in ids {
                let p = &g.pel[id];
                out.array(3);
                reply_id(out, *id);
                out.int(p.delivery_time as i64);
                out.int(p.delivery_count as i64);
            }
        }
    }
    Ok(())
}

/// The node count of Redis's radix tree over the nodes' 16-byte master
/// IDs (XINFO's `radix-tree-nodes`): one node per run of shared bytes
/// (compressed), one per branching point, one per key, and the root of an
/// empty tree. This is the tree Redis's inserts and removals keep.
fn rax_nodes(s: &Stream) -> usize {
    let keys: Vec<[u8; 16]> = s.nodes().map(|(id, _)| id.to_be_bytes()).collect();
    fn count(keys: &[[u8; 16]], depth: usize) -> usize {
        if keys.is_empty() || depth == 16 {
            return 1;
        }
        // The bytes every key shares from `depth` make one compressed node.
        let first = &keys[0];
        let last = &keys[keys.len() - 1];
        let mut shared = 0;
        while depth + shared < 16 && first[depth + shared] == last[depth + shared] {
            shared += 1;
        }
        if shared > 0 {
            return 1 + count(keys, depth + shared);
        }
        // A branching node, then one subtree per distinct byte.
        let mut total = 1;
        let mut start = 0;
        while start < keys.len() {
            let b = keys[start][depth];
            let end = start + keys[start..].iter().take_while(|k| k[depth] == b).count();
            total += count(&keys[start..end], depth + 1);
            start = end;
        }
        total
    }
    count(&keys, 0)
}

/// What a waiter blocked in XREAD or XREADGROUP needs from `key` to be
/// served now: the key's state as `crate::blocking` sees it.
pub enum Readiness {
    /// Serve it: run its command again.
    Serve,
    /// Nothing for it yet.
    Wait,
    /// Answer it this error (the group or the stream is gone).
    Fail(&'static str),
}

/// Whether the blocked XREAD/XREADGROUP `argv` can be served from `key`
/// (`serveClientsBlockedOnStreamKey`, `unblockDeletedStreamReadgroupClients`).
pub fn readiness(argv: &[Vec<u8>], entry: Option<&Entry>, key: &[u8]) -> Readiness {
    let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    let group_form = eq(args[0], "xreadgroup");
    let group = if group_form {
        (1..args.len().saturating_sub(2)).find(|&i| eq(args[i], "group")).map(|i| args[i + 1])
    } else {
        None
    };
    let s = match entry.map(|e| &e.value) {
        Some(Value::Stream(s)) => s,
        _ if group_form => return Readiness::Fail("UNBLOCKED the stream key no longer exists"),
        _ => return Readiness::Wait,
    };
    let gt = match group {
        Some(name) => match s.groups.get(name) {
            Some(g) => g.last_id,
            None => return Readiness::Fail("NOGROUP the consumer group this client was blocked on no longer exists"),
        },
        None => {
            let keys = streams_keys(&args, 1);
            let Some(pos) = keys.iter().position(|&i| args[i] == key) else { return Readiness::Wait };
            let id_at = keys[keys.len() - 1] + 1 + pos;
            match parse_strict_id(args[id_at], 0) {
                Ok(id) => id,
                Err(_) => return Readiness::Wait,
            }
        }
    };
    if s.last_id > gt {
        Readiness::Serve
    } else {
        Readiness::Wait
    }
}

/// The blocked read `argv` narrowed to `key`, non-blocking, with Redis's
/// count for a served wait (1000 when none was given).
pub fn narrow(argv: &[Vec<u8>], key: &[u8]) -> Vec<Vec<u8>> {
    let args: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    let group_form = eq(args[0], "xreadgroup");
    let keys = streams_keys(&args, if group_form { 4 } else { 1 });
    let pos = keys.iter().position(|&i| args[i] == key).unwrap_or(0);
    let id = if keys.is_empty() { b"$".to_vec() } else { argv[keys[keys.len() - 1] + 1 + pos].clone() };
    let mut out = vec![argv[0].clone()];
    let mut count = b"1000".to_vec();
    let mut i = 1;
    while i < args.len() && !eq(args[i], "streams") {
        if eq(args[i], "count") {
            if let Some(c) = args.get(i + 1).filter(|c| **c != b"0") {
                count = c.to_vec();
            }
            i += 2;
        } else if eq(args[i], "block") {
            i += 2;
        } else if eq(args[i], "group") {
            out.extend(args[i..i + 3].iter().map(|a| a.to_vec()));
            i += 3;
        } else {
            out.push(argv[i].clone());
            i += 1;
        }
    }
    out.extend([b"COUNT".to_vec(), count, b"STREAMS".to_vec(), key.to_vec(), id]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_as_redis_does() {
        assert_eq!(parse_id(b"5", 7).ok(), Some(StreamId::new(5, 7)));
        assert_eq!(parse_id(b"5-3", 7).ok(), Some(StreamId::new(5, 3)));
        assert_eq!(parse_id(b"-", 7).ok(), Some(StreamId::MIN));
        assert_eq!(parse_id(b"+", 7).ok(), Some(StreamId::MAX));
        assert!(parse_strict_id(b"-", 0).is_err());
        // strtoull's leniency, which Redis inherits.
        assert_eq!(parse_id(b"+5-007", 0).ok(), Some(StreamId::new(5, 7)));
        assert_eq!(parse_id(b"18446744073709551615-0", 0).ok(), Some(StreamId::new(u64::MAX, 0)));
        for bad in [&b""[..], b"-1", b"1-", b"a", b"1-2-3", b"18446744073709551616", b"1 "] {
            assert!(parse_id(bad, 0).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_id_full(b"5-*", 0, true, true).ok(), Some((StreamId::new(5, 0), false)));
    }

    #[test]
    fn narrowed_reads_wait_on_one_key() {
        let argv: Vec<Vec<u8>> = "XREAD BLOCK 0 STREAMS a b 1-1 2-2".split(' ').map(|s| s.as_bytes().to_vec()).collect();
        let n: Vec<String> = narrow(&argv, b"b").iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        assert_eq!(n, ["XREAD", "COUNT", "1000", "STREAMS", "b", "2-2"]);
        let argv: Vec<Vec<u8>> =
            "XREADGROUP GROUP g c COUNT 5 NOACK BLOCK 10 STREAMS a >".split(' ').map(|s| s.as_bytes().to_vec()).collect();
        let n: Vec<String> = narrow(&argv, b"a").iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        assert_eq!(n, ["XREADGROUP", "GROUP", "g", "c", "NOACK", "COUNT", "5", "STREAMS", "a", ">"]);
    }
}
