//! The reader on what older Redis versions wrote, and on the opcodes and
//! types that carry no keys for this crate: functions, module data,
//! streams, empty keys. (`redis_interop.rs` has Redis 7.0 load the same
//! legacy files, which checks the hand-built encodings themselves.)
#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use keel_rdb::*;

#[test]
fn redis_2_files() {
    let (file, want) = legacy_v3();
    let mut reader = RdbReader::new(&file[..]).unwrap();
    assert_eq!(reader.version(), 3);
    while reader.next_item().unwrap().is_some() {}
    assert_eq!(reader.checksum(), Some(ChecksumStatus::Skipped));
    assert_eq!(read_all(&file).0, want);
}

#[test]
fn redis_6_files() {
    let (file, want) = legacy_v9();
    let (keys, other) = read_all(&file);
    assert_eq!(keys, want);
    assert_eq!(other[0], RdbItem::Aux { name: b"redis-ver".to_vec(), value: b"6.2.14".to_vec() });
}

fn file(version: u32, body: impl FnOnce(&mut RawRdb)) -> Vec<u8> {
    let mut f = RawRdb::new(version);
    body(&mut f);
    f.finish()
}

fn items(file: &[u8]) -> Result<Vec<RdbItem>, RdbError> {
    RdbReader::new(file)?.collect()
}

#[test]
fn functions_are_handed_over() {
    let code = b"#!lua name=mylib\nredis.register_function('f', function() return 1 end)";
    let f = file(10, |f| {
        f.u8(0xF5).string(code);
        // The 7.0 release-candidate form: name, engine, description, body.
        f.u8(0xF6).string(b"old").string(b"LUA").len(1).string(b"a description").string(b"return 2");
    });
    assert_eq!(
        items(&f).unwrap(),
        [RdbItem::Function { code: code.to_vec() }, RdbItem::Function { code: b"#!LUA name=old\nreturn 2".to_vec() }]
    );
}

#[test]
fn module_aux_data_is_skipped() {
    let charset = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let id = b"scripting".iter().fold(0u64, |id, c| id << 6 | charset.iter().position(|x| x == c).unwrap() as u64) << 10 | 3;
    let f = file(10, |f| {
        f.u8(0xF7).u8(0x81).bytes(&id.to_be_bytes()).len(2).len(1);
        // Every field type, then EOF.
        f.len(1).len(5).len(2).len(300).len(3).bytes(&1.5f32.to_le_bytes()).len(4).bytes(&2.5f64.to_le_bytes()).len(5).string(b"blob").len(0);
        f.u8(0).string(b"k").string(b"v");
    });
    let got = items(&f).unwrap();
    assert_eq!(got[0], RdbItem::ModuleAux { module: "scripting".into() });
    assert!(matches!(&got[1], RdbItem::Entry(e) if e.key == b"k"));

    let bad_when = file(10, |f| {
        f.u8(0xF7).len(1).len(1).len(1).len(0);
    });
    assert!(matches!(items(&bad_when), Err(RdbError::Corrupt { offset: 9, .. })));
    let bad_field = file(10, |f| {
        f.u8(0xF7).len(1).len(2).len(1).len(9);
    });
    assert!(matches!(items(&bad_field), Err(RdbError::Corrupt { offset: 13, .. })));
}

#[test]
fn module_values_are_unsupported() {
    for t in [6u8, 7] {
        let f = file(10, |f| {
            f.u8(0).string(b"ok").string(b"v");
            f.u8(t).string(b"k").len(1);
        });
        let err = items(&f).unwrap_err();
        assert!(matches!(err, RdbError::Unsupported { rdb_type, offset: 15 } if rdb_type == t), "{err}");
        assert!(err.to_string().contains("unsupported"));
    }
    // Not value types at all.
    for t in [8u8, 20, 0xF4] {
        let f = file(10, |f| {
            f.u8(t).string(b"k");
        });
        assert!(matches!(items(&f), Err(RdbError::Corrupt { offset: 9, .. })), "{t}");
    }
}

#[test]
fn empty_keys_are_skipped_as_redis_does() {
    let empty_listpack = [7, 0, 0, 0, 0, 0, 0xFF];
    let empty_ziplist = [11, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0xFF];
    let f = file(10, |f| {
        f.u8(0xFC).bytes(&5i64.to_le_bytes());
        f.u8(0xFA).string(b"keel-item-flags").string(b"7");
        f.u8(1).string(b"list").len(0);
        f.u8(2).string(b"set").len(0);
        f.u8(4).string(b"hash").len(0);
        f.u8(5).string(b"zset").len(0);
        f.u8(16).string(b"hashlp").string(&empty_listpack);
        f.u8(17).string(b"zsetlp").string(&empty_listpack);
        f.u8(13).string(b"hashzl").string(&empty_ziplist);
        f.u8(18).string(b"ql").len(1).len(2).string(&empty_listpack);
        f.u8(14).string(b"ql1").len(1).string(&empty_ziplist);
        f.u8(0).string(b"kept").string(b"v");
    });
    let mut reader = RdbReader::new(&f[..]).unwrap();
    let got: Vec<RdbItem> = reader.by_ref().collect::<Result<_, _>>().unwrap();
    // The expiry and the flags belonged to the first (skipped) key, not to "kept".
    let skipped = ["list", "set", "hash", "zset", "hashlp", "zsetlp", "hashzl", "ql", "ql1"];
    let mut expected: Vec<RdbItem> = skipped.iter().map(|k| RdbItem::EmptyKeySkipped { key: k.as_bytes().to_vec() }).collect();
    expected.push(RdbItem::Entry(RdbEntry {
        db: 0,
        key: b"kept".to_vec(),
        value: RdbValue::String(b"v".to_vec()),
        expire_at_ms: None,
        idle_s: None,
        freq: None,
        item_flags: None,
    }));
    assert_eq!(got, expected);
    assert_eq!(reader.empty_keys_skipped(), 9);
}

#[test]
fn what_redis_refuses_is_refused_in_redis_s_words() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("Duplicate set members detected", file(10, |f| {
            f.u8(2).string(b"s").len(2).string(b"a").string(b"a");
        })),
        ("Duplicate hash fields detected", file(10, |f| {
            f.u8(4).string(b"h").len(2).string(b"f").string(b"1").string(b"f").string(b"2");
        })),
        ("Duplicate zset fields detected", file(10, |f| {
            f.u8(5).string(b"z").len(2).string(b"m").bytes(&1f64.to_le_bytes()).string(b"m").bytes(&2f64.to_le_bytes());
        })),
        ("Zset with NAN score detected (sorted set score is NaN)", file(10, |f| {
            f.u8(5).string(b"z").len(1).string(b"m").bytes(&f64::NAN.to_le_bytes());
        })),
        ("Zset with NAN score detected (sorted set score is NaN)", file(4, |f| {
            f.u8(3).string(b"z").len(1).string(b"m").u8(253);
        })),
        ("Zset ziplist integrity check failed. (sorted set score is not a number)", file(10, |f| {
            f.u8(12).string(b"z").string(&ziplist(&[b"m", b"abc"]));
        })),
        ("Hash ziplist integrity check failed. (odd number", file(10, |f| {
            f.u8(13).string(b"h").string(&ziplist(&[b"f", b"v", b"g"]));
        })),
        ("Duplicate hash fields detected", file(10, |f| {
            f.u8(9).string(b"h").string(&zipmap(&[(b"f", b"1"), (b"f", b"2")]));
        })),
        ("Quicklist integrity check failed. (unknown quicklist container", file(10, |f| {
            f.u8(18).string(b"l").len(1).len(3).string(b"x");
        })),
        ("empty quicklist node", file(10, |f| {
            f.u8(18).string(b"l").len(1).len(1).string(b"");
        })),
        ("unknown string encoding", file(10, |f| {
            f.u8(0).string(b"k").u8(0xC4);
        })),
        ("unknown length encoding", file(10, |f| {
            f.u8(0xFE).u8(0x82);
        })),
        ("string encoding where a length", file(10, |f| {
            f.u8(0xFE).u8(0xC0).u8(1);
        })),
    ];
    for (what, f) in cases {
        match items(&f) {
            Err(err @ RdbError::Corrupt { .. }) => {
                assert!(err.to_string().contains(what), "{what}: got {err}");
                let at = err.offset().unwrap();
                assert!((9..f.len() as u64).contains(&at), "{what}: offset {at}");
            }
            other => panic!("{what}: got {other:?}"),
        }
    }
}

#[test]
fn plain_quicklist_nodes() {
    // A PLAIN node holds one element as it is, between listpack nodes.
    let mut lp = vec![0u8; 6];
    lp.extend_from_slice(&[0x81, b'a', 2]);
    lp.push(0xFF);
    let n = lp.len() as u32;
    lp[0..4].copy_from_slice(&n.to_le_bytes());
    lp[4..6].copy_from_slice(&1u16.to_le_bytes());
    let f = file(10, |f| {
        f.u8(18).string(b"l").len(3).len(2).string(&lp).len(1).string(b"a plain element").len(2).string(&lp);
    });
    let got = items(&f).unwrap();
    assert!(matches!(&got[0], RdbItem::Entry(e) if e.value == RdbValue::List(vec![b"a".to_vec(), b"a plain element".to_vec(), b"a".to_vec()])));
}

#[test]
fn expiry_edge_cases() {
    let f = file(10, |f| {
        f.u8(0xFC).bytes(&(-1i64).to_le_bytes()).u8(0).string(b"minus-one").string(b"v");
        f.u8(0xFC).bytes(&(-5i64).to_le_bytes()).u8(0).string(b"before-epoch").string(b"v");
        f.u8(0xFD).bytes(&(-5i32).to_le_bytes()).u8(0).string(b"seconds-before-epoch").string(b"v");
        f.u8(0xFD).bytes(&7i32.to_le_bytes()).u8(0).string(b"seconds").string(b"v");
    });
    let expiries: Vec<Option<u64>> = items(&f)
        .unwrap()
        .into_iter()
        .map(|i| match i {
            RdbItem::Entry(e) => e.expire_at_ms,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(expiries, [None, Some(0), Some(0), Some(7000)]);
}
