//! Writing an RDB file as a snapshot or a rewrite's base does: many keys
//! of one string each, W2's 100-byte values and W1's 100-1000 bytes, into
//! a `BufWriter` as the server's writers use (over `io::sink`, so that the
//! encoder, its checksum and its copies are what is measured).

mod common;

use std::hint::black_box;
use std::io::{self, BufWriter};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use common::random;
use keel_rdb::{RdbValue, RdbWriter, WriteOptions};

const KEYS: usize = 10_000;

fn dataset(size: impl Fn(usize) -> usize) -> Vec<(Vec<u8>, RdbValue)> {
    (0..KEYS).map(|i| (format!("memtier-{i}").into_bytes(), RdbValue::String(random(size(i), i as u64)))).collect()
}

fn write_file(keys: &[(Vec<u8>, RdbValue)]) -> io::Result<()> {
    let mut writer = RdbWriter::new(BufWriter::with_capacity(64 << 10, io::sink()), WriteOptions::default())?;
    writer.select_db(0, keys.len() as u64, 0)?;
    for (key, value) in keys {
        writer.write_key(key, value, None)?;
    }
    writer.finish()?;
    Ok(())
}

fn write(c: &mut Criterion) {
    let mut group = c.benchmark_group("rdb_write");
    group.throughput(Throughput::Elements(KEYS as u64));
    for (name, keys) in [("strings_100", dataset(|_| 100)), ("strings_100_1000", dataset(|i| 100 + i * 7919 % 901))] {
        group.bench_function(name, |b| b.iter(|| write_file(black_box(&keys)).expect("a sink never fails")));
    }
    group.finish();
}

criterion_group!(benches, write);
criterion_main!(benches);
