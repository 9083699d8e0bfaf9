//! TLS sessions for Keel, over sockets of two kinds: non-blocking ones
//! that an event loop polls ([`TlsStream`]: the server's workers and
//! cluster bus, keel-bench's driver), and blocking ones that threads of
//! their own share ([`BlockingTls`]: replication's links, MIGRATE's).
//! rustls does the protocol; the configuration (certificates, checks) is
//! the caller's, save for the check of a server's certificate that Redis
//! and memtier make ([`ChainOnly`]), and the reading of private keys
//! that may be encrypted ([`private_key`]), which rustls leaves out.

mod blocking;
mod keys;
mod polled;
mod verify;

pub use blocking::BlockingTls;
pub use keys::{private_key, private_key_from_pem, KeyError};
pub use polled::TlsStream;
pub use verify::ChainOnly;
