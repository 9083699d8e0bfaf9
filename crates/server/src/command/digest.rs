//! `DEBUG DIGEST` and `DEBUG DIGEST-VALUE`: SHA1 digests of the dataset and
//! of single values, computed exactly as Redis 7.0's `debug.c` does
//! (`xorDigest`, `mixDigest`, `xorObjectDigest`, `computeDatasetDigest`), so
//! that the same data gives the same hex in Keel and in Redis. Unordered
//! things (keys, set members, hash fields, sorted set members) are xored
//! together; ordered ones (list elements, a key and its value) are mixed.
//! As in Redis, keys are seen as stored: a key past its expiry that is not
//! deleted yet still counts, and a TTL adds a marker, not its time.

use keel_engine::stream::StreamId;
use keel_engine::set::Member;
use keel_engine::{Entry, Value};
use sha1_smol::Sha1;

pub type Digest = [u8; 20];

fn sha1(bytes: &[u8]) -> Digest {
    Sha1::from(bytes).digest().bytes()
}

/// Redis's `xorDigest`: `digest ^= SHA1(bytes)`.
fn xor(digest: &mut Digest, bytes: &[u8]) {
    for (d, h) in digest.iter_mut().zip(sha1(bytes)) {
        *d ^= h;
    }
}

/// Redis's `mixDigest`: `digest = SHA1(digest ^ SHA1(bytes))`.
fn mix(digest: &mut Digest, bytes: &[u8]) {
    xor(digest, bytes);
    *digest = sha1(digest);
}

/// Redis's `xorObjectDigest`: the value's type and contents, and the TTL
/// marker, folded into `digest`.
fn fold_value(digest: &mut Digest, entry: &Entry) {
    // Redis's OBJ_* type numbers, big-endian (`htonl`).
    let type_id: u32 = match &entry.value {
        Value::Str(_) => 0,
        Value::List(_) => 1,
        Value::Set(_) => 2,
        Value::ZSet(_) => 3,
        Value::Hash(_) => 4,
        Value::Stream(_) => 6,
    };
    mix(digest, &type_id.to_be_bytes());
    let mut scratch = itoa::Buffer::new();
    match &entry.value {
        Value::Str(s) => mix(digest, s.as_bytes(&mut scratch)),
        Value::List(l) => l.iter().for_each(|element| mix(digest, element)),
        Value::Set(s) => s.iter().for_each(|m: Member<'_>| xor(digest, m.as_bytes(&mut scratch))),
        Value::ZSet(z) => {
            let mut score_text = Vec::new();
            for (member, score) in z.iter() {
                let mut element = [0u8; 20];
                mix(&mut element, member);
                score_text.clear();
                keel_protocol::reply::format_double_g17(score, &mut score_text);
                mix(&mut element, &score_text);
                xor(digest, &element);
            }
        }
        Value::Hash(h) => {
            for (field, value) in h.iter() {
                let mut element = [0u8; 20];
                mix(&mut element, field);
                mix(&mut element, value);
                xor(digest, &element);
            }
        }
        // Entries in order, each ID as `ms.seq`; groups are not digested.
        Value::Stream(s) => s.for_range(StreamId::MIN, StreamId::MAX, false, 0, |e| {
            mix(digest, format!("{}.{}", e.id.ms, e.id.seq).as_bytes());
            e.fields.iter().for_each(|f| mix(digest, f));
        }),
    }
    if entry.has_expiry() {
        xor(digest, b"!!expire!!");
    }
}

/// `DEBUG DIGEST-VALUE`'s digest of one value; all zeros for no key.
pub fn value_digest(entry: Option<&Entry>) -> Digest {
    let mut digest = [0u8; 20];
    if let Some(entry) = entry {
        fold_value(&mut digest, entry);
    }
    digest
}

/// Folds one key and its value into the digest of its database's keys
/// (Redis's `computeDatasetDigest` loop body): order does not matter.
pub fn fold_key(keys_digest: &mut Digest, key: &[u8], entry: &Entry) {
    let mut digest = [0u8; 20];
    mix(&mut digest, key);
    fold_value(&mut digest, entry);
    xor(keys_digest, &digest);
}

/// Adds database `db`'s keys (their digest, from [`fold_key`]) to the
/// dataset's digest; databases are added in order, empty ones skipped.
pub fn fold_database(dataset: &mut Digest, db: u32, keys_digest: &Digest) {
    mix(dataset, &db.to_be_bytes());
    for (d, k) in dataset.iter_mut().zip(keys_digest) {
        *d ^= k;
    }
}

/// The digest as DEBUG replies it: 40 lowercase hex digits.
pub fn hex(digest: &Digest) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_engine::{EncodingLimits, Hash, List, Set, Str, ZSet};

    fn string(bytes: &[u8]) -> Entry {
        Entry::new(Value::Str(Str::from_bytes(bytes)), 0)
    }

    fn hex_of(entry: &Entry) -> String {
        hex(&value_digest(Some(entry)))
    }

    /// Digests redis-server 7.0.15 gave for the same values (`DEBUG
    /// DIGEST-VALUE`, `DEBUG DIGEST`), so that a change to the algorithm
    /// shows here even where no redis-server runs the differential test.
    #[test]
    fn digests_are_those_redis_gave() {
        let limits = EncodingLimits::default();
        assert_eq!(hex_of(&string(b"v")), "d79ee9fe5d5ad902d7f6620efc3b07b75ddd742f");
        let mut list = List::new(limits.list_max_listpack_size);
        list.push_back(b"a");
        list.push_back(b"1");
        assert_eq!(hex_of(&Entry::new(Value::List(list), 0)), "a4b574dfd44a241b7583aa0f4da11ef31ee0b995");
        let ints = Set::from_members([Member::Int(1), Member::Int(2), Member::Int(3)], limits.set_max_intset_entries);
        assert!(matches!(ints, Set::Intset(_)));
        assert_eq!(hex_of(&Entry::new(Value::Set(ints), 0)), "2a462a3f51a1db89738ebbeef0c47ce1bbc85246");
        let mixed = Set::from_members([Member::Bytes(b"a"), Member::Bytes(b"1")], limits.set_max_intset_entries);
        assert_eq!(hex_of(&Entry::new(Value::Set(mixed), 0)), "012434e5fd10923eb5614823e20e4674a940a6f5");
        // ZADD z -0 m0 0.1 a 1e-5 b 42 42 inf top, then ZINCRBY z 0.2 a.
        let scores: [(&[u8], f64); 5] =
            [(b"m0", -0.0), (b"b", 1e-5), (b"a", 0.1 + 0.2), (b"42", 42.0), (b"top", f64::INFINITY)];
        let zset = ZSet::from_sorted(&scores, &limits);
        assert_eq!(hex_of(&Entry::new(Value::ZSet(zset), 0)), "4395fcef83774c419f286d9a20a41087daa3587f");
        let hash = Hash::from_pairs([(&b"f"[..], &b"v"[..]), (b"7", b"-3")], &limits);
        assert_eq!(hex_of(&Entry::new(Value::Hash(hash), 0)), "0ed78a7ff2a5dbee72c5054deb5bb1e1f4e46a9e");
        let mut ttl = string(b"v");
        ttl.expire_at_ms = 4_102_444_800_000;
        assert_eq!(hex_of(&ttl), "311b17018163335616e089f6b951c82c477335ac");
        // SET s v in database 0, then SET t v PXAT ... in database 3.
        let mut dataset = [0u8; 20];
        let mut keys = [0u8; 20];
        fold_key(&mut keys, b"s", &string(b"v"));
        fold_database(&mut dataset, 0, &keys);
        assert_eq!(hex(&dataset), "7202ace314cb526b20ab37a70e1c88bece2e2254");
        let mut keys = [0u8; 20];
        fold_key(&mut keys, b"t", &ttl);
        fold_database(&mut dataset, 3, &keys);
        assert_eq!(hex(&dataset), "24f8dfa9bd5bf0f340c4f091560773f32f2f061a");
    }

    #[test]
    fn mix_is_sha1_of_the_xor_and_xor_commutes() {
        let mut d = [0u8; 20];
        mix(&mut d, b"abc");
        assert_eq!(d, sha1(&sha1(b"abc")));
        let (mut ab, mut ba) = ([0u8; 20], [0u8; 20]);
        xor(&mut ab, b"a");
        xor(&mut ab, b"b");
        xor(&mut ba, b"b");
        xor(&mut ba, b"a");
        assert_eq!(ab, ba);
        let (mut ab, mut ba) = ([0u8; 20], [0u8; 20]);
        mix(&mut ab, b"a");
        mix(&mut ab, b"b");
        mix(&mut ba, b"b");
        mix(&mut ba, b"a");
        assert_ne!(ab, ba, "mixing keeps order");
    }

    #[test]
    fn a_value_digest_depends_on_type_contents_and_ttl_only() {
        assert_eq!(hex(&value_digest(None)), "0".repeat(40));
        let a = value_digest(Some(&string(b"v")));
        assert_eq!(a, value_digest(Some(&string(b"v"))));
        assert_ne!(a, value_digest(Some(&string(b"w"))));
        let mut ttl = string(b"v");
        ttl.expire_at_ms = 1;
        let mut later = string(b"v");
        later.expire_at_ms = 2;
        assert_ne!(value_digest(Some(&ttl)), a);
        assert_eq!(value_digest(Some(&ttl)), value_digest(Some(&later)), "the marker, not the time");
    }

    #[test]
    fn key_order_does_not_matter_but_the_database_does() {
        let (mut one, mut two) = ([0u8; 20], [0u8; 20]);
        fold_key(&mut one, b"a", &string(b"1"));
        fold_key(&mut one, b"b", &string(b"2"));
        fold_key(&mut two, b"b", &string(b"2"));
        fold_key(&mut two, b"a", &string(b"1"));
        assert_eq!(one, two);
        let (mut in0, mut in1) = ([0u8; 20], [0u8; 20]);
        fold_database(&mut in0, 0, &one);
        fold_database(&mut in1, 1, &one);
        assert_ne!(in0, in1);
    }
}
