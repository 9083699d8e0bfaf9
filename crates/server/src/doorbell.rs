//! A background thread that runs one job at a time on request (the AOF
//! rewrite's, `rewrite.rs`; BGSAVE's, `snapshot.rs`): its wake-up (a
//! request flag and a stop flag under one mutex, and the condition
//! variable the thread sleeps on), and the place behind the workers that
//! BGSAVE and the rewrite's scan take.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// Starts a job thread under `SCHED_IDLE`, Linux's lowest scheduling
/// class. A snapshot shares the cores with the workers (Redis's fork
/// child competes with its parent as an equal); an idle-class thread runs
/// only on a core no worker wants and yields it the moment one wakes, so a
/// BGSAVE takes longer under load instead of slowing replies. Not quite
/// "the moment": see [`crate::give_way`] for the rest of the bargain.
pub fn spawn_job_thread(name: &str, job: impl FnOnce() + Send + 'static) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name(name.to_string()).spawn(move || {
        enter_idle_class();
        job();
    })
}

/// Moves the calling thread to `SCHED_IDLE` for good: without
/// `CAP_SYS_NICE` a thread cannot leave it, so work that may have to run
/// as an equal of the workers later gets a thread of its own for the part
/// behind them (the AOF rewrite's scan).
pub fn enter_idle_class() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` outlives the call; pid 0 is this thread.
    let lowered = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
    if lowered != 0 {
        let name = std::thread::current().name().unwrap_or("?").to_string();
        tracing::warn!("{name}: could not lower its priority: {}", std::io::Error::last_os_error());
    }
}

#[derive(Default)]
pub struct Doorbell {
    state: Mutex<Rung>,
    wake: Condvar,
}

#[derive(Default)]
struct Rung {
    requested: bool,
    stop: bool,
}

impl Doorbell {
    /// Asks the thread for one run. Requests made before it wakes count
    /// as one: callers keep their own "accepted" flag to refuse a second.
    pub fn ring(&self) {
        self.state.lock().requested = true;
        self.wake.notify_one();
    }

    /// Asks the thread to end; a job under way sees it in `stopping`.
    pub fn stop(&self) {
        self.state.lock().stop = true;
        self.wake.notify_all();
    }

    pub fn stopping(&self) -> bool {
        self.state.lock().stop
    }

    /// The thread's wait: true when a request came (it is consumed), false
    /// once the thread is to stop.
    pub fn wait(&self) -> bool {
        loop {
            match self.wait_up_to(Duration::MAX) {
                Wake::Rung => return true,
                Wake::Stop => return false,
                Wake::Idle => {}
            }
        }
    }

    /// As `wait`, but gives up after `timeout`: for a thread that also
    /// keeps a cron between runs (BGSAVE's save rules).
    pub fn wait_up_to(&self, timeout: Duration) -> Wake {
        let mut st = self.state.lock();
        if !st.requested && !st.stop {
            self.wake.wait_for(&mut st, timeout);
        }
        if st.stop {
            Wake::Stop
        } else if std::mem::take(&mut st.requested) {
            Wake::Rung
        } else {
            Wake::Idle
        }
    }

    /// Sleeps at most `timeout`, less if rung or stopped meanwhile, and
    /// consumes nothing: for a job polling a condition (a scheduled BGSAVE
    /// waits for the snapshot token this way).
    pub fn nap(&self, timeout: Duration) {
        let mut st = self.state.lock();
        if !st.requested && !st.stop {
            self.wake.wait_for(&mut st, timeout);
        }
    }
}

/// Why `wait_up_to` returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Wake {
    Rung,
    Idle,
    Stop,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn job_threads_run_in_the_idle_class() {
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = spawn_job_thread("test-job", move || {
            // SAFETY: reads this thread's own policy.
            let _ = tx.send(unsafe { libc::sched_getscheduler(0) });
        })
        .expect("spawn");
        assert!(thread.join().is_ok());
        assert_eq!(rx.recv().ok(), Some(libc::SCHED_IDLE));
        // SAFETY: as above, for the test's own thread.
        assert_ne!(unsafe { libc::sched_getscheduler(0) }, libc::SCHED_IDLE, "only the job's thread");
    }

    #[test]
    fn rings_wake_the_thread_once_each_and_stop_ends_it() {
        let bell = Arc::new(Doorbell::default());
        let runs = Arc::new(Mutex::new(0));
        let thread = {
            let (bell, runs) = (Arc::clone(&bell), Arc::clone(&runs));
            std::thread::spawn(move || {
                while bell.wait() {
                    *runs.lock() += 1;
                }
            })
        };
        bell.ring();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while *runs.lock() == 0 {
            assert!(std::time::Instant::now() < deadline, "the ring never woke the thread");
            std::thread::yield_now();
        }
        bell.stop();
        assert!(thread.join().is_ok());
        assert!(bell.stopping());
        assert_eq!(*runs.lock(), 1);
    }
}
