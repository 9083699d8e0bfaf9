//! keel-bench against a real Debian redis-server started here, run as a user
//! runs it. Skips (with a printed notice) only where
//! redis-server is not installed; `scripts/test.sh` installs it.

use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Redis {
    port: u16,
    child: Child,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_redis() -> Option<Redis> {
    if !std::path::Path::new("/usr/bin/redis-server").exists() {
        eprintln!("redis-server not installed: skipping");
        return None;
    }
    let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).expect("port");
    let child = Command::new("/usr/bin/redis-server")
        .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    Some(Redis { port, child })
}

fn bench(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_keel-bench")).args(args).output().expect("run keel-bench")
}

#[test]
fn a_request_count_run_writes_memtier_json() {
    let Some(redis) = start_redis() else { return };
    let json = std::env::temp_dir().join(format!("keel-bench-test-{}.json", std::process::id()));
    let port = redis.port.to_string();
    let out = bench(&[
        "-s", "127.0.0.1", "-p", &port, "-t", "2", "-c", "5", "-n", "1000", "--ratio", "1:3",
        "--hide-histogram", "--json-out-file", json.to_str().expect("utf8"),
    ]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Totals"), "{stdout}");
    let parsed: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).expect("json file")).expect("json");
    let _ = std::fs::remove_file(&json);
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

#[test]
fn an_open_loop_run_reports_corrected_and_uncorrected_latency() {
    let Some(redis) = start_redis() else { return };
    let port = redis.port.to_string();
    let out = bench(&["-p", &port, "-t", "1", "-c", "4", "--rate", "2000", "--test-time", "1", "--hide-histogram"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("coordinated omission corrected") && stdout.contains("uncorrected"), "{stdout}");
}
