//! The bus codec at the rate a cluster node meets it: every node sends
//! each other node about a PING a second, and a PONG back, each with a
//! few gossip entries (a tenth of the nodes, at least 3) and a hostname;
//! and nodes.conf, written on every configuration change.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use keel_cluster::*;

fn ping(gossip_count: usize) -> Message {
    let mut slots = SlotBitmap::empty();
    (0..5461).for_each(|slot| slots.set(slot));
    let header = Header {
        port: 7000,
        pport: 0,
        cport: 17000,
        current_epoch: 6,
        config_epoch: 1,
        offset: 1 << 30,
        sender: NodeName::random(),
        slots,
        replica_of: None,
        ip: String::new(),
        flags: flags::MYSELF | flags::MASTER,
        state_ok: true,
        mflags: [0; 3],
    };
    let gossip = (0..gossip_count)
        .map(|i| Gossip { name: NodeName::random(), ping_sent: 0, pong_received: 1_700_000_000, ip: "10.0.0.12".into(), port: 7000 + i as u16, cport: 17000 + i as u16, flags: flags::MASTER, pport: 0 })
        .collect();
    Message { header, body: Body::Ping { gossip, extensions: vec![Extension::Hostname("node-1.cluster.example".into())] } }
}

fn bus(c: &mut Criterion) {
    let mut group = c.benchmark_group("cluster_bus");
    for gossip_count in [3, 30] {
        let message = ping(gossip_count);
        let frame = message.encode();
        group.throughput(Throughput::Bytes(frame.len() as u64));
        group.bench_function(format!("decode_ping_{gossip_count}_gossip"), |b| b.iter(|| Message::decode(black_box(&frame))));
        group.bench_function(format!("encode_ping_{gossip_count}_gossip"), |b| b.iter(|| black_box(&message).encode()));
    }
    group.finish();
}

fn nodes_file(c: &mut Criterion) {
    let masters: Vec<NodeName> = (0..50).map(|_| NodeName::random()).collect();
    let mut text = String::new();
    for (i, name) in masters.iter().enumerate() {
        let first = i * 327;
        let myself = if *name == masters[0] { "myself," } else { "" };
        text += &format!("{name} 10.0.0.{i}:7000@17000 {myself}master - 0 1795778711000 {i} connected {first}-{}\n", first + 326);
        text += &format!("{} 10.0.1.{i}:7000@17000 slave {name} 0 1795778711000 {i} connected\n", NodeName::random());
    }
    text += "vars currentEpoch 50 lastVoteEpoch 0\n";
    let file = NodesFile::parse(&text).expect("a valid file");
    let mut group = c.benchmark_group("nodes_file");
    group.throughput(Throughput::Bytes(text.len() as u64));
    group.bench_function("parse_100_nodes", |b| b.iter(|| NodesFile::parse(black_box(&text))));
    group.bench_function("write_100_nodes", |b| b.iter(|| black_box(&file).write()));
    group.finish();
}

criterion_group!(benches, bus, nodes_file);
criterion_main!(benches);
