//! String commands: GET, SET and its variants, MGET/MSET, APPEND, the
//! INCR family, GETRANGE/SETRANGE and LCS.
//!
//! Encodings follow Redis, because `OBJECT ENCODING` shows them: values
//! stored whole (SET, MSET, GETSET...) go through `Str::from_bytes`
//! (`int`/`embstr`/`raw`); values mutated in place (APPEND, SETRANGE, and
//! the bit commands) become `raw`; the INCR family stores `int`;
//! INCRBYFLOAT stores its text (`embstr` up to 44 bytes).
//!
//! Redis checks arguments in a fixed order, and the first failing check
//! names the error; each handler below keeps that order (noted where it
//! surprises, e.g. GETEX validates its expiry only once the key is found).

pub mod long_double;


use keel_engine::value::{Str, Value, EMBSTR_MAX_LEN};
use keel_engine::{Db, Entry};
use keel_protocol::ReplyWriter;

use self::long_double::{IncrFloatError, LongDouble, Parsed};
use super::parse::{eq, i64_arg};
use super::keyspec::*;
use super::{cmd, flags::*, range, CmdError, CmdResult, CommandSpec, Ctx, KEY1};
use crate::notify;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("get", 2, READONLY | FAST, KEY1, "string", get)
        .doc("Get the value of a key", "1.0.0"),
    cmd("set", -3, WRITE | DENYOOM, KEY1, "string", set)
        .doc("Set the string value of a key", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE | VARIABLE_FLAGS)
            .notes("RW and ACCESS due to the optional `GET` argument")
            .flags_by(set_key_flags)]),
    cmd("setnx", 3, WRITE | DENYOOM | FAST, KEY1, "string", setnx)
        .doc("Set the value of a key, only if the key does not exist", "1.0.0")
        .specs(&[key_at(1, OW | INSERT)]),
    cmd("setex", 4, WRITE | DENYOOM, KEY1, "string", setex)
        .doc("Set the value and expiration of a key", "2.0.0")
        .specs(&[key_at(1, OW | UPDATE)]),
    cmd("psetex", 4, WRITE | DENYOOM, KEY1, "string", psetex)
        .doc("Set the value and expiration in milliseconds of a key", "2.6.0")
        .specs(&[key_at(1, OW | UPDATE)]),
    cmd("getset", 3, WRITE | DENYOOM | FAST, KEY1, "string", getset)
        .doc("Set the string value of a key and return its old value", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("getdel", 2, WRITE | FAST, KEY1, "string", getdel)
        .doc("Get the value of a key and delete the key", "6.2.0")
        .specs(&[key_at(1, RW | ACCESS | DELETE)]),
    cmd("getex", -2, WRITE | FAST, KEY1, "string", getex)
        .doc("Get the value of a key and optionally set its expiration", "6.2.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE).notes("RW and UPDATE because it changes the TTL")]),
    cmd("mget", -2, READONLY | FAST, range(1, -1, 1), "string", mget)
        .doc("Get the values of all the given keys", "1.0.0")
        .tips(&["request_policy:multi_shard"]),
    cmd("mset", -3, WRITE | DENYOOM, range(1, -1, 2), "string", mset)
        .doc("Set multiple keys to multiple values", "1.0.1")
        .tips(&["request_policy:multi_shard", "response_policy:all_succeeded"])
        .specs(&[ks(OW | UPDATE, index(1), span(-1, 2, 0))]),
    cmd("msetnx", -3, WRITE | DENYOOM, range(1, -1, 2), "string", msetnx)
        .doc("Set multiple keys to multiple values, only if none of the keys exist", "1.0.1")
        .tips(&["request_policy:multi_shard", "response_policy:agg_min"])
        .specs(&[ks(OW | INSERT, index(1), span(-1, 2, 0))]),
    cmd("append", 3, WRITE | DENYOOM | FAST, KEY1, "string", append)
        .doc("Append a value to a key", "2.0.0")
        .specs(&[key_at(1, RW | INSERT)]),
    cmd("strlen", 2, READONLY | FAST, KEY1, "string", strlen)
        .doc("Get the length of the value stored in a key", "2.2.0")
        .specs(&[key_at(1, RO)]),
    cmd("incr", 2, WRITE | DENYOOM | FAST, KEY1, "string", incr)
        .doc("Increment the integer value of a key by one", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("decr", 2, WRITE | DENYOOM | FAST, KEY1, "string", decr)
        .doc("Decrement the integer value of a key by one", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("incrby", 3, WRITE | DENYOOM | FAST, KEY1, "string", incrby)
        .doc("Increment the integer value of a key by the given amount", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("decrby", 3, WRITE | DENYOOM | FAST, KEY1, "string", decrby)
        .doc("Decrement the integer value of a key by the given number", "1.0.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("incrbyfloat", 3, WRITE | DENYOOM | FAST, KEY1, "string", incrbyfloat)
        .doc("Increment the float value of a key by the given amount", "2.6.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("getrange", 4, READONLY, KEY1, "string", getrange)
        .doc("Get a substring of the string stored at a key", "2.4.0"),
    cmd("substr", 4, READONLY, KEY1, "string", getrange)
        .doc("Get a substring of the string stored at a key", "1.0.0"),
    cmd("setrange", 4, WRITE | DENYOOM, KEY1, "string", setrange)
        .doc("Overwrite part of a string at key starting at the specified offset", "2.2.0"),
    cmd("lcs", -3, READONLY, range(1, 2, 1), "string", lcs)
        .doc("Find longest common substring", "7.0.0"),
];

// ---------------------------------------------------------------------------
// Helpers shared with the bit commands (and other modules).

/// The string in `entry`, or WRONGTYPE if the key holds another type.
pub fn string_of(entry: Option<&Entry>) -> Result<Option<&Str>, CmdError> {
    match entry.map(|e| &e.value) {
        None => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s)),
        #[allow(unreachable_patterns)]
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Mutable form of [`string_of`].
pub fn string_of_mut(entry: Option<&mut Entry>) -> Result<Option<&mut Str>, CmdError> {
    match entry.map(|e| &mut e.value) {
        None => Ok(None),
        Some(Value::Str(s)) => Ok(Some(s)),
        #[allow(unreachable_patterns)]
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Redis's `lookupKeyRead` for a string: expires the key if due, counts a
/// keyspace hit or miss, and checks the type.
fn read_string<'d>(
    stats: &crate::server::WorkerStats,
    db: &'d mut Db,
    key: &[u8],
    now_ms: u64,
) -> Result<Option<&'d Str>, CmdError> {
    let entry = db.get(key, now_ms);
    stats.hit(entry.is_some());
    string_of(entry)
}

/// A bulk reply with the string's bytes.
pub fn reply_str(out: &mut ReplyWriter<'_>, s: &Str) {
    match s {
        Str::Int(i) => out.bulk_int(*i),
        Str::Embstr(b) => out.bulk(b),
        Str::Raw(v) => out.bulk(v),
    }
}

/// The owned bytes of a string (GET-then-write commands keep the old value).
fn bytes_of(s: &Str) -> Vec<u8> {
    s.as_bytes(&mut itoa::Buffer::new()).to_vec()
}

/// `proto-max-bulk-len`: the largest string a command may build.
pub(crate) fn max_bulk_len(ctx: &Ctx<'_>) -> u64 {
    ctx.server.config.read().proto_max_bulk_len as u64
}

/// Redis's `checkStringLength`: a string of `size + append` bytes must
/// stay within `proto-max-bulk-len`.
fn check_string_length(ctx: &Ctx<'_>, size: u64, append: u64) -> CmdResult {
    match size.checked_add(append) {
        Some(total) if total <= max_bulk_len(ctx) => Ok(()),
        _ => Err(CmdError::other("ERR string exceeds maximum allowed size (proto-max-bulk-len)")),
    }
}

/// A string as INCRBYFLOAT and similar commands create it from text:
/// never `int`, `embstr` when short (Redis's `createStringObject`).
pub fn str_from_text(bytes: &[u8]) -> Str {
    if bytes.len() <= EMBSTR_MAX_LEN {
        Str::Embstr(bytes.into())
    } else {
        Str::Raw(bytes.to_vec())
    }
}

// ---------------------------------------------------------------------------
// Expiry options, shared by SET, SETEX, PSETEX and GETEX.

#[derive(Clone, Copy, PartialEq, Eq)]
enum ExpireKind {
    Ex,
    Px,
    ExAt,
    PxAt,
}

impl ExpireKind {
    fn in_seconds(self) -> bool {
        matches!(self, ExpireKind::Ex | ExpireKind::ExAt)
    }

    fn relative(self) -> bool {
        matches!(self, ExpireKind::Ex | ExpireKind::Px)
    }
}

/// The absolute expiry (Unix ms) an expiry argument asks for, with
/// Redis's checks: an integer, positive, and no overflow once converted
/// to milliseconds and made absolute.
fn expire_at_ms(arg: &[u8], kind: ExpireKind, now_ms: u64, command: &str) -> Result<u64, CmdError> {
    let n = i64_arg(arg)?;
    let invalid = || CmdError::InvalidExpire(command.into());
    if n <= 0 || (kind.in_seconds() && n > i64::MAX / 1000) {
        return Err(invalid());
    }
    let ms = if kind.in_seconds() { n * 1000 } else { n };
    let at = if kind.relative() { ms.checked_add(now_ms as i64).ok_or_else(invalid)? } else { ms };
    Ok(at as u64)
}

/// Options of SET (`for_set`) or GETEX, parsed as Redis's
/// `parseExtendedStringArgumentsOrReply` does: an option that conflicts
/// with an earlier one is a syntax error, but repeating the same expiry
/// option is allowed (the last one wins).
#[derive(Default)]
struct ExtendedOptions<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keep_ttl: bool,
    persist: bool,
    expire: Option<(ExpireKind, &'a [u8])>,
}

fn parse_extended<'a>(argv: &[&'a [u8]], for_set: bool) -> Result<ExtendedOptions<'a>, CmdError> {
    let mut o = ExtendedOptions::default();
    let mut i = if for_set { 3 } else { 2 };
    while i < argv.len() {
        let opt = argv[i];
        let next = argv.get(i + 1).copied();
        let expire_kind = if eq(opt, "ex") {
            Some(ExpireKind::Ex)
        } else if eq(opt, "px") {
            Some(ExpireKind::Px)
        } else if eq(opt, "exat") {
            Some(ExpireKind::ExAt)
        } else if eq(opt, "pxat") {
            Some(ExpireKind::PxAt)
        } else {
            None
        };
        if for_set && eq(opt, "nx") && !o.xx {
            o.nx = true;
        } else if for_set && eq(opt, "xx") && !o.nx {
            o.xx = true;
        } else if for_set && eq(opt, "get") {
            o.get = true;
        } else if for_set && eq(opt, "keepttl") && !o.persist && o.expire.is_none() {
            o.keep_ttl = true;
        } else if !for_set && eq(opt, "persist") && o.expire.is_none() && !o.keep_ttl {
            o.persist = true;
        } else if let (Some(kind), Some(value)) = (expire_kind, next) {
            let compatible = !o.keep_ttl && !o.persist && o.expire.is_none_or(|(k, _)| k == kind);
            if !compatible {
                return Err(CmdError::Syntax);
            }
            o.expire = Some((kind, value));
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    Ok(o)
}

// ---------------------------------------------------------------------------
// GET, SET and friends.

fn get(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    match read_string(ctx.stats, db, argv[1], ctx.now_ms)? {
        Some(s) => reply_str(&mut ctx.out, s),
        None => ctx.out.null(),
    }
    Ok(())
}

/// What a SET-like command does, after its arguments are parsed.
struct SetRequest<'a> {
    key: &'a [u8],
    value: &'a [u8],
    nx: bool,
    xx: bool,
    /// Reply with the old value (SET ... GET) instead of OK/nil.
    get: bool,
    keep_ttl: bool,
    expire_at_ms: Option<u64>,
}

/// Redis's `setGenericCommand`. Returns whether the value was stored; the
/// caller replies unless `get` (then the old value was the reply).
fn set_generic(ctx: &mut Ctx<'_>, req: SetRequest<'_>) -> Result<bool, CmdError> {
    let now = ctx.now_ms;
    let lru = ctx.lru_s;
    let db = ctx.dbs.of(req.key);
    if req.get {
        // SET ... GET reads like GET: WRONGTYPE before anything is written.
        match read_string(ctx.stats, db, req.key, now)? {
            Some(s) => reply_str(&mut ctx.out, s),
            None => ctx.out.null(),
        }
    }
    let found = db.contains(req.key, now);
    if (req.nx && found) || (req.xx && !found) {
        return Ok(false);
    }
    db.set(req.key, Value::Str(Str::from_bytes(req.value)), req.keep_ttl, lru);
    ctx.wrote(1);
    ctx.notify(notify::STRING, "set", req.key);
    if let Some(at) = req.expire_at_ms {
        ctx.notify(notify::GENERIC, "expire", req.key);
        // An absolute time already past removes the key at once (Redis
        // stores it and lets the next access expire it: same replies), as
        // an expiry, so that `expired` follows `set` and `expire`.
        let db = ctx.dbs.of(req.key);
        db.set_expire(req.key, at, now);
        if at <= now {
            db.expired_keys += 1;
            db.expired.push(req.key.into());
        }
    }
    Ok(true)
}

/// SET's key flags (GETKEYSANDFLAGS): read too with GET, else only
/// overwritten (Redis's `setGetKeys`).
fn set_key_flags(argv: &[&[u8]]) -> u16 {
    if argv.iter().skip(3).any(|a| eq(a, "get")) {
        RW | ACCESS | UPDATE
    } else {
        OW | UPDATE
    }
}

fn set(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let o = parse_extended(argv, true)?;
    let expire_at_ms = match o.expire {
        Some((kind, arg)) => Some(expire_at_ms(arg, kind, ctx.now_ms, "set")?),
        None => None,
    };
    let req =
        SetRequest { key: argv[1], value: argv[2], nx: o.nx, xx: o.xx, get: o.get, keep_ttl: o.keep_ttl, expire_at_ms };
    let stored = set_generic(ctx, req)?;
    if !o.get {
        if stored {
            ctx.out.ok();
        } else {
            ctx.out.null();
        }
    }
    Ok(())
}

fn setnx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let req = SetRequest {
        key: argv[1],
        value: argv[2],
        nx: true,
        xx: false,
        get: false,
        keep_ttl: false,
        expire_at_ms: None,
    };
    let stored = set_generic(ctx, req)?;
    ctx.out.int(i64::from(stored));
    Ok(())
}

fn setex_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], kind: ExpireKind, command: &str) -> CmdResult {
    let at = expire_at_ms(argv[2], kind, ctx.now_ms, command)?;
    let req = SetRequest {
        key: argv[1],
        value: argv[3],
        nx: false,
        xx: false,
        get: false,
        keep_ttl: false,
        expire_at_ms: Some(at),
    };
    set_generic(ctx, req)?;
    ctx.out.ok();
    Ok(())
}

fn setex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    setex_generic(ctx, argv, ExpireKind::Ex, "setex")
}

fn psetex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    setex_generic(ctx, argv, ExpireKind::Px, "psetex")
}

fn getset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let req = SetRequest {
        key: argv[1],
        value: argv[2],
        nx: false,
        xx: false,
        get: true,
        keep_ttl: false,
        expire_at_ms: None,
    };
    set_generic(ctx, req)?;
    Ok(())
}

fn getdel(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let db = ctx.dbs.of(key);
    let Some(s) = read_string(ctx.stats, db, key, ctx.now_ms)? else {
        ctx.out.null();
        return Ok(());
    };
    reply_str(&mut ctx.out, s);
    db.remove(key);
    ctx.wrote(1);
    ctx.notify(notify::GENERIC, "del", key);
    Ok(())
}

fn getex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let o = parse_extended(argv, false)?;
    let now = ctx.now_ms;
    let db = ctx.dbs.of(key);
    let Some(s) = read_string(ctx.stats, db, key, now)? else {
        ctx.out.null();
        return Ok(());
    };
    // Redis validates the expiry only now: a missing key answers nil even
    // with a malformed time.
    let at = match o.expire {
        Some((kind, arg)) => Some(expire_at_ms(arg, kind, now, "getex")?),
        None => None,
    };
    reply_str(&mut ctx.out, s);
    if let Some(at) = at {
        // An EXAT/PXAT already past deletes the key; set_expire does that.
        db.set_expire(key, at, now);
        ctx.wrote(1);
        ctx.notify(notify::GENERIC, if at <= now { "del" } else { "expire" }, key);
    } else if o.persist && db.persist(key) {
        ctx.wrote(1);
        ctx.notify(notify::GENERIC, "persist", key);
    }
    Ok(())
}

fn mget(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let now = ctx.now_ms;
    ctx.out.array(argv.len() - 1);
    for key in &argv[1..] {
        let entry = ctx.dbs.of(key).get(key, now);
        ctx.stats.hit(entry.is_some());
        match entry.map(|e| &e.value) {
            Some(Value::Str(s)) => reply_str(&mut ctx.out, s),
            // Missing keys and other types alike answer nil.
            #[allow(unreachable_patterns)]
            _ => ctx.out.null(),
        }
    }
    Ok(())
}

fn mset_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], nx: bool, name: &str) -> Result<bool, CmdError> {
    if argv.len().is_multiple_of(2) {
        return Err(CmdError::Arity(name.into()));
    }
    let now = ctx.now_ms;
    let lru = ctx.lru_s;
    if nx && argv[1..].chunks(2).any(|pair| ctx.dbs.of(pair[0]).contains(pair[0], now)) {
        return Ok(false);
    }
    for pair in argv[1..].chunks(2) {
        ctx.dbs.of(pair[0]).set_key(pair[0], Value::Str(Str::from_bytes(pair[1])), now, lru);
        ctx.notify(notify::STRING, "set", pair[0]);
    }
    ctx.wrote((argv.len() as u64 - 1) / 2);
    Ok(true)
}

fn mset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    mset_generic(ctx, argv, false, "mset")?;
    ctx.out.ok();
    Ok(())
}

fn msetnx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let stored = mset_generic(ctx, argv, true, "msetnx")?;
    ctx.out.int(i64::from(stored));
    Ok(())
}

fn append(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (key, tail) = (argv[1], argv[2]);
    let now = ctx.now_ms;
    let lru = ctx.lru_s;
    let limit = max_bulk_len(ctx);
    let db = ctx.dbs.of(key);
    let total = match string_of_mut(db.get_mut(key, now))? {
        None => {
            db.set(key, Value::Str(Str::from_bytes(tail)), false, lru);
            tail.len()
        }
        Some(s) => {
            if (s.len() as u64).checked_add(tail.len() as u64).is_none_or(|t| t > limit) {
                return Err(CmdError::other("ERR string exceeds maximum allowed size (proto-max-bulk-len)"));
            }
            let bytes = s.make_raw();
            bytes.extend_from_slice(tail);
            let total = bytes.len();
            db.signal_modified(key);
            total
        }
    };
    ctx.wrote(1);
    ctx.notify(notify::STRING, "append", key);
    ctx.out.int(total as i64);
    Ok(())
}

fn strlen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let len = read_string(ctx.stats, db, argv[1], ctx.now_ms)?.map_or(0, Str::len);
    ctx.out.int(len as i64);
    Ok(())
}

// ---------------------------------------------------------------------------
// Counters.

/// The integer a string holds, as Redis's `getLongLongFromObject` reads it.
pub fn str_as_i64(s: &Str) -> Option<i64> {
    match s {
        Str::Int(i) => Some(*i),
        Str::Embstr(b) => keel_engine::value::parse_canonical_i64(b),
        Str::Raw(v) => keel_engine::value::parse_canonical_i64(v),
    }
}

fn incr_decr(ctx: &mut Ctx<'_>, key: &[u8], by: i64) -> CmdResult {
    let now = ctx.now_ms;
    let lru = ctx.lru_s;
    let db = ctx.dbs.of(key);
    let slot = string_of_mut(db.get_mut(key, now))?;
    let current = match &slot {
        None => 0,
        Some(s) => str_as_i64(s).ok_or(CmdError::NotInteger)?,
    };
    let value = current.checked_add(by).ok_or(CmdError::Overflow)?;
    match slot {
        // Overwriting keeps the TTL, as Redis's dbOverwrite does.
        Some(s) => {
            *s = Str::Int(value);
            db.signal_modified(key);
        }
        None => {
            db.set(key, Value::Str(Str::Int(value)), false, lru);
        }
    }
    ctx.wrote(1);
    // DECR and DECRBY too: Redis's incrDecrCommand names them all so.
    ctx.notify(notify::STRING, "incrby", key);
    ctx.out.int(value);
    Ok(())
}

fn incr(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    incr_decr(ctx, argv[1], 1)
}

fn decr(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    incr_decr(ctx, argv[1], -1)
}

fn incrby(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let by = i64_arg(argv[2])?;
    incr_decr(ctx, argv[1], by)
}

fn decrby(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let by = i64_arg(argv[2])?;
    let by = by.checked_neg().ok_or_else(|| CmdError::other("ERR decrement would overflow"))?;
    incr_decr(ctx, argv[1], by)
}

/// The value a string holds as C's `long double` (`getLongDoubleFromObject`).
pub fn str_as_long_double(s: &Str) -> Option<Parsed> {
    match s {
        Str::Int(i) => Some(Parsed::Finite(LongDouble::from_i64(*i))),
        Str::Embstr(b) => LongDouble::parse(b),
        Str::Raw(v) => LongDouble::parse(v),
    }
}

/// INCRBYFLOAT's errors, with Redis's texts.
pub fn incr_float_error(e: IncrFloatError) -> CmdError {
    match e {
        IncrFloatError::NotFloat => CmdError::NotFloat,
        IncrFloatError::NanOrInfinity => CmdError::other("ERR increment would produce NaN or Infinity"),
    }
}

fn incrbyfloat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let now = ctx.now_ms;
    let lru = ctx.lru_s;
    let db = ctx.dbs.of(key);
    let slot = string_of_mut(db.get_mut(key, now))?;
    let current = match &slot {
        None => Parsed::Finite(LongDouble::ZERO),
        Some(s) => str_as_long_double(s).ok_or(CmdError::NotFloat)?,
    };
    let text = match current {
        Parsed::Finite(v) => long_double::incr_by_float(v, argv[2]).map_err(incr_float_error)?,
        // inf + anything is inf or NaN; the increment must still parse.
        Parsed::Infinite => {
            return Err(match LongDouble::parse(argv[2]) {
                None => CmdError::NotFloat,
                Some(_) => incr_float_error(IncrFloatError::NanOrInfinity),
            })
        }
    };
    let value = str_from_text(text.as_bytes());
    match slot {
        Some(s) => {
            *s = value;
            db.signal_modified(key);
        }
        None => {
            db.set(key, Value::Str(value), false, lru);
        }
    }
    ctx.wrote(1);
    ctx.notify(notify::STRING, "incrbyfloat", key);
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

// ---------------------------------------------------------------------------
// Ranges.

/// Redis's GETRANGE index rules: negative indexes count from the end,
/// both ends clamp into the string; `None` for an empty result.
fn substring_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    if start < 0 && end < 0 && start > end {
        return None;
    }
    let mut start = if start < 0 { len.saturating_add(start) } else { start };
    let mut end = if end < 0 { len.saturating_add(end) } else { end };
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        return None;
    }
    Some((start as usize, end as usize))
}

fn getrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let start = i64_arg(argv[2])?;
    let end = i64_arg(argv[3])?;
    let db = ctx.dbs.of(argv[1]);
    let Some(s) = read_string(ctx.stats, db, argv[1], ctx.now_ms)? else {
        ctx.out.bulk(b"");
        return Ok(());
    };
    let mut scratch = itoa::Buffer::new();
    let bytes = s.as_bytes(&mut scratch);
    match substring_range(start, end, bytes.len()) {
        Some((from, to)) => ctx.out.bulk(&bytes[from..=to]),
        None => ctx.out.bulk(b""),
    }
    Ok(())
}

fn setrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (key, value) = (argv[1], argv[3]);
    let offset = i64_arg(argv[2])?;
    if offset < 0 {
        return Err(CmdError::other("ERR offset is out of range"));
    }
    let offset = offset as u64;
    let now = ctx.now_ms;
    let lru = ctx.lru_s;
    let exists = match string_of(ctx.dbs.of(key).get(key, now))? {
        None => false,
        Some(s) if value.is_empty() => {
            // Setting nothing answers the length and leaves the value
            // (and its encoding) alone.
            let len = s.len();
            ctx.out.int(len as i64);
            return Ok(());
        }
        Some(_) => true,
    };
    if !exists && value.is_empty() {
        ctx.out.int(0);
        return Ok(());
    }
    check_string_length(ctx, offset, value.len() as u64)?;
    let offset = offset as usize;
    let db = ctx.dbs.of(key);
    let len = if exists {
        let Some(s) = string_of_mut(db.get_mut(key, now))? else {
            return Err(CmdError::NoSuchKey); // checked above under the same lock
        };
        let bytes = s.make_raw();
        if bytes.len() < offset + value.len() {
            bytes.resize(offset + value.len(), 0);
        }
        bytes[offset..offset + value.len()].copy_from_slice(value);
        let len = bytes.len();
        db.signal_modified(key);
        len
    } else {
        let mut bytes = vec![0u8; offset + value.len()];
        bytes[offset..].copy_from_slice(value);
        let len = bytes.len();
        db.set(key, Value::Str(Str::raw(bytes)), false, lru);
        len
    };
    ctx.wrote(1);
    ctx.notify(notify::STRING, "setrange", key);
    ctx.out.int(len as i64);
    Ok(())
}

// ---------------------------------------------------------------------------
// LCS.

fn lcs(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let now = ctx.now_ms;
    let mut strings: [Vec<u8>; 2] = Default::default();
    let mut wrong_type = false;
    for (i, key) in argv[1..3].iter().enumerate() {
        let entry = ctx.dbs.of(key).get(key, now);
        ctx.stats.hit(entry.is_some());
        match string_of(entry) {
            Ok(Some(s)) => strings[i] = bytes_of(s),
            Ok(None) => {}
            Err(_) => wrong_type = true,
        }
    }
    if wrong_type {
        return Err(CmdError::other("ERR The specified keys must contain string values"));
    }
    let (mut get_len, mut get_idx, mut with_match_len) = (false, false, false);
    let mut min_match_len: i64 = 0;
    let mut j = 3;
    while j < argv.len() {
        let opt = argv[j];
        if eq(opt, "idx") {
            get_idx = true;
        } else if eq(opt, "len") {
            get_len = true;
        } else if eq(opt, "withmatchlen") {
            with_match_len = true;
        } else if eq(opt, "minmatchlen") && j + 1 < argv.len() {
            min_match_len = i64_arg(argv[j + 1])?.max(0);
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if get_len && get_idx {
        return Err(CmdError::other("ERR If you want both the length and indexes, please just use IDX."));
    }
    let [a, b] = &strings;
    if a.len() >= u32::MAX as usize - 1 || b.len() >= u32::MAX as usize - 1 {
        return Err(CmdError::other("ERR String too long for LCS"));
    }
    let table_bytes = (a.len() as u64 + 1) * (b.len() as u64 + 1) * 4;
    if table_bytes > max_bulk_len(ctx) {
        return Err(CmdError::other("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"));
    }
    let result = lcs_compute(a, b, get_idx || !get_len);
    if get_idx {
        let matches: Vec<&LcsMatch> =
            result.matches.iter().filter(|m| min_match_len == 0 || m.len as i64 >= min_match_len).collect();
        ctx.out.map(2);
        ctx.out.bulk(b"matches");
        ctx.out.array(matches.len());
        for m in matches {
            ctx.out.array(if with_match_len { 3 } else { 2 });
            ctx.out.array(2);
            ctx.out.int(m.a.0 as i64);
            ctx.out.int(m.a.1 as i64);
            ctx.out.array(2);
            ctx.out.int(m.b.0 as i64);
            ctx.out.int(m.b.1 as i64);
            if with_match_len {
                ctx.out.int(m.len as i64);
            }
        }
        ctx.out.bulk(b"len");
        ctx.out.int(result.len as i64);
    } else if get_len {
        ctx.out.int(result.len as i64);
    } else {
        ctx.out.bulk(&result.common);
    }
    Ok(())
}

#[derive(Debug, PartialEq, Eq)]
struct LcsMatch {
    /// Inclusive ranges in the first and second string.
    a: (usize, usize),
    b: (usize, usize),
    len: usize,
}

struct LcsResult {
    len: usize,
    common: Vec<u8>,
    /// Matching runs from the end of the strings backwards, as Redis lists them.
    matches: Vec<LcsMatch>,
}

/// The classic dynamic-programming LCS, walked back from the end the way
/// Redis walks it (preferring to drop from `b` on ties), so that the
/// common string and the reported ranges are Redis's.
fn lcs_compute(a: &[u8], b: &[u8], walk: bool) -> LcsResult {
    let width = b.len() + 1;
    let mut table = vec![0u32; (a.len() + 1) * width];
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let len = table[a.len() * width + b.len()] as usize;
    let mut result = LcsResult { len, common: Vec::new(), matches: Vec::new() };
    if !walk {
        return result;
    }
    let mut common = vec![0u8; len];
    let mut idx = len;
    // The run being tracked: (a_start, a_end, b_start, b_end).
    let mut run: Option<(usize, usize, usize, usize)> = None;
    let (mut i, mut j) = (a.len(), b.len());
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            common[idx - 1] = a[i - 1];
            run = match run {
                None => Some((i - 1, i - 1, j - 1, j - 1)),
                // Consecutive matches always extend the run backwards.
                Some((_, a_end, _, b_end)) => Some((i - 1, a_end, j - 1, b_end)),
            };
            if let Some((a_start, _, b_start, _)) = run {
                if a_start == 0 || b_start == 0 {
                    emit = true;
                }
            }
            idx -= 1;
            i -= 1;
            j -= 1;
        } else {
            if table[(i - 1) * width + j] > table[i * width + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = run.is_some();
        }
        if emit {
            if let Some((a_start, a_end, b_start, b_end)) = run.take() {
                result.matches.push(LcsMatch { a: (a_start, a_end), b: (b_start, b_end), len: a_end - a_start + 1 });
            }
        }
    }
    result.common = common;
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn substring_ranges_follow_getrange() {
        assert_eq!(substring_range(0, 3, 11), Some((0, 3)));
        assert_eq!(substring_range(-4, -1, 11), Some((7, 10)));
        assert_eq!(substring_range(5, 3, 11), None);
        assert_eq!(substring_range(5, 5000, 11), Some((5, 10)));
        assert_eq!(substring_range(-5000, 10000, 11), Some((0, 10)));
        assert_eq!(substring_range(-1, -2, 11), None);
        assert_eq!(substring_range(0, -1, 0), None);
        assert_eq!(substring_range(0, 4294967297, 3), Some((0, 2)));
        assert_eq!(substring_range(i64::MIN, i64::MAX, 3), Some((0, 2)));
    }

    #[test]
    fn lcs_matches_redis_example() {
        // From the LCS documentation: ohmytext / mynewtext.
        let r = lcs_compute(b"ohmytext", b"mynewtext", true);
        assert_eq!(r.common, b"mytext");
        assert_eq!(r.len, 6);
        assert_eq!(
            r.matches,
            vec![LcsMatch { a: (4, 7), b: (5, 8), len: 4 }, LcsMatch { a: (2, 3), b: (0, 1), len: 2 }]
        );
        let empty = lcs_compute(b"", b"abc", true);
        assert_eq!((empty.len, empty.common.len(), empty.matches.len()), (0, 0, 0));
    }

    #[test]
    fn extended_options_follow_redis_conflict_rules() {
        let argv = |s: &'static str| -> Vec<&'static [u8]> { s.split(' ').map(str::as_bytes).collect() };
        assert!(parse_extended(&argv("set k v nx xx"), true).is_err());
        assert!(parse_extended(&argv("set k v ex 1 px 1"), true).is_err());
        assert!(parse_extended(&argv("set k v ex 1 keepttl"), true).is_err());
        assert!(parse_extended(&argv("set k v ex"), true).is_err());
        assert!(parse_extended(&argv("set k v persist"), true).is_err());
        assert!(parse_extended(&argv("getex k nx"), false).is_err());
        assert!(parse_extended(&argv("getex k persist ex 1"), false).is_err());
        let o = parse_extended(&argv("set k v ex 1 ex 2 get nx nx"), true).map_err(|e| e.to_string());
        let o = o.as_ref().map(|o| (o.nx, o.get, o.expire.map(|(_, a)| a)));
        assert_eq!(o, Ok((true, true, Some(&b"2"[..]))));
    }
}
