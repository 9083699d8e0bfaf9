//! HyperLogLog values in Redis 7.0's exact string format, so that GET,
//! DUMP, RDB and AOF of an HLL key are byte for byte Redis's, and a value
//! made by either server works in the other.
//!
//! An HLL is a plain string value (there is no HLL type): the commands
//! (`keel-server`'s `command/hyperloglog.rs`) validate it on every use.
//! These functions are pure and take any bytes: a string that is not an
//! HLL, or a corrupt one, gives an error, never a panic (fuzzed:
//! `fuzz/fuzz_targets/hll_decode.rs`).
//!
//! # Format
//!
//! A 16-byte header, then the registers:
//!
//! ```text
//! +------+----------+----------+----------------------------+
//! | HYLL | encoding | 3 unused | cached cardinality (u64 LE) |
//! +------+----------+----------+----------------------------+
//!   0..4      4        5..8             8..16
//! ```
//!
//! The encoding byte is 0 (dense) or 1 (sparse). The top bit of the last
//! cardinality byte set means the cache is stale (a register changed
//! since it was computed).
//!
//! There are 16384 registers (the low 14 bits of an element's hash pick
//! one); each holds the longest run of zeros plus one seen in the other 50
//! bits, at most 51. Hashes are MurmurHash64A with seed `0xadc83b19`.
//!
//! * Dense: 6 bits per register, packed from the least significant bit of
//!   each byte up (register 0 is the low 6 bits of byte 0, register 1 the
//!   top 2 of byte 0 and the low 4 of byte 1...): exactly 12288 bytes, so
//!   a dense value is 12304 bytes long.
//! * Sparse: run-length opcodes, in register order, covering exactly
//!   16384 registers:
//!   - ZERO  `00xxxxxx`: 1 to 64 registers at 0 (`xxxxxx` + 1);
//!   - XZERO `01xxxxxx yyyyyyyy`: 1 to 16384 registers at 0 (the 14
//!     bits + 1);
//!   - VAL   `1vvvvvxx`: 1 to 4 registers (`xx` + 1) at 1 to 32
//!     (`vvvvv` + 1).
//!
//!   A new HLL is sparse (one XZERO of 16384). A register past 32, or a
//!   value that would grow past `hll-sparse-max-bytes` (header included),
//!   turns it dense for good.
//!
//! The count is Otmar Ertl's improved estimator over the registers'
//! histogram ("New cardinality estimation algorithms for HyperLogLog
//! sketches", arXiv:1702.01284), as Redis 5 and later compute it. Every
//! step below (where a split opcode goes, which neighbours merge, what a
//! corrupt value reads as) is Redis's, since the bytes are the format.
//!
//! One difference, on corrupt values only: a value whose last opcode is
//! an XZERO cut short reads its missing byte as 0 (Redis's string
//! terminator). When Redis splits such an opcode it writes the new last
//! byte past the string's end and reads it there in later commands, until
//! the value is reloaded; Keel keeps no bytes past the end, so it reads 0
//! as a reloaded Redis does (`crates/server/tests/differential_hll.rs`
//! leaves such values out).

use thiserror::Error;

/// "HYLL".
pub const MAGIC: &[u8; 4] = b"HYLL";
pub const HEADER_LEN: usize = 16;
/// Bits of the hash that pick a register.
const P: u32 = 14;
/// Bits of the hash whose run of zeros is counted.
const Q: usize = 64 - P as usize;
pub const REGISTERS: usize = 1 << P;
const REGISTER_BITS: usize = 6;
const REGISTER_MASK: u32 = (1 << REGISTER_BITS) - 1;
/// Bytes of a dense value, header included.
pub const DENSE_LEN: usize = HEADER_LEN + (REGISTERS * REGISTER_BITS).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
/// Redis's default `hll-sparse-max-bytes`.
pub const SPARSE_MAX_BYTES_DEFAULT: usize = 3000;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
const HASH_SEED: u64 = 0xadc8_3b19;
/// 0.5 / ln 2.
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

const _: () = assert!(DENSE_LEN == 12304);
// An empty HLL is one XZERO.
const _: () = assert!(REGISTERS <= XZERO_MAX_LEN);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Dense,
    Sparse,
}

impl Encoding {
    /// PFDEBUG ENCODING's word.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Dense => "dense",
            Encoding::Sparse => "sparse",
        }
    }
}

/// Why an HLL operation refused a string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum HllError {
    /// The header is wrong (too short, no magic, unknown encoding, a dense
    /// value of the wrong length): Redis answers WRONGTYPE.
    #[error("not a HyperLogLog")]
    NotHll,
    /// The header is right and the sparse opcodes do not cover exactly
    /// the registers: Redis answers INVALIDOBJ.
    #[error("corrupt HyperLogLog")]
    Corrupt,
}

/// An empty HLL: sparse, one XZERO over every register, cache valid at 0.
pub fn new() -> Vec<u8> {
    let mut hll = Vec::with_capacity(HEADER_LEN + 2);
    hll.extend_from_slice(MAGIC);
    hll.extend_from_slice(&[SPARSE, 0, 0, 0]);
    hll.extend_from_slice(&[0; 8]);
    hll.extend_from_slice(&xzero(REGISTERS));
    hll
}

/// The encoding of a well-formed header, as Redis's `isHLLObjectOrReply`
/// checks it (the sparse opcodes are checked only when read).
pub fn encoding(hll: &[u8]) -> Result<Encoding, HllError> {
    if hll.len() < HEADER_LEN || &hll[..4] != MAGIC {
        return Err(HllError::NotHll);
    }
    match hll[4] {
        DENSE if hll.len() == DENSE_LEN => Ok(Encoding::Dense),
        SPARSE => Ok(Encoding::Sparse),
        _ => Err(HllError::NotHll),
    }
}

// ---------------------------------------------------------------------------
// The cached cardinality.

/// The cached count, if the cache is valid.
pub fn cached_count(hll: &[u8]) -> Option<u64> {
    let card: [u8; 8] = hll.get(8..HEADER_LEN)?.try_into().ok()?;
    (card[7] & 0x80 == 0).then(|| u64::from_le_bytes(card))
}

pub fn set_cached_count(hll: &mut [u8], count: u64) {
    if let Some(card) = hll.get_mut(8..HEADER_LEN) {
        card.copy_from_slice(&count.to_le_bytes());
    }
}

/// Marks the cache stale (its other bits are left as they were).
pub fn invalidate_cache(hll: &mut [u8]) {
    if let Some(b) = hll.get_mut(HEADER_LEN - 1) {
        *b |= 0x80;
    }
}

// ---------------------------------------------------------------------------
// Hashing.

/// MurmurHash64A (Austin Appleby), reading blocks little-endian as Redis's
/// endian-neutral variant does.
pub fn murmur64a(data: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (data.len() as u64).wrapping_mul(M);
    let mut blocks = data.chunks_exact(8);
    for block in &mut blocks {
        let mut k = u64::from_le_bytes(block.try_into().unwrap_or([0; 8]));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = blocks.remainder();
    if !tail.is_empty() {
        for (i, &b) in tail.iter().enumerate() {
            h ^= u64::from(b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register `element` falls in and the value it offers it: the length
/// of the run of zeros (from the low bit) in the hash's other 50 bits,
/// plus one (1..=51).
pub fn register_and_value(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, HASH_SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    // The sentinel bit bounds the run at Q zeros.
    let rest = (hash >> P) | (1 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

// ---------------------------------------------------------------------------
// Dense registers.

/// Register `i` of the dense register bytes. The last register's bits end
/// inside the last byte; a byte past the end reads as the terminating
/// zero Redis's strings have.
fn dense_get(regs: &[u8], i: usize) -> u8 {
    let byte = i * REGISTER_BITS / 8;
    let shift = (i * REGISTER_BITS) & 7;
    let b0 = u32::from(regs.get(byte).copied().unwrap_or(0));
    let b1 = u32::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> shift) | (b1 << (8 - shift))) & REGISTER_MASK) as u8
}

fn dense_put(regs: &mut [u8], i: usize, value: u8) {
    let byte = i * REGISTER_BITS / 8;
    let shift = (i * REGISTER_BITS) & 7;
    let v = u32::from(value) & REGISTER_MASK;
    if let Some(b) = regs.get_mut(byte) {
        *b = ((u32::from(*b) & !(REGISTER_MASK << shift)) | (v << shift)) as u8;
    }
    // The high bits spill into the next byte only when the register
    // straddles two bytes.
    if shift > 8 - REGISTER_BITS {
        if let Some(b) = regs.get_mut(byte + 1) {
            *b = ((u32::from(*b) & !(REGISTER_MASK >> (8 - shift))) | (v >> (8 - shift))) as u8;
        }
    }
}

/// Raises register `i` to `value`; whether it rose.
fn dense_raise(regs: &mut [u8], i: usize, value: u8) -> bool {
    if value > dense_get(regs, i) {
        dense_put(regs, i, value);
        true
    } else {
        false
    }
}

// ---------------------------------------------------------------------------
// Sparse opcodes.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Zero(usize),
    XZero(usize),
    Val(u8, usize),
}

impl Op {
    /// Registers covered.
    fn span(self) -> usize {
        match self {
            Op::Zero(n) | Op::XZero(n) | Op::Val(_, n) => n,
        }
    }
}

/// The opcode at `p`. An XZERO cut short by the end of the string reads
/// its second byte as the terminating zero, as Redis's does.
fn op_at(bytes: &[u8], p: usize) -> Op {
    let b = bytes[p];
    match b & 0xc0 {
        0x00 => Op::Zero(usize::from(b & 0x3f) + 1),
        0x40 => {
            let low = bytes.get(p + 1).copied().unwrap_or(0);
            Op::XZero(((usize::from(b & 0x3f) << 8) | usize::from(low)) + 1)
        }
        _ => {
            let (value, len) = val_parts(b);
            Op::Val(value, len)
        }
    }
}

fn is_xzero(b: u8) -> bool {
    b & 0xc0 == 0x40
}

fn is_zero(b: u8) -> bool {
    b & 0xc0 == 0
}

fn is_val(b: u8) -> bool {
    b & 0x80 != 0
}

/// Bytes of an opcode starting with `b`.
fn width(b: u8) -> usize {
    if is_xzero(b) {
        2
    } else {
        1
    }
}

/// A VAL opcode's value and run length.
fn val_parts(b: u8) -> (u8, usize) {
    (((b >> 2) & 0x1f) + 1, usize::from(b & 3) + 1)
}

fn val(value: u8, len: usize) -> u8 {
    debug_assert!((1..=VAL_MAX_VALUE).contains(&value) && (1..=VAL_MAX_LEN).contains(&len));
    0x80 | ((value - 1) << 2) | (len - 1) as u8
}

fn xzero(len: usize) -> [u8; 2] {
    let l = len - 1;
    [0x40 | (l >> 8) as u8, (l & 0xff) as u8]
}

/// A run of `len` zero registers: ZERO up to 64, XZERO past.
fn push_zeros(seq: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        seq.extend_from_slice(&xzero(len));
    } else {
        seq.push((len - 1) as u8);
    }
}

/// Walks the sparse opcodes after the header, giving each opcode and the
/// index of its first register.
fn sparse_ops(hll: &[u8]) -> impl Iterator<Item = Op> + '_ {
    let mut p = HEADER_LEN;
    std::iter::from_fn(move || {
        if p >= hll.len() {
            return None;
        }
        let op = op_at(hll, p);
        p += width(hll[p]);
        Some(op)
    })
}

/// Reads the VALs of sparse opcodes, as Redis's `hllMerge` and
/// `hllSparseToDense` read them: the opcodes must cover exactly the
/// registers, and a VAL that would pass the last register is corrupt
/// (upstream 7.0.15 stops at such a VAL and accepts the value if the
/// registers were all covered before it; Debian's 7.0.15, the reference,
/// carries the CVE-2025-32023 fix, which refuses it). `apply` sees each
/// (register, value) of the VALs, in order.
fn walk_sparse(hll: &[u8], mut apply: impl FnMut(usize, u8)) -> Result<(), HllError> {
    let mut index = 0usize;
    for op in sparse_ops(hll) {
        match op {
            Op::Zero(n) | Op::XZero(n) => index += n,
            Op::Val(v, n) => {
                if index + n > REGISTERS {
                    return Err(HllError::Corrupt);
                }
                for i in index..index + n {
                    apply(i, v);
                }
                index += n;
            }
        }
    }
    if index == REGISTERS {
        Ok(())
    } else {
        Err(HllError::Corrupt)
    }
}

/// Converts a sparse HLL to dense (header, cache included, kept); returns
/// whether it converted (false: it was dense already).
pub fn to_dense(hll: &mut Vec<u8>) -> Result<bool, HllError> {
    if encoding(hll)? == Encoding::Dense {
        return Ok(false);
    }
    let mut dense = vec![0u8; DENSE_LEN];
    dense[..HEADER_LEN].copy_from_slice(&hll[..HEADER_LEN]);
    dense[4] = DENSE;
    let regs = &mut dense[HEADER_LEN..];
    walk_sparse(hll, |i, v| dense_put(regs, i, v))?;
    *hll = dense;
    Ok(true)
}

/// Raises register `index` of a sparse HLL to `value` in place (Redis's
/// `hllSparseSet`), turning it dense when the value does not fit a VAL
/// or the value would grow past `sparse_max_bytes`. Whether the register
/// rose.
fn sparse_raise(hll: &mut Vec<u8>, index: usize, value: u8, sparse_max_bytes: usize) -> Result<bool, HllError> {
    if value > VAL_MAX_VALUE {
        return promote(hll, index, value);
    }
    // Find the opcode covering `index`, and the one before it.
    let end = hll.len();
    let (mut p, mut first, mut prev) = (HEADER_LEN, 0usize, None);
    let mut found = None;
    while p < end {
        let op = op_at(hll, p);
        if index < first + op.span() {
            found = Some(op);
            break;
        }
        prev = Some(p);
        p += width(hll[p]);
        first += op.span();
    }
    let Some(op) = found else { return Err(HllError::Corrupt) };
    let last = first + op.span() - 1;
    match op {
        Op::Val(old, _) if old >= value => return Ok(false),
        Op::Val(_, 1) | Op::Zero(1) => hll[p] = val(value, 1),
        _ => {
            // Split the opcode: the run before, the register, the run after.
            let mut seq = Vec::with_capacity(5);
            match op {
                Op::Val(old, _) => {
                    if index != first {
                        seq.push(val(old, index - first));
                    }
                    seq.push(val(value, 1));
                    if index != last {
                        seq.push(val(old, last - index));
                    }
                }
                Op::Zero(_) | Op::XZero(_) => {
                    if index != first {
                        push_zeros(&mut seq, index - first);
                    }
                    seq.push(val(value, 1));
                    if index != last {
                        push_zeros(&mut seq, last - index);
                    }
                }
            }
            let old_width = width(hll[p]);
            let grows_by = seq.len() as isize - old_width as isize;
            if grows_by > 0 && hll.len() + grows_by as usize > sparse_max_bytes {
                return promote(hll, index, value);
            }
            // An XZERO cut short by the end has one byte where two are
            // replaced: Redis's length arithmetic then drops the new
            // sequence's last byte. Keep that, as the bytes are the format.
            let new_len = (hll.len() as isize + grows_by) as usize;
            let next = p + old_width;
            let tail: Vec<u8> = hll.get(next..).unwrap_or(&[]).to_vec();
            hll.truncate(p);
            hll.extend_from_slice(&seq);
            hll.extend_from_slice(&tail);
            hll.truncate(new_len);
        }
    }
    merge_neighbours(hll, prev.unwrap_or(HEADER_LEN));
    invalidate_cache(hll);
    Ok(true)
}

/// Joins adjacent VALs of one value whose lengths fit one VAL, over the
/// five opcodes from `p` (Redis looks no further: the bytes depend on it).
fn merge_neighbours(hll: &mut Vec<u8>, mut p: usize) {
    let mut scans = 5;
    while p < hll.len() && scans > 0 {
        scans -= 1;
        let b = hll[p];
        if is_xzero(b) {
            p += 2;
            continue;
        }
        if is_zero(b) {
            p += 1;
            continue;
        }
        if let Some(&next) = hll.get(p + 1) {
            if is_val(next) {
                let ((v1, l1), (v2, l2)) = (val_parts(b), val_parts(next));
                if v1 == v2 && l1 + l2 <= VAL_MAX_LEN {
                    hll[p + 1] = val(v1, l1 + l2);
                    hll.remove(p);
                    // Try the merged opcode with the one after it.
                    continue;
                }
            }
        }
        p += 1;
    }
}

/// Sparse to dense, then the raise that did not fit (it always raises: the
/// register was below `value`).
fn promote(hll: &mut Vec<u8>, index: usize, value: u8) -> Result<bool, HllError> {
    to_dense(hll)?;
    dense_raise(&mut hll[HEADER_LEN..], index, value);
    Ok(true)
}

// ---------------------------------------------------------------------------
// Commands' operations.

/// Raises register `index` (below 16384) to `value` if below it; whether
/// it rose. A sparse HLL may turn dense (`sparse_max_bytes`). Leaves the
/// cache alone for a dense one: PFADD invalidates once after its elements.
pub fn raise(hll: &mut Vec<u8>, index: usize, value: u8, sparse_max_bytes: usize) -> Result<bool, HllError> {
    if index >= REGISTERS {
        return Ok(false);
    }
    match encoding(hll)? {
        Encoding::Dense => Ok(dense_raise(&mut hll[HEADER_LEN..], index, value)),
        Encoding::Sparse => sparse_raise(hll, index, value, sparse_max_bytes),
    }
}

/// Adds `element`; whether a register rose.
pub fn add(hll: &mut Vec<u8>, element: &[u8], sparse_max_bytes: usize) -> Result<bool, HllError> {
    let (index, value) = register_and_value(element);
    raise(hll, index, value, sparse_max_bytes)
}

/// Raises `max` (one byte per register) to the registers of `hll`.
pub fn merge_into(max: &mut [u8; REGISTERS], hll: &[u8]) -> Result<(), HllError> {
    match encoding(hll)? {
        Encoding::Dense => {
            let regs = &hll[HEADER_LEN..];
            for (i, m) in max.iter_mut().enumerate() {
                *m = (*m).max(dense_get(regs, i));
            }
            Ok(())
        }
        Encoding::Sparse => walk_sparse(hll, |i, v| max[i] = max[i].max(v)),
    }
}

/// Every register, one byte each (PFDEBUG GETREG, after `to_dense`).
pub fn registers(hll: &[u8]) -> Result<Box<[u8; REGISTERS]>, HllError> {
    let mut regs = Box::new([0u8; REGISTERS]);
    merge_into(&mut regs, hll)?;
    Ok(regs)
}

/// The estimated count of `hll`'s elements, computed (the cache is not
/// read). A sparse HLL whose opcodes do not cover exactly the registers
/// is corrupt.
pub fn count(hll: &[u8]) -> Result<u64, HllError> {
    let mut histogram = [0u64; 64];
    match encoding(hll)? {
        Encoding::Dense => {
            let regs = &hll[HEADER_LEN..];
            for i in 0..REGISTERS {
                histogram[usize::from(dense_get(regs, i))] += 1;
            }
        }
        Encoding::Sparse => {
            // Unlike a merge, the count reads every opcode.
            let mut index = 0usize;
            for op in sparse_ops(hll) {
                let (v, n) = match op {
                    Op::Zero(n) | Op::XZero(n) => (0, n),
                    Op::Val(v, n) => (v, n),
                };
                histogram[usize::from(v)] += n as u64;
                index += n;
            }
            if index != REGISTERS {
                return Err(HllError::Corrupt);
            }
        }
    }
    Ok(estimate(&histogram))
}

/// The estimated count of the union whose registers are `max`.
pub fn count_registers(max: &[u8; REGISTERS]) -> u64 {
    let mut histogram = [0u64; 64];
    for &r in max.iter() {
        histogram[usize::from(r & 63)] += 1;
    }
    estimate(&histogram)
}

/// Ertl's improved raw estimator from the registers' histogram (values
/// past Q+1 cannot come from a hash and are ignored, as Redis does).
fn estimate(histogram: &[u64; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - histogram[Q + 1] as f64) / m);
    for j in (1..=Q).rev() {
        z += histogram[j] as f64;
        z *= 0.5;
    }
    z += m * sigma(histogram[0] as f64 / m);
    (ALPHA_INF * m * m / z).round() as u64
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if z == before {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        let d = 1.0 - x;
        z -= d * d * y;
        if z == before {
            return z / 3.0;
        }
    }
}

/// PFDEBUG DECODE's text for a sparse HLL (`z:N` ZERO, `Z:N` XZERO,
/// `v:V,N` VAL); None for a dense one.
pub fn decode(hll: &[u8]) -> Result<Option<String>, HllError> {
    if encoding(hll)? == Encoding::Dense {
        return Ok(None);
    }
    let words: Vec<String> = sparse_ops(hll)
        .map(|op| match op {
            Op::Zero(n) => format!("z:{n}"),
            Op::XZero(n) => format!("Z:{n}"),
            Op::Val(v, n) => format!("v:{v},{n}"),
        })
        .collect();
    Ok(Some(words.join(" ")))
}

/// PFSELFTEST: the dense registers read back what was written, and a
/// sparse and a dense HLL fed the same 10 million elements agree and stay
/// within six standard errors at each power of ten. `seed` picks the
/// registers' test values and the elements. Redis's failure texts.
pub fn self_test(seed: u64, sparse_max_bytes: usize) -> Result<(), String> {
    self_test_up_to(seed, sparse_max_bytes, 10_000_000)
}

/// `self_test` with `elements` elements (unit tests use fewer).
fn self_test_up_to(seed: u64, sparse_max_bytes: usize, elements: u64) -> Result<(), String> {
    let mut state = seed | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut dense = vec![0u8; DENSE_LEN];
    dense[..4].copy_from_slice(MAGIC);
    let mut expected = [0u8; REGISTERS];
    for _ in 0..1000 {
        let regs = &mut dense[HEADER_LEN..];
        for (i, e) in expected.iter_mut().enumerate() {
            *e = (next() & 63) as u8;
            dense_put(regs, i, *e);
        }
        for (i, &e) in expected.iter().enumerate() {
            let got = dense_get(regs, i);
            if got != e {
                return Err(format!("TESTFAILED Register {i} should be {e} but is {got}"));
            }
        }
    }
    dense[HEADER_LEN..].fill(0);
    let mut sparse = new();
    let relative_error = 1.04 / (REGISTERS as f64).sqrt();
    let base = next();
    let mut checkpoint: u64 = 1;
    for j in 1..=elements {
        let element = (j ^ base).to_le_bytes();
        let (index, value) = register_and_value(&element);
        dense_raise(&mut dense[HEADER_LEN..], index, value);
        raise(&mut sparse, index, value, sparse_max_bytes).map_err(|e| format!("TESTFAILED {e}"))?;
        if j != checkpoint {
            continue;
        }
        if j < (sparse_max_bytes / 2) as u64 && encoding(&sparse) != Ok(Encoding::Sparse) {
            return Err("TESTFAILED sparse encoding not used".into());
        }
        let counted = count(&dense).map_err(|e| format!("TESTFAILED {e}"))?;
        if count(&sparse) != Ok(counted) {
            return Err("TESTFAILED dense/sparse disagree".into());
        }
        let error = checkpoint.abs_diff(counted);
        // At 10 a collision alone is a large relative error.
        let max_error = if j == 10 { 1 } else { (relative_error * 6.0 * checkpoint as f64).ceil() as u64 };
        if error > max_error {
            return Err(format!("TESTFAILED Too big error. card:{checkpoint} abserr:{error}"));
        }
        checkpoint *= 10;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sparse_of(elements: impl IntoIterator<Item = Vec<u8>>, max: usize) -> Vec<u8> {
        let mut hll = new();
        for e in elements {
            add(&mut hll, &e, max).expect("valid");
        }
        hll
    }

    fn dense_of(elements: impl IntoIterator<Item = Vec<u8>>) -> Vec<u8> {
        let mut hll = new();
        to_dense(&mut hll).expect("valid");
        for e in elements {
            add(&mut hll, &e, 0).expect("valid");
        }
        hll
    }

    fn numbered(n: usize) -> impl Iterator<Item = Vec<u8>> {
        (0..n).map(|i| format!("element:{i}").into_bytes())
    }

    /// Values that redis-server 7.0.15 gives (read with GET and PFDEBUG
    /// DECODE).
    #[test]
    fn bytes_match_redis() {
        assert_eq!(new(), b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x7f\xff");
        // PFADD k a b c; GET k.
        let mut hll = sparse_of([b"a".to_vec(), b"b".to_vec(), b"c".to_vec()], 3000);
        assert_eq!(
            hll,
            b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x80\x60\xf3\x80\x50\xb1\x84\x4b\xfb\x80\x42\x5a"
        );
        assert_eq!(decode(&hll), Ok(Some("Z:8436 v:1,1 Z:4274 v:2,1 Z:3068 v:1,1 Z:603".to_string())));
        // PFCOUNT k caches 3.
        assert_eq!(count(&hll), Ok(3));
        set_cached_count(&mut hll, 3);
        assert_eq!(&hll[8..16], b"\x03\x00\x00\x00\x00\x00\x00\x00");
        // PFADD e "": Z:5938 v:2,1 Z:10445.
        assert_eq!(register_and_value(b""), (5938, 2));
    }

    #[test]
    fn dense_registers_round_trip_without_touching_neighbours() {
        let mut regs = vec![0u8; DENSE_LEN - HEADER_LEN];
        let mut expected = vec![0u8; REGISTERS];
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..4 {
            for (i, e) in expected.iter_mut().enumerate() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *e = (state & 63) as u8;
                dense_put(&mut regs, i, *e);
            }
            for (i, &e) in expected.iter().enumerate() {
                assert_eq!(dense_get(&regs, i), e, "register {i}");
            }
        }
        assert_eq!(self_test_up_to(7, 3000, 100_000), Ok(()));
    }

    #[test]
    fn sparse_and_dense_agree_and_sparse_turns_dense_at_the_limit() {
        for n in [0, 1, 10, 100, 500, 1000, 3000, 20_000] {
            let sparse = sparse_of(numbered(n), 3000);
            let dense = dense_of(numbered(n));
            assert_eq!(count(&sparse), count(&dense), "{n} elements");
            assert_eq!(registers(&sparse), registers(&dense));
            let mut converted = sparse.clone();
            to_dense(&mut converted).expect("valid");
            assert_eq!(converted[HEADER_LEN..], dense[HEADER_LEN..]);
            let estimate = count(&dense).expect("valid");
            assert!(estimate.abs_diff(n as u64) <= (n as u64 / 20).max(1), "{n}: {estimate}");
            assert!(sparse.len() <= 3000 || sparse.len() == DENSE_LEN);
        }
        assert_eq!(encoding(&sparse_of(numbered(100), 3000)), Ok(Encoding::Sparse));
        assert_eq!(encoding(&sparse_of(numbered(20_000), 3000)), Ok(Encoding::Dense));
        // The limit: one element more than fits turns the value dense,
        // and until then it never passed the limit.
        for limit in [20, 100, 700] {
            let mut hll = new();
            for e in numbered(5000) {
                let before = hll.len();
                add(&mut hll, &e, limit).expect("valid");
                if encoding(&hll) == Ok(Encoding::Dense) {
                    assert!(before <= limit && before + 3 > limit, "limit {limit}: turned dense at {before}");
                    break;
                }
                assert!(hll.len() <= limit, "limit {limit}: {}", hll.len());
            }
            assert_eq!(encoding(&hll), Ok(Encoding::Dense));
        }
        // A limit of 0 makes the first raise dense.
        let mut hll = new();
        assert_eq!(add(&mut hll, b"x", 0), Ok(true));
        assert_eq!(encoding(&hll), Ok(Encoding::Dense));
    }

    #[test]
    fn adding_is_idempotent_and_merging_is_the_union() {
        let mut hll = sparse_of(numbered(50), 3000);
        for e in numbered(50) {
            assert_eq!(add(&mut hll, &e, 3000), Ok(false));
        }
        let a = sparse_of(numbered(300), 3000);
        let b = dense_of((300..900).map(|i| format!("element:{i}").into_bytes()));
        let mut max = [0u8; REGISTERS];
        merge_into(&mut max, &a).expect("valid");
        merge_into(&mut max, &b).expect("valid");
        assert_eq!(count_registers(&max), count(&dense_of(numbered(900))).expect("valid"));
    }

    #[test]
    fn cache_reads_only_when_valid() {
        let mut hll = new();
        assert_eq!(cached_count(&hll), Some(0));
        add(&mut hll, b"a", 3000).expect("valid");
        assert_eq!(cached_count(&hll), None);
        set_cached_count(&mut hll, 1);
        assert_eq!(cached_count(&hll), Some(1));
        invalidate_cache(&mut hll);
        assert_eq!(hll[15], 0x80);
    }

    #[test]
    fn decode_lists_the_opcodes() {
        assert_eq!(decode(&new()), Ok(Some("Z:16384".to_string())));
        let mut hll = new();
        raise(&mut hll, 1000, 2, 3000).expect("valid");
        raise(&mut hll, 1020, 3, 3000).expect("valid");
        raise(&mut hll, 1021, 3, 3000).expect("valid");
        assert_eq!(decode(&hll), Ok(Some("Z:1000 v:2,1 z:19 v:3,2 Z:15362".to_string())));
        to_dense(&mut hll).expect("valid");
        assert_eq!(decode(&hll), Ok(None));
    }

    #[test]
    fn corrupt_values_are_refused() {
        assert_eq!(encoding(b"HYLL"), Err(HllError::NotHll));
        assert_eq!(encoding(b"HYLx\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xff"), Err(HllError::NotHll));
        assert_eq!(encoding(b"HYLL\x02\0\0\0\0\0\0\0\0\0\0\0\x7f\xff"), Err(HllError::NotHll));
        assert_eq!(encoding(b"HYLL\x00\0\0\0\0\0\0\0\0\0\0\0\x7f\xff"), Err(HllError::NotHll));
        let mut tail = sparse_of(numbered(3), 3000);
        tail.extend_from_slice(b"hello");
        assert_eq!(count(&tail), Err(HllError::Corrupt));
        let mut max = [0u8; REGISTERS];
        assert_eq!(merge_into(&mut max, &tail), Err(HllError::Corrupt));
        assert_eq!(to_dense(&mut tail.clone()), Err(HllError::Corrupt));
        // A VAL past the last register, after opcodes that covered them
        // all (Debian's 7.0.15 refuses it; `count` always did).
        let mut past = new();
        past.push(val(20, 4));
        assert_eq!(merge_into(&mut max, &past), Err(HllError::Corrupt));
        assert_eq!(to_dense(&mut past.clone()), Err(HllError::Corrupt));
        assert_eq!(count(&past), Err(HllError::Corrupt));
        // Opcodes that stop short of the last register.
        let short = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0\x7f\xfe".to_vec();
        assert_eq!(count(&short), Err(HllError::Corrupt));
        assert_eq!(add(&mut short.clone(), b"x", 3000).is_ok(), register_and_value(b"x").0 < 16383);
        let mut empty = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0".to_vec();
        assert_eq!(add(&mut empty, b"x", 3000), Err(HllError::Corrupt));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The same elements give the same registers and count whatever
        /// the encoding and wherever the sparse limit is.
        #[test]
        fn encodings_agree(elements in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..12), 0..400),
                           limit in 0usize..4000) {
            let sparse = sparse_of(elements.iter().cloned(), limit);
            let dense = dense_of(elements.iter().cloned());
            prop_assert_eq!(count(&sparse), count(&dense));
            prop_assert_eq!(registers(&sparse), registers(&dense));
            if encoding(&sparse) == Ok(Encoding::Sparse) {
                prop_assert!(sparse.len() <= limit.max(HEADER_LEN + 2));
            }
        }

        /// Any bytes: every operation answers, none panics, and one that
        /// succeeds leaves an HLL whose header is still valid.
        #[test]
        fn any_bytes_never_panic(tail in prop::collection::vec(any::<u8>(), 0..64), dense in any::<bool>(),
                                 element in prop::collection::vec(any::<u8>(), 0..8)) {
            let mut hll = b"HYLL".to_vec();
            hll.push(u8::from(!dense));
            hll.extend_from_slice(&[0; 11]);
            hll.extend_from_slice(&tail);
            if dense {
                hll.resize(DENSE_LEN, 0x5a);
            }
            let _ = count(&hll);
            let _ = decode(&hll);
            let mut max = [0u8; REGISTERS];
            let _ = merge_into(&mut max, &hll);
            let mut added = hll.clone();
            if add(&mut added, &element, 3000).is_ok() {
                prop_assert!(encoding(&added).is_ok());
            }
            let mut converted = hll.clone();
            let _ = to_dense(&mut converted);
        }
    }
}
