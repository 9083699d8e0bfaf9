//! Counters the writer keeps and `Journal::stats` reports.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hdrhistogram::Histogram;
use parking_lot::Mutex;

use crate::Lsn;

/// A snapshot of the journal's figures (for `INFO persistence` and
/// benchmarks). Sizes in bytes, latencies in microseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JournalStats {
    pub appended_lsn: Lsn,
    pub durable_lsn: Lsn,
    /// Redis's `aof_current_size`: base plus incr files, as written.
    pub aof_current_size: u64,
    /// Redis's `aof_base_size` (its `aof_rewrite_base_size`): the size
    /// right after the last rewrite, or the base file's after a start; what
    /// `auto-aof-rewrite-percentage` grows from.
    pub aof_base_size: u64,
    /// The base file's size.
    pub base_file_size: u64,
    /// Rewrites started (Redis's `aof_rewrites`), whether one runs, how long
    /// the running and the last one took, and how the last one ended.
    pub aof_rewrites: u64,
    pub aof_rewrite_in_progress: bool,
    pub aof_current_rewrite_ms: Option<u64>,
    pub aof_last_rewrite_ms: Option<u64>,
    pub aof_last_rewrite_ok: bool,
    pub aof_rewrites_consecutive_failures: u64,
    /// Appended but not yet durable (gathering, being written or synced, or
    /// held back by a failure).
    pub pending_bytes: u64,
    /// Above this many pending bytes `health()` is `Err(Backlog)`.
    pub backlog_max_bytes: u64,
    pub fsync_count: u64,
    pub fsync_latency_p50_us: u64,
    pub fsync_latency_p99_us: u64,
    pub fsync_latency_max_us: u64,
    /// Group commit: write batches (one write(2) round, and for `always`
    /// one fdatasync each) and their sizes.
    pub batch_count: u64,
    pub batch_records_avg: f64,
    pub batch_records_max: u64,
    pub batch_bytes_avg: f64,
    pub batch_bytes_max: u64,
    /// Redis's `aof_delayed_fsync`.
    pub aof_delayed_fsync: u64,
    /// Redis's `aof_last_write_status` (`ok`/`err`) and the error behind it.
    pub aof_last_write_status_ok: bool,
    pub last_error: Option<String>,
    pub write_errors: u64,
    pub fsync_errors: u64,
}

pub(crate) struct StatsCells {
    fsync_us: Mutex<Histogram<u64>>,
    pub(crate) fsyncs: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) batch_records_total: AtomicU64,
    pub(crate) batch_records_max: AtomicU64,
    pub(crate) batch_bytes_total: AtomicU64,
    pub(crate) batch_bytes_max: AtomicU64,
    pub(crate) delayed_fsync: AtomicU64,
    pub(crate) write_errors: AtomicU64,
    pub(crate) fsync_errors: AtomicU64,
}

impl StatsCells {
    pub(crate) fn new() -> StatsCells {
        StatsCells {
            // 1 us .. 1 hour, 2 significant digits: a few KiB.
            fsync_us: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 2).unwrap_or_else(|_| {
                    unreachable!("constant histogram bounds are valid")
                }),
            ),
            fsyncs: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            batch_records_total: AtomicU64::new(0),
            batch_records_max: AtomicU64::new(0),
            batch_bytes_total: AtomicU64::new(0),
            batch_bytes_max: AtomicU64::new(0),
            delayed_fsync: AtomicU64::new(0),
            write_errors: AtomicU64::new(0),
            fsync_errors: AtomicU64::new(0),
        }
    }

    pub(crate) fn record_fsync(&self, took: Duration) {
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        let us = (took.as_micros() as u64).clamp(1, 3_600_000_000);
        self.fsync_us.lock().saturating_record(us);
    }

    pub(crate) fn record_batch(&self, records: u64, bytes: u64, _took: Duration) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.batch_records_total.fetch_add(records, Ordering::Relaxed);
        self.batch_records_max.fetch_max(records, Ordering::Relaxed);
        self.batch_bytes_total.fetch_add(bytes, Ordering::Relaxed);
        self.batch_bytes_max.fetch_max(bytes, Ordering::Relaxed);
    }

    /// Zeroes every counter and the fsync histogram (`CONFIG RESETSTAT`).
    pub(crate) fn reset(&self) {
        self.fsync_us.lock().reset();
        for cell in [
            &self.fsyncs,
            &self.batches,
            &self.batch_records_total,
            &self.batch_records_max,
            &self.batch_bytes_total,
            &self.batch_bytes_max,
            &self.delayed_fsync,
            &self.write_errors,
            &self.fsync_errors,
        ] {
            cell.store(0, Ordering::Relaxed);
        }
    }

    /// Fills the counters of `out` (the caller fills positions and health).
    pub(crate) fn fill(&self, out: &mut JournalStats) {
        {
            let h = self.fsync_us.lock();
            if !h.is_empty() {
                out.fsync_latency_p50_us = h.value_at_quantile(0.50);
                out.fsync_latency_p99_us = h.value_at_quantile(0.99);
                out.fsync_latency_max_us = h.max();
            }
        }
        out.fsync_count = self.fsyncs.load(Ordering::Relaxed);
        out.batch_count = self.batches.load(Ordering::Relaxed);
        if out.batch_count > 0 {
            let n = out.batch_count as f64;
            out.batch_records_avg = self.batch_records_total.load(Ordering::Relaxed) as f64 / n;
            out.batch_bytes_avg = self.batch_bytes_total.load(Ordering::Relaxed) as f64 / n;
        }
        out.batch_records_max = self.batch_records_max.load(Ordering::Relaxed);
        out.batch_bytes_max = self.batch_bytes_max.load(Ordering::Relaxed);
        out.aof_delayed_fsync = self.delayed_fsync.load(Ordering::Relaxed);
        out.write_errors = self.write_errors.load(Ordering::Relaxed);
        out.fsync_errors = self.fsync_errors.load(Ordering::Relaxed);
    }
}
