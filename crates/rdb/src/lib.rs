//! `keel-rdb`: Redis 7.0's RDB file format (version 10) and its DUMP/RESTORE
//! payloads, read and written over a neutral value model. It knows nothing
//! of any server: a server converts its own values to and from
//! [`RdbValue`].
//!
//! * [`RdbReader`] decodes a file one [`RdbItem`] at a time from any
//!   `BufRead`, checking the CRC64 trailer at the end. It reads every type
//!   and encoding Redis 7.0 can load, back to RDB version 1 (zipmaps,
//!   ziplists, intsets, listpacks, quicklists, LZF strings, streams with
//!   their consumer groups), except module values, which give
//!   [`RdbError::Unsupported`]; keys of empty collections, which old Redis
//!   versions wrote, come as [`RdbItem::EmptyKeySkipped`].
//! * [`RdbWriter`] encodes a file Redis 7.0 loads, choosing encodings as
//!   Redis would from [`Thresholds`] (listpacks and intsets when small,
//!   quicklists of listpack nodes for lists, LZF for long strings).
//! * [`dump_payload`] and [`restore_payload`] are the `DUMP` and `RESTORE`
//!   serialization (every value checked in full, as Redis's
//!   `sanitize-dump-payload yes`; [`restore_payload_with`] may skip the
//!   CRC64 for DEBUG SET-SKIP-CHECKSUM-VALIDATION); [`dump_functions`] and [`restore_functions`] those of
//!   `FUNCTION DUMP` and `FUNCTION RESTORE` (function libraries, which
//!   files carry as [`RdbItem::Function`] and [`RdbWriter::function`]).
//! * [`crc64()`] and [`lzf`] are the checksum and compression underneath.
//!
//! One extension of Keel's own: a key's memcached flags travel as an aux
//! field named [`ITEM_FLAGS_AUX`] (`keel-item-flags`, the flags in
//! decimal) just before the key and its other attributes, written only
//! for non-zero flags ([`RdbWriter::item_flags`]) and read into
//! [`RdbEntry::item_flags`]. Redis skips aux fields it does not know, and
//! one between a key's attributes leaves them to that key: such files still
//! load in Redis 7.0, without the flags.
//!
//! The byte layouts are documented where they are encoded: the file and
//! its opcodes in `format.rs`, lengths and strings in `input.rs`, the
//! compact encodings in `encoded/`, LZF in [`lzf`].
//!
//! Hostile input gives an [`RdbError`] with the byte offset, never a panic;
//! memory allocated ahead of data actually read is bounded. Damage Redis
//! names is described first in Redis's words ("Zset ziplist integrity
//! check failed.", "Duplicate set members detected"), which log scrapers
//! and Redis's tests look for.

mod crc64;
mod crc_thread;
mod decode;
mod dump;
mod encode;
mod encoded;
mod error;
mod format;
mod input;
pub mod lzf;
mod num;
mod reader;
mod stream;
mod writer;

pub use crate::crc64::crc64;
pub use dump::{dump_functions, dump_payload, restore_functions, restore_payload, restore_payload_with, Checksum, FunctionsPayloadError};
pub use encode::{EncodeOptions, Thresholds};
pub use stream::{RdbGroup, RdbStream, StreamMeta};
pub use error::{RdbError, BAD_DATA_FORMAT, DUMP_PAYLOAD_ERROR};
pub use format::{ITEM_FLAGS_AUX, RDB_VERSION};
pub use reader::{no_matching_module, ChecksumStatus, RdbItem, RdbReader};
pub use writer::{RdbWriter, WriteOptions, REDIS_VER};

/// A value, whatever encoding it had or will have in the file.
///
/// Order is kept as the file has it; for sets, hashes and sorted sets it
/// carries no meaning (the writer sorts where an encoding requires it).
/// Values the reader returns have no duplicate members or fields, no NaN
/// scores, and are never empty collections.
#[derive(Debug, Clone, PartialEq)]
pub enum RdbValue {
    String(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    /// Field and value pairs.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// Member and score pairs.
    ZSet(Vec<(Vec<u8>, f64)>),
    Stream(Box<RdbStream>),
}

impl RdbValue {
    /// The type as Redis's `TYPE` command names it.
    pub fn type_name(&self) -> &'static str {
        match self {
            RdbValue::String(_) => "string",
            RdbValue::List(_) => "list",
            RdbValue::Set(_) => "set",
            RdbValue::Hash(_) => "hash",
            RdbValue::ZSet(_) => "zset",
            RdbValue::Stream(_) => "stream",
        }
    }
}

/// A key read from a file, with the attributes stored before it.
#[derive(Debug, Clone, PartialEq)]
pub struct RdbEntry {
    /// The database it belongs to (the last `SELECTDB`; 0 before any).
    pub db: u64,
    pub key: Vec<u8>,
    pub value: RdbValue,
    /// Expiry as a Unix time in milliseconds (times before 1970 read as 0).
    pub expire_at_ms: Option<u64>,
    /// LRU idle time in seconds, present in files saved under an LRU
    /// `maxmemory-policy`.
    pub idle_s: Option<u64>,
    /// LFU counter, present in files saved under an LFU `maxmemory-policy`.
    pub freq: Option<u8>,
    /// Memcached flags, present in files Keel saved for a key that had
    /// non-zero ones (the [`ITEM_FLAGS_AUX`] aux field before it).
    pub item_flags: Option<u32>,
}
