//! The RDB file layout, and its type and opcode numbers.
//!
//! ```text
//! "REDIS" <version: 4 ASCII digits, "0010">
//! ( <opcode> ... | <value type> <key: string> <value> )*
//! 0xFF <CRC64 of everything before it, u64 LE>     (version 5 and later)
//! ```
//!
//! Opcodes (one byte, 0xF5 and up):
//!
//! ```text
//! 0xFA AUX           <name: string> <value: string>   metadata (redis-ver, ctime, ...)
//! 0xFE SELECTDB      <db: length>                     keys that follow live in db
//! 0xFB RESIZEDB      <keys: length> <expires: length> sizing hint for the current db
//! 0xFC EXPIRETIME_MS <unix ms: i64 LE>                 expiry of the next key
//! 0xFD EXPIRETIME    <unix s: i32 LE>                  same, old files
//! 0xF8 IDLE          <seconds: length>                LRU idle time of the next key
//! 0xF9 FREQ          <counter: u8>                    LFU counter of the next key
//! 0xF7 MODULE_AUX    <module id: length> <2: length> <when: length> <module data>
//! 0xF5 FUNCTION2     <library code: string>           a function library (7.0)
//! 0xF6 FUNCTION      <name> <engine> <has desc: length> [<desc>] <code>  (7.0 RC)
//! 0xFF EOF
//! ```
//!
//! Keel writes one aux field of its own between keys: `keel-item-flags`
//! (decimal) before a key's EXPIRETIME_MS, IDLE or FREQ and the key, for
//! the key's memcached flags. Redis's loader skips it, and keeps the
//! attributes read before it for the next key as it does across any aux.
//!
//! Any other byte is a value type; the key (a string) and the value
//! follow. "length" and "string" are the encodings documented in
//! `input.rs`; a CRC of 0 means the file was written with
//! `rdbchecksum no` and is not checked.
//!
//! Value types and their payloads:
//!
//! ```text
//!  0 STRING            <string>
//!  1 LIST              <n> <string>*n                      (before 3.2)
//!  2 SET               <n> <string>*n
//!  3 ZSET              <n> (<member> <score as text>)*n    (before 4.0)
//!  4 HASH              <n> (<field> <value>)*n
//!  5 ZSET_2            <n> (<member> <score: f64 LE>)*n
//!  6 MODULE, 7 MODULE_2                                    (unsupported)
//!  9 HASH_ZIPMAP       <zipmap as string>                  (before 2.6)
//! 10 LIST_ZIPLIST      <ziplist as string>                 (before 3.2)
//! 11 SET_INTSET        <intset as string>
//! 12 ZSET_ZIPLIST      <ziplist of member, score pairs>    (before 7.0)
//! 13 HASH_ZIPLIST      <ziplist of field, value pairs>     (before 7.0)
//! 14 LIST_QUICKLIST    <nodes> <ziplist as string>*nodes   (3.2 to 6.2)
//! 15 STREAM_LISTPACKS, 19 STREAM_LISTPACKS_2                (unsupported)
//! 16 HASH_LISTPACK     <listpack of field, value pairs>
//! 17 ZSET_LISTPACK     <listpack of member, score pairs>
//! 18 LIST_QUICKLIST_2  <nodes> (<container: length> <string>)*nodes
//!                      container 1 (PLAIN): the string is one element;
//!                      container 2 (PACKED): the string is a listpack
//! ```
//!
//! A DUMP payload is `<value type> <value> <RDB version u16 LE> <CRC64 of
//! all before it, u64 LE>`.

pub(crate) const MAGIC: &[u8; 5] = b"REDIS";
/// The RDB version Redis 7.0 writes, and the newest it reads.
pub const RDB_VERSION: u32 = 10;

pub(crate) const TYPE_STRING: u8 = 0;
pub(crate) const TYPE_LIST: u8 = 1;
pub(crate) const TYPE_SET: u8 = 2;
pub(crate) const TYPE_ZSET: u8 = 3;
pub(crate) const TYPE_HASH: u8 = 4;
pub(crate) const TYPE_ZSET_2: u8 = 5;
pub(crate) const TYPE_MODULE: u8 = 6;
pub(crate) const TYPE_MODULE_2: u8 = 7;
pub(crate) const TYPE_HASH_ZIPMAP: u8 = 9;
pub(crate) const TYPE_LIST_ZIPLIST: u8 = 10;
pub(crate) const TYPE_SET_INTSET: u8 = 11;
pub(crate) const TYPE_ZSET_ZIPLIST: u8 = 12;
pub(crate) const TYPE_HASH_ZIPLIST: u8 = 13;
pub(crate) const TYPE_LIST_QUICKLIST: u8 = 14;
pub(crate) const TYPE_STREAM_LISTPACKS: u8 = 15;
pub(crate) const TYPE_HASH_LISTPACK: u8 = 16;
pub(crate) const TYPE_ZSET_LISTPACK: u8 = 17;
pub(crate) const TYPE_LIST_QUICKLIST_2: u8 = 18;
pub(crate) const TYPE_STREAM_LISTPACKS_2: u8 = 19;

pub(crate) const OP_FUNCTION2: u8 = 0xF5;
pub(crate) const OP_FUNCTION: u8 = 0xF6;
pub(crate) const OP_MODULE_AUX: u8 = 0xF7;
pub(crate) const OP_IDLE: u8 = 0xF8;
pub(crate) const OP_FREQ: u8 = 0xF9;
pub(crate) const OP_AUX: u8 = 0xFA;
pub(crate) const OP_RESIZEDB: u8 = 0xFB;
pub(crate) const OP_EXPIRETIME_MS: u8 = 0xFC;
pub(crate) const OP_EXPIRETIME: u8 = 0xFD;
pub(crate) const OP_SELECTDB: u8 = 0xFE;
pub(crate) const OP_EOF: u8 = 0xFF;

/// The aux field that gives the next key's memcached flags (Keel's
/// extension: see the crate's documentation).
pub const ITEM_FLAGS_AUX: &str = "keel-item-flags";

/// Quicklist node containers in `LIST_QUICKLIST_2`.
pub(crate) const CONTAINER_PLAIN: u64 = 1;
pub(crate) const CONTAINER_PACKED: u64 = 2;

/// Module data (values and `MODULE_AUX`) is a sequence of typed fields,
/// each introduced by one of these as a length, ending with `EOF`.
pub(crate) const MODULE_OPCODE_EOF: u64 = 0;
pub(crate) const MODULE_OPCODE_SINT: u64 = 1;
pub(crate) const MODULE_OPCODE_UINT: u64 = 2;
pub(crate) const MODULE_OPCODE_FLOAT: u64 = 3;
pub(crate) const MODULE_OPCODE_DOUBLE: u64 = 4;
pub(crate) const MODULE_OPCODE_STRING: u64 = 5;

/// Whether `t` is a value type byte of RDB version 10 (`rdbIsObjectType`).
pub(crate) fn is_value_type(t: u8) -> bool {
    t <= TYPE_MODULE_2 || (TYPE_HASH_ZIPMAP..=TYPE_STREAM_LISTPACKS_2).contains(&t)
}
