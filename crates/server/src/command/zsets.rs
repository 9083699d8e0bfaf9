//! Sorted-set commands: ZADD, ranges by rank, score and lex, the algebra and the pops (the blocking forms are in `blocking`).
//!
//! Every handler checks its arguments in Redis 7.0's order (`t_zset.c`),
//! so the first failing check names the same error as Redis. Ranges of
//! every kind are turned into a range of ranks by the engine
//! (`ZSet::score_ranks`, `ZSet::lex_ranks`) and then read or removed by
//! rank, in either direction.
//!
//! Scores reply as RESP3 doubles, or in RESP2 as bulk strings of the same
//! `%.17g` text (`reply_score`). Score arguments are parsed as Redis
//! parses them with C's `strtod` (hex floats, `inf`, `infinity`), strictly
//! for values (ZADD, WEIGHTS) and leniently for range bounds, which
//! Redis checks less (a leading space, or an empty bound meaning 0).

use std::collections::HashMap;

use keel_engine::value::{parse_canonical_i64, EncodingLimits, Value};
use keel_engine::zset::{score_as_integer, AddFlags, AddOutcome, LexBound, LexRange, ScoreRange, ZSet};
use keel_engine::{Db, Entry, Set};
use keel_protocol::reply::format_double_g17;
use keel_protocol::ReplyWriter;
use rand::Rng;
use smallvec::SmallVec;

use super::keys::{parse_cursor, parse_member_scan_options};
use super::parse::{eq, i64_arg};
use super::keyspec::*;
use super::{cmd, flags::*, range, CmdError, CmdResult, CommandSpec, Ctx, Keys, KEY1};
use crate::notify;

const G: &str = "sorted-set";
const NONDETERMINISTIC: &[&str] = &["nondeterministic_output"];

pub static COMMANDS: &[CommandSpec] = &[
    cmd("zadd", -4, WRITE | DENYOOM | FAST, KEY1, G, zadd)
        .doc("Add one or more members to a sorted set, or update its score if it already exists", "1.2.0"),
    cmd("zincrby", 4, WRITE | DENYOOM | FAST, KEY1, G, zincrby)
        .doc("Increment the score of a member in a sorted set", "1.2.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("zrem", -3, WRITE | FAST, KEY1, G, zrem)
        .doc("Remove one or more members from a sorted set", "1.2.0")
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("zscore", 3, READONLY | FAST, KEY1, G, zscore)
        .doc("Get the score associated with the given member in a sorted set", "1.2.0"),
    cmd("zmscore", -3, READONLY | FAST, KEY1, G, zmscore)
        .doc("Get the score associated with the given members in a sorted set", "6.2.0"),
    cmd("zcard", 2, READONLY | FAST, KEY1, G, zcard)
        .doc("Get the number of members in a sorted set", "1.2.0")
        .specs(&[key_at(1, RO)]),
    cmd("zcount", 4, READONLY | FAST, KEY1, G, zcount)
        .doc("Count the members in a sorted set with scores within the given values", "2.0.0"),
    cmd("zlexcount", 4, READONLY | FAST, KEY1, G, zlexcount)
        .doc("Count the number of members in a sorted set between a given lexicographical range", "2.8.9"),
    cmd("zrange", -4, READONLY, KEY1, G, zrange).doc("Return a range of members in a sorted set", "1.2.0"),
    cmd("zrangestore", -5, WRITE | DENYOOM, range(1, 2, 1), G, zrangestore)
        .doc("Store a range of members from sorted set into another key", "6.2.0")
        .specs(&[key_at(1, OW | UPDATE), key_at(2, RO | ACCESS)]),
    cmd("zrangebyscore", -4, READONLY, KEY1, G, zrangebyscore)
        .doc("Return a range of members in a sorted set, by score", "1.0.5"),
    cmd("zrevrangebyscore", -4, READONLY, KEY1, G, zrevrangebyscore)
        .doc("Return a range of members in a sorted set, by score, with scores ordered from high to low", "2.2.0"),
    cmd("zrangebylex", -4, READONLY, KEY1, G, zrangebylex)
        .doc("Return a range of members in a sorted set, by lexicographical range", "2.8.9"),
    cmd("zrevrangebylex", -4, READONLY, KEY1, G, zrevrangebylex).doc(
        "Return a range of members in a sorted set, by lexicographical range, ordered from higher to lower strings.",
        "2.8.9",
    ),
    cmd("zrevrange", -4, READONLY, KEY1, G, zrevrange)
        .doc("Return a range of members in a sorted set, by index, with scores ordered from high to low", "1.2.0"),
    cmd("zrank", 3, READONLY | FAST, KEY1, G, zrank).doc("Determine the index of a member in a sorted set", "2.0.0"),
    cmd("zrevrank", 3, READONLY | FAST, KEY1, G, zrevrank)
        .doc("Determine the index of a member in a sorted set, with scores ordered from high to low", "2.0.0"),
    cmd("zremrangebyrank", 4, WRITE, KEY1, G, zremrangebyrank)
        .doc("Remove all members in a sorted set within the given indexes", "2.0.0")
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("zremrangebyscore", 4, WRITE, KEY1, G, zremrangebyscore)
        .doc("Remove all members in a sorted set within the given scores", "1.2.0")
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("zremrangebylex", 4, WRITE, KEY1, G, zremrangebylex)
        .doc("Remove all members in a sorted set between the given lexicographical range", "2.8.9")
        .specs(&[key_at(1, RW | DELETE)]),
    cmd("zpopmin", -2, WRITE | FAST, KEY1, G, zpopmin)
        .doc("Remove and return members with the lowest scores in a sorted set", "5.0.0")
        .specs(&[key_at(1, RW | ACCESS | DELETE)]),
    cmd("zpopmax", -2, WRITE | FAST, KEY1, G, zpopmax)
        .doc("Remove and return members with the highest scores in a sorted set", "5.0.0")
        .specs(&[key_at(1, RW | ACCESS | DELETE)]),
    cmd("zmpop", -4, WRITE, Keys::Custom(numkeys_keys), G, zmpop)
        .doc("Remove and return members with scores in a sorted set", "7.0.0")
        .specs(&[ks(RW | ACCESS | DELETE, index(1), keynum(0, 1, 1))]),
    cmd("zrandmember", -2, READONLY, KEY1, G, zrandmember)
        .doc("Get one or multiple random elements from a sorted set", "6.2.0")
        .tips(NONDETERMINISTIC),
    cmd("zunion", -3, READONLY, Keys::Custom(numkeys_keys), G, zunion)
        .doc("Add multiple sorted sets", "6.2.0")
        .specs(&[ks(RO | ACCESS, index(1), keynum(0, 1, 1))]),
    cmd("zinter", -3, READONLY, Keys::Custom(numkeys_keys), G, zinter)
        .doc("Intersect multiple sorted sets", "6.2.0")
        .specs(&[ks(RO | ACCESS, index(1), keynum(0, 1, 1))]),
    cmd("zdiff", -3, READONLY, Keys::Custom(numkeys_keys), G, zdiff)
        .doc("Subtract multiple sorted sets", "6.2.0")
        .specs(&[ks(RO | ACCESS, index(1), keynum(0, 1, 1))]),
    cmd("zunionstore", -4, WRITE | DENYOOM, Keys::Custom(store_keys), G, zunionstore)
        .doc("Add multiple sorted sets and store the resulting sorted set in a new key", "2.0.0")
        .specs(&[key_at(1, OW | UPDATE), ks(RO | ACCESS, index(2), keynum(0, 1, 1))]),
    cmd("zinterstore", -4, WRITE | DENYOOM, Keys::Custom(store_keys), G, zinterstore)
        .doc("Intersect multiple sorted sets and store the resulting sorted set in a new key", "2.0.0")
        .specs(&[key_at(1, OW | UPDATE), ks(RO | ACCESS, index(2), keynum(0, 1, 1))]),
    cmd("zdiffstore", -4, WRITE | DENYOOM, Keys::Custom(store_keys), G, zdiffstore)
        .doc("Subtract multiple sorted sets and store the resulting sorted set in a new key", "6.2.0")
        .specs(&[key_at(1, OW | UPDATE), ks(RO | ACCESS, index(2), keynum(0, 1, 1))]),
    cmd("zintercard", -3, READONLY, Keys::Custom(numkeys_keys), G, zintercard)
        .doc("Intersect multiple sorted sets and return the cardinality of the result", "7.0.0")
        .specs(&[ks(RO | ACCESS, index(1), keynum(0, 1, 1))]),
    cmd("zscan", -3, READONLY, KEY1, G, zscan)
        .doc("Incrementally iterate sorted sets elements and associated scores", "2.8.0")
        .tips(NONDETERMINISTIC),
];

// ---------------------------------------------------------------------------
// Key positions of the numkeys forms.

/// The keys announced by the `numkeys` argument at `at` (none when it is
/// not a positive integer; clamped to the arguments present, since the
/// handler rejects a count that overflows them before touching a key).
fn keys_after(argv: &[&[u8]], at: usize) -> SmallVec<[usize; 4]> {
    let n = argv.get(at).and_then(|a| parse_canonical_i64(a)).filter(|&n| n > 0).map_or(0, |n| n as usize);
    (at + 1..argv.len().min((at + 1).saturating_add(n))).collect()
}

/// `CMD numkeys key... ...` (ZUNION, ZINTER, ZDIFF, ZINTERCARD, ZMPOP).
fn numkeys_keys(argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    keys_after(argv, 1)
}

/// `CMD destination numkeys key... ...` (the STORE forms).
fn store_keys(argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    let mut keys = SmallVec::new();
    if argv.len() > 1 {
        keys.push(1);
    }
    keys.extend(keys_after(argv, 2));
    keys
}

// ---------------------------------------------------------------------------
// Argument parsing.

/// C's `isspace` in the "C" locale (Rust's ASCII whitespace lacks `\v`).
fn is_c_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn starts_with_ci(s: &[u8], word: &[u8]) -> bool {
    s.len() >= word.len() && s[..word.len()].eq_ignore_ascii_case(word)
}

/// glibc's `strtod`: the value, the bytes consumed (0 when nothing is a
/// number, as C leaves `endptr` at the start) and whether it was out of
/// range (overflow to infinity, or underflow to zero).
fn strtod(s: &[u8]) -> (f64, usize, bool) {
    let mut i = 0;
    while i < s.len() && is_c_space(s[i]) {
        i += 1;
    }
    let start = i;
    let negative = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let sign = if negative { -1.0 } else { 1.0 };
    let rest = &s[i..];
    if starts_with_ci(rest, b"inf") {
        let n = if starts_with_ci(rest, b"infinity") { 8 } else { 3 };
        return (sign * f64::INFINITY, i + n, false);
    }
    if starts_with_ci(rest, b"nan") {
        let mut n = 3;
        if rest.get(3) == Some(&b'(') {
            let body = rest[4..].iter().take_while(|c| c.is_ascii_alphanumeric() || **c == b'_').count();
            if rest.get(4 + body) == Some(&b')') {
                n = 5 + body;
            }
        }
        return (f64::NAN, i + n, false);
    }
    let hex_digit_at = |k: usize| rest.get(k).is_some_and(u8::is_ascii_hexdigit);
    if starts_with_ci(rest, b"0x") && (hex_digit_at(2) || (rest.get(2) == Some(&b'.') && hex_digit_at(3))) {
        let (v, n, erange) = hex_float(&rest[2..]);
        return (sign * v, i + 2 + n, erange);
    }
    let digits = |from: usize| rest[from..].iter().take_while(|c| c.is_ascii_digit()).count();
    let int = digits(0);
    let mut j = int;
    let mut frac = 0;
    if rest.get(j) == Some(&b'.') {
        frac = digits(j + 1);
        j += 1 + frac;
    }
    if int + frac == 0 {
        return (0.0, 0, false);
    }
    if matches!(rest.get(j), Some(b'e' | b'E')) {
        let signed = usize::from(matches!(rest.get(j + 1), Some(b'+' | b'-')));
        let exp = digits(j + 1 + signed);
        if exp > 0 {
            j += 1 + signed + exp;
        }
    }
    let text = std::str::from_utf8(&s[start..i + j]).expect("ASCII digits");
    let v: f64 = text.parse().expect("a valid decimal float");
    let nonzero = rest[..j].iter().take_while(|c| !matches!(c, b'e' | b'E')).any(|c| matches!(c, b'1'..=b'9'));
    (v, i + j, v.is_infinite() || (v == 0.0 && nonzero))
}

/// The hex float after `0x`: digits, an optional fraction and an optional
/// binary exponent (`p±n`). Returns (value, bytes consumed, out of range).
fn hex_float(s: &[u8]) -> (f64, usize, bool) {
    let mut mantissa: u64 = 0;
    let mut exp: i64 = 0;
    let mut nonzero = false;
    let mut i = 0;
    let mut seen_point = false;
    while i < s.len() {
        let c = s[i];
        if c == b'.' && !seen_point {
            seen_point = true;
        } else if let Some(d) = (c as char).to_digit(16) {
            nonzero |= d != 0;
            if mantissa >> 60 == 0 {
                mantissa = mantissa << 4 | u64::from(d);
                if seen_point {
                    exp -= 4;
                }
            } else if !seen_point {
                exp += 4;
            }
        } else {
            break;
        }
        i += 1;
    }
    if matches!(s.get(i), Some(b'p' | b'P')) {
        let signed = usize::from(matches!(s.get(i + 1), Some(b'+' | b'-')));
        let n = s[i + 1 + signed..].iter().take_while(|c| c.is_ascii_digit()).count();
        if n > 0 {
            let digits = std::str::from_utf8(&s[i + 1 + signed..i + 1 + signed + n]).expect("ASCII digits");
            let e: i64 = digits.parse().unwrap_or(i64::MAX / 2).min(100_000);
            exp += if s[i + 1] == b'-' { -e } else { e };
            i += 1 + signed + n;
        }
    }
    let v = mantissa as f64 * 2f64.powi(exp.clamp(-5000, 5000) as i32);
    (v, i, v.is_infinite() || (v == 0.0 && nonzero))
}

/// A score or weight as Redis's `getDoubleFromObject` takes it: the whole
/// argument, no leading space, not NaN, not out of range.
pub(crate) fn parse_score(arg: &[u8]) -> Option<f64> {
    if arg.is_empty() || is_c_space(arg[0]) {
        return None;
    }
    let (v, n, erange) = strtod(arg);
    (n == arg.len() && !v.is_nan() && !erange).then_some(v)
}

fn score_arg(arg: &[u8]) -> Result<f64, CmdError> {
    parse_score(arg).ok_or(CmdError::NotFloat)
}

/// One end of a score range (`zslParseRange`): `(` makes it exclusive; the
/// rest is C text, so it ends at a NUL byte, and `strtod` may skip
/// leading spaces or consume nothing at all of an empty string (0).
fn score_bound(arg: &[u8]) -> Option<(f64, bool)> {
    let arg = &arg[..arg.iter().position(|&b| b == 0).unwrap_or(arg.len())];
    let (exclusive, body) = match arg.first() {
        Some(b'(') => (true, &arg[1..]),
        _ => (false, arg),
    };
    let (v, n, _) = strtod(body);
    (n == body.len() && !v.is_nan()).then_some((v, exclusive))
}

fn score_range(min: &[u8], max: &[u8]) -> Result<ScoreRange, CmdError> {
    match (score_bound(min), score_bound(max)) {
        (Some((min, min_ex)), Some((max, max_ex))) => Ok(ScoreRange { min, max, min_ex, max_ex }),
        _ => Err(CmdError::other("ERR min or max is not a float")),
    }
}

/// One end of a lex range (`zslParseLexRangeItem`). Redis tests the byte
/// after `+`/`-` for the C string's end, so a NUL there also ends it.
fn lex_bound(arg: &[u8]) -> Option<LexBound<'_>> {
    let alone = arg.len() == 1 || arg.get(1) == Some(&0);
    match arg.first()? {
        b'+' if alone => Some(LexBound::Max),
        b'-' if alone => Some(LexBound::Min),
        b'(' => Some(LexBound::Excl(&arg[1..])),
        b'[' => Some(LexBound::Incl(&arg[1..])),
        _ => None,
    }
}

fn lex_range<'a>(min: &'a [u8], max: &'a [u8]) -> Result<LexRange<'a>, CmdError> {
    match (lex_bound(min), lex_bound(max)) {
        (Some(min), Some(max)) => Ok(LexRange { min, max }),
        _ => Err(CmdError::other("ERR min or max not valid string range item")),
    }
}

/// Redis's `getPositiveLongFromObjectOrReply` without a custom message:
/// any failure, unparsable or negative, names the range.
fn positive_arg(arg: &[u8]) -> Result<usize, CmdError> {
    match i64_arg(arg) {
        Ok(n) if n >= 0 => Ok(n as usize),
        _ => Err(CmdError::other("ERR value is out of range, must be positive")),
    }
}

/// At least 1, else `message` (`getRangeLongFromObjectOrReply` with a
/// message, which covers unparsable text too).
fn at_least_one(arg: &[u8], message: &str) -> Result<usize, CmdError> {
    match i64_arg(arg) {
        Ok(n) if n >= 1 => Ok(n as usize),
        _ => Err(CmdError::other(message)),
    }
}

/// Parses ZMPOP's arguments after the command name (`numkeys key...
/// MIN|MAX [COUNT count]`), Redis's error texts; returns (numkeys, max,
/// count). BZMPOP passes what follows its timeout.
pub(crate) fn parse_mpop(args: &[&[u8]]) -> Result<(usize, bool, usize), CmdError> {
    let numkeys = at_least_one(args[0], "ERR numkeys should be greater than 0")?;
    let where_at = numkeys.saturating_add(1);
    let Some(&side) = args.get(where_at) else {
        return Err(CmdError::Syntax);
    };
    let max = if eq(side, "min") {
        false
    } else if eq(side, "max") {
        true
    } else {
        return Err(CmdError::Syntax);
    };
    let mut count = None;
    let mut j = where_at + 1;
    while j < args.len() {
        if count.is_none() && eq(args[j], "count") && j + 1 < args.len() {
            j += 1;
            count = Some(at_least_one(args[j], "ERR count should be greater than 0")?);
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    Ok((numkeys, max, count.unwrap_or(1)))
}

// ---------------------------------------------------------------------------
// Lookups and replies.

fn zset_of(entry: Option<&Entry>) -> Result<Option<&ZSet>, CmdError> {
    match entry.map(|e| &e.value) {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn zset_of_mut(entry: Option<&mut Entry>) -> Result<Option<&mut ZSet>, CmdError> {
    match entry.map(|e| &mut e.value) {
        None => Ok(None),
        Some(Value::ZSet(z)) => Ok(Some(z)),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Redis's `lookupKeyRead` for a zset: expires the key if due, counts a
/// keyspace hit or miss, checks the type.
pub(crate) fn read<'d>(
    stats: &crate::server::WorkerStats,
    db: &'d mut Db,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'d ZSet>, CmdError> {
    let entry = db.get(key, now_ms);
    stats.hit(entry.is_some());
    zset_of(entry)
}

/// After members of `key` were removed in place: deletes the key if it is
/// now empty (a collection never stays empty), else signals WATCH.
/// Returns whether it deleted the key.
fn settle(db: &mut Db, key: &[u8]) -> bool {
    let emptied = matches!(db.peek(key), Some(Entry { value: Value::ZSet(z), .. }) if z.is_empty());
    if emptied {
        db.remove(key);
    } else {
        db.signal_modified(key);
    }
    emptied
}

/// A score as Redis replies it: bulk string in RESP2, double in RESP3.
pub(crate) fn reply_score(out: &mut ReplyWriter<'_>, score: f64) {
    out.double(score);
}

/// Members, with their scores when asked: a flat array in RESP2, an array
/// of [member, score] pairs in RESP3 (order matters, so not a map).
fn reply_members<'a>(
    out: &mut ReplyWriter<'_>,
    items: impl ExactSizeIterator<Item = (&'a [u8], f64)>,
    withscores: bool,
) {
    let n = items.len();
    out.array(if withscores && !out.resp3 { 2 * n } else { n });
    for (member, score) in items {
        if withscores && out.resp3 {
            out.array(2);
        }
        out.bulk(member);
        if withscores {
            reply_score(out, score);
        }
    }
}

/// Owned (member, score) pairs: what crosses from one key to another.
type Pairs = Vec<(Vec<u8>, f64)>;

fn owned<'a>(items: impl Iterator<Item = (&'a [u8], f64)>) -> Pairs {
    items.map(|(m, s)| (m.to_vec(), s)).collect()
}

/// Stores a computed result at `dst` as Redis's STORE commands do: the
/// key is replaced (TTL dropped) by a non-empty set, deleted by an empty
/// one. Replies with the result's size. Notifies `event` (the command's,
/// `zunionstore`...) for a stored result, `del` for a deleted `dst`.
fn store_result(ctx: &mut Ctx<'_>, dst: &[u8], z: ZSet, event: &str) {
    let (lru, now) = (ctx.lru_s, ctx.now_ms);
    let db = ctx.dbs.of(dst);
    let len = z.len();
    if len == 0 {
        // Redis's dbDelete, without a lookup: a key past its time goes as `del`.
        let removed = db.remove(dst).is_some();
        ctx.out.int(0);
        if removed {
            ctx.wrote(1);
            ctx.notify(notify::GENERIC, "del", dst);
        }
    } else {
        db.set_key(dst, Value::ZSet(z), now, lru);
        ctx.out.int(len as i64);
        ctx.wrote(1);
        ctx.notify(notify::ZSET, event, dst);
    }
}

// ---------------------------------------------------------------------------
// ZADD, ZINCRBY, ZREM, and single-member reads.

pub(crate) fn zadd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zadd_generic(ctx, argv, false)
}

fn zincrby(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zadd_generic(ctx, argv, true)
}

/// What a ZADD did, for its reply and its dirty count.
#[derive(Default)]
struct Tally {
    added: u64,
    updated: u64,
    /// Some member was not skipped: ZADD INCR replies with `score`.
    processed: bool,
    score: f64,
}

fn add_all(
    z: &mut ZSet,
    pairs: &[&[u8]],
    scores: &[f64],
    flags: AddFlags,
    limits: &EncodingLimits,
) -> Result<Tally, CmdError> {
    let mut t = Tally::default();
    for (pair, &score) in pairs.chunks(2).zip(scores) {
        let outcome = z
            .add(pair[1], score, flags, limits)
            .map_err(|_| CmdError::other("ERR resulting score is not a number (NaN)"))?;
        let score = match outcome {
            AddOutcome::Added(s) => {
                t.added += 1;
                s
            }
            AddOutcome::Updated(s) => {
                t.updated += 1;
                s
            }
            AddOutcome::Unchanged(s) => s,
            AddOutcome::Skipped => continue,
        };
        t.processed = true;
        t.score = score;
    }
    Ok(t)
}

/// Redis's `zaddGenericCommand`; ZINCRBY is ZADD with INCR forced on
/// (and parses options the same way, as Redis does).
fn zadd_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], incrby: bool) -> CmdResult {
    let key = argv[1];
    let mut flags = AddFlags { incr: incrby, ..AddFlags::default() };
    let mut ch = false;
    let mut i = 2;
    while i < argv.len() {
        let opt = argv[i];
        if eq(opt, "nx") {
            flags.nx = true;
        } else if eq(opt, "xx") {
            flags.xx = true;
        } else if eq(opt, "ch") {
            ch = true;
        } else if eq(opt, "incr") {
            flags.incr = true;
        } else if eq(opt, "gt") {
            flags.gt = true;
        } else if eq(opt, "lt") {
            flags.lt = true;
        } else {
            break;
        }
        i += 1;
    }
    let pairs = &argv[i..];
    if pairs.is_empty() || pairs.len() % 2 == 1 {
        return Err(CmdError::Syntax);
    }
    if flags.nx && flags.xx {
        return Err(CmdError::other("ERR XX and NX options at the same time are not compatible"));
    }
    if (flags.nx && (flags.gt || flags.lt)) || (flags.gt && flags.lt) {
        return Err(CmdError::other("ERR GT, LT, and/or NX options at the same time are not compatible"));
    }
    if flags.incr && pairs.len() > 2 {
        return Err(CmdError::other("ERR INCR option supports a single increment-element pair"));
    }
    let scores = pairs.chunks(2).map(|p| score_arg(p[0])).collect::<Result<Vec<f64>, _>>()?;
    let (now, lru) = (ctx.now_ms, ctx.lru_s);
    let limits = ctx.encoding_limits();
    let db = ctx.dbs.of(key);
    let tally = match zset_of_mut(db.get_mut(key, now))? {
        Some(z) => {
            let t = add_all(z, pairs, &scores, flags, &limits)?;
            if t.added + t.updated > 0 {
                db.signal_modified(key);
            }
            t
        }
        None if flags.xx => Tally::default(),
        None => {
            // Redis picks the new key's encoding by its first member.
            let mut z = ZSet::for_first_member(&limits, pairs[1].len());
            let t = add_all(&mut z, pairs, &scores, flags, &limits)?;
            db.set(key, Value::ZSet(z), false, lru);
            t
        }
    };
    if tally.added + tally.updated > 0 {
        ctx.wrote(tally.added + tally.updated);
        ctx.notify(notify::ZSET, if flags.incr { "zincr" } else { "zadd" }, key);
    }
    if flags.incr {
        if tally.processed {
            reply_score(&mut ctx.out, tally.score);
        } else {
            ctx.out.null();
        }
    } else {
        let n = if ch { tally.added + tally.updated } else { tally.added };
        ctx.out.int(n as i64);
    }
    Ok(())
}

fn zrem(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    let Some(z) = zset_of_mut(db.get_mut(key, now))? else {
        ctx.out.int(0);
        return Ok(());
    };
    let mut deleted = 0u64;
    for member in &argv[2..] {
        if z.remove(member) {
            deleted += 1;
            if z.is_empty() {
                break;
            }
        }
    }
    if deleted > 0 {
        let emptied = settle(db, key);
        ctx.wrote(deleted);
        ctx.notify_removal(notify::ZSET, "zrem", key, emptied);
    }
    ctx.out.int(deleted as i64);
    Ok(())
}

fn zscore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    match read(ctx.stats, db, argv[1], ctx.now_ms)?.and_then(|z| z.score(argv[2])) {
        Some(score) => reply_score(&mut ctx.out, score),
        None => ctx.out.null(),
    }
    Ok(())
}

fn zmscore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let z = read(ctx.stats, db, argv[1], ctx.now_ms)?;
    let members = &argv[2..];
    ctx.out.array(members.len());
    for member in members {
        match z.and_then(|z| z.score(member)) {
            Some(score) => reply_score(&mut ctx.out, score),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

fn zcard(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let n = read(ctx.stats, db, argv[1], ctx.now_ms)?.map_or(0, ZSet::len);
    ctx.out.int(n as i64);
    Ok(())
}

fn zcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let range = score_range(argv[2], argv[3])?;
    let db = ctx.dbs.of(argv[1]);
    let n = read(ctx.stats, db, argv[1], ctx.now_ms)?.map_or(0, |z| z.score_ranks(&range).len());
    ctx.out.int(n as i64);
    Ok(())
}

fn zlexcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let range = lex_range(argv[2], argv[3])?;
    let db = ctx.dbs.of(argv[1]);
    let n = read(ctx.stats, db, argv[1], ctx.now_ms)?.map_or(0, |z| z.lex_ranks(&range, false).len());
    ctx.out.int(n as i64);
    Ok(())
}

fn zrank(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    rank_generic(ctx, argv, false)
}

fn zrevrank(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    rank_generic(ctx, argv, true)
}

fn rank_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], rev: bool) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let rank = read(ctx.stats, db, argv[1], ctx.now_ms)?
        .and_then(|z| z.rank(argv[2]).map(|r| if rev { z.len() - 1 - r } else { r }));
    match rank {
        Some(r) => ctx.out.int(r as i64),
        None => ctx.out.null(),
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// ZRANGE and its older forms, ZRANGESTORE.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// A parsed range, ready to be turned into ranks.
enum Spec<'a> {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange<'a>),
}

/// The ranks a range names in `z`, after LIMIT, and whether to walk them
/// from the top (Redis's `genericZrangeby*Command` walks).
fn spec_ranks(z: &ZSet, spec: &Spec<'_>, rev: bool, limit: Option<(i64, i64)>) -> std::ops::Range<usize> {
    let len = z.len() as i64;
    let base = match spec {
        Spec::Rank(start, end) => {
            let start = if *start < 0 { (len + start).max(0) } else { *start };
            let end = if *end < 0 { len + end } else { (*end).min(len - 1) };
            if start > end || start >= len {
                return 0..0;
            }
            let (start, end) = (start as usize, end as usize);
            return if rev { z.len() - 1 - end..z.len() - start } else { start..end + 1 };
        }
        Spec::Score(range) => z.score_ranks(range),
        Spec::Lex(range) => z.lex_ranks(range, rev),
    };
    let Some((offset, count)) = limit else { return base };
    // Redis walks `offset` members from the first in range without
    // looking at them (a negative offset walks off the end), then takes up
    // to `count` (negative: no limit) while they stay in range.
    if base.is_empty() || offset < 0 {
        return 0..0;
    }
    let offset = offset as usize;
    let take = if count < 0 { usize::MAX } else { count as usize };
    match spec {
        // A listpack is sorted by score, so its members need not be in lex
        // order: walk for real, as Redis does.
        Spec::Lex(range) => {
            if rev {
                let Some(top) = (base.end - 1).checked_sub(offset) else { return 0..0 };
                let n = z.range(0..top + 1).rev().take(take).take_while(|(m, _)| range.above_min(m)).count();
                top + 1 - n..top + 1
            } else {
                let lo = base.start.saturating_add(offset);
                if lo >= z.len() {
                    return 0..0;
                }
                let n = z.range(lo..z.len()).take(take).take_while(|(m, _)| range.below_max(m)).count();
                lo..lo + n
            }
        }
        // Scores are sorted: the walk is rank arithmetic.
        _ if offset >= base.len() => 0..0,
        _ if rev => {
            let hi = base.end - offset;
            hi.saturating_sub(take).max(base.start)..hi
        }
        _ => {
            let lo = base.start + offset;
            lo..lo.saturating_add(take).min(base.end)
        }
    }
}

fn zrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zrange_generic(ctx, argv, 1, None, None)
}

fn zrangestore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zrange_generic(ctx, argv, 2, None, None)
}

fn zrevrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zrange_generic(ctx, argv, 1, Some(By::Rank), Some(true))
}

fn zrangebyscore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zrange_generic(ctx, argv, 1, Some(By::Score), Some(false))
}

fn zrevrangebyscore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zrange_generic(ctx, argv, 1, Some(By::Score), Some(true))
}

fn zrangebylex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zrange_generic(ctx, argv, 1, Some(By::Lex), Some(false))
}

fn zrevrangebylex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zrange_generic(ctx, argv, 1, Some(By::Lex), Some(true))
}

/// Redis's `zrangeGenericCommand`: `src` is the source key's index (2 for
/// ZRANGESTORE, whose destination is argument 1); `by` and `rev` are fixed
/// by the older commands, else chosen by ZRANGE's options.
fn zrange_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], src: usize, by: Option<By>, rev: Option<bool>) -> CmdResult {
    let store = src == 2;
    let (mut by_opt, mut rev_opt) = (by, rev);
    let mut withscores = false;
    let mut limit = None;
    let mut j = src + 3;
    while j < argv.len() {
        let left = argv.len() - j - 1;
        let opt = argv[j];
        if !store && eq(opt, "withscores") {
            withscores = true;
        } else if eq(opt, "limit") && left >= 2 {
            limit = Some((i64_arg(argv[j + 1])?, i64_arg(argv[j + 2])?));
            j += 2;
        } else if rev_opt.is_none() && eq(opt, "rev") {
            rev_opt = Some(true);
        } else if by_opt.is_none() && eq(opt, "bylex") {
            by_opt = Some(By::Lex);
        } else if by_opt.is_none() && eq(opt, "byscore") {
            by_opt = Some(By::Score);
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let by = by_opt.unwrap_or(By::Rank);
    let rev = rev_opt.unwrap_or(false);
    // Redis keeps "no LIMIT" as a count of -1, so `LIMIT x -1` passes.
    if limit.is_some_and(|(_, count)| count != -1) && by == By::Rank {
        return Err(CmdError::other(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if withscores && by == By::Lex {
        return Err(CmdError::other("ERR syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    // The score and lex forms take the range as [max, min] when reversed.
    let (min, max) =
        if rev && by != By::Rank { (argv[src + 2], argv[src + 1]) } else { (argv[src + 1], argv[src + 2]) };
    let spec = match by {
        By::Rank => Spec::Rank(i64_arg(min)?, i64_arg(max)?),
        By::Score => Spec::Score(score_range(min, max)?),
        By::Lex => Spec::Lex(lex_range(min, max)?),
    };
    let key = argv[src];
    let db = ctx.dbs.of(key);
    let z = read(ctx.stats, db, key, ctx.now_ms)?;
    if store {
        // Read all of the source before the destination (maybe another
        // shard) is written.
        let (items, known_len) = match z {
            Some(z) => {
                let ranks = spec_ranks(z, &spec, rev, limit);
                let known_len = matches!(spec, Spec::Rank(..)).then_some(ranks.len());
                (if rev { owned(z.range(ranks).rev()) } else { owned(z.range(ranks)) }, known_len)
            }
            None => (Vec::new(), None),
        };
        // Built as Redis builds it: a listpack unless the length, when
        // known up front, passes the limit; then each member added in the
        // order emitted, converting as ZADD would (so members added while
        // it is a listpack store -0 as 0, as Redis's do).
        let limits = ctx.encoding_limits();
        let mut dst = if known_len.is_some_and(|n| n > limits.zset_max_listpack_entries) {
            ZSet::SkipList(Box::default())
        } else {
            ZSet::default()
        };
        for (member, score) in &items {
            dst.add(member, *score, AddFlags::default(), &limits).expect("stored scores are never NaN");
        }
        store_result(ctx, argv[1], dst, "zrangestore");
        return Ok(());
    }
    match z {
        None => ctx.out.array(0),
        Some(z) => {
            let ranks = spec_ranks(z, &spec, rev, limit);
            if rev {
                reply_members(&mut ctx.out, z.range(ranks).rev(), withscores);
            } else {
                reply_members(&mut ctx.out, z.range(ranks), withscores);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// ZREMRANGEBY*.

fn zremrangebyrank(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let spec = Spec::Rank(i64_arg(argv[2])?, i64_arg(argv[3])?);
    zremrange_generic(ctx, argv[1], spec, "zremrangebyrank")
}

fn zremrangebyscore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let spec = Spec::Score(score_range(argv[2], argv[3])?);
    zremrange_generic(ctx, argv[1], spec, "zremrangebyscore")
}

fn zremrangebylex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let spec = Spec::Lex(lex_range(argv[2], argv[3])?);
    zremrange_generic(ctx, argv[1], spec, "zremrangebylex")
}

fn zremrange_generic(ctx: &mut Ctx<'_>, key: &[u8], spec: Spec<'_>, event: &str) -> CmdResult {
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    let Some(z) = zset_of_mut(db.get_mut(key, now))? else {
        ctx.out.int(0);
        return Ok(());
    };
    let ranks = spec_ranks(z, &spec, false, None);
    let deleted = z.remove_ranks(ranks) as u64;
    if deleted > 0 {
        let emptied = settle(db, key);
        ctx.wrote(deleted);
        ctx.notify_removal(notify::ZSET, event, key, emptied);
    }
    ctx.out.int(deleted as i64);
    Ok(())
}

// ---------------------------------------------------------------------------
// Pops.

/// Pops up to `count` members with the lowest (max=false) or highest
/// scores, lowest (highest) first; removes the key when emptied; calls
/// ctx.wrote and notifies `zpopmin`/`zpopmax` (and `del`). Ok(None) when
/// absent, Err(WrongType) when not a zset. With `count` 0 an existing set
/// is only type-checked: Ok(Some(empty)).
pub(crate) fn pop(ctx: &mut Ctx<'_>, key: &[u8], max: bool, count: usize) -> Result<Option<Pairs>, CmdError> {
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    let Some(z) = zset_of_mut(db.get_mut(key, now))? else {
        return Ok(None);
    };
    let len = z.len();
    let n = count.min(len);
    let ranks = if max { len - n..len } else { 0..n };
    let popped = if max { owned(z.range(ranks.clone()).rev()) } else { owned(z.range(ranks.clone())) };
    z.remove_ranks(ranks);
    if n > 0 {
        let emptied = settle(db, key);
        ctx.wrote(n as u64);
        ctx.notify_removal(notify::ZSET, if max { "zpopmax" } else { "zpopmin" }, key, emptied);
    }
    Ok(Some(popped))
}

fn zpopmin(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zpop_generic(ctx, argv, false)
}

fn zpopmax(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zpop_generic(ctx, argv, true)
}

/// One (member, score) pair as its own array, as nested replies carry it.
fn reply_pair(out: &mut ReplyWriter<'_>, member: &[u8], score: f64) {
    out.array(2);
    out.bulk(member);
    reply_score(out, score);
}

fn zpop_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], max: bool) -> CmdResult {
    if argv.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let count = argv.get(2).map(|a| positive_arg(a)).transpose()?;
    // RESP3 nests the pairs only when a count was given.
    let nested = ctx.out.resp3 && count.is_some();
    let popped = pop(ctx, argv[1], max, count.unwrap_or(1))?.unwrap_or_default();
    let out = &mut ctx.out;
    if nested {
        out.array(popped.len());
        for (member, score) in &popped {
            reply_pair(out, member, *score);
        }
    } else {
        out.array(2 * popped.len());
        for (member, score) in &popped {
            out.bulk(member);
            reply_score(out, *score);
        }
    }
    Ok(())
}

fn zmpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (numkeys, max, count) = parse_mpop(&argv[1..])?;
    for &key in &argv[2..2 + numkeys] {
        let Some(popped) = pop(ctx, key, max, count)? else { continue };
        let out = &mut ctx.out;
        out.array(2);
        out.bulk(key);
        out.array(popped.len());
        for (member, score) in &popped {
            reply_pair(out, member, *score);
        }
        // Replicated as the pop it made (the count of what it popped), as
        // Redis does.
        let name: &[u8] = if max { b"ZPOPMAX" } else { b"ZPOPMIN" };
        let n = popped.len().to_string().into_bytes();
        ctx.propagate_as(vec![vec![name.to_vec(), key.to_vec(), n]]);
        return Ok(());
    }
    ctx.out.null_array();
    Ok(())
}

// ---------------------------------------------------------------------------
// ZRANDMEMBER.

fn zrandmember(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    if argv.len() >= 3 {
        let count = i64_arg(argv[2])?;
        if count == i64::MIN {
            return Err(CmdError::other(
                "ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807",
            ));
        }
        if argv.len() > 4 || (argv.len() == 4 && !eq(argv[3], "withscores")) {
            return Err(CmdError::Syntax);
        }
        let withscores = argv.len() == 4;
        if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
            return Err(CmdError::other("ERR value is out of range"));
        }
        return zrandmember_count(ctx, argv[1], count, withscores);
    }
    let db = ctx.dbs.of(argv[1]);
    match read(ctx.stats, db, argv[1], ctx.now_ms)? {
        Some(z) => {
            let (member, _) = z.random_entry(&mut rand::thread_rng()).expect("a stored zset is never empty");
            ctx.out.bulk(member);
        }
        None => ctx.out.null(),
    }
    Ok(())
}

/// Redis's `zrandmemberWithCountCommand`: a negative count may repeat
/// members; a positive one returns distinct members (all of them, from
/// the highest score, when it covers the set).
fn zrandmember_count(ctx: &mut Ctx<'_>, key: &[u8], count: i64, withscores: bool) -> CmdResult {
    let db = ctx.dbs.of(key);
    let Some(z) = read(ctx.stats, db, key, ctx.now_ms)? else {
        ctx.out.array(0);
        return Ok(());
    };
    let out = &mut ctx.out;
    let n = count.unsigned_abs() as usize;
    if n == 0 {
        out.array(0);
        return Ok(());
    }
    let mut rng = rand::thread_rng();
    let emit = |out: &mut ReplyWriter<'_>, member: &[u8], score: f64| {
        if withscores && out.resp3 {
            out.array(2);
        }
        out.bulk(member);
        if withscores {
            reply_score(out, score);
        }
    };
    if count < 0 || n == 1 {
        out.array(if withscores && !out.resp3 { 2 * n } else { n });
        // A listpack has no O(1) random access: read it once.
        let small: Vec<(&[u8], f64)> = match z {
            ZSet::Listpack(_) => z.iter().collect(),
            ZSet::SkipList(_) => Vec::new(),
        };
        for _ in 0..n {
            let (member, score) = if small.is_empty() {
                z.random_entry(&mut rng).expect("a stored zset is never empty")
            } else {
                small[rng.gen_range(0..small.len())]
            };
            emit(out, member, score);
        }
        return Ok(());
    }
    if n >= z.len() {
        // Redis answers the whole set from the top score down.
        reply_members(out, z.iter().rev(), withscores);
        return Ok(());
    }
    let picked: Vec<(&[u8], f64)> = if n * 3 > z.len() {
        // Most of the set: shuffle a copy and keep a prefix.
        let mut all: Vec<(&[u8], f64)> = z.iter().collect();
        for i in 0..n {
            let j = rng.gen_range(i..all.len());
            all.swap(i, j);
        }
        all.truncate(n);
        all
    } else {
        // A small part: draw until enough distinct members.
        let mut seen = std::collections::HashSet::with_capacity(n);
        let mut picked = Vec::with_capacity(n);
        while picked.len() < n {
            let (member, score) = z.random_entry(&mut rng).expect("a stored zset is never empty");
            if seen.insert(member) {
                picked.push((member, score));
            }
        }
        picked
    };
    reply_members(out, picked.into_iter(), withscores);
    Ok(())
}

// ---------------------------------------------------------------------------
// ZUNION, ZINTER, ZDIFF, their STORE forms, ZINTERCARD.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    /// Redis's `zunionInterAggregate`: a sum of +inf and -inf is 0.
    fn apply(self, target: &mut f64, value: f64) {
        match self {
            Aggregate::Sum => {
                *target += value;
                if target.is_nan() {
                    *target = 0.0;
                }
            }
            Aggregate::Min => {
                if value < *target {
                    *target = value;
                }
            }
            Aggregate::Max => {
                if value > *target {
                    *target = value;
                }
            }
        }
    }
}

/// A plain set as an input of the zset algebra: each member has score 1.
fn set_contains(set: &Set, member: &[u8]) -> bool {
    set.contains(member)
}

fn set_for_each(set: &Set, mut f: impl FnMut(&[u8])) {
    let mut buf = itoa::Buffer::new();
    set.iter().for_each(|m| f(m.as_bytes(&mut buf)));
}

/// The score of `member` in an input (zset or set), if present.
fn input_score(value: &Value, member: &[u8]) -> Option<f64> {
    match value {
        Value::ZSet(z) => z.score(member),
        Value::Set(s) => set_contains(s, member).then_some(1.0),
        _ => None,
    }
}

fn input_for_each(value: &Value, mut f: impl FnMut(&[u8], f64)) {
    match value {
        Value::ZSet(z) => z.iter().for_each(|(m, s)| f(m, s)),
        Value::Set(s) => set_for_each(s, |m| f(m, 1.0)),
        _ => {}
    }
}

/// An accumulator of the algebra: member to score, foldhash as the
/// command table's map (no DoS exposure beyond the inputs themselves).
type Acc = HashMap<Vec<u8>, f64, foldhash::fast::RandomState>;

fn zunion(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zsetop(ctx, argv, "zunion", SetOp::Union, false, false)
}

fn zinter(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zsetop(ctx, argv, "zinter", SetOp::Inter, false, false)
}

fn zdiff(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zsetop(ctx, argv, "zdiff", SetOp::Diff, false, false)
}

fn zunionstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zsetop(ctx, argv, "zunionstore", SetOp::Union, true, false)
}

fn zinterstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zsetop(ctx, argv, "zinterstore", SetOp::Inter, true, false)
}

fn zdiffstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zsetop(ctx, argv, "zdiffstore", SetOp::Diff, true, false)
}

fn zintercard(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    zsetop(ctx, argv, "zintercard", SetOp::Inter, false, true)
}

/// Redis's `zunionInterDiffGenericCommand`. Keys may live in different
/// shards, so inputs are visited one at a time: the result is built in an
/// owned accumulator, input by input.
fn zsetop(ctx: &mut Ctx<'_>, argv: &[&[u8]], name: &str, op: SetOp, store: bool, card_only: bool) -> CmdResult {
    let numkeys_at = if store { 2 } else { 1 };
    let setnum = i64_arg(argv[numkeys_at])?;
    if setnum < 1 {
        return Err(CmdError::other(format!("ERR at least 1 input key is needed for '{name}' command")));
    }
    if setnum as u64 > (argv.len() - numkeys_at - 1) as u64 {
        return Err(CmdError::Syntax);
    }
    let setnum = setnum as usize;
    let keys = &argv[numkeys_at + 1..numkeys_at + 1 + setnum];
    let now = ctx.now_ms;
    // Every input is looked up (and type-checked) before the options.
    let mut lens = Vec::with_capacity(setnum);
    for &key in keys {
        let entry = ctx.dbs.of(key).get(key, now);
        ctx.stats.hit(entry.is_some());
        lens.push(match entry.map(|e| &e.value) {
            None => 0,
            Some(Value::ZSet(z)) => z.len(),
            Some(Value::Set(s)) => s.len(),
            Some(_) => return Err(CmdError::WrongType),
        });
    }
    let mut weights = vec![1.0; setnum];
    let mut aggregate = Aggregate::Sum;
    let mut withscores = false;
    let mut limit = 0usize;
    let mut j = numkeys_at + 1 + setnum;
    while j < argv.len() {
        let remaining = argv.len() - j;
        let opt = argv[j];
        if op != SetOp::Diff && !card_only && remaining > setnum && eq(opt, "weights") {
            for (i, w) in weights.iter_mut().enumerate() {
                *w = parse_score(argv[j + 1 + i]).ok_or_else(|| CmdError::other("ERR weight value is not a float"))?;
            }
            j += 1 + setnum;
        } else if op != SetOp::Diff && !card_only && remaining >= 2 && eq(opt, "aggregate") {
            let a = argv[j + 1];
            aggregate = if eq(a, "sum") {
                Aggregate::Sum
            } else if eq(a, "min") {
                Aggregate::Min
            } else if eq(a, "max") {
                Aggregate::Max
            } else {
                return Err(CmdError::Syntax);
            };
            j += 2;
        } else if !store && !card_only && eq(opt, "withscores") {
            withscores = true;
            j += 1;
        } else if card_only && remaining >= 2 && eq(opt, "limit") {
            limit = match i64_arg(argv[j + 1]) {
                Ok(n) if n >= 0 => n as usize,
                _ => return Err(CmdError::other("ERR LIMIT can't be negative")),
            };
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    // Smallest input first (a stable sort, as glibc's qsort is): it bounds
    // an intersection, and fixes the order scores are aggregated in.
    let mut order: Vec<usize> = (0..setnum).collect();
    if op != SetOp::Diff {
        order.sort_by_key(|&i| lens[i]);
    }
    let mut acc = Acc::default();
    let visit = |ctx: &mut Ctx<'_>, i: usize, f: &mut dyn FnMut(&Value)| {
        if let Some(entry) = ctx.dbs.of(keys[i]).get(keys[i], now) {
            f(&entry.value);
        }
    };
    match op {
        SetOp::Union => {
            for &i in &order {
                let w = weights[i];
                visit(ctx, i, &mut |v| {
                    input_for_each(v, |m, s| {
                        let mut score = w * s;
                        if score.is_nan() {
                            score = 0.0;
                        }
                        match acc.get_mut(m) {
                            Some(t) => aggregate.apply(t, score),
                            None => {
                                acc.insert(m.to_vec(), score);
                            }
                        }
                    })
                });
            }
        }
        SetOp::Inter if lens[order[0]] > 0 => {
            let first = order[0];
            let w = weights[first];
            visit(ctx, first, &mut |v| {
                input_for_each(v, |m, s| {
                    let score = w * s;
                    acc.insert(m.to_vec(), if score.is_nan() { 0.0 } else { score });
                })
            });
            for &i in &order[1..] {
                let w = weights[i];
                visit(ctx, i, &mut |v| {
                    acc.retain(|m, t| match input_score(v, m) {
                        Some(s) => {
                            aggregate.apply(t, s * w);
                            true
                        }
                        None => false,
                    })
                });
            }
        }
        SetOp::Inter => {}
        SetOp::Diff => {
            // The first input minus every other; nothing if one of them is
            // the first key itself.
            if lens[0] > 0 && !keys[1..].contains(&keys[0]) {
                visit(ctx, 0, &mut |v| {
                    input_for_each(v, |m, s| {
                        acc.insert(m.to_vec(), s);
                    })
                });
                for (i, &len) in lens.iter().enumerate().skip(1) {
                    if acc.is_empty() {
                        break;
                    }
                    // Whichever side is smaller drives the lookups.
                    visit(ctx, i, &mut |v| {
                        if len < acc.len() {
                            input_for_each(v, |m, _| {
                                acc.remove(m);
                            });
                        } else {
                            acc.retain(|m, _| input_score(v, m).is_none());
                        }
                    });
                }
            }
        }
    }
    if card_only {
        let n = if limit > 0 { acc.len().min(limit) } else { acc.len() };
        ctx.out.int(n as i64);
        return Ok(());
    }
    let mut result: Pairs = acc.into_iter().collect();
    result.sort_by(|a, b| a.1.partial_cmp(&b.1).expect("scores are never NaN").then_with(|| a.0.cmp(&b.0)));
    if store {
        let limits = ctx.encoding_limits();
        store_result(ctx, argv[1], ZSet::from_sorted(&result, &limits), name);
    } else {
        reply_members(&mut ctx.out, result.iter().map(|(m, s)| (&m[..], *s)), withscores);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// ZSCAN.

fn zscan(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let cursor = parse_cursor(argv[2])?;
    let db = ctx.dbs.of(argv[1]);
    let Some(z) = read(ctx.stats, db, argv[1], ctx.now_ms)? else {
        ctx.out.array(2);
        ctx.out.bulk(b"0");
        ctx.out.array(0);
        return Ok(());
    };
    let (count, pattern) = parse_member_scan_options(&argv[3..])?;
    // Scores as Redis's SCAN writes them: a listpack's stored text (integer
    // form for integers), a skiplist's double in `%.17g`.
    let compact = matches!(z, ZSet::Listpack(_));
    let mut found: Pairs = Vec::new();
    let mut next = cursor;
    let mut budget = count.saturating_mul(10);
    loop {
        next = z.scan(next, |m, s| found.push((m.to_vec(), s)));
        budget -= 1;
        if next == 0 || budget == 0 || found.len() >= count {
            break;
        }
    }
    if let Some(p) = pattern {
        found.retain(|(m, _)| crate::glob::matches(p, m, false));
    }
    let out = &mut ctx.out;
    out.array(2);
    out.bulk(itoa::Buffer::new().format(next).as_bytes());
    out.array(2 * found.len());
    let mut text = Vec::with_capacity(32);
    for (member, score) in found {
        out.bulk(&member);
        text.clear();
        match score_as_integer(score).filter(|_| compact) {
            Some(i) => text.extend_from_slice(itoa::Buffer::new().format(i).as_bytes()),
            None => format_double_g17(score, &mut text),
        }
        out.bulk(&text);
    }
    Ok(())
}
