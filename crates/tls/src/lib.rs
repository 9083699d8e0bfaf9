//! TLS sessions for Keel, over sockets of two kinds: non-blocking ones
//! that an event loop polls ([`TlsStream`]: the server's workers and
//! cluster bus, keel-bench's driver), and blocking ones that threads of
//! their own share ([`BlockingTls`]: replication's links, MIGRATE's).
//! rustls does the protocol; the configuration (certificates, checks) is
//! the caller's, save for the check of a server's certificate that Redis
//! and memtier make ([`ChainOnly`]), and two things rustls leaves out:
//! private keys that may be encrypted ([`private_key`]), and certificates
//! of X.509's first version ([`v1`]), which it refuses.

mod blocking;
mod keys;
mod polled;
pub mod v1;
mod verify;

pub use blocking::BlockingTls;
pub use keys::{private_key, private_key_from_pem, KeyError};
pub use polled::TlsStream;
pub use verify::{ChainOnly, ClientChain};
