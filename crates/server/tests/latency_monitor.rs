//! The latency monitor over real sockets: `latency-monitor-threshold`,
//! the `command`, `fast-command`, `expire-cycle`, `expire-del`,
//! `eviction-del` and `eviction-cycle` events, and LATENCY
//! LATEST, HISTORY, RESET, GRAPH, DOCTOR, HISTOGRAM and HELP. No test
//! asserts a time beyond "at least the threshold".

mod common;

use common::{err, int, ok, wait_for, Client, Frame, Server};

fn text(frame: Frame) -> String {
    match frame {
        Frame::Bulk(b) | Frame::Simple(b) | Frame::Error(b) | Frame::Verbatim { text: b, .. } => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("expected a string, got {other:?}"),
    }
}

fn items(frame: Frame) -> Vec<Frame> {
    match frame {
        Frame::Array(items) => items,
        other => panic!("expected an array, got {other:?}"),
    }
}

fn number(frame: &Frame) -> i64 {
    match frame {
        Frame::Integer(i) => *i,
        other => panic!("expected an integer, got {other:?}"),
    }
}

/// LATENCY LATEST as (event, time, latest ms, worst ms).
fn latest(c: &mut Client) -> Vec<(String, i64, i64, i64)> {
    items(c.cmd("LATENCY LATEST"))
        .into_iter()
        .map(|e| {
            let e = items(e);
            (text(e[0].clone()), number(&e[1]), number(&e[2]), number(&e[3]))
        })
        .collect()
}

fn event<'a>(events: &'a [(String, i64, i64, i64)], name: &str) -> Option<&'a (String, i64, i64, i64)> {
    events.iter().find(|e| e.0 == name)
}

/// `mybigkey`: a set of two hundred thousand members, each its own
/// allocation, so that freeing it takes more than a millisecond.
fn fill_big_set(c: &mut Client) {
    let fill = "local i = 0 while i < tonumber(ARGV[1]) do redis.call('sadd', KEYS[1], 'a member long enough to live on the heap ' .. i) i = i + 1 end";
    assert_eq!(c.send(&["EVAL", fill, "1", "mybigkey", "200000"]), Frame::Null);
}

fn server_time(c: &mut Client) -> i64 {
    text(items(c.cmd("TIME")).remove(0)).parse().expect("seconds")
}

#[test]
fn with_the_threshold_at_zero_nothing_is_recorded() {
    let server = Server::start(&["--enable-debug-command", "yes"]);
    let mut c = server.client();
    assert_eq!(c.cmd("CONFIG GET latency-monitor-threshold"), Frame::Array(vec![common::bulk("latency-monitor-threshold"), common::bulk("0")]));
    assert_eq!(c.cmd("DEBUG SLEEP 0.05"), ok());
    assert!(latest(&mut c).is_empty());
    assert_eq!(c.cmd("LATENCY HISTORY command"), Frame::Array(vec![]));
    assert!(text(c.cmd("LATENCY DOCTOR")).starts_with("I'm sorry, Dave, I can't do that. Latency monitoring is disabled"));
    assert_eq!(c.cmd("LATENCY GRAPH command"), err("ERR No samples available for event 'command'"));
}

#[test]
fn a_slow_command_is_a_command_event_in_latest_history_graph_and_doctor() {
    let server = Server::start(&["--latency-monitor-threshold", "40", "--enable-debug-command", "yes"]);
    let mut c = server.client();
    assert_eq!(text(items(c.cmd("CONFIG GET latency-monitor-threshold")).remove(1)), "40");
    let before = server_time(&mut c);
    assert_eq!(c.cmd("DEBUG SLEEP 0.06"), ok());
    let after = server_time(&mut c);
    let events = latest(&mut c);
    let (_, time, ms, max) = event(&events, "command").expect("a command event").clone();
    assert!((before..=after).contains(&time), "{time} not in {before}..={after}");
    assert!(ms >= 40 && max >= ms, "{ms} {max}");
    // DEBUG is not a fast command.
    assert!(event(&events, "fast-command").is_none(), "{events:?}");

    let history = items(c.cmd("LATENCY HISTORY command"));
    assert_eq!(history.len(), 1);
    assert_eq!(history[0], Frame::Array(vec![int(time), int(ms)]));
    // Names are matched exactly here, as in Redis.
    assert_eq!(c.cmd("LATENCY HISTORY COMMAND"), Frame::Array(vec![]));

    let graph = text(c.cmd("LATENCY GRAPH command"));
    let lines: Vec<&str> = graph.lines().collect();
    assert_eq!(lines[0], format!("command - high {ms} ms, low {ms} ms (all time high {max} ms)"));
    assert_eq!(lines[1], "-".repeat(80));
    // Four rows of curve (one sample at the lowest level: `_`), a blank
    // row, then the sample's age written downwards ("0s", "1s", ...).
    assert_eq!(&lines[2..7], &[" ", " ", " ", "_", " "]);
    assert!(lines[7].chars().all(|ch| ch.is_ascii_digit()) && lines.last() == Some(&"s"), "{graph:?}");

    let doctor = text(c.cmd("LATENCY DOCTOR"));
    assert!(doctor.starts_with("Dave, I have observed latency spikes in this Redis instance."), "{doctor}");
    assert!(doctor.contains(&format!("1. command: 1 latency spikes (average {ms}ms, mean deviation 0ms")), "{doctor}");
    assert!(doctor.contains("- Check your Slow Log"), "{doctor}");
    // The default slowlog threshold (10 ms) logs what the monitor sees.
    assert!(!doctor.contains("Your current Slow Log configuration"), "{doctor}");

    // RESP3: GRAPH and DOCTOR are verbatim strings.
    assert!(matches!(c.cmd("HELLO 3"), Frame::Map(_)));
    assert!(matches!(c.cmd("LATENCY GRAPH command"), Frame::Verbatim { ref format, .. } if format == b"txt"));
    assert!(matches!(c.cmd("LATENCY DOCTOR"), Frame::Verbatim { ref format, .. } if format == b"txt"));
}

#[test]
fn a_slow_fast_command_is_a_fast_command_event() {
    let server = Server::start(&[]);
    let mut c = server.client();
    // SADD is flagged fast; three hundred thousand members take well over
    // a millisecond.
    let mut sadd: Vec<String> = vec!["SADD".into(), "big".into()];
    sadd.extend((0..300_000).map(|i| i.to_string()));
    assert_eq!(c.cmd("CONFIG SET latency-monitor-threshold 1"), ok());
    assert_eq!(c.send(&sadd), int(300_000));
    let events = latest(&mut c);
    let (_, _, ms, _) = event(&events, "fast-command").expect("a fast-command event");
    assert!(*ms >= 1);
    assert_eq!(c.cmd("LATENCY RESET"), int(events.len() as i64));
    assert!(latest(&mut c).is_empty());
}

#[test]
fn the_journal_s_replay_records_nothing() {
    let dir = common::temp_dir("latency-replay");
    let mut sadd: Vec<String> = vec!["SADD".into(), "big".into()];
    sadd.extend((0..300_000).map(|i| i.to_string()));
    {
        let server = Server::start_in(&dir, &["--latency-monitor-threshold", "1"]);
        let mut c = server.client();
        assert_eq!(c.send(&sadd), int(300_000));
        assert!(event(&latest(&mut c), "fast-command").is_some());
    }
    // The same SADD, replayed at start, is no event (Redis's AOF load runs
    // its commands without the monitor too).
    let server = Server::start_last_in(&dir, &["--latency-monitor-threshold", "1"]);
    let mut c = server.client();
    assert!(event(&latest(&mut c), "fast-command").is_none());
    assert_eq!(c.cmd("SCARD big"), int(300_000));
}

#[test]
fn a_big_key_expiring_is_an_expire_cycle_and_expire_del_event() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("CONFIG SET latency-monitor-threshold 1"), ok());
    fill_big_set(&mut c);
    assert_eq!(c.cmd("PEXPIRE mybigkey 50"), int(1));
    wait_for("the key to expire", || c.cmd("DBSIZE") == int(0));
    wait_for("an expire-cycle event", || event(&latest(&mut c), "expire-cycle").is_some());
    let events = latest(&mut c);
    let (_, _, ms, max) = event(&events, "expire-cycle").expect("expire-cycle");
    assert!(*ms >= 1 && max >= ms);
    let history = items(c.cmd("LATENCY HISTORY expire-cycle"));
    assert!(!history.is_empty());
    // The key's own deletion, within that cycle, is an expire-del event.
    let (_, _, _, del_max) = event(&events, "expire-del").expect("expire-del");
    assert!(*del_max >= 1 && max >= del_max, "{events:?}");
}

#[test]
fn evicting_a_big_key_is_an_eviction_del_and_eviction_cycle_event() {
    let server = Server::start(&[]);
    let mut c = server.client();
    fill_big_set(&mut c);
    assert_eq!(c.cmd("CONFIG SET latency-monitor-threshold 1"), ok());
    assert_eq!(c.cmd("CONFIG SET maxmemory-policy allkeys-random"), ok());
    // Below what the process uses with no key at all: everything goes,
    // from the cron or before the next command.
    assert_eq!(c.cmd("CONFIG SET maxmemory 1mb"), ok());
    wait_for("the big key's eviction", || {
        c.cmd("PING");
        c.cmd("DBSIZE") == int(0)
    });
    wait_for("the eviction events", || {
        let events = latest(&mut c);
        event(&events, "eviction-del").is_some() && event(&events, "eviction-cycle").is_some()
    });
    let events = latest(&mut c);
    // Each deletion is within a cycle, so the worst cycle is no shorter.
    let (_, _, _, del_max) = event(&events, "eviction-del").expect("eviction-del");
    let (_, _, _, cycle_max) = event(&events, "eviction-cycle").expect("eviction-cycle");
    assert!(*del_max >= 1 && cycle_max >= del_max, "{events:?}");
    assert_eq!(c.cmd("CONFIG SET maxmemory 0"), ok());
}

#[test]
fn reset_counts_the_events_it_drops_by_name_in_any_case() {
    let server = Server::start(&["--latency-monitor-threshold", "20", "--enable-debug-command", "yes"]);
    let mut c = server.client();
    assert_eq!(c.cmd("LATENCY RESET"), int(0));
    assert_eq!(c.cmd("DEBUG SLEEP 0.03"), ok());
    assert!(event(&latest(&mut c), "command").is_some());
    assert_eq!(c.cmd("LATENCY RESET nope fast-command"), int(0));
    assert_eq!(c.cmd("LATENCY RESET COMMAND command"), int(1));
    assert!(event(&latest(&mut c), "command").is_none());
    // Turning the monitor off keeps what it has recorded.
    assert_eq!(c.cmd("DEBUG SLEEP 0.03"), ok());
    assert_eq!(c.cmd("CONFIG SET latency-monitor-threshold 0"), ok());
    assert!(event(&latest(&mut c), "command").is_some());
    assert!(text(c.cmd("LATENCY DOCTOR")).starts_with("Dave, I have observed"));
}

#[test]
fn errors_and_help_are_redis_s() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("LATENCY HELP xxx"), err("ERR wrong number of arguments for 'latency|help' command"));
    assert_eq!(c.cmd("LATENCY HISTORY"), err("ERR wrong number of arguments for 'latency|history' command"));
    assert_eq!(c.cmd("LATENCY GRAPH a b"), err("ERR wrong number of arguments for 'latency|graph' command"));
    assert_eq!(c.cmd("LATENCY LATEST x"), err("ERR wrong number of arguments for 'latency|latest' command"));
    assert_eq!(c.cmd("LATENCY FOO"), err("ERR unknown subcommand 'FOO'. Try LATENCY HELP."));
    assert_eq!(c.cmd("LATENCY"), err("ERR wrong number of arguments for 'latency' command"));
    assert_eq!(c.cmd("LATENCY GRAPH nope"), err("ERR No samples available for event 'nope'"));
    let help: Vec<String> = items(c.cmd("LATENCY HELP")).into_iter().map(text).collect();
    assert_eq!(help[0], "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:");
    assert_eq!(help.len(), 17);
    assert!(matches!(c.cmd("CONFIG SET latency-monitor-threshold -1"), Frame::Error(_)));
}

#[test]
fn histogram_reports_each_command_called_since_resetstat() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("CONFIG RESETSTAT"), ok());
    c.cmd("SET a b");
    c.cmd("SET c d");
    c.cmd("CLIENT ID");
    let reply = items(c.cmd("LATENCY HISTOGRAM set client nosuch"));
    assert_eq!(reply.len(), 4, "{reply:?}");
    assert_eq!(text(reply[0].clone()), "set");
    let set = items(reply[1].clone());
    assert_eq!((text(set[0].clone()), set[1].clone(), text(set[2].clone())), ("calls".into(), int(2), "histogram_usec".into()));
    // Cumulative: the last bucket holds every call.
    let buckets = items(set[3].clone());
    assert_eq!(buckets.last(), Some(&int(2)));
    assert_eq!(text(reply[2].clone()), "client|id");
    assert_eq!(c.cmd("LATENCY HISTOGRAM nosuch"), Frame::Array(vec![]));
    assert_eq!(c.cmd("CONFIG RESETSTAT"), ok());
    let all = items(c.cmd("LATENCY HISTOGRAM"));
    assert_eq!(all.len(), 2);
    assert_eq!(text(all[0].clone()), "config|resetstat");
}
