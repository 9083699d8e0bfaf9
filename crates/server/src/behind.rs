//! A snapshot's scan behind the workers, then as their equal when it must:
//! the AOF rewrite's and BGSAVE's.
//!
//! Behind: on a helper thread in Linux's idle class, stepping aside between
//! pieces for a worker with work on its core ([`crate::give_way`]). As an
//! equal of the workers, a scan took half of a shared core whenever it
//! wanted it and durable replies waited for its time slices (W1 at 30k
//! requests/s: p50 4 ms during a rewrite, 0.3 ms behind; BENCHMARKS.md,
//! "The rewrite's scan behind the workers").
//!
//! A scan behind the workers advances only when they leave time, and while
//! it runs the snapshot keeps the old version of every key written before
//! the scan reached it (`keel_engine::snapshot`). So the thread that
//! started the scan watches that memory, and once it passes
//! [`MEMORY_SHARE`] of the memory in use when the scan began, the helper
//! hands the scan back at its next step and the starting thread, an
//! ordinary one, finishes it: a long snapshot under writes never comes
//! near doubling memory. A thread cannot leave the idle class without
//! `CAP_SYS_NICE`, hence a helper for the part behind.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::ScopedJoinHandle;
use std::time::Duration;

use crate::server::Server;

/// The share of the memory in use that a scan behind the workers may let
/// the snapshot keep before it runs as their equal.
pub const MEMORY_SHARE: f64 = 0.1;
/// How often the starting thread checks what the snapshot keeps.
const WATCH_EVERY: Duration = Duration::from_millis(100);

/// Runs a scan: `scan(true)` on a helper named `name` in the idle class,
/// unless `urgent` is set already; then, if the helper handed it back,
/// `scan(false)` on this thread. `scan(true)` checks `urgent` between
/// steps (and gives way to busy workers): Ok(false) means it stopped there
/// to hand back; Ok(true) that it finished. This thread sets `urgent` when
/// the snapshot keeps more than its share of memory.
pub fn scan(
    server: &Server,
    name: &str,
    urgent: &AtomicBool,
    mut scan: impl FnMut(bool) -> Result<bool, String> + Send,
) -> Result<(), String> {
    if !urgent.load(Ordering::Relaxed) {
        let starter = std::thread::current();
        let finished = std::thread::scope(|scope| {
            let helper = std::thread::Builder::new()
                .name(name.into())
                .spawn_scoped(scope, || {
                    crate::process::panic_fails_this_thread_only();
                    enter_idle_class();
                    let result = scan(true);
                    starter.unpark();
                    result
                })
                .map_err(|e| format!("could not start {name}: {e}"))?;
            watch_kept_memory(server, urgent, &helper);
            helper.join().unwrap_or_else(|_| Err(format!("{name} panicked")))
        })?;
        if finished {
            return Ok(());
        }
        tracing::info!("{name}: the snapshot keeps too much memory; its scan now runs as an equal of the workers");
    }
    scan(false).map(drop)
}

/// Moves the calling thread to `SCHED_IDLE`, Linux's lowest scheduling
/// class, for good: it runs only on a core no worker wants and yields it
/// the moment one wakes. Not quite "the moment": see [`crate::give_way`].
fn enter_idle_class() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` outlives the call; pid 0 is this thread.
    let lowered = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if lowered != 0 {
        let name = std::thread::current().name().unwrap_or("?").to_string();
        tracing::warn!("{name}: could not lower its priority: {}", std::io::Error::last_os_error());
    }
}

/// Until the helper ends: sets `urgent` once the snapshot keeps more than
/// its share of the memory in use now.
fn watch_kept_memory<T>(server: &Server, urgent: &AtomicBool, helper: &ScopedJoinHandle<'_, T>) {
    let limit = (crate::alloc::stats().allocated as f64 * MEMORY_SHARE) as usize;
    let keyspace = &server.keyspace;
    while !helper.is_finished() {
        std::thread::park_timeout(WATCH_EVERY);
        let kept: usize = (0..keyspace.shard_count()).map(|i| keyspace.lock_one(i).shard(i).snapshot_saved_bytes()).sum();
        server.snapshot_progress.note_kept(kept as u64);
        if kept > limit {
            urgent.store(true, Ordering::Relaxed);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_calling_thread_enters_the_idle_class() {
        // SAFETY: each reads its own thread's policy.
        let policy = || unsafe { libc::sched_getscheduler(0) };
        let helper = std::thread::spawn(move || {
            enter_idle_class();
            policy()
        });
        assert_eq!(helper.join().ok(), Some(libc::SCHED_IDLE));
        assert_ne!(policy(), libc::SCHED_IDLE, "only the helper");
    }
}
