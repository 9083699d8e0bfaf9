//! Micro benchmark, `#[ignore]`d: appends/s and fsyncs/s with `Always` on
//! this disk. Run with
//! `cargo test --release -p keel-journal --test bench -- --ignored --nocapture`.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use keel_journal::{FsyncPolicy, Journal, Tuning};
use parking_lot::{Condvar, Mutex};

/// Clients that wait for their own write to be durable, woken by on_durable
/// as the server's workers will be.
fn durable_clients(policy: FsyncPolicy, clients: usize, value_len: usize, secs: f64) {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), policy);
    let (j, _) = Journal::open_with(cfg, Tuning::default()).unwrap();
    let j = Arc::new(j);
    let gate = Arc::new((Mutex::new(0u64), Condvar::new()));
    let g2 = Arc::clone(&gate);
    j.on_durable(Box::new(move |lsn| {
        *g2.0.lock() = lsn;
        g2.1.notify_all();
    }));
    let value = vec![b'x'; value_len];
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(secs);
    let handles: Vec<_> = (0..clients)
        .map(|c| {
            let (j, gate, value) = (Arc::clone(&j), Arc::clone(&gate), value.clone());
            std::thread::spawn(move || {
                let key = format!("key:{c}");
                let mut n = 0u64;
                let mut lat = Vec::new();
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    let lsn = j.append(0, &[b"SET", key.as_bytes(), &value[..]]);
                    let mut d = gate.0.lock();
                    while *d < lsn {
                        gate.1.wait(&mut d);
                    }
                    drop(d);
                    lat.push(t0.elapsed().as_micros() as u64);
                    n += 1;
                }
                (n, lat)
            })
        })
        .collect();
    let mut total = 0;
    let mut lat = Vec::new();
    for h in handles {
        let (n, l) = h.join().unwrap();
        total += n;
        lat.extend(l);
    }
    let el = start.elapsed().as_secs_f64();
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    let st = j.stats();
    println!(
        "{policy:?} {clients:>3} clients x {value_len}B: {:>9.0} durable writes/s, {:>7.0} fsyncs/s, \
         {:>6.1} records/batch (max {}), ack latency p50 {} us p99 {} us, fsync p50 {} us p99 {} us",
        total as f64 / el,
        st.fsync_count as f64 / el,
        st.batch_records_avg,
        st.batch_records_max,
        pct(0.5),
        pct(0.99),
        st.fsync_latency_p50_us,
        st.fsync_latency_p99_us,
    );
}

/// Appenders that never wait: the cost of `append` itself.
fn raw_appends(threads: usize, value_len: usize, per_thread: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(tmp.path(), FsyncPolicy::Always);
    let (j, _) = Journal::open_with(cfg, Tuning { backlog_max_bytes: u64::MAX, ..Tuning::default() }).unwrap();
    let j = Arc::new(j);
    let value = vec![b'x'; value_len];
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|_| {
            let (j, value) = (Arc::clone(&j), value.clone());
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    j.append(0, &[&b"SET"[..], format!("k{i}").as_bytes(), &value[..]]);
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let el = start.elapsed().as_secs_f64();
    j.flush_and_sync().unwrap();
    let all = start.elapsed().as_secs_f64();
    let st = j.stats();
    println!(
        "append only, {threads} threads x {value_len}B: {:>10.0} appends/s ({:.0} MB/s); \
         all durable after {:.2} s: {} fsyncs, {:.0} records/batch",
        (threads * per_thread) as f64 / el,
        st.appended_lsn as f64 / el / 1e6,
        all,
        st.fsync_count,
        st.batch_records_avg,
    );
}

#[test]
#[ignore]
fn bench_journal() {
    for clients in [1, 4, 16, 64] {
        durable_clients(FsyncPolicy::Always, clients, 100, 2.0);
    }
    durable_clients(FsyncPolicy::Always, 64, 6000, 2.0);
    durable_clients(FsyncPolicy::EverySec, 64, 100, 2.0);
    raw_appends(1, 100, 1_000_000);
    raw_appends(4, 100, 500_000);
}
