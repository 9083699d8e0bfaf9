//! What the server does to its own process, as Redis does: `daemonize`,
//! the threads' CPUs (`server_cpulist` and the others), `disable-thp`,
//! `oom-score-adj` with `oom-score-adj-values`, `jemalloc-bg-thread`, the
//! open files limit `maxclients` needs, and ending it: on a panic
//! (`use-exit-on-panic`) or a crash signal, with the report
//! `crash-log-enabled` asks for, and on a propagated command that failed
//! (`propagation-error-behavior`).

use std::fs::OpenOptions;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};

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

/// Which of Redis's `*_cpulist` directives a thread follows: `bio_cpulist`
/// for the background I/O threads (the journal's, lazy freeing),
/// `aof_rewrite_cpulist` and `bgsave_cpulist` for the rewrite and BGSAVE
/// threads (and the helpers they start). Every other thread serves
/// clients and follows `server_cpulist`, the whole process's.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CpuRole {
    Bio,
    AofRewrite,
    Bgsave,
}

/// The CPU lists, read once at start (the directives are immutable).
struct CpuLists {
    /// The mask the process started with: background I/O threads keep it
    /// without a `bio_cpulist`, as Redis's, which start before its main
    /// thread is pinned.
    original: Vec<usize>,
    bio: Option<Vec<usize>>,
    aof_rewrite: Option<Vec<usize>>,
    bgsave: Option<Vec<usize>>,
}

static CPU_LISTS: std::sync::OnceLock<CpuLists> = std::sync::OnceLock::new();

/// Pins the calling thread, the first, to `server_cpulist` (the threads it
/// starts inherit it), and keeps the other lists for [`pin_thread`].
pub fn apply_cpulists(config: &Config) {
    let parse = |list: &Option<String>| list.as_deref().and_then(parse_cpulist);
    let lists = CpuLists {
        original: thread_cpus(),
        bio: parse(&config.bio_cpulist),
        aof_rewrite: parse(&config.aof_rewrite_cpulist),
        bgsave: parse(&config.bgsave_cpulist),
    };
    let _ = CPU_LISTS.set(lists);
    if let Some(cpus) = parse(&config.server_cpulist) {
        set_thread_cpus(&cpus);
    }
}

/// Pins the calling thread as its role's list says (Redis's
/// `redisSetCpuAffinity`); without one it keeps what it inherited.
pub fn pin_thread(role: CpuRole) {
    let Some(lists) = CPU_LISTS.get() else { return };
    let cpus = match role {
        CpuRole::Bio => Some(lists.bio.as_ref().unwrap_or(&lists.original)),
        CpuRole::AofRewrite => lists.aof_rewrite.as_ref(),
        CpuRole::Bgsave => lists.bgsave.as_ref(),
    };
    if let Some(cpus) = cpus {
        set_thread_cpus(cpus);
    }
}

/// Runs `work` on the calling thread pinned as `role` says, then gives
/// the thread its CPUs back: for what a replica's thread does where Redis
/// forks a child (a diskless sync, whose child follows `bgsave_cpulist`).
pub fn pinned<T>(role: CpuRole, work: impl FnOnce() -> T) -> T {
    let before = thread_cpus();
    pin_thread(role);
    let done = work();
    if !before.is_empty() {
        set_thread_cpus(&before);
    }
    done
}

/// A cpulist as Redis's `setcpuaffinity` reads it (util-linux's syntax:
/// `0,2,3`, `0,2-3`, `0-20:2`); None where Redis's parser gives up, which
/// then leaves the affinity as it is.
pub fn parse_cpulist(list: &str) -> Option<Vec<usize>> {
    let num = |s: &str| if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) { s.parse::<usize>().ok() } else { None };
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let (first, last, step) = match part.split_once('-') {
            None => (num(part)?, num(part)?, 1),
            Some((first, rest)) => match rest.split_once(':') {
                None => (num(first)?, num(rest)?, 1),
                Some((last, step)) => (num(first)?, num(last)?, num(step)?),
            },
        };
        if step == 0 || first > last {
            return None;
        }
        cpus.extend((first..=last).step_by(step));
    }
    Some(cpus)
}

/// The CPUs the calling thread may run on.
fn thread_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is empty; the call fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads `set` within CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) }).collect()
}

/// Pins the calling thread to `cpus`; a set the system refuses (no CPU
/// of it online) changes nothing, as in Redis.
fn set_thread_cpus(cpus: &[usize]) {
    // SAFETY: a zeroed cpu_set_t is empty.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &cpu in cpus.iter().filter(|&&cpu| cpu < libc::CPU_SETSIZE as usize) {
        // SAFETY: `cpu` is below CPU_SETSIZE.
        unsafe { libc::CPU_SET(cpu, &mut set) };
    }
    // SAFETY: `set` is a valid cpu_set_t of the size passed.
    unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
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

/// `use-exit-on-panic` and `crash-log-enabled`, as the panic paths read them.
static EXIT_ON_PANIC: AtomicBool = AtomicBool::new(false);
static CRASH_LOG: AtomicBool = AtomicBool::new(true);

thread_local! {
    /// Set on the threads whose panic the thread that started them takes
    /// as the failure of their job ([`panic_fails_this_thread_only`]).
    static PANIC_FAILS_THREAD_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks the calling thread as one whose panic fails its job only: a
/// snapshot's scan helper or a load's inserter, which Redis runs in a
/// fork child, whose crash fails that save alone.
pub fn panic_fails_this_thread_only() {
    PANIC_FAILS_THREAD_ONLY.set(true);
}

/// Installs the panic hook: the report goes to the server's log (a
/// daemon's standard error is /dev/null), with the stack trace under
/// `crash-log-enabled`, as Redis's assertion report. Then the process
/// ends, as Redis's does on a failed assertion: exit code 1 under
/// `use-exit-on-panic` (Redis's option for leak checkers), an abort
/// otherwise. A thread left dead would leave the server half alive: a
/// worker's clients and its share of the listening port unanswered, or,
/// for the journal's writer, every durable reply held for good. The
/// threads of [`panic_fails_this_thread_only`] end alone (but for
/// `use-exit-on-panic`).
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("<unnamed>");
        tracing::error!("=== ASSERTION FAILED ===\n==> thread '{name}' {info}{}", stack_trace());
        if EXIT_ON_PANIC.load(Ordering::Relaxed) {
            std::process::exit(1);
        }
        if !PANIC_FAILS_THREAD_ONLY.get() {
            // Reported once: the abort's own signal goes straight to its default.
            default_action(libc::SIGABRT);
            std::process::abort();
        }
    }));
}

/// Redis's `serverPanic`: a state the server must not go on from. Logs
/// `why` (with the stack trace under `crash-log-enabled`) and ends the
/// process: exit code 1 under `use-exit-on-panic`, an abort otherwise, as
/// Redis's.
pub fn server_panic(why: &str) -> ! {
    tracing::error!("Guru Meditation: {why}{}", stack_trace());
    if EXIT_ON_PANIC.load(Ordering::Relaxed) {
        std::process::exit(1);
    }
    // Reported once: the abort's own signal goes straight to its default.
    default_action(libc::SIGABRT);
    std::process::abort()
}

/// DEBUG SEGFAULT: a write to a read-only page, as Redis's, so that the
/// crash is a real SIGSEGV at a faulting instruction.
pub fn segfault() -> ! {
    // SAFETY: maps one private read-only page; the write to it faults on
    // purpose, and the crash handler ends the process.
    unsafe {
        let page = libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
        std::ptr::write_volatile(page.cast::<u8>(), b'x');
    }
    unreachable!("a write to a read-only page returned")
}

/// The signals of a crash, which Redis's crash log reports.
const CRASH_SIGNALS: [libc::c_int; 5] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGABRT];

/// Redis's crash log: a crash signal first writes, under
/// `crash-log-enabled`, what crashed and its stack trace to the log, then
/// ends the process by that signal (a core dump where the system keeps
/// them). As Redis's, the handler runs on the crashed thread's own stack,
/// which a report needs, so it replaces std's stack overflow message
/// (printed from a small alternate stack): an overflow now ends the
/// process without a word, as in Redis. And as in Redis, the report is not
/// async-signal-safe: a crash may already have broken what it uses.
pub fn install_crash_handlers() {
    for signal in CRASH_SIGNALS {
        // SAFETY: a zeroed sigaction is valid; the handler only logs and
        // re-raises.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_crash as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut());
        }
    }
}

extern "C" fn on_crash(signal: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // A second crash while reporting the first ends the process at once.
    default_action(signal);
    if CRASH_LOG.load(Ordering::Relaxed) {
        // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
        let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr()) };
        let address = if matches!(signal, libc::SIGSEGV | libc::SIGBUS) { format!("\nAccessing address: {addr:p}") } else { String::new() };
        tracing::error!(
            "Keel {} crashed by signal: {signal}, si_code: {code}{address}{}",
            env!("CARGO_PKG_VERSION"),
            stack_trace()
        );
    }
    // SAFETY: raising a signal to the calling thread, now at its default.
    unsafe { libc::raise(signal) };
}

/// Puts `signal` back to its default action.
fn default_action(signal: libc::c_int) {
    // SAFETY: SIG_DFL for a signal, no memory passed but a valid sigaction.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(signal, &action, std::ptr::null_mut());
    }
}

/// The calling thread's stack, as a report's last lines; empty without
/// `crash-log-enabled`.
fn stack_trace() -> String {
    if !CRASH_LOG.load(Ordering::Relaxed) {
        return String::new();
    }
    format!("\n------ STACK TRACE ------\n{}", std::backtrace::Backtrace::force_capture())
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
    server.unexpected_error_replies.fetch_add(1, Ordering::Relaxed);
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

/// `use-exit-on-panic` and `crash-log-enabled`, at start and CONFIG SET.
pub fn apply_panic_settings(config: &Config) {
    EXIT_ON_PANIC.store(config.use_exit_on_panic, Ordering::Relaxed);
    CRASH_LOG.store(config.crash_log_enabled, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::parse_cpulist;

    #[test]
    fn cpulists_read_as_redis_reads_them() {
        assert_eq!(parse_cpulist("0,2,3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_cpulist("0,2-3"), Some(vec![0, 2, 3]));
        assert_eq!(parse_cpulist("0-8:2"), Some(vec![0, 2, 4, 6, 8]));
        assert_eq!(parse_cpulist("1-1"), Some(vec![1]));
        for bad in ["", "a", "0-", "3-1", "0-4:0", "1,,2", "2:1", "0-3x", " 1"] {
            assert_eq!(parse_cpulist(bad), None, "{bad:?}");
        }
    }

    proptest::proptest! {
        /// Any text parses or is refused, without a panic; a list of
        /// ranges written out reads back as the CPUs it names.
        #[test]
        fn cpulists_parse_what_they_name(text in "[0-9,:\\- ]{0,12}", ranges in proptest::collection::vec((0usize..64, 0usize..8, 1usize..4), 1..4)) {
            let _ = parse_cpulist(&text);
            let list: Vec<String> = ranges.iter().map(|&(first, len, step)| format!("{first}-{}:{step}", first + len)).collect();
            let want: Vec<usize> = ranges.iter().flat_map(|&(first, len, step)| (first..=first + len).step_by(step)).collect();
            proptest::prop_assert_eq!(parse_cpulist(&list.join(",")), Some(want));
        }
    }
}
