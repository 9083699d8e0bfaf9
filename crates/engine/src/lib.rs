//! Keel's in-memory keyspace, with no knowledge of sockets or protocols.
//!
//! - [`slot`]: CRC16 hash slots, as Redis Cluster computes them.
//! - [`dict`]: a hash table that grows and shrinks incrementally and
//!   supports SCAN's reverse-binary cursor.
//! - [`compact`]: byte strings kept inline when short (keys, members).
//! - [`value`]: what a key holds, and Redis's encodings for it.
//! - [`listpack`]: the compact encoding of small collections.
//! - [`lfu`]: Redis's logarithmic access counter (OBJECT FREQ).
//! - [`hash`], [`list`], [`set`], [`zset`]: the collection types, each in
//!   its compact and its big encoding.
//! - [`stream`]: streams in Redis's node layout (listpacks of entries by
//!   master ID), consumer groups and their pending entries.
//! - [`hyperloglog`]: HyperLogLog strings in Redis's exact format (dense
//!   and sparse registers, the cached count, Ertl's estimator).
//! - [`db`]: one numbered database inside a shard: keys, TTLs, WATCH,
//!   memcached's flags and CAS values of the keys that have some, and the
//!   keys it expired, created, modified (while clients track keys) or has
//!   clients blocked on.
//! - [`keyspace`]: the shards and how commands lock them, and each
//!   shard's client-side caching table (which clients read which key).
//! - [`snapshot`]: forkless point-in-time snapshots of every shard (for
//!   BGSAVE and AOF rewrite) while writes go on.

pub mod compact;
pub mod db;
pub mod dict;
pub mod hash;
pub mod hyperloglog;
pub mod keyspace;
pub mod list;
pub mod lfu;
pub mod listpack;
pub mod set;
pub mod slot;
pub mod snapshot;
pub mod stream;
pub mod value;
pub mod zset;

pub use db::{Db, ExpireEffort, ItemMeta, Key, TableBytes, WatchFlag};
pub use keyspace::{Keyspace, Locked, Shard, Shards, Trackers};
pub use value::{EncodingLimits, Entry, Hash, List, Set, Str, Stream, Value, ZSet};
