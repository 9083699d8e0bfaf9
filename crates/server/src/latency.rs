//! The latency monitor (Redis's `latency.c`): with
//! `latency-monitor-threshold` set, every event that took at least that
//! many milliseconds (a command's run, an expiry or eviction cycle, one
//! expired or evicted key's deletion, a round of AOF writes or an
//! fdatasync under `always`) is kept as a sample of its event's history,
//! which LATENCY LATEST, HISTORY, GRAPH and DOCTOR report.
//!
//! Each event keeps Redis's ring of the last `HISTORY_LEN` seconds that
//! had a sample, one sample a second (that second's worst), and its worst
//! since the last LATENCY RESET. The monitor is one mutex shared by the
//! workers, taken only for a sample past the threshold: with the monitor
//! off (threshold 0, the default) a timed event costs one relaxed load.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Redis's `LATENCY_TS_LEN`: the seconds of history an event keeps.
pub const HISTORY_LEN: usize = 160;

/// The worst latency of one second of an event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    /// Unix time in seconds; 0 for a slot not used yet.
    pub time_s: i64,
    pub ms: u32,
}

/// One event's history (Redis's `latencyTimeSeries`).
#[derive(Clone)]
pub struct Series {
    /// Where the next second's sample goes.
    next: usize,
    /// The worst latency since the event's last reset.
    pub max: u32,
    samples: [Sample; HISTORY_LEN],
}

impl Series {
    fn new() -> Series {
        Series { next: 0, max: 0, samples: [Sample::default(); HISTORY_LEN] }
    }

    /// A sample at `now_s`: the worst of its second if that second has one.
    fn add(&mut self, now_s: i64, ms: u32) {
        self.max = self.max.max(ms);
        let last = &mut self.samples[(self.next + HISTORY_LEN - 1) % HISTORY_LEN];
        if last.time_s == now_s {
            last.ms = last.ms.max(ms);
            return;
        }
        self.samples[self.next] = Sample { time_s: now_s, ms };
        self.next = (self.next + 1) % HISTORY_LEN;
    }

    /// The samples kept, oldest first.
    pub fn samples(&self) -> impl Iterator<Item = Sample> + '_ {
        (0..HISTORY_LEN).map(|i| self.samples[(self.next + i) % HISTORY_LEN]).filter(|s| s.time_s != 0)
    }

    /// The newest sample.
    pub fn last(&self) -> Sample {
        self.samples[(self.next + HISTORY_LEN - 1) % HISTORY_LEN]
    }
}

pub struct LatencyMonitor {
    /// `latency-monitor-threshold` in milliseconds; 0: off.
    threshold_ms: AtomicU64,
    /// The events with samples, in the order of their first sample.
    events: Mutex<Vec<(&'static str, Series)>>,
}

impl Default for LatencyMonitor {
    fn default() -> Self {
        LatencyMonitor::new()
    }
}

impl LatencyMonitor {
    pub fn new() -> LatencyMonitor {
        LatencyMonitor { threshold_ms: AtomicU64::new(0), events: Mutex::new(Vec::new()) }
    }

    /// The directive, at start and at each CONFIG SET.
    pub fn configure(&self, threshold_ms: u64) {
        self.threshold_ms.store(threshold_ms, Ordering::Relaxed);
    }

    pub fn threshold_ms(&self) -> u64 {
        self.threshold_ms.load(Ordering::Relaxed)
    }

    #[inline]
    pub fn is_on(&self) -> bool {
        self.threshold_ms() != 0
    }

    /// When an event to be timed starts, if the monitor is on (Redis's
    /// `latencyStartMonitor`): with it off, no clock is read.
    #[inline]
    pub fn start(&self) -> Option<Instant> {
        self.is_on().then(Instant::now)
    }

    /// Ends an event [`start`](Self::start) began.
    #[inline]
    pub fn end(&self, event: &'static str, started: Option<Instant>) {
        if let Some(started) = started {
            self.record(event, started.elapsed());
        }
    }

    /// An event that took `took`: a sample if it reaches the threshold
    /// (Redis's `latencyAddSampleIfNeeded`, in whole milliseconds).
    #[inline]
    pub fn record(&self, event: &'static str, took: Duration) {
        let threshold = self.threshold_ms();
        if threshold != 0 && took.as_millis() >= u128::from(threshold) {
            self.add_sample(event, took.as_millis().min(u128::from(u32::MAX)) as u32, (crate::server::unix_ms() / 1000) as i64);
        }
    }

    /// The `expire-del` event: the slowest deletion of an expired key the
    /// calling thread made since it last asked (the engine times them
    /// while the monitor is on), as Redis's deleteExpiredKeyAndPropagate.
    pub fn record_expired_deletes(&self) {
        if let Some(took) = keel_engine::db::take_slowest_expired_delete() {
            self.record("expire-del", took);
        }
    }

    #[cold]
    fn add_sample(&self, event: &'static str, ms: u32, now_s: i64) {
        let mut events = self.events.lock();
        let index = match events.iter().position(|(name, _)| *name == event) {
            Some(index) => index,
            None => {
                events.push((event, Series::new()));
                events.len() - 1
            }
        };
        events[index].1.add(now_s, ms);
    }

    /// LATENCY RESET: drops `event`'s history (any case), or every
    /// event's with `None`; returns how many it dropped.
    pub fn reset(&self, event: Option<&[u8]>) -> usize {
        let mut events = self.events.lock();
        let before = events.len();
        events.retain(|(name, _)| event.is_some_and(|e| !name.as_bytes().eq_ignore_ascii_case(e)));
        before - events.len()
    }

    /// Every event's name and history.
    pub fn events(&self) -> Vec<(&'static str, Series)> {
        self.events.lock().clone()
    }

    /// One event's history, by its exact name.
    pub fn series(&self, event: &[u8]) -> Option<Series> {
        self.events.lock().iter().find(|(name, _)| name.as_bytes() == event).map(|(_, s)| s.clone())
    }
}

/// Redis's `LATENCY_GRAPH_COLS`: the width of a graph's lines.
const GRAPH_COLUMNS: usize = 80;
/// The rows of a graph's curve; each holds three levels.
const GRAPH_ROWS: usize = 4;
const GRAPH_LEVELS: &[u8] = b"_o#";

/// LATENCY GRAPH: a header, then the samples as Redis's filled sparkline
/// (`sparklineRender` with `SPARKLINE_FILL`), 80 samples a block, each
/// labelled vertically with how long ago it was (`12s`, `3m`, `1h`, `2d`).
pub fn graph(event: &str, series: &Series, now_s: i64) -> String {
    let samples: Vec<(u32, String)> = series
        .samples()
        .map(|s| {
            let ago = now_s - s.time_s;
            let label = if ago < 60 {
                format!("{ago}s")
            } else if ago < 3600 {
                format!("{}m", ago / 60)
            } else if ago < 86_400 {
                format!("{}h", ago / 3600)
            } else {
                format!("{}d", ago / 86_400)
            };
            (s.ms, label)
        })
        .collect();
    let low = samples.iter().map(|s| s.0).min().unwrap_or(0);
    let high = samples.iter().map(|s| s.0).max().unwrap_or(0);
    let mut out = format!("{event} - high {high} ms, low {low} ms (all time high {} ms)\n", series.max);
    out.push_str(&"-".repeat(GRAPH_COLUMNS));
    out.push('\n');
    for (i, block) in samples.chunks(GRAPH_COLUMNS).enumerate() {
        if i > 0 {
            out.push('\n');
        }
        sparkline(&mut out, block, low, high);
    }
    out
}

/// One block of a graph: the curve's rows, a blank row, then the labels
/// one character a row.
fn sparkline(out: &mut String, block: &[(u32, String)], low: u32, high: u32) {
    let steps = GRAPH_ROWS * GRAPH_LEVELS.len();
    let range = if high == low { 1.0 } else { f64::from(high - low) };
    // Which of the `steps` levels each sample reaches: Redis truncates
    // the scaled value before dividing, and so does this.
    let level = |ms: u32| (((f64::from(ms - low) * steps as f64) as i64 as f64 / range) as usize).min(steps - 1);
    for row in 0..GRAPH_ROWS {
        let floor = (GRAPH_ROWS - row - 1) * GRAPH_LEVELS.len();
        for (ms, _) in block {
            let step = level(*ms);
            out.push(match step.checked_sub(floor) {
                None => ' ',
                Some(i) if i < GRAPH_LEVELS.len() => GRAPH_LEVELS[i] as char,
                Some(_) => '|',
            });
        }
        out.push('\n');
    }
    out.push_str(&" ".repeat(block.len()));
    out.push('\n');
    let longest = block.iter().map(|(_, label)| label.len()).max().unwrap_or(0);
    for row in 0..longest {
        for (_, label) in block {
            out.push(label.as_bytes().get(row).map_or(' ', |&b| b as char));
        }
        out.push('\n');
    }
}

/// What LATENCY DOCTOR's advice depends on besides the events.
pub struct DoctorContext {
    pub threshold_ms: u64,
    pub slowlog_log_slower_than: i64,
    pub hz: u32,
    pub anon_huge_pages: bool,
    /// `appendfsync always`.
    pub fsync_always: bool,
}

/// LATENCY DOCTOR: Redis's `createLatencyReport`, a line of statistics
/// per event and the advice its events call for, in Redis's words.
pub fn doctor(events: &[(&'static str, Series)], ctx: &DoctorContext, now_s: i64) -> String {
    if events.is_empty() && ctx.threshold_ms == 0 {
        return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".into();
    }
    let mut out = String::new();
    let mut advice = Advice::default();
    for (n, (event, series)) in events.iter().enumerate() {
        if n == 0 {
            out.push_str("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n");
        }
        let stats = Stats::of(series, now_s);
        let _ = write!(
            out,
            "{}. {event}: {} latency spikes (average {}ms, mean deviation {}ms, period {:.2} sec). Worst all time event {}ms.",
            n + 1,
            stats.samples,
            stats.avg,
            stats.mad,
            stats.period as f64 / stats.samples as f64,
            series.max
        );
        advice.note(event, ctx);
        out.push('\n');
    }
    if ctx.anon_huge_pages {
        advice.disable_thp = true;
        advice.count += 1;
    }
    if events.is_empty() && advice.count == 0 {
        out.push_str("Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n");
    } else if advice.count == 0 {
        out.push_str("\nWhile there are latency events logged, I'm not able to suggest any easy fix. Please use the Redis community to get some help, providing this report in your help request.\n");
    } else {
        out.push_str("\nI have a few advices for you:\n\n");
        advice.write(&mut out, ctx);
    }
    out
}

/// Redis's `analyzeLatencyForEvent`, over the samples kept.
struct Stats {
    samples: u64,
    avg: u64,
    /// Mean absolute deviation from `avg`.
    mad: u64,
    /// Seconds from the oldest sample to now, at least 1.
    period: i64,
}

impl Stats {
    fn of(series: &Series, now_s: i64) -> Stats {
        let samples: Vec<Sample> = series.samples().collect();
        let n = samples.len() as u64;
        let sum: u64 = samples.iter().map(|s| u64::from(s.ms)).sum();
        let avg = sum.checked_div(n).unwrap_or(0);
        let deviation: u64 = samples.iter().map(|s| u64::from(s.ms).abs_diff(avg)).sum();
        let oldest = samples.iter().map(|s| s.time_s).min();
        let period = oldest.map_or(0, |t| (now_s - t).max(1));
        Stats { samples: n, avg, mad: deviation.checked_div(n).unwrap_or(0), period }
    }
}

/// The advice an event calls for, and how many pieces Redis counts.
#[derive(Default)]
struct Advice {
    count: u32,
    slowlog_enabled: bool,
    slowlog_tuning: bool,
    slowlog_inspect: bool,
    scheduler: bool,
    hz: bool,
    large_objects: bool,
    mass_eviction: bool,
    disable_thp: bool,
    relax_fsync_policy: bool,
}

impl Advice {
    /// Redis's per-event rules, for the events Keel records (the fork and
    /// RDB ones, and the AOF ones but `aof-fsync-always`, are left out:
    /// Keel never has those events).
    fn note(&mut self, event: &str, ctx: &DoctorContext) {
        let is = |name: &str| event.eq_ignore_ascii_case(name);
        if is("command") {
            if ctx.slowlog_log_slower_than < 0 {
                self.slowlog_enabled = true;
                self.count += 1;
            } else if ctx.slowlog_log_slower_than / 1000 > ctx.threshold_ms as i64 {
                self.slowlog_tuning = true;
                self.count += 1;
            }
            self.slowlog_inspect = true;
            self.large_objects = true;
            self.count += 2;
        }
        if is("fast-command") {
            self.scheduler = true;
            self.count += 1;
        }
        if is("expire-cycle") {
            (self.hz, self.large_objects) = (true, true);
            self.count += 2;
        }
        if is("eviction-del") {
            self.large_objects = true;
            self.count += 1;
        }
        if is("eviction-cycle") {
            self.mass_eviction = true;
            self.count += 1;
        }
        if is("aof-fsync-always") {
            self.relax_fsync_policy = true;
            self.count += 1;
        }
    }

    fn write(&self, out: &mut String, ctx: &DoctorContext) {
        let slowlog_us = ctx.threshold_ms.saturating_mul(1000);
        if self.slowlog_enabled {
            let _ = writeln!(out, "- There are latency issues with potentially slow commands you are using. Try to enable the Slow Log Redis feature using the command 'CONFIG SET slowlog-log-slower-than {slowlog_us}'. If the Slow log is disabled Redis is not able to log slow commands execution for you.");
        }
        if self.slowlog_tuning {
            let _ = writeln!(out, "- Your current Slow Log configuration only logs events that are slower than your configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {slowlog_us}'.");
        }
        if self.slowlog_inspect {
            out.push_str("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n");
        }
        if self.scheduler {
            out.push_str(concat!(
                "- The system is slow to execute Redis code paths not containing system calls. This usually means the system does not provide Redis CPU time to run for long periods. You should try to:\n",
                "  1) Lower the system load.\n",
                "  2) Use a computer / VM just for Redis if you are running other software in the same system.\n",
                "  3) Check if you have a \"noisy neighbour\" problem.\n",
                "  4) Check with 'redis-cli --intrinsic-latency 100' what is the intrinsic latency in your system.\n",
                "  5) Check if the problem is allocator-related by recompiling Redis with MALLOC=libc, if you are using Jemalloc. However this may create fragmentation problems.\n",
            ));
        }
        if self.relax_fsync_policy && ctx.fsync_always {
            out.push_str("- Your fsync policy is set to 'always'. It is very hard to get good performances with such a setup, if possible try to relax the fsync policy to 'onesec'.\n");
        }
        if self.hz && ctx.hz < 100 {
            out.push_str("- In order to make the Redis keys expiring process more incremental, try to set the 'hz' configuration parameter to 100 using 'CONFIG SET hz 100'.\n");
        }
        if self.large_objects {
            out.push_str("- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n");
        }
        if self.mass_eviction {
            out.push_str("- Sudden changes to the 'maxmemory' setting via 'CONFIG SET', or allocation of large objects via sets or sorted sets intersections, STORE option of SORT, Redis Cluster large keys migrations (RESTORE command), may create sudden memory pressure forcing the server to block trying to evict keys. \n");
        }
        if self.disable_thp {
            out.push_str("- I detected a non zero amount of anonymous huge pages used by your process. This creates very serious latency events in different conditions, especially when Redis is persisting on disk. To disable THP support use the command 'echo never > /sys/kernel/mm/transparent_hugepage/enabled', make sure to also add it into /etc/rc.local so that the command will be executed again after a reboot. Note that even if you have already disabled THP, you still need to restart the Redis process to get rid of the huge pages already created.\n");
        }
    }
}

/// Whether the process has anonymous huge pages (Redis's
/// `THPGetAnonHugePagesSize`), from `/proc/self/smaps_rollup`'s total.
pub fn anon_huge_pages() -> bool {
    let Ok(smaps) = std::fs::read_to_string("/proc/self/smaps_rollup") else { return false };
    smaps
        .lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .is_some_and(|kb| kb > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_keeps_its_worst_sample_and_the_ring_its_last_160_seconds() {
        let mut series = Series::new();
        series.add(100, 5);
        series.add(100, 9);
        series.add(100, 3);
        assert_eq!(series.samples().collect::<Vec<_>>(), vec![Sample { time_s: 100, ms: 9 }]);
        for t in 101..400 {
            series.add(t, (t % 50) as u32);
        }
        let kept: Vec<_> = series.samples().collect();
        assert_eq!(kept.len(), HISTORY_LEN);
        assert_eq!(kept.first().map(|s| s.time_s), Some(400 - HISTORY_LEN as i64));
        assert_eq!(series.last(), Sample { time_s: 399, ms: 399 % 50 });
        assert_eq!(series.max, 49);
    }

    #[test]
    fn samples_pass_the_threshold_only_when_it_is_set() {
        let monitor = LatencyMonitor::new();
        monitor.record("command", Duration::from_secs(5));
        assert!(monitor.events().is_empty() && monitor.start().is_none());
        monitor.configure(10);
        monitor.record("command", Duration::from_millis(9));
        assert!(monitor.events().is_empty());
        monitor.record("command", Duration::from_millis(10));
        monitor.record("expire-cycle", Duration::from_millis(12));
        let events = monitor.events();
        assert_eq!(events.iter().map(|e| e.0).collect::<Vec<_>>(), ["command", "expire-cycle"]);
        assert_eq!(events[0].1.last().ms, 10);
        assert!(monitor.series(b"COMMAND").is_none() && monitor.series(b"command").is_some());
        assert_eq!(monitor.reset(Some(b"nope")), 0);
        assert_eq!(monitor.reset(Some(b"EXPIRE-cycle")), 1);
        assert_eq!(monitor.reset(None), 1);
    }

    #[test]
    fn a_graph_draws_each_sample_at_its_level_with_its_age_below() {
        let mut series = Series::new();
        for (t, ms) in [(1000, 100), (1001, 200), (1002, 400)] {
            series.add(t, ms);
        }
        let text = graph("command", &series, 1012);
        let expected = "command - high 400 ms, low 100 ms (all time high 400 ms)\n".to_string()
            + &"-".repeat(80)
            + "\n  #\n  |\n o|\n_||\n   \n111\n210\nsss\n";
        assert_eq!(text, expected);
    }

    #[test]
    fn the_doctor_reports_each_event_and_its_advice() {
        let ctx = DoctorContext { threshold_ms: 0, slowlog_log_slower_than: 10_000, hz: 10, anon_huge_pages: false, fsync_always: true };
        assert!(doctor(&[], &ctx, 0).starts_with("I'm sorry, Dave"));
        let ctx = DoctorContext { threshold_ms: 100, ..ctx };
        assert!(doctor(&[], &ctx, 0).starts_with("Dave, no latency spike"));
        let mut series = Series::new();
        series.add(990, 300);
        series.add(995, 500);
        let report = doctor(&[("expire-cycle", series)], &ctx, 1000);
        assert!(report.contains("1. expire-cycle: 2 latency spikes (average 400ms, mean deviation 100ms, period 5.00 sec). Worst all time event 500ms.\n"), "{report}");
        assert!(report.contains("'hz' configuration parameter to 100") && report.contains("large objects"), "{report}");
        let mut series = Series::new();
        series.add(990, 30);
        let report = doctor(&[("aof-fsync-always", series)], &ctx, 1000);
        assert!(report.contains("try to relax the fsync policy to 'onesec'"), "{report}");
    }
}
