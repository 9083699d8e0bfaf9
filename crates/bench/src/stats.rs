//! Measurements: per-thread counters and HDR histograms, per-second
//! reports sent to the main thread, and their merge into one run result.
//!
//! Latency is recorded in microseconds (memtier's unit; tables print
//! milliseconds). In open-loop mode the main histogram of every command is
//! the *corrected* latency, measured from the request's intended start, and
//! a second histogram keeps the uncorrected latency, measured from when the
//! request was actually written; in closed-loop mode the two are the same
//! thing and only one is kept.
//!
//! Each thread owns its histograms (no sharing on the hot path); the main
//! thread merges them after the run. Per-second histograms travel to the
//! main thread once a second and are reduced to a few quantiles there, so a
//! long run keeps bounded memory.

use hdrhistogram::Histogram;

/// Highest latency a histogram tracks, microseconds (1 hour); larger
/// values are clamped to it.
pub const LATENCY_US_MAX: u64 = 3_600_000_000;

/// Histogram for whole-run latencies: 3 significant digits, as memtier.
pub fn new_hist() -> Histogram<u64> {
    #[expect(clippy::unwrap_used)] // constant, valid bounds
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).unwrap()
}

/// Histogram for one second of one command: 2 significant digits.
pub fn new_sec_hist() -> Histogram<u64> {
    #[expect(clippy::unwrap_used)] // constant, valid bounds
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 2).unwrap()
}

/// Whole-run statistics of one command kind.
#[derive(Clone, Debug)]
pub struct CmdStats {
    pub ops: u64,
    pub hits: u64,
    pub misses: u64,
    pub errors: u64,
    pub bytes_rx: u64,
    pub bytes_tx: u64,
    /// Sum of latencies (main histogram's measure), microseconds.
    pub latency_us_sum: u64,
    pub hist: Histogram<u64>,
    /// Open loop only: latency from the actual send.
    pub uncorrected: Option<Histogram<u64>>,
    pub uncorrected_us_sum: u64,
}

impl CmdStats {
    pub fn new(open_loop: bool) -> CmdStats {
        CmdStats {
            ops: 0,
            hits: 0,
            misses: 0,
            errors: 0,
            bytes_rx: 0,
            bytes_tx: 0,
            latency_us_sum: 0,
            hist: new_hist(),
            uncorrected: if open_loop { Some(new_hist()) } else { None },
            uncorrected_us_sum: 0,
        }
    }

    pub fn merge(&mut self, o: &CmdStats) {
        self.ops += o.ops;
        self.hits += o.hits;
        self.misses += o.misses;
        self.errors += o.errors;
        self.bytes_rx += o.bytes_rx;
        self.bytes_tx += o.bytes_tx;
        self.latency_us_sum += o.latency_us_sum;
        self.uncorrected_us_sum += o.uncorrected_us_sum;
        // Same bounds on both sides: addition cannot fail.
        let _ = self.hist.add(&o.hist);
        if let (Some(a), Some(b)) = (&mut self.uncorrected, &o.uncorrected) {
            let _ = a.add(b);
        }
    }

    /// Mean latency, milliseconds.
    pub fn avg_ms(&self) -> f64 {
        if self.hist.is_empty() {
            0.0
        } else {
            self.hist.mean() / 1000.0
        }
    }

    pub fn pct_ms(&self, p: f64) -> f64 {
        self.hist.value_at_percentile(p) as f64 / 1000.0
    }
}

/// One second of one command, as a thread measured it.
#[derive(Clone, Debug)]
pub struct SecCmd {
    pub ops: u64,
    pub errors: u64,
    pub bytes_rx: u64,
    pub bytes_tx: u64,
    pub latency_us_sum: u64,
    pub hist: Histogram<u64>,
}

impl SecCmd {
    pub fn new() -> SecCmd {
        SecCmd { ops: 0, errors: 0, bytes_rx: 0, bytes_tx: 0, latency_us_sum: 0, hist: new_sec_hist() }
    }
    pub fn merge(&mut self, o: &SecCmd) {
        self.ops += o.ops;
        self.errors += o.errors;
        self.bytes_rx += o.bytes_rx;
        self.bytes_tx += o.bytes_tx;
        self.latency_us_sum += o.latency_us_sum;
        let _ = self.hist.add(&o.hist);
    }
}

impl Default for SecCmd {
    fn default() -> Self {
        SecCmd::new()
    }
}

/// A thread's report for one second since the run started.
#[derive(Debug)]
pub struct SecondReport {
    /// Reporting thread, for debugging.
    #[allow(dead_code)]
    pub thread: usize,
    pub second: u32,
    pub cmds: Vec<SecCmd>,
}

/// Quantiles kept for every second (percent).
pub const SERIES_PERCENTILES: [f64; 4] = [50.0, 90.0, 99.0, 99.9];

/// One second of one command (or the total), reduced.
#[derive(Clone, Debug, Default)]
pub struct SecSummary {
    pub ops: u64,
    pub errors: u64,
    pub bytes_rx: u64,
    pub bytes_tx: u64,
    pub latency_us_sum: u64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub avg_ms: f64,
    /// (percent, ms) for the table's percentiles and SERIES_PERCENTILES.
    pub quantiles: Vec<(f64, f64)>,
}

impl SecSummary {
    pub fn from(s: &SecCmd, pcts: &[f64]) -> SecSummary {
        let h = &s.hist;
        let has = !h.is_empty();
        SecSummary {
            ops: s.ops,
            errors: s.errors,
            bytes_rx: s.bytes_rx,
            bytes_tx: s.bytes_tx,
            latency_us_sum: s.latency_us_sum,
            min_ms: if has { h.min() as f64 / 1000.0 } else { 0.0 },
            max_ms: if has { h.max() as f64 / 1000.0 } else { 0.0 },
            avg_ms: if s.ops > 0 { s.latency_us_sum as f64 / s.ops as f64 / 1000.0 } else { 0.0 },
            quantiles: pcts.iter().map(|&p| (p, if has { h.value_at_percentile(p) as f64 / 1000.0 } else { 0.0 })).collect(),
        }
    }

    pub fn q(&self, p: f64) -> f64 {
        self.quantiles.iter().find(|(q, _)| (*q - p).abs() < 1e-9).map(|x| x.1).unwrap_or(0.0)
    }
}

/// One second of the whole run: per command, then the total.
#[derive(Clone, Debug, Default)]
pub struct Second {
    pub second: u32,
    pub cmds: Vec<SecSummary>,
    pub total: SecSummary,
}

/// The percentiles summarised per second: the table's and the series'.
pub fn series_percentiles(table: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = table.iter().copied().chain(SERIES_PERCENTILES).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
    v
}

/// Merges per-thread reports of each second; a second is final once every
/// thread has reported it (threads report seconds in order).
pub struct SeriesCollector {
    ncmds: usize,
    pcts: Vec<f64>,
    pending: std::collections::BTreeMap<u32, (usize, Vec<SecCmd>)>,
    /// Per thread: Some(n) once it ended having sent seconds 0..n.
    ended: Vec<Option<u32>>,
    pub done: Vec<Second>,
}

impl SeriesCollector {
    pub fn new(threads: usize, ncmds: usize, table_pcts: &[f64]) -> SeriesCollector {
        SeriesCollector {
            ncmds,
            pcts: series_percentiles(table_pcts),
            pending: Default::default(),
            ended: vec![None; threads],
            done: Vec::new(),
        }
    }

    /// Thread `t` ended after sending seconds `0..seconds`; returns the
    /// seconds that no longer wait for it.
    pub fn thread_done(&mut self, t: usize, seconds: u32) -> Vec<Second> {
        if let Some(e) = self.ended.get_mut(t) {
            *e = Some(seconds);
        }
        self.complete()
    }

    /// Reports expected for second `sec`: threads still running, or ended after it.
    fn expected(&self, sec: u32) -> usize {
        self.ended.iter().filter(|e| e.is_none_or(|n| n > sec)).count()
    }

    /// Adds a report; returns the seconds it completed.
    pub fn add(&mut self, r: SecondReport) -> Vec<Second> {
        let ncmds = self.ncmds;
        let e = self.pending.entry(r.second).or_insert_with(|| (0, (0..ncmds).map(|_| SecCmd::new()).collect()));
        e.0 += 1;
        for (a, b) in e.1.iter_mut().zip(&r.cmds) {
            a.merge(b);
        }
        self.complete()
    }

    fn complete(&mut self) -> Vec<Second> {
        let mut out = Vec::new();
        while let Some((&sec, (n, _))) = self.pending.iter().next() {
            if *n < self.expected(sec) {
                break;
            }
            if let Some((_, cmds)) = self.pending.remove(&sec) {
                out.push(self.finish(sec, &cmds));
            }
        }
        self.done.extend(out.iter().cloned());
        out
    }

    /// Finalises whatever is left (threads that ended early report nothing more).
    pub fn flush(&mut self) -> Vec<Second> {
        let pending = std::mem::take(&mut self.pending);
        let out: Vec<Second> = pending.into_iter().map(|(sec, (_, cmds))| self.finish(sec, &cmds)).collect();
        self.done.extend(out.iter().cloned());
        out
    }

    fn finish(&self, second: u32, cmds: &[SecCmd]) -> Second {
        let mut total = SecCmd::new();
        for c in cmds {
            total.merge(c);
        }
        Second {
            second,
            cmds: cmds.iter().map(|c| SecSummary::from(c, &self.pcts)).collect(),
            total: SecSummary::from(&total, &self.pcts),
        }
    }
}

/// CPU time used, seconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu {
    pub user_s: f64,
    pub sys_s: f64,
}

impl Cpu {
    pub fn total(&self) -> f64 {
        self.user_s + self.sys_s
    }
    pub fn minus(&self, o: &Cpu) -> Cpu {
        Cpu { user_s: self.user_s - o.user_s, sys_s: self.sys_s - o.sys_s }
    }

    /// The calling thread's CPU time (RUSAGE_THREAD) or the process's.
    pub fn now(thread: bool) -> Cpu {
        // SAFETY: getrusage only writes the struct we pass; a zeroed rusage
        // is a valid value of the type.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let who = if thread { libc::RUSAGE_THREAD } else { libc::RUSAGE_SELF };
        // SAFETY: valid pointer to a live rusage.
        let rc = unsafe { libc::getrusage(who, &mut ru) };
        if rc != 0 {
            return Cpu::default();
        }
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Cpu { user_s: tv(ru.ru_utime), sys_s: tv(ru.ru_stime) }
    }
}

/// Everything one run measured, merged over threads.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Stats group names: "SET", "GET", "WAIT" or arbitrary command names.
    pub names: Vec<String>,
    pub cmds: Vec<CmdStats>,
    pub start_unix_ms: u64,
    pub end_unix_ms: u64,
    pub duration_us: u64,
    pub series: Vec<Second>,
    pub connection_errors: u64,
    /// First few distinct error messages (replies and connections).
    pub error_messages: Vec<String>,
    pub interrupted: bool,
    /// Process CPU (all threads) during the run.
    pub cpu: Cpu,
    /// Busiest worker thread's CPU share of the run's wall time (0..1).
    pub busiest_thread_cpu: f64,
    /// Target total rate, open loop only.
    pub target_rate: Option<f64>,
    pub target: String,
}

impl RunResult {
    pub fn total(&self) -> CmdStats {
        let mut t = CmdStats::new(self.target_rate.is_some());
        for c in &self.cmds {
            t.merge(c);
        }
        t
    }

    pub fn total_ops(&self) -> u64 {
        self.cmds.iter().map(|c| c.ops).sum()
    }

    pub fn error_replies(&self) -> u64 {
        self.cmds.iter().map(|c| c.errors).sum()
    }

    pub fn secs(&self) -> f64 {
        (self.duration_us.max(1)) as f64 / 1e6
    }

    pub fn ops_sec(&self) -> f64 {
        self.total_ops() as f64 / self.secs()
    }

    /// CPU seconds of keel-bench per million operations.
    pub fn cpu_s_per_mop(&self) -> f64 {
        let ops = self.total_ops();
        if ops == 0 {
            0.0
        } else {
            self.cpu.total() / ops as f64 * 1e6
        }
    }

    /// memtier's aggregate of several runs: counters averaged per run,
    /// histograms merged.
    pub fn aggregate(runs: &[RunResult]) -> RunResult {
        let mut out = runs[0].clone();
        let n = runs.len() as u64;
        for r in &runs[1..] {
            for (a, b) in out.cmds.iter_mut().zip(&r.cmds) {
                a.merge(b);
            }
            out.duration_us += r.duration_us;
            out.connection_errors += r.connection_errors;
            out.cpu.user_s += r.cpu.user_s;
            out.cpu.sys_s += r.cpu.sys_s;
            out.busiest_thread_cpu = out.busiest_thread_cpu.max(r.busiest_thread_cpu);
            out.end_unix_ms = out.end_unix_ms.max(r.end_unix_ms);
            out.interrupted |= r.interrupted;
        }
        // Rates stay right: ops and durations are both summed. Counts shown
        // as "per run" are divided back.
        let _ = n;
        out.series = Vec::new();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_adds_counts_and_histograms() {
        let mut a = CmdStats::new(false);
        let mut b = CmdStats::new(false);
        for v in [100u64, 200, 300] {
            a.hist.record(v).ok();
            a.ops += 1;
        }
        for v in [1000u64, 2000] {
            b.hist.record(v).ok();
            b.ops += 1;
        }
        a.merge(&b);
        assert_eq!(a.ops, 5);
        assert_eq!(a.hist.len(), 5);
        assert!((a.avg_ms() - 0.72).abs() < 0.01);
        assert!(a.pct_ms(100.0) >= 1.99);
    }

    #[test]
    fn collector_waits_for_every_thread() {
        let mut c = SeriesCollector::new(2, 1, &[50.0]);
        let mut s = SecCmd::new();
        s.ops = 3;
        s.latency_us_sum = 300;
        s.hist.record(100).ok();
        assert!(c.add(SecondReport { thread: 0, second: 0, cmds: vec![s.clone()] }).is_empty());
        let done = c.add(SecondReport { thread: 1, second: 0, cmds: vec![s] });
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].total.ops, 6);
        assert!((done[0].total.avg_ms - 0.1).abs() < 1e-9);
        assert!((done[0].total.q(50.0) - 0.1).abs() < 0.01);
        assert_eq!(series_percentiles(&[50.0, 99.0, 99.9]), vec![50.0, 90.0, 99.0, 99.9]);
        // Thread 1 ends after second 0: second 1 needs thread 0 only.
        let mut s1 = SecCmd::new();
        s1.ops = 1;
        assert!(c.add(SecondReport { thread: 0, second: 1, cmds: vec![s1] }).is_empty());
        assert_eq!(c.thread_done(1, 1).len(), 1);
    }

    #[test]
    fn cpu_time_is_measured() {
        let before = Cpu::now(true);
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        let after = Cpu::now(true);
        assert!(after.total() >= before.total());
    }
}
