//! Client eviction (`maxmemory-clients`) and the per-client memory it
//! counts, over real sockets, each scenario run against Keel and against
//! Debian's redis-server with the same outcome expected: the largest
//! clients closed first and only until the rest fit, CLIENT NO-EVICT
//! spared, a big argument's bytes shown as the query buffer, a reply over
//! the hard output limit closing its client before any of it leaves.

mod common;

use std::io::Read;
use std::time::Duration;

use common::{ok, wait_for, Client, Frame, Server};

/// One field of the CLIENT LIST line of the client named `name`.
fn client_field(c: &mut Client, name: &str, field: &str) -> Option<String> {
    let Frame::Bulk(list) = c.send(&["CLIENT", "LIST"]) else { panic!("CLIENT LIST is a bulk string") };
    let list = String::from_utf8_lossy(&list).into_owned();
    let line = list.lines().find(|l| l.split(' ').any(|f| f == format!("name={name}")))?;
    let prefix = format!("{field}=");
    line.split(' ').find_map(|f| f.strip_prefix(&prefix)).map(str::to_string)
}

fn tot_mem(c: &mut Client, name: &str) -> u64 {
    client_field(c, name, "tot-mem").expect("listed").parse().expect("a number")
}

/// A client named `name` that sent `size` bytes of a request's first
/// argument and no more, once the server holds them all.
fn holding(port: u16, control: &mut Client, name: &str, size: usize) -> Client {
    let mut c = Client::connect(port);
    assert_eq!(c.send(&["CLIENT", "SETNAME", name]), ok());
    let mut request = format!("*2\r\n${size}\r\n").into_bytes();
    request.resize(request.len() + size, b'v');
    c.write_raw(&request);
    wait_for("the partial request read", || {
        client_field(control, name, "qbuf").is_some_and(|q| q.parse::<usize>().expect("a number") >= size)
    });
    c
}

/// Whether the server closes `c` within 5 s; what it sent before is read
/// and dropped.
fn closed(c: &mut Client) -> bool {
    c.stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let mut chunk = [0u8; 64 * 1024];
    loop {
        match c.stream.read(&mut chunk) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Runs `scenario` against Keel, then against redis-server, and returns
/// Keel's observations once both agree.
fn both(scenario: impl Fn(&Server) -> Vec<String>) -> Vec<String> {
    let keel = Server::start(&[]);
    let got = scenario(&keel);
    if let Some(redis) = Server::start_redis(&[]) {
        assert_eq!(got, scenario(&redis), "Keel, then redis-server");
    }
    got
}

#[test]
fn the_largest_clients_go_first_and_only_until_the_rest_fit() {
    let seen = both(|server| {
        let mut control = server.client();
        assert_eq!(control.send(&["CLIENT", "SETNAME", "control"]), ok());
        assert_eq!(control.send(&["CLIENT", "NO-EVICT", "on"]), ok());
        // Each at least twice the one before, as Redis's buckets need.
        let sizes = [("small", 128 << 10), ("mid", 1 << 20), ("big", 3 << 20)];
        let mut held: Vec<Client> = sizes.iter().map(|&(name, size)| holding(server.port, &mut control, name, size)).collect();
        let mem: Vec<u64> = sizes.iter().map(|(name, _)| tot_mem(&mut control, name)).collect();
        for (&(name, size), &m) in sizes.iter().zip(&mem) {
            assert!(m >= size as u64, "{name}: tot-mem {m} under what it holds");
        }
        let mut seen = Vec::new();
        for keep in [2, 1] {
            let limit = mem[..keep].iter().sum::<u64>() + tot_mem(&mut control, "control");
            assert_eq!(control.send(&["CONFIG", "SET", "maxmemory-clients", &limit.to_string()]), ok());
            assert!(closed(&mut held[keep]));
            let listed: Vec<&str> = ["control", "small", "mid", "big"]
                .into_iter()
                .filter(|name| client_field(&mut control, name, "id").is_some())
                .collect();
            seen.push(listed.join(","));
        }
        seen.push(control.info_field("stats", "evicted_clients"));
        seen
    });
    assert_eq!(seen, ["control,small,mid", "control,small", "2"]);
}

#[test]
fn a_growing_query_buffer_is_evicted_unless_no_evict() {
    let seen = both(|server| {
        let mut control = server.client();
        assert_eq!(control.send(&["CLIENT", "NO-EVICT", "on"]), ok());
        assert_eq!(control.send(&["CONFIG", "SET", "maxmemory-clients", "1mb"]), ok());
        let mut spared = Client::connect(server.port);
        assert_eq!(spared.send(&["CLIENT", "NO-EVICT", "on"]), ok());
        assert_eq!(spared.send(&["CLIENT", "SETNAME", "spared"]), ok());
        let size = 2 << 20;
        let mut request = format!("*1\r\n${size}\r\n").into_bytes();
        request.resize(request.len() + size, b'v');
        spared.write_raw(&request);
        // Only the argument's bytes count as the query buffer, as in Redis.
        wait_for("the spared client's argument read", || client_field(&mut control, "spared", "qbuf").as_deref() == Some("2097152"));
        let mut evicted = Client::connect(server.port);
        assert_eq!(evicted.send(&["CLIENT", "SETNAME", "evicted"]), ok());
        // The server may close it before it has sent it all.
        let _ = std::io::Write::write_all(&mut evicted.stream, &request);
        assert!(closed(&mut evicted));
        let spared_mem = tot_mem(&mut control, "spared");
        assert!(spared_mem > 1 << 20, "tot-mem {spared_mem}");
        // The rest of the spared client's request runs.
        spared.write_raw(b"\r\n");
        let Frame::Error(unknown) = spared.read() else { panic!("an error") };
        vec![
            String::from_utf8_lossy(&unknown).into_owned(),
            format!("{:?}", client_field(&mut control, "evicted", "id")),
            control.info_field("stats", "evicted_clients"),
        ]
    });
    assert_eq!(seen[1..], ["None", "1"]);
    assert!(seen[0].starts_with("ERR unknown command 'vvv"), "{}", seen[0]);
}

#[test]
fn maxmemory_clients_takes_bytes_or_a_percent() {
    both(|server| {
        let mut c = server.client();
        let mut replies = Vec::new();
        for argv in [
            &["CONFIG", "GET", "maxmemory-clients"][..],
            &["CONFIG", "SET", "maxmemory-clients", "10%"],
            &["CONFIG", "GET", "maxmemory-clients"],
            &["CONFIG", "SET", "maxmemory-clients", "101%"],
            &["CONFIG", "SET", "maxmemory-clients", "abc"],
            &["CONFIG", "SET", "maxmemory-clients", "1gb"],
            &["CONFIG", "GET", "maxmemory-clients"],
            &["CONFIG", "SET", "maxmemory-clients", "0%"],
            &["CONFIG", "GET", "maxmemory-clients"],
        ] {
            replies.push(format!("{:?}", c.send(argv)));
        }
        replies
    });
}

#[test]
fn a_reply_over_the_hard_output_limit_closes_its_client_unsent() {
    let seen = both(|server| {
        let mut c = server.client();
        assert_eq!(c.send(&["CONFIG", "SET", "client-output-buffer-limit", "normal 1mb 0 0"]), ok());
        assert_eq!(c.send(&["SETRANGE", "big", "2097151", "v"]), Frame::Integer(2 << 20));
        assert_eq!(c.send(&["SETRANGE", "small", "102399", "v"]), Frame::Integer(100 << 10));
        let mut reader = server.client();
        let Frame::Bulk(small) = reader.send(&["GET", "small"]) else { panic!("a bulk string") };
        reader.write_command(&["GET", "big"]);
        reader.stream.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        vec![small.len().to_string(), reader.read_to_close().len().to_string()]
    });
    assert_eq!(seen, ["102400", "0"]);
}

#[test]
fn multi_mem_counts_the_queued_commands() {
    let seen = both(|server| {
        let (mut c, mut control) = (server.client(), server.client());
        assert_eq!(c.send(&["CLIENT", "SETNAME", "queuer"]), ok());
        assert_eq!(c.send(&["MULTI"]), ok());
        let value = "v".repeat(100_000);
        assert_eq!(c.send(&["SET", "k", &value]), common::simple("QUEUED"));
        let queued: u64 = client_field(&mut control, "queuer", "multi-mem").expect("listed").parse().expect("a number");
        assert!(queued >= 100_000, "multi-mem {queued}");
        assert!(matches!(c.send(&["EXEC"]), Frame::Array(_)));
        vec![client_field(&mut control, "queuer", "multi-mem").expect("listed")]
    });
    assert_eq!(seen, ["0"]);
}

/// Over the limit with nothing left that may be evicted, the server says
/// so once, not at each of the cron's passes that follow.
#[test]
fn running_out_of_evictable_clients_is_logged_once() {
    let dir = common::temp_dir("stuck-log");
    let log_path = dir.join("keel.log");
    let log = std::fs::File::create(&log_path).expect("test setup");
    let server = Server::start_logging_to(log.into(), &[]);
    let mut control = server.client();
    assert_eq!(control.send(&["CLIENT", "NO-EVICT", "on"]), ok());
    let mut stuck = server.client();
    assert_eq!(stuck.send(&["CLIENT", "NO-EVICT", "on"]), ok());
    assert_eq!(control.send(&["CONFIG", "SET", "maxmemory-clients", "1mb"]), ok());
    let size = 2 << 20;
    let mut request = format!("*1\r\n${size}\r\n").into_bytes();
    request.resize(request.len() + size, b'v');
    stuck.write_raw(&request);
    const WARNING: &str = "Over client maxmemory after evicting all evictable clients";
    let warnings = || std::fs::read_to_string(&log_path).expect("the log").matches(WARNING).count();
    wait_for("the warning", || warnings() > 0);
    // Five cron ticks at the default hz, each a pass over the clients.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(warnings(), 1);
    assert_eq!(control.info_field("stats", "evicted_clients"), "0");
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
