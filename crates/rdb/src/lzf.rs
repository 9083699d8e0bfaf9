//! LZF, the compression Redis applies to long strings in RDB files
//! (`rdbcompression yes`) and to quicklist nodes (`list-compress-depth`).
//!
//! The compressed stream is a sequence of runs, each starting with a
//! control byte `ctrl`:
//!
//! ```text
//! 000LLLLL <L+1 literal bytes>              literal run, 1..=32 bytes
//! LLLOOOOO OOOOOOOO                         back reference, LLL in 1..=6
//! 111OOOOO LLLLLLLL OOOOOOOO                back reference, long form
//! ```
//!
//! A back reference copies `len + 2` bytes (3..=264) starting `offset + 1`
//! bytes (1..=8192) behind the current end of the output; source and
//! destination may overlap, which is how runs repeat. In the long form the
//! length is `7 + LLLLLLLL`. The 13-bit offset's high five bits sit in
//! `ctrl`, the low eight in the last byte.
//!
//! The compressor here is our own greedy one (hash of the next three bytes,
//! one candidate per bucket). Its output is not byte-identical to liblzf's,
//! but any LZF decoder, Redis's included, reads it. Two shortcuts keep it
//! cheap on the data a snapshot meets most, values that do not compress:
//! after every 32 probes in a row that find no match it steps over one
//! more byte per probe (LZ4's acceleration; a match starts the count
//! again), and after a match it indexes only the match's last two
//! positions (liblzf's `VERY_FAST`, Redis's build).

use thiserror::Error;

const MAX_LIT: usize = 32;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);
/// Every `1 << SKIP_LOG` misses in a row lengthen the step by one byte.
const SKIP_LOG: u32 = 5;
/// The most output one input byte can produce: a 3-byte long back
/// reference yields 264 bytes.
pub(crate) const MAX_EXPANSION: usize = MAX_REF.div_ceil(3);

/// Why an LZF stream could not be decompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("invalid LZF data: {0}")]
pub struct LzfError(&'static str);

/// Compresses `input`, giving up (`None`) as soon as the output would
/// exceed `max_out` bytes. Redis stores a string compressed only when that
/// saves at least four bytes, so it asks for at most `len - 4`. Inputs of
/// 4 GiB or more are left uncompressed: the table holds 32-bit positions.
pub fn compress(input: &[u8], max_out: usize) -> Option<Vec<u8>> {
    let n = input.len();
    u32::try_from(n).ok()?;
    // A table about the size of the input: small strings are common and a
    // fixed 16K-entry table would dominate their cost.
    let hlog = (usize::BITS - n.max(256).leading_zeros()).min(14);
    let mut table = vec![0u32; 1 << hlog];
    let hash = |p: usize| -> usize {
        let v = u32::from(input[p]) << 16 | u32::from(input[p + 1]) << 8 | u32::from(input[p + 2]);
        (v.wrapping_mul(0x9E37_79B1) >> (32 - hlog)) as usize
    };

    let mut out = Vec::with_capacity(max_out.min(n + n / MAX_LIT + 1));
    let mut lit_start = 0;
    let mut ip = 0;
    let mut misses = 0;
    while ip + 2 < n {
        let h = hash(ip);
        // Positions are stored plus one so that 0 means "empty".
        let cand = table[h] as usize;
        table[h] = (ip + 1) as u32;
        if cand != 0 {
            let r = cand - 1;
            let off = ip - r - 1;
            if off < MAX_OFF && input[r..r + 3] == input[ip..ip + 3] {
                let max_len = (n - ip).min(MAX_REF);
                let mut len = 3;
                while len < max_len && input[r + len] == input[ip + len] {
                    len += 1;
                }
                push_literals(&mut out, &input[lit_start..ip]);
                let l = len - 2;
                if l < 7 {
                    out.push(((l as u8) << 5) | (off >> 8) as u8);
                } else {
                    out.push((7 << 5) | (off >> 8) as u8);
                    out.push((l - 7) as u8);
                }
                out.push((off & 0xff) as u8);
                if out.len() > max_out {
                    return None;
                }
                // Index the match's last two positions, so later data can
                // refer back into its end.
                let end = ip + len;
                for p in end - 2..end.min(n - 2) {
                    table[hash(p)] = (p + 1) as u32;
                }
                ip = end;
                lit_start = ip;
                misses = 0;
                continue;
            }
        }
        ip += 1 + (misses >> SKIP_LOG);
        misses += 1;
    }
    push_literals(&mut out, &input[lit_start..]);
    (out.len() <= max_out).then_some(out)
}

fn push_literals(out: &mut Vec<u8>, mut lit: &[u8]) {
    while !lit.is_empty() {
        let take = lit.len().min(MAX_LIT);
        out.push((take - 1) as u8);
        out.extend_from_slice(&lit[..take]);
        lit = &lit[take..];
    }
}

/// Decompresses `input`, which must expand to exactly `out_len` bytes.
/// Never reads or writes out of bounds on hostile input, and allocates at
/// most `out_len` bytes. LZF expands at most 88-fold, so a caller taking
/// `out_len` from untrusted data can bound it by the input's length.
pub fn decompress(input: &[u8], out_len: usize) -> Result<Vec<u8>, LzfError> {
    let mut out: Vec<u8> = Vec::with_capacity(out_len);
    let mut ip = 0;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < 32 {
            let run = ctrl + 1;
            let lit = input.get(ip..ip + run).ok_or(LzfError("literal run past the end of the input"))?;
            if out.len() + run > out_len {
                return Err(LzfError("output longer than announced"));
            }
            out.extend_from_slice(lit);
            ip += run;
        } else {
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(ip).ok_or(LzfError("truncated back reference"))?);
                ip += 1;
            }
            let low = usize::from(*input.get(ip).ok_or(LzfError("truncated back reference"))?);
            ip += 1;
            let back = ((ctrl & 0x1f) << 8) + low + 1;
            if back > out.len() {
                return Err(LzfError("back reference before the start of the output"));
            }
            let len = len + 2;
            if out.len() + len > out_len {
                return Err(LzfError("output longer than announced"));
            }
            let start = out.len() - back;
            // Byte by byte: the source may overlap what this copy writes.
            for i in 0..len {
                let b = out[start + i];
                out.push(b);
            }
        }
    }
    if out.len() != out_len {
        return Err(LzfError("output shorter than announced"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn compresses_repetition_and_round_trips() {
        let data = b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let c = compress(data, data.len() - 4).expect("compresses");
        assert!(c.len() < 10, "{c:?}");
        assert_eq!(decompress(&c, data.len()).expect("valid"), data);
    }

    #[test]
    fn gives_up_when_it_does_not_pay() {
        let data: Vec<u8> = (0..64u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        assert_eq!(compress(&data, data.len() - 4), None);
    }

    #[test]
    fn compresses_what_follows_a_stretch_that_does_not() {
        // The probes that cross the random half in long steps must still
        // find the run after it.
        let mut x = 7u64;
        let mut data: Vec<u8> = (0..3000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        data.extend_from_slice(&[b'z'; 3000]);
        let c = compress(&data, data.len() - 4).expect("compresses");
        assert!(c.len() < 3200, "{} bytes", c.len());
        assert_eq!(decompress(&c, data.len()).expect("valid"), data);
    }

    #[test]
    fn long_matches_and_far_offsets() {
        let mut data = Vec::new();
        for i in 0..20_000u32 {
            data.push((i % 251) as u8);
        }
        data.extend_from_slice(&[b'x'; 1000]);
        let c = compress(&data, data.len()).expect("compresses");
        assert_eq!(decompress(&c, data.len()).expect("valid"), data);
    }

    #[test]
    fn rejects_hostile_streams() {
        // Reference before the start.
        assert!(decompress(&[0x20, 0x00], 3).is_err());
        // Literal run past the end.
        assert!(decompress(&[0x05, b'a'], 6).is_err());
        // Too much output.
        assert!(decompress(&[0x00, b'a', 0xe0, 0xff, 0x00], 10).is_err());
        // Too little output.
        assert!(decompress(&[0x00, b'a'], 2).is_err());
        // Truncated long reference.
        assert!(decompress(&[0x00, b'a', 0xe0], 10).is_err());
        assert_eq!(decompress(&[0x00, b'a', 0x20, 0x00], 4).expect("valid"), b"aaaa");
    }

    proptest! {
        #[test]
        fn round_trip(data in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), any::<u8>()], 0..3000)) {
            if let Some(c) = compress(&data, data.len() + data.len() / 32 + 1) {
                prop_assert_eq!(decompress(&c, data.len()).expect("valid"), data);
            } else {
                prop_assert!(false, "the bound above always fits");
            }
        }

        #[test]
        fn round_trip_across_stretches_that_do_not_compress(
            segments in proptest::collection::vec((any::<bool>(), 1usize..3000, any::<u8>()), 1..8),
        ) {
            // Random stretches long enough to lengthen the step, between
            // runs and repeats that must still be found.
            let mut data = Vec::new();
            let mut x = 0x9E37_79B9_7F4A_7C15u64;
            for (random, len, byte) in segments {
                for i in 0..len {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    data.push(if random { x as u8 } else { byte.wrapping_add((i % 7) as u8) });
                }
            }
            if data.len() > 4 {
                if let Some(c) = compress(&data, data.len() - 4) {
                    prop_assert!(c.len() <= data.len() - 4);
                    prop_assert_eq!(decompress(&c, data.len()).expect("valid"), data);
                }
            }
        }

        #[test]
        fn decompress_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200), len in 0usize..2000) {
            let _ = decompress(&data, len);
        }
    }
}
