//! Any text as a configuration file: each line is applied or refused with
//! Redis's error, never a panic. What applied comes back through CONFIG
//! REWRITE: the file it writes, read into a fresh configuration, gives
//! every directive the same value.
#![no_main]

use keel_server::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let mut config = Config::default();
    if config.apply_file_text("fuzz.conf", text).is_err() {
        return;
    }
    // A quoted address with a space in it is one address in the file and
    // several in CONFIG GET's space-joined list, which is what a rewrite
    // writes, as Redis's does (such a server would not start anyway).
    if config.bind.iter().any(|address| address.contains(' ')) {
        return;
    }
    let path = std::env::temp_dir().join(format!("keel-fuzz-config-{}.conf", std::process::id()));
    let _ = std::fs::remove_file(&path);
    config.rewrite(&path, None, false).expect("rewrite");
    let rewritten = std::fs::read_to_string(&path).expect("rewritten file");
    let mut again = Config::default();
    again.apply_file_text("rewritten.conf", &rewritten).unwrap_or_else(|e| panic!("rewritten file refused: {e}\n{rewritten}"));
    let before: Vec<_> = config.matching(b"*").map(without_empty_addresses).collect();
    let after: Vec<_> = again.matching(b"*").map(without_empty_addresses).collect();
    assert_eq!(before, after, "rewritten file:\n{rewritten}");
});

/// `bind`'s addresses with an empty one left out: the space-joined value
/// cannot show it, so CONFIG REWRITE drops it, as Redis's does (a server
/// with one would not start anyway).
fn without_empty_addresses((name, value): (&'static str, String)) -> (&'static str, String) {
    match name {
        "bind" => (name, value.split(' ').filter(|a| !a.is_empty()).collect::<Vec<_>>().join(" ")),
        _ => (name, value),
    }
}
