//! CRC-64 as Redis computes it for RDB files and DUMP payloads.
//!
//! The "Jones" polynomial 0xad93d23594c935a9, reflected input and output,
//! no final xor; Redis always starts from 0 (`crc64(0, ...)`): the
//! catalogue's CRC-64/REDIS. A checksum runs over every byte of a dump
//! (a gigabyte of them at start-up), so it is computed by `crc-fast`'s
//! carry-less multiplication folding (PCLMULQDQ), several GB/s a core,
//! where a slice-by-8 table loop does about one.

use crc_fast::{CrcAlgorithm, Digest};

/// Continues the CRC `crc` over `data` (Redis's `crc64(crc, data, len)`);
/// pass 0 to start.
///
/// ```
/// assert_eq!(keel_rdb::crc64(0, b"123456789"), 0xe9c6d914c4b8d9ca);
/// ```
pub fn crc64(crc: u64, data: &[u8]) -> u64 {
    // No final xor: the running state is the CRC itself.
    let mut digest = Digest::new_with_init_state(CrcAlgorithm::Crc64Redis, crc);
    digest.update(data);
    digest.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The polynomial Redis names in `crc64.c`, in its normal (MSB-first) form.
    const POLY: u64 = 0xad93_d235_94c9_35a9;

    /// Bit by bit, straight from the definition.
    fn reference(mut crc: u64, data: &[u8]) -> u64 {
        let reflected = POLY.reverse_bits();
        for &b in data {
            crc ^= u64::from(b);
            for _ in 0..8 {
                crc = if crc & 1 == 1 { (crc >> 1) ^ reflected } else { crc >> 1 };
            }
        }
        crc
    }

    #[test]
    fn redis_test_vectors() {
        // From Redis's crc64.c self-test.
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
        // The C test hashes `sizeof(li)`, so the NUL terminator counts.
        let li = concat!(
            "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed ",
            "do eiusmod tempor incididunt ut labore et dolore magna ",
            "aliqua. Ut enim ad minim veniam, quis nostrud exercitation ",
            "ullamco laboris nisi ut aliquip ex ea commodo consequat. Duis ",
            "aute irure dolor in reprehenderit in voluptate velit esse ",
            "cillum dolore eu fugiat nulla pariatur. Excepteur sint ",
            "occaecat cupidatat non proident, sunt in culpa qui officia ",
            "deserunt mollit anim id est laborum.\0"
        );
        assert_eq!(crc64(0, li.as_bytes()), 0xc779_4709_e696_83b3);
        assert_eq!(crc64(0, b""), 0);
    }

    #[test]
    fn matches_bitwise_reference_and_chains() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 100, 127, 128, 129, 255, 256, 257, 1000] {
            assert_eq!(crc64(0, &data[..len]), reference(0, &data[..len]), "len {len}");
        }
        let long: Vec<u8> = (0..5000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let whole = reference(0, &long);
        for at in [0, 1, 63, 64, 333, 2048, 4999, 5000] {
            let (a, b) = long.split_at(at);
            assert_eq!(crc64(crc64(0, a), b), whole, "split at {at}");
        }
    }
}
