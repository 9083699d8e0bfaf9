//! Reading RDB files one item at a time.

use std::io::BufRead;

use crate::decode::read_value;
use crate::error::RdbError;
use crate::format::*;
use crate::input::Input;
use crate::RdbEntry;

/// One thing an RDB file says, in file order.
#[derive(Debug, Clone, PartialEq)]
pub enum RdbItem {
    /// An aux field: metadata such as `redis-ver`, `ctime`, `used-mem`,
    /// `aof-base`, `repl-id`. Unknown names are to be ignored. Never
    /// `keel-item-flags`: those are the next entry's
    /// ([`RdbEntry::item_flags`]).
    Aux { name: Vec<u8>, value: Vec<u8> },
    /// The keys that follow belong to this database. Redis refuses a file
    /// naming a database beyond its `databases` setting.
    SelectDb(u64),
    /// Sizing hint for the current database: its key count, and how many
    /// of those keys have an expiry.
    ResizeDb { db_size: u64, expires_size: u64 },
    /// A key and its value. Keys whose expiry has passed are still
    /// returned: Redis drops them when loading as a master, keeps them as
    /// a replica or when loading an AOF base.
    Entry(RdbEntry),
    /// A function library (`FUNCTION2`, or the 7.0 release-candidate
    /// `FUNCTION` translated the way Redis does): its source, starting with
    /// the `#!<engine> name=<library>` line. Returned, not run: whoever
    /// cannot load functions decides whether to refuse the file or skip it.
    Function { code: Vec<u8> },
    /// A key whose collection was empty, skipped (old Redis versions could
    /// write them; Redis 7 skips and logs them too).
    EmptyKeySkipped { key: Vec<u8> },
    /// Module aux data (`MODULE_AUX`) for the module type named, skipped
    /// by the reader. Redis without that module refuses the file, and so
    /// do Keel's loaders ([`no_matching_module`]): loading on without it
    /// would drop the module's data.
    ModuleAux { module: String },
}

/// What became of the CRC64 trailer, once the reader has passed `EOF`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChecksumStatus {
    /// The stored checksum matches the file.
    Verified,
    /// The stored checksum is 0: written with `rdbchecksum no`.
    Disabled,
    /// Not compared: the reader was asked not to (`rdbchecksum no` when
    /// loading), or the file is older than version 5 and has none.
    Skipped,
}

/// A streaming RDB decoder: yields aux fields, database changes and keys
/// one at a time, so a file is never held in memory whole.
///
/// After `EOF` and the checksum it stops reading: [`into_inner`] hands back
/// the reader positioned just past the file (an AOF with an RDB preamble
/// continues there). Iterating yields `Err` once and then ends.
///
/// Reads versions 1 to 10. Module values give
/// [`RdbError::Unsupported`]; keys holding empty collections (which old
/// Redis versions could write) are skipped as Redis skips them: yielded as
/// [`RdbItem::EmptyKeySkipped`] and counted in [`empty_keys_skipped`].
///
/// [`into_inner`]: RdbReader::into_inner
/// [`empty_keys_skipped`]: RdbReader::empty_keys_skipped
pub struct RdbReader<R> {
    input: Input<R>,
    version: u32,
    verify_checksum: bool,
    db: u64,
    /// Attributes read for the next key.
    expire_at_ms: Option<u64>,
    idle_s: Option<u64>,
    freq: Option<u8>,
    item_flags: Option<u32>,
    empty_keys_skipped: u64,
    checksum: Option<ChecksumStatus>,
    failed: bool,
}

impl<R: BufRead> RdbReader<R> {
    /// Reads and checks the signature and version.
    pub fn new(inner: R) -> Result<RdbReader<R>, RdbError> {
        RdbReader::with_checksum(inner, true)
    }

    /// Like [`new`](RdbReader::new); with `verify` false the CRC64 trailer
    /// is read but not compared (Redis's `rdbchecksum no` when loading).
    pub fn with_checksum(inner: R, verify: bool) -> Result<RdbReader<R>, RdbError> {
        let mut input = Input::new(inner);
        let header: [u8; 9] = input.array()?;
        if &header[..5] != MAGIC || !header[5..].iter().all(u8::is_ascii_digit) {
            return Err(RdbError::BadSignature);
        }
        let version = header[5..].iter().fold(0u32, |v, d| v * 10 + u32::from(d - b'0'));
        if version == 0 || version > RDB_VERSION {
            return Err(RdbError::UnsupportedVersion { version });
        }
        Ok(RdbReader {
            input,
            version,
            verify_checksum: verify,
            db: 0,
            expire_at_ms: None,
            idle_s: None,
            freq: None,
            item_flags: None,
            empty_keys_skipped: 0,
            checksum: None,
            failed: false,
        })
    }

    /// Computes the CRC64 trailer's check on a helper thread from here on
    /// (see `crc_thread.rs`): for a caller whose own threads wait on this
    /// reader, as loading at start does.
    pub fn checksum_in_background(mut self) -> RdbReader<R> {
        if self.verify_checksum && self.version >= 5 {
            self.input.crc_in_background();
        }
        self
    }

    /// The file's RDB version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Bytes read so far.
    pub fn offset(&self) -> u64 {
        self.input.offset()
    }

    /// Keys skipped because their collection was empty.
    pub fn empty_keys_skipped(&self) -> u64 {
        self.empty_keys_skipped
    }

    /// How the checksum went; `None` until the end of the file is read.
    pub fn checksum(&self) -> Option<ChecksumStatus> {
        self.checksum
    }

    /// The underlying reader; once the file has been read to its end, it is
    /// positioned just after the checksum.
    pub fn into_inner(self) -> R {
        self.input.into_inner()
    }

    /// The next item, or `None` after the end of the file (and its checksum)
    /// has been read.
    pub fn next_item(&mut self) -> Result<Option<RdbItem>, RdbError> {
        if self.checksum.is_some() || self.failed {
            return Ok(None);
        }
        let result = self.read_item();
        self.failed = result.is_err();
        result
    }

    fn read_item(&mut self) -> Result<Option<RdbItem>, RdbError> {
        loop {
            let at = self.input.offset();
            let op = self.input.u8()?;
            match op {
                OP_EXPIRETIME => {
                    let secs = i32::from_le_bytes(self.input.array()?);
                    // Before the epoch means long expired.
                    self.expire_at_ms = Some(u64::try_from(i64::from(secs) * 1000).unwrap_or(0));
                }
                OP_EXPIRETIME_MS => {
                    // Files before version 9 stored this in the writer's
                    // byte order; little-endian is what x86 and ARM wrote.
                    let ms = i64::from_le_bytes(self.input.array()?);
                    // Redis's loader uses -1 for "no expiry", so a stored -1
                    // means none; anything else before the epoch is long
                    // expired.
                    self.expire_at_ms = if ms == -1 { None } else { Some(u64::try_from(ms).unwrap_or(0)) };
                }
                OP_IDLE => self.idle_s = Some(self.input.len()?),
                OP_FREQ => self.freq = Some(self.input.u8()?),
                OP_EOF => {
                    self.checksum = Some(self.read_checksum()?);
                    return Ok(None);
                }
                OP_SELECTDB => {
                    self.db = self.input.len()?;
                    return Ok(Some(RdbItem::SelectDb(self.db)));
                }
                OP_RESIZEDB => {
                    let db_size = self.input.len()?;
                    let expires_size = self.input.len()?;
                    return Ok(Some(RdbItem::ResizeDb { db_size, expires_size }));
                }
                OP_AUX => {
                    let name = self.input.string()?;
                    let value = self.input.string()?;
                    if name == ITEM_FLAGS_AUX.as_bytes() {
                        // Kept for the next key, like the opcodes above; a
                        // file that ends first loses it, as Redis would.
                        let not_flags = || RdbError::corrupt(at, "memcached flags that are not a 32-bit number");
                        self.item_flags = Some(parse_flags(&value).ok_or_else(not_flags)?);
                        continue;
                    }
                    return Ok(Some(RdbItem::Aux { name, value }));
                }
                OP_MODULE_AUX => return self.module_aux(at).map(Some),
                OP_FUNCTION2 => return Ok(Some(RdbItem::Function { code: self.input.string()? })),
                OP_FUNCTION => return self.old_function().map(Some),
                t if is_value_type(t) => {
                    let key = self.input.string()?;
                    let value = read_value(&mut self.input, t, at)?;
                    let expire_at_ms = self.expire_at_ms.take();
                    let idle_s = self.idle_s.take();
                    let freq = self.freq.take();
                    let item_flags = self.item_flags.take();
                    match value {
                        Some(value) => {
                            let entry = RdbEntry { db: self.db, key, value, expire_at_ms, idle_s, freq, item_flags };
                            return Ok(Some(RdbItem::Entry(entry)));
                        }
                        None => {
                            self.empty_keys_skipped += 1;
                            return Ok(Some(RdbItem::EmptyKeySkipped { key }));
                        }
                    }
                }
                other => return Err(RdbError::corrupt(at, format!("unknown opcode or value type {other}"))),
            }
        }
    }

    fn read_checksum(&mut self) -> Result<ChecksumStatus, RdbError> {
        if self.version < 5 {
            return Ok(ChecksumStatus::Skipped);
        }
        let computed = self.input.crc();
        let at = self.input.offset();
        let stored = u64::from_le_bytes(self.input.array()?);
        Ok(if !self.verify_checksum {
            ChecksumStatus::Skipped
        } else if stored == 0 {
            ChecksumStatus::Disabled
        } else if stored == computed {
            ChecksumStatus::Verified
        } else {
            return Err(RdbError::BadChecksum { offset: at, stored, computed });
        })
    }

    /// `MODULE_AUX`: the module type id, `UINT` and the `when` value, then
    /// module fields up to their `EOF`, all skipped.
    fn module_aux(&mut self, at: u64) -> Result<RdbItem, RdbError> {
        let id = self.input.len()?;
        let when_opcode = self.input.len()?;
        if when_opcode != MODULE_OPCODE_UINT {
            return Err(RdbError::corrupt(at, "module aux data without its 'when' field"));
        }
        self.input.len()?;
        loop {
            let field_at = self.input.offset();
            match self.input.len()? {
                MODULE_OPCODE_EOF => break,
                MODULE_OPCODE_SINT | MODULE_OPCODE_UINT => {
                    self.input.len()?;
                }
                MODULE_OPCODE_FLOAT => {
                    self.input.array::<4>()?;
                }
                MODULE_OPCODE_DOUBLE => {
                    self.input.array::<8>()?;
                }
                MODULE_OPCODE_STRING => {
                    self.input.string()?;
                }
                other => return Err(RdbError::corrupt(field_at, format!("unknown module field opcode {other}"))),
            }
        }
        Ok(RdbItem::ModuleAux { module: module_type_name(id) })
    }

    /// `FUNCTION` from Redis 7.0 release candidates: name, engine, optional
    /// description, code; rebuilt into the 7.0 form as Redis does.
    fn old_function(&mut self) -> Result<RdbItem, RdbError> {
        let name = self.input.string()?;
        let engine = self.input.string()?;
        if self.input.len()? != 0 {
            self.input.string()?;
        }
        let body = self.input.string()?;
        let mut code = Vec::with_capacity(body.len() + name.len() + engine.len() + 10);
        code.extend_from_slice(b"#!");
        code.extend_from_slice(&engine);
        code.extend_from_slice(b" name=");
        code.extend_from_slice(&name);
        code.push(b'\n');
        code.extend_from_slice(&body);
        Ok(RdbItem::Function { code })
    }
}

impl<R: BufRead> Iterator for RdbReader<R> {
    type Item = Result<RdbItem, RdbError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_item().transpose()
    }
}

/// The value of a `keel-item-flags` aux field: decimal digits only, as the
/// writer writes them, up to `u32::MAX`.
fn parse_flags(value: &[u8]) -> Option<u32> {
    if value.is_empty() || value.len() > 10 {
        return None;
    }
    value.iter().try_fold(0u32, |n, &d| {
        let digit = d.is_ascii_digit().then(|| u32::from(d - b'0'))?;
        n.checked_mul(10)?.checked_add(digit)
    })
}

/// A module type id is nine characters of a 64-symbol alphabet, six bits
/// each, above a 10-bit encoding version.
/// Redis's words for an RDB file holding [`RdbItem::ModuleAux`] data of a
/// module it does not have.
pub fn no_matching_module(module: &str) -> String {
    format!("The RDB file contains AUX module data I can't load: no matching module '{module}'")
}

fn module_type_name(id: u64) -> String {
    const CHARSET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    (0..9).rev().map(|i| char::from(CHARSET[((id >> (10 + 6 * i)) & 63) as usize])).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_are_decimal_u32() {
        assert_eq!(parse_flags(b"0"), Some(0));
        assert_eq!(parse_flags(b"42"), Some(42));
        assert_eq!(parse_flags(b"4294967295"), Some(u32::MAX));
        for bad in [&b""[..], b"4294967296", b"99999999999", b"-1", b"+1", b"1 ", b"x", b"0x10"] {
            assert_eq!(parse_flags(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn module_names() {
        // "mymodtype" with encoding version 1, as moduleTypeEncodeId would make it.
        let charset = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let id = b"mymodtype".iter().fold(0u64, |id, c| id << 6 | charset.iter().position(|x| x == c).expect("in set") as u64);
        assert_eq!(module_type_name(id << 10 | 1), "mymodtype");
    }
}
