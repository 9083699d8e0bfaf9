//! Telling a service manager how start-up and shutdown go (`supervised`),
//! as Redis does. Under systemd: sd_notify's datagrams to
//! `$NOTIFY_SOCKET` (`STATUS=...`, `READY=1` once serving, `STOPPING=1`),
//! which Debian's unit for redis-server expects (`Type=notify`,
//! `--supervised systemd`). Under upstart: one SIGSTOP of its own, which
//! upstart's `expect stop` takes for "started". A supervised server does
//! not daemonize: its manager keeps it.
//!
//! sd_notify's protocol is one datagram of `KEY=value` lines to a Unix
//! socket, path or abstract name: written here, where Redis links
//! libsystemd.

use std::io;
use std::os::unix::net::UnixDatagram;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Supervisor {
    Upstart,
    Systemd,
}

impl Supervisor {
    /// INFO's `process_supervised`.
    pub fn name(self) -> &'static str {
        match self {
            Supervisor::Upstart => "upstart",
            Supervisor::Systemd => "systemd",
        }
    }
}

/// Set once, at start, when the manager answered.
static SUPERVISOR: OnceLock<Supervisor> = OnceLock::new();

/// Who supervises this process, if anyone does.
pub fn supervisor() -> Option<Supervisor> {
    SUPERVISOR.get().copied()
}

/// A line for the log, kept until logging is set up: detection runs before
/// `daemonize`, which must come before any thread starts.
pub enum Note {
    Warning(String),
    Notice(String),
}

impl Note {
    pub fn log(&self) {
        match self {
            Note::Warning(text) => tracing::warn!("{text}"),
            Note::Notice(text) => tracing::info!("{text}"),
        }
    }
}

/// Redis's `redisIsSupervised`: `mode` is the `supervised` directive
/// (`auto` picks the manager whose variable is set). Under upstart the
/// process stops itself here, before it loads anything, as Redis's.
pub fn detect(mode: &str) -> Vec<Note> {
    let mut notes = Vec::new();
    let mode = match mode {
        "auto" if std::env::var_os("UPSTART_JOB").is_some() => "upstart",
        "auto" if std::env::var_os("NOTIFY_SOCKET").is_some() => "systemd",
        mode => mode,
    };
    let found = match mode {
        "upstart" if std::env::var_os("UPSTART_JOB").is_none() => {
            notes.push(Note::Warning("upstart supervision requested, but UPSTART_JOB not found!".into()));
            None
        }
        "upstart" => {
            notes.push(Note::Notice("supervised by upstart, will stop to signal readiness.".into()));
            // SAFETY: a signal to this very process; it goes on at SIGCONT.
            unsafe { libc::raise(libc::SIGSTOP) };
            // No thread runs yet, so changing the environment races nothing.
            std::env::remove_var("UPSTART_JOB");
            Some(Supervisor::Upstart)
        }
        "systemd" => match send("STATUS=Keel is loading...\n") {
            Ok(()) => {
                notes.push(Note::Notice(
                    "Supervised by systemd. Please make sure you set appropriate values for TimeoutStartSec and \
                     TimeoutStopSec in your service unit."
                        .into(),
                ));
                Some(Supervisor::Systemd)
            }
            Err(e) => {
                notes.push(Note::Warning(failure(&e)));
                None
            }
        },
        _ => None,
    };
    if let Some(found) = found {
        let _ = SUPERVISOR.set(found);
    }
    notes
}

/// Sends `state` (sd_notify's `KEY=value\n` lines) to systemd when it
/// supervises this process; a failure is logged, as Redis's
/// `redisCommunicateSystemd` logs it, and changes nothing else.
pub fn notify_systemd(state: &str) {
    if supervisor() == Some(Supervisor::Systemd) {
        if let Err(e) = send(state) {
            tracing::warn!("{}", failure(&e));
        }
    }
}

fn failure(e: &io::Error) -> String {
    if e.kind() == io::ErrorKind::NotFound {
        "systemd supervision error: NOTIFY_SOCKET not found!".into()
    } else {
        format!("systemd supervision error: sd_notify: {e}")
    }
}

/// One datagram to `$NOTIFY_SOCKET`: a path, or an abstract socket's name
/// after `@`.
fn send(state: &str) -> io::Result<()> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return Err(io::ErrorKind::NotFound.into());
    };
    let socket = UnixDatagram::unbound()?;
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str());
    let sent = match bytes.strip_prefix(b"@") {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            socket.send_to_addr(state.as_bytes(), &addr)?
        }
        None => socket.send_to(state.as_bytes(), &target)?,
    };
    if sent < state.len() {
        return Err(io::Error::other("short datagram"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_socket_reads_as_redis_s_warning() {
        assert_eq!(failure(&io::ErrorKind::NotFound.into()), "systemd supervision error: NOTIFY_SOCKET not found!");
        assert!(failure(&io::Error::from_raw_os_error(libc::ECONNREFUSED)).starts_with("systemd supervision error: sd_notify: "));
    }
}
