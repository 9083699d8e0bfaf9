//! Interop with Debian's Redis 7.0 (`redis-server`, `redis-check-rdb`):
//! the reader reads what Redis saves, Redis loads and checks what the
//! writer writes, and DUMP/RESTORE payloads cross both ways. Skipped, with
//! a notice, where Redis is not installed.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use common::redis::Values;
use common::*;
use keel_rdb::*;
use keel_testkit::redis::{have, Redis, Reply};

/// A key of a test data set: database, key, value, expiry (Unix ms).
type Row = (u64, Vec<u8>, RdbValue, Option<u64>);

fn skip() -> bool {
    if have("redis-server") {
        return false;
    }
    eprintln!("NOTICE: redis-server not installed; skipping Redis interop test");
    true
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as u64
}

/// Runs `redis-check-rdb` on `path` and requires it to pass.
fn check_rdb(path: &Path) {
    if !have("redis-check-rdb") {
        eprintln!("NOTICE: redis-check-rdb not installed; not checking {}", path.display());
        return;
    }
    let out = Command::new("redis-check-rdb").arg(path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("RDB looks OK"), "redis-check-rdb {}:\n{text}{}", path.display(), String::from_utf8_lossy(&out.stderr));
}

/// Requires Redis to hold exactly `want` (values, expiries, databases).
fn assert_redis_holds(r: &mut Redis, want: &[Key]) {
    let mut by_db: BTreeMap<u64, Vec<&Key>> = BTreeMap::new();
    for k in want {
        by_db.entry(k.db).or_default().push(k);
    }
    for db in 0..16 {
        r.select(db);
        let keys = by_db.get(&db).cloned().unwrap_or_default();
        let mut names: Vec<Vec<u8>> = keys.iter().map(|k| k.key.clone()).collect();
        names.sort();
        assert_eq!(r.keys(), names, "keys of db {db}");
        for k in keys {
            let got = r.fetch(&k.key).unwrap();
            assert_eq!(norm(&got), k.value, "db {db} key {:?}", String::from_utf8_lossy(&k.key));
            assert_eq!(r.expire_at_ms(&k.key), k.expire_at_ms, "expiry of {:?}", String::from_utf8_lossy(&k.key));
        }
    }
}

/// The data set both directions use: every type in both encodings, over
/// three databases, some keys with expiries.
fn data_set(tag: &str) -> Vec<Row> {
    let mut rng = Rng::new(42);
    let expire_base = now_ms() + 3_600_000;
    every_encoding(&mut rng, tag)
        .into_iter()
        .enumerate()
        .map(|(i, (key, value))| ([0, 3, 15][i % 3], key, value, (i % 4 == 1).then_some(expire_base + i as u64)))
        .collect()
}

/// The database `key` is in.
fn db_of(data: &[Row], key: &str) -> u64 {
    data.iter().find(|d| d.1 == key.as_bytes()).unwrap().0
}

fn keys_of(data: &[Row]) -> Vec<Key> {
    let mut keys: Vec<Key> = data.iter().map(|(db, key, value, expire)| Key { db: *db, key: key.clone(), value: norm(value), expire_at_ms: *expire }).collect();
    keys.sort();
    keys
}

fn read_file(path: &Path) -> (Vec<Key>, Vec<RdbItem>, RdbReader<std::io::BufReader<std::fs::File>>) {
    let mut reader = RdbReader::new(std::io::BufReader::new(std::fs::File::open(path).unwrap())).unwrap();
    let mut keys = Vec::new();
    let mut other = Vec::new();
    while let Some(item) = reader.next_item().unwrap() {
        match item {
            RdbItem::Entry(e) => keys.push(Key { db: e.db, key: e.key, value: norm(&e.value), expire_at_ms: e.expire_at_ms }),
            item => other.push(item),
        }
    }
    keys.sort();
    (keys, other, reader)
}

fn entries(path: &Path) -> Vec<RdbEntry> {
    RdbReader::new(&std::fs::read(path).unwrap()[..])
        .unwrap()
        .filter_map(|i| match i.unwrap() {
            RdbItem::Entry(e) => Some(e),
            _ => None,
        })
        .collect()
}

#[test]
fn reads_what_redis_saves() {
    if skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut r = Redis::start(tmp.path(), &["--enable-debug-command", "yes"]);
    // Multi-node quicklists, LZF-compressed inner nodes, PLAIN nodes for
    // elements of 1000 bytes and more.
    r.ok(&[b"CONFIG", b"SET", b"list-max-listpack-size", b"4"]);
    r.ok(&[b"CONFIG", b"SET", b"list-compress-depth", b"1"]);
    r.ok(&[b"DEBUG", b"QUICKLIST-PACKED-THRESHOLD", b"1000"]);

    let mut data = data_set("redis");
    data.push((0, b"list:plain".to_vec(), RdbValue::List(vec![b"a".to_vec(), b"p".repeat(2000), b"b".to_vec(), b"q".repeat(1500)]), None));
    data.push((0, b"list:tiny".to_vec(), RdbValue::List(vec![b"1".to_vec(), b"x".to_vec()]), None));
    data.push((3, b"list:compressed".to_vec(), RdbValue::List((0..40).map(|i| format!("a fairly compressible element, number {i:04}").into_bytes()).collect()), None));
    for (db, key, value, expire) in &data {
        r.select(*db);
        r.store(key, value);
        if let Some(at) = expire {
            assert_eq!(r.cmd(&[b"PEXPIREAT", key, at.to_string().as_bytes()]), Reply::Int(1));
        }
    }
    // The encodings Redis chose are the ones meant to be covered.
    for (key, encoding) in [
        ("redis:set:intset", "intset"),
        ("redis:hash:small", "listpack"),
        ("redis:hash:many", "hashtable"),
        ("redis:zset:small", "listpack"),
        ("redis:zset:many", "skiplist"),
        ("list:plain", "quicklist"),
        ("redis:string:int8", "int"),
        ("redis:string:compressible", "raw"),
    ] {
        r.select(db_of(&data, key));
        assert_eq!(r.encoding(key.as_bytes()), encoding, "{key}");
    }
    let code = b"#!lua name=mylib\nredis.register_function('myfunc', function(keys, args) return 1 end)";
    assert_eq!(r.cmd(&[b"FUNCTION", b"LOAD", code]), Reply::Bulk(b"mylib".to_vec()));

    let dump = tmp.path().join("dump.rdb");
    let want = keys_of(&data);
    r.ok(&[b"SAVE"]);
    let (keys, other, reader) = read_file(&dump);
    assert_eq!(keys, want);
    assert_eq!(reader.checksum(), Some(ChecksumStatus::Verified));
    assert!(other.contains(&RdbItem::Aux { name: b"redis-ver".to_vec(), value: b"7.0.15".to_vec() }), "{other:?}");
    assert!(other.contains(&RdbItem::Function { code: code.to_vec() }));
    assert!(other.contains(&RdbItem::SelectDb(15)));
    let in_db3 = want.iter().filter(|k| k.db == 3).count() as u64;
    let expiring_in_db3 = want.iter().filter(|k| k.db == 3 && k.expire_at_ms.is_some()).count() as u64;
    assert!(other.contains(&RdbItem::ResizeDb { db_size: in_db3, expires_size: expiring_in_db3 }));

    // Without compression.
    r.ok(&[b"CONFIG", b"SET", b"rdbcompression", b"no"]);
    r.ok(&[b"SAVE"]);
    assert_eq!(read_file(&dump).0, want);

    // LFU counters and LRU idle times.
    r.ok(&[b"CONFIG", b"SET", b"maxmemory-policy", b"allkeys-lfu"]);
    r.ok(&[b"SAVE"]);
    assert!(entries(&dump).iter().all(|e| e.freq.is_some() && e.idle_s.is_none()));
    r.ok(&[b"CONFIG", b"SET", b"maxmemory-policy", b"allkeys-lru"]);
    r.ok(&[b"SAVE"]);
    assert!(entries(&dump).iter().all(|e| e.idle_s.is_some() && e.freq.is_none()));
    r.shutdown();

    // Without a checksum (a setting fixed at startup): a second server
    // loads the file and saves it again.
    let mut r = Redis::start(tmp.path(), &["--rdbchecksum", "no"]);
    r.ok(&[b"SAVE"]);
    let (keys, _, reader) = read_file(&dump);
    assert_eq!(keys, want);
    assert_eq!(reader.checksum(), Some(ChecksumStatus::Disabled));

    // A stream with a group and a pending entry, as type 19; written
    // back by us, Redis loads it and saves the same value again.
    r.select(0);
    assert!(matches!(r.cmd(&[b"XADD", b"stream", b"1-1", b"f", b"v"]), Reply::Bulk(_)));
    assert!(matches!(r.cmd(&[b"XADD", b"stream", b"2-1", b"g", b"w"]), Reply::Bulk(_)));
    r.ok(&[b"XGROUP", b"CREATE", b"stream", b"grp", b"0"]);
    r.cmd(&[b"XREADGROUP", b"GROUP", b"grp", b"alice", b"COUNT", b"1", b"STREAMS", b"stream", b">"]);
    r.ok(&[b"SAVE"]);
    let streams: Vec<RdbEntry> = entries(&dump).into_iter().filter(|e| e.value.type_name() == "stream").collect();
    let [saved] = &streams[..] else { panic!("one stream: {streams:?}") };
    let RdbValue::Stream(st) = &saved.value else { unreachable!() };
    assert_eq!((st.length, st.last_id, st.groups.len(), st.groups[0].pel.len()), (2, (2, 1), 1, 1));
    r.shutdown();
    let mut w = RdbWriter::new(std::fs::File::create(&dump).unwrap(), WriteOptions::default()).unwrap();
    w.select_db(0, 1, 0).unwrap();
    w.write_key(&saved.key, &saved.value, None).unwrap();
    w.finish().unwrap();
    let mut r = Redis::start(tmp.path(), &[]);
    r.ok(&[b"SAVE"]);
    let again: Vec<RdbEntry> = entries(&dump).into_iter().collect();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].value, saved.value);
    r.shutdown();
}

/// Writes `data` to `path` with `options`.
fn write_file(path: &Path, data: &[Row], options: WriteOptions) {
    let mut dbs: BTreeMap<u64, Vec<&Row>> = BTreeMap::new();
    for d in data {
        dbs.entry(d.0).or_default().push(d);
    }
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = RdbWriter::new(file, options).unwrap();
    for (db, keys) in dbs {
        w.select_db(db, keys.len() as u64, keys.iter().filter(|k| k.3.is_some()).count() as u64).unwrap();
        for (_, key, value, expire) in keys {
            w.write_key(key, value, *expire).unwrap();
        }
    }
    w.finish().unwrap();
}

#[test]
fn redis_loads_what_we_write() {
    if skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut data = data_set("keel");
    // Unlike Redis itself (see `every_encoding`), the writer keeps -0 in a
    // listpack, and Redis reads it back as -0.
    data.push((0, b"keel:zset:negzero".to_vec(), RdbValue::ZSet(vec![(b"a".to_vec(), -0.0), (b"b".to_vec(), 0.0)]), None));
    let want = keys_of(&data);
    let small = Thresholds {
        hash_max_listpack_entries: 4,
        hash_max_listpack_value: 8,
        set_max_intset_entries: 4,
        zset_max_listpack_entries: 4,
        zset_max_listpack_value: 8,
        list_max_listpack_bytes: 64,
        list_packed_threshold: 100,
    };
    let variants = [
        ("default.rdb", WriteOptions::default()),
        ("plain.rdb", WriteOptions { encode: EncodeOptions { compression: false, ..EncodeOptions::default() }, checksum: false, ..WriteOptions::default() }),
        ("small.rdb", WriteOptions { encode: EncodeOptions { compression: true, thresholds: small }, aof_base: true, ..WriteOptions::default() }),
    ];
    for (name, options) in variants {
        let path = tmp.path().join(name);
        write_file(&path, &data, options);
        check_rdb(&path);
        let mut r = Redis::start(tmp.path(), &["--dbfilename", name]);
        assert_redis_holds(&mut r, &want);
        if name == "default.rdb" {
            for (key, encoding) in [
                ("keel:set:intset", "intset"),
                ("keel:hash:small", "listpack"),
                ("keel:hash:many", "hashtable"),
                ("keel:zset:small", "listpack"),
                ("keel:zset:many", "skiplist"),
                ("keel:list:small", "quicklist"),
            ] {
                r.select(db_of(&data, key));
                assert_eq!(r.encoding(key.as_bytes()), encoding, "{key}");
            }
        }
        // Full circle: what Redis saves of it reads back the same.
        r.ok(&[b"SAVE"]);
        assert_eq!(read_file(&path).0, want, "{name} saved again by Redis");
        r.shutdown();
    }
}

/// Keel's `keel-item-flags` aux field (memcached flags): Redis skips it,
/// and it does not take the key's other attributes from it, wherever it
/// comes among them. The writer puts it first; a file by hand puts it
/// after `EXPIRETIME_MS` and between `IDLE` and the key.
#[test]
fn redis_loads_keys_with_memcached_flags() {
    if skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let at = now_ms() + 3_600_000;
    let string = |v: &[u8]| RdbValue::String(v.to_vec());
    let hash = RdbValue::Hash(vec![(b"f".to_vec(), b"v".to_vec())]);

    let ours = tmp.path().join("flags.rdb");
    let mut w = RdbWriter::new(std::io::BufWriter::new(std::fs::File::create(&ours).unwrap()), WriteOptions::default()).unwrap();
    w.select_db(0, 4, 2).unwrap();
    w.item_flags(42).unwrap();
    w.write_key(b"a", &string(b"abc"), Some(at)).unwrap();
    w.write_key(b"b", &string(b"no flags"), None).unwrap();
    w.item_flags(u32::MAX).unwrap();
    w.lru_idle(100).unwrap();
    w.write_string_key(b"c", b"idle", Some(at + 1)).unwrap();
    w.select_db(3, 1, 0).unwrap();
    w.item_flags(7).unwrap();
    w.write_key(b"d", &hash, None).unwrap();
    w.finish().unwrap();

    let by_hand = tmp.path().join("between.rdb");
    let mut f = RawRdb::new(10);
    f.u8(0xFE).len(0).u8(0xFB).len(2).len(2);
    f.u8(0xFC).bytes(&(at as i64).to_le_bytes()).u8(0xFA).string(ITEM_FLAGS_AUX.as_bytes()).string(b"5");
    f.u8(0).string(b"e").string(b"after expire");
    f.u8(0xFC).bytes(&((at + 2) as i64).to_le_bytes()).u8(0xF8).len(5).u8(0xFA).string(ITEM_FLAGS_AUX.as_bytes()).string(b"6");
    f.u8(0).string(b"f").string(b"after idle");
    std::fs::write(&by_hand, f.finish()).unwrap();

    let key = |db, k: &[u8], v: &RdbValue, exp| Key { db, key: k.to_vec(), value: norm(v), expire_at_ms: exp };
    let cases = [
        (
            &ours,
            vec![
                key(0, b"a", &string(b"abc"), Some(at)),
                key(0, b"b", &string(b"no flags"), None),
                key(0, b"c", &string(b"idle"), Some(at + 1)),
                key(3, b"d", &hash, None),
            ],
            vec![Some(42), None, Some(u32::MAX), Some(7)],
        ),
        (
            &by_hand,
            vec![key(0, b"e", &string(b"after expire"), Some(at)), key(0, b"f", &string(b"after idle"), Some(at + 2))],
            vec![Some(5), Some(6)],
        ),
    ];
    for (path, want, flags) in cases {
        let got = entries(path);
        assert_eq!(got.iter().map(|e| e.item_flags).collect::<Vec<_>>(), flags);
        assert_eq!(read_file(path).0, want);
        check_rdb(path);
        let name = path.file_name().unwrap().to_str().unwrap();
        let mut r = Redis::start(tmp.path(), &["--dbfilename", name]);
        assert_redis_holds(&mut r, &want);
        // Redis keeps no flags: what it saves has none.
        r.ok(&[b"SAVE"]);
        assert_eq!(read_file(path).0, want, "{name} saved again by Redis");
        assert!(entries(path).iter().all(|e| e.item_flags.is_none()));
        r.shutdown();
    }
}

#[test]
fn redis_loads_legacy_encodings() {
    if skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    for (name, (file, want)) in [("v3.rdb", legacy_v3()), ("v9.rdb", legacy_v9())] {
        let path = tmp.path().join(name);
        std::fs::write(&path, &file).unwrap();
        check_rdb(&path);
        let mut r = Redis::start(tmp.path(), &["--dbfilename", name]);
        assert_redis_holds(&mut r, &want);
        r.shutdown();
    }
}

#[test]
fn dump_and_restore_cross_both_ways() {
    if skip() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mut r = Redis::start(tmp.path(), &[]);
    let mut rng = Rng::new(9);
    let small = Thresholds { hash_max_listpack_entries: 2, set_max_intset_entries: 2, zset_max_listpack_entries: 2, list_max_listpack_bytes: 30, ..Thresholds::default() };
    for (key, value) in every_encoding(&mut rng, "d") {
        r.store(&key, &value);
        assert_eq!(r.cmd(&[b"TYPE", &key]).status(), value.type_name());
        let payload = r.cmd(&[b"DUMP", &key]).bulk();
        assert_eq!(norm(&restore_payload(&payload).unwrap()), norm(&value), "{:?}", String::from_utf8_lossy(&key));

        for options in [EncodeOptions::default(), EncodeOptions { compression: false, thresholds: small }] {
            let ours = dump_payload(&value, &options);
            let copy = [key.as_slice(), b":copy"].concat();
            r.ok(&[b"RESTORE", &copy, b"0", &ours, b"REPLACE"]);
            assert_eq!(norm(&r.fetch(&copy).unwrap()), norm(&value), "{:?}", String::from_utf8_lossy(&copy));
        }
    }

    // Damage gives the same error both sides.
    let good = dump_payload(&RdbValue::Set(vec![b"a".to_vec(), b"b".to_vec()]), &EncodeOptions::default());
    let mut bad_crc = good.clone();
    bad_crc[2] ^= 0x40;
    let mut with_footer = vec![2u8, 0];
    with_footer.extend_from_slice(&10u16.to_le_bytes());
    let crc = crc64(0, &with_footer);
    with_footer.extend_from_slice(&crc.to_le_bytes());
    for bad in [bad_crc, with_footer] {
        let ours = restore_payload(&bad).unwrap_err().restore_reply();
        assert_eq!(r.cmd(&[b"RESTORE", b"bad", b"0", &bad]), Reply::Error(format!("ERR {ours}")));
    }
    r.shutdown();
}
