//! The slow log: commands that ran for at least `slowlog-log-slower-than`
//! microseconds (negative: none, 0: every one), the newest
//! `slowlog-max-len` of them, kept as Redis keeps them (arguments trimmed,
//! passwords redacted) for SLOWLOG GET.
//!
//! `command::run` already times every command; a command under the
//! threshold costs one relaxed load here. The log is one mutex shared by
//! the workers, taken only for a command slow enough to be logged.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Redis's `SLOWLOG_ENTRY_MAX_ARGC` and `SLOWLOG_ENTRY_MAX_STRING`.
const MAX_ARGS: usize = 32;
const MAX_STRING: usize = 128;

/// One logged command, as SLOWLOG GET shows it.
#[derive(Clone, Debug)]
pub struct Entry {
    pub id: u64,
    pub time_s: u64,
    pub duration_us: u64,
    pub args: Vec<Vec<u8>>,
    pub addr: String,
    pub name: Vec<u8>,
}

#[derive(Default)]
struct Log {
    next_id: u64,
    /// Newest first.
    entries: VecDeque<Entry>,
}

pub struct SlowLog {
    threshold_us: AtomicI64,
    max_len: AtomicUsize,
    log: Mutex<Log>,
}

impl SlowLog {
    pub fn new(threshold_us: i64, max_len: usize) -> SlowLog {
        SlowLog { threshold_us: AtomicI64::new(threshold_us), max_len: AtomicUsize::new(max_len), log: Mutex::default() }
    }

    /// The directives, at start and at each CONFIG SET. As in Redis, a
    /// shorter `slowlog-max-len` drops the oldest entries at the next push.
    pub fn configure(&self, threshold_us: i64, max_len: usize) {
        self.threshold_us.store(threshold_us, Ordering::Relaxed);
        self.max_len.store(max_len, Ordering::Relaxed);
    }

    /// Whether a command that ran `duration_us` goes in the log.
    #[inline]
    pub fn wants(&self, duration_us: u64) -> bool {
        let threshold = self.threshold_us.load(Ordering::Relaxed);
        threshold >= 0 && duration_us >= threshold as u64
    }

    /// Logs `argv` (its arguments trimmed, `redacted` ones replaced).
    pub fn push(&self, argv: &[&[u8]], redacted: &[usize], duration_us: u64, addr: &str, name: &[u8]) {
        let args = trimmed(argv, redacted);
        let time_s = crate::server::unix_ms() / 1000;
        let mut log = self.log.lock();
        let id = log.next_id;
        log.next_id += 1;
        log.entries.push_front(Entry { id, time_s, duration_us, args, addr: addr.to_string(), name: name.to_vec() });
        log.entries.truncate(self.max_len.load(Ordering::Relaxed));
    }

    /// The newest `count` entries (all with `None`), newest first.
    pub fn newest(&self, count: Option<usize>) -> Vec<Entry> {
        let log = self.log.lock();
        log.entries.iter().take(count.unwrap_or(usize::MAX)).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.log.lock().entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        self.log.lock().entries.clear();
    }
}

/// Redis's `slowlogCreateEntry`: at most 32 arguments, the last of them
/// then saying how many more there were; each at most 128 bytes, then
/// saying how many more it had.
fn trimmed(argv: &[&[u8]], redacted: &[usize]) -> Vec<Vec<u8>> {
    let kept = argv.len().min(MAX_ARGS);
    (0..kept)
        .map(|j| {
            if kept != argv.len() && j == kept - 1 {
                format!("... ({} more arguments)", argv.len() - kept + 1).into_bytes()
            } else if redacted.contains(&j) {
                b"(redacted)".to_vec()
            } else if argv[j].len() > MAX_STRING {
                let mut arg = argv[j][..MAX_STRING].to_vec();
                arg.extend_from_slice(format!("... ({} more bytes)", argv[j].len() - MAX_STRING).as_bytes());
                arg
            } else {
                argv[j].to_vec()
            }
        })
        .collect()
}

/// The arguments of `argv` that carry secrets, which Redis logs as
/// "(redacted)": AUTH's, HELLO's after AUTH, ACL SETUSER's, CONFIG SET's
/// values of Redis's sensitive settings (`requirepass`, `masterauth`,
/// `masteruser`), and MIGRATE's AUTH and AUTH2 arguments.
pub fn redacted_args(argv: &[&[u8]]) -> Vec<usize> {
    let is = |arg: &[u8], word: &str| arg.eq_ignore_ascii_case(word.as_bytes());
    match argv {
        [name, ..] if is(name, "auth") => (1..argv.len()).collect(),
        [name, sub, ..] if is(name, "acl") && is(sub, "setuser") => (2..argv.len()).collect(),
        [name, rest @ ..] if is(name, "hello") => match rest.iter().position(|a| is(a, "auth")) {
            Some(at) => vec![at + 2, at + 3],
            None => Vec::new(),
        },
        [name, sub, pairs @ ..] if is(name, "config") && is(sub, "set") => pairs
            .chunks(2)
            .enumerate()
            .filter(|(_, pair)| ["requirepass", "masterauth", "masteruser"].iter().any(|name| is(pair[0], name)))
            .map(|(i, _)| 2 + 2 * i + 1)
            .collect(),
        [name, ..] if is(name, "migrate") => migrate_secrets(argv),
        _ => Vec::new(),
    }
}

/// MIGRATE's AUTH password and AUTH2 user name and password, found as
/// `migrateCommand` parses its options (what follows KEYS is keys).
fn migrate_secrets(argv: &[&[u8]]) -> Vec<usize> {
    let is = |arg: &[u8], word: &str| arg.eq_ignore_ascii_case(word.as_bytes());
    let mut secrets = Vec::new();
    let mut j = 6;
    while j < argv.len() && !is(argv[j], "keys") {
        let more = argv.len() - 1 - j;
        if is(argv[j], "auth") && more >= 1 {
            secrets.push(j + 1);
            j += 1;
        } else if is(argv[j], "auth2") && more >= 2 {
            secrets.extend([j + 1, j + 2]);
            j += 2;
        }
        j += 1;
    }
    secrets
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_commands_and_arguments_are_trimmed_as_redis_does() {
        let many: Vec<Vec<u8>> = (0..33).map(|i| i.to_string().into_bytes()).collect();
        let argv: Vec<&[u8]> = many.iter().map(|a| a.as_slice()).collect();
        let got = trimmed(&argv, &[]);
        assert_eq!(got.len(), 32);
        assert_eq!(got[30], b"30");
        assert_eq!(got[31], b"... (2 more arguments)");
        let long = vec![b'A'; 129];
        let got = trimmed(&[b"SADD", b"set", &long], &[]);
        assert_eq!(got[2], [vec![b'A'; 128], b"... (1 more bytes)".to_vec()].concat());
    }

    #[test]
    fn secrets_are_redacted() {
        assert_eq!(redacted_args(&[b"AUTH", b"user", b"pass"]), [1, 2]);
        assert_eq!(redacted_args(&[b"HELLO", b"3", b"AUTH", b"u", b"p", b"SETNAME", b"n"]), [3, 4]);
        assert_eq!(redacted_args(&[b"CONFIG", b"SET", b"maxmemory", b"1", b"requirepass", b"x"]), [5]);
        assert_eq!(redacted_args(&[b"CONFIG", b"SET", b"masteruser", b"repl", b"masterauth", b"pw"]), [3, 5]);
        assert!(redacted_args(&[b"GET", b"auth"]).is_empty());
        let migrate: [&[u8]; 12] = [b"MIGRATE", b"h", b"1", b"", b"0", b"5", b"AUTH", b"p", b"AUTH2", b"u", b"q", b"KEYS"];
        assert_eq!(redacted_args(&migrate), [7, 9, 10]);
        assert!(redacted_args(&[b"MIGRATE", b"h", b"1", b"", b"0", b"5", b"KEYS", b"auth", b"k"]).is_empty());
        let log = SlowLog::new(0, 2);
        for i in 0..3u64 {
            log.push(&[b"AUTH", b"secret"], &redacted_args(&[b"AUTH", b"secret"]), i, "127.0.0.1:1", b"");
        }
        let got = log.newest(None);
        assert_eq!((got.len(), got[0].id, got[1].id), (2, 2, 1), "newest first, at most max_len");
        assert_eq!(got[0].args, [b"AUTH".to_vec(), b"(redacted)".to_vec()]);
    }
}
