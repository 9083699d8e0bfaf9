//! Differential test of LATENCY against Debian's redis-server 7.0.15
//! (`common::diff`): the replies that do not depend on time must be
//! Redis's byte for byte. The monitor's threshold stays either off or far
//! above anything these commands take, so no event is ever recorded:
//! LATEST and HISTORY are empty, RESET counts none, GRAPH is its error,
//! DOCTOR the disabled monitor's report, HELP and every error are Redis's.

mod common;

use common::diff::Stream;

const LATENCY: &[&str] = &[
    "LATENCY LATEST",
    "LATENCY LATEST [x]",
    "LATENCY HISTORY [command|fast-command|expire-cycle|COMMAND|nope]",
    "LATENCY HISTORY command [x]",
    "LATENCY RESET [command|expire-cycle|EVICTION-DEL nope|a b c]",
    "LATENCY GRAPH [command|nope|fast-command x]",
    "LATENCY HELP [xxx]",
    "LATENCY [FOO|Latest|hElp]",
    "LATENCY HISTOGRAM nosuch [no|such]",
    "CONFIG GET latency-monitor-threshold",
];

/// Threshold values that never let one of these commands in: off, or
/// hours; and values CONFIG SET refuses.
const THRESHOLD_OFF: &[&str] = &["CONFIG SET latency-monitor-threshold [0|-1|abc|1.5|]"];
const THRESHOLD_HIGH: &[&str] = &["CONFIG SET latency-monitor-threshold [10000000|-1|abc|1.5|]"];

#[test]
fn latency_replies_match_redis_with_the_monitor_off() {
    // DOCTOR with the monitor never on is the same fixed text in both.
    let families: &[&[&str]] = &[LATENCY, THRESHOLD_OFF, &["LATENCY DOCTOR"]];
    Stream::new(families).run(0x1a7e, 400);
}

#[test]
fn latency_replies_match_redis_with_a_threshold_nothing_reaches() {
    let families: &[&[&str]] = &[LATENCY, THRESHOLD_HIGH];
    let mut stream = Stream::new(families);
    stream.prelude = &["CONFIG SET latency-monitor-threshold 10000000"];
    stream.run(0x1a7f, 400);
}

#[test]
fn latency_replies_match_redis_in_resp3() {
    let families: &[&[&str]] = &[LATENCY, THRESHOLD_OFF, &["LATENCY DOCTOR"]];
    let mut stream = Stream::new(families);
    stream.resp3 = true;
    stream.run(0x1a80, 300);
}
