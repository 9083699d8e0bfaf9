//! Any bytes: parse_request must not panic, must consume within the buffer,
//! must call every strict prefix of a parsed request incomplete (the server
//! re-parses as bytes arrive), and must parse the same request again; a
//! big argument it waits for lies past the bytes given.
#![no_main]

use keel_protocol::request::{pending_big_argument, BIG_ARG};
use keel_protocol::{parse_request, Limits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte picks the limits so that the small-limit paths are reached.
    let Some((&mode, buf)) = data.split_first() else { return };
    let limits = Limits {
        max_inline_len: if mode & 1 == 0 { 64 * 1024 } else { 32 },
        max_bulk_len: if mode & 2 == 0 { 512 * 1024 * 1024 } else { 16 },
        max_multibulk_len: if mode & 4 == 0 { i32::MAX as usize } else { 4 },
        unauthenticated: mode & 8 != 0,
    };
    let mut pos = 0;
    while pos < buf.len() {
        match parse_request(&buf[pos..], &limits) {
            Ok(Some((req, n))) => {
                assert!(n > 0 && n <= buf.len() - pos);
                let again = parse_request(&buf[pos..pos + n], &limits);
                assert_eq!(again, Ok(Some((req, n))));
                for cut in [0, n / 2, n - 1] {
                    if cut < n {
                        // A prefix is incomplete unless its size alone already
                        // breaks a limit, which the full request did not.
                        if let Ok(Some(_)) = parse_request(&buf[pos..pos + cut], &limits) {
                            panic!("prefix {cut} of a {n}-byte request parsed");
                        }
                    }
                }
                pos += n;
            }
            Ok(None) => {
                // A big argument awaited lies past what the buffer holds.
                if let Some(payload) = pending_big_argument(&buf[pos..], &limits) {
                    assert!(payload.len() >= BIG_ARG + 2 && payload.end > buf.len() - pos);
                }
                break;
            }
            Err(_) => {
                assert_eq!(pending_big_argument(&buf[pos..], &limits), None);
                break;
            }
        }
    }
});
