//! What the server does to its own process, as Redis does: `daemonize`,
//! `disable-thp`, `oom-score-adj` with `oom-score-adj-values`,
//! `jemalloc-bg-thread`, the open files limit `maxclients` needs, and
//! ending it: on a panic (`use-exit-on-panic`)
//! and on a propagated command that failed (`propagation-error-behavior`).

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;

use parking_lot::Mutex;

use crate::config::{Config, OomScoreAdj};

/// Detaches from the terminal as Redis's `daemonize()`: forks (the parent
/// exits at once with success), starts a new session, and points stdin,
/// stdout and stderr at `/dev/null`. Must run before any thread starts: a
/// fork keeps only the calling thread.
pub fn daemonize() -> io::Result<()> {
    // SAFETY: the process is single-threaded here (called before logging
    // or any thread starts), so the child inherits a consistent state.
    match unsafe { libc::fork() } {
        -1 => return Err(io::Error::last_os_error()),
        0 => {}
        _ => std::process::exit(0),
    }
    // SAFETY: plain syscalls on the child's own session and descriptors.
    unsafe {
        if libc::setsid() == -1 {
            return Err(io::Error::last_os_error());
        }
        let null = OpenOptions::new().read(true).write(true).open("/dev/null")?;
        for fd in 0..3 {
            if libc::dup2(null.as_raw_fd(), fd) == -1 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// `disable-thp yes` (the default): where the system enables transparent
/// huge pages for every process (`[always]`), turns them off for this one,
/// as Redis does at start: with them, a write to one key can fault in 2 MB
/// and latency suffers. Under `madvise` or `never` nothing asks for them.
pub fn disable_thp() {
    let always = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
        .is_ok_and(|s| s.contains("[always]"));
    // SAFETY: prctl with integer arguments only.
    if always && unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } == -1 {
        tracing::warn!("Failed to disable transparent huge pages: {}", io::Error::last_os_error());
    }
}

/// The process's `oom_score_adj` from before Keel first changed it (Redis's
/// `oom_score_adj_base`), while Keel controls it.
static OOM_BASE: Mutex<Option<i32>> = Mutex::new(None);

const OOM_PATH: &str = "/proc/self/oom_score_adj";

/// Applies `oom-score-adj` and `oom-score-adj-values` as Redis's
/// `setOOMScoreAdj`, with the master's value or, while `replicaof` names
/// a master, the replica's: `absolute` writes that value,
/// `relative` (or `yes`) adds it to the score the process started with,
/// clamped to [-1000, 1000]; `no` puts back that starting score if Keel had
/// changed it. `Err` carries CONFIG SET's reason.
pub fn apply_oom_score(config: &Config) -> Result<(), String> {
    let mut base = OOM_BASE.lock();
    let value = match config.oom_score_adj {
        OomScoreAdj::No => match base.take() {
            Some(b) => b,
            None => return Ok(()),
        },
        mode => {
            let b = match *base {
                Some(b) => b,
                None => {
                    let read = std::fs::read_to_string(OOM_PATH)
                        .map_err(|e| e.to_string())
                        .and_then(|s| s.trim().parse::<i32>().map_err(|e| e.to_string()));
                    match read {
                        Ok(b) => *base.insert(b),
                        Err(e) => {
                            tracing::warn!("Unable to read oom_score_adj: {e}");
                            return Err(OOM_FAILED.into());
                        }
                    }
                }
            };
            let class = config.oom_score_adj_values[usize::from(config.replicaof.is_some())];
            let v = if mode == OomScoreAdj::Relative { class + b } else { class };
            v.clamp(-1000, 1000)
        }
    };
    std::fs::write(OOM_PATH, format!("{value}\n")).map_err(|e| {
        tracing::warn!("Unable to write oom_score_adj: {e}");
        OOM_FAILED.to_string()
    })
}

const OOM_FAILED: &str = "Failed to set current oom_score_adj. Check server logs.";

/// Descriptors kept for what is not a client: listeners, the journal's
/// files, the workers' pollers (Redis's `CONFIG_MIN_RESERVED_FDS`).
const RESERVED_FDS: u64 = 32;

/// Raises the open files limit to what `maxclients` connections need, as
/// Redis's `adjustOpenFilesLimit`: at most down to the limit already
/// there, 16 at a time, when the system refuses more. Returns the
/// `maxclients` the limit allows, lower than asked (with Redis's warnings)
/// when it could not be raised that far; `Err` when it allows no client.
pub fn adjust_open_files_limit(maxclients: usize) -> Result<usize, String> {
    let wanted = maxclients as u64 + RESERVED_FDS;
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: `limit` is a valid rlimit to fill.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == -1 {
        let e = io::Error::last_os_error();
        tracing::warn!("Unable to obtain the current NOFILE limit ({e}), assuming 1024 and setting the max clients configuration accordingly.");
        return Ok((1024 - RESERVED_FDS) as usize);
    }
    let old = limit.rlim_cur;
    if old >= wanted {
        return Ok(maxclients);
    }
    let mut best = wanted;
    let mut refused = None;
    while best > old {
        let raised = libc::rlimit { rlim_cur: best, rlim_max: best.max(limit.rlim_max) };
        // SAFETY: `raised` is a valid rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            break;
        }
        refused = Some(io::Error::last_os_error());
        best = best.saturating_sub(16).max(old);
    }
    if best >= wanted {
        tracing::info!("Increased maximum number of open files to {wanted} (it was originally set to {old}).");
        return Ok(maxclients);
    }
    if best <= RESERVED_FDS {
        return Err(format!(
            "Your current 'ulimit -n' of {old} is not enough for the server to start. Please increase your open file limit to at least {wanted}. Exiting."
        ));
    }
    let allowed = (best - RESERVED_FDS) as usize;
    let why = refused.map(|e| e.to_string()).unwrap_or_default();
    tracing::warn!("You requested maxclients of {maxclients} requiring at least {wanted} max file descriptors.");
    tracing::warn!("Server can't set maximum open files to {wanted} because of OS error: {why}.");
    tracing::warn!("Current maximum open files is {best}. maxclients has been reduced to {allowed} to compensate for low ulimit. If you need higher maxclients increase 'ulimit -n'.");
    Ok(allowed)
}

/// The log filter for Redis's `loglevel` names.
pub fn log_filter(loglevel: &str) -> &'static str {
    match loglevel {
        "debug" => "debug",
        "verbose" => "info",
        "warning" => "warn",
        "nothing" => "off",
        _ => "info",
    }
}

/// Replaces the installed log filter; true when it did.
type LogLevelChanger = Box<dyn Fn(tracing_subscriber::EnvFilter) -> bool + Send + Sync>;

/// Set by `main` once its log subscriber is installed (none in tests that
/// run the server in-process).
static LOG_LEVEL_CHANGER: std::sync::OnceLock<LogLevelChanger> = std::sync::OnceLock::new();

/// `use-exit-on-panic`, as the panic hook reads it.
static EXIT_ON_PANIC: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Installs the panic hook: after the usual report, a panic ends the whole
/// process with exit code 1 while `use-exit-on-panic` is set (Redis's
/// option for leak checkers, which exits where it would abort); otherwise
/// only the thread that panicked ends.
pub fn install_panic_hook() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        if EXIT_ON_PANIC.load(std::sync::atomic::Ordering::Relaxed) {
            std::process::exit(1);
        }
    }));
}

/// Redis's `serverPanic`: a state the server must not go on from. Logs
/// `why` and ends the process: exit code 1 under `use-exit-on-panic`, an
/// abort otherwise, as Redis's.
pub fn server_panic(why: &str) -> ! {
    tracing::error!("Guru Meditation: {why}");
    if EXIT_ON_PANIC.load(std::sync::atomic::Ordering::Relaxed) {
        std::process::exit(1);
    }
    std::process::abort()
}

/// Where a command that failed came from, for [`propagation_error`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Propagated {
    /// The master's stream, on a replica.
    Master,
    /// The journal, replayed at start (Redis's AOF-loading client).
    Journal,
}

/// A command that reached this server through propagation answered an
/// error (Redis's `afterErrorReply` for its master and AOF clients): the
/// copy may now differ from its source. Logged as Redis logs it and
/// counted; with `propagation-error-behavior panic` (or, for the master's
/// stream on a read-only replica, `panic-on-replicas`) the server panics.
pub fn propagation_error(server: &crate::server::Server, source: Propagated, name: &[u8], error: &[u8]) {
    let (from, to) = match source {
        Propagated::Master => ("replica", "master"),
        Propagated::Journal => ("server", "AOF-loading-client"),
    };
    let name = crate::command::table().lookup(name).map_or("<unknown>", |(_, spec)| spec.name);
    // As Redis shows it: a plain ERR without its code, others as sent.
    let error = String::from_utf8_lossy(&error[..error.len().min(4096)]);
    let error = error.trim_end_matches(['\r', '\n']);
    let error = error.strip_prefix("-ERR ").or(error.strip_prefix("ERR ")).unwrap_or(error);
    tracing::warn!("== CRITICAL == This {from} is sending an error to its {to}: '{error}' after processing the command '{name}'");
    server.unexpected_error_replies.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let config = server.config.read();
    let panics = match source {
        Propagated::Master => config.replica_read_only && config.propagation_error_behavior != "ignore",
        Propagated::Journal => config.propagation_error_behavior == "panic",
    };
    drop(config);
    if panics {
        server_panic(&format!("This {from} panicked sending an error to its {to} after processing the command '{name}'"));
    }
}

/// `CONFIG SET use-exit-on-panic`.
pub fn apply_exit_on_panic(config: &Config) {
    EXIT_ON_PANIC.store(config.use_exit_on_panic, std::sync::atomic::Ordering::Relaxed);
}

pub fn set_log_level_changer(changer: LogLevelChanger) {
    let _ = LOG_LEVEL_CHANGER.set(changer);
}

/// `CONFIG SET loglevel`: the new level from the next line on.
pub fn apply_loglevel(config: &Config) {
    if let Some(change) = LOG_LEVEL_CHANGER.get() {
        if !change(tracing_subscriber::EnvFilter::new(log_filter(&config.loglevel))) {
            tracing::warn!("Failed to change the log level to {}", config.loglevel);
        }
    }
}

/// `jemalloc-bg-thread`: jemalloc's background threads purge freed pages,
/// so that the workers do not (Redis's default, yes).
pub fn apply_jemalloc_bg_thread(config: &Config) {
    if let Err(e) = tikv_jemalloc_ctl::background_thread::write(config.jemalloc_bg_thread) {
        tracing::warn!("Failed to set jemalloc's background threads: {e}");
    }
}
