//! Keel's in-memory keyspace.
