//! `keel-server [config-file] [--directive value ...]`: the server binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut command_line = std::env::args();
    let program = command_line.next().unwrap_or_default();
    let args: Vec<String> = command_line.collect();
    // The arguments are read: their memory becomes the process title's.
    keel_server::proc_title::claim(&program);
    if args.iter().any(|a| a == "-v" || a == "--version") {
        println!("Keel server v={} (Redis 7.0 compatible)", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("Usage: keel-server [/path/to/keel.conf] [--directive value ...]");
        println!("Directives have Redis's names and defaults, e.g. --port 6380 --appendonly no");
        return ExitCode::SUCCESS;
    }
    let config = match keel_server::config::Config::load(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("\n{e}");
            return ExitCode::FAILURE;
        }
    };
    // Redis chdir()s to `dir` as it reads it: relative paths (logfile,
    // pidfile, unixsocket, aclfile) are under it.
    if let Err(e) = std::env::set_current_dir(&config.dir) {
        eprintln!("Can't chdir to '{}': {e}", config.dir.display());
        return ExitCode::FAILURE;
    }
    // Under upstart this stops the process until it is let go on.
    let supervision_notes = keel_server::supervision::detect(&config.supervised);
    // A supervised server stays in the foreground: its manager keeps it.
    let background = config.daemonize && keel_server::supervision::supervisor().is_none();
    if background {
        // Before any thread starts (logging included): a fork keeps only
        // the calling thread.
        if let Err(e) = keel_server::process::daemonize() {
            eprintln!("keel-server: daemonize: {e}");
            return ExitCode::FAILURE;
        }
    }
    let filter = keel_server::process::log_filter(&config.loglevel);
    let env_filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| filter.into());
    // No log file: standard output, as Redis logs (tools that watch a
    // server's output for "Ready to accept connections" read it there).
    use std::io::IsTerminal;
    use tracing_subscriber::fmt::writer::BoxMakeWriter;
    let (writer, ansi) = if config.logfile.is_empty() {
        (BoxMakeWriter::new(std::io::stdout), std::io::stdout().is_terminal())
    } else {
        match std::fs::OpenOptions::new().create(true).append(true).open(&config.logfile) {
            Ok(file) => (BoxMakeWriter::new(std::sync::Mutex::new(file)), false),
            Err(e) => {
                eprintln!("Can't open the log file: {e}");
                return ExitCode::FAILURE;
            }
        }
    };
    let file_layer = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(writer)
        // A log line that cannot be written is dropped, as Redis drops it.
        // By default the subscriber reports the failure with `eprintln!`,
        // which panics when stderr is the broken pipe: the logging thread
        // (a worker, or the one that takes SIGTERM) would die.
        .log_internal_errors(false);
    let syslog =
        config.syslog_enabled.then(|| keel_server::syslog::Syslog::open(&config.syslog_ident, &config.syslog_facility));
    // CONFIG SET loglevel replaces the filter through this handle.
    let (filter, handle) = tracing_subscriber::reload::Layer::new(env_filter);
    keel_server::process::set_log_level_changer(Box::new(move |f| handle.reload(f).is_ok()));
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    tracing_subscriber::registry().with(filter).with(file_layer).with(syslog).init();
    keel_server::process::install_panic_hook();
    keel_server::process::install_crash_handlers();
    keel_server::proc_title::apply(&config);
    for note in &supervision_notes {
        note.log();
    }
    // A daemon always has one, at Redis's default path unless named.
    let pidfile = match (config.pidfile.as_str(), background) {
        ("", false) => None,
        ("", true) => Some(std::path::PathBuf::from("/var/run/redis.pid")),
        (path, _) => Some(std::path::PathBuf::from(path)),
    };
    if let Some(path) = &pidfile {
        if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
            tracing::warn!("Failed to write PID file {}: {e}", path.display());
        }
    }
    let result = keel_server::run(config);
    if let Some(path) = &pidfile {
        let _ = std::fs::remove_file(path);
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Into the log, where Redis reports why it could not start.
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
