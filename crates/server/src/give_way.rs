//! Keeps a snapshot's scan off a core whose worker has work.
//!
//! The scan runs in the idle scheduling class ([`crate::behind`]), so a
//! worker that *wakes*
//! preempts it at once. That is not the whole guarantee: when a running
//! worker is preempted (by a kernel thread such as ksoftirqd) and the
//! scheduler picks again, Linux's EEVDF can choose the idle-class thread
//! over the still runnable worker, which has had more than its share of
//! the core lately, and that thread then keeps the core until the next
//! tick (4 ms at HZ=250). Under W1 on one core during a BGSAVE, `perf
//! sched` showed several such 4 ms stalls a second, each holding every
//! request the worker had in hand.
//!
//! So each worker tells, once per turn of its event loop, whether it has
//! work and on which CPU, and the scan's thread, between two pieces of
//! work, naps while a worker that last ran on its own CPU has work: the
//! nap hands that worker the core. For at most [`MAX_WAIT`] at a time,
//! after which the thread does one piece anyway, so that a save under a
//! load that never lets up still ends (with a small share of the core:
//! under keel-bench's W1, which saturates the server's one core, a BGSAVE
//! of 1.5 GB wrote 182 MB in 40 s, against 116 MB in the idle class alone).

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Short enough to be back soon after the worker sleeps; long enough that
/// naps cost the worker's core few timer interrupts.
const NAP: Duration = Duration::from_micros(100);
/// The longest a background thread steps aside before one more piece.
const MAX_WAIT: Duration = Duration::from_millis(2);

/// Per worker: 0 while it waits for events, else 1 + the CPU it runs on.
pub struct WorkerCores {
    cells: Box<[AtomicU32]>,
}

impl WorkerCores {
    pub fn new(workers: usize) -> WorkerCores {
        WorkerCores { cells: (0..workers).map(|_| AtomicU32::new(0)).collect() }
    }

    /// `worker` has events to handle.
    pub fn busy(&self, worker: usize) {
        self.cells[worker].store(current_cpu().map_or(0, |cpu| cpu + 1), Ordering::Relaxed);
    }

    /// `worker` is about to wait for events.
    pub fn idle(&self, worker: usize) {
        self.cells[worker].store(0, Ordering::Relaxed);
    }

    /// For a background thread between two pieces of work: returns once no
    /// worker that last ran on this thread's CPU has work, or after
    /// [`MAX_WAIT`].
    pub fn give_way(&self) {
        let Some(cpu) = current_cpu() else { return };
        let mut since = None;
        while self.cells.iter().any(|c| c.load(Ordering::Relaxed) == cpu + 1) {
            let since = *since.get_or_insert_with(Instant::now);
            if since.elapsed() >= MAX_WAIT {
                return;
            }
            std::thread::sleep(NAP);
        }
    }
}

fn current_cpu() -> Option<u32> {
    // SAFETY: no arguments; glibc reads the CPU from rseq or the vDSO.
    u32::try_from(unsafe { libc::sched_getcpu() }).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_way_only_to_a_busy_worker_on_its_own_cpu() {
        let cores = WorkerCores::new(2);
        let quick = |cores: &WorkerCores| {
            let t = Instant::now();
            cores.give_way();
            t.elapsed() < MAX_WAIT
        };
        assert!(quick(&cores), "no worker busy");
        // Another CPU than this thread's: no reason to step aside.
        let here = current_cpu().expect("sched_getcpu");
        cores.cells[1].store(here + 2, Ordering::Relaxed);
        assert!(quick(&cores), "busy elsewhere");
        // On this CPU (the test pins itself so that it stays there).
        pin_to(here);
        cores.busy(0);
        let t = Instant::now();
        cores.give_way();
        assert!(t.elapsed() >= MAX_WAIT, "stepped aside for a busy worker on its CPU, at most MAX_WAIT");
        cores.idle(0);
        assert!(quick(&cores), "the worker went idle");
    }

    fn pin_to(cpu: u32) {
        // SAFETY: a zeroed cpu_set_t is an empty set; pid 0 is this thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu as usize, &mut set);
            assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set), 0);
        }
    }
}
