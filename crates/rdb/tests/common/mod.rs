//! Support shared by the integration tests: comparing values, building RDB
//! files by hand (including the legacy encodings Redis 7.0 no longer
//! writes), and deterministic test data.
// Each test binary uses a different part of this module.
#![allow(dead_code, clippy::unwrap_used)]

pub mod redis;

use keel_rdb::{crc64, RdbGroup, RdbItem, RdbReader, RdbStream, RdbValue, StreamMeta};

/// A value in a canonical form for comparison: unordered collections
/// sorted, scores compared by their bits (so -0 and 0 differ, inf counts).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Norm {
    String(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(Vec<Vec<u8>>),
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    ZSet(Vec<(Vec<u8>, u64)>),
    /// A stream, compared whole (its nodes are bytes already).
    Stream(String),
}

pub fn norm(v: &RdbValue) -> Norm {
    match v {
        RdbValue::String(s) => Norm::String(s.clone()),
        RdbValue::List(l) => Norm::List(l.clone()),
        RdbValue::Set(s) => {
            let mut s = s.clone();
            s.sort();
            Norm::Set(s)
        }
        RdbValue::Hash(h) => {
            let mut h = h.clone();
            h.sort();
            Norm::Hash(h)
        }
        RdbValue::ZSet(z) => {
            let mut z: Vec<(Vec<u8>, u64)> = z.iter().map(|(m, s)| (m.clone(), s.to_bits())).collect();
            z.sort();
            Norm::ZSet(z)
        }
        RdbValue::Stream(st) => Norm::Stream(format!("{st:?}")),
    }
}

/// A listpack of small elements, as Redis lays it out: integers 0..=127
/// as 7-bit integers, other text as strings of up to 63 bytes.
pub fn small_listpack(elements: &[&[u8]]) -> Vec<u8> {
    let mut body = Vec::new();
    for e in elements {
        let start = body.len();
        let canonical = !e.is_empty() && e.iter().all(u8::is_ascii_digit) && (e.len() == 1 || e[0] != b'0');
        match std::str::from_utf8(e).ok().and_then(|t| t.parse::<u8>().ok()) {
            Some(v) if canonical && v < 128 => body.push(v),
            _ => {
                assert!(e.len() < 64);
                body.push(0x80 | e.len() as u8);
                body.extend_from_slice(e);
            }
        }
        let len = body.len() - start;
        assert!(len <= 127);
        body.push(len as u8);
    }
    let mut lp = Vec::new();
    lp.extend_from_slice(&((body.len() + 7) as u32).to_le_bytes());
    lp.extend_from_slice(&(elements.len() as u16).to_le_bytes());
    lp.extend_from_slice(&body);
    lp.push(0xFF);
    lp
}

/// A stream of two nodes as Redis 7.0 holds it: entries 5-0 (the master's
/// fields), 5-1 (fields of its own), then a node at 9-0 with a deleted
/// entry; a group with a consumer owning one pending entry and an idle
/// consumer.
pub fn sample_stream() -> RdbStream {
    let node1 = small_listpack(&[
        b"2", b"0", b"1", b"f", b"0", // master: 2 live, 0 deleted, fields [f]
        b"2", b"0", b"0", b"v1", b"4", // 5-0, same fields
        b"0", b"0", b"1", b"1", b"g", b"x", b"6", // 5-1, its own field
    ]);
    let node2 = small_listpack(&[
        b"1", b"1", b"1", b"f", b"0", // master: 1 live, 1 deleted
        b"3", b"0", b"0", b"gone", b"4", // 9-0, deleted
        b"2", b"0", b"5", b"v3", b"4", // 9-5
    ]);
    RdbStream {
        nodes: vec![((5, 0), node1), ((9, 0), node2)],
        length: 3,
        last_id: (9, 5),
        meta: Some(StreamMeta { first_id: (5, 0), max_deleted_id: (9, 0), entries_added: 4 }),
        groups: vec![RdbGroup {
            name: b"grp".to_vec(),
            last_id: (5, 1),
            entries_read: Some(2),
            pel: vec![((5, 1), 1_700_000_000_000, 3, 0)],
            consumers: vec![(b"alice".to_vec(), 1_700_000_000_001), (b"bob".to_vec(), 1_700_000_000_002)],
        }],
    }
}

/// A key as the tests track it: database, key, value, expiry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub db: u64,
    pub key: Vec<u8>,
    pub value: Norm,
    pub expire_at_ms: Option<u64>,
}

/// Reads a whole file, returning its keys (sorted) and its other items.
pub fn read_all(data: &[u8]) -> (Vec<Key>, Vec<RdbItem>) {
    let mut keys = Vec::new();
    let mut other = Vec::new();
    let mut reader = RdbReader::new(data).unwrap();
    while let Some(item) = reader.next_item().unwrap() {
        match item {
            RdbItem::Entry(e) => keys.push(Key { db: e.db, key: e.key, value: norm(&e.value), expire_at_ms: e.expire_at_ms }),
            other_item => other.push(other_item),
        }
    }
    keys.sort();
    (keys, other)
}

/// An RDB file written byte by byte, for encodings the writer never
/// produces. Lengths and strings in their plain forms.
pub struct RawRdb {
    pub buf: Vec<u8>,
    version: u32,
}

impl RawRdb {
    pub fn new(version: u32) -> RawRdb {
        RawRdb { buf: format!("REDIS{version:04}").into_bytes(), version }
    }

    pub fn u8(&mut self, b: u8) -> &mut RawRdb {
        self.buf.push(b);
        self
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut RawRdb {
        self.buf.extend_from_slice(b);
        self
    }

    pub fn len(&mut self, n: u64) -> &mut RawRdb {
        if n < 64 {
            self.u8(n as u8)
        } else if n < 16384 {
            self.bytes(&[0x40 | (n >> 8) as u8, n as u8])
        } else {
            self.u8(0x80).bytes(&(n as u32).to_be_bytes())
        }
    }

    pub fn string(&mut self, s: &[u8]) -> &mut RawRdb {
        self.len(s.len() as u64).bytes(s)
    }

    /// `EOF` and, from version 5, the CRC64 trailer.
    pub fn finish(&mut self) -> Vec<u8> {
        self.u8(0xFF);
        if self.version >= 5 {
            let crc = crc64(0, &self.buf);
            self.buf.extend_from_slice(&crc.to_le_bytes());
        }
        self.buf.clone()
    }
}

fn canonical_int(s: &[u8]) -> Option<i64> {
    let t = std::str::from_utf8(s).ok()?;
    let v: i64 = t.parse().ok()?;
    (v.to_string() == t).then_some(v)
}

/// A ziplist as Redis 3.2 to 6.2 wrote it: canonical integers in the
/// smallest integer encoding, other strings with 6, 14 or 32-bit lengths.
pub fn ziplist(entries: &[&[u8]]) -> Vec<u8> {
    let mut zl = vec![0u8; 10];
    let mut prev = 0usize;
    let mut tail = 10usize;
    for e in entries {
        tail = zl.len();
        let start = zl.len();
        if prev < 254 {
            zl.push(prev as u8);
        } else {
            zl.push(0xFE);
            zl.extend_from_slice(&(prev as u32).to_le_bytes());
        }
        match canonical_int(e) {
            Some(v @ 0..=12) => zl.push(0xF1 + v as u8),
            Some(v) if i8::try_from(v).is_ok() => zl.extend_from_slice(&[0xFE, v as u8]),
            Some(v) if i16::try_from(v).is_ok() => {
                zl.push(0xC0);
                zl.extend_from_slice(&(v as i16).to_le_bytes());
            }
            Some(v) if (-(1 << 23)..(1 << 23)).contains(&v) => {
                zl.push(0xF0);
                zl.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
            }
            Some(v) if i32::try_from(v).is_ok() => {
                zl.push(0xD0);
                zl.extend_from_slice(&(v as i32).to_le_bytes());
            }
            Some(v) => {
                zl.push(0xE0);
                zl.extend_from_slice(&v.to_le_bytes());
            }
            None => {
                let n = e.len();
                if n < 64 {
                    zl.push(n as u8);
                } else if n < 16384 {
                    zl.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]);
                } else {
                    zl.push(0x80);
                    zl.extend_from_slice(&(n as u32).to_be_bytes());
                }
                zl.extend_from_slice(e);
            }
        }
        prev = zl.len() - start;
    }
    zl.push(0xFF);
    let total = zl.len() as u32;
    zl[0..4].copy_from_slice(&total.to_le_bytes());
    zl[4..8].copy_from_slice(&(tail as u32).to_le_bytes());
    let count = u16::try_from(entries.len()).unwrap_or(u16::MAX);
    zl[8..10].copy_from_slice(&count.to_le_bytes());
    zl
}

/// A zipmap as Redis 2.4 wrote it (no free space after values).
pub fn zipmap(pairs: &[(&[u8], &[u8])]) -> Vec<u8> {
    fn len(zm: &mut Vec<u8>, n: usize) {
        if n < 254 {
            zm.push(n as u8);
        } else {
            zm.push(254);
            zm.extend_from_slice(&(n as u32).to_le_bytes());
        }
    }
    let mut zm = vec![pairs.len().min(254) as u8];
    for (f, v) in pairs {
        len(&mut zm, f.len());
        zm.extend_from_slice(f);
        len(&mut zm, v.len());
        zm.push(0);
        zm.extend_from_slice(v);
    }
    zm.push(0xFF);
    zm
}

/// A small deterministic generator (xorshift64*), so data sets are the same
/// on every run.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Random bytes, incompressible.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// One value of every type in both its small and its big encoding (at
/// Redis's default thresholds), plus strings in every string encoding.
/// Distinct keys; `tag` keeps data sets apart.
pub fn every_encoding(rng: &mut Rng, tag: &str) -> Vec<(Vec<u8>, RdbValue)> {
    let k = |name: &str| format!("{tag}:{name}").into_bytes();
    let mut v: Vec<(Vec<u8>, RdbValue)> = Vec::new();
    for (name, s) in [
        ("int8", b"-7".to_vec()),
        ("int16", b"300".to_vec()),
        ("int32", b"-70000".to_vec()),
        ("int64", b"12345678901".to_vec()),
        ("zeros", b"007".to_vec()),
        ("empty", Vec::new()),
        ("binary", b"a\0b\r\nc\xff".to_vec()),
        ("compressible", b"abc".repeat(100)),
        ("incompressible", rng.bytes(100)),
        ("big", b"0123456789abcdef".repeat(5000)),
    ] {
        v.push((k(&format!("string:{name}")), RdbValue::String(s)));
    }
    let list_small: Vec<Vec<u8>> = (0..10).map(|i| format!("item{i}").into_bytes()).chain([b"42".to_vec(), b"-1".to_vec()]).collect();
    v.push((k("list:small"), RdbValue::List(list_small)));
    let list_big: Vec<Vec<u8>> = (0..3000)
        .map(|i| match i % 4 {
            0 => i.to_string().into_bytes(),
            1 => format!("element-{i}-{}", "x".repeat(i % 50)).into_bytes(),
            2 => rng.bytes(1 + i % 300),
            _ => (-(i as i64) * 1_000_003).to_string().into_bytes(),
        })
        .collect();
    v.push((k("list:big"), RdbValue::List(list_big)));
    v.push((k("set:intset"), RdbValue::Set((0..100).map(|i| (i * 7 - 300).to_string().into_bytes()).collect())));
    v.push((k("set:intset64"), RdbValue::Set(vec![b"1".to_vec(), b"-9223372036854775808".to_vec(), b"9223372036854775807".to_vec()])));
    v.push((k("set:strings"), RdbValue::Set((0..50).map(|i| format!("member-{i}").into_bytes()).collect())));
    v.push((k("set:many-ints"), RdbValue::Set((0..600).map(|i| (i * 3).to_string().into_bytes()).collect())));
    v.push((k("hash:small"), RdbValue::Hash((0..20).map(|i| (format!("f{i}").into_bytes(), i.to_string().into_bytes())).collect())));
    v.push((k("hash:many"), RdbValue::Hash((0..600).map(|i| (format!("field{i}").into_bytes(), rng.bytes(i % 40))).collect())));
    v.push((k("hash:long-value"), RdbValue::Hash(vec![(b"f".to_vec(), b"v".repeat(65)), (b"g".to_vec(), b"1".to_vec())])));
    // Redis 7.0 stores -0 in a listpack sorted set as the integer 0 (and
    // keeps it in a skiplist), so the small one has no -0.
    let special = [(b"inf".to_vec(), f64::INFINITY), (b"-inf".to_vec(), f64::NEG_INFINITY), (b"zero".to_vec(), 0.0), (b"third".to_vec(), 1.0 / 3.0), (b"tiny".to_vec(), 5e-324), (b"huge".to_vec(), 1.7e308), (b"big-int".to_vec(), 9.007_199_254_740_993e15)];
    v.push((k("zset:small"), RdbValue::ZSet(special.to_vec())));
    let mut zbig: Vec<(Vec<u8>, f64)> = (0..200).map(|i| (format!("m{i}").into_bytes(), (i as f64) * 1.5 - 100.0)).collect();
    zbig.extend(special.iter().cloned());
    zbig.push((b"negzero".to_vec(), -0.0));
    v.push((k("zset:many"), RdbValue::ZSet(zbig)));
    v.push((k("zset:long-member"), RdbValue::ZSet(vec![(b"m".repeat(65), 1.0), (b"n".to_vec(), 2.0)])));
    v
}

/// An RDB version 3 file as Redis 2.4/2.6 wrote it: zipmap hashes, the
/// linked-list `LIST`, text-score `ZSET`, `EXPIRETIME` in seconds, no
/// checksum. With the keys it holds (all in db 0).
pub fn legacy_v3() -> (Vec<u8>, Vec<Key>) {
    let mut f = RawRdb::new(3);
    let mut keys = Vec::new();
    let mut key = |k: &str, v: RdbValue, expire: Option<u64>| keys.push(Key { db: 0, key: k.into(), value: norm(&v), expire_at_ms: expire });
    f.u8(0xFE).len(0);
    let fields: Vec<(Vec<u8>, Vec<u8>)> = vec![(b"f1".to_vec(), b"v1".to_vec()), (b"long".to_vec(), b"x".repeat(300)), (b"n".to_vec(), b"17".to_vec())];
    let pairs: Vec<(&[u8], &[u8])> = fields.iter().map(|(a, b)| (a.as_slice(), b.as_slice())).collect();
    f.u8(9).string(b"zipmap").string(&zipmap(&pairs));
    key("zipmap", RdbValue::Hash(fields), None);
    f.u8(0xFD).bytes(&2_000_000_000i32.to_le_bytes());
    f.u8(1).string(b"oldlist").len(3).string(b"a").string(b"12").string(b"c");
    key("oldlist", RdbValue::List(vec![b"a".to_vec(), b"12".to_vec(), b"c".to_vec()]), Some(2_000_000_000_000));
    f.u8(3).string(b"oldzset").len(4);
    f.string(b"one").u8(3).bytes(b"1.5");
    f.string(b"big").u8(254);
    f.string(b"small").u8(255);
    f.string(b"third").u8(17).bytes(b"0.333333333333333");
    key("oldzset", RdbValue::ZSet(vec![(b"one".to_vec(), 1.5), (b"big".to_vec(), f64::INFINITY), (b"small".to_vec(), f64::NEG_INFINITY), (b"third".to_vec(), 0.333333333333333)]), None);
    f.u8(2).string(b"oldset").len(3).string(b"x").string(b"5").string(b"y");
    key("oldset", RdbValue::Set(vec![b"x".to_vec(), b"5".to_vec(), b"y".to_vec()]), None);
    // A string stored integer-encoded, and one LZF-compressed by hand: a
    // literal "ab" then a back reference copying 8 bytes from 2 back.
    f.u8(0).string(b"int").bytes(&[0xC1, 0x39, 0x30]);
    key("int", RdbValue::String(b"12345".to_vec()), None);
    f.u8(0).string(b"lzf").bytes(&[0xC3, 5, 10, 0x01, b'a', b'b', 0xC0, 0x01]);
    key("lzf", RdbValue::String(b"ababababab".to_vec()), None);
    let file = f.finish();
    keys.sort();
    (file, keys)
}

/// An RDB version 9 file as Redis 5/6 wrote it: ziplists (lists, hashes,
/// sorted sets), quicklists of ziplists, intsets; `EXPIRETIME_MS`; a CRC.
pub fn legacy_v9() -> (Vec<u8>, Vec<Key>) {
    let mut f = RawRdb::new(9);
    let mut keys = Vec::new();
    let mut key = |db: u64, k: &str, v: RdbValue, expire: Option<u64>| keys.push(Key { db, key: k.into(), value: norm(&v), expire_at_ms: expire });
    f.u8(0xFA).string(b"redis-ver").string(b"6.2.14");
    f.u8(0xFE).len(0).u8(0xFB).len(5).len(1);

    let items: Vec<Vec<u8>> = vec![b"a".to_vec(), b"0".to_vec(), b"12".to_vec(), b"13".to_vec(), b"-100".to_vec(), b"30000".to_vec(), b"-5000000".to_vec(), b"2000000000".to_vec(), b"-9000000000".to_vec(), b"x".repeat(70), b"y".repeat(20000), b"007".to_vec()];
    let refs: Vec<&[u8]> = items.iter().map(Vec::as_slice).collect();
    f.u8(10).string(b"ziplist").string(&ziplist(&refs));
    key(0, "ziplist", RdbValue::List(items.clone()), None);

    let pairs: Vec<(Vec<u8>, Vec<u8>)> = vec![(b"f".to_vec(), b"1".to_vec()), (b"g".to_vec(), b"hello".to_vec()), (b"7".to_vec(), b"-7".to_vec())];
    let flat: Vec<&[u8]> = pairs.iter().flat_map(|(a, b)| [a.as_slice(), b.as_slice()]).collect();
    f.u8(13).string(b"hashzl").string(&ziplist(&flat));
    key(0, "hashzl", RdbValue::Hash(pairs), None);

    let zpairs: Vec<(Vec<u8>, f64)> = vec![(b"a".to_vec(), -3.0), (b"b".to_vec(), 0.25), (b"c".to_vec(), 1e20), (b"d".to_vec(), f64::INFINITY)];
    let scores: Vec<Vec<u8>> = vec![b"-3".to_vec(), b"0.25".to_vec(), b"1e+20".to_vec(), b"inf".to_vec()];
    let flat: Vec<&[u8]> = zpairs.iter().zip(&scores).flat_map(|((m, _), s)| [m.as_slice(), s.as_slice()]).collect();
    f.u8(0xFC).bytes(&2_000_000_000_123i64.to_le_bytes());
    f.u8(12).string(b"zsetzl").string(&ziplist(&flat));
    key(0, "zsetzl", RdbValue::ZSet(zpairs), Some(2_000_000_000_123));

    // A quicklist of three ziplist nodes.
    let nodes: [&[&[u8]]; 3] = [&[b"n1", b"1"], &[b"n2", b"2", b"n3"], &[b"-4"]];
    f.u8(14).string(b"quicklist").len(3);
    for n in nodes {
        f.string(&ziplist(n));
    }
    key(0, "quicklist", RdbValue::List(nodes.concat().into_iter().map(<[u8]>::to_vec).collect()), None);

    let mut intset = Vec::new();
    intset.extend_from_slice(&4u32.to_le_bytes());
    intset.extend_from_slice(&3u32.to_le_bytes());
    for v in [-70000i32, 0, 70000] {
        intset.extend_from_slice(&v.to_le_bytes());
    }
    f.u8(11).string(b"intset").string(&intset);
    key(0, "intset", RdbValue::Set(vec![b"-70000".to_vec(), b"0".to_vec(), b"70000".to_vec()]), None);

    f.u8(0xFE).len(7).u8(0xFB).len(1).len(0);
    f.u8(0).string(b"in-db-7").string(b"v");
    key(7, "in-db-7", RdbValue::String(b"v".to_vec()), None);
    let file = f.finish();
    keys.sort();
    (file, keys)
}
