//! Intset: the encoding of small all-integer sets.
//!
//! ```text
//! <encoding u32 LE> <length u32 LE> <value>*
//! ```
//!
//! `encoding` is the width of every value in bytes (2, 4 or 8); values are
//! little-endian signed integers in strictly ascending order.

use crate::error::RdbError;

const HEADER: usize = 8;

/// Decodes and validates an intset: Redis's `intsetValidateIntegrity` in
/// deep mode (known width, exact size, not empty, strictly ascending).
pub(crate) fn decode(blob: &[u8], base: u64) -> Result<Vec<i64>, RdbError> {
    let bad = |at: usize, what: &str| RdbError::corrupt(base + at as u64, format!("intset: {what}"));
    if blob.len() < HEADER {
        return Err(bad(0, "shorter than its header"));
    }
    let width = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    if !matches!(width, 2 | 4 | 8) {
        return Err(bad(0, "unknown encoding"));
    }
    let count = u32::from_le_bytes([blob[4], blob[5], blob[6], blob[7]]) as usize;
    if count.checked_mul(width).and_then(|n| n.checked_add(HEADER)) != Some(blob.len()) {
        return Err(bad(4, "length disagrees with the blob's size"));
    }
    if count == 0 {
        return Err(bad(4, "empty"));
    }
    let mut out: Vec<i64> = Vec::with_capacity(count);
    for (i, chunk) in blob[HEADER..].chunks_exact(width).enumerate() {
        let v = match width {
            2 => i64::from(i16::from_le_bytes([chunk[0], chunk[1]])),
            4 => i64::from(i32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]])),
            _ => i64::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3], chunk[4], chunk[5], chunk[6], chunk[7]]),
        };
        if out.last().is_some_and(|&prev| v <= prev) {
            return Err(bad(HEADER + i * width, "values not strictly ascending"));
        }
        out.push(v);
    }
    Ok(out)
}

/// Encodes sorted, distinct values in the narrowest width that holds them
/// all, as Redis's `intsetAdd` would have grown it.
pub(crate) fn encode(sorted: &[i64]) -> Vec<u8> {
    let (lo, hi) = (sorted.first().copied().unwrap_or(0), sorted.last().copied().unwrap_or(0));
    let fits = |min: i64, max: i64| lo >= min && hi <= max;
    let width: usize = if fits(i16::MIN.into(), i16::MAX.into()) {
        2
    } else if fits(i32::MIN.into(), i32::MAX.into()) {
        4
    } else {
        8
    };
    let mut out = Vec::with_capacity(HEADER + width * sorted.len());
    out.extend_from_slice(&(width as u32).to_le_bytes());
    out.extend_from_slice(&(sorted.len() as u32).to_le_bytes());
    for v in sorted {
        out.extend_from_slice(&v.to_le_bytes()[..width]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_and_round_trip() {
        for values in [vec![-3i64, 1, 2], vec![-40000, 7], vec![i64::MIN, 0, i64::MAX]] {
            let blob = encode(&values);
            assert_eq!(decode(&blob, 0).expect("valid"), values);
        }
        assert_eq!(encode(&[1, 2])[..4], [2, 0, 0, 0]);
        assert_eq!(encode(&[1, 70000])[..4], [4, 0, 0, 0]);
        assert_eq!(encode(&[1, 1 << 40])[..4], [8, 0, 0, 0]);
    }

    #[test]
    fn rejects_damage() {
        let blob = encode(&[1, 2, 3]);
        assert!(decode(&blob[..blob.len() - 1], 0).is_err());
        let mut unsorted = blob.clone();
        unsorted[8..10].copy_from_slice(&5i16.to_le_bytes());
        assert!(decode(&unsorted, 0).is_err());
        let mut width = blob.clone();
        width[0] = 3;
        assert!(decode(&width, 0).is_err());
        assert!(decode(&encode(&[]), 0).is_err());
        let mut huge = blob;
        huge[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(decode(&huge, 0).is_err());
    }
}
