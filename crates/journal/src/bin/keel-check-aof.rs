//! `keel-check-aof [--fix|--truncate-to-timestamp <unix-seconds>]
//! <manifest-or-aof-file>`: checks an AOF as `redis-check-aof` does. Exit
//! status 0 when valid (or repaired), 1 otherwise. `--fix` truncates a bad
//! tail of the last file without asking; `--truncate-to-timestamp` cuts the
//! last file where its writes later than that time begin.

use std::path::PathBuf;
use std::process::ExitCode;

use keel_journal::check::{check, CheckOutcome, Repair};

const USAGE: &str = "Usage: keel-check-aof [--fix|--truncate-to-timestamp $timestamp] <file.manifest|file.aof>";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (repair, path) = match args.as_slice() {
        [p] if !p.starts_with("--") => (Repair::Nothing, PathBuf::from(p)),
        [f, p] if f == "--fix" => (Repair::Fix, PathBuf::from(p)),
        [t, unix_s, p] if t == "--truncate-to-timestamp" => match unix_s.parse() {
            Ok(unix_s) => (Repair::ToTimestamp(unix_s), PathBuf::from(p)),
            Err(_) => {
                println!("Invalid timestamp, aborting...");
                return ExitCode::from(1);
            }
        },
        _ => {
            println!("{USAGE}");
            return ExitCode::from(1);
        }
    };
    let mut out = std::io::stdout().lock();
    match check(&path, repair, &mut out) {
        Ok(CheckOutcome::Valid | CheckOutcome::Fixed) => ExitCode::SUCCESS,
        Ok(CheckOutcome::Invalid) => ExitCode::from(1),
        Err(e) => {
            eprintln!("keel-check-aof: {}: {e}", path.display());
            ExitCode::from(1)
        }
    }
}
