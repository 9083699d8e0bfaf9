//! Request parsing throughput: a pipeline of SET/GET requests as
//! memtier_benchmark sends them (W2: pipeline 20, 100-byte values), and a
//! single large SET, parsed request by request as the server does.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use keel_protocol::{parse_request, Limits};

fn encode(out: &mut Vec<u8>, argv: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", argv.len()).as_bytes());
    for a in argv {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn pipeline(requests: usize, value_len: usize) -> Vec<u8> {
    let value = vec![b'x'; value_len];
    let mut buf = Vec::new();
    for i in 0..requests {
        let key = format!("memtier-{}", 1_000_000 + i * 7919 % 1_000_000);
        if i % 2 == 0 {
            encode(&mut buf, &[b"SET", key.as_bytes(), &value]);
        } else {
            encode(&mut buf, &[b"GET", key.as_bytes()]);
        }
    }
    buf
}

fn parse_all(buf: &[u8], limits: &Limits) -> usize {
    let mut pos = 0;
    let mut args = 0;
    while let Ok(Some((req, n))) = parse_request(&buf[pos..], limits) {
        args += req.argv.len();
        pos += n;
    }
    assert_eq!(pos, buf.len());
    args
}

fn bench(c: &mut Criterion) {
    let limits = Limits::default();
    let mut group = c.benchmark_group("parse_request");
    for (name, requests, value_len) in [
        ("pipeline20_set_get_100B", 20, 100),
        ("pipeline20_set_get_6000B", 20, 6000),
        ("pipeline1000_set_get_10B", 1000, 10),
    ] {
        let buf = pipeline(requests, value_len);
        group.throughput(Throughput::Bytes(buf.len() as u64));
        group.bench_function(name, |b| b.iter(|| parse_all(black_box(&buf), &limits)));
    }
    let inline: Vec<u8> = (0..20)
        .flat_map(|i| format!("SET key:{i} \"some value\"\r\nGET key:{i}\r\n").into_bytes())
        .collect();
    group.throughput(Throughput::Bytes(inline.len() as u64));
    group.bench_function("inline40_set_get", |b| {
        b.iter(|| parse_all(black_box(&inline), &limits))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
