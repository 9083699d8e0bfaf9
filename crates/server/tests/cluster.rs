//! Cluster mode over real processes: Keel nodes (and Debian's
//! redis-server 7.0 beside them) forming a cluster on the bus, clients
//! redirected with MOVED and ASK, `redis-cli --cluster` creating and
//! resharding it under load, a replica elected when its master is killed
//! with -9, manual failover, and nodes.conf across restarts.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use common::{bulk, err, free_port, int, ok, temp_dir, wait_for, Client, Frame, Server};

/// Short enough that failure detection and elections take a few seconds.
const NODE_TIMEOUT: &str = "1000";

struct Node {
    server: Server,
    bus: u16,
    dir: PathBuf,
}

impl Node {
    fn keel() -> Node {
        Node::keel_in(&temp_dir("cluster"), free_port())
    }

    /// A Keel node on `dir` with bus port `bus` (a restart reuses both).
    fn keel_in(dir: &std::path::Path, bus: u16) -> Node {
        let bus_text = bus.to_string();
        let server = Server::start_in(
            dir,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                &bus_text,
                "--cluster-node-timeout",
                NODE_TIMEOUT,
                "--enable-debug-command",
                "yes",
            ],
        );
        Node { server, bus, dir: dir.to_path_buf() }
    }

    fn redis() -> Option<Node> {
        let bus = free_port();
        let bus_text = bus.to_string();
        let dir = temp_dir("cluster-redis");
        let conf = dir.join("nodes.conf").display().to_string();
        let server = Server::start_redis(&[
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            &bus_text,
            "--cluster-config-file",
            &conf,
            "--cluster-node-timeout",
            NODE_TIMEOUT,
        ])?;
        Some(Node { server, bus, dir })
    }

    fn port(&self) -> u16 {
        self.server.port
    }

    fn client(&self) -> Client {
        self.server.client()
    }

    fn id(&self) -> String {
        text(&self.client().cmd("CLUSTER MYID"))
    }

    fn info(&self, field: &str) -> String {
        let reply = text(&self.client().cmd("CLUSTER INFO"));
        reply.lines().find_map(|l| l.strip_prefix(&format!("{field}:"))).unwrap_or("").trim().to_string()
    }

    /// CLUSTER NODES, once the node answers it: a replica answers
    /// -LOADING while it loads its master's data, as Redis's does.
    fn nodes(&self) -> String {
        let mut c = self.client();
        let mut reply = c.cmd("CLUSTER NODES");
        for _ in 0..3000 {
            let Frame::Error(e) = &reply else { break };
            if !e.starts_with(b"LOADING") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
            reply = c.cmd("CLUSTER NODES");
        }
        text(&reply)
    }
}

fn text(frame: &Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("expected text, got {other:?}"),
    }
}

/// Joins `nodes` into one cluster without redis-cli: distinct epochs, the
/// slots split evenly among `masters` of them, MEETs, then waits until
/// every node sees every other and the cluster is ok.
fn form(nodes: &[&Node], masters: usize) {
    let per = 16384 / masters;
    for (i, node) in nodes.iter().take(masters).enumerate() {
        let from = i * per;
        let to = if i + 1 == masters { 16383 } else { from + per - 1 };
        let mut c = node.client();
        assert_eq!(c.send(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]), ok());
        assert_eq!(c.send(&["CLUSTER", "ADDSLOTSRANGE", &from.to_string(), &to.to_string()]), ok());
    }
    let first = nodes[0];
    for node in &nodes[1..] {
        let reply = first.client().send(&["CLUSTER", "MEET", "127.0.0.1", &node.port().to_string(), &node.bus.to_string()]);
        assert_eq!(reply, ok());
    }
    wait_for("every node knows every other", || nodes.iter().all(|n| n.info("cluster_known_nodes") == nodes.len().to_string()));
    wait_for("the cluster is ok everywhere", || nodes.iter().all(|n| n.info("cluster_state") == "ok"));
    // A node learned from gossip is known (and its slots counted) a cron
    // tick before its link is up: Redis lists it `disconnected` until then.
    wait_for("every link is up", || {
        nodes.iter().all(|n| n.nodes().lines().all(|l| l.contains(" connected") && !l.contains("handshake")))
    });
}

/// A cluster client: sends to `port`, follows MOVED (remembering where
/// the slot went) and ASK (with ASKING), as cluster clients do.
struct ClusterClient {
    slots: HashMap<u16, u16>,
    conns: HashMap<u16, Client>,
    seed: u16,
}

impl ClusterClient {
    fn new(seed: u16) -> ClusterClient {
        ClusterClient { slots: HashMap::new(), conns: HashMap::new(), seed }
    }

    fn conn(&mut self, port: u16) -> &mut Client {
        self.conns.entry(port).or_insert_with(|| Client::connect(port))
    }

    fn send(&mut self, argv: &[&str]) -> Frame {
        let slot = key_slot(argv[1].as_bytes());
        let mut port = *self.slots.get(&slot).unwrap_or(&self.seed);
        let mut asking = false;
        for _ in 0..16 {
            let conn = self.conn(port);
            if asking {
                assert_eq!(conn.send(&["ASKING"]), ok());
            }
            let reply = conn.send(argv);
            let Frame::Error(e) = &reply else { return reply };
            let e = String::from_utf8_lossy(e).into_owned();
            let redirect = |e: &str| e.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
            if e.starts_with("MOVED ") {
                port = redirect(&e).expect("MOVED names a port");
                self.slots.insert(slot, port);
                asking = false;
            } else if e.starts_with("ASK ") {
                port = redirect(&e).expect("ASK names a port");
                asking = true;
            } else if e.starts_with("TRYAGAIN") || e.starts_with("CLUSTERDOWN") {
                std::thread::sleep(std::time::Duration::from_millis(20));
            } else {
                return reply;
            }
        }
        panic!("too many redirections for {argv:?}");
    }
}

/// Redis Cluster's CRC16 slot of a key, hash tags included.
fn key_slot(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc & 16383
}

fn redis_cli_present() -> bool {
    let present = std::path::Path::new("/usr/bin/redis-cli").exists();
    if !present {
        eprintln!("redis-cli not installed: skipping (scripts/test.sh installs redis-tools)");
    }
    present
}

fn redis_cli(args: &[&str]) -> String {
    let out = Command::new("redis-cli").args(args).output().expect("run redis-cli");
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    // The reshard's plan (a line per slot) would hide the error that
    // follows it in a CI log cut to its head and tail.
    let shown: Vec<&str> = text.lines().filter(|l| !l.trim_start().starts_with("Moving slot ")).collect();
    assert!(out.status.success(), "redis-cli {args:?} failed:\n{}", shown.join("\n"));
    text
}

#[test]
fn three_masters_redirect_clients_and_agree() {
    let nodes = [Node::keel(), Node::keel(), Node::keel()];
    let refs: Vec<&Node> = nodes.iter().collect();
    form(&refs, 3);
    for node in &nodes {
        assert_eq!(node.info("cluster_slots_assigned"), "16384");
        assert_eq!(node.info("cluster_size"), "3");
        assert_eq!(node.client().cmd("INFO cluster"), bulk("# Cluster\r\ncluster_enabled:1\r\n"));
    }
    // Slot 12182 ("foo") is the third node's; the others say where it is.
    let third = format!("127.0.0.1:{}", nodes[2].port());
    assert_eq!(nodes[0].client().cmd("CLUSTER KEYSLOT foo"), int(12182));
    assert_eq!(nodes[0].client().cmd("SET foo bar"), err(&format!("MOVED 12182 {third}")));
    assert_eq!(nodes[1].client().cmd("GET foo"), err(&format!("MOVED 12182 {third}")));
    assert_eq!(nodes[2].client().cmd("SET foo bar"), ok());
    assert_eq!(nodes[2].client().cmd("GET foo"), bulk("bar"));
    assert_eq!(nodes[2].client().cmd("MSET foo 1 bar 2"), err("CROSSSLOT Keys in request don't hash to the same slot"));
    assert_eq!(nodes[2].client().cmd("MSET {foo}a 1 {foo}b 2"), ok());
    assert_eq!(nodes[2].client().cmd("CLUSTER COUNTKEYSINSLOT 12182"), int(3));
    assert_eq!(nodes[2].client().cmd("SELECT 1"), err("ERR SELECT is not allowed in cluster mode"));
    // A script may touch this node's keys of one slot, unless its flags say.
    let script = "#!lua\nredis.call('get', 'foo'); return redis.call('get', 'a')";
    let reply = text_of_error(&nodes[2].client().send(&["EVAL", script, "0"]));
    assert!(reply.starts_with("ERR Script attempted to access keys that do not hash to the same slot"), "{reply}");
    let script = "#!lua flags=allow-cross-slot-keys\nredis.call('get', 'foo'); return redis.call('get', 'a')";
    assert_eq!(nodes[2].client().send(&["EVAL", script, "0"]), Frame::Null);
    let reply = text_of_error(&nodes[0].client().send(&["EVAL", "return redis.call('get', 'foo')", "0"]));
    assert!(reply.starts_with("ERR Script attempted to access a non local key in a cluster node"), "{reply}");
    // A transaction is judged whole at EXEC.
    let mut c = nodes[0].client();
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("GET foo"), err(&format!("MOVED 12182 {third}")));
    assert_eq!(c.cmd("EXEC"), err("EXECABORT Transaction discarded because of previous errors."));
    // A cluster client spreads keys over all three.
    let mut cc = ClusterClient::new(nodes[0].port());
    for i in 0..300 {
        assert_eq!(cc.send(&["SET", &format!("k{i}"), &format!("v{i}")]), ok());
    }
    let counts: Vec<i64> = nodes
        .iter()
        .map(|n| match n.client().cmd("DBSIZE") {
            Frame::Integer(i) => i,
            other => panic!("DBSIZE: {other:?}"),
        })
        .collect();
    assert_eq!(counts.iter().sum::<i64>(), 303);
    assert!(counts.iter().all(|&c| c > 50), "keys spread over the masters: {counts:?}");
    // Every node tells the same slot map.
    let slots: Vec<Frame> = nodes.iter().map(|n| n.client().cmd("CLUSTER SLOTS")).collect();
    assert!(slots.windows(2).all(|w| sorted_slots(&w[0]) == sorted_slots(&w[1])), "{slots:?}");
    // PUBLISH reaches subscribers on the other nodes, over the bus.
    let mut sub = nodes[1].client();
    sub.cmd("SUBSCRIBE news");
    assert_eq!(nodes[0].client().cmd("PUBLISH news hello"), int(0));
    assert_eq!(sub.read(), Frame::Array(vec![bulk("message"), bulk("news"), bulk("hello")]));
}

fn text_of_error(frame: &Frame) -> String {
    match frame {
        Frame::Error(e) => String::from_utf8_lossy(e).into_owned(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn sorted_slots(frame: &Frame) -> Vec<String> {
    let Frame::Array(ranges) = frame else { panic!("CLUSTER SLOTS: {frame:?}") };
    let mut out: Vec<String> = ranges.iter().map(|r| format!("{r:?}")).collect();
    out.sort();
    out
}

#[test]
fn asking_reaches_a_slot_being_migrated() {
    let nodes = [Node::keel(), Node::keel()];
    form(&[&nodes[0], &nodes[1]], 2);
    // "foo" (12182) is the second node's: migrate it to the first.
    let (source, target) = (&nodes[1], &nodes[0]);
    let (source_id, target_id) = (source.id(), target.id());
    let mut s = source.client();
    assert_eq!(s.cmd("SET foo 1"), ok());
    assert_eq!(target.client().send(&["CLUSTER", "SETSLOT", "12182", "IMPORTING", &source_id]), ok());
    assert_eq!(s.send(&["CLUSTER", "SETSLOT", "12182", "MIGRATING", &target_id]), ok());
    let to = format!("127.0.0.1:{}", target.port());
    // A key still here is served here; a missing one is asked for there.
    assert_eq!(s.cmd("GET foo"), bulk("1"));
    assert_eq!(s.cmd("GET {foo}x"), err(&format!("ASK 12182 {to}")));
    assert_eq!(s.cmd("MGET foo {foo}x"), err("TRYAGAIN Multiple keys request during rehashing of slot"));
    let mut t = target.client();
    assert_eq!(t.cmd("GET foo"), err(&format!("MOVED 12182 127.0.0.1:{}", source.port())));
    assert_eq!(t.cmd("ASKING"), ok());
    assert_eq!(t.cmd("SET {foo}x 2"), ok());
    // ASKING lasts one command.
    assert_eq!(t.cmd("GET {foo}x"), err(&format!("MOVED 12182 127.0.0.1:{}", source.port())));
    let reply = s.send(&["MIGRATE", "127.0.0.1", &target.port().to_string(), "", "0", "5000", "KEYS", "foo"]);
    assert_eq!(reply, ok());
    assert_eq!(s.cmd("CLUSTER COUNTKEYSINSLOT 12182"), int(0));
    assert_eq!(t.send(&["CLUSTER", "SETSLOT", "12182", "NODE", &target_id]), ok());
    assert_eq!(s.send(&["CLUSTER", "SETSLOT", "12182", "NODE", &target_id]), ok());
    assert_eq!(t.cmd("GET foo"), bulk("1"));
    assert_eq!(t.cmd("GET {foo}x"), bulk("2"));
    assert_eq!(s.cmd("GET foo"), err(&format!("MOVED 12182 {to}")));
    // The importer bumped its epoch, so the whole cluster follows it.
    wait_for("the source learns the new owner", || {
        source.nodes().lines().any(|l| l.contains(&target_id) && l.contains("12182"))
    });
}

#[test]
fn keel_and_redis_nodes_form_one_cluster() {
    let Some(redis) = Node::redis() else { return };
    let keel = [Node::keel(), Node::keel()];
    form(&[&keel[0], &keel[1], &redis], 3);
    // Redis sees the Keel nodes as full members, and the reverse.
    for line in redis.nodes().lines() {
        assert!(line.contains("master") && line.contains(" connected "), "{line}");
    }
    let mut cc = ClusterClient::new(keel[0].port());
    for i in 0..300 {
        assert_eq!(cc.send(&["SET", &format!("k{i}"), &format!("v{i}")]), ok());
    }
    let mut cc = ClusterClient::new(redis.port());
    for i in 0..300 {
        assert_eq!(cc.send(&["GET", &format!("k{i}")]), bulk(&format!("v{i}")));
    }
    match redis.client().cmd("DBSIZE") {
        Frame::Integer(n) => assert!(n > 50, "Redis holds its third: {n}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_replica_is_elected_when_its_master_is_killed() {
    let masters = [Node::keel(), Node::keel(), Node::keel()];
    form(&[&masters[0], &masters[1], &masters[2]], 3);
    let replica = Node::keel();
    let master_id = masters[0].id();
    let mut r = replica.client();
    let meet = r.send(&["CLUSTER", "MEET", "127.0.0.1", &masters[0].port().to_string(), &masters[0].bus.to_string()]);
    assert_eq!(meet, ok());
    wait_for("the replica knows the master", || replica.nodes().contains(&master_id));
    assert_eq!(r.send(&["CLUSTER", "REPLICATE", &master_id]), ok());
    wait_for("every node sees the replica", || {
        masters.iter().all(|m| m.nodes().lines().any(|l| l.contains("slave") && l.contains(&master_id)))
    });
    // Keys of the first master's slots, acknowledged by the replica.
    let mut m = masters[0].client();
    let keys: Vec<String> = (0..2000).map(|i| format!("k{i}")).filter(|k| key_slot(k.as_bytes()) < 5461).collect();
    for k in &keys {
        assert_eq!(m.send(&["SET", k, k]), ok());
    }
    assert_eq!(m.cmd("WAIT 1 5000"), int(1));
    let [dead, second, third] = masters;
    let dead_dir = dead.dir.clone();
    let dead_bus = dead.bus;
    dead.server.kill9();
    wait_for("the replica is promoted", || matches!(replica.client().cmd("ROLE"), Frame::Array(a) if a[0] == bulk("master")));
    wait_for("the cluster is ok again", || {
        [&second, &third, &replica].iter().all(|n| n.info("cluster_state") == "ok")
    });
    let mut cc = ClusterClient::new(second.port());
    for k in &keys {
        assert_eq!(cc.send(&["GET", k]), bulk(k));
    }
    // The old master comes back as a replica of the new one.
    let back = Node::keel_in(&dead_dir, dead_bus);
    let replica_id = replica.id();
    wait_for("the old master follows the new one", || {
        back.nodes().lines().any(|l| l.contains("myself,slave") && l.contains(&replica_id))
    });
    wait_for("its new master knows it", || {
        replica.nodes().lines().any(|l| l.contains("slave") && l.contains(&replica_id) && !l.contains("myself"))
    });
    wait_for("it syncs", || back.client().info_field("replication", "master_link_status") == "up");
    assert_eq!(back.client().cmd("DBSIZE"), int(keys.len() as i64));
    // A manual failover gives it its slots back, with no write lost.
    assert_eq!(back.client().cmd("CLUSTER FAILOVER"), ok());
    wait_for("the manual failover", || matches!(back.client().cmd("ROLE"), Frame::Array(a) if a[0] == bulk("master")));
    wait_for("the other becomes its replica", || {
        matches!(replica.client().cmd("ROLE"), Frame::Array(a) if a[0] == bulk("slave"))
    });
    assert_eq!(back.client().cmd("DBSIZE"), int(keys.len() as i64));
}

#[test]
fn nodes_conf_brings_a_node_back_as_it_was() {
    let nodes = [Node::keel(), Node::keel(), Node::keel()];
    form(&[&nodes[0], &nodes[1], &nodes[2]], 3);
    let [first, second, third] = nodes;
    let (id, dir, bus) = (first.id(), first.dir.clone(), first.bus);
    let before = first.nodes().lines().find(|l| l.contains("myself")).map(|l| l.split(' ').nth(8).map(str::to_string));
    first.server.kill9();
    let back = Node::keel_in(&dir, bus);
    assert_eq!(back.id(), id);
    let after = back.nodes().lines().find(|l| l.contains("myself")).map(|l| l.split(' ').nth(8).map(str::to_string));
    assert_eq!(after, before, "the same slots after a restart");
    wait_for("the cluster is whole again", || [&back, &second, &third].iter().all(|n| n.info("cluster_state") == "ok"));
    assert_eq!(back.info("cluster_known_nodes"), "3");
    let text = std::fs::read_to_string(dir.join("nodes.conf")).expect("nodes.conf");
    assert!(text.lines().last().is_some_and(|l| l.starts_with("vars currentEpoch ")), "{text}");
}

#[test]
fn redis_cli_creates_and_reshards_under_load_losing_nothing() {
    if !redis_cli_present() {
        return;
    }
    let nodes = [Node::keel(), Node::keel(), Node::keel()];
    let addrs: Vec<String> = nodes.iter().map(|n| format!("127.0.0.1:{}", n.port())).collect();
    let mut args = vec!["--cluster", "create"];
    args.extend(addrs.iter().map(String::as_str));
    args.push("--cluster-yes");
    redis_cli(&args);
    wait_for("the cluster is ok", || nodes.iter().all(|n| n.info("cluster_state") == "ok"));
    let seed = nodes[0].port();
    let mut cc = ClusterClient::new(seed);
    for i in 0..2000 {
        assert_eq!(cc.send(&["SET", &format!("k{i}"), "0"]), ok());
    }
    // Writers keep incrementing keys while slots move; every
    // acknowledged increment must be there at the end.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(HashMap::new()));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (stop, acked) = (stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut cc = ClusterClient::new(seed);
                let mut i = w;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("k{}", i % 2000);
                    let Frame::Integer(n) = cc.send(&["INCR", &key]) else { panic!("INCR failed") };
                    acked.lock().expect("acked").insert(key, n);
                    i += 2;
                }
            })
        })
        .collect();
    let target = nodes[2].id();
    let from = nodes[0].id();
    redis_cli(&[
        "--cluster",
        "reshard",
        &addrs[0],
        "--cluster-from",
        &from,
        "--cluster-to",
        &target,
        "--cluster-slots",
        "300",
        "--cluster-yes",
    ]);
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().expect("writer");
    }
    let check = redis_cli(&["--cluster", "check", &addrs[0]]);
    assert!(check.contains("[OK] All 16384 slots covered."), "{check}");
    assert!(!check.contains("[WARNING]"), "no slot left migrating or importing:\n{check}");
    let mine = nodes[2].nodes().lines().find(|l| l.contains("myself")).map(str::to_string).unwrap_or_default();
    assert!(mine.contains(" 0-299 "), "the target serves the moved slots: {mine}");
    let mut cc = ClusterClient::new(nodes[1].port());
    for (key, n) in acked.lock().expect("acked").iter() {
        assert_eq!(cc.send(&["GET", key]), bulk(&n.to_string()), "{key}");
    }
    let total: i64 = nodes
        .iter()
        .map(|n| match n.client().cmd("DBSIZE") {
            Frame::Integer(i) => i,
            other => panic!("{other:?}"),
        })
        .sum();
    assert_eq!(total, 2000);
}

/// Redis's clusterRedirectBlockedClientIfNeeded and removeChannelsInSlot,
/// on two masters: a slot given away ends the waits on its keys with
/// -MOVED and unsubscribes its shard channels; a slot deleted takes the
/// cluster down, which ends the other waits with -CLUSTERDOWN; shard
/// channels are redirected by slot as keys are; a slot
/// taken by a newer epoch loses its keys here, invalidated for the
/// clients that cache them (`signals_dropped_keys`: Redis 7.0's
/// delKeysInSlot deletes them silently, stale caches and all; Keel does
/// as 7.2, which signals each key as modified).
fn a_slot_leaving_ends_its_waits_and_shard_channels(a: Node, b: Node, signals_dropped_keys: bool) {
    form(&[&a, &b], 2);
    // "b" and "{b}ch" hash to slot 3300, "c" to 7365, "g" to 7233: all the
    // first node's.
    assert_eq!(a.client().cmd("SET g v"), ok());
    let mut tracker = a.client();
    assert!(matches!(tracker.send(&["HELLO", "3"]), Frame::Map(_)));
    assert_eq!(tracker.cmd("CLIENT TRACKING on"), ok());
    assert_eq!(tracker.cmd("GET g"), bulk("v"));
    let mut blocked = a.client();
    blocked.write_command(&["BLPOP", "b", "0"]);
    let mut reader = a.client();
    reader.write_command(&["XREAD", "BLOCK", "0", "STREAMS", "c", "$"]);
    let mut sub = a.client();
    assert_eq!(sub.send(&["SSUBSCRIBE", "{b}ch"]), Frame::Array(vec![bulk("ssubscribe"), bulk("{b}ch"), int(1)]));
    wait_for("two clients blocked", || text(&a.client().cmd("INFO clients")).contains("blocked_clients:2"));
    let b_id = b.id();
    assert_eq!(b.client().send(&["CLUSTER", "SETSLOT", "3300", "NODE", &b_id]), ok());
    assert_eq!(a.client().send(&["CLUSTER", "SETSLOT", "3300", "NODE", &b_id]), ok());
    assert_eq!(blocked.read(), err(&format!("MOVED 3300 127.0.0.1:{}", b.port())));
    assert_eq!(sub.read(), Frame::Array(vec![bulk("sunsubscribe"), bulk("{b}ch"), int(0)]));
    // Out of pub/sub mode again: an ordinary command is answered.
    assert_eq!(sub.cmd("PING"), Frame::Simple(b"PONG".to_vec()));
    // Shard channels are routed by slot, as keys are.
    let moved = err(&format!("MOVED 3300 127.0.0.1:{}", b.port()));
    assert_eq!(sub.send(&["SSUBSCRIBE", "{b}ch"]), moved);
    assert_eq!(sub.send(&["SPUBLISH", "{b}ch", "m"]), moved);
    assert_eq!(sub.send(&["SSUBSCRIBE", "g", "c"]), err("CROSSSLOT Keys in request don't hash to the same slot"));
    assert_eq!(a.client().cmd("CLUSTER DELSLOTS 7365"), ok());
    assert_eq!(reader.read(), err("CLUSTERDOWN The cluster is down"));
    assert!(text(&a.client().cmd("INFO clients")).contains("blocked_clients:0"));
    // The second node takes slot 7233 with its newer epoch: the first
    // drops the slot's keys, and a client caching one hears of it.
    assert_eq!(b.client().send(&["CLUSTER", "SETSLOT", "7233", "NODE", &b_id]), ok());
    if signals_dropped_keys {
        assert_eq!(tracker.read(), Frame::Push(vec![bulk("invalidate"), Frame::Array(vec![bulk("g")])]));
    }
    wait_for("the slot's keys dropped", || a.client().cmd("CLUSTER COUNTKEYSINSLOT 7233") == int(0));
}

#[test]
fn a_slot_leaving_ends_its_waits_and_shard_channels_in_keel() {
    a_slot_leaving_ends_its_waits_and_shard_channels(Node::keel(), Node::keel(), true);
}

/// The same steps against two redis-server nodes, so that the test itself
/// is checked against Redis.
#[test]
fn a_slot_leaving_ends_its_waits_and_shard_channels_in_redis() {
    let (Some(a), Some(b)) = (Node::redis(), Node::redis()) else { return };
    a_slot_leaving_ends_its_waits_and_shard_channels(a, b, false);
}

#[test]
fn cluster_commands_outside_cluster_mode_are_refused() {
    let server = Server::start(&[]);
    let mut c = server.client();
    for line in ["CLUSTER INFO", "CLUSTER NODES", "ASKING", "READONLY", "READWRITE", "CLUSTER KEYSLOT x"] {
        assert_eq!(c.cmd(line), err("ERR This instance has cluster support disabled"), "{line}");
    }
}

/// One empty cluster node of each, the same commands to both: every reply
/// must be the same once each node's own id and ports are masked.
#[test]
fn a_lone_node_answers_as_redis_does() {
    let Some(redis) = Node::redis() else { return };
    let keel = Node::keel();
    let other = "0123456789abcdef0123456789abcdef01234567";
    let script = [
        "CLUSTER KEYSLOT foo",
        "CLUSTER KEYSLOT {user1}.a",
        "CLUSTER COUNTKEYSINSLOT -1",
        "CLUSTER COUNTKEYSINSLOT 16384",
        "CLUSTER COUNTKEYSINSLOT abc",
        "CLUSTER COUNTKEYSINSLOT 100",
        "CLUSTER GETKEYSINSLOT 0 -1",
        "CLUSTER GETKEYSINSLOT 16384 1",
        "CLUSTER GETKEYSINSLOT 0 10",
        "CLUSTER ADDSLOTS 16384",
        "CLUSTER ADDSLOTS abc",
        "CLUSTER ADDSLOTS 1 1",
        "CLUSTER ADDSLOTS 5",
        "CLUSTER ADDSLOTS 5",
        "CLUSTER ADDSLOTSRANGE 10 9",
        "CLUSTER ADDSLOTSRANGE 1 2 3",
        "CLUSTER ADDSLOTSRANGE 10 20 30 40",
        "CLUSTER ADDSLOTSRANGE 15 16",
        "CLUSTER DELSLOTS 6",
        "CLUSTER DELSLOTS 5",
        "CLUSTER DELSLOTSRANGE 30 40",
        "CLUSTER SETSLOT 100 MIGRATING MYID",
        "CLUSTER SETSLOT 10 MIGRATING OTHER",
        "CLUSTER SETSLOT 10 IMPORTING MYID",
        "CLUSTER SETSLOT 100 NODE OTHER",
        "CLUSTER SETSLOT 100 FOO",
        "CLUSTER SETSLOT 99999 STABLE",
        "CLUSTER SETSLOT 10 STABLE",
        "CLUSTER SET-CONFIG-EPOCH -1",
        "CLUSTER SET-CONFIG-EPOCH 5",
        "CLUSTER SET-CONFIG-EPOCH 6",
        "CLUSTER BUMPEPOCH",
        "CLUSTER FORGET OTHER",
        "CLUSTER FORGET MYID",
        "CLUSTER REPLICATE MYID",
        "CLUSTER REPLICATE OTHER",
        "CLUSTER REPLICAS MYID",
        "CLUSTER FAILOVER",
        "CLUSTER FAILOVER FOO",
        "CLUSTER RESET FOO",
        "CLUSTER MEET 1.2.3 7000",
        "CLUSTER MEET 127.0.0.1 abc",
        "CLUSTER COUNT-FAILURE-REPORTS MYID",
        "CLUSTER NOSUCH",
        "CLUSTER INFO",
        "CLUSTER SLOTS",
        "CLUSTER SHARDS",
        "CLUSTER NODES",
        "GET foo",
        "SET {user1}.a 1",
        "MSET a 1 b 2",
        "SELECT 1",
        "SELECT 0",
        "MOVE a 1",
        "SWAPDB 0 1",
        "COPY a b DB 1",
        "REPLICAOF 127.0.0.1 1",
        "READONLY",
        "READWRITE",
        "ASKING",
        "INFO cluster",
        // Arguments with spaces: split at '|'.
        "EVAL|return redis.call('get', KEYS[1])|1|foo",
        "EVAL|return 1|0",
        "EVAL|return redis.call('get', 'x')|0",
        "EVAL|#!lua\nreturn redis.call('get', 'x')|0",
        "EVAL|#!lua flags=no-cluster\nreturn 1|0",
        "FUNCTION|LOAD|#!lua name=nc\nredis.register_function{function_name='nc', callback=function() return 1 end, flags={'no-cluster'}}",
        "FCALL|nc|0",
    ];
    let run = |node: &Node| -> Vec<String> {
        let id = node.id();
        let mut c = node.client();
        let mask = |s: String| {
            let s = s.replace(&id, "MYID").replace(&node.bus.to_string(), "BUS").replace(&node.port().to_string(), "PORT");
            // CLUSTER NODES: the ping and pong times of the node itself.
            s.split(' ').map(|w| if w.len() == 13 && w.bytes().all(|b| b.is_ascii_digit()) { "TIME" } else { w }).collect::<Vec<_>>().join(" ")
        };
        script
            .iter()
            .map(|line| {
                let line = line.replace("MYID", &id).replace("OTHER", other);
                let argv: Vec<&str> = if line.contains('|') { line.split('|').collect() } else { line.split(' ').collect() };
                mask(render(&c.send(&argv)))
            })
            .collect()
    };
    let (expected, got) = (run(&redis), run(&keel));
    for ((line, want), have) in script.iter().zip(&expected).zip(&got) {
        assert_eq!(have, want, "{line}");
    }
}

/// A reply as text, for masking and reading.
fn render(frame: &Frame) -> String {
    let list = |items: &[Frame]| items.iter().map(render).collect::<Vec<_>>().join(", ");
    match frame {
        Frame::Simple(b) => format!("+{}", String::from_utf8_lossy(b)),
        Frame::Error(b) => format!("-{}", String::from_utf8_lossy(b)),
        Frame::Bulk(b) => format!("${}", String::from_utf8_lossy(b)),
        Frame::Integer(i) => format!(":{i}"),
        Frame::Null => "(nil)".into(),
        Frame::Array(items) => format!("[{}]", list(items)),
        other => format!("{other:?}"),
    }
}

/// `cluster-link-sendbuf-limit`: a node whose peer stops reading frees the
/// link once its send buffer passes the limit, counts it in CLUSTER INFO,
/// and makes the link again once the peer reads.
#[test]
fn a_link_past_its_send_buffer_limit_is_freed() {
    let (a, b) = (Node::keel(), Node::keel());
    form(&[&a, &b], 2);
    assert_eq!(a.client().cmd("CONFIG SET cluster-link-sendbuf-limit 1mb"), ok());
    assert_eq!(a.info("total_cluster_links_buffer_limit_exceeded"), "0");
    b.server.signal("-STOP");
    // PUBLISH goes to every node over the bus: what b does not read piles
    // up past the sockets' buffers into the link's.
    let payload = "x".repeat(256 * 1024);
    let mut c = a.client();
    wait_for("a link freed over the limit", || {
        c.send(&["PUBLISH", "ch", &payload]);
        a.info("total_cluster_links_buffer_limit_exceeded") != "0"
    });
    b.server.signal("-CONT");
    assert!(a.server.log().contains("due to exceeding send buffer memory limit"), "{}", a.server.log());
    wait_for("the cluster whole again", || a.info("cluster_state") == "ok" && b.info("cluster_known_nodes") == "2");
}

/// DEBUG DROP-CLUSTER-PACKET-FILTER drops the bus messages of one type
/// that a node receives (counted, then unread), as Redis's cluster tests
/// use it; -1 lets every type through again.
#[test]
fn a_debug_filter_drops_one_type_of_bus_message() {
    let (a, b) = (Node::keel(), Node::keel());
    form(&[&a, &b], 2);
    let mut subscriber = a.client();
    assert_eq!(subscriber.cmd("SUBSCRIBE ch"), Frame::Array(vec![bulk("subscribe"), bulk("ch"), int(1)]));
    let mut c = a.client();
    // Type 4: PUBLISH, which carries a message to the other nodes'
    // subscribers. CLUSTER INFO leaves out a counter still at 0.
    assert_eq!(c.cmd("DEBUG DROP-CLUSTER-PACKET-FILTER 4"), ok());
    assert_eq!(b.client().cmd("PUBLISH ch dropped"), int(0));
    wait_for("the publish received", || a.info("cluster_stats_messages_publish_received") == "1");
    assert_eq!(c.cmd("DEBUG DROP-CLUSTER-PACKET-FILTER -1"), ok());
    assert_eq!(b.client().cmd("PUBLISH ch delivered"), int(0));
    assert_eq!(subscriber.read(), Frame::Array(vec![bulk("message"), bulk("ch"), bulk("delivered")]));
}

/// `cluster-replica-no-failover`, set at run time, reaches the other
/// nodes as the node's `nofailover` flag, as Redis's does.
#[test]
fn the_nofailover_flag_reaches_the_other_nodes() {
    let (a, b) = (Node::keel(), Node::keel());
    form(&[&a, &b], 2);
    let b_id = b.id();
    let flags_of_b = || a.nodes().lines().find(|l| l.starts_with(&b_id)).map(|l| l.split(' ').nth(2).unwrap_or("").to_string());
    assert_eq!(flags_of_b().as_deref(), Some("master"));
    assert_eq!(b.client().cmd("CONFIG SET cluster-replica-no-failover yes"), ok());
    wait_for("the flag seen", || flags_of_b().as_deref() == Some("master,nofailover"));
    assert_eq!(b.client().cmd("CONFIG SET cluster-replica-no-failover no"), ok());
    wait_for("the flag gone", || flags_of_b().as_deref() == Some("master"));
}

/// Five Keel nodes: masters a and b (nodes 0 and 1), a with replicas 2
/// and 3, b with replica 4, that layout known to every node (a node that
/// missed b's replica would see no master to migrate to once it is gone).
fn masters_a_and_b_with_two_and_one_replicas() -> Vec<Node> {
    let nodes: Vec<Node> = (0..5).map(|_| Node::keel()).collect();
    form(&nodes.iter().collect::<Vec<_>>(), 2);
    let (a, b) = (&nodes[0], &nodes[1]);
    for (replica, master) in [(&nodes[2], a), (&nodes[3], a), (&nodes[4], b)] {
        assert_eq!(replica.client().send(&["CLUSTER", "REPLICATE", &master.id()]), ok());
    }
    wait_for("a's two replicas and b's one known to all", || {
        nodes.iter().all(|n| replicas_seen_by(n, a) == 2 && replicas_seen_by(n, b) == 1)
    });
    nodes
}

/// How many replicas of `master` `node`'s CLUSTER NODES lists.
fn replicas_seen_by(node: &Node, master: &Node) -> usize {
    node.nodes().lines().filter(|l| l.contains(&format!("slave {}", master.id()))).count()
}

/// A master left with no working replica gets one from a master that
/// keeps more than `cluster-migration-barrier` (1) working replicas, as
/// Redis's replica migration moves one.
#[test]
fn a_replica_migrates_to_an_orphaned_master() {
    let nodes = masters_a_and_b_with_two_and_one_replicas();
    let (a, b) = (&nodes[0], &nodes[1]);
    let replicas_of = |master: &Node| replicas_seen_by(a, master);
    // b's one replica stops answering: b is orphaned.
    nodes[4].server.signal("-STOP");
    let migrated = || nodes[2..4].iter().any(|r| r.nodes().contains(&format!("myself,slave {}", b.id())));
    wait_for("one of a's replicas following b", migrated);
    nodes[4].server.signal("-CONT");
    wait_for("a left with one replica", || replicas_of(a) == 1);
}

/// A replica sends writes to its master with -MOVED, READONLY or not,
/// a script by the flags it declares, as Redis's getNodeByQuery does;
/// reads run on it after READONLY.
#[test]
fn a_replica_redirects_writes_and_scripts_that_may_write() {
    let (master, replica) = (Node::keel(), Node::keel());
    form(&[&master, &replica], 1);
    assert_eq!(replica.client().send(&["CLUSTER", "REPLICATE", &master.id()]), ok());
    wait_for("the replica syncs", || replica.client().info_field("replication", "master_link_status") == "up");
    let mut m = master.client();
    assert_eq!(m.cmd("SET a 1"), ok());
    assert_eq!(m.cmd("WAIT 1 5000"), int(1));
    let moved = |reply: Frame| matches!(&reply, Frame::Error(e) if e.starts_with(b"MOVED "));
    let mut r = replica.client();
    assert!(moved(r.cmd("GET a")), "a read before READONLY");
    assert_eq!(r.cmd("READONLY"), ok());
    assert_eq!(r.cmd("GET a"), bulk("1"));
    assert_eq!(r.cmd("MULTI"), ok());
    assert!(moved(r.cmd("SET a 2")));
    assert!(matches!(r.cmd("EXEC"), Frame::Error(e) if e.starts_with(b"EXECABORT")));
    let writes = "#!lua\nreturn redis.call('del', KEYS[1])";
    assert!(moved(r.send(&["EVAL", writes, "1", "a"])), "a script that may write");
    let reads = "#!lua flags=no-writes\nreturn redis.call('get', KEYS[1])";
    assert_eq!(r.send(&["EVAL", reads, "1", "a"]), bulk("1"));
    assert_eq!(m.cmd("GET a"), bulk("1"));
}

/// A replica deleted with CLUSTER FORGET leaves its master with none to
/// miss: no replica migrates to it, where one would to a master whose
/// replica failed (the test above).
#[test]
fn a_master_whose_replica_is_forgotten_draws_none() {
    let nodes = masters_a_and_b_with_two_and_one_replicas();
    let a = &nodes[0];
    let forgotten = nodes[4].id();
    nodes[4].server.signal("-STOP");
    for n in &nodes[..4] {
        assert_eq!(n.client().send(&["CLUSTER", "FORGET", &forgotten]), ok());
    }
    // Past the 5 s a replica waits before migrating.
    std::thread::sleep(std::time::Duration::from_secs(7));
    assert_eq!(replicas_seen_by(a, a), 2, "{}", a.nodes());
    nodes[4].server.signal("-CONT");
}

/// `cluster-preferred-endpoint-type` names the address a redirect sends
/// a client to and CLUSTER SHARDS's `endpoint`: the IP, the announced
/// hostname ("?" when there is none), or nothing.
fn redirects_name_the_preferred_endpoint(a: Node, b: Node) {
    form(&[&a, &b], 2);
    assert_eq!(b.client().cmd("CONFIG SET cluster-announce-hostname b.example"), ok());
    wait_for("b's hostname known to a", || a.nodes().contains(",b.example"));
    // "foo" hashes to slot 12182, b's.
    let mut c = a.client();
    let port = b.port();
    assert_eq!(c.cmd("SET foo 1"), err(&format!("MOVED 12182 127.0.0.1:{port}")));
    assert_eq!(c.cmd("CONFIG SET cluster-preferred-endpoint-type hostname"), ok());
    assert_eq!(c.cmd("SET foo 1"), err(&format!("MOVED 12182 b.example:{port}")));
    assert_eq!(b.client().send(&["CONFIG", "SET", "cluster-announce-hostname", ""]), ok());
    wait_for("b's hostname gone at a", || !a.nodes().contains(",b.example"));
    assert_eq!(c.cmd("SET foo 1"), err(&format!("MOVED 12182 ?:{port}")));
    assert_eq!(c.cmd("CONFIG SET cluster-preferred-endpoint-type unknown-endpoint"), ok());
    assert_eq!(c.cmd("SET foo 1"), err(&format!("MOVED 12182 :{port}")));
    let shards = render(&c.cmd("CLUSTER SHARDS"));
    assert_eq!(shards.matches("$endpoint, $,").count(), 2, "{shards}");
    assert_eq!(
        c.cmd("CONFIG SET cluster-announce-hostname ?.com"),
        err("ERR CONFIG SET failed (possibly related to argument 'cluster-announce-hostname') - Hostnames may only contain alphanumeric characters, hyphens or dots")
    );
}

#[test]
fn redirects_name_the_preferred_endpoint_in_keel() {
    redirects_name_the_preferred_endpoint(Node::keel(), Node::keel());
}

/// The same steps against redis-server, to check the test itself.
#[test]
fn redirects_name_the_preferred_endpoint_in_redis() {
    let (Some(a), Some(b)) = (Node::redis(), Node::redis()) else { return };
    redirects_name_the_preferred_endpoint(a, b);
}
