//! Reading RDB primitives from a byte stream: lengths, strings, doubles.
//! Counts the offset for error messages and runs the CRC64 over every byte
//! consumed.

use std::io::{self, BufRead};

use crate::crc_thread::Crc;
use crate::error::RdbError;
use crate::lzf;
use crate::num;

/// The top two bits of a length's first byte select its form:
///
/// ```text
/// 00LLLLLL                      6-bit length
/// 01LLLLLL LLLLLLLL             14-bit length, big-endian
/// 10000000 <u32 BE>             32-bit length
/// 10000001 <u64 BE>             64-bit length
/// 11EEEEEE                      a specially encoded string follows (below)
/// ```
pub(crate) const LEN_6BIT: u8 = 0;
pub(crate) const LEN_14BIT: u8 = 1;
pub(crate) const LEN_32BIT: u8 = 0x80;
pub(crate) const LEN_64BIT: u8 = 0x81;
pub(crate) const LEN_ENCVAL: u8 = 3;

/// String encodings after `11`: an integer stored in 1, 2 or 4 bytes
/// little-endian (the string is its decimal form), or LZF-compressed
/// bytes: `11000011 <compressed len> <original len> <compressed bytes>`.
pub(crate) const ENC_INT8: u8 = 0;
pub(crate) const ENC_INT16: u8 = 1;
pub(crate) const ENC_INT32: u8 = 2;
pub(crate) const ENC_LZF: u8 = 3;

/// A string's buffer starts at most this large and grows as its bytes
/// arrive, so a hostile length cannot allocate gigabytes.
const MAX_PREALLOC: u64 = 64 * 1024;

/// A length, or the marker of a specially encoded string.
enum Len {
    Plain(u64),
    Encoded(u8),
}

/// The reading side of an RDB stream or DUMP payload.
pub(crate) struct Input<R> {
    inner: R,
    offset: u64,
    crc: Crc,
}

impl<R: BufRead> Input<R> {
    pub(crate) fn new(inner: R) -> Input<R> {
        Input { inner, offset: 0, crc: Crc::Inline(0) }
    }

    /// Bytes consumed so far.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// CRC64 of everything consumed so far.
    pub(crate) fn crc(&mut self) -> u64 {
        self.crc.value()
    }

    /// Computes the CRC64 on a helper thread from here on.
    pub(crate) fn crc_in_background(&mut self) {
        let so_far = self.crc.value();
        self.crc = Crc::background(so_far);
    }

    pub(crate) fn into_inner(self) -> R {
        self.inner
    }

    /// The underlying reader's next buffered bytes; empty at end of input.
    /// A function of the reader alone, so the caller can update the other
    /// fields while holding the bytes.
    fn fill(inner: &mut R, offset: u64) -> Result<&[u8], RdbError> {
        loop {
            match inner.fill_buf() {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                _ => break,
            }
        }
        // Asked again only to hand out the borrow (a loop that returns it
        // does not pass the borrow checker); buffered data comes back
        // without another read.
        inner.fill_buf().map_err(|source| RdbError::Io { offset, source })
    }

    fn consume(&mut self, n: usize) {
        self.inner.consume(n);
        self.offset += n as u64;
    }

    pub(crate) fn read_exact(&mut self, mut buf: &mut [u8]) -> Result<(), RdbError> {
        while !buf.is_empty() {
            let offset = self.offset;
            let avail = Self::fill(&mut self.inner, offset)?;
            if avail.is_empty() {
                return Err(RdbError::Truncated { offset });
            }
            let n = avail.len().min(buf.len());
            buf[..n].copy_from_slice(&avail[..n]);
            self.crc.update(&avail[..n]);
            self.consume(n);
            buf = &mut buf[n..];
        }
        Ok(())
    }

    /// `len` bytes, allocated as they arrive (see [`MAX_PREALLOC`]).
    pub(crate) fn read_vec(&mut self, len: u64) -> Result<Vec<u8>, RdbError> {
        let mut out = Vec::with_capacity(len.min(MAX_PREALLOC) as usize);
        let mut left = len;
        while left > 0 {
            let offset = self.offset;
            let avail = Self::fill(&mut self.inner, offset)?;
            if avail.is_empty() {
                return Err(RdbError::Truncated { offset });
            }
            let n = avail.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            out.extend_from_slice(&avail[..n]);
            self.crc.update(&avail[..n]);
            self.consume(n);
            left -= n as u64;
        }
        Ok(out)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, RdbError> {
        let mut b = [0u8; 1];
        self.read_exact(&mut b)?;
        Ok(b[0])
    }

    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], RdbError> {
        let mut b = [0u8; N];
        self.read_exact(&mut b)?;
        Ok(b)
    }

    fn len_or_encoding(&mut self) -> Result<Len, RdbError> {
        let at = self.offset;
        let first = self.u8()?;
        Ok(match first >> 6 {
            LEN_ENCVAL => Len::Encoded(first & 0x3F),
            LEN_6BIT => Len::Plain(u64::from(first & 0x3F)),
            LEN_14BIT => Len::Plain(u64::from(first & 0x3F) << 8 | u64::from(self.u8()?)),
            _ => match first {
                LEN_32BIT => Len::Plain(u64::from(u32::from_be_bytes(self.array()?))),
                LEN_64BIT => Len::Plain(u64::from_be_bytes(self.array()?)),
                _ => return Err(RdbError::corrupt(at, format!("unknown length encoding {first:#04x}"))),
            },
        })
    }

    /// A length (`rdbLoadLen`); a string encoding marker here is corrupt.
    pub(crate) fn len(&mut self) -> Result<u64, RdbError> {
        let at = self.offset;
        match self.len_or_encoding()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(_) => Err(RdbError::corrupt(at, "string encoding where a length was expected")),
        }
    }

    /// A string in any of its stored forms (`rdbGenericLoadStringObject`):
    /// integer encodings come back as their decimal text.
    pub(crate) fn string(&mut self) -> Result<Vec<u8>, RdbError> {
        self.blob().map(|(s, _)| s)
    }

    /// A string, with the offset where its stored bytes start: for error
    /// offsets inside encoded blobs. For a compressed string that is where
    /// the compressed bytes start.
    pub(crate) fn blob(&mut self) -> Result<(Vec<u8>, u64), RdbError> {
        let at = self.offset;
        let int = |v: i64| Ok((num::i64_bytes(v), at));
        match self.len_or_encoding()? {
            Len::Plain(n) => {
                let data_at = self.offset;
                Ok((self.read_vec(n)?, data_at))
            }
            Len::Encoded(ENC_INT8) => int(i64::from(i8::from_le_bytes(self.array()?))),
            Len::Encoded(ENC_INT16) => int(i64::from(i16::from_le_bytes(self.array()?))),
            Len::Encoded(ENC_INT32) => int(i64::from(i32::from_le_bytes(self.array()?))),
            Len::Encoded(ENC_LZF) => {
                let clen = self.len()?;
                let len = self.len()?;
                let data_at = self.offset;
                let compressed = self.read_vec(clen)?;
                // The compressed bytes are really here now, which bounds
                // what they can expand to.
                let max = (compressed.len() as u64).saturating_mul(lzf::MAX_EXPANSION as u64);
                if len > max {
                    return Err(RdbError::corrupt(data_at, format!("LZF string claims {len} bytes from {clen}")));
                }
                let s = lzf::decompress(&compressed, len as usize).map_err(|e| RdbError::corrupt(data_at, e.to_string()))?;
                Ok((s, data_at))
            }
            Len::Encoded(e) => Err(RdbError::corrupt(at, format!("unknown string encoding {e}"))),
        }
    }

    /// A score as `ZSET` (type 3) stores it: a length byte then text, with
    /// 253, 254 and 255 meaning NaN, +inf and -inf.
    pub(crate) fn text_double(&mut self) -> Result<f64, RdbError> {
        let at = self.offset;
        match self.u8()? {
            253 => Ok(f64::NAN),
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            n => {
                let text = self.read_vec(u64::from(n))?;
                num::parse_f64(&text).ok_or_else(|| RdbError::corrupt(at, "score is not a number"))
            }
        }
    }

    /// A double stored as 8 bytes little-endian (`ZSET_2`).
    pub(crate) fn binary_double(&mut self) -> Result<f64, RdbError> {
        Ok(f64::from_le_bytes(self.array()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crc64::crc64;

    fn input(bytes: &[u8]) -> Input<&[u8]> {
        Input::new(bytes)
    }

    #[test]
    fn lengths() {
        assert_eq!(input(&[0x3F]).len().expect("ok"), 63);
        assert_eq!(input(&[0x41, 0x00]).len().expect("ok"), 256);
        assert_eq!(input(&[0x80, 0, 1, 0, 0]).len().expect("ok"), 65536);
        assert_eq!(input(&[0x81, 0, 0, 0, 1, 0, 0, 0, 0]).len().expect("ok"), 1 << 32);
        assert!(matches!(input(&[0x82]).len(), Err(RdbError::Corrupt { offset: 0, .. })));
        assert!(matches!(input(&[0xC0]).len(), Err(RdbError::Corrupt { .. })));
        assert!(matches!(input(&[0x80, 0]).len(), Err(RdbError::Truncated { offset: 2 })));
    }

    #[test]
    fn strings() {
        assert_eq!(input(&[0xC0, 0xFF]).string().expect("ok"), b"-1");
        assert_eq!(input(&[0xC1, 0x39, 0x30]).string().expect("ok"), b"12345");
        assert_eq!(input(&[0xC2, 0x00, 0x00, 0x00, 0x80]).string().expect("ok"), b"-2147483648");
        assert_eq!(input(&[0x03, b'a', b'b', b'c']).string().expect("ok"), b"abc");
        // "aaaa...": literal 'a', then a back reference of 7 bytes at distance 1.
        assert_eq!(input(&[0xC3, 4, 8, 0x00, b'a', 0xA0, 0x00]).string().expect("ok"), b"aaaaaaaa");
        assert!(matches!(input(&[0xC4]).string(), Err(RdbError::Corrupt { .. })));
        // A hostile length allocates nothing up front and reports truncation.
        assert!(matches!(input(&[0x81, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, b'x']).string(), Err(RdbError::Truncated { offset: 10 })));
        assert!(matches!(input(&[0xC3, 1, 0x81, 0, 0, 0, 1, 0, 0, 0, 0, 0]).string(), Err(RdbError::Corrupt { .. })));
    }

    #[test]
    fn blob_offsets() {
        let mut data = vec![0u8; 3];
        data.push(0x41);
        data.push(0x00);
        data.extend_from_slice(&[7u8; 256]);
        let mut i = input(&data);
        i.read_exact(&mut [0u8; 3]).expect("ok");
        let (blob, at) = i.blob().expect("ok");
        assert_eq!((blob.len(), at), (256, 5));
    }

    #[test]
    fn doubles() {
        assert_eq!(input(&[254]).text_double().expect("ok"), f64::INFINITY);
        assert_eq!(input(&[3, b'1', b'.', b'5']).text_double().expect("ok"), 1.5);
        assert!(input(&[253]).text_double().expect("ok").is_nan());
        assert_eq!(input(&1.25f64.to_le_bytes()).binary_double().expect("ok"), 1.25);
    }

    #[test]
    fn crc_and_offset_follow_consumption() {
        let data = b"\x03abcrest";
        let mut i = input(data);
        i.string().expect("ok");
        assert_eq!(i.offset(), 4);
        assert_eq!(i.crc(), crc64(0, b"\x03abc"));
    }
}
