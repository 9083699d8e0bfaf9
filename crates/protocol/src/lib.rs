//! Pure parsers and encoders for Keel's wire protocols: bytes in, values
//! out, no I/O and no knowledge of storage, so each part is tested and
//! fuzzed on its own.
//!
//! * [`request`]: what a Redis server reads. [`parse_request`] takes the
//!   bytes buffered from a client and returns one request (its arguments
//!   borrowed from the buffer), "incomplete", or a [`ProtocolError`] whose
//!   text is Redis 7.0's. Multibulk (`*`) and inline forms, with Redis's
//!   limits and quirks. [`request::pending_big_argument`] says where a
//!   big argument still arriving will lie, so the server can size its
//!   buffer for it as Redis does. [`split_args`], the inline form's
//!   splitter (Redis's `sdssplitargs`), also reads every other line Redis
//!   splits so (config files, the AOF manifest, ACL selectors); [`repr`]
//!   (`sdscatrepr`) quotes a word so that it reads back whole.
//! * [`reply`]: what a Redis server writes. [`ReplyWriter`] appends RESP2 or
//!   RESP3 replies to a `Vec<u8>`; [`reply::format_double_g17`] is C's
//!   `%.17g`, which Redis uses for doubles.
//! * [`frame`]: what a client reads. [`parse_frame`] parses any RESP2/RESP3
//!   value into an owned [`Frame`], for tests, tools and the load generator.
//! * [`memcache`]: what a memcached server reads. [`memcache::parse`] takes
//!   the bytes buffered from a client of the text (ASCII) protocol and
//!   returns one request (keys and data borrowed from the buffer),
//!   "incomplete", or a [`memcache::Refused`] carrying memcached 1.6.18's
//!   answer and how many bytes to drop.
//!
//! All parsers share one contract: `Ok(None)` means "need more bytes,
//! nothing consumed"; `Ok(Some((value, consumed)))` means one value taken
//! from the first `consumed` bytes; an error means the stream cannot be
//! resynchronised, except in [`memcache`], where most refusals are answered
//! and reading goes on, as memcached does.

pub mod frame;
pub mod memcache;
pub mod reply;
pub mod request;

pub use frame::{parse_frame, Frame, FrameError};
pub use reply::ReplyWriter;
pub use request::{needs_repr, parse_request, repr, split_args, Limits, ProtocolError, Request};
