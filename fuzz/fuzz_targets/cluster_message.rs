//! Cluster bus messages (`keel-cluster`) from arbitrary bytes: `frame_len`
//! and `Message::decode` never panic, and whatever decodes re-encodes to
//! bytes that decode to the same message. The bytes are tried as they
//! are, with a valid signature and `totlen` written over their start, and
//! (so that short inputs reach the per-type checks, which lie past a
//! 2256-byte header) as the body of a header made from their first bytes:
//! type, gossip count, extension count, mflags.
#![no_main]
use keel_cluster::{frame_len, Message, HEADER_LEN};
use libfuzzer_sys::fuzz_target;

fn check(frame: &[u8]) {
    let _ = frame_len(frame);
    if let Ok(message) = Message::decode(frame) {
        let again = Message::decode(&message.encode()).expect("an encoded message decodes");
        assert_eq!(again, message);
    }
}

fn set_totlen(frame: &mut [u8]) {
    let totlen = frame.len() as u32;
    frame[..4].copy_from_slice(b"RCmb");
    frame[4..8].copy_from_slice(&totlen.to_be_bytes());
}

fuzz_target!(|data: &[u8]| {
    check(data);
    if data.len() >= 8 {
        let mut framed = data.to_vec();
        set_totlen(&mut framed);
        check(&framed);
    }
    if let [kind, count, extensions, mflags, body @ ..] = data {
        let mut framed = vec![0; HEADER_LEN];
        framed[9] = 1; // version
        framed[13] = kind % 12;
        framed[15] = count % 4;
        framed[2215] = extensions % 4;
        framed[2253] = *mflags;
        framed.extend_from_slice(body);
        set_totlen(&mut framed);
        check(&framed);
    }
});
