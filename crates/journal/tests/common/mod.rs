//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use keel_journal::testing::{Failpoints, FaultyFiles, StdFiles};
use keel_journal::{BaseFormat, FsyncPolicy, Journal, JournalConfig, Replay, Replayed, Tuning};
#[allow(unused_imports)] // Not every test binary starts a server.
pub use keel_testkit::free_port;

pub fn config(root: &Path, fsync: FsyncPolicy) -> JournalConfig {
    JournalConfig {
        dir: root.join("appendonlydir"),
        filename: "appendonly.aof".into(),
        fsync,
        load_truncated: true,
        base_format: BaseFormat::Aof,
        timestamps: false,
        space_ahead: 4 << 20,
        sync_gap: Duration::ZERO,
        writer_batch_class: true,
        idle: false,
        keep_history: false,
    }
}

/// Tuning with quick retries, so fault tests do not sleep for seconds.
pub fn fast_tuning() -> Tuning {
    Tuning {
        retry_interval: Duration::from_millis(20),
        everysec_interval: Duration::from_millis(50),
        ..Tuning::default()
    }
}

pub fn faulty_tuning() -> (Tuning, Arc<Failpoints>) {
    let failpoints = Failpoints::new();
    let files = Arc::new(FaultyFiles { inner: Arc::new(StdFiles), failpoints: Arc::clone(&failpoints) });
    (Tuning { files, ..fast_tuning() }, failpoints)
}

pub fn open(cfg: &JournalConfig) -> (Journal, Replay) {
    Journal::open_with(cfg.clone(), fast_tuning()).unwrap()
}

/// Replays everything, panicking on error or on an RDB key.
pub fn replay_all(replay: Replay) -> Vec<(usize, Vec<Vec<u8>>)> {
    replay.map(|r| command(r.unwrap())).collect()
}

/// A replayed command as (db, argv); panics on an RDB key.
pub fn command(item: Replayed) -> (usize, Vec<Vec<u8>>) {
    match item {
        Replayed::Command { db, argv } => (db, argv),
        Replayed::Key(key) => panic!("an RDB key where a command was expected: {key:?}"),
        Replayed::Resize { db, .. } => panic!("an RDB sizing hint (db {db}) where a command was expected"),
        Replayed::ItemFlags { flags } => panic!("item flags {flags} where a command was expected"),
    }
}

pub fn strs(argv: &[Vec<u8>]) -> Vec<String> {
    argv.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect()
}

/// Waits (bounded) until `durable_lsn() >= lsn`.
pub fn wait_durable(j: &Journal, lsn: u64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while j.durable_lsn() < lsn {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    true
}

pub fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !f() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

pub fn incr_path(cfg: &JournalConfig) -> PathBuf {
    cfg.dir.join("appendonly.aof.1.incr.aof")
}

pub fn base_path(cfg: &JournalConfig) -> PathBuf {
    cfg.dir.join("appendonly.aof.1.base.aof")
}

/// `*N $len arg ...` for building files by hand.
pub fn resp(argv: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", argv.len()).into_bytes();
    for a in argv {
        out.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
    }
    out
}

/// The length of an incr file without the space its writer keeps written
/// ahead (`#` and `\n` bytes after the last command's `\r\n`).
pub fn content_len(path: &Path) -> u64 {
    let bytes = std::fs::read(path).unwrap();
    match bytes.iter().rposition(|&b| b != b'#' && b != b'\n') {
        Some(i) if bytes[i] == b'\r' => i as u64 + 2,
        Some(i) => i as u64 + 1,
        None => 0,
    }
}

/// Copies every file of `from` into `to` (created if absent): the files as
/// a crash at this moment would leave them, the page cache being the disk
/// to a process that dies.
pub fn copy_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}
