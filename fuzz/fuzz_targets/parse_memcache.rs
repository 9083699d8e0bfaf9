//! Any bytes: memcache::parse must not panic, must consume within the buffer
//! (a refusal may also swallow bytes not yet arrived), must call every strict
//! prefix of a parsed request incomplete (the server re-parses as bytes
//! arrive), and must parse the same request again from exactly its bytes.
#![no_main]

use keel_protocol::memcache::{parse, McLimits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // First byte picks the item size limit so that the too-large paths are reached.
    let Some((&mode, buf)) = data.split_first() else { return };
    let limits = McLimits { max_item_size: if mode & 1 == 0 { 1024 * 1024 } else { 64 } };
    let mut pos = 0;
    while pos < buf.len() {
        match parse(&buf[pos..], &limits) {
            Ok(Some((req, n))) => {
                assert!(n > 0 && n <= buf.len() - pos);
                let again = parse(&buf[pos..pos + n], &limits);
                assert_eq!(again, Ok(Some((req, n))));
                for cut in [0, n / 2, n - 1] {
                    if let Ok(Some(_)) = parse(&buf[pos..pos + cut], &limits) {
                        panic!("prefix {cut} of a {n}-byte request parsed");
                    }
                }
                pos += n;
            }
            Ok(None) => break,
            Err(refused) => {
                assert!(refused.consumed > 0 && refused.consumed <= buf.len() - pos);
                if refused.close {
                    break;
                }
                pos += refused.consumed + refused.swallow;
            }
        }
    }
});
