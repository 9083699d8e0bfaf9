//! `Dict` against `std::collections::HashMap` (same hasher, so only the
//! table differs): bulk insert, lookup hits, and, the figure behind "a table
//! never stalls", the worst single insert while growing from 0 to 10M.
//!
//! `cargo bench -p keel-engine --bench dict`; `KEEL_DICT_LATENCY_N` changes
//! the size of the latency run (default 10,000,000; 0 skips it).

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use criterion::{BatchSize, Criterion, Throughput};
use keel_engine::dict::{DefaultHashBuilder, Dict};

type Key = Box<[u8]>;

fn keys(n: usize) -> Vec<Key> {
    (0..n).map(|i| format!("key:{i:012}").into_bytes().into_boxed_slice()).collect()
}

fn bench_insert(c: &mut Criterion) {
    const N: usize = 1_000_000;
    let ks = keys(N);
    let mut g = c.benchmark_group("insert_1M");
    g.sample_size(10).throughput(Throughput::Elements(N as u64));
    g.bench_function("keel_dict", |b| {
        b.iter_batched(
            || ks.clone(),
            |ks| {
                let mut d: Dict<Key, u64> = Dict::new();
                for (i, k) in ks.into_iter().enumerate() {
                    d.insert(k, i as u64);
                }
                d
            },
            BatchSize::PerIteration,
        )
    });
    g.bench_function("std_hashmap", |b| {
        b.iter_batched(
            || ks.clone(),
            |ks| {
                let mut d: HashMap<Key, u64, DefaultHashBuilder> = HashMap::default();
                for (i, k) in ks.into_iter().enumerate() {
                    d.insert(k, i as u64);
                }
                d
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn bench_get(c: &mut Criterion) {
    const N: usize = 1_000_000;
    const PROBES: usize = 10_000;
    let ks = keys(N);
    let mut d: Dict<Key, u64> = Dict::new();
    let mut m: HashMap<Key, u64, DefaultHashBuilder> = HashMap::default();
    for (i, k) in ks.iter().enumerate() {
        d.insert(k.clone(), i as u64);
        m.insert(k.clone(), i as u64);
    }
    while d.rehash_step(1000) {}
    // Spread over the whole table, so most probes miss the CPU caches.
    let probes: Vec<Key> = (0..PROBES).map(|i| ks[(i * 7919) % N].clone()).collect();
    let mut g = c.benchmark_group("get_hit_1M");
    g.throughput(Throughput::Elements(PROBES as u64));
    g.bench_function("keel_dict", |b| {
        b.iter(|| {
            for p in &probes {
                black_box(d.get(&p[..]));
            }
        })
    });
    g.bench_function("std_hashmap", |b| {
        b.iter(|| {
            for p in &probes {
                black_box(m.get(&p[..]));
            }
        })
    });
    g.finish();
}

/// Times every insert from empty to `n` and prints the distribution.
fn insert_latency(name: &str, n: usize, mut insert: impl FnMut(Key, u64)) {
    let ks = keys(n);
    let mut lat_ns: Vec<u32> = Vec::with_capacity(n);
    let start = Instant::now();
    for (i, k) in ks.into_iter().enumerate() {
        let t = Instant::now();
        insert(k, i as u64);
        lat_ns.push(u32::try_from(t.elapsed().as_nanos()).unwrap_or(u32::MAX));
    }
    let total = start.elapsed();
    let mut sorted = lat_ns.clone();
    sorted.sort_unstable();
    let q = |p: f64| sorted[((n as f64 * p) as usize).min(n - 1)];
    let over = |ns: u32| lat_ns.iter().filter(|&&l| l > ns).count();
    println!(
        "{name:>12}: {n} inserts in {:.2?}; p50 {} ns, p99 {} ns, p99.9 {} ns, p99.99 {} ns, max {} ns; >100us: {}, >1ms: {}",
        total,
        q(0.5),
        q(0.99),
        q(0.999),
        q(0.9999),
        sorted[n - 1],
        over(100_000),
        over(1_000_000),
    );
}

fn latency_report() {
    let n: usize = std::env::var("KEEL_DICT_LATENCY_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000_000);
    if n == 0 {
        return;
    }
    println!("worst single insert while growing from 0 to {n} (Box<[u8]> keys of 16 bytes, u64 values):");
    let mut d: Dict<Key, u64> = Dict::new();
    insert_latency("keel Dict", n, |k, v| {
        d.insert(k, v);
    });
    println!("{:>12}: {:?}, memory_usage {} bytes = {:.1} per entry", "", d, d.memory_usage(), d.memory_usage() as f64 / d.len() as f64);
    drop(d);
    let mut m: HashMap<Key, u64, DefaultHashBuilder> = HashMap::default();
    insert_latency("std HashMap", n, |k, v| {
        m.insert(k, v);
    });
}

fn main() {
    // `cargo test --benches` runs this with `--test`; keep that quick.
    if std::env::args().any(|a| a == "--bench") {
        latency_report();
    }
    let mut c = Criterion::default().configure_from_args();
    bench_insert(&mut c);
    bench_get(&mut c);
    c.final_summary();
}
