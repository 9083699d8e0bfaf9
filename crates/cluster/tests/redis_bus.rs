//! The codec against a real Redis 7.0 on its cluster bus: a made-up node
//! MEETs a cluster-enabled `redis-server`, answers the PINGs Redis then
//! sends it, and Redis completes the handshake and lists the node with
//! the port and hostname it announced. Redis starts from a nodes.conf
//! that `NodesFile::write` made. Skipped, with a notice, where Redis is
//! not installed.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use keel_cluster::*;
use keel_testkit::free_port;

const DEADLINE: Duration = Duration::from_secs(30);

/// A cluster-enabled `redis-server`, killed on drop.
struct Redis {
    child: Child,
    conn: BufReader<TcpStream>,
    _dir: tempfile::TempDir,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Redis {
    /// Starts Redis on `port` with its bus on `cport`, loading `nodes_conf`.
    fn start(port: u16, cport: u16, nodes_conf: &str, extra: &[&str]) -> Redis {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("nodes.conf"), nodes_conf).unwrap();
        let mut child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--cluster-port", &cport.to_string(), "--bind", "127.0.0.1"])
            .args(["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                panic!("redis-server exited at startup: {status}");
            }
            assert!(Instant::now() < deadline, "redis-server did not start on port {port}");
            if let Ok(stream) = TcpStream::connect(("127.0.0.1", port)) {
                stream.set_read_timeout(Some(DEADLINE)).unwrap();
                let mut redis = Redis { child, conn: BufReader::new(stream), _dir: dir };
                if redis.cmd(&["PING"]) == "PONG" {
                    return redis;
                }
                panic!("redis-server on {port} did not answer PING");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// A command whose reply is a status or a bulk string, as text.
    fn cmd(&mut self, argv: &[&str]) -> String {
        let mut request = format!("*{}\r\n", argv.len());
        for arg in argv {
            request += &format!("${}\r\n{arg}\r\n", arg.len());
        }
        self.conn.get_mut().write_all(request.as_bytes()).unwrap();
        let mut line = String::new();
        self.conn.read_line(&mut line).unwrap();
        let text = line.trim_end().to_owned();
        match text.as_bytes().first() {
            Some(b'+') => text[1..].to_owned(),
            Some(b'$') => {
                let mut bulk = vec![0; text[1..].parse::<usize>().unwrap() + 2];
                self.conn.read_exact(&mut bulk).unwrap();
                bulk.truncate(bulk.len() - 2);
                String::from_utf8(bulk).unwrap()
            }
            _ => panic!("{argv:?}: {text}"),
        }
    }
}

/// Reads one whole frame, cut with `frame_len`, and decodes it. Encoding
/// the message gives Redis's bytes back exactly.
fn read_message(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Message {
    loop {
        if let Some(len) = frame_len(buf).unwrap() {
            if buf.len() >= len {
                let message = Message::decode(&buf[..len]).unwrap();
                assert_eq!(message.encode(), buf[..len], "{message:?}");
                buf.drain(..len);
                return message;
            }
        }
        let mut chunk = [0; 8192];
        let n = conn.read(&mut chunk).unwrap();
        assert!(n > 0, "Redis closed the bus connection");
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Our made-up node's header, as a Redis master with no slots sends it.
fn our_header(name: NodeName, port: u16, cport: u16) -> Header {
    Header {
        port,
        pport: 0,
        cport,
        current_epoch: 0,
        config_epoch: 0,
        offset: 0,
        sender: name,
        slots: SlotBitmap::empty(),
        replica_of: None,
        ip: String::new(),
        flags: flags::MYSELF | flags::MASTER,
        state_ok: false,
        mflags: [0; 3],
    }
}

fn accept_within(listener: &TcpListener, deadline: Instant) -> TcpStream {
    listener.set_nonblocking(true).unwrap();
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false).unwrap();
                stream.set_read_timeout(Some(DEADLINE)).unwrap();
                return stream;
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                assert!(Instant::now() < deadline, "Redis never connected to our bus port");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept: {e}"),
        }
    }
}

#[test]
fn redis_completes_a_handshake_with_a_made_up_node() {
    if !Command::new("redis-server").arg("--version").output().is_ok_and(|o| o.status.success()) {
        eprintln!("NOTICE: redis-server not installed; skipping Redis cluster bus test");
        return;
    }
    let (redis_port, redis_cport) = (free_port(), free_port());
    // Redis starts as a node we name, knowing one peer that never answers
    // (it owns slots, so Redis gossips about it).
    let redis_name = NodeName::random();
    let peer = NodeName::random();
    let line = |name, port: u16, node_flags: u16, config_epoch, slots| NodeLine {
        name,
        ip: "127.0.0.1".into(),
        port,
        cport: port,
        hostname: None,
        flags: node_flags,
        master: None,
        ping_sent_ms: 0,
        pong_received_ms: 0,
        config_epoch,
        connected: node_flags & flags::MYSELF != 0,
        slots,
        migrating: vec![],
        importing: vec![],
    };
    let mut me = line(redis_name, redis_port, flags::MYSELF | flags::MASTER, 0, vec![]);
    me.cport = redis_cport;
    // A port nothing listens on: Redis's connections to it are refused.
    let peer_port = free_port();
    let conf = NodesFile { nodes: vec![me, line(peer, peer_port, flags::MASTER, 1, vec![(16000, 16383)])], current_epoch: 1, last_vote_epoch: 0 };
    let mut redis = Redis::start(redis_port, redis_cport, &conf.write(), &["--cluster-announce-hostname", "redis-host.example", "--cluster-node-timeout", "2000"]);
    assert_eq!(redis.cmd(&["CLUSTER", "MYID"]), redis_name.to_string());
    assert_eq!(redis.cmd(&["CLUSTER", "ADDSLOTSRANGE", "0", "99"]), "OK");
    assert_eq!(redis.cmd(&["CLUSTER", "ADDSLOTS", "5000"]), "OK");
    let mut want_slots = SlotBitmap::empty();
    (0..100).chain([5000]).for_each(|slot| want_slots.set(slot));

    let ours = NodeName::random();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let our_cport = listener.local_addr().unwrap().port();
    let our_port = free_port();
    let hostname = vec![Extension::Hostname("keel-node.example".into())];
    let header = our_header(ours, our_port, our_cport);

    // MEET on our own connection: Redis answers PONG.
    let mut out_link = TcpStream::connect(("127.0.0.1", redis_cport)).unwrap();
    out_link.set_read_timeout(Some(DEADLINE)).unwrap();
    let meet = Message { header: header.clone(), body: Body::Meet { gossip: vec![], extensions: hostname.clone() } };
    out_link.write_all(&meet.encode()).unwrap();
    let mut out_buf = Vec::new();
    let pong = read_message(&mut out_link, &mut out_buf);
    assert_eq!(pong.kind(), MessageType::Pong);
    assert_eq!(pong.header.sender, redis_name);
    assert_eq!(pong.header.slots, want_slots);
    assert_eq!((pong.header.port, pong.header.cport), (redis_port, redis_cport));
    assert_eq!(pong.header.flags, flags::MYSELF | flags::MASTER);
    assert_eq!(pong.header.replica_of, None);
    let Body::Pong { extensions, .. } = &pong.body else { unreachable!() };
    assert_eq!(extensions, &[Extension::Hostname("redis-host.example".into())]);

    // Redis connects to the bus port we announced and PINGs; our PONGs
    // complete the handshake. Answer until Redis lists us and has
    // gossiped about its peer.
    let deadline = Instant::now() + DEADLINE;
    let mut in_link = accept_within(&listener, deadline);
    let mut in_buf = Vec::new();
    let mut gossip_seen = false;
    loop {
        assert!(Instant::now() < deadline, "no handshake, or no gossip, within {DEADLINE:?}");
        let ping = read_message(&mut in_link, &mut in_buf);
        assert_eq!(ping.kind(), MessageType::Ping);
        assert_eq!(ping.header.sender, redis_name);
        let Body::Ping { gossip, extensions } = &ping.body else { unreachable!() };
        assert_eq!(extensions, &[Extension::Hostname("redis-host.example".into())]);
        for entry in gossip {
            if entry.name == peer {
                assert_eq!((entry.ip.as_str(), entry.port, entry.cport), ("127.0.0.1", peer_port, peer_port));
                assert_eq!(entry.flags & flags::MASTER, flags::MASTER);
                gossip_seen = true;
            } else {
                assert_eq!(entry.name, ours, "gossip about a node Redis does not know");
                assert_eq!((entry.port, entry.cport), (our_port, our_cport));
            }
        }
        let reply = Message { header: header.clone(), body: Body::Pong { gossip: vec![], extensions: hostname.clone() } };
        in_link.write_all(&reply.encode()).unwrap();

        let nodes = redis.cmd(&["CLUSTER", "NODES"]);
        let listed = nodes.lines().map(|l| NodeLine::parse(l).unwrap()).find(|n| n.name == ours);
        let done = listed.is_some_and(|n| {
            n.flags & flags::HANDSHAKE == 0
                && (n.ip.as_str(), n.port, n.cport) == ("127.0.0.1", our_port, our_cport)
                && n.hostname.as_deref() == Some("keel-node.example")
                && n.flags & flags::MASTER != 0
        });
        if done && gossip_seen {
            break;
        }
    }
}
