//! Keel's in-memory keyspace, with no knowledge of sockets or protocols.
//!
//! - [`slot`]: CRC16 hash slots, as Redis Cluster computes them.
//! - [`dict`]: a hash table that grows and shrinks incrementally and
//!   supports SCAN's reverse-binary cursor.
//! - [`value`]: what a key holds, and Redis's encodings for it.
//! - [`db`]: one numbered database inside a shard: keys, TTLs, WATCH.
//! - [`keyspace`]: the shards and how commands lock them.

pub mod db;
pub mod dict;
pub mod keyspace;
pub mod slot;
pub mod value;

pub use db::{Db, Key, WatchFlag};
pub use keyspace::{Keyspace, Locked, Shard};
pub use value::{Entry, Str, Value};
