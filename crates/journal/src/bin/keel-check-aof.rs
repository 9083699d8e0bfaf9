//! `keel-check-aof [--fix] <manifest-or-aof-file>`: checks an AOF as
//! `redis-check-aof` does. Exit status 0 when valid (or fixed), 1 otherwise.
//! `--fix` truncates a bad tail of the last file without asking.

use std::path::PathBuf;
use std::process::ExitCode;

use keel_journal::check::{check, CheckOutcome};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (fix, path) = match args.as_slice() {
        [p] if p != "--fix" => (false, PathBuf::from(p)),
        [f, p] if f == "--fix" => (true, PathBuf::from(p)),
        _ => {
            eprintln!("Usage: keel-check-aof [--fix] <file.manifest|file.aof>");
            return ExitCode::from(1);
        }
    };
    let mut out = std::io::stdout().lock();
    match check(&path, fix, &mut out) {
        Ok(CheckOutcome::Valid | CheckOutcome::Fixed) => ExitCode::SUCCESS,
        Ok(CheckOutcome::Invalid) => ExitCode::from(1),
        Err(e) => {
            eprintln!("keel-check-aof: {}: {e}", path.display());
            ExitCode::from(1)
        }
    }
}
