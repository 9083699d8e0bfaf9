//! Ziplist: the compact encoding of Redis 3.2 to 6.2 (quicklist nodes,
//! small hashes and sorted sets). Redis 7 converts them to listpacks on
//! load and never writes them, so only a decoder is needed.
//!
//! ```text
//! <zlbytes u32 LE> <zltail u32 LE> <zllen u16 LE> <entry>* <0xFF>
//! entry: <prevlen> <encoding> <data>
//! prevlen: 1 byte if < 254, else 0xFE <u32 LE>
//! ```
//!
//! `zltail` is the offset of the last entry; `zllen` is 65535 when the
//! count does not fit. `prevlen` is the byte length of the previous entry.
//! Encodings:
//!
//! ```text
//! 00LLLLLL                         string, length in 6 bits
//! 01LLLLLL LLLLLLLL                string, 14-bit length, big-endian
//! 10______ <len u32 BE>            string, 32-bit length
//! 11000000 <i16 LE>   11010000 <i32 LE>   11100000 <i64 LE>
//! 11110000 <i24 LE>   11111110 <i8>
//! 1111xxxx                         immediate 0..=12 (xxxx - 1, xxxx in 1..=13)
//! ```

use super::Elem;
use crate::error::RdbError;

const HEADER: usize = 10;
const END: u8 = 0xFF;
const BIG_PREVLEN: u8 = 0xFE;

/// Decodes and validates a ziplist, checking everything Redis's
/// `ziplistValidateIntegrity` checks in deep mode.
pub(crate) fn decode(zl: &[u8], base: u64) -> Result<Vec<Elem<'_>>, RdbError> {
    let bad = |at: usize, what: &str| RdbError::corrupt(base + at as u64, format!("ziplist: {what}"));
    if zl.len() < HEADER + 1 {
        return Err(bad(0, "shorter than its header"));
    }
    let u32_at = |i: usize| u32::from_le_bytes([zl[i], zl[i + 1], zl[i + 2], zl[i + 3]]) as usize;
    if u32_at(0) != zl.len() {
        return Err(bad(0, "total bytes in the header disagree with the blob's length"));
    }
    let last = zl.len() - 1;
    if zl[last] != END {
        return Err(bad(last, "missing terminator"));
    }
    let tail = u32_at(4);
    if tail > last {
        return Err(bad(4, "tail offset out of range"));
    }
    let zllen = u16::from_le_bytes([zl[8], zl[9]]);
    // Each entry takes at least two bytes.
    let mut out = Vec::with_capacity(usize::from(zllen).min((zl.len() - HEADER) / 2));
    let mut p = HEADER;
    let mut prev_len = 0;
    let mut last_entry = None;
    while zl[p] != END {
        // Everything of this entry must lie before the terminator.
        let room = last - p;
        let need = |n: usize| if n <= room { Ok(()) } else { Err(bad(p, "entry runs past the end")) };
        let (prevlen_size, prevlen) = if zl[p] == BIG_PREVLEN {
            need(5)?;
            (5, u32_at(p + 1))
        } else {
            (1, usize::from(zl[p]))
        };
        if prevlen != prev_len {
            return Err(bad(p, "previous-entry length is wrong"));
        }
        need(prevlen_size + 1)?;
        let q = p + prevlen_size;
        let e = zl[q];
        // (header bytes, data bytes, what the data is)
        let (header, data_len, imm) = match e {
            0x00..=0x3F => (1, usize::from(e & 0x3F), None),
            0x40..=0x7F => {
                need(prevlen_size + 2)?;
                (2, (usize::from(e & 0x3F) << 8) | usize::from(zl[q + 1]), None)
            }
            // Redis masks the low six bits away here, so any 10xxxxxx is a
            // 32-bit string length.
            0x80..=0xBF => {
                need(prevlen_size + 5)?;
                (5, u32::from_be_bytes([zl[q + 1], zl[q + 2], zl[q + 3], zl[q + 4]]) as usize, None)
            }
            0xC0 => (1, 2, None),
            0xD0 => (1, 4, None),
            0xE0 => (1, 8, None),
            0xF0 => (1, 3, None),
            0xFE => (1, 1, None),
            0xF1..=0xFD => (1, 0, Some(i64::from(e & 0x0F) - 1)),
            _ => return Err(bad(q, "unknown entry encoding")),
        };
        need((prevlen_size + header).saturating_add(data_len))?;
        let data = &zl[q + header..q + header + data_len];
        let elem = match imm {
            Some(v) => Elem::Int(v),
            None if e >= 0xC0 => Elem::Int(le_signed(data)),
            None => Elem::Str(data),
        };
        let size = header + data_len;
        out.push(elem);
        prev_len = prevlen_size + size;
        last_entry = Some(p);
        p += prev_len;
    }
    if p != last {
        return Err(bad(p, "terminator before the end of the blob"));
    }
    if last_entry.is_some_and(|l| l != tail) {
        return Err(bad(4, "tail offset does not point at the last entry"));
    }
    if zllen != u16::MAX && usize::from(zllen) != out.len() {
        return Err(bad(8, "entry count in the header is wrong"));
    }
    Ok(out)
}

/// Sign-extends a little-endian integer of 1 to 8 bytes.
fn le_signed(bytes: &[u8]) -> i64 {
    let mut buf = [0u8; 8];
    buf[..bytes.len()].copy_from_slice(bytes);
    let shift = 64 - 8 * bytes.len() as u32;
    (i64::from_le_bytes(buf) << shift) >> shift
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_documentation_example() {
        // The ziplist holding "2" and "5" from ziplist.c's comment.
        let zl = [0x0f, 0, 0, 0, 0x0c, 0, 0, 0, 0x02, 0, 0x00, 0xf3, 0x02, 0xf6, 0xff];
        assert_eq!(decode(&zl, 0).expect("valid"), [Elem::Int(2), Elem::Int(5)]);
    }

    #[test]
    fn strings_and_integers() {
        // "hi", then -2 as i8, then 300 as i16, then -70000 as i24.
        let mut zl = vec![0u8; HEADER];
        let entries: [&[u8]; 4] = [&[0x02, b'h', b'i'], &[0xFE, 0xFE], &[0xC0, 0x2C, 0x01], &[0xF0, 0x90, 0xEE, 0xFE]];
        let mut prev = 0usize;
        let mut tail = 0;
        for e in entries {
            tail = zl.len();
            zl.push(prev as u8);
            zl.extend_from_slice(e);
            prev = 1 + e.len();
        }
        zl.push(END);
        let n = zl.len() as u32;
        zl[0..4].copy_from_slice(&n.to_le_bytes());
        zl[4..8].copy_from_slice(&(tail as u32).to_le_bytes());
        zl[8..10].copy_from_slice(&4u16.to_le_bytes());
        assert_eq!(decode(&zl, 0).expect("valid"), [Elem::Str(b"hi"), Elem::Int(-2), Elem::Int(300), Elem::Int(-70000)]);

        let mut wrong_tail = zl.clone();
        wrong_tail[4] = 10;
        assert!(decode(&wrong_tail, 0).is_err());
        let mut wrong_prevlen = zl.clone();
        wrong_prevlen[14] = 9;
        assert!(decode(&wrong_prevlen, 0).is_err());
        for n in 0..zl.len() {
            let mut t = zl[..n].to_vec();
            if t.len() >= 4 {
                t[0..4].copy_from_slice(&(n as u32).to_le_bytes());
            }
            if let Some(l) = t.last_mut() {
                *l = END;
            }
            assert!(decode(&t, 0).is_err(), "truncated to {n}");
        }
    }
}
