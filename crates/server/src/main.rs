//! `keel-server [config-file] [--directive value ...]`: the server binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
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
    let filter = match config.loglevel.as_str() {
        "debug" => "debug",
        "verbose" => "info",
        "warning" => "warn",
        "nothing" => "off",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| filter.into()))
        .with_writer(std::io::stderr)
        .init();
    match keel_server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("keel-server: {e}");
            ExitCode::FAILURE
        }
    }
}
