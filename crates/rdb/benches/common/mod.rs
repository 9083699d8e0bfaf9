//! Inputs the benches share.

/// Deterministic bytes that no back reference can shorten, as memtier's
/// `-R` values.
pub fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
