//! Cluster bus messages (`keel-cluster`) from arbitrary bytes: `frame_len`
//! and `Message::decode` never panic, and whatever decodes re-encodes to
//! bytes that decode to the same message. The bytes are tried as they
//! are and with a valid signature and `totlen` written over their start,
//! so that most inputs reach the per-type checks.
#![no_main]
use keel_cluster::{frame_len, Message};
use libfuzzer_sys::fuzz_target;

fn check(frame: &[u8]) {
    let _ = frame_len(frame);
    if let Ok(message) = Message::decode(frame) {
        let again = Message::decode(&message.encode()).expect("an encoded message decodes");
        assert_eq!(again, message);
    }
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= 8 {
        let mut framed = data.to_vec();
        framed[..4].copy_from_slice(b"RCmb");
        framed[4..8].copy_from_slice(&(data.len() as u32).to_be_bytes());
        check(&framed);
    }
});
