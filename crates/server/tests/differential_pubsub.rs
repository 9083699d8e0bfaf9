//! Differential tests of Pub/Sub against Debian's redis-server 7.0.15: a
//! random script over four connections per server (connection i on Redis
//! mirrors connection i on Keel, some of them in RESP3) of SUBSCRIBE,
//! PSUBSCRIBE, SSUBSCRIBE and their UNSUBSCRIBEs on a small pool of
//! channels (the empty name among them) and glob patterns, PUBLISH and
//! SPUBLISH from any connection, the PUBSUB subcommands, PING, GET and
//! RESET, in and out of subscribed mode; three seeds, one with four
//! worker threads. After every step each connection's frames (the
//! replies, the messages) must match Redis's.
//!
//! The generic `common::diff::Stream` uses one connection, so this file has
//! its own driver. A step ends with a barrier: after the command, `PING
//! <token>` on the acting connection, and once its answer is in, on every
//! other connection; what a connection got before its barrier's answer is
//! what the step produced there (Redis queues a message before PUBLISH
//! answers). Keel may deliver a message to another connection a little
//! later than Redis, so on Keel's side a connection is read until the
//! barrier and until it holds as many frames as Redis's did; extra frames
//! show up as a mismatch in the next step, or in the final silence check.
//!
//! What Redis leaves to hash order is normalised first: the replies of a
//! (P|S)UNSUBSCRIBE without arguments (compared as a set of names, and the
//! last count only, as the counts follow the order), the `pmessage` frames
//! of one PUBLISH on one connection (compared as a multiset), and PUBSUB
//! CHANNELS / SHARDCHANNELS (sorted).

mod common;

use std::time::Duration;

use common::{bulk, readable, Client, Frame, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const CONNECTIONS: usize = 4;
const CHANNELS: &[&str] = &["a", "b", "c", "news.x", "news.y", "n", ""];
const PATTERNS: &[&str] = &["n*", "news.?", "[ab]", "a", "news.*", "*", "?", "[^a]", "news.[x-z]", "n\\*"];

/// Redis, and the server compared with it: Keel with `keel_args` (or, to
/// check the driver's normalisation, a second Redis in place of Keel).
fn start_servers(keel_args: &[&str]) -> Option<(Server, Server)> {
    let redis = Server::start_redis(&[])?;
    let keel = Server::start(keel_args);
    Some((redis, keel))
}

/// A command as a line, an empty argument shown as `""`.
fn line(argv: &[String]) -> String {
    argv.iter().map(|a| if a.is_empty() { "\"\"".to_string() } else { a.clone() }).collect::<Vec<_>>().join(" ")
}

fn show(frame: &Frame) -> String {
    readable(&format!("{frame:?}"))
}

/// The items of an array or a push frame.
fn items(frame: &Frame) -> Option<&[Frame]> {
    match frame {
        Frame::Array(items) | Frame::Push(items) => Some(items),
        _ => None,
    }
}

/// Whether `frame` answers `PING token`, in any mode.
fn is_barrier(frame: &Frame, token: &str) -> bool {
    match frame {
        Frame::Bulk(b) => b == token.as_bytes(),
        Frame::Array(items) => items.len() == 2 && items[0] == bulk("pong") && items[1] == bulk(token),
        _ => false,
    }
}

/// Reads one frame within `timeout`; None when none came.
fn read_within(c: &mut Client, timeout: Duration) -> Option<Frame> {
    c.stream.set_read_timeout(Some(timeout)).expect("read timeout");
    c.try_read()
}

/// One generated step: which connection sends which command.
struct Step {
    conn: usize,
    argv: Vec<String>,
}

fn pick<'a>(rng: &mut StdRng, pool: &[&'a str]) -> &'a str {
    pool[rng.gen_range(0..pool.len())]
}

/// 0 to 3 names from `pool` (repeats allowed): none in one case out of
/// `none_in` (for SUBSCRIBE an arity error, for UNSUBSCRIBE all).
fn names(rng: &mut StdRng, pool: &[&str], none_in: u32) -> Vec<String> {
    let n = if rng.gen_range(0..none_in) == 0 { 0 } else { rng.gen_range(1..=3) };
    (0..n).map(|_| pick(rng, pool).to_string()).collect()
}

fn generate(rng: &mut StdRng, step: usize) -> Step {
    let conn = rng.gen_range(0..CONNECTIONS);
    let with = |cmd: &str, rest: Vec<String>| {
        let mut argv = vec![cmd.to_string()];
        argv.extend(rest);
        argv
    };
    let argv = match rng.gen_range(0..100) {
        0..=11 => with("SUBSCRIBE", names(rng, CHANNELS, 20)),
        12..=17 => with("UNSUBSCRIBE", names(rng, CHANNELS, 6)),
        18..=25 => with("PSUBSCRIBE", names(rng, PATTERNS, 20)),
        26..=30 => with("PUNSUBSCRIBE", names(rng, PATTERNS, 6)),
        31..=40 => with("SSUBSCRIBE", names(rng, CHANNELS, 20)),
        41..=45 => with("SUNSUBSCRIBE", names(rng, CHANNELS, 6)),
        46..=67 => with("PUBLISH", vec![pick(rng, CHANNELS).to_string(), format!("m{step}")]),
        68..=79 => with("SPUBLISH", vec![pick(rng, CHANNELS).to_string(), format!("s{step}")]),
        80..=81 => with("PUBSUB", [vec!["NUMSUB".to_string()], names(rng, CHANNELS, 4)].concat()),
        82 => with("PUBSUB", [vec!["SHARDNUMSUB".to_string()], names(rng, CHANNELS, 4)].concat()),
        83 => with("PUBSUB", vec!["NUMPAT".to_string()]),
        84..=85 => {
            let mut rest = vec!["CHANNELS".to_string()];
            if rng.gen_bool(0.5) {
                rest.push(pick(rng, PATTERNS).to_string());
            }
            with("PUBSUB", rest)
        }
        86..=87 => {
            let mut rest = vec!["SHARDCHANNELS".to_string()];
            if rng.gen_bool(0.5) {
                rest.push(pick(rng, PATTERNS).to_string());
            }
            with("PUBSUB", rest)
        }
        88..=91 => {
            if rng.gen_bool(0.5) {
                with("PING", vec![])
            } else {
                with("PING", vec![format!("p{step}")])
            }
        }
        92..=97 => with("GET", vec![pick(rng, CHANNELS).to_string()]),
        _ => with("RESET", vec![]),
    };
    Step { conn, argv }
}

/// One server's connections.
struct Side {
    conns: Vec<Client>,
}

impl Side {
    /// Runs `step` and returns what each connection got before its
    /// barrier (`PING token`). With `want`, a connection is also read past
    /// its barrier until it holds `want[i]` frames (None: too few came).
    fn run(&mut self, step: &Step, token: &str, want: Option<&[usize]>) -> Vec<Option<Vec<Frame>>> {
        let ping = ["PING", token];
        let mut out: Vec<Option<Vec<Frame>>> = (0..CONNECTIONS).map(|_| None).collect();
        self.conns[step.conn].write_command(&step.argv);
        self.conns[step.conn].write_command(&ping);
        out[step.conn] = self.read_to_barrier(step.conn, token, want.map(|w| w[step.conn]));
        for (i, c) in self.conns.iter_mut().enumerate() {
            if i != step.conn {
                c.write_command(&ping);
            }
        }
        for (i, slot) in out.iter_mut().enumerate() {
            if i != step.conn {
                *slot = self.read_to_barrier(i, token, want.map(|w| w[i]));
            }
        }
        out
    }

    fn read_to_barrier(&mut self, i: usize, token: &str, want: Option<usize>) -> Option<Vec<Frame>> {
        let c = &mut self.conns[i];
        let mut frames = Vec::new();
        let mut barrier = false;
        while !barrier || want.is_some_and(|w| frames.len() < w) {
            let frame = read_within(c, Duration::from_secs(5))?;
            if !barrier && is_barrier(&frame, token) {
                barrier = true;
            } else {
                frames.push(frame);
            }
        }
        Some(frames)
    }
}

/// The frames of one connection for one step, in a comparable form.
fn normalize(step: &Step, acting: bool, frames: &[Frame]) -> Vec<String> {
    let cmd = step.argv[0].to_ascii_uppercase();
    if acting && step.argv.len() == 1 && cmd.ends_with("UNSUBSCRIBE") {
        // Every subscription left, in hash order: the set of names and the
        // final count.
        let kind = cmd.to_ascii_lowercase();
        let all_replies = !frames.is_empty()
            && frames.iter().all(|f| items(f).is_some_and(|it| it.len() == 3 && it[0] == bulk(&kind)));
        if all_replies {
            let mut names: Vec<String> = frames.iter().map(|f| show(&items(f).expect("checked")[1])).collect();
            names.sort();
            let last = frames.last().expect("not empty");
            let push = matches!(last, Frame::Push(_));
            return vec![format!(
                "{kind} without arguments (push: {push}): names [{}], last count {}",
                names.join(", "),
                show(&items(last).expect("checked")[2])
            )];
        }
    }
    let mut out: Vec<String> = Vec::new();
    let mut run: Vec<String> = Vec::new();
    for frame in frames {
        let is_pmessage = items(frame).is_some_and(|it| it.first() == Some(&bulk("pmessage")));
        if is_pmessage {
            run.push(show(frame));
            continue;
        }
        run.sort();
        out.append(&mut run);
        let sorted_reply = acting
            && cmd == "PUBSUB"
            && step
                .argv
                .get(1)
                .is_some_and(|s| s.eq_ignore_ascii_case("CHANNELS") || s.eq_ignore_ascii_case("SHARDCHANNELS"));
        match frame {
            Frame::Array(items) if sorted_reply => {
                let mut names: Vec<String> = items.iter().map(show).collect();
                names.sort();
                out.push(format!("sorted Array([{}])", names.join(", ")));
            }
            _ => out.push(show(frame)),
        }
    }
    run.sort();
    out.append(&mut run);
    out
}

/// Panics with the recent script history.
fn fail(seed: u64, history: &[String], what: String) -> ! {
    let start = history.len().saturating_sub(25);
    panic!("seed {seed}: {what}\nlast steps (oldest first):\n  {}", history[start..].join("\n  "));
}

fn run_seed(seed: u64, steps: usize, keel_args: &[&str]) {
    let Some((redis, keel)) = start_servers(keel_args) else { return };
    let mut rng = StdRng::seed_from_u64(seed);
    let mut r = Side { conns: (0..CONNECTIONS).map(|_| redis.client()).collect() };
    let mut k = Side { conns: (0..CONNECTIONS).map(|_| keel.client()).collect() };
    let mut history: Vec<String> = Vec::new();
    for i in 0..CONNECTIONS {
        // Connection 0 stays RESP2 and 1 is RESP3; the others by chance.
        let resp3 = i == 1 || (i > 1 && rng.gen_bool(0.5));
        if resp3 {
            // HELLO's map differs by design (id, version); not compared.
            for side in [&mut r, &mut k] {
                let reply = side.conns[i].cmd("HELLO 3");
                assert!(matches!(reply, Frame::Map(_)), "HELLO 3: {}", show(&reply));
            }
            history.push(format!("[{i}] HELLO 3"));
        }
    }
    for n in 0..steps {
        let step = generate(&mut rng, n);
        let token = format!("barrier:{n}");
        history.push(format!("[{}] {}", step.conn, line(&step.argv)));
        let want = r.run(&step, &token, None);
        let want: Vec<Vec<Frame>> = want
            .into_iter()
            .enumerate()
            .map(|(i, f)| f.unwrap_or_else(|| fail(seed, &history, format!("redis connection {i} did not answer"))))
            .collect();
        let counts: Vec<usize> = want.iter().map(Vec::len).collect();
        let got = k.run(&step, &token, Some(&counts));
        for i in 0..CONNECTIONS {
            let want_i = normalize(&step, i == step.conn, &want[i]);
            let Some(got_i) = &got[i] else {
                fail(
                    seed,
                    &history,
                    format!(
                        "keel connection {i} got too few frames or no answer to `PING {token}`; redis got:\n    {}",
                        want_i.join("\n    ")
                    ),
                )
            };
            let got_i = normalize(&step, i == step.conn, got_i);
            if want_i != got_i {
                fail(
                    seed,
                    &history,
                    format!(
                        "connection {i} differs after `[{}] {}`\n redis:\n    {}\n keel:\n    {}",
                        step.conn,
                        line(&step.argv),
                        want_i.join("\n    "),
                        got_i.join("\n    ")
                    ),
                );
            }
        }
    }
    // Nothing left over anywhere.
    for (i, c) in k.conns.iter_mut().enumerate() {
        if let Some(frame) = read_within(c, Duration::from_millis(100)) {
            fail(seed, &history, format!("keel connection {i} got an extra frame at the end: {}", show(&frame)));
        }
    }
}

#[test]
fn pubsub_script_seed_1() {
    run_seed(1, 400, &[]);
}

#[test]
fn pubsub_script_seed_2() {
    run_seed(2, 400, &[]);
}

/// Four workers: the connections spread over more threads.
#[test]
fn pubsub_script_seed_3_four_threads() {
    run_seed(3, 400, &["--threads", "4"]);
}
