//! keel-bench against real servers started here (Debian's redis-server
//! and memcached), run as a user runs it, its JSON parsed back and checked.

mod common;

use std::net::TcpListener;

use common::{bench, bench_json, bench_ok, memcached_stats, start_memcached, start_redis, TempPath};
use serde_json::Value;

#[test]
fn a_request_count_run_writes_memtier_json() {
    let redis = start_redis();
    let json = TempPath::new("memtier.json");
    let port = redis.port.to_string();
    let stdout = bench_ok(&[
        "-s", "127.0.0.1", "-p", &port, "-t", "2", "-c", "5", "-n", "1000", "--ratio", "1:3",
        "--hide-histogram", "--json-out-file", json.as_str(),
    ]);
    assert!(stdout.contains("Totals"), "{stdout}");
    let parsed: serde_json::Value = serde_json::from_slice(&std::fs::read(&json.0).expect("json file")).expect("json");
    let stats = &parsed["ALL STATS"];
    let sets = stats["Sets"]["Count"].as_u64().expect("Sets Count");
    let gets = stats["Gets"]["Count"].as_u64().expect("Gets Count");
    // 2 threads x 5 clients x 1000 requests, split 1:3.
    assert_eq!(sets + gets, 10_000);
    assert!((2_000..3_000).contains(&sets), "sets {sets} for a 1:3 ratio");
    assert!(parsed["configuration"].is_object() && parsed["run information"].is_object());
}

#[test]
fn an_unreachable_server_fails_clearly() {
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port");
    let out = bench(&["-s", "127.0.0.1", "-p", &port.to_string(), "--test-time", "1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot connect"), "{}", String::from_utf8_lossy(&out.stderr));
}

/// `--tls` against redis-server with TLS: requests with a client
/// certificate all complete; the server's certificate is checked against
/// `--cacert` (its chain, not its name: it names no host, as memtier
/// allows), or not at all with `--tls-skip-verify`; a server that wants a
/// client certificate and gets none, or a certificate the CA did not
/// sign, makes the run invalid, saying why.
#[test]
fn a_run_over_tls_checks_certificates_as_memtier_does() {
    let dir = TempPath::new("tls-certs");
    std::fs::create_dir_all(&dir.0).expect("dir");
    common::make_certificates(&dir.0);
    let file = |name: &str| dir.0.join(name).display().to_string();
    let tls_port = keel_testkit::free_port().to_string();
    let _redis = common::start_redis_with(&[
        "--tls-port".into(), tls_port.clone(), "--tls-cert-file".into(), file("server.crt"),
        "--tls-key-file".into(), file("server.key"), "--tls-ca-cert-file".into(), file("ca.crt"),
    ]);
    let run = |extra: &[&str]| {
        let mut args = vec!["-s", "127.0.0.1", "-p", &tls_port, "-t", "1", "-c", "4", "-n", "500", "--hide-histogram", "--tls"];
        args.extend(extra);
        bench_json(&args)
    };
    let (ca, cert, key, wrong_ca) = (file("ca.crt"), file("client.crt"), file("client.key"), file("server.crt"));
    let (out, json) = run(&["--cacert", &ca, "--cert", &cert, "--key", &key, "--pipeline", "8", "-d", "20000"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats = &json["ALL STATS"];
    assert_eq!(stats["Sets"]["Count"].as_u64().unwrap_or(0) + stats["Gets"]["Count"].as_u64().unwrap_or(0), 2_000);
    let (out, _) = run(&["--tls-skip-verify", "--cert", &cert, "--key", &key]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for (extra, why) in [(&["--cacert", &ca][..], "CertificateRequired"), (&["--cacert", &wrong_ca, "--cert", &cert, "--key", &key], "UnknownIssuer")] {
        let (out, _) = run(extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(why), "{extra:?}: {stderr}");
    }
    // TLS options without --tls are a mistake, said before anything runs.
    let out = bench(&["-s", "127.0.0.1", "-p", &tls_port, "--cacert", &ca]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn an_open_loop_run_sends_every_request_due_on_time() {
    let redis = start_redis();
    let port = redis.port.to_string();
    let (out, json) = bench_json(&["-p", &port, "-t", "2", "-c", "50", "--rate", "2000", "--test-time", "2", "--ratio", "1:1", "--hide-histogram"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stats = &json["ALL STATS"];
    assert_eq!(stats["keel-bench"]["Open loop"], true);
    assert_eq!(stats["keel-bench"]["Target rate"], 2000.0);
    // 2000/s for 2 s: 4000 requests are due; a busy machine may notice the
    // end late for the last few, never send more.
    let count = stats["Totals"]["Count"].as_u64().expect("Count");
    assert!((3_800..=4_000).contains(&count), "{count} requests for 2000/s over 2 s");
    // Sent when due: timed from the due time, the median stays far below
    // the 50 ms between one connection's requests (a loop that only sent
    // on its housekeeping tick would show about 25 ms).
    let p50 = stats["Totals"]["Percentile Latencies"]["p50.00"].as_f64().expect("p50");
    assert!(p50 < 10.0, "corrected p50 {p50} ms");
    assert!(stats["Totals"]["Uncorrected Latency"]["p50.00"].as_f64().expect("uncorrected p50") <= p50);
}

#[test]
fn an_open_loop_run_reports_corrected_and_uncorrected_latency() {
    let redis = start_redis();
    let port = redis.port.to_string();
    let stdout = bench_ok(&["-p", &port, "-t", "1", "-c", "4", "--rate", "2000", "--test-time", "1", "--hide-histogram"]);
    assert!(stdout.contains("coordinated omission corrected") && stdout.contains("uncorrected"), "{stdout}");
}

/// A memcache_text run against `port`: its JSON "ALL STATS", after checking
/// that the run was valid.
fn memcache_run(port: u16, args: &[&str]) -> Value {
    let port = port.to_string();
    let mut all = vec!["-P", "memcache_text", "-p", &port, "-t", "1", "--hide-histogram"];
    all.extend_from_slice(args);
    let (out, json) = bench_json(&all);
    assert!(out.status.success(), "keel-bench {all:?}: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json["configuration"]["protocol"], "memcache_text");
    json["ALL STATS"].clone()
}

fn count(stats: &Value, row: &str) -> u64 {
    stats[row]["Count"].as_u64().unwrap_or_else(|| panic!("{row} Count in {stats}"))
}

fn rate(stats: &Value, row: &str, field: &str) -> f64 {
    stats[row][field].as_f64().unwrap_or_else(|| panic!("{row} {field} in {stats}"))
}

/// memcached's counter `name` grew by `by` between `before` and now.
fn assert_grew(port: u16, before: &std::collections::HashMap<String, u64>, name: &str, by: u64) {
    let now = memcached_stats(port);
    assert_eq!(now[name] - before[name], by, "memcached {name}");
}

#[test]
fn memcache_text_sets_then_gets_hit_and_unset_keys_miss() {
    let mc = start_memcached(&[]);
    // P:P with allkeys: the two connections set keys 1..=1000 exactly once.
    let keys = ["--key-minimum", "1", "--key-maximum", "1000", "--key-pattern", "P:P", "-n", "allkeys", "-c", "2"];
    let before = memcached_stats(mc.port);
    let sets = memcache_run(mc.port, &[&keys[..], &["--ratio", "1:0", "-d", "100"]].concat());
    assert_eq!((count(&sets, "Sets"), count(&sets, "Gets"), sets["Totals"]["Error Replies"].as_u64()), (1000, 0, Some(0)));
    assert_grew(mc.port, &before, "cmd_set", 1000);
    assert_eq!(memcached_stats(mc.port)["curr_items"], 1000);

    // The same keys read back: every get hits.
    let before = memcached_stats(mc.port);
    let gets = memcache_run(mc.port, &[&keys[..], &["--ratio", "0:1"]].concat());
    assert_eq!(count(&gets, "Gets"), 1000);
    assert_eq!(rate(&gets, "Gets", "Hits/sec"), rate(&gets, "Gets", "Ops/sec"));
    assert_eq!(rate(&gets, "Gets", "Misses/sec"), 0.0);
    assert_grew(mc.port, &before, "get_hits", 1000);
    // Each hit carried its 100-byte value back: VALUE line, data, END.
    assert!(rate(&gets, "Gets", "KB/sec RX") > rate(&gets, "Gets", "Ops/sec") * 100.0 / 1024.0);

    // Keys never set: every get misses.
    let before = memcached_stats(mc.port);
    let misses = memcache_run(mc.port, &["--key-minimum", "5001", "--key-maximum", "6000", "-n", "300", "-c", "2", "--ratio", "0:1"]);
    assert_eq!(count(&misses, "Gets"), 600);
    assert_eq!(rate(&misses, "Gets", "Hits/sec"), 0.0);
    assert_eq!(rate(&misses, "Gets", "Misses/sec"), rate(&misses, "Gets", "Ops/sec"));
    assert_grew(mc.port, &before, "get_misses", 600);
    assert_grew(mc.port, &before, "get_hits", 0);

    // Multi-key gets of 4 set keys: hits count keys, as memcached does.
    let before = memcached_stats(mc.port);
    let multi = memcache_run(mc.port, &["--key-minimum", "1", "--key-maximum", "1000", "-n", "100", "-c", "1", "--ratio", "0:4", "--multi-key-get", "4"]);
    assert_eq!(count(&multi, "Gets"), 100);
    assert!((rate(&multi, "Gets", "Hits/sec") - 4.0 * rate(&multi, "Gets", "Ops/sec")).abs() < 0.1, "{multi}");
    assert_grew(mc.port, &before, "get_hits", 400);

    // Half the key range set: keel-bench's hit share is memcached's.
    let before = memcached_stats(mc.port);
    let mixed = memcache_run(mc.port, &["--key-minimum", "1", "--key-maximum", "2000", "-n", "1000", "-c", "2", "--ratio", "0:1", "--distinct-client-seed"]);
    let after = memcached_stats(mc.port);
    let (hits, misses) = (after["get_hits"] - before["get_hits"], after["get_misses"] - before["get_misses"]);
    assert_eq!(hits + misses, 2000);
    assert!((700..1300).contains(&hits), "{hits} hits of 2000 over a half-set range");
    let share = rate(&mixed, "Gets", "Hits/sec") / rate(&mixed, "Gets", "Ops/sec");
    assert!((share - hits as f64 / 2000.0).abs() < 0.001, "keel-bench hit share {share}, memcached {hits}/2000");
}

#[test]
fn a_memcached_error_reply_is_counted_as_an_error() {
    // Items over 1 KB are refused with SERVER_ERROR; the connection stays usable.
    let mc = start_memcached(&["-I", "1k", "-o", "slab_chunk_max=1024"]);
    let port = mc.port.to_string();
    let (out, json) = bench_json(&[
        "-P", "memcache_text", "-p", &port, "-t", "1", "-c", "1", "-n", "20", "--ratio", "1:1", "-d", "3000", "--hide-histogram",
    ]);
    assert_eq!(out.status.code(), Some(1), "an error reply makes the run invalid");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("10 error repl") && stderr.contains("SERVER_ERROR object too large for cache"), "{stderr}");
    let stats = &json["ALL STATS"];
    assert_eq!(stats["Sets"]["Count"], 10);
    assert_eq!(stats["Sets"]["Error Replies"], 10);
    assert_eq!(stats["Gets"]["Error Replies"], 0);
    assert_eq!(stats["Totals"]["Error Replies"], 10);
    // Nothing was stored, and every reply was matched to its request.
    assert_eq!(stats["Gets"]["Count"], 10);
    assert_eq!(stats["Gets"]["Misses/sec"], stats["Gets"]["Ops/sec"]);
    assert_eq!(stats["Totals"]["Connection Errors"], 0);
}
