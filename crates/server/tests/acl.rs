//! ACL over sockets: users and AUTH, NOPERM for commands, keys and
//! channels, MULTI and scripts, the ACL log, the ACL file and `user`
//! lines, and the connections of deleted users.

mod common;

use std::time::{Duration, Instant};

use common::{bulk, err, int, ok, Client, Frame, Server};

fn text(frame: &Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) | Frame::Error(b) => String::from_utf8_lossy(b).into_owned(),
        Frame::Verbatim { text, .. } => String::from_utf8_lossy(text).into_owned(),
        other => panic!("not a string: {other:?}"),
    }
}

/// A RESP2 map (a flat array) as (field, value) pairs.
fn pairs(frame: Frame) -> Vec<(String, Frame)> {
    let Frame::Array(items) = frame else { panic!("not an array: {frame:?}") };
    items.chunks(2).map(|p| (text(&p[0]), p[1].clone())).collect()
}

fn field(frame: &Frame, name: &str) -> Frame {
    pairs(frame.clone()).into_iter().find(|(n, _)| n == name).map(|(_, v)| v).unwrap_or_else(|| panic!("no {name}"))
}

/// Waits until the server has closed `client`'s connection (a command
/// already on its way may still be answered first).
fn assert_closed(client: &mut Client) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.try_send(&["PING"]).is_some() {
        assert!(Instant::now() < deadline, "the connection is still open");
    }
}

const NOPERM_KEY: &str = "NOPERM this user has no permissions to access one of the keys used as arguments";
const NOPERM_CHANNEL: &str = "NOPERM this user has no permissions to access one of the channels used as arguments";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

#[test]
fn users_authenticate_with_auth_and_hello() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut admin = server.client();
    assert_eq!(admin.cmd("ACL WHOAMI"), bulk("default"));
    assert_eq!(
        admin.cmd("AUTH foo"),
        err("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
    );
    assert_eq!(admin.cmd("ACL SETUSER alice on >p1 >p2 ~* &* +@all"), ok());
    assert_eq!(admin.cmd("ACL USERS"), Frame::Array(vec![bulk("alice"), bulk("default")]));

    let mut c = server.client();
    assert_eq!(c.cmd("AUTH alice wrong"), err(WRONGPASS));
    assert_eq!(c.cmd("AUTH nobody p1"), err(WRONGPASS));
    assert_eq!(c.cmd("AUTH alice p2"), ok());
    assert_eq!(c.cmd("ACL WHOAMI"), bulk("alice"));
    assert!(text(&c.cmd("CLIENT INFO")).contains(" user=alice "));

    // HELLO AUTH authenticates and switches protocol at once.
    let mut h = server.client();
    let Frame::Array(hello) = h.cmd("HELLO 2 AUTH alice p1 SETNAME hc") else { panic!("HELLO's map") };
    assert_eq!(hello[0], bulk("server"));
    assert_eq!(h.cmd("ACL WHOAMI"), bulk("alice"));
    assert_eq!(h.cmd("HELLO 2 AUTH alice nope"), err(WRONGPASS));

    // A user turned off cannot log in; connections made before stay.
    assert_eq!(admin.cmd("ACL SETUSER alice off"), ok());
    assert_eq!(server.client().cmd("AUTH alice p1"), err(WRONGPASS));
    assert_eq!(c.cmd("PING"), simple_pong());

    // CLIENT KILL USER closes the user's connections.
    assert_eq!(admin.cmd("CLIENT KILL USER alice"), int(2));
    assert_closed(&mut c);
    assert_eq!(admin.cmd("CLIENT KILL USER nobody"), err("ERR No such user 'nobody'"));

    // Failed logins are in the ACL log.
    let log = admin.cmd("ACL LOG 1");
    let Frame::Array(entries) = log else { panic!("ACL LOG is an array") };
    let entry = &entries[0];
    assert_eq!(field(entry, "reason"), bulk("auth"));
    assert_eq!(field(entry, "object"), bulk("AUTH"));
    assert_eq!(field(entry, "username"), bulk("alice"));
    assert_eq!(field(entry, "context"), bulk("toplevel"));
}

fn simple_pong() -> Frame {
    Frame::Simple(b"PONG".to_vec())
}

#[test]
fn requirepass_is_the_default_users_password() {
    let server = Server::start(&["--appendonly", "no", "--requirepass", "secret"]);
    let mut c = server.client();
    assert_eq!(c.cmd("GET x"), err("NOAUTH Authentication required."));
    assert_eq!(c.cmd("AUTH wrong"), err(WRONGPASS));
    assert_eq!(c.cmd("AUTH secret"), ok());
    assert_eq!(c.cmd("AUTH default secret"), ok());
    let user = c.cmd("ACL GETUSER default");
    assert_eq!(field(&user, "flags"), Frame::Array(vec![bulk("on")]));
    assert_eq!(
        field(&user, "passwords"),
        Frame::Array(vec![bulk("2bb80d537b1da3e38bd30361aa855686bde0eacd7162fef6a25fe97bf527a25b")])
    );
    assert_eq!(c.cmd("CONFIG GET requirepass"), Frame::Array(vec![bulk("requirepass"), bulk("secret")]));
    // Cleared, every connection is the default user's without AUTH.
    assert_eq!(c.send(&["CONFIG", "SET", "requirepass", ""]), ok());
    assert_eq!(server.client().cmd("GET x"), Frame::Null);
    assert_eq!(field(&c.cmd("ACL GETUSER default"), "flags"), Frame::Array(vec![bulk("on"), bulk("nopass")]));
    // Set again: new connections need it, as in Redis.
    assert_eq!(c.cmd("CONFIG SET requirepass again"), ok());
    assert_eq!(server.client().cmd("GET x"), err("NOAUTH Authentication required."));
}

#[test]
fn commands_keys_and_channels_are_checked() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut admin = server.client();
    assert_eq!(admin.cmd("ACL SETUSER bob on nopass ~obj:* %R~ro:* &news.* +get +set +publish +subscribe +client|id"), ok());
    let mut bob = server.client();
    assert_eq!(bob.cmd("AUTH bob any"), ok());
    assert_eq!(bob.cmd("SET obj:1 v"), ok());
    assert_eq!(bob.cmd("GET obj:1"), bulk("v"));
    assert_eq!(bob.cmd("GET other"), err(NOPERM_KEY));
    assert_eq!(bob.cmd("GET ro:1"), Frame::Null);
    assert_eq!(bob.cmd("SET ro:1 v"), err(NOPERM_KEY));
    assert_eq!(bob.cmd("DEL obj:1"), err("NOPERM this user has no permissions to run the 'del' command"));
    assert!(matches!(bob.cmd("CLIENT ID"), Frame::Integer(_)));
    assert_eq!(bob.cmd("CLIENT LIST"), err("NOPERM this user has no permissions to run the 'client|list' command"));
    assert_eq!(bob.cmd("PUBLISH news.1 hi"), int(0));
    assert_eq!(bob.cmd("PUBLISH sport hi"), err(NOPERM_CHANNEL));
    assert_eq!(bob.cmd("SUBSCRIBE sport"), err(NOPERM_CHANNEL));
    // A user's commands are counted as rejected, as Redis's.
    assert!(text(&admin.cmd("INFO commandstats")).contains("cmdstat_del:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1"));

    // Every refusal is in the ACL log, newest first.
    let Frame::Array(entries) = admin.cmd("ACL LOG") else { panic!("an array") };
    let summary: Vec<(Frame, Frame, Frame)> =
        entries.iter().map(|e| (field(e, "reason"), field(e, "object"), field(e, "context"))).collect();
    assert_eq!(
        summary,
        [
            (bulk("channel"), bulk("sport"), bulk("toplevel")),
            (bulk("command"), bulk("client|list"), bulk("toplevel")),
            (bulk("command"), bulk("del"), bulk("toplevel")),
            (bulk("key"), bulk("ro:1"), bulk("toplevel")),
            (bulk("key"), bulk("other"), bulk("toplevel")),
        ]
    );
    // PUBLISH and SUBSCRIBE refused on one channel are one entry.
    let first = &entries[0];
    assert_eq!(field(first, "username"), bulk("bob"));
    assert_eq!(field(first, "count"), int(2));
    assert!(text(&field(first, "client-info")).contains(" user=bob "));
    // A like refusal among the latest counts its entry up and moves it first.
    assert_eq!(bob.cmd("GET other"), err(NOPERM_KEY));
    let Frame::Array(entries) = admin.cmd("ACL LOG 1") else { panic!("an array") };
    assert_eq!((field(&entries[0], "object"), field(&entries[0], "count")), (bulk("other"), int(2)));
    assert_eq!(admin.cmd("ACL LOG RESET"), ok());
    assert_eq!(admin.cmd("ACL LOG"), Frame::Array(vec![]));
}

#[test]
fn revoking_channels_disconnects_subscribers() {
    // One worker: the kill is carried out only after the admin's
    // pipelined CLIENT LIST has run.
    let server = Server::start(&["--appendonly", "no", "--threads", "1"]);
    let mut admin = server.client();
    assert_eq!(admin.cmd("ACL SETUSER sub on nopass &a &b +@all"), ok());
    let mut s = server.client();
    assert_eq!(s.cmd("AUTH sub x"), ok());
    assert_eq!(s.cmd("CLIENT SETNAME deathrow"), ok());
    assert_eq!(s.cmd("SUBSCRIBE a"), Frame::Array(vec![bulk("subscribe"), bulk("a"), int(1)]));
    // More channels: kept.
    assert_eq!(admin.cmd("ACL SETUSER sub &c"), ok());
    assert_eq!(admin.cmd("PUBLISH a m"), int(1));
    // `a` taken away: the subscriber is closed, and gone from CLIENT LIST
    // at once, as Redis frees it at once.
    admin.write_raw(b"ACL SETUSER sub resetchannels &b\r\nCLIENT LIST\r\n");
    assert_eq!(admin.read(), ok());
    let Frame::Bulk(list) = admin.read() else { panic!("CLIENT LIST") };
    assert!(!String::from_utf8_lossy(&list).contains("deathrow"), "{}", String::from_utf8_lossy(&list));
    assert_closed(&mut s);
}

#[test]
fn multi_checks_at_queue_time_and_at_exec() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut admin = server.client();
    assert_eq!(admin.cmd("ACL SETUSER m on nopass ~* +@all -del"), ok());
    let mut m = server.client();
    assert_eq!(m.cmd("AUTH m x"), ok());
    assert_eq!(m.cmd("MULTI"), ok());
    assert_eq!(m.cmd("SET k v"), simple("QUEUED"));
    assert_eq!(m.cmd("DEL k"), err("NOPERM this user has no permissions to run the 'del' command"));
    assert_eq!(m.cmd("EXEC"), err("EXECABORT Transaction discarded because of previous errors."));
    let Frame::Array(entries) = admin.cmd("ACL LOG 1") else { panic!("an array") };
    assert_eq!(field(&entries[0], "context"), bulk("multi"));

    // Rules changed between MULTI and EXEC: the command is refused then.
    assert_eq!(m.cmd("MULTI"), ok());
    assert_eq!(m.cmd("SET k v"), simple("QUEUED"));
    assert_eq!(m.cmd("GET k"), simple("QUEUED"));
    assert_eq!(admin.cmd("ACL SETUSER m -set"), ok());
    assert_eq!(
        m.cmd("EXEC"),
        Frame::Array(vec![
            err("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. \
                 This command is no longer allowed for the following reason: no permission to execute the command or subcommand"),
            Frame::Null,
        ])
    );
}

fn simple(s: &str) -> Frame {
    Frame::Simple(s.as_bytes().to_vec())
}

#[test]
fn scripts_run_as_their_callers_user() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut admin = server.client();
    assert_eq!(admin.cmd("ACL SETUSER lua on nopass ~k* +@all -del"), ok());
    let mut l = server.client();
    assert_eq!(l.cmd("AUTH lua x"), ok());
    assert_eq!(l.send(&["EVAL", "return redis.call('set', KEYS[1], 'v')", "1", "k1"]), ok());
    let denied = l.send(&["EVAL", "return redis.call('del', 'k1')", "0"]);
    assert!(
        text(&denied).starts_with("ERR The user executing the script can't run this command or subcommand script:"),
        "{denied:?}"
    );
    let denied = l.send(&["EVAL", "return redis.call('get', 'other')", "0"]);
    assert!(text(&denied).contains("can't access at least one of the keys mentioned in the command arguments"));
    let Frame::Array(entries) = admin.cmd("ACL LOG 1") else { panic!("an array") };
    assert_eq!((field(&entries[0], "context"), field(&entries[0], "object")), (bulk("lua"), bulk("other")));
    // redis.acl_check_cmd answers for the caller.
    let check = |c: &mut Client, args: &str| {
        c.send(&["EVAL", &format!("return redis.acl_check_cmd({args})"), "0"])
    };
    assert_eq!(check(&mut l, "'get', 'k1'"), int(1));
    assert_eq!(check(&mut l, "'get', 'x'"), Frame::Null);
    assert_eq!(check(&mut l, "'del', 'k1'"), Frame::Null);
    assert_eq!(check(&mut admin, "'del', 'k1'"), int(1));
    assert!(text(&check(&mut l, "'nosuch'")).contains("Invalid command passed to redis.acl_check_cmd()"));
}

#[test]
fn deleting_a_user_closes_its_connections() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut admin = server.client();
    assert_eq!(admin.cmd("ACL SETUSER gone on nopass ~* +@all"), ok());
    let mut victims: Vec<Client> = (0..3).map(|_| server.client()).collect();
    for v in &mut victims {
        assert_eq!(v.cmd("AUTH gone x"), ok());
    }
    assert_eq!(admin.cmd("ACL DELUSER gone nosuch"), int(1));
    for v in &mut victims {
        assert_closed(v);
    }
    assert_eq!(admin.cmd("ACL DELUSER default"), err("ERR The 'default' user cannot be removed"));
    // A user deleting itself gets its reply, then is closed.
    assert_eq!(admin.cmd("ACL SETUSER self on nopass +@all"), ok());
    let mut me = server.client();
    assert_eq!(me.cmd("AUTH self x"), ok());
    assert_eq!(me.cmd("ACL DELUSER self"), int(1));
    assert_closed(&mut me);
}

#[test]
fn acl_file_round_trips_through_save_and_load() {
    let dir = common::temp_dir("aclfile");
    let path = dir.join("users.acl");
    std::fs::write(&path, "user default on nopass ~* &* +@all\nuser alice on >pw ~a* +get\n").expect("write");
    let path_text = path.display().to_string();
    let server = Server::start(&["--appendonly", "no", "--aclfile", &path_text]);
    let mut admin = server.client();
    let mut alice = server.client();
    assert_eq!(alice.cmd("AUTH alice pw"), ok());
    assert_eq!(alice.cmd("GET a1"), Frame::Null);
    assert_eq!(
        admin.cmd("ACL LIST"),
        Frame::Array(vec![
            bulk("user alice on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~a* resetchannels -@all +get"),
            bulk("user default on nopass ~* &* +@all"),
        ])
    );
    assert_eq!(admin.cmd("ACL SETUSER bob on nopass %R~b* +@read"), ok());
    assert_eq!(admin.cmd("ACL SAVE"), ok());
    let saved = std::fs::read_to_string(&path).expect("saved");
    assert!(saved.contains("user bob on nopass %R~b* resetchannels -@all +@read"), "{saved}");
    // A bad file changes nothing and says why.
    std::fs::write(&path, "user carol on +nosuch\nnot a user line\n").expect("write");
    let loaded = admin.cmd("ACL LOAD");
    assert!(text(&loaded).starts_with(&format!("ERR {path_text}:1: Error in applying operation '+nosuch'")), "{loaded:?}");
    assert!(admin.cmd("ACL GETUSER bob") != Frame::Null);
    // A good one replaces every user; those of users gone are closed.
    std::fs::write(&path, saved.replace("user bob", "user robert")).expect("write");
    assert_eq!(admin.cmd("ACL LOAD"), ok());
    assert_eq!(admin.cmd("ACL USERS"), Frame::Array(vec![bulk("alice"), bulk("default"), bulk("robert")]));
    assert_closed(&mut alice);
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn without_an_acl_file_load_and_save_are_refused() {
    let server = Server::start(&["--appendonly", "no"]);
    let reply = server.client().cmd("ACL SAVE");
    assert!(text(&reply).starts_with("ERR This Redis instance is not configured to use an ACL file."), "{reply:?}");
}

#[test]
fn user_lines_in_the_config_file_make_users() {
    let dir = common::temp_dir("acl-conf");
    let conf = dir.join("keel.conf");
    std::fs::write(&conf, "user alice on >pw ~* +@all\nuser default on nopass ~* &* +@all -flushall\n").expect("write");
    let port = common::free_port();
    let args: Vec<String> = [conf.display().to_string(), "--port".into(), port.to_string(), "--appendonly".into(), "no".into()]
        .into_iter()
        .chain(["--dir".into(), dir.display().to_string()])
        .collect();
    let server = Server::spawn_with(env!("CARGO_BIN_EXE_keel-server").into(), args, port);
    let mut c = server.client();
    assert_eq!(c.cmd("FLUSHALL"), err("NOPERM this user has no permissions to run the 'flushall' command"));
    assert_eq!(c.cmd("AUTH alice pw"), ok());
    assert_eq!(c.cmd("FLUSHALL"), ok());
    // CONFIG REWRITE writes the users back as `user` lines.
    assert_eq!(c.cmd("ACL SETUSER carol on nopass ~c* +get"), ok());
    assert_eq!(c.cmd("CONFIG REWRITE"), ok());
    let rewritten = std::fs::read_to_string(&conf).expect("rewritten");
    let users: Vec<&str> = rewritten.lines().filter(|l| l.starts_with("user ")).collect();
    assert_eq!(
        users,
        [
            "user alice on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~* resetchannels +@all",
            "user carol on nopass ~c* resetchannels -@all +get",
            "user default on nopass sanitize-payload ~* &* +@all -flushall",
        ]
    );
    drop(server);

    // Both `user` lines and an aclfile: Redis refuses to start.
    let (status, log) =
        common::start_expecting_exit(&dir, &["--aclfile", &dir.join("x.acl").display().to_string(), "--user", "bob", "on"]);
    assert!(!status.success());
    assert!(log.contains("please define either an ACL file or declare users directly"), "{log}");
    // A bad rule stops the start too.
    let (status, log) = common::start_expecting_exit(&dir, &["--user", "bob", "+nosuch"]);
    assert!(!status.success());
    assert!(log.contains("Error loading ACL rule '+nosuch' for the user named 'bob'"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn acl_commands_answer_as_redis_does() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut c = server.client();
    assert_eq!(
        c.cmd("ACL SETUSER x bogus"),
        err("ERR Error in ACL SETUSER modifier 'bogus': Syntax error")
    );
    assert_eq!(c.cmd("ACL GETUSER x"), Frame::Null);
    assert_eq!(c.cmd("ACL SETUSER x on nopass ~k* +get (~s* +set)"), ok());
    let user = c.cmd("ACL GETUSER x");
    assert_eq!(field(&user, "commands"), bulk("-@all +get"));
    assert_eq!(field(&user, "keys"), bulk("~k*"));
    assert_eq!(field(&user, "channels"), bulk(""));
    let Frame::Array(selectors) = field(&user, "selectors") else { panic!("selectors") };
    assert_eq!(field(&selectors[0], "commands"), bulk("-@all +set"));
    assert_eq!(c.cmd("ACL DRYRUN x GET k1"), ok());
    assert_eq!(c.cmd("ACL DRYRUN x SET s1 v"), ok());
    assert_eq!(c.cmd("ACL DRYRUN x SET k1 v"), bulk("This user has no permissions to access the 'k1' key"));
    assert_eq!(c.cmd("ACL DRYRUN x DEL k1"), bulk("This user has no permissions to run the 'del' command"));
    assert_eq!(c.cmd("ACL DRYRUN nobody GET k"), err("ERR User 'nobody' not found"));
    assert_eq!(c.cmd("ACL DRYRUN x NOSUCH k"), err("ERR Command 'NOSUCH' not found"));
    assert_eq!(c.cmd("ACL DRYRUN x GET"), err("ERR wrong number of arguments for 'get' command"));
    assert_eq!(c.cmd("ACL CAT nosuch"), err("ERR Unknown category 'nosuch'"));
    let Frame::Array(cats) = c.cmd("ACL CAT") else { panic!("categories") };
    assert_eq!(cats.len(), 21);
    let Frame::Array(hll) = c.cmd("ACL CAT hyperloglog") else { panic!("commands") };
    assert_eq!(hll.len(), 5);
    assert_eq!(text(&c.cmd("ACL GENPASS")).len(), 64);
    assert_eq!(text(&c.cmd("ACL GENPASS 5")).len(), 2);
    assert_eq!(
        c.cmd("ACL GENPASS 0"),
        err("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096")
    );
    // The slow log hides ACL SETUSER's arguments.
    assert_eq!(c.cmd("CONFIG SET slowlog-log-slower-than 0"), ok());
    assert_eq!(c.cmd("ACL SETUSER y >secret"), ok());
    let log = format!("{:?}", c.cmd("SLOWLOG GET 2"));
    assert!(!log.contains("secret") || log.contains("redacted"), "{log}");
}

#[test]
fn acl_log_is_bounded_by_acllog_max_len() {
    let server = Server::start(&["--appendonly", "no", "--acllog-max-len", "2"]);
    let mut c = server.client();
    for user in ["u1", "u2", "u3"] {
        assert_eq!(c.send(&["AUTH", user, "x"]), err(WRONGPASS));
    }
    let Frame::Array(entries) = c.cmd("ACL LOG") else { panic!("an array") };
    assert_eq!(entries.iter().map(|e| field(e, "username")).collect::<Vec<_>>(), [bulk("u3"), bulk("u2")]);
    assert_eq!(c.cmd("CONFIG SET acllog-max-len 1"), ok());
    let Frame::Array(entries) = c.cmd("ACL LOG") else { panic!("an array") };
    assert_eq!(entries.len(), 1);
}

#[test]
fn a_replica_authenticates_with_masteruser() {
    let master = Server::start(&["--appendonly", "no"]);
    let mut m = master.client();
    assert_eq!(m.cmd("ACL SETUSER repl on >rpw +psync +replconf +ping"), ok());
    assert_eq!(m.cmd("ACL SETUSER default off"), ok());
    assert_eq!(m.cmd("AUTH repl rpw"), ok());
    let port = master.port.to_string();
    let replica = Server::start(&[
        "--appendonly", "no", "--replicaof", "127.0.0.1", &port, "--masteruser", "repl", "--masterauth", "rpw",
    ]);
    let mut r = replica.client();
    let deadline = Instant::now() + Duration::from_secs(10);
    while r.info_field("replication", "master_link_status") != "up" {
        assert!(Instant::now() < deadline, "the replica never linked");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn memcached_clients_are_the_default_users_and_only_without_a_password() {
    use common::memcache::{start_keel, McClient};
    let (server, mc_port) = start_keel(&["--appendonly", "no"]);
    let mut admin = server.client();
    assert_eq!(admin.cmd("ACL SETUSER admin on >a ~* &* +@all"), ok());
    assert_eq!(admin.cmd("AUTH admin a"), ok());
    // A default user that may not write: a memcached `set` is refused.
    assert_eq!(admin.cmd("ACL SETUSER default resetkeys ~* -@all +get"), ok());
    let mut mc = McClient::connect(mc_port);
    mc.write_raw(b"set k 0 0 1\r\nv\r\n");
    assert_eq!(mc.line(), "SERVER_ERROR NOPERM this user has no permissions to run the 'set' command");
    mc.write_raw(b"get k\r\n");
    assert_eq!(mc.line(), "END");
    // A default user with a password: memcached connections are refused.
    assert_eq!(admin.cmd("ACL SETUSER default +@all >pw"), ok());
    let mut refused = McClient::connect(mc_port);
    assert!(refused.line().starts_with("SERVER_ERROR"));
    assert!(refused.try_line().is_none(), "the connection is closed");
}

#[test]
fn sort_by_and_get_need_read_access_to_every_key() {
    let server = Server::start(&["--appendonly", "no"]);
    let mut admin = server.client();
    assert_eq!(admin.cmd("SET v1 1"), ok());
    assert_eq!(admin.cmd("LPUSH mylist 1"), int(1));
    assert_eq!(admin.cmd("ACL SETUSER s on nopass (+sort ~mylist)"), ok());
    let mut s = server.client();
    assert_eq!(s.cmd("AUTH s x"), ok());
    for rules in ["", "(+sort ~mylist ~v*)", "(+sort ~mylist %W~*)"] {
        if !rules.is_empty() {
            assert_eq!(admin.cmd(&format!("ACL SETUSER s {rules}")), ok());
        }
        assert_eq!(s.cmd("SORT mylist BY v*"), err("ERR BY option of SORT denied due to insufficient ACL permissions."));
        assert_eq!(s.cmd("SORT mylist GET v*"), err("ERR GET option of SORT denied due to insufficient ACL permissions."));
    }
    // BY without a pattern reads no other key.
    assert_eq!(s.cmd("SORT mylist BY nosort"), Frame::Array(vec![bulk("1")]));
    assert_eq!(admin.cmd("ACL SETUSER s (+sort ~mylist %R~*)"), ok());
    assert_eq!(s.cmd("SORT mylist BY v*"), Frame::Array(vec![bulk("1")]));
}
