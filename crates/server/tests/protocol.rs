//! Black-box protocol tests: inline commands, deep pipelines, RESP3,
//! malformed input (Redis's error text, then the connection closes while
//! other clients carry on), and the size limits.

mod common;

use std::io::Read;
use std::time::Duration;

use common::{bulk, err, int, ok, simple, Client, Frame, Server};

/// Writes raw bytes, then reads everything until the server closes.
fn raw_until_close(server: &Server, bytes: &[u8]) -> Vec<u8> {
    let mut c = Client::connect(server.port);
    c.write_raw(bytes);
    c.read_to_close()
}

#[test]
fn inline_commands() {
    let server = Server::start(&[]);
    let mut c = server.client();
    c.write_raw(b"SET greeting \"hello world\"\r\n");
    assert_eq!(c.read(), ok());
    c.write_raw(b"GET greeting\n");
    assert_eq!(c.read(), bulk("hello world"));
    c.write_raw(b"\r\n\r\nPING\r\n");
    assert_eq!(c.read(), simple("PONG"));
    c.write_raw(b"ECHO 'it''s'\r\n");
    assert_eq!(c.read(), err("ERR Protocol error: unbalanced quotes in request"));
    assert!(c.read_to_close().is_empty());
}

#[test]
fn empty_and_negative_multibulk_are_skipped() {
    let server = Server::start(&[]);
    let mut c = server.client();
    c.write_raw(b"*0\r\n*-10\r\n*1\r\n$4\r\nPING\r\n");
    assert_eq!(c.read(), simple("PONG"));
}

#[test]
fn ten_thousand_commands_in_one_write() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let mut pipeline = Vec::new();
    for i in 0..10_000 {
        pipeline.extend(common::encode(&["SET", &format!("key:{i}"), &i.to_string()]));
    }
    for i in (0..10_000).step_by(1000) {
        pipeline.extend(common::encode(&["GET", &format!("key:{i}")]));
    }
    c.write_raw(&pipeline);
    for _ in 0..10_000 {
        assert_eq!(c.read(), ok());
    }
    for i in (0..10_000).step_by(1000) {
        assert_eq!(c.read(), bulk(&i.to_string()));
    }
    assert_eq!(c.cmd("DBSIZE"), int(10_000));
}

#[test]
fn a_pipeline_runs_in_order_across_selects_and_ends_at_its_first_malformed_request() {
    // Requests are parsed some at a time ahead of running them; a SELECT,
    // a write read back at once, and an error after dozens of requests
    // must all come out as if each ran before the next was read.
    let server = Server::start(&[]);
    let mut c = server.client();
    let mut pipeline = Vec::new();
    let mut expected = Vec::new();
    for i in 0..40 {
        let db = (i / 7 % 3).to_string();
        pipeline.extend(common::encode(&["SELECT", &db]));
        expected.push(ok());
        // The count of INCRs so far in this request's database.
        let n = (0..=i).filter(|j| j / 7 % 3 == i / 7 % 3).count();
        pipeline.extend(common::encode(&["INCR", "n"]));
        expected.push(int(n as i64));
        pipeline.extend(common::encode(&["GET", "n"]));
        expected.push(bulk(&n.to_string()));
    }
    pipeline.extend_from_slice(b"*1\r\nfoo\r\n");
    pipeline.extend(common::encode(&["SET", "after", "the error"]));
    c.write_raw(&pipeline);
    for (i, want) in expected.into_iter().enumerate() {
        assert_eq!(c.read(), want, "reply {i}");
    }
    assert_eq!(c.read(), err("ERR Protocol error: expected '$', got 'f'"));
    assert!(c.read_to_close().is_empty());
    let mut d = server.client();
    assert_eq!(d.cmd("EXISTS after"), int(0));
    assert_eq!(d.cmd("GET n"), bulk("14"));
}

#[test]
fn malformed_requests_get_redis_errors_and_close() {
    let server = Server::start(&[]);
    let mut bystander = server.client();
    let cases: &[(&[u8], &str)] = &[
        (b"*3000000000\r\n", "-ERR Protocol error: invalid multibulk length\r\n"),
        (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n", "-ERR Protocol error: expected '$', got 'f'\r\n"),
        (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
        (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
        (b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n", "-ERR Protocol error: invalid bulk length\r\n"),
        (b"*1\r\nfoo\r\n", "-ERR Protocol error: expected '$', got 'f'\r\n"),
        (b"set \"\"\"test-key\"\"\" test-value\r\nping\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"),
    ];
    for (input, expected) in cases {
        assert_eq!(String::from_utf8_lossy(&raw_until_close(&server, input)), *expected);
        assert_eq!(bystander.cmd("PING"), simple("PONG"));
    }
    // Replies to the requests before the bad one still arrive.
    let reply = raw_until_close(&server, b"PING\r\n*1\r\nfoo\r\n");
    assert_eq!(reply, b"+PONG\r\n-ERR Protocol error: expected '$', got 'f'\r\n");
    let errors = match bystander.send(&["INFO", "errorstats"]) {
        Frame::Bulk(b) => String::from_utf8(b).expect("utf8"),
        other => panic!("{other:?}"),
    };
    assert!(errors.contains("errorstat_ERR:count=8"), "{errors}");
}

#[test]
fn protocol_desync_closes_the_connection() {
    let server = Server::start(&[]);
    for prefix in [&b"\x00"[..], b"*\x00", b"$\x00"] {
        let mut c = Client::connect(server.port);
        c.write_raw(prefix);
        let payload = vec![b'A'; 1024];
        let mut closed = false;
        for _ in 0..1000 {
            if std::io::Write::write_all(&mut c.stream, &payload).is_err() {
                closed = true;
                break;
            }
        }
        let mut reply = Vec::new();
        let _ = c.stream.read_to_end(&mut reply);
        assert!(closed || String::from_utf8_lossy(&reply).contains("Protocol error"), "{prefix:?}");
    }
    assert_eq!(server.client().cmd("PING"), simple("PONG"));
}

#[test]
fn bulk_and_query_buffer_limits() {
    let server = Server::start(&["--proto-max-bulk-len", "1mb", "--client-query-buffer-limit", "1mb"]);
    let reply = raw_until_close(&server, b"*2\r\n$4\r\nECHO\r\n$2000000\r\n");
    assert_eq!(reply, b"-ERR Protocol error: invalid bulk length\r\n");
    let mut c = server.client();
    let big = "x".repeat(512 * 1024);
    assert_eq!(c.send(&["ECHO", &big]), bulk(&big));
    // A request that keeps growing past the query buffer limit is dropped.
    let mut d = Client::connect(server.port);
    d.write_raw(b"*2\r\n$4\r\nECHO\r\n$1000000\r\n");
    let chunk = vec![b'y'; 64 * 1024];
    let mut failed = false;
    for _ in 0..64 {
        if std::io::Write::write_all(&mut d.stream, &chunk).is_err() {
            failed = true;
            break;
        }
    }
    let _ = failed;
    assert_eq!(c.cmd("CONFIG SET proto-max-bulk-len 2mb"), ok());
    assert_eq!(c.cmd("PING"), simple("PONG"));
}

#[test]
fn resp3_via_hello() {
    let server = Server::start(&[]);
    let mut c = server.client();
    let Frame::Map(hello) = c.cmd("HELLO 3") else { panic!("map") };
    let keys: Vec<Frame> = hello.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(
        keys,
        ["server", "version", "proto", "id", "mode", "role", "modules"].map(bulk).to_vec()
    );
    assert_eq!(c.cmd("GET nokey"), Frame::Null);
    c.write_raw(b"*2\r\n$3\r\nGET\r\n$5\r\nnokey\r\n");
    let mut raw = [0u8; 3];
    c.stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    c.stream.read_exact(&mut raw).expect("read");
    assert_eq!(&raw, b"_\r\n");
    assert!(matches!(c.cmd("HELLO 2"), Frame::Array(_)));
    assert_eq!(c.cmd("GET nokey"), Frame::Null);
    assert!(matches!(c.cmd("HELLO"), Frame::Array(_)));
}

#[test]
fn other_clients_continue_while_one_misbehaves() {
    let server = Server::start(&[]);
    let mut good: Vec<Client> = (0..4).map(|_| server.client()).collect();
    let mut bad: Vec<Client> = (0..4).map(|_| Client::connect(server.port)).collect();
    for b in bad.iter_mut() {
        b.write_raw(b"*1\r\n$4\r\nPING\r\n*1\r\nxyz\r\n");
    }
    for (i, g) in good.iter_mut().enumerate() {
        assert_eq!(g.send(&["SET", &format!("g{i}"), "v"]), ok());
        assert_eq!(g.send(&["GET", &format!("g{i}")]), bulk("v"));
    }
    for b in bad.iter_mut() {
        assert_eq!(b.read_to_close(), b"+PONG\r\n-ERR Protocol error: expected '$', got 'x'\r\n");
    }
}
