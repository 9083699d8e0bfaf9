//! Any bytes: memcache::parse must not panic, must consume within the buffer
//! (a refusal may also swallow bytes not yet arrived), must call every strict
//! prefix of a parsed request incomplete (the server re-parses as bytes
//! arrive), and must parse the same request again from exactly its bytes.
//! The first byte also picks a meta command's name to start the input with,
//! so that most runs exercise the meta grammar (flags, base64 keys, ms's
//! data block); a meta request must hold what the server relies on: a key
//! memcached would store, at most 17 flag tokens, none empty, no flag twice.
#![no_main]

use keel_protocol::memcache::{base64_decode, base64_encode, parse, McLimits, McRequest, Meta, KEY_MAX_LEN};
use libfuzzer_sys::fuzz_target;

const PREFIXES: [&[u8]; 8] = [b"", b"", b"mg ", b"ms ", b"md ", b"ma ", b"mn ", b"mg a2V5 b "];

fn check_meta(meta: &Meta<'_>) {
    assert!(meta.key.len() <= KEY_MAX_LEN);
    assert!(meta.tokens.len() <= 17);
    let mut seen = [false; 256];
    for t in &meta.tokens {
        assert!(!t.is_empty());
        assert!(!seen[usize::from(t[0])], "flag {} twice", t[0]);
        seen[usize::from(t[0])] = true;
    }
}

fuzz_target!(|data: &[u8]| {
    // First byte: the item size limit (so that the too-large paths are
    // reached) and the prefix.
    let Some((&mode, rest)) = data.split_first() else { return };
    let limits = McLimits { max_item_size: if mode & 1 == 0 { 1024 * 1024 } else { 64 } };
    let mut buf = PREFIXES[usize::from(mode >> 1) % PREFIXES.len()].to_vec();
    buf.extend_from_slice(rest);
    let buf = &buf[..];
    // memcached's base64 of a key decodes back to it.
    let mut text = Vec::new();
    base64_encode(&rest[..rest.len().min(KEY_MAX_LEN)], &mut text);
    if !rest.is_empty() {
        assert_eq!(base64_decode(&text).as_deref(), Some(&rest[..rest.len().min(KEY_MAX_LEN)]));
    }
    let mut pos = 0;
    while pos < buf.len() {
        match parse(&buf[pos..], &limits) {
            Ok(Some((req, n))) => {
                assert!(n > 0 && n <= buf.len() - pos);
                match &req {
                    McRequest::MetaGet(m) | McRequest::MetaDelete(m) | McRequest::MetaArith(m) => check_meta(m),
                    McRequest::MetaSet { meta, data } => {
                        check_meta(meta);
                        assert!(data.len() + 2 <= n);
                    }
                    _ => {}
                }
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
