//! Differential test of client-side caching against Debian's redis-server
//! 7.0.15: seeded random scripts of CLIENT TRACKING with random options
//! (REDIRECT to a live client, to none, to garbage, BCAST, PREFIX with
//! overlapping and empty prefixes, OPTIN, OPTOUT, NOLOOP, missing and
//! unknown arguments), CLIENT CACHING, GETREDIR, TRACKINGINFO and HELP,
//! RESET, HELLO 2 / 3, and reads and writes of a few keys by the tracking
//! connection itself, whose own invalidations (in RESP3) arrive after each
//! reply. After each command's reply a PING barrier collects every frame
//! the command produced; they must be Redis's, frame for frame. The id of the
//! redirection target differs between the servers and is compared as a
//! placeholder.

mod common;

use common::{readable, Client, Frame, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KEYS: &[&str] = &["a:1", "a:2", "ab", "b", "c"];

/// One random command; `$T` stands for the redirection target's id.
fn command(rng: &mut StdRng) -> Vec<String> {
    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let key = |rng: &mut StdRng| KEYS[rng.gen_range(0..KEYS.len())].to_string();
    match rng.gen_range(0..100) {
        0..=34 => {
            let mut argv = words(&["CLIENT", "TRACKING"]);
            argv.push(["on", "on", "on", "off", "OFF", "maybe"][rng.gen_range(0..6)].to_string());
            for _ in 0..rng.gen_range(0..4) {
                match rng.gen_range(0..14) {
                    0 | 1 => argv.extend(words(&["REDIRECT", "$T"])),
                    2 => argv.extend(words(&["REDIRECT", "999999"])),
                    3 => argv.extend(words(&["redirect", "abc"])),
                    4 | 5 => argv.push("BCAST".into()),
                    6 => argv.push("optin".into()),
                    7 => argv.push("OPTOUT".into()),
                    8 => argv.push("noloop".into()),
                    9..=11 => argv.extend(["PREFIX".to_string(), ["a:", "a", "ab", "b", ""][rng.gen_range(0..5)].to_string()]),
                    12 => argv.push("nosuch".into()),
                    _ => argv.push(["REDIRECT", "PREFIX"][rng.gen_range(0..2)].into()),
                }
            }
            argv
        }
        35..=44 => {
            let mut argv = words(&["CLIENT", "CACHING"]);
            argv.push(["yes", "no", "YES", "maybe"][rng.gen_range(0..4)].to_string());
            if rng.gen_range(0..10) == 0 {
                argv.push("extra".into());
            }
            argv
        }
        45..=49 => words(&[["CLIENT", "GETREDIR"], ["CLIENT", "TRACKINGINFO"]][rng.gen_range(0..2)]),
        50 => words(&["CLIENT", "GETREDIR", "x"]),
        51 => words(&["CLIENT", "TRACKINGINFO", "x"]),
        52 => words(&["CLIENT", "TRACKING"]),
        53 => words(&["RESET"]),
        54..=56 => words(&["HELLO", ["2", "3"][rng.gen_range(0..2)]]),
        57..=79 => {
            let mut argv = words(&["MGET"]);
            argv.extend((0..rng.gen_range(1..3)).map(|_| key(rng)));
            argv
        }
        80..=94 => vec!["SET".into(), key(rng), rng.gen_range(0..9).to_string()],
        95..=97 => vec!["DEL".into(), key(rng)],
        _ => words(&["FLUSHALL"]),
    }
}

/// `frame` with the target's id (as an integer) made a placeholder, and a
/// HELLO reply reduced to its protocol (server names and ids differ).
fn normalize(frame: Frame, target: i64) -> Frame {
    match frame {
        Frame::Integer(i) if i == target => Frame::Integer(-424242),
        Frame::Array(items) if items.first() == Some(&Frame::Bulk(b"server".to_vec())) => {
            Frame::Array(items.into_iter().skip_while(|f| *f != Frame::Bulk(b"proto".to_vec())).take(2).collect())
        }
        Frame::Array(items) => Frame::Array(items.into_iter().map(|f| normalize(f, target)).collect()),
        Frame::Push(items) => Frame::Push(items.into_iter().map(|f| normalize(f, target)).collect()),
        Frame::Set(items) => Frame::Set(items.into_iter().map(|f| normalize(f, target)).collect()),
        Frame::Map(pairs) => {
            let hello = pairs.iter().any(|(k, _)| *k == Frame::Bulk(b"server".to_vec()));
            if hello {
                return Frame::Map(pairs.into_iter().filter(|(k, _)| *k == Frame::Bulk(b"proto".to_vec())).collect());
            }
            Frame::Map(pairs.into_iter().map(|(k, v)| (k, normalize(v, target))).collect())
        }
        other => other,
    }
}

/// A server's two connections: the tracking one and the target.
struct Side {
    c: Client,
    target_id: i64,
    _target: Client,
}

impl Side {
    fn new(server: &Server) -> Side {
        let mut target = server.client();
        let Frame::Integer(target_id) = target.send(&["CLIENT", "ID"]) else { panic!("CLIENT ID") };
        Side { c: server.client(), target_id, _target: target }
    }

    /// Runs `argv` and returns every frame up to the barrier's PONG.
    fn run(&mut self, argv: &[String], token: usize) -> Vec<Frame> {
        let id = self.target_id.to_string();
        let argv: Vec<&str> = argv.iter().map(|a| if a == "$T" { id.as_str() } else { a.as_str() }).collect();
        self.c.write_command(&argv);
        // The barrier goes once the reply is in: Redis sends BCAST
        // messages at the end of its event loop turn, which would
        // otherwise hold the PING too.
        let mut frames = Vec::new();
        loop {
            let frame = normalize(self.c.read(), self.target_id);
            let push = matches!(frame, Frame::Push(_));
            frames.push(frame);
            if !push {
                break;
            }
        }
        let token = format!("barrier-{token}");
        self.c.write_command(&["PING", &token]);
        loop {
            let frame = self.c.read();
            if frame == Frame::Bulk(token.clone().into_bytes()) {
                return frames;
            }
            frames.push(normalize(frame, self.target_id));
        }
    }
}

fn run_seed(seed: u64, commands: usize, keel_args: &[&str]) {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(keel_args);
    let (mut r, mut k) = (Side::new(&redis), Side::new(&keel));
    let mut rng = StdRng::seed_from_u64(seed);
    let mut history = Vec::new();
    for step in 0..commands {
        let argv = command(&mut rng);
        let (want, got) = (r.run(&argv, step), k.run(&argv, step));
        history.push(format!("{} -> {}", argv.join(" "), readable(&format!("{want:?}"))));
        if want != got {
            let recent = history[history.len().saturating_sub(12)..].join("\n  ");
            panic!(
                "seed {seed} step {step}: {}\n  redis: {}\n  keel:  {}\nlast commands:\n  {recent}",
                argv.join(" "),
                readable(&format!("{want:?}")),
                readable(&format!("{got:?}"))
            );
        }
    }
}

#[test]
fn tracking_commands_match_redis() {
    for seed in 1..=4 {
        run_seed(seed, 1500, &[]);
    }
    run_seed(5, 1500, &["--threads", "4"]);
}

#[test]
fn client_help_matches_redis() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&[]);
    let want = redis.client().send(&["CLIENT", "HELP"]);
    let got = keel.client().send(&["CLIENT", "HELP"]);
    assert_eq!(readable(&format!("{got:?}")), readable(&format!("{want:?}")));
}
