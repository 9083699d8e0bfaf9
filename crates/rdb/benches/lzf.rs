//! LZF compression as a snapshot or a rewrite's base applies it to every
//! string over 20 bytes: incompressible values (memtier's `-R` random
//! data, W1's 100-1000 B), text that compresses, and W2's sizes.

mod common;

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use common::random;
use keel_rdb::lzf;

/// JSON-like records: repetitive field names, varying values.
fn text(len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len + 64);
    let mut i = 0u64;
    while out.len() < len {
        out.extend_from_slice(format!("{{\"id\":{i},\"name\":\"user-{}\",\"active\":true}},", i * 7919 % 1000).as_bytes());
        i += 1;
    }
    out.truncate(len);
    out
}

fn compress(c: &mut Criterion) {
    let mut group = c.benchmark_group("lzf_compress");
    for (name, data) in [
        ("random_100", random(100, 1)),
        ("random_550", random(550, 2)),
        ("random_6000", random(6000, 3)),
        ("text_550", text(550)),
        ("text_6000", text(6000)),
    ] {
        group.throughput(Throughput::Bytes(data.len() as u64));
        group.bench_function(name, |b| b.iter(|| lzf::compress(black_box(&data), data.len() - 4)));
    }
    group.finish();
}

criterion_group!(benches, compress);
criterion_main!(benches);
