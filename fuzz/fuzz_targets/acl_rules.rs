//! Any bytes as ACL SETUSER rules (split at 0xff bytes), and as an ACL
//! file: the parser answers a user or Redis's error, never panics; a user
//! it makes describes itself with rules that rebuild exactly its command
//! bitmap (`describe` asserts that, as Redis aborts on a mismatch), and
//! checking commands against it answers.
#![no_main]

use keel_server::acl;
use keel_server::command;
use libfuzzer_sys::fuzz_target;

const LINES: &[&[&[u8]]] = &[
    &[b"GET", b"k"],
    &[b"SET", b"k", b"v"],
    &[b"COPY", b"a", b"b"],
    &[b"PUBLISH", b"ch", b"m"],
    &[b"PSUBSCRIBE", b"c*"],
    &[b"SELECT", b"0"],
    &[b"CONFIG", b"GET", b"x"],
    &[b"SORT", b"l", b"BY", b"w*", b"STORE", b"d"],
];

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let pubsub_all = flags & 1 != 0;
    let rules: Vec<&[u8]> = rest.split(|&b| b == 0xff).collect();
    if let Ok(user) = acl::set_user(None, &rules, pubsub_all) {
        let _ = user.describe();
        for s in &user.selectors {
            let _ = (s.describe_commands(), s.keys_text(), s.channels_text());
        }
        for argv in LINES {
            let (id, spec) = command::resolve(argv).expect("a known command");
            let _ = user.check(id, spec, argv);
        }
        let _ = user.password_ok(b"pw");
    }
    if let Ok(users) = acl::parse_file(rest, "fuzz.acl", pubsub_all) {
        for (_, user) in users {
            let _ = user.describe();
        }
    }
});
