//! Bitmap commands: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD,
//! BITFIELD_RO.
//!
//! Bits are numbered as Redis numbers them: bit 0 is the most significant
//! bit of byte 0. Strings grow with zero bytes to reach a written bit, and
//! a string written by these commands becomes `raw`, as in Redis.

use keel_engine::value::{Str, Value};
use keel_engine::Db;

use super::parse::{eq, i64_arg};
use super::strings::{string_of, string_of_mut};
use super::keyspec::*;
use super::{cmd, flags::*, range, CmdError, CmdResult, CommandSpec, Ctx, KEY1};
use crate::notify;

pub static COMMANDS: &[CommandSpec] = &[
    cmd("setbit", 4, WRITE | DENYOOM, KEY1, "bitmap", setbit)
        .doc("Sets or clears the bit at offset in the string value stored at key", "2.2.0")
        .specs(&[key_at(1, RW | ACCESS | UPDATE)]),
    cmd("getbit", 3, READONLY | FAST, KEY1, "bitmap", getbit)
        .doc("Returns the bit value at offset in the string value stored at key", "2.2.0"),
    cmd("bitcount", -2, READONLY, KEY1, "bitmap", bitcount)
        .doc("Count set bits in a string", "2.6.0"),
    cmd("bitpos", -3, READONLY, KEY1, "bitmap", bitpos)
        .doc("Find first bit set or clear in a string", "2.8.7"),
    cmd("bitop", -4, WRITE | DENYOOM, range(2, -1, 1), "bitmap", bitop)
        .doc("Perform bitwise operations between strings", "2.6.0")
        .specs(&[key_at(2, OW | UPDATE), ks(RO | ACCESS, index(3), span(-1, 1, 0))]),
    cmd("bitfield", -2, WRITE | DENYOOM, KEY1, "bitmap", bitfield)
        .doc("Perform arbitrary bitfield integer operations on strings", "3.2.0")
        .specs(&[key_at(1, RW | UPDATE | ACCESS | VARIABLE_FLAGS)
            .notes("This command allows both access and modification of the key")
            .flags_by(bitfield_key_flags)]),
    cmd("bitfield_ro", -2, READONLY | FAST, KEY1, "bitmap", bitfield_ro)
        .doc("Perform arbitrary bitfield integer operations on strings. Read-only variant of BITFIELD", "6.0.0"),
];

// ---------------------------------------------------------------------------
// Pure bit helpers.

/// Set bits in `bytes`, eight bytes at a time.
pub fn popcount(bytes: &[u8]) -> u64 {
    let mut chunks = bytes.chunks_exact(8);
    let mut n: u64 = 0;
    for c in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(c);
        n += u64::from(u64::from_ne_bytes(word).count_ones());
    }
    n + chunks.remainder().iter().map(|b| u64::from(b.count_ones())).sum::<u64>()
}

/// Set bits between bit positions `start` and `end` (inclusive, within
/// `bytes`).
pub fn popcount_bits(bytes: &[u8], start: u64, end: u64) -> u64 {
    let (first, last) = ((start / 8) as usize, (end / 8) as usize);
    let mut n = popcount(&bytes[first..=last]);
    // Remove the bits of the edge bytes that lie outside the range.
    let before_start = !(0xffu8 >> (start % 8));
    let after_end = if end % 8 == 7 { 0 } else { 0xffu8 >> (end % 8 + 1) };
    n -= u64::from((bytes[first] & before_start).count_ones());
    n -= u64::from((bytes[last] & after_end).count_ones());
    n
}

/// The first bit equal to `want` between bit positions `start` and `end`
/// (inclusive, within `bytes`).
pub fn first_bit(bytes: &[u8], start: u64, end: u64, want: bool) -> Option<u64> {
    let flip: u8 = if want { 0 } else { 0xff };
    let (first, last) = ((start / 8) as usize, (end / 8) as usize);
    let mut i = first;
    while i <= last {
        if i > first && i + 8 <= last {
            // Whole words strictly inside the range.
            let mut word = [0u8; 8];
            word.copy_from_slice(&bytes[i..i + 8]);
            let w = u64::from_be_bytes(word) ^ if want { 0 } else { u64::MAX };
            if w != 0 {
                return Some(i as u64 * 8 + u64::from(w.leading_zeros()));
            }
            i += 8;
            continue;
        }
        let mut b = bytes[i] ^ flip;
        if i == first {
            b &= 0xff >> (start % 8);
        }
        if i == last {
            b &= 0xffu8 << (7 - end % 8);
        }
        if b != 0 {
            return Some(i as u64 * 8 + u64::from(b.leading_zeros()));
        }
        i += 1;
    }
    None
}

/// Reads a `bits`-wide unsigned field at bit `offset`; bytes past the end
/// read as zero.
pub fn get_field(bytes: &[u8], offset: u64, bits: u32) -> u64 {
    let mut v: u64 = 0;
    for i in 0..u64::from(bits) {
        let pos = offset + i;
        let byte = bytes.get((pos / 8) as usize).copied().unwrap_or(0);
        let bit = (byte >> (7 - pos % 8)) & 1;
        v = (v << 1) | u64::from(bit);
    }
    v
}

/// Writes the low `bits` bits of `value` at bit `offset`; `bytes` must
/// reach the last bit.
pub fn set_field(bytes: &mut [u8], offset: u64, bits: u32, value: u64) {
    for i in 0..u64::from(bits) {
        let bit = (value >> (u64::from(bits) - 1 - i)) & 1;
        let pos = offset + i;
        let byte = &mut bytes[(pos / 8) as usize];
        let mask = 1u8 << (7 - pos % 8);
        if bit == 1 {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

/// Sign-extends a `bits`-wide field.
fn signed_field(raw: u64, bits: u32) -> i64 {
    if bits < 64 && raw & (1 << (bits - 1)) != 0 {
        (raw | (u64::MAX << bits)) as i64
    } else {
        raw as i64
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Overflow {
    Wrap,
    Sat,
    Fail,
}

/// `value + incr` in an unsigned `bits`-wide field: the result, or `None`
/// when it overflows under FAIL. Mirrors Redis, including its treatment of
/// a SET value out of range (e.g. `-1` into u8 saturates to 255).
pub fn unsigned_add(value: u64, incr: i64, bits: u32, overflow: Overflow) -> Option<u64> {
    let max: u64 = if bits == 64 { u64::MAX } else { (1 << bits) - 1 };
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = (value as i64).wrapping_neg();
    let wrapped = || {
        let mask = if bits == 64 { 0 } else { u64::MAX << bits };
        value.wrapping_add(incr as u64) & !mask
    };
    let limit = if value > max || (incr > 0 && incr > max_incr) {
        max
    } else if incr < 0 && incr < min_incr {
        0
    } else {
        return Some(value.wrapping_add(incr as u64));
    };
    match overflow {
        Overflow::Wrap => Some(wrapped()),
        Overflow::Sat => Some(limit),
        Overflow::Fail => None,
    }
}

/// Signed counterpart of [`unsigned_add`].
pub fn signed_add(value: i64, incr: i64, bits: u32, overflow: Overflow) -> Option<i64> {
    let max: i64 = if bits == 64 { i64::MAX } else { (1 << (bits - 1)) - 1 };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wrapped = || {
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & (1 << (bits - 1)) != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    let limit = if value > max || (bits != 64 && incr > max_incr) || (value >= 0 && incr > 0 && incr > max_incr) {
        max
    } else if value < min || (bits != 64 && incr < min_incr) || (value < 0 && incr < 0 && incr < min_incr) {
        min
    } else {
        return Some(value.wrapping_add(incr));
    };
    match overflow {
        Overflow::Wrap => Some(wrapped()),
        Overflow::Sat => Some(limit),
        Overflow::Fail => None,
    }
}

// ---------------------------------------------------------------------------
// Argument parsing.

const BIT_OFFSET_ERR: &str = "ERR bit offset is not an integer or out of range";

/// Redis's `getBitOffsetFromArgument`: a non-negative integer whose byte
/// stays below `proto-max-bulk-len`; with `hash_bits`, `#N` means field N
/// of that width.
fn bit_offset(ctx: &Ctx<'_>, arg: &[u8], hash_bits: Option<u32>) -> Result<u64, CmdError> {
    let err = || CmdError::other(BIT_OFFSET_ERR);
    let (digits, multiplier) = match (arg.first(), hash_bits) {
        (Some(b'#'), Some(bits)) => (&arg[1..], i64::from(bits)),
        _ => (arg, 1),
    };
    let n = keel_engine::value::parse_canonical_i64(digits).ok_or_else(err)?;
    let n = n.checked_mul(multiplier).ok_or_else(err)?;
    if n < 0 || (n as u64 >> 3) >= super::strings::max_bulk_len(ctx) {
        return Err(err());
    }
    Ok(n as u64)
}

/// A string for a bit command to write, grown with zero bytes to hold
/// `len` bytes; created if missing. Returns the bytes and whether the key
/// was created or grown (Redis then counts the write even if no bit
/// changed).
fn writable_bits<'d>(
    db: &'d mut Db,
    key: &[u8],
    len: usize,
    now_ms: u64,
    lru_s: u32,
) -> Result<(&'d mut Vec<u8>, bool), CmdError> {
    let exists = string_of(db.get(key, now_ms))?.is_some();
    if !exists {
        db.set(key, Value::Str(Str::raw(vec![0; len])), false, lru_s);
    }
    let Some(s) = string_of_mut(db.get_mut(key, now_ms))? else {
        return Err(CmdError::NoSuchKey); // just stored under the same lock
    };
    let bytes = s.make_raw();
    let grown = bytes.len() < len;
    if grown {
        bytes.resize(len, 0);
    }
    Ok((bytes, grown || !exists))
}

// ---------------------------------------------------------------------------
// Commands.

fn setbit(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let key = argv[1];
    let offset = bit_offset(ctx, argv[2], None)?;
    let bit_err = || CmdError::other("ERR bit is not an integer or out of range");
    let on = i64_arg(argv[3]).map_err(|_| bit_err())?;
    if on & !1 != 0 {
        return Err(bit_err());
    }
    let (now, lru) = (ctx.now_ms, ctx.lru_s);
    let db = ctx.dbs.of(key);
    let (bytes, created_or_grown) = writable_bits(db, key, (offset / 8) as usize + 1, now, lru)?;
    let byte = &mut bytes[(offset / 8) as usize];
    let mask = 1u8 << (7 - offset % 8);
    let old = *byte & mask != 0;
    let changed = created_or_grown || old != (on == 1);
    if changed {
        if on == 1 {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
        db.signal_modified(key);
        ctx.wrote(1);
        ctx.notify(notify::STRING, "setbit", key);
    }
    ctx.out.int(i64::from(old));
    Ok(())
}

fn getbit(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let offset = bit_offset(ctx, argv[2], None)?;
    let entry = ctx.dbs.of(argv[1]).get(argv[1], ctx.now_ms);
    ctx.stats.hit(entry.is_some());
    let bit = match string_of(entry)? {
        None => 0,
        Some(s) => {
            let mut scratch = itoa::Buffer::new();
            let bytes = s.as_bytes(&mut scratch);
            bytes.get((offset / 8) as usize).map_or(0, |b| (b >> (7 - offset % 8)) & 1)
        }
    };
    ctx.out.int(i64::from(bit));
    Ok(())
}

/// Whether a BIT/BYTE unit argument asks for bits.
fn unit_is_bit(arg: &[u8]) -> Result<bool, CmdError> {
    if eq(arg, "bit") {
        Ok(true)
    } else if eq(arg, "byte") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

/// Converts a (start, end) pair, negative from the end, to clamped
/// positions in a string of `total` units; `None` when empty.
fn clamp_range(start: i64, end: i64, total: i64) -> Option<(u64, u64)> {
    let mut start = if start < 0 { total.saturating_add(start) } else { start };
    let mut end = if end < 0 { total.saturating_add(end) } else { end };
    start = start.max(0);
    end = end.max(0);
    if end >= total {
        end = total - 1;
    }
    (start <= end).then_some((start as u64, end as u64))
}

fn bitcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let entry = ctx.dbs.of(argv[1]).get(argv[1], ctx.now_ms);
    ctx.stats.hit(entry.is_some());
    let Some(s) = string_of(entry)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let mut scratch = itoa::Buffer::new();
    let bytes = s.as_bytes(&mut scratch);
    let count = match argv.len() {
        2 => popcount(bytes),
        4 | 5 => {
            let start = i64_arg(argv[2])?;
            let end = i64_arg(argv[3])?;
            if start < 0 && end < 0 && start > end {
                ctx.out.int(0);
                return Ok(());
            }
            let is_bit = match argv.get(4) {
                Some(unit) => unit_is_bit(unit)?,
                None => false,
            };
            let total = bytes.len() as i64 * if is_bit { 8 } else { 1 };
            match clamp_range(start, end, total) {
                None => 0,
                Some((s, e)) if is_bit => popcount_bits(bytes, s, e),
                Some((s, e)) => popcount(&bytes[s as usize..=e as usize]),
            }
        }
        _ => return Err(CmdError::Syntax),
    };
    ctx.out.int(count as i64);
    Ok(())
}

fn bitpos(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let bit = i64_arg(argv[2])?;
    if bit != 0 && bit != 1 {
        return Err(CmdError::other("ERR The bit argument must be 1 or 0."));
    }
    let want = bit == 1;
    let entry = ctx.dbs.of(argv[1]).get(argv[1], ctx.now_ms);
    ctx.stats.hit(entry.is_some());
    // A missing key is an endless run of zeros (Redis answers before
    // looking at the range arguments).
    let Some(s) = string_of(entry)? else {
        ctx.out.int(if want { -1 } else { 0 });
        return Ok(());
    };
    let mut scratch = itoa::Buffer::new();
    let bytes = s.as_bytes(&mut scratch);
    let len = bytes.len() as i64;
    let (range, end_given) = match argv.len() {
        3 => ((len > 0).then(|| (0, len as u64 * 8 - 1)), false),
        4..=6 => {
            let start = i64_arg(argv[3])?;
            let is_bit = match argv.get(5) {
                Some(unit) => unit_is_bit(unit)?,
                None => false,
            };
            let end = match argv.get(4) {
                Some(e) => i64_arg(e)?,
                None if is_bit => len.saturating_mul(8).saturating_add(7),
                None => len - 1,
            };
            let range = if is_bit {
                clamp_range(start, end, len.saturating_mul(8))
            } else {
                clamp_range(start, end, len).map(|(s, e)| (s * 8, e * 8 + 7))
            };
            (range, argv.len() >= 5)
        }
        _ => return Err(CmdError::Syntax),
    };
    let pos = match range {
        None => -1,
        Some((start, end)) => match first_bit(bytes, start, end, want) {
            Some(p) => p as i64,
            // Looking for a clear bit past the end of the string finds the
            // zero padding right after it, unless the caller bounded the
            // range.
            None if !want && !end_given => ((end / 8 + 1) * 8) as i64,
            None => -1,
        },
    };
    ctx.out.int(pos);
    Ok(())
}

#[derive(Clone, Copy)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

fn bitop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let op = if eq(argv[1], "and") {
        BitOp::And
    } else if eq(argv[1], "or") {
        BitOp::Or
    } else if eq(argv[1], "xor") {
        BitOp::Xor
    } else if eq(argv[1], "not") {
        BitOp::Not
    } else {
        return Err(CmdError::Syntax);
    };
    if matches!(op, BitOp::Not) && argv.len() != 4 {
        return Err(CmdError::other("ERR BITOP NOT must be called with a single source key."));
    }
    let (now, lru) = (ctx.now_ms, ctx.lru_s);
    let dest = argv[2];
    // Sources are read in order; the first non-string one fails the command.
    let mut sources: Vec<Option<Vec<u8>>> = Vec::with_capacity(argv.len() - 3);
    for key in &argv[3..] {
        let entry = ctx.dbs.of(key).get(key, now);
        ctx.stats.hit(entry.is_some());
        sources.push(string_of(entry)?.map(|s| s.as_bytes(&mut itoa::Buffer::new()).to_vec()));
    }
    let max_len = sources.iter().map(|s| s.as_ref().map_or(0, Vec::len)).max().unwrap_or(0);
    let db = ctx.dbs.of(dest);
    if max_len == 0 {
        // Redis's dbDelete, without a lookup: even a key past its time
        // is deleted (as `del`) rather than expired.
        if db.remove(dest).is_some() {
            ctx.wrote(1);
            ctx.notify(notify::GENERIC, "del", dest);
        }
        ctx.out.int(0);
        return Ok(());
    }
    let mut result = vec![0u8; max_len];
    if let Some(first) = &sources[0] {
        result[..first.len()].copy_from_slice(first);
    }
    match op {
        BitOp::Not => result.iter_mut().for_each(|b| *b = !*b),
        BitOp::And => {
            for src in &sources[1..] {
                let src = src.as_deref().unwrap_or(&[]);
                result.iter_mut().zip(src).for_each(|(d, s)| *d &= s);
                // Missing bytes of a shorter source are zeros.
                result[src.len()..].fill(0);
            }
        }
        BitOp::Or => {
            for src in sources[1..].iter().flatten() {
                result.iter_mut().zip(src).for_each(|(d, s)| *d |= s);
            }
        }
        BitOp::Xor => {
            for src in sources[1..].iter().flatten() {
                result.iter_mut().zip(src).for_each(|(d, s)| *d ^= s);
            }
        }
    }
    db.set_key(dest, Value::Str(Str::raw(result)), now, lru);
    ctx.wrote(1);
    ctx.notify(notify::STRING, "set", dest);
    ctx.out.int(max_len as i64);
    Ok(())
}

#[derive(Clone, Copy)]
enum FieldOp {
    Get,
    Set(i64),
    IncrBy(i64),
}

#[derive(Clone, Copy)]
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    overflow: Overflow,
}

/// Parses `i8`/`u16`-style types: i1..i64, u1..u63 (lower-case only).
fn field_type(arg: &[u8]) -> Result<(bool, u32), CmdError> {
    let err = || {
        CmdError::other(
            "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.",
        )
    };
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(err()),
    };
    let bits = keel_engine::value::parse_canonical_i64(&arg[1..]).ok_or_else(err)?;
    if bits < 1 || bits > if signed { 64 } else { 63 } {
        return Err(err());
    }
    Ok((signed, bits as u32))
}

fn parse_fields(ctx: &Ctx<'_>, argv: &[&[u8]]) -> Result<Vec<Field>, CmdError> {
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < argv.len() {
        let sub = argv[j];
        let remaining = argv.len() - j - 1;
        let is_get = eq(sub, "get") && remaining >= 2;
        let is_set = eq(sub, "set") && remaining >= 3;
        let is_incr = eq(sub, "incrby") && remaining >= 3;
        if eq(sub, "overflow") && remaining >= 1 {
            let kind = argv[j + 1];
            overflow = if eq(kind, "wrap") {
                Overflow::Wrap
            } else if eq(kind, "sat") {
                Overflow::Sat
            } else if eq(kind, "fail") {
                Overflow::Fail
            } else {
                return Err(CmdError::other("ERR Invalid OVERFLOW type specified"));
            };
            j += 2;
            continue;
        }
        if !(is_get || is_set || is_incr) {
            return Err(CmdError::Syntax);
        }
        let (signed, bits) = field_type(argv[j + 1])?;
        let offset = bit_offset(ctx, argv[j + 2], Some(bits))?;
        let op = if is_get {
            FieldOp::Get
        } else {
            let v = i64_arg(argv[j + 3])?;
            if is_set {
                FieldOp::Set(v)
            } else {
                FieldOp::IncrBy(v)
            }
        };
        fields.push(Field { op, signed, bits, offset, overflow });
        j += if is_get { 3 } else { 4 };
    }
    Ok(fields)
}

/// BITFIELD's key flags (GETKEYSANDFLAGS): only read when every
/// operation is a well-formed GET or OVERFLOW (Redis's `bitfieldGetKeys`;
/// a malformed one counts as a write).
fn bitfield_key_flags(argv: &[&[u8]]) -> u16 {
    let mut i = 2;
    while i < argv.len() {
        let left = argv.len() - i - 1;
        if eq(argv[i], "get") && left >= 2 {
            i += 3;
        } else if eq(argv[i], "overflow") && left >= 1 {
            i += 2;
        } else {
            return RW | ACCESS | UPDATE;
        }
    }
    RO | ACCESS
}

fn bitfield(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    bitfield_generic(ctx, argv, false)
}

fn bitfield_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    bitfield_generic(ctx, argv, true)
}

fn bitfield_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], read_only: bool) -> CmdResult {
    let key = argv[1];
    let fields = parse_fields(ctx, argv)?;
    let (now, lru) = (ctx.now_ms, ctx.lru_s);
    let highest_write =
        fields.iter().filter(|f| !matches!(f.op, FieldOp::Get)).map(|f| f.offset + u64::from(f.bits) - 1).max();
    let Some(highest_write) = highest_write else {
        // Only GETs: a read, which tolerates a missing key.
        let entry = ctx.dbs.of(key).get(key, now);
        ctx.stats.hit(entry.is_some());
        let s = string_of(entry)?;
        let mut scratch = itoa::Buffer::new();
        let bytes = s.map_or(&[][..], |s| s.as_bytes(&mut scratch));
        ctx.out.array(fields.len());
        for f in &fields {
            let raw = get_field(bytes, f.offset, f.bits);
            ctx.out.int(if f.signed { signed_field(raw, f.bits) } else { raw as i64 });
        }
        return Ok(());
    };
    if read_only {
        return Err(CmdError::other("ERR BITFIELD_RO only supports the GET subcommand"));
    }
    let db = ctx.dbs.of(key);
    let (bytes, created_or_grown) = writable_bits(db, key, (highest_write / 8) as usize + 1, now, lru)?;
    let mut changes = 0u64;
    ctx.out.array(fields.len());
    for f in &fields {
        let old_raw = get_field(bytes, f.offset, f.bits);
        let (delta, is_set) = match f.op {
            FieldOp::Get => {
                ctx.out.int(if f.signed { signed_field(old_raw, f.bits) } else { old_raw as i64 });
                continue;
            }
            FieldOp::Set(v) => (v, true),
            FieldOp::IncrBy(v) => (v, false),
        };
        // (new raw bits, value to reply) or None on FAIL overflow.
        let outcome = if f.signed {
            let old = signed_field(old_raw, f.bits);
            let new = if is_set {
                signed_add(delta, 0, f.bits, f.overflow)
            } else {
                signed_add(old, delta, f.bits, f.overflow)
            };
            new.map(|n| (n as u64, if is_set { old } else { n }))
        } else {
            let new = if is_set {
                unsigned_add(delta as u64, 0, f.bits, f.overflow)
            } else {
                unsigned_add(old_raw, delta, f.bits, f.overflow)
            };
            new.map(|n| (n, if is_set { old_raw as i64 } else { n as i64 }))
        };
        match outcome {
            Some((new_raw, reply)) => {
                let mask = if f.bits == 64 { u64::MAX } else { (1 << f.bits) - 1 };
                set_field(bytes, f.offset, f.bits, new_raw & mask);
                if created_or_grown || new_raw & mask != old_raw {
                    changes += 1;
                }
                ctx.out.int(reply);
            }
            None => ctx.out.null(),
        }
    }
    if changes > 0 {
        db.signal_modified(key);
        ctx.wrote(changes);
        ctx.notify(notify::STRING, "setbit", key);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_count(bytes: &[u8], start: u64, end: u64) -> u64 {
        (start..=end).filter(|&p| bytes[(p / 8) as usize] >> (7 - p % 8) & 1 == 1).count() as u64
    }

    fn naive_first(bytes: &[u8], start: u64, end: u64, want: bool) -> Option<u64> {
        (start..=end).find(|&p| (bytes[(p / 8) as usize] >> (7 - p % 8) & 1 == 1) == want)
    }

    #[test]
    fn bit_counts_and_positions_match_a_naive_scan() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2000 {
            let len = (next() % 40 + 1) as usize;
            let density = next() % 4;
            let bytes: Vec<u8> = (0..len)
                .map(|_| match density {
                    0 => 0,
                    1 => 0xff,
                    _ => next() as u8,
                })
                .collect();
            let bits = len as u64 * 8;
            let (a, b) = (next() % bits, next() % bits);
            let (start, end) = (a.min(b), a.max(b));
            assert_eq!(popcount_bits(&bytes, start, end), naive_count(&bytes, start, end));
            for want in [false, true] {
                assert_eq!(
                    first_bit(&bytes, start, end, want),
                    naive_first(&bytes, start, end, want),
                    "{bytes:?} {start} {end}"
                );
            }
        }
        assert_eq!(popcount(b"foobar"), 26);
    }

    #[test]
    fn fields_round_trip() {
        let mut buf = vec![0u8; 10];
        set_field(&mut buf, 3, 13, 0x1abc);
        assert_eq!(get_field(&buf, 3, 13), 0x1abc);
        set_field(&mut buf, 7, 64, u64::MAX - 5);
        assert_eq!(get_field(&buf, 7, 64), u64::MAX - 5);
        assert_eq!(signed_field(0b1111, 4), -1);
        assert_eq!(get_field(&[0xff], 4, 8), 0xf0);
    }

    #[test]
    fn overflow_rules_follow_redis() {
        assert_eq!(unsigned_add(250, 10, 8, Overflow::Wrap), Some(4));
        assert_eq!(unsigned_add(250, 10, 8, Overflow::Sat), Some(255));
        assert_eq!(unsigned_add(250, 10, 8, Overflow::Fail), None);
        assert_eq!(unsigned_add(5, -10, 8, Overflow::Sat), Some(0));
        assert_eq!(unsigned_add(5, -10, 8, Overflow::Wrap), Some(251));
        // SET of -1 into u8: the value itself is out of range (huge unsigned).
        assert_eq!(unsigned_add(u64::MAX, 0, 8, Overflow::Sat), Some(255));
        assert_eq!(unsigned_add(u64::MAX, 0, 8, Overflow::Wrap), Some(255));
        assert_eq!(signed_add(120, 10, 8, Overflow::Wrap), Some(-126));
        assert_eq!(signed_add(120, 10, 8, Overflow::Sat), Some(127));
        assert_eq!(signed_add(-120, -10, 8, Overflow::Sat), Some(-128));
        assert_eq!(signed_add(200, 0, 8, Overflow::Wrap), Some(-56));
        assert_eq!(signed_add(i64::MAX, 1, 64, Overflow::Wrap), Some(i64::MIN));
        assert_eq!(signed_add(i64::MAX, 1, 64, Overflow::Sat), Some(i64::MAX));
        assert_eq!(signed_add(i64::MIN, -1, 64, Overflow::Fail), None);
    }
}
