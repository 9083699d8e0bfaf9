//! Redis's compact in-memory encodings, which RDB files store verbatim as
//! strings: listpack (Redis 7), ziplist (Redis 3.2 to 6.2), intset and
//! zipmap (Redis 2.4 and older).
//!
//! The decoders take a whole blob, validate every length against the blob
//! before using it, and never preallocate more entries than the blob has
//! bytes for: hostile input gives an error, never a panic or a huge
//! allocation. `base` is the blob's offset in the file, for error offsets.

pub(crate) mod intset;
pub(crate) mod listpack;
pub(crate) mod ziplist;
pub(crate) mod zipmap;

use crate::num;

/// One entry of a listpack or ziplist: both store integers in binary, and
/// strings as bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Elem<'a> {
    Int(i64),
    Str(&'a [u8]),
}

impl Elem<'_> {
    /// The entry as Redis hands it out: integers in decimal.
    pub(crate) fn to_vec(self) -> Vec<u8> {
        match self {
            Elem::Int(v) => num::i64_bytes(v),
            Elem::Str(s) => s.to_vec(),
        }
    }

    /// The entry as a sorted set score; `None` if it is not a number.
    pub(crate) fn to_f64(self) -> Option<f64> {
        match self {
            Elem::Int(v) => Some(v as f64),
            Elem::Str(s) => num::parse_f64(s),
        }
    }
}
