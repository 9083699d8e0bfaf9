//! One benchmark run: start the worker threads, follow their per-second
//! reports (live progress on a terminal), join them and merge what they
//! measured into a [`RunResult`], with keel-bench's own CPU use.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::{self, Config, Limit, Progress};
use crate::driver::{self, Msg, Shared, ThreadResult};
use crate::stats::{CmdStats, Cpu, RunResult, Second, SeriesCollector};
use crate::BenchError;

/// Set by SIGINT: the run stops and what was measured is reported.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Installs the SIGINT handler (once).
pub fn install_sigint() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Live progress printer.
struct Live {
    on: bool,
    tty: bool,
    label: String,
    total_ops: u64,
    total_errors: u64,
    expected_secs: Option<u64>,
}

impl Live {
    fn show(&mut self, s: &Second) {
        self.total_ops += s.total.ops;
        self.total_errors += s.total.errors;
        if !self.on {
            return;
        }
        let pct = match self.expected_secs {
            Some(t) if t > 0 => format!("{:3.0}%, ", (f64::from(s.second + 1) / t as f64 * 100.0).min(100.0)),
            _ => String::new(),
        };
        let line = format!(
            "[{}{pct}{:3} secs] {:>10} ops, {:>9} ops/sec, p50 {:.3} p99 {:.3} msec, errors {}",
            self.label,
            s.second + 1,
            self.total_ops,
            s.total.ops,
            s.total.q(50.0),
            s.total.q(99.0),
            self.total_errors
        );
        let mut e = std::io::stderr();
        if self.tty {
            let _ = write!(e, "\r{line}\x1b[K");
        } else {
            let _ = writeln!(e, "{line}");
        }
        let _ = e.flush();
    }

    fn end(&self) {
        if self.on && self.tty {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// Runs the benchmark once against `cfg.target`.
pub fn run_once(cfg: &Arc<Config>, label: &str) -> Result<RunResult, BenchError> {
    let addr = config::resolve(&cfg.target, cfg.ipv6)?;
    let threads = cfg.threads as usize;
    let abort = Arc::new(AtomicBool::new(false));
    let tls = match (&cfg.tls, &cfg.target) {
        (Some(options), config::Target::Tcp { host, .. }) => Some(crate::tls::Tls::new(options, host)?),
        _ => None,
    };
    let shared = Arc::new(Shared {
        tls,
        cfg: Arc::clone(cfg),
        addr,
        abort: Arc::clone(&abort),
        barrier: Barrier::new(threads),
        start: OnceLock::new(),
    });
    let (tx, rx) = mpsc::channel::<Msg>();
    let cpu0 = Cpu::now(false);
    let start_wall = SystemTime::now();
    let mut handles = Vec::with_capacity(threads);
    for t in 0..threads {
        let sh = Arc::clone(&shared);
        let tx = tx.clone();
        let h = std::thread::Builder::new()
            .name(format!("keel-bench-{t}"))
            .spawn(move || driver::run_thread(t, &sh, tx))
            .map_err(|e| BenchError::Run(format!("cannot start thread: {e}")))?;
        handles.push(h);
    }
    drop(tx);

    let names = cfg.stat_names();
    let mut collector = SeriesCollector::new(threads, names.len(), &cfg.percentiles);
    let tty = std::io::stderr().is_terminal();
    let mut live = Live {
        on: match cfg.progress {
            Progress::Always => true,
            Progress::Never => false,
            Progress::Auto => tty,
        },
        tty,
        label: label.to_string(),
        total_ops: 0,
        total_errors: 0,
        expected_secs: match cfg.limit {
            Limit::Time(t) => Some(t),
            Limit::Requests(_) => None,
        },
    };
    let mut done = 0;
    while done < threads {
        if interrupted() {
            abort.store(true, Ordering::SeqCst);
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Msg::Second(r)) => {
                for s in collector.add(r) {
                    live.show(&s);
                }
            }
            Ok(Msg::Done { thread, seconds }) => {
                done += 1;
                for s in collector.thread_done(thread, seconds) {
                    live.show(&s);
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    for s in collector.flush() {
        live.show(&s);
    }
    live.end();
    let mut results: Vec<ThreadResult> = Vec::with_capacity(threads);
    for h in handles {
        match h.join() {
            Ok(r) => results.push(r),
            Err(_) => return Err(BenchError::Run("a worker thread panicked".into())),
        }
    }
    let cpu = Cpu::now(false).minus(&cpu0);
    if let Some(f) = results.iter().find_map(|r| r.fatal.clone()) {
        return Err(BenchError::Run(f));
    }
    let t0 = shared.start.get().copied().unwrap_or_else(Instant::now);
    let end = results.iter().map(|r| r.end).max().unwrap_or_else(Instant::now);
    let duration = end.saturating_duration_since(t0);
    let open = cfg.rate.is_some();
    let mut cmds: Vec<CmdStats> = (0..names.len()).map(|_| CmdStats::new(open)).collect();
    let mut messages = Vec::new();
    let mut connection_errors = 0;
    let mut busiest: f64 = 0.0;
    for r in &results {
        for (a, b) in cmds.iter_mut().zip(&r.cmds) {
            a.merge(b);
        }
        connection_errors += r.connection_errors;
        for m in &r.messages {
            if !messages.contains(m) && messages.len() < 8 {
                messages.push(m.clone());
            }
        }
        let wall = duration.as_secs_f64().max(1e-6);
        busiest = busiest.max(r.cpu.total() / wall);
    }
    if let Some(prefix) = &cfg.client_stats {
        write_client_stats(prefix, label, &names, &results)?;
    }
    let mut series = collector.done;
    series.sort_by_key(|s| s.second);
    Ok(RunResult {
        names,
        cmds,
        start_unix_ms: unix_ms(start_wall),
        end_unix_ms: unix_ms(start_wall) + duration.as_millis() as u64,
        duration_us: duration.as_micros() as u64,
        series,
        connection_errors,
        error_messages: messages,
        interrupted: interrupted(),
        cpu,
        busiest_thread_cpu: busiest.min(1.0),
        target_rate: cfg.rate,
        target: cfg.target.describe(),
    })
}

/// --client-stats: one CSV per thread with every connection's totals.
fn write_client_stats(prefix: &str, label: &str, names: &[String], results: &[ThreadResult]) -> Result<(), BenchError> {
    let run: String = label.chars().filter(|c| c.is_ascii_digit()).collect();
    let run = if run.is_empty() { "1".to_string() } else { run };
    for (t, r) in results.iter().enumerate() {
        let path = format!("{prefix}-{run}-{t}.csv");
        let mut s = String::from("Client");
        for n in names {
            s.push_str(&format!(",{n} Ops,{n} Avg. Latency (msec)"));
        }
        s.push_str(",Connection Errors\n");
        for (c, cs) in r.clients.iter().enumerate() {
            s.push_str(&c.to_string());
            for (ops, sum) in cs.ops.iter().zip(&cs.latency_us_sum) {
                let avg = if *ops > 0 { *sum as f64 / *ops as f64 / 1000.0 } else { 0.0 };
                s.push_str(&format!(",{ops},{avg:.3}"));
            }
            s.push_str(&format!(",{}\n", cs.errors));
        }
        std::fs::write(&path, s).map_err(|e| BenchError::Output(format!("{path}: {e}")))?;
    }
    Ok(())
}
