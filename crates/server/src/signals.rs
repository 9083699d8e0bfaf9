//! SIGTERM and SIGINT shut the server down as SHUTDOWN does, with the
//! flags `shutdown-on-sigterm` and `shutdown-on-sigint` give (Redis's
//! `sigShutdownHandler` and serverCron; by default: wait for lagging
//! replicas, a final save when save rules exist, and if that save fails
//! the server logs it and goes on; `crate::shutdown`).
//! A second SIGINT during a shutdown exits at once, as Redis's "You
//! insist...". Redis acts on a signal at its next cron tick; Keel at
//! once, unless DEBUG PAUSE-CRON holds the cron: the shutdown then waits
//! for it (`Server::shutdown_asap`), and SHUTDOWN ABORT can cancel it.
//!
//! The signals are blocked in every thread (the mask is inherited, so
//! [`block`] runs before any thread starts) and taken by one thread with
//! `sigtimedwait`: no code runs in a signal handler.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::server::Server;

fn shutdown_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise and fill a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        set
    }
}

/// Blocks SIGTERM and SIGINT in this thread and those it will start.
pub fn block() -> io::Result<()> {
    let set = shutdown_signals();
    // SAFETY: `set` is a valid signal set; the old mask is not wanted.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Starts the thread that waits for the signals; it lives until the
/// process exits.
pub fn spawn(server: Arc<Server>) -> io::Result<()> {
    std::thread::Builder::new().name("keel-signals".into()).spawn(move || listen(server))?;
    Ok(())
}

/// How often the listener looks at a shutdown that waits for the cron.
const PENDING_POLL: libc::timespec = libc::timespec { tv_sec: 0, tv_nsec: 10_000_000 };

fn listen(server: Arc<Server>) {
    let set = shutdown_signals();
    // A signal's shutdown waits for DEBUG PAUSE-CRON to end
    // (`Server::shutdown_asap`, which SHUTDOWN ABORT clears).
    let mut pending: Option<libc::c_int> = None;
    loop {
        let timeout = if pending.is_some() { &PENDING_POLL as *const libc::timespec } else { std::ptr::null() };
        // SAFETY: `set` is a valid signal set and `timeout` null or a
        // valid timespec; no siginfo is asked for.
        let sig = unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), timeout) };
        if pending.is_some() && !server.shutdown_asap.load(Ordering::Acquire) {
            pending = None; // aborted
        }
        if sig < 0 {
            if let Some(sig) = pending {
                if !server.cron_paused.load(Ordering::Acquire) && server.shutdown_asap.swap(false, Ordering::AcqRel) {
                    pending = None;
                    start_shutdown(&server, sig);
                }
            }
            continue;
        }
        if pending.is_some() || server.shutting_down.active() {
            if sig == libc::SIGINT {
                tracing::warn!("You insist... exiting now.");
                let _ = std::fs::remove_file(crate::snapshot::temp_path(&server));
                std::process::exit(1);
            }
            continue;
        }
        if server.loading.load(Ordering::Relaxed) {
            tracing::warn!("Received shutdown signal during loading, scheduling shutdown.");
        } else {
            tracing::warn!("Received {} scheduling shutdown...", name(sig));
        }
        if server.cron_paused.load(Ordering::Acquire) {
            server.shutdown_asap.store(true, Ordering::Release);
            pending = Some(sig);
        } else {
            start_shutdown(&server, sig);
        }
    }
}

fn name(sig: libc::c_int) -> &'static str {
    if sig == libc::SIGINT { "SIGINT" } else { "SIGTERM" }
}

/// Runs the shutdown on its own thread, with the flags
/// `shutdown-on-sigint` or `shutdown-on-sigterm` gives, so that a second
/// SIGINT is still heard during the final save.
fn start_shutdown(server: &Arc<Server>, sig: libc::c_int) {
    let server = Arc::clone(server);
    let started = std::thread::Builder::new().name("keel-shutdown".into()).spawn(move || {
        let flags = {
            let c = server.config.read();
            if sig == libc::SIGINT { c.shutdown_on_sigint } else { c.shutdown_on_sigterm }
        };
        if crate::shutdown::begin(&server, flags, None) == crate::shutdown::Outcome::Failed {
            tracing::warn!(
                "{} received but errors trying to shut down the server, check the logs for more information",
                name(sig)
            );
        }
    });
    if let Err(e) = started {
        tracing::error!("could not start the shutdown thread: {e}");
    }
}
