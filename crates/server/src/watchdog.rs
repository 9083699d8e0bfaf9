//! Redis's software watchdog (`watchdog-period`, a debugging aid off by
//! default): a worker stuck in one turn of its loop for longer than the
//! period logs its own stack trace, so that what held it shows in the
//! log. Redis arms a SIGALRM timer from its cron; Keel's workers run
//! their cron in the loop too, so a watchdog thread looks at when each
//! worker's current turn began and signals the one past the period,
//! whose handler writes the trace. As Redis's, the handler is not
//! async-signal-safe: leave the watchdog off in production.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::server::unix_ms;

/// What the watchdog knows of one worker.
#[derive(Default)]
struct Clock {
    /// The worker's thread, once it runs.
    thread: AtomicU64,
    /// When its current loop turn began (Unix ms); 0 while it waits for
    /// events.
    turn_began_ms: AtomicU64,
    /// The turn already reported.
    reported_ms: AtomicU64,
}

pub struct Watchdog {
    /// 0: off.
    period_ms: AtomicU64,
    clocks: Vec<Clock>,
    started: AtomicBool,
}

impl Watchdog {
    pub fn new(workers: usize) -> Watchdog {
        Watchdog { period_ms: AtomicU64::new(0), clocks: (0..workers).map(|_| Clock::default()).collect(), started: AtomicBool::new(false) }
    }

    /// Redis's `applyWatchdogPeriod`: the period, at least two cron
    /// periods, which is what the setting then reads; 0 turns it off.
    pub fn effective_period(period_ms: i64, hz: u32) -> i64 {
        match period_ms {
            0 => 0,
            p => p.max(2 * (1000 / i64::from(hz.max(1)))),
        }
    }

    /// Applies `period_ms` (already effective), starting the watchdog's
    /// thread and the signal's handler the first time it is on.
    pub fn configure(self: &Arc<Self>, period_ms: i64) {
        if self.period_ms.swap(period_ms.max(0) as u64, Ordering::Relaxed) == 0 {
            // Turns noted before it was turned off are stale.
            self.clocks.iter().for_each(|c| c.turn_began_ms.store(0, Ordering::Relaxed));
        }
        if period_ms > 0 && !self.started.swap(true, Ordering::AcqRel) {
            install_handler();
            let watchdog = self.clone();
            let spawned = std::thread::Builder::new().name("keel-watchdog".into()).spawn(move || watchdog.run());
            if let Err(e) = spawned {
                tracing::warn!("cannot start the watchdog: {e}");
            }
        }
    }

    /// Called by worker `worker`'s thread as it starts.
    pub fn attach(&self, worker: usize) {
        // SAFETY: pthread_self has no preconditions.
        self.clocks[worker].thread.store(unsafe { libc::pthread_self() } as u64, Ordering::Relaxed);
    }

    /// Worker `worker` begins a loop turn (true) or waits for events.
    pub fn turn(&self, worker: usize, busy: bool) {
        if self.period_ms.load(Ordering::Relaxed) > 0 {
            self.clocks[worker].turn_began_ms.store(if busy { unix_ms() } else { 0 }, Ordering::Relaxed);
        }
    }

    fn run(&self) {
        loop {
            let period = self.period_ms.load(Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis((period / 4).clamp(10, 100)));
            if period == 0 {
                continue;
            }
            let now = unix_ms();
            for clock in &self.clocks {
                let began = clock.turn_began_ms.load(Ordering::Relaxed);
                let thread = clock.thread.load(Ordering::Relaxed);
                if began == 0 || thread == 0 || now.saturating_sub(began) < period || clock.reported_ms.swap(began, Ordering::Relaxed) == began {
                    continue;
                }
                // SAFETY: the worker's thread lives as long as the server.
                unsafe { libc::pthread_kill(thread as libc::pthread_t, libc::SIGALRM) };
            }
        }
    }
}

fn install_handler() {
    // SAFETY: a zeroed sigaction is valid; the handler only logs.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_alarm as extern "C" fn(libc::c_int) as usize;
        action.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut());
    }
}

extern "C" fn on_alarm(_: libc::c_int) {
    tracing::warn!(
        "\n--- WATCHDOG TIMER EXPIRED ---\n\n------ STACK TRACE ------\n{}\n--------\n",
        std::backtrace::Backtrace::force_capture()
    );
}
