//! Zipmap: the encoding of small hashes in Redis 2.4 and older.
//!
//! ```text
//! <zmlen u8> (<len> <field> <len> <free u8> <value> <free bytes>)* <0xFF>
//! len: 1 byte if < 254, else 0xFE (or 0xFF) <u32 LE>
//! ```
//!
//! `zmlen` is the number of pairs, or 254 or more when unknown. `free`
//! counts unused bytes after a value, left behind by in-place updates.

use crate::error::RdbError;

/// A field and its value.
pub(crate) type Pair<'a> = (&'a [u8], &'a [u8]);

const BIGLEN: u8 = 254;
const END: u8 = 0xFF;

/// Decodes and validates a zipmap (Redis's `zipmapValidateIntegrity` in
/// deep mode, and the terminator must be the blob's last byte).
pub(crate) fn decode(zm: &[u8], base: u64) -> Result<Vec<Pair<'_>>, RdbError> {
    let bad = |at: usize, what: &str| RdbError::corrupt(base + at as u64, format!("zipmap: {what}"));
    if zm.len() < 2 {
        return Err(bad(0, "shorter than its header"));
    }
    let last = zm.len() - 1;
    if zm[last] != END {
        return Err(bad(last, "missing terminator"));
    }
    // Reads a length at `p`, which must leave room before the terminator.
    let len_at = |p: usize| -> Result<(usize, usize), RdbError> {
        if zm[p] < BIGLEN {
            return Ok((1, usize::from(zm[p])));
        }
        if p + 5 > last {
            return Err(bad(p, "length runs past the end"));
        }
        Ok((5, u32::from_le_bytes([zm[p + 1], zm[p + 2], zm[p + 3], zm[p + 4]]) as usize))
    };
    // Slices `len` bytes at `p`, which must end before the terminator.
    let take = |p: usize, len: usize| -> Result<&[u8], RdbError> {
        match p.checked_add(len) {
            Some(end) if end <= last => Ok(&zm[p..end]),
            _ => Err(bad(p, "entry runs past the end")),
        }
    };
    // A pair takes at least three bytes.
    let mut out = Vec::with_capacity(usize::from(zm[0]).min(zm.len() / 3));
    let mut p = 1;
    while zm[p] != END {
        let (n, flen) = len_at(p)?;
        let field = take(p + n, flen)?;
        p += n + flen;
        let (n, vlen) = len_at(p)?;
        p += n;
        let free = usize::from(take(p, 1)?[0]);
        p += 1;
        let value = take(p, vlen)?;
        take(p + vlen, free)?;
        p += vlen + free;
        out.push((field, value));
    }
    if p != last {
        return Err(bad(p, "terminator before the end of the blob"));
    }
    if out.is_empty() {
        return Err(bad(0, "empty"));
    }
    if zm[0] < BIGLEN && usize::from(zm[0]) != out.len() {
        return Err(bad(0, "pair count in the header is wrong"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_documentation_example() {
        let zm = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff";
        assert_eq!(decode(zm, 0).expect("valid"), [(&b"foo"[..], &b"bar"[..]), (b"hello", b"world")]);
    }

    #[test]
    fn free_space_and_big_lengths() {
        let mut zm = vec![1u8, BIGLEN];
        zm.extend_from_slice(&300u32.to_le_bytes());
        zm.extend_from_slice(&[b'f'; 300]);
        zm.extend_from_slice(&[1, 2, b'v', b'x', b'x', END]);
        let got = decode(&zm, 0).expect("valid");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0.len(), 300);
        assert_eq!(got[0].1, b"v");
    }

    #[test]
    fn rejects_damage() {
        let zm = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff";
        for n in 0..zm.len() {
            let mut t = zm[..n].to_vec();
            if let Some(l) = t.last_mut() {
                *l = END;
            }
            assert!(decode(&t, 0).is_err(), "truncated to {n}");
        }
        let mut count = zm.to_vec();
        count[0] = 3;
        assert!(decode(&count, 0).is_err());
        assert!(decode(b"\x00\xff", 0).is_err());
    }
}
