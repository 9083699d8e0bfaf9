//! The process's allocator: jemalloc, as Redis links it.
//!
//! Its size classes carry no per-allocation header, which matters for
//! millions of small keys and values (glibc's malloc spends at least 32
//! bytes on a 16-byte key), and its statistics are what INFO reports as
//! `used_memory`, as Redis's are. Declared in the library so that every
//! binary that links the server, tests included, measures the same heap.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tikv_jemalloc_ctl::{epoch, stats};

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// INFO's `mem_allocator`.
pub const NAME: &str = "jemalloc-5.3.0";

/// jemalloc's own counters, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct AllocStats {
    /// Bytes the program holds (Redis's `used_memory`).
    pub allocated: u64,
    /// Bytes in pages that hold at least one allocation.
    pub active: u64,
    /// Bytes of the allocator's pages resident in memory.
    pub resident: u64,
}

/// The most bytes the program held at any read of the counters since
/// start or [`reset_peak`] (Redis's `used_memory_peak`).
static PEAK: AtomicU64 = AtomicU64::new(0);
/// What the program held once it was set up, before any data (Redis's
/// `used_memory_startup`, [`note_startup`]).
static STARTUP: AtomicU64 = AtomicU64::new(0);

pub fn peak() -> u64 {
    PEAK.load(Ordering::Relaxed)
}

/// CONFIG RESETSTAT: the peak starts again from what is held now.
pub fn reset_peak() {
    PEAK.store(0, Ordering::Relaxed);
    stats();
}

/// Records what is held now as the start-up figure: called once the
/// server's threads and tables exist, before it loads any data.
pub fn note_startup() {
    STARTUP.store(stats().allocated, Ordering::Relaxed);
}

pub fn startup() -> u64 {
    STARTUP.load(Ordering::Relaxed)
}

/// Reads the counters afresh (jemalloc caches them until the epoch moves),
/// and moves the peak.
pub fn stats() -> AllocStats {
    let read = || -> Result<AllocStats, tikv_jemalloc_ctl::Error> {
        epoch::advance()?;
        Ok(AllocStats {
            allocated: stats::allocated::read()? as u64,
            active: stats::active::read()? as u64,
            resident: stats::resident::read()? as u64,
        })
    };
    // The mallctl names are fixed at build time: a failure would be a
    // jemalloc built without stats, and INFO then shows zeros.
    let stats = read().unwrap_or_default();
    PEAK.fetch_max(stats.allocated, Ordering::Relaxed);
    stats
}

/// MEMORY MALLOC-STATS: jemalloc's own report (`malloc_stats_print`), as
/// Redis gives it.
pub fn report() -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    tikv_jemalloc_ctl::stats_print::stats_print(&mut out, tikv_jemalloc_ctl::stats_print::Options::default())?;
    Ok(out)
}

/// MEMORY PURGE: hands every arena's dirty pages back to the system
/// (`arena.<MALLCTL_ARENAS_ALL>.purge`), as Redis's `jemalloc_purge`.
pub fn purge() -> Result<(), i32> {
    // jemalloc's MALLCTL_ARENAS_ALL.
    const NAME: &[u8] = b"arena.4096.purge\0";
    // SAFETY: a NUL-terminated name, and this control reads and writes
    // nothing (all four pointers null).
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(NAME.as_ptr().cast(), std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), 0)
    };
    if rc == 0 { Ok(()) } else { Err(rc) }
}

/// How stale [`used_memory_recent`] may be: reading jemalloc's counters
/// merges every arena's (microseconds), too slow for every write command.
const REFRESH: Duration = Duration::from_millis(1);

/// The last `used_memory` read for [`used_memory_recent`].
static USED: AtomicU64 = AtomicU64::new(0);

/// `used_memory` as of at most [`REFRESH`] ago: what the `maxmemory` check
/// compares before each command.
pub fn used_memory_recent() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    // Microseconds since START of the last read, plus one (0: never read).
    static READ_AT: AtomicU64 = AtomicU64::new(0);
    let now = START.get_or_init(Instant::now).elapsed().as_micros() as u64 + 1;
    let last = READ_AT.load(Ordering::Relaxed);
    let due = last == 0 || now.saturating_sub(last) >= REFRESH.as_micros() as u64;
    // One thread refreshes; the others use the value it last stored.
    if due && READ_AT.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        USED.store(stats().allocated, Ordering::Relaxed);
    }
    USED.load(Ordering::Relaxed)
}

/// `used_memory` now, also as the recent figure.
pub fn refresh_used_memory() -> u64 {
    let used = stats().allocated;
    USED.store(used, Ordering::Relaxed);
    used
}

/// A thread's net allocations move the recent figure once they pass this.
const NOTE_PAST: i64 = 16 * 1024;

/// Adds what this thread allocated (or freed) since its last call to the
/// recent figure, once that passes [`NOTE_PAST`]: the `maxmemory` check
/// before a command then sees what the command before it allocated, a
/// SETBIT growing a string by 200 KB say, as Redis's exact counter does,
/// rather than up to [`REFRESH`] later. jemalloc keeps the two counters
/// per thread, so this reads two words. A figure too high for a moment
/// (a refresh counted the same bytes) costs only a fresh read: eviction
/// measures afresh before it evicts anything.
pub fn note_thread_allocations() {
    use std::cell::Cell;
    use tikv_jemalloc_ctl::thread::{allocatedp, deallocatedp, ThreadLocal};
    thread_local! {
        static COUNTERS: Option<(ThreadLocal<u64>, ThreadLocal<u64>)> =
            allocatedp::read().ok().zip(deallocatedp::read().ok());
        static NOTED: Cell<Option<i64>> = const { Cell::new(None) };
    }
    let Some(net) = COUNTERS.with(|c| c.map(|(a, d)| a.get().wrapping_sub(d.get()) as i64)) else { return };
    NOTED.with(|noted| {
        let delta = net.wrapping_sub(noted.get().unwrap_or(net));
        if noted.get().is_none() || delta.abs() >= NOTE_PAST {
            noted.set(Some(net));
        }
        match delta {
            d if d >= NOTE_PAST => {
                USED.fetch_add(d as u64, Ordering::Relaxed);
            }
            d if d <= -NOTE_PAST => discount_recent(d.unsigned_abs()),
            _ => {}
        }
    });
}

/// Takes `freed` bytes off the recent figure: after an eviction, the next
/// command's check must not see the figure from before it.
pub fn discount_recent(freed: u64) {
    let _ = USED.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| Some(used.saturating_sub(freed)));
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test, not two: two 256 MB blocks allocated and freed by tests
    // running in parallel would move each other's figures.
    #[test]
    fn allocated_bytes_and_the_recent_figure_follow_allocations() {
        // Other tests allocate meanwhile: a 256 MB block stands far above them.
        let before = stats().allocated;
        note_thread_allocations();
        let noted = USED.load(Ordering::Relaxed);
        let block = vec![1u8; 256 << 20];
        // This thread's allocation is in the recent figure at once.
        note_thread_allocations();
        assert!(USED.load(Ordering::Relaxed) >= noted + (192 << 20));
        let during = stats().allocated;
        assert!(during >= before + (192 << 20), "{before} -> {during}");
        let deadline = Instant::now() + Duration::from_secs(5);
        while used_memory_recent() < 256 << 20 {
            assert!(Instant::now() < deadline, "the recent figure never saw the block");
            std::thread::sleep(REFRESH);
        }
        drop(block);
        assert!(stats().allocated + (192 << 20) <= during);
    }
}
