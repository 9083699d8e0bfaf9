//! keel-bench: a memtier_benchmark-compatible load generator for Redis- and
//! Memcached-protocol servers, with open-loop rates and coordinated-omission
//! correction, A/B comparisons, HTML reports and named scenarios.
//!
//! Layout: `cli` parses, `config` validates (memtier's defaults), `gen`
//! and `workload` decide what to send, `protocol` encodes requests and
//! scans replies, `driver` runs one epoll loop per thread (over TLS with
//! `tls`'s configuration), `stats` merges
//! measurements, `runner` runs once, `output` prints memtier's table and
//! JSON, `compare`, `report` and `scenario` are keel-bench's additions.
//!
//! Exit status: 0 for a valid run; 1 when the run is invalid (cannot
//! connect, authentication fails, connections lost, error replies, nothing
//! completed); 2 for bad options.

mod cli;
mod compare;
mod config;
mod driver;
mod gen;
mod output;
mod protocol;
mod report;
mod runner;
mod scenario;
mod stats;
mod tls;
mod workload;

use std::io::Write;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::config::Config;
use crate::stats::RunResult;

/// Errors at the edges of the program; each becomes a message and an exit status.
#[derive(thiserror::Error, Debug)]
pub enum BenchError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Connect(String),
    #[error("{0}")]
    Run(String),
    #[error("{0}")]
    Output(String),
}

impl BenchError {
    fn exit_code(&self) -> i32 {
        match self {
            BenchError::Usage(_) => 2,
            _ => 1,
        }
    }
}

fn main() {
    let code = real_main();
    std::process::exit(code);
}

fn real_main() -> i32 {
    let args: Vec<String> = std::env::args().collect();
    let user = match cli::parse(&args) {
        Ok(o) => o,
        Err(e) => {
            let _ = e.print();
            return e.exit_code();
        }
    };
    if user.list_scenarios {
        print!("{}", scenario::list());
        return 0;
    }
    let opts = match &user.scenario {
        None => user,
        Some(name) => {
            let sc = match scenario::load(name) {
                Ok(s) => s,
                Err(e) => return fail(&e),
            };
            let mut argv = vec![args[0].clone()];
            argv.extend(scenario::to_args(&sc, &user));
            argv.extend(args[1..].iter().cloned());
            eprintln!("Scenario {}: {}", sc.name, sc.description);
            match cli::parse(&argv) {
                Ok(o) => o,
                Err(e) => {
                    let _ = e.print();
                    return e.exit_code();
                }
            }
        }
    };
    let cfg = match Config::from_options(&opts) {
        Ok(c) => Arc::new(c),
        Err(e) => return fail(&e),
    };
    runner::install_sigint();
    let r = if cfg.compare.is_empty() { bench(&cfg) } else { compare::run(&cfg) };
    match r {
        Ok(code) => code,
        Err(e) => fail(&e),
    }
}

fn fail(e: &BenchError) -> i32 {
    eprintln!("error: {e}");
    if matches!(e, BenchError::Usage(_)) {
        eprintln!("Try 'keel-bench --help' for the options.");
    }
    e.exit_code()
}

/// Where the text results go (-o or stdout).
pub fn open_out(cfg: &Config) -> Result<Box<dyn Write>, BenchError> {
    match &cfg.out_file {
        Some(p) => {
            eprintln!("Writing results to {p}...");
            let f = std::fs::File::create(p).map_err(|e| BenchError::Output(format!("{p}: {e}")))?;
            Ok(Box::new(std::io::BufWriter::new(f)))
        }
        None => {
            eprintln!("Writing results to stdout");
            Ok(Box::new(std::io::stdout()))
        }
    }
}

/// Writes the JSON object to --json-out-file.
pub fn write_json(path: &str, v: &Value) -> Result<(), BenchError> {
    let text = serde_json::to_string_pretty(v).map_err(|e| BenchError::Output(e.to_string()))?;
    std::fs::write(path, text + "\n").map_err(|e| BenchError::Output(format!("{path}: {e}")))?;
    eprintln!("Saving JSON output file: {path}");
    Ok(())
}

/// Why a run is invalid, if it is.
pub fn invalid_reason(r: &RunResult) -> Option<String> {
    if r.total_ops() == 0 {
        return Some("no request completed".into());
    }
    if r.connection_errors > 0 {
        return Some(format!("{} connection error(s)", r.connection_errors));
    }
    if r.error_replies() > 0 {
        return Some(format!("{} error repl(ies) from the server", r.error_replies()));
    }
    None
}

/// The normal mode: -x runs against one target, memtier's output.
fn bench(cfg: &Arc<Config>) -> Result<i32, BenchError> {
    let mut out = open_out(cfg)?;
    let w = |out: &mut Box<dyn Write>, s: &str| out.write_all(s.as_bytes()).map_err(|e| BenchError::Output(e.to_string()));
    if cfg.show_config {
        let text = serde_json::to_string_pretty(&output::config_json(cfg)).unwrap_or_default();
        w(&mut out, &format!("{text}\n"))?;
    }
    let mut runs: Vec<RunResult> = Vec::new();
    for run in 1..=cfg.run_count {
        if run > 1 {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        let label = if cfg.run_count > 1 { format!("RUN #{run} ") } else { String::new() };
        let r = runner::run_once(cfg, &label)?;
        if let Some(prefix) = &cfg.hdr_file_prefix {
            output::write_hdr_files(prefix, run, &r).map_err(|e| BenchError::Output(format!("{prefix}: {e}")))?;
        }
        let stop = r.interrupted;
        runs.push(r);
        if stop {
            break;
        }
    }
    w(&mut out, &output::run_info_text(cfg))?;
    let mut json = Map::new();
    json.insert("configuration".into(), output::config_json(cfg));
    json.insert("run information".into(), output::run_info_json(cfg));
    let mut shown: Vec<(String, RunResult)> = Vec::new();
    if runs.len() > 1 {
        if cfg.print_all_runs {
            for (i, r) in runs.iter().enumerate() {
                shown.push((format!("RUN #{} RESULTS", i + 1), r.clone()));
            }
        }
        let by_ops = |a: &&RunResult, b: &&RunResult| a.ops_sec().total_cmp(&b.ops_sec());
        if let Some(best) = runs.iter().max_by(by_ops) {
            shown.push(("BEST RUN RESULTS".into(), best.clone()));
        }
        if let Some(worst) = runs.iter().min_by(by_ops) {
            shown.push(("WORST RUN RESULTS".into(), worst.clone()));
        }
        shown.push((format!("AGGREGATED AVERAGE RESULTS ({} runs)", runs.len()), RunResult::aggregate(&runs)));
    } else if let Some(r) = runs.first() {
        shown.push(("ALL STATS".into(), r.clone()));
    }
    for (header, r) in &shown {
        w(&mut out, &output::table(cfg, r, header))?;
        if !cfg.hide_histogram {
            w(&mut out, &output::distribution(r))?;
        }
        w(&mut out, &output::uncorrected_table(cfg, r))?;
        json.insert(header.clone(), output::result_json(cfg, r));
    }
    let last = shown.last().map(|(_, r)| r.clone()).unwrap_or_else(|| runs[0].clone());
    w(&mut out, &output::footer(&last))?;
    out.flush().map_err(|e| BenchError::Output(e.to_string()))?;
    drop(out);
    if let Some(p) = &cfg.json_out_file {
        write_json(p, &Value::Object(json))?;
    }
    if let Some(p) = &cfg.report {
        let items: Vec<(String, &RunResult)> = if runs.len() > 1 {
            runs.iter().enumerate().map(|(i, r)| (format!("Run #{}", i + 1), r)).collect()
        } else {
            vec![("Run".to_string(), &runs[0])]
        };
        report::write(p, cfg, "keel-bench report", &items, None)?;
    }
    let worst = runs.iter().find_map(invalid_reason);
    if let Some(why) = worst {
        eprintln!("error: run invalid: {why}");
        for m in runs.iter().flat_map(|r| r.error_messages.iter()).take(5) {
            eprintln!("  {m}");
        }
        return Ok(1);
    }
    if runs.iter().any(|r| r.interrupted) {
        eprintln!("interrupted: results cover the time until the interrupt");
        return Ok(130);
    }
    Ok(0)
}
