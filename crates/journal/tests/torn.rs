//! Torn tails and corruption (fjall style: damage the files, reopen).
#![allow(clippy::unwrap_used)]

mod common;

use std::fs::OpenOptions;
use std::io::Write;

use common::*;
use keel_journal::{FsyncPolicy, Journal, JournalError};

fn append_raw(path: &std::path::Path, bytes: &[u8]) {
    OpenOptions::new().append(true).open(path).unwrap().write_all(bytes).unwrap();
}

/// Writes three SETs through the journal and returns (config, file length).
fn setup(tmp: &std::path::Path) -> (keel_journal::JournalConfig, u64) {
    let cfg = config(tmp, FsyncPolicy::Always);
    let (j, _) = open(&cfg);
    for i in 0..3 {
        j.append(0, &[&b"SET"[..], format!("k{i}").as_bytes(), b"v"]);
    }
    j.flush_and_sync().unwrap();
    drop(j);
    let len = std::fs::metadata(incr_path(&cfg)).unwrap().len();
    (cfg, len)
}

#[test]
fn every_cut_of_the_last_command_is_truncated() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, good) = setup(tmp.path());
    let tail = resp(&["SET", "torn", "value-value"]);
    for cut in 1..tail.len() {
        let f = OpenOptions::new().write(true).open(incr_path(&cfg)).unwrap();
        f.set_len(good).unwrap();
        drop(f);
        append_raw(&incr_path(&cfg), &tail[..cut]);

        // Without aof-load-truncated: refused, with the offset of the torn command.
        let strict = keel_journal::JournalConfig { load_truncated: false, ..cfg.clone() };
        match Journal::open_with(strict, fast_tuning()) {
            Err(JournalError::Truncated { offset, file, .. }) => {
                assert_eq!(offset, good, "cut {cut}");
                assert_eq!(file, incr_path(&cfg));
            }
            other => panic!("cut {cut}: {other:?}"),
        }

        let (j, replay) = open(&cfg);
        assert_eq!(replay.warnings().len(), 1, "cut {cut}");
        assert_eq!(replay_all(replay).len(), 3, "the SELECT is consumed; cut {cut}");
        assert_eq!(j.appended_lsn(), good);
        assert_eq!(std::fs::metadata(incr_path(&cfg)).unwrap().len(), good);
        drop(j);
    }
}

#[test]
fn appends_after_a_truncated_tail_are_clean() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, good) = setup(tmp.path());
    append_raw(&incr_path(&cfg), b"*3\r\n$3\r\nSET\r\n$4\r\nto");
    let (j, replay) = open(&cfg);
    assert_eq!(replay_all(replay).len(), 3);
    let lsn = j.append(0, &[&b"SET"[..], b"after", b"1"]);
    j.flush_and_sync().unwrap();
    assert!(lsn > good);
    drop(j);
    let (_j, replay) = open(&cfg);
    let got = replay_all(replay);
    assert_eq!(got.len(), 4);
    assert_eq!(strs(&got[3].1), vec!["SET", "after", "1"]);
}

#[test]
fn unclosed_transaction_at_the_tail_is_cut_before_multi() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, good) = setup(tmp.path());
    let mut tail = resp(&["MULTI"]);
    tail.extend(resp(&["INCR", "a"]));
    tail.extend(resp(&["INCR", "b"]));
    append_raw(&incr_path(&cfg), &tail);
    let (j, replay) = open(&cfg);
    assert!(replay.warnings()[0].contains("MULTI"), "{:?}", replay.warnings());
    let got = replay_all(replay);
    assert_eq!(got.len(), 3);
    assert_eq!(j.appended_lsn(), good);
}

#[test]
fn zero_filled_tail_is_torn() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, good) = setup(tmp.path());
    append_raw(&incr_path(&cfg), &[0u8; 4096]);
    let (j, replay) = open(&cfg);
    assert_eq!(replay.warnings().len(), 1);
    assert_eq!(replay_all(replay).len(), 3);
    assert_eq!(j.appended_lsn(), good);
}

#[test]
fn garbage_at_the_tail_is_corruption_and_check_aof_fixes_it() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, good) = setup(tmp.path());
    append_raw(&incr_path(&cfg), b"this is not RESP at all\r\n");
    match Journal::open_with(cfg.clone(), fast_tuning()) {
        Err(JournalError::Corrupt { offset, .. }) => assert_eq!(offset, good),
        other => panic!("{other:?}"),
    }
    let manifest = cfg.dir.join("appendonly.aof.manifest");
    let bin = env!("CARGO_BIN_EXE_keel-check-aof");
    let out = std::process::Command::new(bin).arg(&manifest).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains(&format!("ok_up_to={good}")), "{text}");
    let out = std::process::Command::new(bin)
        .arg("--fix")
        .arg(&manifest)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("Successfully truncated"), "{text}");
    let out = std::process::Command::new(bin).arg(&manifest).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let (_j, replay) = open(&cfg);
    assert_eq!(replay_all(replay).len(), 3);
}

#[test]
fn corruption_in_the_middle_is_reported_with_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, _) = setup(tmp.path());
    // Damage the second SET's "$2" length prefix of the key.
    let path = incr_path(&cfg);
    let mut bytes = std::fs::read(&path).unwrap();
    let select = resp(&["SELECT", "0"]).len();
    let first = resp(&["SET", "k0", "v"]).len();
    let at = select + first + b"*3\r\n$3\r\nSET\r\n".len();
    assert_eq!(bytes[at], b'$');
    bytes[at] = b'%';
    std::fs::write(&path, &bytes).unwrap();
    match Journal::open_with(cfg.clone(), fast_tuning()) {
        Err(JournalError::Corrupt { offset, reason, .. }) => {
            assert_eq!(offset, at as u64, "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// A rewrite lists its new incr file before the writer moves to it, so a
/// crash in the middle of a write to the old one leaves that one torn and
/// the new one empty: the torn file is the log's tail, cut at start and by
/// keel-check-aof --fix, and appends go on in the new file.
#[test]
fn a_torn_file_followed_by_empty_ones_is_the_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, good) = setup(tmp.path());
    let manifest = cfg.dir.join("appendonly.aof.manifest");
    let mut listing = std::fs::read_to_string(&manifest).unwrap();
    listing.push_str("file appendonly.aof.2.incr.aof seq 2 type i\n");
    std::fs::write(&manifest, listing).unwrap();
    let next = cfg.dir.join("appendonly.aof.2.incr.aof");
    std::fs::write(&next, b"").unwrap();
    let mut torn = resp(&["SET", "torn", &"v".repeat(5000)])[..3000].to_vec();
    torn.extend((0..2000u64).map(|o| if (good + 3000 + o) % 512 == 511 { b'\n' } else { b'#' }));
    append_raw(&incr_path(&cfg), &torn);

    let bin = env!("CARGO_BIN_EXE_keel-check-aof");
    let out = std::process::Command::new(bin).arg(&manifest).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && text.contains(&format!("ok_up_to={good}")), "{text}");
    let strict = keel_journal::JournalConfig { load_truncated: false, ..cfg.clone() };
    match Journal::open_with(strict, fast_tuning()) {
        Err(JournalError::Truncated { offset, file, .. }) => assert_eq!((offset, file), (good, incr_path(&cfg))),
        other => panic!("{other:?}"),
    }
    let copy = tempfile::tempdir().unwrap();
    copy_files(&cfg.dir, copy.path());

    let (j, replay) = open(&cfg);
    assert_eq!(replay.warnings().len(), 1);
    assert_eq!(replay_all(replay).len(), 3);
    assert_eq!(std::fs::metadata(incr_path(&cfg)).unwrap().len(), good);
    j.append(0, &[&b"SET"[..], b"after", b"1"]);
    j.flush_and_sync().unwrap();
    drop(j);
    assert!(std::fs::metadata(&next).unwrap().len() > 0, "appends go on in the last file");
    let (_j, replay) = open(&cfg);
    assert_eq!(replay_all(replay).len(), 4);

    let manifest = copy.path().join("appendonly.aof.manifest");
    let out = std::process::Command::new(bin).arg("--fix").arg(&manifest).stdin(std::process::Stdio::null()).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("Successfully truncated"), "{text}");
}

#[test]
fn damage_in_a_file_before_the_last_fails_replay() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, _) = setup(tmp.path());
    // A base file with a torn tail: only the last file may be torn.
    let mut base = resp(&["SET", "b", "1"]);
    let good = base.len() as u64;
    base.extend_from_slice(b"*2\r\n$3\r\nDEL");
    std::fs::write(base_path(&cfg), &base).unwrap();
    let (_j, mut replay) = open(&cfg);
    let (db, first) = command(replay.next().unwrap().unwrap());
    assert_eq!((db, strs(&first)), (0, vec!["SET".to_string(), "b".into(), "1".into()]));
    match replay.next() {
        Some(Err(JournalError::Truncated { file, offset, .. })) => {
            assert_eq!(file, base_path(&cfg));
            assert_eq!(offset, good);
        }
        other => panic!("{other:?}"),
    }
    assert!(replay.next().is_none(), "the iterator ends after an error");
}

#[test]
fn damaged_rdb_base_stops_loading_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, _) = setup(tmp.path());
    // A signature and the start of an aux field, then nothing.
    std::fs::write(base_path(&cfg), b"REDIS0010\xfa\x09redis-ver").unwrap();
    let (_j, mut replay) = open(&cfg);
    match replay.next() {
        Some(Err(e @ JournalError::RdbBase { .. })) => {
            let text = e.to_string();
            assert!(text.contains("appendonly.aof.1.base.aof") && text.contains("RDB"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    assert!(replay.next().is_none(), "the iterator ends after an error");
}

#[test]
fn bad_manifests_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, _) = setup(tmp.path());
    let manifest = cfg.dir.join("appendonly.aof.manifest");
    std::fs::write(&manifest, "file appendonly.aof.1.incr.aof seq 1 type x\n").unwrap();
    assert!(matches!(
        Journal::open_with(cfg.clone(), fast_tuning()),
        Err(JournalError::Manifest(_))
    ));
    std::fs::write(&manifest, "file appendonly.aof.9.incr.aof seq 9 type i\n").unwrap();
    match Journal::open_with(cfg.clone(), fast_tuning()) {
        Err(e @ JournalError::Missing { .. }) => {
            assert!(e.to_string().contains("appendonly.aof.9.incr.aof doesn't exist"), "{e}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn old_style_single_aof_is_upgraded() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let mut old = resp(&["SELECT", "0"]);
    old.extend(resp(&["SET", "old", "1"]));
    std::fs::write(tmp.path().join("appendonly.aof"), &old).unwrap();
    let (j, replay) = open(&cfg);
    assert_eq!(replay_all(replay).len(), 1);
    j.append(0, &[&b"SET"[..], b"new", b"2"]);
    j.flush_and_sync().unwrap();
    drop(j);
    assert!(!tmp.path().join("appendonly.aof").exists());
    let manifest = std::fs::read_to_string(cfg.dir.join("appendonly.aof.manifest")).unwrap();
    assert_eq!(
        manifest,
        "file appendonly.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
    );
    let (_j, replay) = open(&cfg);
    assert_eq!(replay_all(replay).len(), 2);
}

/// Space as the writer writes it ahead (`prealloc.rs`) at file offsets
/// `from..from + len`: `#`, with `\n` at offsets 511 mod 512, the first byte
/// `#` always.
fn space(from: u64, len: u64) -> Vec<u8> {
    let mut bytes: Vec<u8> = (from..from + len).map(|o| if o % 512 == 511 { b'\n' } else { b'#' }).collect();
    bytes[0] = b'#';
    bytes
}

#[test]
fn space_written_ahead_after_the_last_command_is_cut_without_a_warning() {
    for len in [1, 511, 512, 4096, 4097] {
        let tmp = tempfile::tempdir().unwrap();
        let (cfg, good) = setup(tmp.path());
        append_raw(&incr_path(&cfg), &space(good, len));
        let strict = keel_journal::JournalConfig { load_truncated: false, ..cfg.clone() };
        let (j, replay) = Journal::open_with(strict, fast_tuning()).unwrap();
        assert!(replay.warnings().is_empty(), "len {len}: {:?}", replay.warnings());
        assert_eq!(replay_all(replay).len(), 3, "len {len}");
        assert_eq!(j.appended_lsn(), good, "len {len}");
        assert_eq!(std::fs::metadata(incr_path(&cfg)).unwrap().len(), good, "len {len}");
    }
}

#[test]
fn a_partial_command_then_space_written_ahead_is_a_torn_tail() {
    let tail = resp(&["SET", "torn", "value-value"]);
    for cut in 1..tail.len() {
        let tmp = tempfile::tempdir().unwrap();
        let (cfg, good) = setup(tmp.path());
        let mut bytes = tail[..cut].to_vec();
        let at = good + cut as u64;
        bytes.extend((at..at + 2000).map(|o| if o % 512 == 511 { b'\n' } else { b'#' }));
        append_raw(&incr_path(&cfg), &bytes);

        let strict = keel_journal::JournalConfig { load_truncated: false, ..cfg.clone() };
        match Journal::open_with(strict, fast_tuning()) {
            Err(JournalError::Truncated { offset, .. }) => assert_eq!(offset, good, "cut {cut}"),
            other => panic!("cut {cut}: {other:?}"),
        }
        let (j, replay) = open(&cfg);
        assert_eq!(replay.warnings().len(), 1, "cut {cut}");
        assert_eq!(replay_all(replay).len(), 3, "cut {cut}");
        assert_eq!(j.appended_lsn(), good, "cut {cut}");
    }
}

#[test]
fn garbage_before_space_written_ahead_is_still_corruption() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, good) = setup(tmp.path());
    let mut bytes = b"*2\r\n$3\r\nDEL\r\n$1\r\nkXY".to_vec();
    bytes.extend(space(good + bytes.len() as u64, 1000));
    append_raw(&incr_path(&cfg), &bytes);
    match Journal::open_with(cfg.clone(), fast_tuning()) {
        Err(JournalError::Corrupt { offset, .. }) => assert!(offset >= good, "{offset}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_open_transaction_before_a_cut_line_of_space_is_still_torn() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, good) = setup(tmp.path());
    let mut bytes = resp(&["MULTI"]);
    bytes.extend(resp(&["SET", "in", "tx"]));
    bytes.extend(b"#####");
    append_raw(&incr_path(&cfg), &bytes);
    let (j, replay) = open(&cfg);
    assert!(replay.warnings()[0].contains("MULTI"), "{:?}", replay.warnings());
    assert_eq!(replay_all(replay).len(), 3);
    assert_eq!(j.appended_lsn(), good);
}

/// `--truncate-to-timestamp T` cuts the last file at its first timestamp
/// annotation later than T: what was written after T goes, the rest stays
/// loadable. A cut that would leave nothing is refused.
#[test]
fn check_aof_truncates_to_a_timestamp() {
    let tmp = tempfile::tempdir().unwrap();
    let (cfg, good) = setup(tmp.path());
    let mut later = Vec::new();
    for (unix_s, key) in [(100, "a"), (200, "b"), (300, "c")] {
        later.extend(format!("#TS:{unix_s}\r\n").as_bytes());
        later.extend(resp(&["SET", key, "v"]));
    }
    append_raw(&incr_path(&cfg), &later);
    let manifest = cfg.dir.join("appendonly.aof.manifest");
    let bin = env!("CARGO_BIN_EXE_keel-check-aof");
    let truncate = |unix_s: &str| {
        let out = std::process::Command::new(bin).args(["--truncate-to-timestamp", unix_s]).arg(&manifest).output().unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (ok, text) = truncate("300");
    assert!(ok && text.contains("Truncate nothing"), "{text}");
    let (ok, text) = truncate("250");
    assert!(ok && text.contains("Successfully truncated AOF appendonly.aof.1.incr.aof to timestamp 250"), "{text}");
    let keys = |cfg| {
        let (_j, replay) = open(cfg);
        replay_all(replay).into_iter().map(|(_, argv)| String::from_utf8_lossy(&argv[1]).into_owned()).collect::<Vec<_>>()
    };
    assert_eq!(keys(&cfg), ["k0", "k1", "k2", "a", "b"]);
    let (ok, text) = truncate("150");
    assert!(ok, "{text}");
    assert_eq!(keys(&cfg), ["k0", "k1", "k2", "a"]);
    // Everything from the first annotation on, but not the file's start.
    let (ok, text) = truncate("0");
    assert!(ok, "{text}");
    assert_eq!(std::fs::metadata(incr_path(&cfg)).unwrap().len(), good);
    let (ok, text) = truncate("x");
    assert!(!ok && text.contains("Invalid timestamp"), "{text}");
    // A single file whose first line is already later: nothing would stay.
    let single = tmp.path().join("single.aof");
    std::fs::write(&single, [b"#TS:100\r\n".as_slice(), &resp(&["SET", "a", "v"])].concat()).unwrap();
    let out = std::process::Command::new(bin).arg(&single).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains(&format!("AOF {} is valid", single.display())), "{text}");
    let out = std::process::Command::new(bin).args(["--truncate-to-timestamp", "50"]).arg(&single).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success() && text.contains("has nothing before timestamp 50, aborting"), "{text}");
}
