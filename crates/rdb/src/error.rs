//! Errors reading RDB files and DUMP payloads.

use std::io;

use thiserror::Error;

/// The reply Redis gives `RESTORE` when the payload's footer (RDB version
/// or CRC64) is wrong.
pub const DUMP_PAYLOAD_ERROR: &str = "DUMP payload version or checksum are wrong";

/// The reply Redis gives `RESTORE` when the footer is right but the value
/// cannot be decoded.
pub const BAD_DATA_FORMAT: &str = "Bad data format";

/// What went wrong, and at which byte. Offsets count from the start of the
/// file (for [`crate::RdbReader`]) or of the payload (for
/// [`crate::restore_payload`]). Inside an encoded blob (listpack, ziplist,
/// ...) they point at the offending byte of the blob in the file; when the
/// blob was LZF-compressed, at the start of the compressed bytes plus the
/// position in the decompressed blob.
#[derive(Debug, Error)]
pub enum RdbError {
    /// The underlying reader failed.
    #[error("I/O error at byte {offset}: {source}")]
    Io {
        offset: u64,
        #[source]
        source: io::Error,
    },
    /// The input ended in the middle of something.
    #[error("RDB truncated: unexpected end of input at byte {offset}")]
    Truncated { offset: u64 },
    /// The file does not start with `REDIS` and four digits.
    #[error("not an RDB file: wrong signature")]
    BadSignature,
    /// An RDB version this crate (like Redis 7.0) cannot read: 0, or newer
    /// than 10.
    #[error("can't handle RDB format version {version}")]
    UnsupportedVersion { version: u32 },
    /// The CRC64 trailer does not match the file's contents ("RDB CRC
    /// error" is Redis's phrase, which scripts match).
    #[error("RDB CRC error at byte {offset}: wrong RDB checksum, stored {stored:#018x}, computed {computed:#018x}")]
    BadChecksum { offset: u64, stored: u64, computed: u64 },
    /// Bytes that no valid RDB contains: a bad length or string encoding, a
    /// malformed listpack/ziplist/intset/zipmap, invalid LZF data, a
    /// duplicate set member or hash field, a NaN score, an unknown opcode.
    #[error("corrupt RDB at byte {offset}: {what}")]
    Corrupt { offset: u64, what: String },
    /// A value type Redis 7.0 writes that this crate does not model:
    /// module values (6, 7).
    #[error("unsupported RDB value type {rdb_type} ({}) at byte {offset}", type_name(*.rdb_type))]
    Unsupported { rdb_type: u8, offset: u64 },
    /// A DUMP payload whose RDB version is newer than 10, or whose CRC64 is
    /// wrong, or which is too short to have a footer.
    #[error("{}", DUMP_PAYLOAD_ERROR)]
    BadDumpPayload,
}

impl RdbError {
    /// The byte offset the error is about, where there is one.
    pub fn offset(&self) -> Option<u64> {
        match self {
            RdbError::Io { offset, .. }
            | RdbError::Truncated { offset }
            | RdbError::BadChecksum { offset, .. }
            | RdbError::Corrupt { offset, .. }
            | RdbError::Unsupported { offset, .. } => Some(*offset),
            RdbError::BadSignature | RdbError::UnsupportedVersion { .. } | RdbError::BadDumpPayload => None,
        }
    }

    /// The error reply Redis sends for `RESTORE` of a payload that failed
    /// this way: [`DUMP_PAYLOAD_ERROR`] for a bad footer, otherwise
    /// [`BAD_DATA_FORMAT`].
    pub fn restore_reply(&self) -> &'static str {
        match self {
            RdbError::BadDumpPayload => DUMP_PAYLOAD_ERROR,
            _ => BAD_DATA_FORMAT,
        }
    }

    pub(crate) fn corrupt(offset: u64, what: impl Into<String>) -> RdbError {
        RdbError::Corrupt { offset, what: what.into() }
    }

    /// A corruption found inside an encoded value, said first in Redis's
    /// words for it (`rdbReportCorruptRDB`'s, e.g. "Zset ziplist integrity
    /// check failed."), which log scrapers and Redis's tests match; the
    /// detail follows.
    pub(crate) fn redis_says(self, phrase: &str) -> RdbError {
        match self {
            RdbError::Corrupt { offset, what } => RdbError::Corrupt { offset, what: format!("{phrase} ({what})") },
            other => other,
        }
    }
}

fn type_name(rdb_type: u8) -> &'static str {
    match rdb_type {
        6 | 7 => "module value",
        _ => "unknown",
    }
}
