//! CRC-64 as Redis computes it for RDB files and DUMP payloads.
//!
//! The "Jones" polynomial 0xad93d23594c935a9, reflected input and output,
//! no final xor; Redis always starts from 0 (`crc64(0, ...)`). Reflected
//! means the register shifts right and the table is built from the
//! bit-reversed polynomial. Eight tables let the loop fold eight bytes per
//! step ("slice-by-8"): a checksum runs over every byte of a file.

/// The polynomial Redis names in `crc64.c`, in its normal (MSB-first) form.
const POLY: u64 = 0xad93_d235_94c9_35a9;

const TABLES: [[u64; 256]; 8] = build_tables();

const fn build_tables() -> [[u64; 256]; 8] {
    let reflected = POLY.reverse_bits();
    let mut t = [[0u64; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ reflected } else { crc >> 1 };
            bit += 1;
        }
        t[0][i] = crc;
        i += 1;
    }
    // t[k][i]: the effect of byte i followed by k zero bytes.
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xff) as usize];
            i += 1;
        }
        k += 1;
    }
    t
}

/// Continues the CRC `crc` over `data` (Redis's `crc64(crc, data, len)`);
/// pass 0 to start.
///
/// ```
/// assert_eq!(keel_rdb::crc64(0, b"123456789"), 0xe9c6d914c4b8d9ca);
/// ```
pub fn crc64(mut crc: u64, data: &[u8]) -> u64 {
    let mut chunks = data.chunks_exact(8);
    for c in &mut chunks {
        let v = crc ^ u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        crc = TABLES[7][(v & 0xff) as usize]
            ^ TABLES[6][((v >> 8) & 0xff) as usize]
            ^ TABLES[5][((v >> 16) & 0xff) as usize]
            ^ TABLES[4][((v >> 24) & 0xff) as usize]
            ^ TABLES[3][((v >> 32) & 0xff) as usize]
            ^ TABLES[2][((v >> 40) & 0xff) as usize]
            ^ TABLES[1][((v >> 48) & 0xff) as usize]
            ^ TABLES[0][(v >> 56) as usize];
    }
    for &b in chunks.remainder() {
        crc = TABLES[0][((crc ^ u64::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit by bit, straight from the definition, to check the tables.
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
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 100, 1000] {
            assert_eq!(crc64(0, &data[..len]), reference(0, &data[..len]), "len {len}");
        }
        let (a, b) = data.split_at(333);
        assert_eq!(crc64(crc64(0, a), b), crc64(0, &data));
    }
}
