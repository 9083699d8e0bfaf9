//! nodes.conf files and CLUSTER NODES output written by Redis 7.0.15
//! (`tests/fixtures/`: a master migrating two slots, one with an announced
//! hostname importing, a replica, a failed replica, a node in handshake)
//! parse and write back byte for byte.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use keel_cluster::{flags, NodeLine, NodeName, NodesFile};

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)).unwrap()
}

#[test]
fn redis_nodes_files_write_back_identical() {
    for name in ["nodes-master-migrating.conf", "nodes-hostname-importing.conf", "nodes-importing.conf", "nodes-replica.conf"] {
        let text = fixture(name);
        let file = NodesFile::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(file.write(), text, "{name}");
        assert_eq!(file.current_epoch, 3, "{name}");
        assert_eq!(file.nodes.iter().filter(|n| n.flags & flags::MYSELF != 0).count(), 1, "{name}");
    }
}

#[test]
fn redis_files_say_what_redis_set_up() {
    let file = NodesFile::parse(&fixture("nodes-master-migrating.conf")).unwrap();
    let me = file.nodes.iter().find(|n| n.flags & flags::MYSELF != 0).unwrap();
    assert_eq!(me.slots, vec![(0, 199), (201, 201), (204, 5460)]);
    assert_eq!(me.migrating.iter().map(|m| m.0).collect::<Vec<_>>(), vec![7, 42]);
    let replica = file.nodes.iter().find(|n| n.flags & flags::REPLICA != 0).unwrap();
    assert_eq!(replica.master, Some(me.name));
    assert_eq!((replica.flags & flags::FAIL, replica.connected), (flags::FAIL, false));

    let file = NodesFile::parse(&fixture("nodes-hostname-importing.conf")).unwrap();
    let me = file.nodes.iter().find(|n| n.flags & flags::MYSELF != 0).unwrap();
    assert_eq!(me.hostname.as_deref(), Some("node-two.example"));
    assert_eq!(me.importing.len(), 1);
}

#[test]
fn cluster_nodes_lines_write_back_identical() {
    let text = fixture("cluster-nodes-handshake.txt");
    for line in text.lines() {
        let node = NodeLine::parse(line).unwrap();
        let mut out = String::new();
        node.write(&mut out);
        assert_eq!(out, line);
    }
    let handshake = text.lines().map(|l| NodeLine::parse(l).unwrap()).find(|n| n.flags & flags::HANDSHAKE != 0).unwrap();
    assert_eq!((handshake.port, handshake.cport, handshake.connected), (30999, 40999, false));
    assert!(NodeName::parse(handshake.name.as_bytes()).is_some());
}
