//! A background thread that runs one job at a time on request (the AOF
//! rewrite's, `rewrite.rs`; BGSAVE's, `snapshot.rs`): its wake-up (a
//! request flag and a stop flag under one mutex, and the condition
//! variable the thread sleeps on).

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

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
