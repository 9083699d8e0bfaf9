//! Hash slots: CRC16 (XMODEM) of the key, or of its `{hash tag}`, mod 16384,
//! exactly as Redis Cluster computes them, so that cluster mode later maps
//! slots to nodes instead of rehashing keys.

pub const SLOTS: usize = 16384;

/// CRC16-CCITT (XMODEM), table-driven. Hand-written because it is eight
/// lines and sits on every command's path; a crate would add nothing.
const fn crc16_table() -> [u16; 256] {
    let mut table = [0u16; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = (i as u16) << 8;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
}

static CRC16: [u16; 256] = crc16_table();

pub fn crc16(bytes: &[u8]) -> u16 {
    bytes.iter().fold(0u16, |crc, &b| (crc << 8) ^ CRC16[usize::from((crc >> 8) as u8 ^ b)])
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
