//! Writing RDB files that Redis 7.0 loads.

use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::encode::{EncodeOptions, Output, Plan};
use crate::format::*;
use crate::RdbValue;

/// The Redis version the files claim to come from (`redis-ver` aux field).
pub const REDIS_VER: &str = "7.0.15";

/// File-level settings of [`RdbWriter`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    pub encode: EncodeOptions,
    /// `rdbchecksum`: write the CRC64 trailer; when off, eight zero bytes,
    /// which readers take as "not checked". On by default.
    pub checksum: bool,
    /// `ctime` aux field, Unix seconds; `None` for now.
    pub ctime: Option<u64>,
    /// `used-mem` aux field: the memory the dataset used, in bytes.
    pub used_mem: u64,
    /// `aof-base` aux field: whether this file is the base of a multi-part
    /// AOF (Redis writes 1 there, 0 for a plain snapshot).
    pub aof_base: bool,
}

impl Default for WriteOptions {
    fn default() -> WriteOptions {
        WriteOptions { encode: EncodeOptions::default(), checksum: true, ctime: None, used_mem: 0, aof_base: false }
    }
}

/// Writes an RDB version 10 file, in the order Redis does: [`new`] writes
/// the header and aux fields, then per database [`select_db`] followed by
/// its keys ([`write_key`]), then [`finish`] the trailer. A key's
/// attributes other than its expiry come before it: [`item_flags`] first,
/// then [`lru_idle`] or [`lfu_freq`].
///
/// Every call writes through to `W` in small pieces: wrap a file in a
/// `BufWriter`.
///
/// Values are written as given. Redis expects non-empty collections
/// without duplicate members or fields and sorted sets without NaN
/// scores; it skips empty keys and refuses the rest.
///
/// [`new`]: RdbWriter::new
/// [`select_db`]: RdbWriter::select_db
/// [`write_key`]: RdbWriter::write_key
/// [`item_flags`]: RdbWriter::item_flags
/// [`lru_idle`]: RdbWriter::lru_idle
/// [`lfu_freq`]: RdbWriter::lfu_freq
/// [`finish`]: RdbWriter::finish
pub struct RdbWriter<W: Write> {
    out: Output<W>,
    options: WriteOptions,
}

impl<W: Write> RdbWriter<W> {
    /// Writes the signature `REDIS0010` and the aux fields Redis 7.0 writes
    /// (`redis-ver`, `redis-bits`, `ctime`, `used-mem`, `aof-base`).
    pub fn new(inner: W, options: WriteOptions) -> io::Result<RdbWriter<W>> {
        let mut w = RdbWriter { out: Output::new(inner), options };
        w.out.bytes(MAGIC)?;
        w.out.bytes(format!("{RDB_VERSION:04}").as_bytes())?;
        let ctime = options.ctime.unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()));
        w.aux(b"redis-ver", REDIS_VER.as_bytes())?;
        w.aux(b"redis-bits", b"64")?;
        w.aux(b"ctime", ctime.to_string().as_bytes())?;
        w.aux(b"used-mem", options.used_mem.to_string().as_bytes())?;
        w.aux(b"aof-base", if options.aof_base { b"1" } else { b"0" })?;
        Ok(w)
    }

    /// An aux field (`AUX`). Redis ignores names it does not know and logs
    /// those starting with `%`.
    pub fn aux(&mut self, name: &[u8], value: &[u8]) -> io::Result<()> {
        self.out.u8(OP_AUX)?;
        self.out.string(name, self.options.encode.compression)?;
        self.out.string(value, self.options.encode.compression)
    }

    /// A function library (`FUNCTION2`): its code, shebang included.
    /// Written before the databases, as Redis does.
    pub fn function(&mut self, code: &[u8]) -> io::Result<()> {
        self.out.u8(OP_FUNCTION2)?;
        self.out.string(code, self.options.encode.compression)
    }

    /// Starts database `db` (`SELECTDB`), with its key count and the number
    /// of those keys that have an expiry (`RESIZEDB`, a sizing hint).
    pub fn select_db(&mut self, db: u64, keys: u64, expires: u64) -> io::Result<()> {
        self.out.u8(OP_SELECTDB)?;
        self.out.len(db)?;
        self.out.u8(OP_RESIZEDB)?;
        self.out.len(keys)?;
        self.out.len(expires)
    }

    /// Records the memcached flags of the key written next, as the
    /// `keel-item-flags` aux field (Keel's extension, which Redis skips);
    /// nothing for 0, no flags. Called first among the key's attributes
    /// (before `lru_idle` or `lfu_freq`), as the format documents it.
    pub fn item_flags(&mut self, flags: u32) -> io::Result<()> {
        if flags == 0 {
            return Ok(());
        }
        self.aux(ITEM_FLAGS_AUX.as_bytes(), flags.to_string().as_bytes())
    }

    /// Records the LRU idle time, in seconds, of the key written next
    /// (`IDLE`; Redis writes it under an LRU `maxmemory-policy`).
    pub fn lru_idle(&mut self, seconds: u64) -> io::Result<()> {
        self.out.u8(OP_IDLE)?;
        self.out.len(seconds)
    }

    /// Records the LFU counter of the key written next (`FREQ`; Redis
    /// writes it under an LFU `maxmemory-policy`).
    pub fn lfu_freq(&mut self, counter: u8) -> io::Result<()> {
        self.out.u8(OP_FREQ)?;
        self.out.u8(counter)
    }

    /// Writes one key of the current database, with its expiry as a Unix
    /// time in milliseconds (`EXPIRETIME_MS`).
    pub fn write_key(&mut self, key: &[u8], value: &RdbValue, expire_at_ms: Option<u64>) -> io::Result<()> {
        let plan = Plan::new(value, &self.options.encode.thresholds);
        self.key_header(key, plan.rdb_type(), expire_at_ms)?;
        plan.write(&mut self.out, value, self.options.encode.compression)
    }

    /// [`write_key`](RdbWriter::write_key) of a string value held
    /// elsewhere, without making it an [`RdbValue`] first.
    pub fn write_string_key(&mut self, key: &[u8], value: &[u8], expire_at_ms: Option<u64>) -> io::Result<()> {
        self.key_header(key, TYPE_STRING, expire_at_ms)?;
        self.out.string(value, self.options.encode.compression)
    }

    /// The expiry, the value's type and the key.
    fn key_header(&mut self, key: &[u8], rdb_type: u8, expire_at_ms: Option<u64>) -> io::Result<()> {
        if let Some(at) = expire_at_ms {
            self.out.u8(OP_EXPIRETIME_MS)?;
            // Stored signed; no real time comes near the top bit.
            self.out.bytes(&at.min(i64::MAX as u64).to_le_bytes())?;
        }
        self.out.u8(rdb_type)?;
        self.out.string(key, self.options.encode.compression)
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.out.written()
    }

    /// Writes `EOF` and the checksum (zeros if checksums are off), flushes,
    /// and returns the inner writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.u8(OP_EOF)?;
        let crc = if self.options.checksum { self.out.crc() } else { 0 };
        self.out.bytes(&crc.to_le_bytes())?;
        self.out.flush()?;
        self.out.into_inner()
    }
}
