//! Any bytes as an HLL string value: counting, adding, merging, decoding
//! and turning it dense must answer (a count, or NotHll / Corrupt), never
//! panic; whatever succeeds leaves a value whose header is still an HLL's.
#![no_main]

use keel_engine::hyperloglog::{self as hll, REGISTERS};
use libfuzzer_sys::fuzz_target;

fn exercise(value: &[u8], element: &[u8], limit: usize) {
    let _ = hll::count(value);
    let _ = hll::decode(value);
    let mut max = [0u8; REGISTERS];
    let _ = hll::merge_into(&mut max, value);
    let mut added = value.to_vec();
    if hll::add(&mut added, element, limit).is_ok() {
        assert!(hll::encoding(&added).is_ok());
        let _ = hll::count(&added);
    }
    let mut dense = value.to_vec();
    if hll::to_dense(&mut dense).is_ok() {
        assert!(hll::count(&dense).is_ok());
    }
}

fuzz_target!(|data: &[u8]| {
    // First byte: the sparse limit; the next four: an element; the rest:
    // the value, as given and behind a valid sparse header.
    let Some((&limit, rest)) = data.split_first() else { return };
    let (element, value) = rest.split_at(rest.len().min(4));
    let limit = usize::from(limit) * 16;
    exercise(value, element, limit);
    let mut sparse = b"HYLL\x01\0\0\0\0\0\0\0\0\0\0\0".to_vec();
    sparse.extend_from_slice(value);
    exercise(&sparse, element, limit);
});
