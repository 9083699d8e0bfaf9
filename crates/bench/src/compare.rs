//! `--compare A,B`: the same load against two targets, runs alternated
//! A, B, A, B, ... so that drift on a shared machine (other tenants,
//! thermal state, page cache) falls on both sides alike, then the ratios
//! B/A of each pair with their spread. On a noisy two-core machine a
//! figure means something only as such a ratio (design.md).

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::config::Config;
use crate::stats::RunResult;
use crate::{output, report, runner, BenchError};

/// Runs per target when -x was not given.
const RUNS_DEFAULT: u32 = 3;

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// One compared figure.
struct Metric {
    name: &'static str,
    get: fn(&RunResult) -> f64,
}

const METRICS: &[Metric] = &[
    Metric { name: "Ops/sec", get: |r| r.ops_sec() },
    Metric { name: "Avg. Latency (msec)", get: |r| r.total().avg_ms() },
    Metric { name: "p50 Latency (msec)", get: |r| r.total().pct_ms(50.0) },
    Metric { name: "p99 Latency (msec)", get: |r| r.total().pct_ms(99.0) },
    Metric { name: "p99.9 Latency (msec)", get: |r| r.total().pct_ms(99.9) },
    Metric { name: "keel-bench CPU-s per M ops", get: |r| r.cpu_s_per_mop() },
];

/// Runs the comparison; returns the exit status.
pub fn run(cfg: &Arc<Config>) -> Result<i32, BenchError> {
    let n = if cfg.run_count > 1 { cfg.run_count } else { RUNS_DEFAULT };
    let names = ["A", "B"];
    let mut results: [Vec<RunResult>; 2] = [Vec::new(), Vec::new()];
    for i in 0..n {
        for (side, target) in cfg.compare.iter().enumerate() {
            let mut c = (**cfg).clone();
            c.target = target.clone();
            let c = Arc::new(c);
            let label = format!("{} #{} ", names[side], i + 1);
            let r = runner::run_once(&c, &label).map_err(|e| BenchError::Run(format!("{} ({}): {e}", names[side], target.describe())))?;
            eprintln!("{label}{}: {:.0} ops/sec, p99 {:.3} msec", target.describe(), r.ops_sec(), r.total().pct_ms(99.0));
            results[side].push(r);
            if runner::interrupted() {
                break;
            }
        }
        if runner::interrupted() {
            break;
        }
    }
    let pairs = results[0].len().min(results[1].len());
    let mut text = String::new();
    let _ = writeln!(text, "\n\nCOMPARISON ({pairs} runs each, alternated A, B, A, B, ...)");
    let _ = writeln!(text, "A = {}", cfg.compare[0].describe());
    let _ = writeln!(text, "B = {}", cfg.compare[1].describe());
    let _ = writeln!(text, "{}", "=".repeat(98));
    let _ = writeln!(text, "{:<28} {:>14} {:>14} {:>12} {:>24}", "Metric", "A (median)", "B (median)", "B/A", "B/A range (min - max)");
    let _ = writeln!(text, "{}", "-".repeat(98));
    let mut jm = Map::new();
    for m in METRICS {
        let a: Vec<f64> = results[0].iter().map(m.get).collect();
        let b: Vec<f64> = results[1].iter().map(m.get).collect();
        let ratios: Vec<f64> = (0..pairs).filter(|&i| a[i] > 0.0).map(|i| b[i] / a[i]).collect();
        let (lo, hi) = ratios.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        let rm = median(ratios.clone());
        let _ = writeln!(
            text,
            "{:<28} {:>14.3} {:>14.3} {:>12.3} {:>24}",
            m.name,
            median(a.clone()),
            median(b.clone()),
            rm,
            if ratios.is_empty() { "-".to_string() } else { format!("{lo:.3} - {hi:.3}") }
        );
        let mut o = Map::new();
        o.insert("A".into(), Value::from(a.clone()));
        o.insert("B".into(), Value::from(b.clone()));
        o.insert("A median".into(), Value::from(median(a)));
        o.insert("B median".into(), Value::from(median(b)));
        o.insert("B/A".into(), Value::from(ratios.clone()));
        o.insert("B/A median".into(), Value::from(rm));
        if !ratios.is_empty() {
            o.insert("B/A min".into(), Value::from(lo));
            o.insert("B/A max".into(), Value::from(hi));
        }
        jm.insert(m.name.into(), Value::Object(o));
    }
    let mut out = crate::open_out(cfg)?;
    out.write_all(text.as_bytes()).map_err(|e| BenchError::Output(e.to_string()))?;
    out.flush().map_err(|e| BenchError::Output(e.to_string()))?;
    drop(out);
    // The median run of each side (by ops/sec) stands for it in the JSON and report.
    let pick = |v: &Vec<RunResult>| -> Option<RunResult> {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&i, &j| v[i].ops_sec().total_cmp(&v[j].ops_sec()));
        idx.get(idx.len() / 2).map(|&i| v[i].clone())
    };
    let reps: Vec<Option<RunResult>> = results.iter().map(pick).collect();
    if let Some(p) = &cfg.json_out_file {
        let mut json = Map::new();
        json.insert("configuration".into(), output::config_json(cfg));
        json.insert("run information".into(), output::run_info_json(cfg));
        let mut c = Map::new();
        c.insert("A".into(), Value::from(cfg.compare[0].describe()));
        c.insert("B".into(), Value::from(cfg.compare[1].describe()));
        c.insert("Runs".into(), Value::from(pairs));
        c.insert("Order".into(), Value::from("alternated A, B, A, B"));
        c.insert("Metrics".into(), Value::Object(jm));
        json.insert("comparison".into(), Value::Object(c));
        for (side, r) in reps.iter().enumerate() {
            if let Some(r) = r {
                json.insert(format!("{} MEDIAN RUN RESULTS", names[side]), output::result_json(cfg, r));
            }
        }
        crate::write_json(p, &Value::Object(json))?;
    }
    if let Some(p) = &cfg.report {
        let items: Vec<(String, &RunResult)> =
            reps.iter().enumerate().filter_map(|(s, r)| r.as_ref().map(|r| (format!("{} {}", names[s], cfg.compare[s].describe()), r))).collect();
        report::write(p, cfg, "keel-bench comparison", &items, Some(&text))?;
    }
    let bad = results.iter().flatten().find_map(crate::invalid_reason);
    if let Some(why) = bad {
        eprintln!("error: comparison invalid: {why}");
        return Ok(1);
    }
    Ok(0)
}

use std::io::Write as _;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_odd_even() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(vec![]), 0.0);
    }
}
