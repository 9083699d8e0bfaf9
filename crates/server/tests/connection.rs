//! Black-box tests of connection administration: CLIENT, AUTH/HELLO with
//! requirepass, maxclients, idle timeout, unix sockets.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{bulk, err, int, ok, simple, wait_for, Client, Frame, Server};

fn text(frame: Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) => String::from_utf8(b).expect("utf8"),
        Frame::Verbatim { text, .. } => String::from_utf8(text).expect("utf8"),
        other => panic!("expected text, got {other:?}"),
    }
}

/// `name=value` fields of a CLIENT LIST line.
fn field<'a>(line: &'a str, name: &str) -> &'a str {
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {line}"))
}

fn id_of(c: &mut Client) -> i64 {
    match c.cmd("CLIENT ID") {
        Frame::Integer(i) => i,
        other => panic!("{other:?}"),
    }
}

#[test]
fn client_names_and_ids() {
    let server = Server::start(&[]);
    let mut a = server.client();
    let mut b = server.client();
    let (ida, idb) = (id_of(&mut a), id_of(&mut b));
    // Ids are unique; their order follows accepts across worker threads,
    // not the order of connect calls.
    assert!(ida > 0 && idb > 0 && ida != idb);
    assert_eq!(a.cmd("CLIENT GETNAME"), Frame::Null);
    assert_eq!(a.cmd("CLIENT SETNAME alpha"), ok());
    assert_eq!(a.cmd("CLIENT GETNAME"), bulk("alpha"));
    assert_eq!(
        a.send(&["CLIENT", "SETNAME", "has space"]),
        err("ERR Client names cannot contain spaces, newlines or special characters.")
    );
    assert_eq!(a.send(&["CLIENT", "SETNAME", ""]), ok());
    assert_eq!(a.cmd("CLIENT GETNAME"), Frame::Null);
    assert_eq!(a.cmd("CLIENT ID extra"), err("ERR wrong number of arguments for 'client|id' command"));
    assert_eq!(a.cmd("CLIENT NOPE"), err("ERR unknown subcommand 'NOPE'. Try CLIENT HELP."));
    assert_eq!(a.cmd("CLIENT"), err("ERR wrong number of arguments for 'client' command"));
    let help = a.cmd("CLIENT HELP");
    assert!(matches!(help, Frame::Array(ref l) if l[0] == simple("CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")));
    assert!(matches!(b.cmd("HELLO 3 SETNAME beta"), Frame::Map(_)));
    assert_eq!(b.cmd("CLIENT GETNAME"), bulk("beta"));
}

#[test]
fn client_list_and_info_use_redis_field_order() {
    let server = Server::start(&[]);
    let mut a = server.client();
    let mut b = server.client();
    assert_eq!(b.cmd("CLIENT SETNAME bee"), ok());
    assert_eq!(b.cmd("SELECT 3"), ok());
    let ida = id_of(&mut a);
    let idb = id_of(&mut b);
    a.wait_connected_clients(2);
    let list = text(a.cmd("CLIENT LIST"));
    let lines: Vec<&str> = list.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(list.ends_with('\n'));
    let keys: Vec<&str> = lines[0].split(' ').map(|kv| kv.split('=').next().unwrap_or("")).collect();
    assert_eq!(
        keys,
        [
            "id", "addr", "laddr", "fd", "name", "age", "idle", "flags", "db", "sub", "psub", "ssub", "multi", "qbuf",
            "qbuf-free", "argv-mem", "multi-mem", "rbs", "rbp", "obl", "oll", "omem", "tot-mem", "events", "cmd",
            "user", "redir", "resp"
        ]
    );
    let line_b = lines.iter().find(|l| field(l, "id") == idb.to_string()).expect("b listed");
    assert_eq!(field(line_b, "name"), "bee");
    assert_eq!(field(line_b, "db"), "3");
    assert_eq!(field(line_b, "cmd"), "client|id");
    assert_eq!(field(line_b, "flags"), "N");
    assert_eq!(field(line_b, "multi"), "-1");
    assert_eq!(field(line_b, "laddr"), format!("127.0.0.1:{}", server.port));
    // The caller's own line shows the command running and, as Redis's
    // query buffer, its 26 bytes (*2 $6 client $4 list).
    let line_a = lines.iter().find(|l| field(l, "id") == ida.to_string()).expect("a listed");
    assert_eq!((field(line_a, "cmd"), field(line_a, "qbuf")), ("client|list", "26"));

    let info = text(a.cmd("CLIENT INFO"));
    assert_eq!(field(&info, "id"), ida.to_string());
    assert_eq!(field(&info, "cmd"), "client|info");
    assert!(info.ends_with('\n'));

    let only_b = text(a.send(&["CLIENT", "LIST", "ID", &idb.to_string(), "999999"]));
    assert_eq!(only_b.lines().count(), 1);
    assert_eq!(a.cmd("CLIENT LIST ID x"), err("ERR Invalid client ID"));
    assert_eq!(text(a.cmd("CLIENT LIST TYPE normal")).lines().count(), 2);
    assert_eq!(text(a.cmd("CLIENT LIST TYPE replica")), "");
    assert_eq!(a.cmd("CLIENT LIST TYPE bogus"), err("ERR Unknown client type 'bogus'"));
    assert_eq!(a.cmd("CLIENT LIST bogus"), err("ERR syntax error"));

    assert_eq!(b.cmd("MULTI"), ok());
    assert_eq!(b.cmd("PING"), simple("QUEUED"));
    let list = text(a.cmd("CLIENT LIST"));
    let line_b = list.lines().find(|l| field(l, "id") == idb.to_string()).expect("b listed");
    assert_eq!(field(line_b, "flags"), "x");
    assert_eq!(field(line_b, "multi"), "1");
    // A queued command is Redis's `lastcmd` too.
    assert_eq!(field(line_b, "cmd"), "ping");
}

#[test]
fn client_kill_forms() {
    let server = Server::start(&[]);
    let mut killer = server.client();
    // Enough victims that some live on the other worker thread.
    let mut victims: Vec<Client> = (0..4).map(|_| server.client()).collect();
    let ids: Vec<i64> = victims.iter_mut().map(id_of).collect();

    assert_eq!(killer.send(&["CLIENT", "KILL", "ID", &ids[0].to_string()]), int(1));
    assert!(victims[0].read_to_close().is_empty());
    assert_eq!(killer.send(&["CLIENT", "KILL", "ID", &ids[0].to_string()]), int(0));
    assert_eq!(killer.cmd("CLIENT KILL ID 0"), err("ERR client-id should be greater than 0"));
    assert_eq!(killer.cmd("CLIENT KILL ID x"), err("ERR client-id should be greater than 0"));
    assert_eq!(killer.cmd("CLIENT KILL USER nobody"), err("ERR No such user 'nobody'"));
    assert_eq!(killer.cmd("CLIENT KILL TYPE nobody"), err("ERR Unknown client type 'nobody'"));
    // Three arguments are always the old form: "ID" is an address here.
    assert_eq!(killer.cmd("CLIENT KILL ID"), err("ERR No such client"));
    assert_eq!(killer.cmd("CLIENT KILL ID 1 TYPE"), err("ERR syntax error"));
    assert_eq!(killer.cmd("CLIENT KILL SKIPME maybe"), err("ERR syntax error"));

    // Old form: by address; an error when nothing matched.
    let list = text(killer.cmd("CLIENT LIST"));
    let addr = list
        .lines()
        .find(|l| field(l, "id") == ids[1].to_string())
        .map(|l| field(l, "addr").to_string())
        .expect("victim 1");
    assert_eq!(killer.send(&["CLIENT", "KILL", &addr]), ok());
    assert!(victims[1].read_to_close().is_empty());
    assert_eq!(killer.send(&["CLIENT", "KILL", &addr]), err("ERR No such client"));

    // New form by ADDR, and everything but me (SKIPME defaults to yes).
    assert_eq!(killer.send(&["CLIENT", "KILL", "USER", "default"]), int(2));
    for v in &mut victims[2..] {
        assert!(v.read_to_close().is_empty());
    }
    assert_eq!(killer.cmd("PING"), simple("PONG"));
    // SKIPME no kills the caller after its reply.
    assert_eq!(killer.cmd("CLIENT KILL SKIPME no"), int(1));
    assert!(killer.read_to_close().is_empty());
    let mut fresh = server.client();
    assert_eq!(fresh.cmd("PING"), simple("PONG"));
}

#[test]
fn client_reply_modes() {
    let server = Server::start(&[]);
    let mut c = server.client();
    c.write_command(&["CLIENT", "REPLY", "OFF"]);
    c.write_command(&["SET", "a", "1"]);
    c.write_command(&["GET", "a"]);
    assert_eq!(c.cmd("CLIENT REPLY ON"), ok());
    c.write_command(&["CLIENT", "REPLY", "SKIP"]);
    c.write_command(&["SET", "b", "2"]);
    assert_eq!(c.cmd("GET b"), bulk("2"));
    assert_eq!(c.cmd("CLIENT REPLY maybe"), err("ERR syntax error"));
    assert_eq!(c.cmd("CLIENT NO-EVICT on"), ok());
    assert!(text(c.cmd("CLIENT INFO")).contains(" flags=e "));
    assert_eq!(c.cmd("CLIENT NO-EVICT off"), ok());
    assert_eq!(c.cmd("CLIENT NO-EVICT x"), err("ERR syntax error"));
}

#[test]
fn client_pause_holds_writes_or_everything() {
    let server = Server::start(&[]);
    let mut admin = server.client();
    let mut writers: Vec<Client> = (0..3).map(|_| server.client()).collect();
    assert_eq!(admin.cmd("CLIENT PAUSE 100000 WRITE"), ok());
    // Reads go on; writes wait.
    for w in writers.iter_mut() {
        assert_eq!(w.cmd("GET k"), Frame::Null);
        w.write_command(&["SET", "k", "v"]);
    }
    std::thread::sleep(Duration::from_millis(200));
    let clients = text(admin.send(&["INFO", "clients"]));
    assert!(clients.contains("blocked_clients:3"), "{clients}");
    assert_eq!(admin.cmd("GET k"), Frame::Null);
    assert_eq!(admin.cmd("CLIENT UNPAUSE"), ok());
    for w in writers.iter_mut() {
        assert_eq!(w.read(), ok());
    }
    assert_eq!(admin.cmd("GET k"), bulk("v"));

    // ALL holds every command until the deadline.
    assert_eq!(admin.cmd("CLIENT PAUSE 300 ALL"), ok());
    let started = Instant::now();
    assert_eq!(writers[0].cmd("PING"), simple("PONG"));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(3), "{waited:?}");

    // A pause only widens while in effect: a shorter WRITE pause leaves
    // the ALL one and its deadline in place.
    // (Under ALL the admin's own next command would wait too, so the WRITE
    // pause comes first and the ALL one widens it.)
    assert_eq!(admin.cmd("CLIENT PAUSE 400 WRITE"), ok());
    assert_eq!(admin.cmd("CLIENT PAUSE 10 ALL"), ok());
    let started = Instant::now();
    assert_eq!(writers[1].cmd("PING"), simple("PONG"));
    assert!(started.elapsed() >= Duration::from_millis(250), "{:?}", started.elapsed());
}

/// Redis 7.0 judges a script under a WRITE pause by the flags it
/// declares: `no-writes` runs, a shebang without it waits, and so does a
/// script without a shebang (EVAL may replicate).
#[test]
fn client_pause_write_judges_scripts_by_their_flags() {
    let server = Server::start(&["--threads", "2"]);
    let mut admin = server.client();
    // FUNCTION LOAD writes: it would wait too.
    let fcall = "#!lua name=lib\nredis.register_function{function_name='f', callback=function() return 'f' end, flags={'no-writes'}}";
    assert_eq!(admin.send(&["FUNCTION", "LOAD", fcall]), bulk("lib"));
    assert_eq!(admin.cmd("CLIENT PAUSE 100000 WRITE"), ok());
    let mut reader = server.client();
    assert_eq!(reader.send(&["EVAL", "#!lua flags=no-writes\nreturn 'read'", "0"]), bulk("read"));
    assert_eq!(reader.send(&["FCALL", "f", "0"]), bulk("f"));
    let mut shebang = server.client();
    shebang.write_command(&["EVAL", "#!lua\nreturn 1", "0"]);
    let mut plain = server.client();
    plain.write_command(&["EVAL", "return 2", "0"]);
    wait_for("both scripts held", || text(admin.send(&["INFO", "clients"])).contains("blocked_clients:2"));
    assert_eq!(admin.cmd("CLIENT UNPAUSE"), ok());
    assert_eq!(shebang.read(), int(1));
    assert_eq!(plain.read(), int(2));
}

/// While clients are paused the dataset stands still: a key past its time
/// reads as absent but is not deleted, by access or by the active cycle,
/// until the pause ends (Redis's expireIfNeeded and activeExpireCycle).
#[test]
fn nothing_expires_while_clients_are_paused() {
    let server = Server::start(&["--hz", "100"]);
    let mut c = server.client();
    let expired = |c: &mut Client| text(c.send(&["INFO", "stats"])).lines().find_map(|l| l.strip_prefix("expired_keys:").map(str::to_string));
    assert_eq!(c.cmd("MULTI"), ok());
    assert_eq!(c.cmd("SET a 1 PX 10"), simple("QUEUED"));
    assert_eq!(c.cmd("SET b 1 PX 10"), simple("QUEUED"));
    assert_eq!(c.cmd("CLIENT PAUSE 100000 WRITE"), simple("QUEUED"));
    assert_eq!(c.cmd("EXEC"), Frame::Array(vec![ok(), ok(), ok()]));
    wait_for("both keys read as gone", || c.cmd("GET a") == Frame::Null && c.cmd("GET b") == Frame::Null);
    // Long enough for many active cycles at hz 100.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(expired(&mut c).as_deref(), Some("0"));
    assert_eq!(c.cmd("DBSIZE"), int(2));
    assert_eq!(c.cmd("CLIENT UNPAUSE"), ok());
    assert_eq!(c.cmd("GET a"), Frame::Null);
    wait_for("both expired", || expired(&mut c).as_deref() == Some("2"));
    assert_eq!(c.cmd("DBSIZE"), int(0));
}

#[test]
fn client_pause_argument_errors() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("CLIENT PAUSE 10 NEVER"), err("ERR CLIENT PAUSE mode must be WRITE or ALL"));
    assert_eq!(c.cmd("CLIENT PAUSE x"), err("ERR timeout is not an integer or out of range"));
    assert_eq!(c.cmd("CLIENT PAUSE -1"), err("ERR timeout is negative"));
    assert_eq!(c.cmd("CLIENT PAUSE 0"), ok());
    assert_eq!(c.cmd("SET a b"), ok());
    // Transactions with a write wait at EXEC under a WRITE pause.
    let mut t = server.client();
    assert_eq!(t.cmd("MULTI"), ok());
    assert_eq!(t.cmd("GET a"), simple("QUEUED"));
    assert_eq!(c.cmd("CLIENT PAUSE 100000 WRITE"), ok());
    assert_eq!(t.cmd("EXEC"), Frame::Array(vec![bulk("b")]));
    assert_eq!(t.cmd("MULTI"), ok());
    t.write_command(&["SET", "a", "c"]);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(c.cmd("CLIENT UNPAUSE"), ok());
    assert_eq!(t.read(), simple("QUEUED"));
    assert_eq!(c.cmd("CLIENT PAUSE 100000 WRITE"), ok());
    t.write_command(&["EXEC"]);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(c.cmd("GET a"), bulk("b"));
    assert_eq!(c.cmd("CLIENT UNPAUSE"), ok());
    assert_eq!(t.read(), Frame::Array(vec![ok()]));
}

#[test]
fn requirepass_auth_and_hello() {
    let server = Server::start(&["--requirepass", "s3cret"]);
    let mut c = server.client();
    assert_eq!(c.cmd("GET a"), err("NOAUTH Authentication required."));
    assert_eq!(c.cmd("AUTH wrong"), err("WRONGPASS invalid username-password pair or user is disabled."));
    assert_eq!(c.cmd("AUTH a b c"), err("ERR syntax error"));
    assert_eq!(
        c.cmd("HELLO 3"),
        err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
    );
    assert_eq!(c.cmd("HELLO 3 AUTH default wrong"), err("WRONGPASS invalid username-password pair or user is disabled."));
    let Frame::Map(hello) = c.cmd("HELLO 3 AUTH default s3cret SETNAME me") else { panic!("hello") };
    assert_eq!(hello[0], (bulk("server"), bulk("redis")));
    assert_eq!(hello[1], (bulk("version"), bulk("7.0.15")));
    assert_eq!(hello[2], (bulk("proto"), int(3)));
    assert_eq!(c.cmd("GET a"), Frame::Null);
    assert_eq!(c.cmd("CLIENT GETNAME"), bulk("me"));

    let mut d = server.client();
    assert_eq!(d.cmd("AUTH s3cret"), ok());
    assert_eq!(d.cmd("PING"), simple("PONG"));
    let mut e = server.client();
    assert_eq!(e.cmd("AUTH default s3cret"), ok());
    assert_eq!(e.cmd("HELLO 4"), err("NOPROTO unsupported protocol version"));
    assert_eq!(e.cmd("HELLO x"), err("ERR Protocol version is not an integer or out of range"));
    assert_eq!(e.cmd("HELLO 3 BOGUS"), err("ERR Syntax error in HELLO option 'BOGUS'"));

    // Unauthenticated clients may not send big requests.
    let mut f = server.client();
    let many: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    let mut argv = vec!["PING".to_string()];
    argv.extend(many);
    f.write_command(&argv);
    let reply = f.read_to_close();
    assert!(reply.starts_with(b"-ERR Protocol error: unauthenticated multibulk length"), "{reply:?}");
}

#[test]
fn auth_without_requirepass() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(
        c.cmd("AUTH x"),
        err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
    );
    assert_eq!(c.cmd("AUTH default anything"), ok());
    assert_eq!(c.cmd("AUTH other x"), err("WRONGPASS invalid username-password pair or user is disabled."));
}

#[test]
fn maxclients_rejects_with_redis_error() {
    let server = Server::start(&["--maxclients", "2"]);
    let mut a = server.client();
    a.wait_connected_clients(1);
    let mut b = server.client();
    assert_eq!(a.cmd("PING"), simple("PONG"));
    assert_eq!(b.cmd("PING"), simple("PONG"));
    let mut c = Client::connect(server.port);
    assert_eq!(c.read_to_close(), b"-ERR max number of clients reached\r\n");
    let stats = text(a.send(&["INFO", "stats"]));
    assert!(stats.contains("rejected_connections:1"), "{stats}");
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut d = Client::connect(server.port);
        d.write_command(&["PING"]);
        let mut buf = [0u8; 64];
        let n = d.stream.read(&mut buf).unwrap_or(0);
        if &buf[..n] == b"+PONG\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "slot never freed");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn idle_clients_time_out() {
    let server = Server::start(&["--timeout", "1"]);
    let mut idle = server.client();
    let mut monitor = server.client();
    assert_eq!(idle.cmd("PING"), simple("PONG"));
    assert_eq!(monitor.cmd("MONITOR"), ok());
    let started = Instant::now();
    assert!(idle.read_to_close().is_empty());
    assert!(started.elapsed() < Duration::from_secs(5));
    // Monitors never time out.
    let mut c = server.client();
    assert_eq!(c.cmd("PING"), simple("PONG"));
    assert!(text(monitor.read()).contains("\"PING\""));
}

#[test]
fn unix_socket_with_permissions() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixStream;
    let path = std::env::temp_dir().join(format!("keel-test-{}.sock", std::process::id()));
    let path_str = path.display().to_string();
    let server = Server::start(&["--unixsocket", &path_str, "--unixsocketperm", "700"]);
    let mode = std::fs::metadata(&path).expect("socket exists").permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let mut s = UnixStream::connect(&path).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    s.write_all(b"*2\r\n$6\r\nCLIENT\r\n$4\r\nINFO\r\n").expect("write");
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).expect("read");
    let reply = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(reply.contains(&format!("addr={path_str}:0")), "{reply}");
    assert!(reply.contains(" flags=U "), "{reply}");
    let mut c = server.client();
    assert_eq!(c.cmd("PING"), simple("PONG"));
    // The socket listens on one thread; its connections are served by both.
    let more: Vec<UnixStream> = (0..2)
        .map(|_| {
            let mut s = UnixStream::connect(&path).expect("connect");
            s.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
            s.write_all(b"*1\r\n$4\r\nPING\r\n").expect("write");
            assert_eq!(s.read(&mut buf).expect("read"), 7);
            s
        })
        .collect();
    assert_eq!(clients_per_thread(&mut c), [2, 2]);
    drop((s, more));
    drop(server);
    let _ = std::fs::remove_file(&path);
}

/// INFO's count of the connections each worker thread serves.
fn clients_per_thread(c: &mut Client) -> Vec<usize> {
    c.info_field("clients", "keel_clients_per_thread").split(',').map(|n| n.parse().expect("a count")).collect()
}

/// Each connection goes to the thread serving the fewest (the kernel's
/// SO_REUSEPORT hash alone splits them unevenly), and a thread whose
/// connections closed gets the next ones.
#[test]
fn connections_spread_evenly_over_the_threads_and_refill_where_some_closed() {
    let server = Server::start(&["--threads", "4"]);
    let mut probe = server.client();
    probe.wait_connected_clients(1);
    let connect = || {
        let mut c = server.client();
        assert_eq!(c.cmd("PING"), simple("PONG"));
        c
    };
    let mut clients: Vec<Client> = (0..11).map(|_| connect()).collect();
    assert_eq!(clients_per_thread(&mut probe), [3, 3, 3, 3]);
    clients.drain(..5);
    probe.wait_connected_clients(7);
    clients.extend((0..5).map(|_| connect()));
    assert_eq!(clients_per_thread(&mut probe), [3, 3, 3, 3]);
}

/// The query buffer of the client named `name`: CLIENT LIST's qbuf plus
/// qbuf-free, as Redis's querybuf.tcl reads it.
fn query_buffer(a: &mut Client, name: &str) -> u64 {
    let list = text(a.cmd("CLIENT LIST"));
    let line = list.lines().find(|l| field(l, "name") == name).expect("client listed").to_string();
    let num = |name| field(&line, name).parse::<u64>().expect("number");
    num("qbuf") + num("qbuf-free")
}

/// As Redis's: an idle client's query buffer (CLIENT LIST's qbuf plus
/// qbuf-free) is freed after 2 s, and comes back with its next request.
#[test]
fn an_idle_clients_query_buffer_is_freed() {
    let server = Server::start(&[]);
    let mut a = server.client();
    let mut idler = server.client();
    assert_eq!(idler.cmd("CLIENT SETNAME idler"), ok());
    let buffer = |a: &mut Client| query_buffer(a, "idler");
    assert!((16384..32768).contains(&buffer(&mut a)));
    let deadline = Instant::now() + Duration::from_secs(10);
    while buffer(&mut a) != 0 {
        assert!(Instant::now() < deadline, "the idle client's buffer was kept");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(idler.cmd("PING"), simple("PONG"));
    assert!((16384..32768).contains(&buffer(&mut a)));
}

/// As Redis's clientsCronResizeQueryBuffer: a large request's buffer is
/// kept for the client's next ones, then shrinks to what it held lately.
#[test]
fn a_large_requests_query_buffer_shrinks_to_the_recent_peak() {
    let server = Server::start(&[]);
    let mut a = server.client();
    let mut big = server.client();
    assert_eq!(big.cmd("CLIENT SETNAME big"), ok());
    let buffer = |a: &mut Client| query_buffer(a, "big");
    let value = vec![b'A'; 400_000];
    assert_eq!(big.send(&[&b"SET"[..], b"x", &value]), ok());
    let grown = buffer(&mut a);
    assert!(grown > 400_000, "the buffer a 400 KB request needed was freed at once: {grown}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while buffer(&mut a) >= grown {
        assert!(Instant::now() < deadline, "the buffer stayed at {grown} bytes");
        assert_eq!(big.cmd("SET x small"), ok());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!((16384..32768).contains(&buffer(&mut a)));
}
