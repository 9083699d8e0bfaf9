//! Writer → reader and DUMP → RESTORE round trips, and the reader on
//! damaged input.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;

use common::*;
use keel_rdb::*;
use proptest::prelude::*;

type Dataset = BTreeMap<(u64, Vec<u8>), (RdbValue, Option<u64>)>;
/// One database's keys: key, value, expiry.
type DbKeys<'a> = Vec<(&'a Vec<u8>, &'a RdbValue, Option<u64>)>;

/// Writes `data` as Redis does: per database, SELECTDB + RESIZEDB, then the
/// keys.
fn write(data: &Dataset, options: WriteOptions) -> Vec<u8> {
    let mut w = RdbWriter::new(Vec::new(), options).unwrap();
    let mut dbs: BTreeMap<u64, DbKeys> = BTreeMap::new();
    for ((db, key), (value, expire)) in data {
        dbs.entry(*db).or_default().push((key, value, *expire));
    }
    for (db, keys) in &dbs {
        let expires = keys.iter().filter(|k| k.2.is_some()).count() as u64;
        w.select_db(*db, keys.len() as u64, expires).unwrap();
        for (key, value, expire) in keys {
            w.write_key(key, value, *expire).unwrap();
        }
    }
    w.finish().unwrap()
}

fn expected(data: &Dataset) -> Vec<Key> {
    let mut keys: Vec<Key> = data
        .iter()
        .map(|((db, key), (value, expire))| Key { db: *db, key: key.clone(), value: norm(value), expire_at_ms: *expire })
        .collect();
    keys.sort();
    keys
}

fn element() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<i64>().prop_map(|v| v.to_string().into_bytes()),
        (-200i64..200).prop_map(|v| v.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..24),
        (1usize..200, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
        (1usize..20).prop_map(|n| b"abcdefgh".repeat(n)),
    ]
}

fn score() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>().prop_filter("no NaN", |s| !s.is_nan()),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(0.0),
        Just(-0.0),
        (-1000i32..1000).prop_map(f64::from),
    ]
}

fn value() -> impl Strategy<Value = RdbValue> {
    prop_oneof![
        element().prop_map(RdbValue::String),
        proptest::collection::vec(element(), 1..40).prop_map(RdbValue::List),
        proptest::collection::btree_set(element(), 1..40).prop_map(|s| RdbValue::Set(s.into_iter().collect())),
        proptest::collection::btree_set((-1000i64..1000).prop_map(|v| v.to_string().into_bytes()), 1..40)
            .prop_map(|s| RdbValue::Set(s.into_iter().collect())),
        proptest::collection::btree_map(element(), element(), 1..30).prop_map(|m| RdbValue::Hash(m.into_iter().collect())),
        proptest::collection::btree_map(element(), score(), 1..30).prop_map(|m| RdbValue::ZSet(m.into_iter().collect())),
    ]
}

fn dataset() -> impl Strategy<Value = Dataset> {
    proptest::collection::btree_map((0u64..4, element()), (value(), proptest::option::of(0u64..4_000_000_000_000)), 0..12)
}

/// Thresholds small enough that both encodings of every type occur.
fn thresholds() -> impl Strategy<Value = Thresholds> {
    (0usize..10, 0usize..30, 0usize..10, 0usize..10, 0usize..30, 0usize..300, prop_oneof![0usize..3, 0usize..300]).prop_map(|(he, hv, si, ze, zv, lb, pt)| Thresholds {
        hash_max_listpack_entries: he,
        hash_max_listpack_value: hv,
        set_max_intset_entries: si,
        zset_max_listpack_entries: ze,
        zset_max_listpack_value: zv,
        list_max_listpack_bytes: lb,
        list_packed_threshold: pt,
    })
}

fn options() -> impl Strategy<Value = WriteOptions> {
    (any::<bool>(), any::<bool>(), prop_oneof![Just(Thresholds::default()), thresholds()]).prop_map(|(compression, checksum, thresholds)| WriteOptions {
        encode: EncodeOptions { compression, thresholds },
        checksum,
        ..WriteOptions::default()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn files_round_trip(data in dataset(), options in options()) {
        let file = write(&data, options);
        let (keys, other) = read_all(&file);
        prop_assert_eq!(keys, expected(&data));
        let dbs: Vec<u64> = other.iter().filter_map(|i| match i { RdbItem::SelectDb(db) => Some(*db), _ => None }).collect();
        let mut want: Vec<u64> = data.keys().map(|(db, _)| *db).collect();
        want.dedup();
        prop_assert_eq!(dbs, want);
    }

    #[test]
    fn a_borrowed_string_writes_as_an_owned_one(
        key in element(),
        value in element(),
        expire in proptest::option::of(any::<u64>()),
        compression in any::<bool>(),
    ) {
        let options = WriteOptions {
            encode: EncodeOptions { compression, ..EncodeOptions::default() },
            ctime: Some(0),
            ..WriteOptions::default()
        };
        let file = |borrowed: bool| {
            let mut w = RdbWriter::new(Vec::new(), options).unwrap();
            w.select_db(0, 1, u64::from(expire.is_some())).unwrap();
            if borrowed {
                w.write_string_key(&key, &value, expire).unwrap();
            } else {
                w.write_key(&key, &RdbValue::String(value.clone()), expire).unwrap();
            }
            w.finish().unwrap()
        };
        prop_assert_eq!(file(true), file(false));
    }

    #[test]
    fn payloads_round_trip(v in value(), compression in any::<bool>(), thresholds in thresholds()) {
        let payload = dump_payload(&v, &EncodeOptions { compression, thresholds });
        prop_assert_eq!(norm(&restore_payload(&payload).unwrap()), norm(&v));
    }

    #[test]
    fn reader_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let mut file = b"REDIS0010".to_vec();
        file.extend_from_slice(&data);
        if let Ok(reader) = RdbReader::new(&file[..]) {
            for item in reader {
                if item.is_err() {
                    break;
                }
            }
        }
        let _ = restore_payload(&data);
    }
}

#[test]
fn streams_round_trip_as_type_19_with_their_groups() {
    let value = RdbValue::Stream(Box::new(sample_stream()));
    let mut data = Dataset::new();
    data.insert((0, b"s".to_vec()), (value.clone(), None));
    for compression in [true, false] {
        let options = WriteOptions { encode: EncodeOptions { compression, ..EncodeOptions::default() }, ..WriteOptions::default() };
        let (keys, _) = read_all(&write(&data, options));
        assert_eq!(keys, expected(&data));
    }
    let payload = dump_payload(&value, &EncodeOptions::default());
    assert_eq!(payload[0], 19);
    assert_eq!(restore_payload(&payload).unwrap(), value);
}

#[test]
fn streams_of_type_15_read_without_the_7_0_metadata() {
    // Type 15 has no first ID, tombstone, counters nor entries-read: a
    // DUMP payload of one, groupless, by hand.
    let mut st = sample_stream();
    let mut out = Vec::new();
    out.push(15u8);
    out.push(st.nodes.len() as u8);
    for ((ms, seq), lp) in &st.nodes {
        out.push(16);
        out.extend_from_slice(&ms.to_be_bytes());
        out.extend_from_slice(&seq.to_be_bytes());
        out.push(0x40 | (lp.len() >> 8) as u8);
        out.push(lp.len() as u8);
        out.extend_from_slice(lp);
    }
    out.extend_from_slice(&[st.length as u8, st.last_id.0 as u8, st.last_id.1 as u8, 0]);
    out.extend_from_slice(&[10, 0]);
    out.extend_from_slice(&crc64(0, &out).to_le_bytes());
    let read = restore_payload(&out).unwrap();
    st.meta = None;
    st.groups.clear();
    assert_eq!(read, RdbValue::Stream(Box::new(st)));
}

#[test]
fn damaged_streams_are_refused() {
    let value = RdbValue::Stream(Box::new(sample_stream()));
    let payload = dump_payload(&value, &EncodeOptions { compression: false, ..EncodeOptions::default() });
    let mut refused = 0;
    for at in 1..payload.len() - 10 {
        for flip in [0x01u8, 0x80, 0xFF] {
            let mut bad = payload.clone();
            bad[at] ^= flip;
            // Fix the footer's CRC so that the stream's own checks speak.
            let body = bad.len() - 8;
            let crc = crc64(0, &bad[..body]);
            bad[body..].copy_from_slice(&crc.to_le_bytes());
            match restore_payload(&bad) {
                Err(_) => refused += 1,
                Ok(RdbValue::Stream(_)) => {}
                Ok(other) => panic!("a stream read as {other:?}"),
            }
        }
    }
    assert!(refused > payload.len(), "{refused} of {} damaged payloads refused", payload.len() * 3);
}

#[test]
fn every_encoding_round_trips_with_the_types_redis_uses() {
    let mut rng = common::Rng::new(7);
    let values = every_encoding(&mut rng, "t");
    let mut data = Dataset::new();
    for (i, (key, value)) in values.iter().enumerate() {
        let expire = (i % 3 == 0).then_some(1_900_000_000_000 + i as u64);
        data.insert(((i % 3) as u64, key.clone()), (value.clone(), expire));
    }
    for options in [WriteOptions::default(), WriteOptions { encode: EncodeOptions { compression: false, ..EncodeOptions::default() }, checksum: false, ..WriteOptions::default() }] {
        let (keys, _) = read_all(&write(&data, options));
        assert_eq!(keys, expected(&data));
    }

    // The type byte Redis would use for each, at its default thresholds.
    let types: BTreeMap<&str, u8> = values
        .iter()
        .map(|(k, v)| (std::str::from_utf8(&k[2..]).unwrap(), dump_payload(v, &EncodeOptions::default())[0]))
        .collect();
    for (key, want) in [
        ("string:int8", 0),
        ("list:small", 18),
        ("list:big", 18),
        ("set:intset", 11),
        ("set:intset64", 11),
        ("set:strings", 2),
        ("set:many-ints", 2),
        ("hash:small", 16),
        ("hash:many", 4),
        ("hash:long-value", 4),
        ("zset:small", 17),
        ("zset:many", 5),
        ("zset:long-member", 5),
    ] {
        assert_eq!(types[key], want, "{key}");
    }
}

#[test]
fn empty_list_elements_never_go_plain() {
    let list = RdbValue::List(vec![Vec::new(), b"a".to_vec(), Vec::new()]);
    let thresholds = Thresholds { list_packed_threshold: 0, list_max_listpack_bytes: 0, ..Thresholds::default() };
    let payload = dump_payload(&list, &EncodeOptions { compression: false, thresholds });
    assert_eq!(restore_payload(&payload).unwrap(), list);
}

#[test]
fn header_aux_fields_and_db_hints() {
    let options = WriteOptions { ctime: Some(1_700_000_000), used_mem: 123_456, aof_base: true, ..WriteOptions::default() };
    let mut w = RdbWriter::new(Vec::new(), options).unwrap();
    w.aux(b"%note", b"hello").unwrap();
    w.select_db(2, 1, 1).unwrap();
    w.write_key(b"k", &RdbValue::String(b"v".to_vec()), Some(5)).unwrap();
    let written = w.bytes_written();
    let file = w.finish().unwrap();
    assert_eq!(file.len() as u64, written + 9);
    assert!(file.starts_with(b"REDIS0010"));

    let mut reader = RdbReader::new(&file[..]).unwrap();
    assert_eq!(reader.version(), 10);
    let items: Vec<RdbItem> = reader.by_ref().collect::<Result<_, _>>().unwrap();
    let aux = |name: &str, value: &str| RdbItem::Aux { name: name.into(), value: value.into() };
    assert_eq!(
        items,
        [
            aux("redis-ver", REDIS_VER),
            aux("redis-bits", "64"),
            aux("ctime", "1700000000"),
            aux("used-mem", "123456"),
            aux("aof-base", "1"),
            aux("%note", "hello"),
            RdbItem::SelectDb(2),
            RdbItem::ResizeDb { db_size: 1, expires_size: 1 },
            RdbItem::Entry(RdbEntry { db: 2, key: b"k".to_vec(), value: RdbValue::String(b"v".to_vec()), expire_at_ms: Some(5), idle_s: None, freq: None, item_flags: None }),
        ]
    );
    assert_eq!(reader.checksum(), Some(ChecksumStatus::Verified));
    assert_eq!(reader.offset(), file.len() as u64);
}

#[test]
fn lru_and_lfu_attributes() {
    let mut w = RdbWriter::new(Vec::new(), WriteOptions::default()).unwrap();
    w.select_db(0, 3, 0).unwrap();
    w.lru_idle(1234).unwrap();
    w.write_key(b"a", &RdbValue::String(b"1".to_vec()), None).unwrap();
    w.lfu_freq(200).unwrap();
    w.write_key(b"b", &RdbValue::String(b"2".to_vec()), Some(99)).unwrap();
    w.write_key(b"c", &RdbValue::String(b"3".to_vec()), None).unwrap();
    let file = w.finish().unwrap();
    let entries: Vec<RdbEntry> = RdbReader::new(&file[..])
        .unwrap()
        .filter_map(|i| match i.unwrap() {
            RdbItem::Entry(e) => Some(e),
            _ => None,
        })
        .collect();
    assert_eq!((entries[0].idle_s, entries[0].freq), (Some(1234), None));
    assert_eq!((entries[1].idle_s, entries[1].freq, entries[1].expire_at_ms), (None, Some(200), Some(99)));
    assert_eq!((entries[2].idle_s, entries[2].freq, entries[2].expire_at_ms), (None, None, None));
}

#[test]
fn memcached_flags_go_with_their_key() {
    let mut w = RdbWriter::new(Vec::new(), WriteOptions::default()).unwrap();
    w.select_db(0, 4, 2).unwrap();
    w.item_flags(42).unwrap();
    w.write_key(b"a", &RdbValue::String(b"1".to_vec()), Some(1_900_000_000_000)).unwrap();
    // No flags, no field.
    let before = w.bytes_written();
    w.item_flags(0).unwrap();
    assert_eq!(w.bytes_written(), before);
    w.write_key(b"b", &RdbValue::String(b"2".to_vec()), None).unwrap();
    // Before the other attributes, as the server writes them.
    w.item_flags(u32::MAX).unwrap();
    w.lru_idle(7).unwrap();
    w.write_string_key(b"c", b"3", Some(99)).unwrap();
    w.item_flags(1).unwrap();
    w.lfu_freq(5).unwrap();
    w.write_key(b"d", &RdbValue::List(vec![b"x".to_vec()]), None).unwrap();
    // A field with no key after it: dropped.
    w.item_flags(9).unwrap();
    let file = w.finish().unwrap();

    let items: Vec<RdbItem> = RdbReader::new(&file[..]).unwrap().collect::<Result<_, _>>().unwrap();
    assert!(!items.iter().any(|i| matches!(i, RdbItem::Aux { name, .. } if name == ITEM_FLAGS_AUX.as_bytes())), "{items:?}");
    let entries: Vec<RdbEntry> = items
        .into_iter()
        .filter_map(|i| match i {
            RdbItem::Entry(e) => Some(e),
            _ => None,
        })
        .collect();
    let got: Vec<_> = entries.iter().map(|e| (e.key.as_slice(), e.item_flags, e.expire_at_ms, e.idle_s, e.freq)).collect();
    assert_eq!(
        got,
        [
            (&b"a"[..], Some(42), Some(1_900_000_000_000), None, None),
            (b"b", None, None, None, None),
            (b"c", Some(u32::MAX), Some(99), Some(7), None),
            (b"d", Some(1), None, None, Some(5)),
        ]
    );
}

#[test]
fn memcached_flags_that_are_no_number_are_refused() {
    for bad in [&b"x"[..], b"", b"-1", b"4294967296", b"12 "] {
        let mut w = RdbWriter::new(Vec::new(), WriteOptions::default()).unwrap();
        w.select_db(0, 1, 0).unwrap();
        w.aux(ITEM_FLAGS_AUX.as_bytes(), bad).unwrap();
        w.write_key(b"k", &RdbValue::String(b"v".to_vec()), None).unwrap();
        let file = w.finish().unwrap();
        let err = RdbReader::new(&file[..]).unwrap().find_map(Result::err);
        assert!(matches!(err, Some(RdbError::Corrupt { .. })), "{:?}: {err:?}", String::from_utf8_lossy(bad));
    }
}

/// A file small enough to damage at every byte.
fn small_file(checksum: bool) -> Vec<u8> {
    let mut data = Dataset::new();
    data.insert((0, b"s".to_vec()), (RdbValue::String(b"x".repeat(40)), Some(1_900_000_000_000)));
    data.insert((0, b"n".to_vec()), (RdbValue::String(b"-1234".to_vec()), None));
    data.insert((1, b"l".to_vec()), (RdbValue::List((0..30).map(|i| format!("e{i}").into_bytes()).collect()), None));
    data.insert((1, b"i".to_vec()), (RdbValue::Set(vec![b"1".to_vec(), b"2".to_vec()]), None));
    data.insert((1, b"set".to_vec()), (RdbValue::Set(vec![b"a".to_vec(), b"b".to_vec()]), None));
    data.insert((2, b"h".to_vec()), (RdbValue::Hash(vec![(b"f".to_vec(), b"v".to_vec()), (b"g".to_vec(), b"12".to_vec())]), None));
    data.insert((2, b"H".to_vec()), (RdbValue::Hash(vec![(b"f".to_vec(), b"v".repeat(30)), (b"g".to_vec(), b"w".to_vec())]), None));
    data.insert((3, b"z".to_vec()), (RdbValue::ZSet(vec![(b"a".to_vec(), 1.5), (b"b".to_vec(), f64::INFINITY)]), None));
    data.insert((3, b"Z".to_vec()), (RdbValue::ZSet(vec![(b"a".repeat(20), 1.5), (b"b".to_vec(), -0.0)]), None));
    let thresholds = Thresholds { hash_max_listpack_value: 10, zset_max_listpack_value: 10, list_max_listpack_bytes: 40, ..Thresholds::default() };
    write(&data, WriteOptions { checksum, encode: EncodeOptions { compression: true, thresholds }, ..WriteOptions::default() })
}

fn read_to_end(file: &[u8]) -> Result<(), RdbError> {
    for item in RdbReader::new(file)? {
        item?;
    }
    Ok(())
}

#[test]
fn every_truncation_is_an_error() {
    let file = small_file(true);
    read_to_end(&file).unwrap();
    for n in 0..file.len() {
        let err = read_to_end(&file[..n]).unwrap_err();
        if n >= 9 {
            assert!(matches!(err, RdbError::Truncated { offset } if offset == n as u64), "cut at {n}: {err}");
        }
    }
}

#[test]
fn every_flipped_byte_is_an_error() {
    let file = small_file(true);
    for i in 0..file.len() {
        for mask in [0x01, 0x80] {
            let mut damaged = file.clone();
            damaged[i] ^= mask;
            assert!(read_to_end(&damaged).is_err(), "flip {mask:#x} at {i}");
        }
    }
}

#[test]
fn checksums() {
    let file = small_file(true);
    let mut bad = file.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let err = read_to_end(&bad).unwrap_err();
    assert!(matches!(err, RdbError::BadChecksum { offset, .. } if offset == last as u64 - 7), "{err}");
    // Not compared when asked not to.
    let mut reader = RdbReader::with_checksum(&bad[..], false).unwrap();
    while reader.next_item().unwrap().is_some() {}
    assert_eq!(reader.checksum(), Some(ChecksumStatus::Skipped));

    let unchecked = small_file(false);
    assert!(unchecked.ends_with(&[0; 8]));
    let mut reader = RdbReader::new(&unchecked[..]).unwrap();
    while reader.next_item().unwrap().is_some() {}
    assert_eq!(reader.checksum(), Some(ChecksumStatus::Disabled));
}

#[test]
fn checksums_on_a_helper_thread() {
    let read = |bytes: &[u8]| -> Result<Option<ChecksumStatus>, RdbError> {
        let mut reader = RdbReader::new(bytes)?.checksum_in_background();
        while reader.next_item()?.is_some() {}
        Ok(reader.checksum())
    };
    let file = small_file(true);
    assert_eq!(read(&file).unwrap(), Some(ChecksumStatus::Verified));
    let mut bad = file.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert!(matches!(read(&bad), Err(RdbError::BadChecksum { .. })));
    assert_eq!(read(&small_file(false)).unwrap(), Some(ChecksumStatus::Disabled));
}

#[test]
fn stops_after_the_trailer() {
    let mut file = small_file(true);
    let len = file.len();
    file.extend_from_slice(b"*1\r\n$4\r\nPING\r\n");
    let mut reader = RdbReader::new(&file[..]).unwrap();
    while reader.next_item().unwrap().is_some() {}
    assert_eq!(reader.next_item().unwrap(), None);
    assert_eq!(reader.offset(), len as u64);
    assert_eq!(reader.into_inner(), b"*1\r\n$4\r\nPING\r\n");
}

#[test]
fn errors_end_the_iteration() {
    let file = small_file(true);
    let mut reader = RdbReader::new(&file[..file.len() - 3]).unwrap();
    let results: Vec<_> = reader.by_ref().collect();
    assert!(results.last().unwrap().is_err());
    assert_eq!(results.iter().filter(|r| r.is_err()).count(), 1);
    assert!(reader.next().is_none());
}

#[test]
fn bad_headers() {
    assert!(matches!(RdbReader::new(&b"REDIS0011"[..]), Err(RdbError::UnsupportedVersion { version: 11 })));
    assert!(matches!(RdbReader::new(&b"REDIS0000"[..]), Err(RdbError::UnsupportedVersion { version: 0 })));
    assert!(matches!(RdbReader::new(&b"REDIX0010"[..]), Err(RdbError::BadSignature)));
    assert!(matches!(RdbReader::new(&b"REDIS001a"[..]), Err(RdbError::BadSignature)));
    assert!(matches!(RdbReader::new(&b"REDIS00"[..]), Err(RdbError::Truncated { offset: 7 })));
}

#[test]
fn hostile_lengths_allocate_nothing_up_front() {
    // A list claiming 2^62 elements, a string claiming 2^62 bytes, an LZF
    // string claiming to expand 1 byte to 2^40: errors, not allocations.
    for tail in [&[0x01, 0x01, b'k', 0x81, 0x40, 0, 0, 0, 0, 0, 0, 0][..], &[0x00, 0x01, b'k', 0x81, 0x40, 0, 0, 0, 0, 0, 0, 0, b'x'], &[0x00, 0x01, b'k', 0xC3, 0x01, 0x81, 0, 0, 1, 0, 0, 0, 0, 0, 0x00]] {
        let mut file = b"REDIS0010".to_vec();
        file.extend_from_slice(tail);
        assert!(read_to_end(&file).is_err());
    }
}

#[test]
fn restore_errors_match_redis_replies() {
    let payload = dump_payload(&RdbValue::List(vec![b"a".to_vec(), b"b".to_vec()]), &EncodeOptions::default());
    assert_eq!(payload[payload.len() - 10..payload.len() - 8], (RDB_VERSION as u16).to_le_bytes());
    assert_eq!(restore_payload(&payload).unwrap(), RdbValue::List(vec![b"a".to_vec(), b"b".to_vec()]));

    let mut bad_crc = payload.clone();
    bad_crc[1] ^= 1;
    let err = restore_payload(&bad_crc).unwrap_err();
    assert!(matches!(err, RdbError::BadDumpPayload));
    assert_eq!(err.restore_reply(), DUMP_PAYLOAD_ERROR);
    assert_eq!(err.to_string(), "DUMP payload version or checksum are wrong");
    assert!(matches!(restore_payload(&payload[..9]), Err(RdbError::BadDumpPayload)));

    // Version 11 with a correct checksum: still refused, as by Redis 7.0.
    let mut newer = payload[..payload.len() - 10].to_vec();
    newer.extend_from_slice(&11u16.to_le_bytes());
    let crc = crc64(0, &newer);
    newer.extend_from_slice(&crc.to_le_bytes());
    assert!(matches!(restore_payload(&newer), Err(RdbError::BadDumpPayload)));

    // Older versions are accepted.
    let mut older = payload[..payload.len() - 10].to_vec();
    older.extend_from_slice(&9u16.to_le_bytes());
    let crc = crc64(0, &older);
    older.extend_from_slice(&crc.to_le_bytes());
    assert!(restore_payload(&older).is_ok());

    // A good footer around a bad value: "Bad data format".
    let with_footer = |body: &[u8]| {
        let mut p = body.to_vec();
        p.extend_from_slice(&10u16.to_le_bytes());
        let crc = crc64(0, &p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    };
    for body in [&[0x00, 0x01, b'a', b'b'][..], &[0x02, 0x00], &[0xF0, 0x00], &[0x0F, 0x00], &[], &[0x10, 0x00]] {
        let err = restore_payload(&with_footer(body)).unwrap_err();
        assert_eq!(err.restore_reply(), BAD_DATA_FORMAT, "{body:?}: {err}");
    }
}
