//! Hash slots: CRC16 (XMODEM) of the key, or of its `{hash tag}`, mod 16384,
//! exactly as Redis Cluster computes them, so that cluster mode later maps
//! slots to nodes instead of rehashing keys.

pub const SLOTS: usize = 16384;

/// CRC16-CCITT (XMODEM), sliced by 16. Hand-written because it sits on
/// every command's path twice (prefetch and locking), and the byte-at-a-
/// time loop is one dependent table lookup per byte: most keys are under
/// 16 bytes, and here such a key is one step of independent lookups.
///
/// `TABLES[0]` is the classic table (a byte through the register);
/// `TABLES[k]` is that followed by `k` zero bytes. A block of `n` bytes
/// (2 to 16) folds the register into its first two bytes, then XORs the
/// `n` bytes' lookups in `TABLES[n-1]` down to `TABLES[0]`: the CRC is
/// linear, and a 16-bit register is spent after two bytes.
const fn crc16_tables() -> [[u16; 256]; 16] {
    let mut tables = [[0u16; 256]; 16];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        tables[0][i] = crc;
        i += 1;
    }
    let mut k = 1;
    while k < 16 {
        let mut i = 0;
        while i < 256 {
            let prev = tables[k - 1][i];
            tables[k][i] = (prev << 8) ^ tables[0][(prev >> 8) as usize];
            i += 1;
        }
        k += 1;
    }
    tables
}

static TABLES: [[u16; 256]; 16] = crc16_tables();

pub fn crc16(bytes: &[u8]) -> u16 {
    let mut blocks = bytes.chunks_exact(16);
    let mut crc = blocks.by_ref().fold(0, fold_block);
    match blocks.remainder() {
        [] => {}
        &[b] => crc = (crc << 8) ^ TABLES[0][usize::from((crc >> 8) as u8 ^ b)],
        rest => crc = fold_block(crc, rest),
    }
    crc
}

/// The register after `block` (2 to 16 bytes).
fn fold_block(crc: u16, block: &[u8]) -> u16 {
    let last = block.len() - 1;
    let [hi, lo] = crc.to_be_bytes();
    let mut folded = TABLES[last][usize::from(hi ^ block[0])] ^ TABLES[last - 1][usize::from(lo ^ block[1])];
    for (i, &b) in block.iter().enumerate().skip(2) {
        folded ^= TABLES[last - i][usize::from(b)];
    }
    folded
}

/// The slot of a key. Only the part between the first `{` and the next `}`
/// is hashed when that part is non-empty, so `{user1}.a` and `{user1}.b`
/// share a slot (and therefore a shard).
pub fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed) & (SLOTS as u16 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc16_matches_the_redis_cluster_spec_test_vector() {
        assert_eq!(crc16(b"123456789"), 0x31C3);
    }

    #[test]
    fn sliced_crc16_matches_a_byte_at_a_time_one_at_every_length() {
        let bitwise = |bytes: &[u8]| {
            bytes.iter().fold(0u16, |mut crc, &b| {
                crc ^= u16::from(b) << 8;
                for _ in 0..8 {
                    crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
                }
                crc
            })
        };
        let data: Vec<u8> = (0..200u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in 0..data.len() {
            for start in [0, 1, 7] {
                let bytes = &data[start..(start + len).min(data.len())];
                assert_eq!(crc16(bytes), bitwise(bytes), "len {len} from {start}");
            }
        }
    }

    #[test]
    fn hash_tags_follow_redis_rules() {
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"{user1000}.followers"));
        assert_eq!(key_slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") & 16383);
        assert_eq!(key_slot(b"foo{{bar}}zap"), crc16(b"{bar") & 16383);
        assert_eq!(key_slot(b"foo{bar}{zap}"), crc16(b"bar") & 16383);
        // Known slots from redis-cli CLUSTER KEYSLOT.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"bar"), 5061);
    }
}
