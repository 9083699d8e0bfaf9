//! Any bytes: parse_frame must not panic nor overflow the stack, must
//! consume within the buffer, and must call every strict prefix incomplete.
#![no_main]

use keel_protocol::parse_frame;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((frame, n))) = parse_frame(data) {
        assert!(n > 0 && n <= data.len());
        assert_eq!(parse_frame(&data[..n]), Ok(Some((frame, n))));
        assert_eq!(parse_frame(&data[..n - 1]), Ok(None));
    }
});
