//! SIGTERM and SIGINT shut the server down as SHUTDOWN with no argument
//! does (Redis's `sigShutdownHandler` and serverCron): a final save when
//! save rules exist, and if that save fails the server logs it and goes on.
//! A second SIGINT during a shutdown exits at once, as Redis's "You
//! insist...".
//!
//! The signals are blocked in every thread (the mask is inherited, so
//! [`block`] runs before any thread starts) and taken by one thread with
//! `sigwait`: no code runs in a signal handler.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
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

fn listen(server: Arc<Server>) {
    let set = shutdown_signals();
    let shutting_down = Arc::new(AtomicBool::new(false));
    loop {
        let mut sig: libc::c_int = 0;
        // SAFETY: `set` and `sig` are valid for the call.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            continue;
        }
        let name = if sig == libc::SIGINT { "SIGINT" } else { "SIGTERM" };
        if shutting_down.swap(true, Ordering::AcqRel) {
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
            tracing::warn!("Received {name} scheduling shutdown...");
        }
        // The final save runs on its own thread so that a second SIGINT is
        // still heard meanwhile.
        let (server, flag) = (server.clone(), shutting_down.clone());
        let started = std::thread::Builder::new().name("keel-shutdown".into()).spawn(move || {
            match crate::snapshot::prepare_shutdown(&server, crate::snapshot::FinalSave::IfRules, false) {
                Ok(()) => server.request_shutdown(),
                Err(_) => {
                    tracing::warn!(
                        "{name} received but errors trying to shut down the server, check the logs for more information"
                    );
                    flag.store(false, Ordering::Release);
                }
            }
        });
        if let Err(e) = started {
            tracing::error!("could not start the shutdown thread: {e}");
            shutting_down.store(false, Ordering::Release);
        }
    }
}
