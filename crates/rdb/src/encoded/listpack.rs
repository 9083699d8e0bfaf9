//! Listpack: the encoding of small hashes and sorted sets, and of quicklist
//! nodes, in Redis 7.
//!
//! ```text
//! <total-bytes u32 LE> <num-elements u16 LE> <entry>* <0xFF>
//! entry: <encoding+data> <backlen>
//! ```
//!
//! `num-elements` is 65535 when the count does not fit ("unknown"). Each
//! entry's first byte says what it holds:
//!
//! ```text
//! 0xxxxxxx                      7-bit unsigned integer
//! 10LLLLLL <L bytes>            string of up to 63 bytes
//! 110xxxxx xxxxxxxx             13-bit signed integer (big end first)
//! 1110LLLL LLLLLLLL <bytes>     string of up to 4095 bytes
//! 11110000 <len u32 LE> <bytes> string
//! 11110001 <i16 LE>  11110010 <i24 LE>  11110011 <i32 LE>  11110100 <i64 LE>
//! ```
//!
//! `backlen` is the length of `encoding+data`, written so that it can be
//! read backwards from the entry's end: big-endian groups of 7 bits, the
//! last (rightmost) byte's high bit clear, every other byte's set; 1 to 5
//! bytes. Redis writes a string holding a canonical integer as an integer.

use super::Elem;
use crate::error::RdbError;
use crate::num;

const HEADER: usize = 6;
const EOF: u8 = 0xFF;
const COUNT_UNKNOWN: u16 = u16::MAX;
/// Redis refuses to grow a listpack past 1 GiB (`LISTPACK_MAX_SAFETY_SIZE`).
pub(crate) const MAX_SAFE_SIZE: usize = 1 << 30;

/// Decodes and validates a listpack.
pub(crate) fn decode(lp: &[u8], base: u64) -> Result<Vec<Elem<'_>>, RdbError> {
    let bad = |at: usize, what: &str| RdbError::corrupt(base + at as u64, format!("listpack: {what}"));
    if lp.len() < HEADER + 1 {
        return Err(bad(0, "shorter than its header"));
    }
    let total = u32::from_le_bytes([lp[0], lp[1], lp[2], lp[3]]) as usize;
    if total != lp.len() {
        return Err(bad(0, "total bytes in the header disagree with the blob's length"));
    }
    let last = lp.len() - 1;
    if lp[last] != EOF {
        return Err(bad(last, "missing terminator"));
    }
    let numele = u16::from_le_bytes([lp[4], lp[5]]);
    // Each entry takes at least two bytes.
    let mut out = Vec::with_capacity(usize::from(numele).min((lp.len() - HEADER) / 2));
    let mut p = HEADER;
    while lp[p] != EOF {
        let b = lp[p];
        // Bytes available to this entry: it may not reach the terminator.
        let room = last - p;
        let need = |n: usize| if n <= room { Ok(()) } else { Err(bad(p, "entry runs past the end")) };
        let (enc_len, elem) = match b {
            0x00..=0x7F => (1, Elem::Int(i64::from(b))),
            0x80..=0xBF => {
                let len = usize::from(b & 0x3F);
                need(1 + len)?;
                (1 + len, Elem::Str(&lp[p + 1..p + 1 + len]))
            }
            0xC0..=0xDF => {
                need(2)?;
                let u = (u16::from(b & 0x1F) << 8) | u16::from(lp[p + 1]);
                // Sign-extend 13 bits.
                (2, Elem::Int(i64::from(((u << 3) as i16) >> 3)))
            }
            0xE0..=0xEF => {
                need(2)?;
                let len = (usize::from(b & 0x0F) << 8) | usize::from(lp[p + 1]);
                need(2 + len)?;
                (2 + len, Elem::Str(&lp[p + 2..p + 2 + len]))
            }
            0xF0 => {
                need(5)?;
                let len = u32::from_le_bytes([lp[p + 1], lp[p + 2], lp[p + 3], lp[p + 4]]) as usize;
                need(5usize.saturating_add(len))?;
                (5 + len, Elem::Str(&lp[p + 5..p + 5 + len]))
            }
            0xF1..=0xF4 => {
                let width = match b {
                    0xF1 => 2,
                    0xF2 => 3,
                    0xF3 => 4,
                    _ => 8,
                };
                need(1 + width)?;
                (1 + width, Elem::Int(le_signed(&lp[p + 1..p + 1 + width])))
            }
            _ => return Err(bad(p, "unknown entry encoding")),
        };
        let mut backlen = [0u8; 5];
        let bl = encode_backlen(enc_len, &mut backlen);
        need(enc_len + bl)?;
        if lp[p + enc_len..p + enc_len + bl] != backlen[..bl] {
            return Err(bad(p + enc_len, "entry length does not match its back length"));
        }
        out.push(elem);
        p += enc_len + bl;
    }
    if p != last {
        return Err(bad(p, "terminator before the end of the blob"));
    }
    if numele != COUNT_UNKNOWN && usize::from(numele) != out.len() {
        return Err(bad(4, "element count in the header is wrong"));
    }
    Ok(out)
}

/// Sign-extends a little-endian integer of 2, 3, 4 or 8 bytes.
fn le_signed(bytes: &[u8]) -> i64 {
    let mut buf = [0u8; 8];
    buf[..bytes.len()].copy_from_slice(bytes);
    let shift = 64 - 8 * bytes.len() as u32;
    (i64::from_le_bytes(buf) << shift) >> shift
}

/// Writes the back length of an entry of `len` bytes into `buf`, returning
/// how many bytes it took (Redis's `lpEncodeBacklen`, boundaries included).
fn encode_backlen(len: usize, buf: &mut [u8; 5]) -> usize {
    let l = len as u64;
    let n = if l <= 127 {
        1
    } else if l < 16383 {
        2
    } else if l < 2_097_151 {
        3
    } else if l < 268_435_455 {
        4
    } else {
        5
    };
    // Most significant group first; all but the first-written byte carry
    // the continuation bit, so reading backwards stops at the first byte.
    for (i, slot) in buf[..n].iter_mut().enumerate() {
        let group = ((l >> (7 * (n - 1 - i))) & 127) as u8;
        *slot = if i == 0 { group } else { group | 128 };
    }
    n
}

/// Builds a listpack the way `lpAppend` does: strings that are canonical
/// integers are stored as integers, in the smallest encoding.
pub(crate) struct Builder {
    buf: Vec<u8>,
    count: usize,
}

impl Builder {
    pub(crate) fn new() -> Builder {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&[0; HEADER]);
        Builder { buf, count: 0 }
    }

    /// Bytes the listpack has now, terminator included.
    pub(crate) fn bytes(&self) -> usize {
        self.buf.len() + 1
    }

    /// The bytes `s` would add as an entry.
    pub(crate) fn entry_size(s: &[u8]) -> usize {
        let enc_len = match num::parse_i64(s) {
            Some(v) => int_encoding(v).1,
            None => string_header_len(s.len()) + s.len(),
        };
        enc_len + encode_backlen(enc_len, &mut [0; 5])
    }

    pub(crate) fn push(&mut self, s: &[u8]) {
        let start = self.buf.len();
        if let Some(v) = num::parse_i64(s) {
            let (enc, len) = int_encoding(v);
            self.buf.extend_from_slice(&enc[..len]);
        } else {
            let len = s.len();
            match string_header_len(len) {
                1 => self.buf.push(0x80 | len as u8),
                2 => self.buf.extend_from_slice(&[0xE0 | (len >> 8) as u8, (len & 0xff) as u8]),
                _ => {
                    self.buf.push(0xF0);
                    self.buf.extend_from_slice(&(len as u32).to_le_bytes());
                }
            }
            self.buf.extend_from_slice(s);
        }
        let mut backlen = [0u8; 5];
        let n = encode_backlen(self.buf.len() - start, &mut backlen);
        self.buf.extend_from_slice(&backlen[..n]);
        self.count += 1;
    }

    /// The finished blob. Callers keep it under [`MAX_SAFE_SIZE`], so the
    /// byte count fits its 32-bit field.
    pub(crate) fn finish(mut self) -> Vec<u8> {
        self.buf.push(EOF);
        let total = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&total.to_le_bytes());
        // 65535 itself, like anything larger, reads as "unknown".
        let count = u16::try_from(self.count).unwrap_or(COUNT_UNKNOWN);
        self.buf[4..6].copy_from_slice(&count.to_le_bytes());
        self.buf
    }
}

fn string_header_len(len: usize) -> usize {
    if len < 64 {
        1
    } else if len < 4096 {
        2
    } else {
        5
    }
}

/// The smallest integer encoding of `v`: bytes and their count.
fn int_encoding(v: i64) -> ([u8; 9], usize) {
    let mut enc = [0u8; 9];
    let le = v.to_le_bytes();
    let len = if (0..=127).contains(&v) {
        enc[0] = v as u8;
        1
    } else if (-4096..=4095).contains(&v) {
        let u = (v as u16) & 0x1FFF;
        enc[0] = 0xC0 | (u >> 8) as u8;
        enc[1] = (u & 0xff) as u8;
        2
    } else {
        let (tag, width) = if (-32768..=32767).contains(&v) {
            (0xF1, 2)
        } else if (-8_388_608..=8_388_607).contains(&v) {
            (0xF2, 3)
        } else if (-2_147_483_648..=2_147_483_647).contains(&v) {
            (0xF3, 4)
        } else {
            (0xF4, 8)
        };
        enc[0] = tag;
        enc[1..=width].copy_from_slice(&le[..width]);
        1 + width
    };
    (enc, len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn build(items: &[&[u8]]) -> Vec<u8> {
        let mut b = Builder::new();
        for i in items {
            b.push(i);
        }
        b.finish()
    }

    #[test]
    fn layout_matches_redis() {
        // lpNew + lpAppend("a") + lpAppend("1024") as Redis lays them out.
        let lp = build(&[b"a", b"1024"]);
        assert_eq!(lp, [13, 0, 0, 0, 2, 0, 0x81, b'a', 2, 0xC4, 0x00, 2, 0xFF]);
        assert_eq!(decode(&lp, 0).expect("valid"), [Elem::Str(b"a"), Elem::Int(1024)]);
    }

    #[test]
    fn backlen_boundaries() {
        let mut buf = [0u8; 5];
        assert_eq!(encode_backlen(127, &mut buf), 1);
        assert_eq!(encode_backlen(128, &mut buf), 2);
        assert_eq!(buf[..2], [1, 128]);
        assert_eq!(encode_backlen(16382, &mut buf), 2);
        assert_eq!(encode_backlen(16383, &mut buf), 3);
        assert_eq!(encode_backlen(300_000_000, &mut buf), 5);
    }

    #[test]
    fn every_integer_width() {
        let values = [0i64, 127, 128, -1, -4096, 4095, 4096, -4097, 32767, -32768, 32768, 8_388_607, -8_388_608, 8_388_608, i32::MAX as i64, i32::MIN as i64, i64::MAX, i64::MIN];
        let strings: Vec<Vec<u8>> = values.iter().map(|v| v.to_string().into_bytes()).collect();
        let refs: Vec<&[u8]> = strings.iter().map(|s| s.as_slice()).collect();
        let lp = build(&refs);
        let got = decode(&lp, 0).expect("valid");
        assert_eq!(got, values.iter().map(|&v| Elem::Int(v)).collect::<Vec<_>>());
        for s in &strings {
            assert_eq!(Builder::entry_size(s), build(&[s]).len() - 7);
        }
    }

    #[test]
    fn every_string_width() {
        let strings = [vec![b'x'; 0], vec![b'x'; 63], vec![b'x'; 64], vec![b'x'; 4095], vec![b'x'; 4096], vec![b'y'; 20000]];
        let refs: Vec<&[u8]> = strings.iter().map(|s| s.as_slice()).collect();
        let lp = build(&refs);
        let got = decode(&lp, 0).expect("valid");
        assert_eq!(got, refs.iter().map(|s| Elem::Str(s)).collect::<Vec<_>>());
    }

    #[test]
    fn unknown_count_is_accepted() {
        let mut lp = build(&[b"a", b"b"]);
        lp[4..6].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(decode(&lp, 0).expect("valid").len(), 2);
        lp[4..6].copy_from_slice(&3u16.to_le_bytes());
        assert!(decode(&lp, 0).is_err());
    }

    #[test]
    fn rejects_damage() {
        let lp = build(&[b"hello", b"12345678901"]);
        // Every truncation, with the header fixed up to match.
        for n in 0..lp.len() {
            let mut t = lp[..n].to_vec();
            if t.len() >= 4 {
                t[0..4].copy_from_slice(&(n as u32).to_le_bytes());
            }
            if let Some(l) = t.last_mut() {
                *l = EOF;
            }
            assert!(decode(&t, 0).is_err(), "truncated to {n}");
        }
        let mut bad_backlen = lp.clone();
        bad_backlen[6 + 6] = 9;
        assert!(decode(&bad_backlen, 0).is_err());
        let mut bad_enc = lp;
        bad_enc[6] = 0xF5;
        assert!(decode(&bad_enc, 0).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(items in proptest::collection::vec(prop_oneof![
            any::<i64>().prop_map(|v| v.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..100),
            (0usize..5000).prop_map(|n| vec![b'z'; n]),
        ], 0..40)) {
            let refs: Vec<&[u8]> = items.iter().map(|s| s.as_slice()).collect();
            let lp = build(&refs);
            let got: Vec<Vec<u8>> = decode(&lp, 0).expect("valid").into_iter().map(Elem::to_vec).collect();
            prop_assert_eq!(got, items);
        }

        #[test]
        fn never_panics(mut data in proptest::collection::vec(any::<u8>(), 0..64)) {
            if data.len() >= 7 {
                let n = data.len() as u32;
                data[0..4].copy_from_slice(&n.to_le_bytes());
                let last = data.len() - 1;
                data[last] = EOF;
            }
            let _ = decode(&data, 0);
        }
    }
}
