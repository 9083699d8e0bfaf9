//! Faults from a real filesystem that fills up: the server's directory is
//! a tmpfs of a few megabytes ([`Server::start_on_tmpfs`]), and ENOSPC
//! comes from the kernel wherever it strikes: a record's write, space
//! written ahead of the log, a rewrite's base file, a new incr file. The
//! failpoint tests (durability.rs, crash_against_redis.rs) choose where a
//! fault lands; these do not.
//!
//! A crash is a SIGSTOP, a copy of the directory as the server left it,
//! then SIGKILL: the tmpfs goes with the server's mount namespace, and a
//! stopped process writes nothing more, so the copy is what `kill -9`
//! would have left. The copy restarts on an ordinary filesystem.

mod common;

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rand::{Rng, SeedableRng};

use common::{bulk, copy_dir, temp_dir, wait_for, Client, Frame, Server};

const WRITERS: usize = 4;

/// `w{id}:{i}`'s value: 2000 bytes that name their key, then letters
/// that do not compress (a snapshot base compresses its strings).
fn value(id: usize, i: u64) -> String {
    let mut v = format!("{id}:{i}:");
    let mut rng = rand::rngs::StdRng::seed_from_u64((id as u64) << 32 | i);
    v.extend((v.len()..2000).map(|_| rng.sample(rand::distributions::Alphanumeric) as char));
    v
}

/// SETs `w{id}:0`, `w{id}:1`, ... until `stop`, counting in `acked` the
/// writes acknowledged. A write refused with
/// MISCONF is tried again until it is accepted; meanwhile the last
/// acknowledged write must still read back.
fn writer(port: u16, id: usize, acked: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let mut client = Client::connect(port);
    // Under `always` the reply to a write the disk refused waits until a
    // retry makes it durable: until the test frees space.
    client.stream.set_read_timeout(Some(Duration::from_secs(60))).expect("timeout");
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        match client.send(&["SET", &format!("w{id}:{i}"), &value(id, i)]) {
            Frame::Simple(_) => {
                i += 1;
                acked.store(i, Ordering::SeqCst);
            }
            Frame::Error(e) => {
                let text = String::from_utf8_lossy(&e);
                assert!(text.starts_with("MISCONF Errors writing to the AOF file: "), "{text}");
                if i > 0 {
                    let last = format!("w{id}:{}", i - 1);
                    assert_eq!(client.send(&["GET", &last]), bulk(&value(id, i - 1)), "{last} unreadable");
                }
                thread::sleep(Duration::from_millis(2));
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Writes `path` full of zeros until the filesystem has no room left but
/// `room` bytes.
fn fill_but(path: &std::path::Path, room: u64) {
    let mut file = std::fs::File::create(path).expect("ballast");
    let chunk = vec![0u8; 64 << 10];
    while file.write_all(&chunk).is_ok() {}
    file.set_len(file.metadata().expect("ballast").len() - room).expect("ballast");
}

/// SETs `k{i}` for every `i` in `keys`, pipelined.
fn set_keys(c: &mut Client, keys: std::ops::Range<u64>) {
    for i in keys.clone() {
        c.write_command(&["SET", &format!("k{i}"), &value(0, i)]);
    }
    for i in keys {
        assert_eq!(c.read(), common::ok(), "SET k{i}");
    }
}

/// The files in `dir` whose names start with `temp`: what a failed
/// rewrite or snapshot must not leave behind.
fn temp_files(dir: &std::path::Path) -> Vec<String> {
    let names = std::fs::read_dir(dir).expect("read_dir").flatten();
    names.map(|e| e.file_name().to_string_lossy().into_owned()).filter(|name| name.starts_with("temp")).collect()
}

/// The server's directory as `kill -9` would leave it now: copied while
/// the server is stopped, which then goes on.
fn crash_copy(server: &Server) -> std::path::PathBuf {
    server.signal("-STOP");
    let copy = temp_dir("full-disk-crashed");
    copy_dir(&server.files(""), &copy);
    server.signal("-CONT");
    copy
}

/// Every `k{i}`, for `i` below `n`, as written.
fn check_keys(server: &Server, n: u64) {
    let mut c = server.client();
    for i in 0..n {
        assert_eq!(c.send(&["GET", &format!("k{i}")]), bulk(&value(0, i)), "k{i} lost");
    }
}

fn info(c: &mut Client, field: &str) -> String {
    c.info_field("persistence", field)
}

/// BGREWRITEAOF, once it is over: `aof_last_bgrewrite_status`.
fn rewrite(c: &mut Client) -> String {
    assert_eq!(c.cmd("BGREWRITEAOF"), Frame::Simple(b"Background append only file rewriting started".to_vec()));
    wait_for("the rewrite's end", || info(c, "aof_rewrite_in_progress") == "0");
    info(c, "aof_last_bgrewrite_status")
}

/// Under `always` and `everysec`, writers fill the filesystem, which
/// holds a ballast file besides the log. Writes are then refused with
/// MISCONF, reads still answered, and INFO says so. Once the ballast goes
/// the writes resume by themselves. After a crash while the disk is full,
/// or after it, every acknowledged write is there.
#[test]
fn a_full_filesystem_refuses_writes_then_resumes_and_loses_nothing_acknowledged() {
    for appendfsync in ["always", "everysec"] {
        let Some(server) = Server::start_on_tmpfs("8m", &["--appendfsync", appendfsync, "--save", ""]) else { return };
        let ballast = server.files("ballast");
        std::fs::write(&ballast, vec![0u8; 2 << 20]).expect("ballast");
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Vec<Arc<AtomicU64>> = (0..WRITERS).map(|_| Arc::default()).collect();
        let writers: Vec<_> = acked
            .iter()
            .enumerate()
            .map(|(id, acked)| {
                let (port, acked, stop) = (server.port, acked.clone(), stop.clone());
                thread::spawn(move || writer(port, id, acked, stop))
            })
            .collect();

        let mut c = server.client();
        wait_for("a failed write", || info(&mut c, "aof_last_write_status") == "err");
        let refused = c.send(&["SET", "probe", "x"]);
        assert!(matches!(&refused, Frame::Error(e) if e.starts_with(b"MISCONF")), "{appendfsync}: {refused:?}");
        assert_eq!(c.send(&["GET", "w0:0"]), bulk(&value(0, 0)), "{appendfsync}");

        // A crash now, while the log refuses writes, and one after.
        let counts = |acked: &[Arc<AtomicU64>]| acked.iter().map(|a| a.load(Ordering::SeqCst)).collect::<Vec<_>>();
        let during = counts(&acked);
        let crashed_during = crash_copy(&server);

        std::fs::remove_file(&ballast).expect("ballast");
        wait_for("writes resumed", || acked.iter().zip(&during).all(|(a, b)| a.load(Ordering::SeqCst) > b + 20));
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().expect("writer");
        }
        assert_eq!(info(&mut c, "aof_last_write_status"), "ok", "{appendfsync}");
        let after = counts(&acked);
        let crashed_after = crash_copy(&server);
        server.kill9();

        for (copy, acked) in [(crashed_during, during), (crashed_after, after)] {
            let server = Server::start_last_in(&copy, &[]);
            let mut c = server.client();
            for (id, &n) in acked.iter().enumerate() {
                for i in 0..n {
                    let key = format!("w{id}:{i}");
                    assert_eq!(c.send(&["GET", &key]), bulk(&value(id, i)), "{appendfsync}: acknowledged {key} lost");
                }
            }
        }
    }
}

/// A rewrite whose base file does not fit fails, and leaves the log as it
/// was: writes go on, INFO reports the failure, a later rewrite with room
/// succeeds, and a crash after either loses nothing.
#[test]
fn a_rewrite_that_does_not_fit_fails_and_leaves_the_log_whole() {
    // Under `everysec` no space is written ahead of the log, which a
    // rewrite would give back as it starts its new incr file.
    let Some(server) = Server::start_on_tmpfs("8m", &["--appendfsync", "everysec", "--save", ""]) else { return };
    let mut c = server.client();
    set_keys(&mut c, 0..1000);
    let ballast = server.files("ballast");
    // Room for a few writes, not for a 2 MB base file.
    fill_but(&ballast, 256 << 10);

    assert_eq!(rewrite(&mut c), "err");
    set_keys(&mut c, 1000..1050);
    assert_eq!(info(&mut c, "aof_last_write_status"), "ok");
    let after_failure = crash_copy(&server);

    std::fs::remove_file(&ballast).expect("ballast");
    assert_eq!(rewrite(&mut c), "ok");
    set_keys(&mut c, 1050..1100);
    let after_success = crash_copy(&server);
    drop(server);

    for (copy, n) in [(after_failure, 1050), (after_success, 1100)] {
        assert_eq!(temp_files(&copy.join("appendonlydir")), Vec::<String>::new(), "left behind");
        let server = Server::start_last_in(&copy, &[]);
        check_keys(&server, n);
    }
}

/// A snapshot that does not fit fails and leaves the last one whole:
/// writes are refused (`stop-writes-on-bgsave-error`), reads answered,
/// and once a BGSAVE with room succeeds the writes resume. A start on
/// what a crash leaves loads the last good snapshot.
#[test]
fn a_snapshot_that_does_not_fit_fails_and_leaves_the_last_one_whole() {
    // Writes are refused only where `save` has rules, as in Redis; this
    // one never fires during the test.
    let rdb_only = ["--appendonly", "no", "--save", "3600 1"];
    let Some(server) = Server::start_on_tmpfs("8m", &rdb_only) else { return };
    let mut c = server.client();
    let bgsave = |c: &mut Client| {
        assert_eq!(c.cmd("BGSAVE"), Frame::Simple(b"Background saving started".to_vec()));
        wait_for("the snapshot's end", || info(c, "rdb_bgsave_in_progress") == "0");
        info(c, "rdb_last_bgsave_status")
    };
    set_keys(&mut c, 0..1000);
    assert_eq!(bgsave(&mut c), "ok");
    set_keys(&mut c, 1000..1500);
    let ballast = server.files("ballast");
    // Room for the writes, not for a 3 MB snapshot beside the 2 MB one.
    fill_but(&ballast, 512 << 10);
    assert_eq!(bgsave(&mut c), "err");
    let refused = c.send(&["SET", "probe", "x"]);
    assert!(matches!(&refused, Frame::Error(e) if e.starts_with(b"MISCONF")), "{refused:?}");
    assert_eq!(c.send(&["GET", "k1499"]), bulk(&value(0, 1499)));
    let after_failure = crash_copy(&server);

    std::fs::remove_file(&ballast).expect("ballast");
    assert_eq!(bgsave(&mut c), "ok");
    set_keys(&mut c, 1500..1510);
    let after_success = crash_copy(&server);
    drop(server);

    for (copy, n) in [(after_failure, 1000), (after_success, 1500)] {
        assert_eq!(temp_files(&copy), Vec::<String>::new(), "left behind");
        let server = Server::start_last_in(&copy, &rdb_only);
        check_keys(&server, n);
        assert_eq!(server.client().cmd("DBSIZE"), common::int(n as i64));
    }
}

/// Under `always` the incr file keeps space written ahead of its end
/// (prealloc.rs), but never the room a rewrite needs: on a filesystem with
/// room for the log and its base beside it, a rewrite with writes going on
/// (whose new incr file gets space ahead too) succeeds, as it would in
/// Redis, which writes nothing ahead. The writes are few (a rewrite on a
/// loaded machine can take seconds): the log and two bases, 5 MB, leave
/// 3 MB of the 8 for them and the space ahead, less than the 4 MB of
/// space ahead alone.
#[test]
fn space_written_ahead_leaves_room_for_a_rewrite() {
    let Some(server) = Server::start_on_tmpfs("8m", &["--save", ""]) else { return };
    let mut c = server.client();
    set_keys(&mut c, 0..1250);
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicU64::new(0));
    let writer = {
        let (port, acked, stop) = (server.port, acked.clone(), stop.clone());
        thread::spawn(move || {
            let mut c = Client::connect(port);
            while !stop.load(Ordering::Relaxed) {
                let n = acked.load(Ordering::SeqCst);
                assert_eq!(c.send(&["SET", "counter", &n.to_string()]), common::ok());
                acked.store(n + 1, Ordering::SeqCst);
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    for _ in 0..2 {
        let before = acked.load(Ordering::SeqCst);
        wait_for("writes beside the rewrite", || acked.load(Ordering::SeqCst) > before + 100);
        assert_eq!(rewrite(&mut c), "ok");
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().expect("writer");
    check_keys(&server, 1250);
    assert_eq!(c.cmd("GET counter"), bulk(&(acked.load(Ordering::SeqCst) - 1).to_string()));
}
