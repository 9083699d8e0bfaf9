//! The differential harness: the same generated command streams go to
//! Debian's redis-server 7.0.15 and to Keel, and every reply must match
//! (errors by their text, unordered replies normalised first).
//!
//! Commands are generated from templates: `{k}` a key from a small set (so
//! commands collide on keys, across shards), `{v}` a value, `{i}` a small
//! integer, `{f}` a float, `{t}` a TTL, `{bit}` 0 or 1, `{o}` a bit offset,
//! and `[a|b|c]` one of the alternatives or none of them. A stream can
//! add its own tokens (`Stream::fill`) and normalisations
//! (`Stream::normalize`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{Frame, Server};

pub const KEYS: &[&str] = &["a", "b", "c", "{t}x", "{t}y", "num", "bits", "k:1", "k:2", "k:3"];

/// `seed`, moved by `KEEL_DIFF_SHIFT=n` times a large prime: a soak run by
/// hand (`KEEL_DIFF_SHIFT=7 cargo test --test differential_zset`) sends
/// streams the suite never sent.
pub fn shifted(seed: u64) -> u64 {
    seed + soak_setting("KEEL_DIFF_SHIFT", 0) * 1_000_003
}

/// A soak run: its seeds need not reach what the suite's are chosen to
/// reach, so checks of a stream's coverage hold only outside one.
pub fn soaking() -> bool {
    soak_setting("KEEL_DIFF_SHIFT", 0) != 0
}

/// `commands` times `KEEL_DIFF_SCALE` (by hand: longer streams reach
/// larger values and rarer encodings).
pub fn scaled(commands: usize) -> usize {
    commands * soak_setting("KEEL_DIFF_SCALE", 1) as usize
}

fn soak_setting(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

/// One differential run's shape.
pub struct Stream<'a> {
    pub families: &'a [&'a [&'a str]],
    /// Extra template tokens: `Some(text)` for a token it knows.
    pub fill: fn(&str, &mut StdRng) -> Option<String>,
    /// Extra normalisation, applied after the default one.
    pub normalize: fn(&str, Frame) -> Frame,
    pub resp3: bool,
    /// Commands sent to both servers first, as they are.
    pub prelude: &'a [&'a str],
    /// Both servers' extra start flags.
    pub flags: &'a [&'a str],
    /// Also compare the keyspace notifications each command sends
    /// (`notify-keyspace-events KEA`, one subscriber per server).
    pub notify: bool,
}

impl<'a> Stream<'a> {
    pub fn new(families: &'a [&'a [&'a str]]) -> Stream<'a> {
        Stream { families, fill: |_, _| None, normalize: |_, f| f, resp3: false, prelude: &[], flags: &[], notify: false }
    }

    /// Sends `commands` generated commands from `seed` to both servers and
    /// panics with the recent history at the first differing reply. Returns
    /// quietly when redis-server is not installed.
    pub fn run(&self, seed: u64, commands: usize) {
        let (seed, commands) = (shifted(seed), scaled(commands));
        let Some(redis) = Server::start_redis(self.flags) else { return };
        let keel = Server::start(self.flags);
        let mut r = redis.client();
        let mut k = keel.client();
        if self.resp3 {
            // HELLO's map differs by design (id, version); the rest must not.
            assert!(matches!(r.cmd("HELLO 3"), Frame::Map(_)));
            assert!(matches!(k.cmd("HELLO 3"), Frame::Map(_)));
        }
        for line in self.prelude {
            let argv: Vec<&str> = line.split(' ').collect();
            assert_eq!(r.send(&argv), k.send(&argv), "prelude `{line}`");
        }
        let mut listeners = self.notify.then(|| [Listener::new(&redis, &mut r), Listener::new(&keel, &mut k)]);
        let mut rng = StdRng::seed_from_u64(seed);
        let templates: Vec<&str> = self.families.iter().flat_map(|f| f.iter().copied()).collect();
        let mut history: Vec<String> = Vec::new();
        for _ in 0..commands {
            let argv = self.expand(templates[rng.gen_range(0..templates.len())], &mut rng);
            let name = argv[0].to_ascii_uppercase();
            history.push(argv.join(" "));
            let want = (self.normalize)(&name, normalize(&name, r.send(&argv)));
            let got = (self.normalize)(&name, normalize(&name, k.send(&argv)));
            let start = history.len().saturating_sub(15);
            if !same(&name, &want, &got) {
                panic!(
                    "seed {seed}: reply differs for `{}`\n redis: {want:?}\n keel:  {got:?}\nlast commands:\n  {}",
                    argv.join(" "),
                    history[start..].join("\n  ")
                );
            }
            if let Some([redis_events, keel_events]) = listeners.as_mut() {
                let want = redis_events.events(history.len(), None);
                let got = keel_events.events(history.len(), Some(want.len()));
                assert!(
                    want == got,
                    "seed {seed}: notifications differ for `{}`\n redis: {}\n keel:  {}\nlast commands:\n  {}",
                    argv.join(" "),
                    super::readable(&format!("{want:?}")),
                    super::readable(&format!("{got:?}")),
                    history[start..].join("\n  ")
                );
            }
        }
    }

}

/// A connection subscribed to every keyspace notification of a server.
struct Listener {
    client: super::Client,
}

impl Listener {
    /// Turns every event class on (through `c`) and subscribes.
    fn new(server: &Server, c: &mut super::Client) -> Listener {
        assert_eq!(c.cmd("CONFIG SET notify-keyspace-events KEAn"), Frame::Simple(b"OK".to_vec()));
        let mut client = server.client();
        client.cmd("PSUBSCRIBE __key*__:*");
        client.stream.set_read_timeout(Some(std::time::Duration::from_secs(2))).expect("timeout");
        Listener { client }
    }

    /// The notifications sent since the last call: those before the reply
    /// to a `PING step`, and with `at_least`, until there are that many
    /// (Keel delivers them after the command's reply, so the PING may
    /// overtake them).
    fn events(&mut self, step: usize, at_least: Option<usize>) -> Vec<Frame> {
        let token = step.to_string();
        self.client.write_command(&["PING", token.as_str()]);
        let pong = Frame::Array(vec![Frame::Bulk(b"pong".to_vec()), Frame::Bulk(token.into_bytes())]);
        let (mut events, mut ponged) = (Vec::new(), false);
        while !ponged || events.len() < at_least.unwrap_or(0) {
            // Missing events show as a shorter list once the wait times out.
            match self.client.try_read() {
                Some(frame) if frame == pong => ponged = true,
                Some(frame) => events.push(frame),
                None => break,
            }
        }
        events
    }
}

impl<'a> Stream<'a> {
    /// Expands one template with random choices.
    pub fn expand(&self, template: &str, rng: &mut StdRng) -> Vec<String> {
        let mut argv = Vec::new();
        // Words are separated by spaces outside brackets: an alternative
        // may hold several words (`[EX {t}|KEEPTTL]`).
        let mut words = Vec::new();
        let (mut depth, mut start) = (0, 0);
        for (i, ch) in template.char_indices() {
            match ch {
                '[' => depth += 1,
                ']' => depth -= 1,
                ' ' if depth == 0 => {
                    words.push(&template[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        words.push(&template[start..]);
        for word in words {
            let word = if let Some(inner) = word.strip_prefix('[').and_then(|w| w.strip_suffix(']')) {
                let choices: Vec<&str> = inner.split('|').collect();
                let pick = rng.gen_range(0..=choices.len());
                match choices.get(pick) {
                    Some(c) => *c,
                    None => continue,
                }
            } else {
                word
            };
            for part in word.split(' ') {
                argv.push((self.fill)(part, rng).unwrap_or_else(|| fill(part, rng)));
            }
        }
        argv
    }
}

fn fill(token: &str, rng: &mut StdRng) -> String {
    match token {
        "{k}" => KEYS[rng.gen_range(0..KEYS.len())].to_string(),
        "{v}" => match rng.gen_range(0..5) {
            0 => rng.gen_range(-100..100).to_string(),
            1 => "hello".into(),
            2 => format!("{}.{}", rng.gen_range(0..10), rng.gen_range(0..100)),
            3 => String::new(),
            _ => "x".repeat(rng.gen_range(1..60)),
        },
        "{i}" => rng.gen_range(-5..20).to_string(),
        "{f}" => match rng.gen_range(0..4) {
            0 => "1.5".into(),
            1 => "-0.25".into(),
            2 => "3e2".into(),
            _ => "abc".into(),
        },
        "{t}" => match rng.gen_range(0..6) {
            0 => "0".into(),
            1 => "-1".into(),
            // Never short enough to run out during a test: the two
            // servers receive each command a little apart in time.
            _ => rng.gen_range(10_000..100_000).to_string(),
        },
        "{bit}" => rng.gen_range(0..2).to_string(),
        "{o}" => rng.gen_range(0..64).to_string(),
        other => other.to_string(),
    }
}

fn sort_frames(items: &mut [Frame]) {
    items.sort_by_key(|f| format!("{f:?}"));
}

/// Sorts the replies whose order Redis does not define: KEYS, and a flat
/// array or set of members (`sort_flat`), or a flat array of pairs / a map
/// (`sort_pairs`). Stream-specific commands use these through
/// `Stream::normalize`.
pub fn normalize(command: &str, frame: Frame) -> Frame {
    match command {
        "KEYS" => sort_flat(frame),
        _ => frame,
    }
}

pub fn sort_flat(frame: Frame) -> Frame {
    match frame {
        Frame::Array(mut items) => {
            sort_frames(&mut items);
            Frame::Array(items)
        }
        Frame::Set(mut items) => {
            sort_frames(&mut items);
            Frame::Set(items)
        }
        other => other,
    }
}

/// A flat array of (a, b) pairs or a map, with its pairs sorted.
pub fn sort_pairs(frame: Frame) -> Frame {
    match frame {
        Frame::Array(items) if items.len() % 2 == 0 => {
            let mut pairs: Vec<(Frame, Frame)> =
                items.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
            pairs.sort_by_key(|(a, b)| format!("{a:?}{b:?}"));
            Frame::Array(pairs.into_iter().flat_map(|(a, b)| [a, b]).collect())
        }
        Frame::Map(mut pairs) => {
            pairs.sort_by_key(|(a, b)| format!("{a:?}{b:?}"));
            Frame::Map(pairs)
        }
        other => other,
    }
}

/// Equal, except that remaining TTLs may differ by the time between the two
/// servers receiving the command (a second for TTL, that in ms for PTTL).
fn same(command: &str, want: &Frame, got: &Frame) -> bool {
    match (command, want, got) {
        ("TTL", Frame::Integer(a), Frame::Integer(b)) if *a > 0 && *b > 0 => (a - b).abs() <= 1,
        ("PTTL", Frame::Integer(a), Frame::Integer(b)) if *a > 0 && *b > 0 => (a - b).abs() <= 1000,
        _ => want == got,
    }
}
