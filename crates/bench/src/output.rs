//! Results as memtier_benchmark prints them, so that people and scripts
//! that read memtier's output read keel-bench's:
//!
//! * the text table (Type, Ops/sec, Hits/sec, Misses/sec, Avg. Latency,
//!   one column per percentile, KB/sec; rows Sets, Gets, Waits, Totals or
//!   one per command), with memtier's column widths and number formats;
//! * the "Request Latency Distribution" section;
//! * the JSON file: top-level "configuration", "run information" and one
//!   object per printed result ("ALL STATS", or "BEST RUN RESULTS",
//!   "WORST RUN RESULTS", "AGGREGATED AVERAGE RESULTS (N runs)"), each with
//!   "Runtime", per-type objects (Count, Ops/sec, ..., "Percentile
//!   Latencies", "Time-Serie") and the histogram arrays;
//! * HDR files (`--hdr-file-prefix`): interval logs (.txt) and percentile
//!   distributions (.hgrm).
//!
//! keel-bench's additions (error replies, uncorrected latency in open-loop
//! mode, CPU use) are extra keys and extra text after the table: nothing
//! memtier prints is renamed or moved.

use std::fmt::Write as _;

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::IntervalLogWriterBuilder;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer};
use hdrhistogram::Histogram;
use serde_json::{Map, Value};

use crate::config::{Config, Limit, SizeSpec};
use crate::stats::{CmdStats, RunResult};

/// Iteration granularity of the distribution section (memtier's 10 ticks
/// per half distance).
const HIST_TICKS: u32 = 10;

/// "Sets" from "SET", "Hgets" from "HGET": memtier's row names.
pub fn row_name(name: &str) -> String {
    let lower = name.to_lowercase();
    let mut c = lower.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str() + "s",
        None => "s".into(),
    }
}

/// memtier's percentile header: "p50", "p99.9", "p99.99".
pub fn pct_label(p: f64) -> String {
    let mut digits = 0;
    let mut frac = p.abs() - p.abs().trunc();
    while frac.abs() > 0.001 && digits < 3 {
        frac *= 10.0;
        digits += 1;
        frac -= frac.trunc();
    }
    format!("p{:.*} Latency", digits, p)
}

/// memtier's JSON percentile key: "p%.3f" cut to 6 characters ("p50.00", "p99.90").
pub fn pct_key(p: f64, decimals: usize) -> String {
    let s = format!("p{:.*}", decimals, p);
    s.chars().take(6).collect()
}

fn is_set_get(r: &RunResult) -> bool {
    r.names.len() == 3 && r.names[0] == "SET" && r.names[1] == "GET" && r.names[2] == "WAIT"
}

/// The results table, with `header` as memtier prints it (e.g. "ALL STATS").
pub fn table(cfg: &Config, r: &RunResult, header: &str) -> String {
    let secs = r.secs();
    let total = r.total();
    let per = |v: u64| v as f64 / secs;
    let setget = is_set_get(r);
    let rows: Vec<String> = r.names.iter().map(|n| row_name(n)).collect();
    let type_w = rows.iter().map(|s| s.len()).max().unwrap_or(0).max(6) + 1;

    // Columns: (header, width, cells for each row then Totals).
    let mut cols: Vec<(String, usize, Vec<String>)> = Vec::new();
    let mut type_cells: Vec<String> = rows.iter().map(|s| format!("{s:<type_w$} ")).collect();
    type_cells.push(format!("{:<type_w$} ", "Totals"));
    cols.push(("Type".into(), type_w, type_cells));

    let f12 = |v: f64| format!("{v:12.2} ");
    let dash12 = format!("{:>12} ", "---");
    let dash15 = format!("{:>15} ", "---");
    let mut ops: Vec<String> = r.cmds.iter().map(|c| f12(per(c.ops))).collect();
    ops.push(f12(per(total.ops)));
    cols.push(("Ops/sec".into(), 12, ops));
    if setget {
        let hits = f12(per(total.hits));
        let misses = f12(per(total.misses));
        cols.push(("Hits/sec".into(), 12, vec![dash12.clone(), hits.clone(), dash12.clone(), hits]));
        cols.push(("Misses/sec".into(), 12, vec![dash12.clone(), misses.clone(), dash12.clone(), misses]));
    }
    let lat = |c: &CmdStats, f: &dyn Fn(&Histogram<u64>) -> f64| -> String {
        if c.hist.is_empty() {
            dash15.clone()
        } else {
            format!("{:15.5} ", f(&c.hist))
        }
    };
    let mean = |h: &Histogram<u64>| h.mean() / 1000.0;
    let mut avg: Vec<String> = r.cmds.iter().map(|c| lat(c, &mean)).collect();
    avg.push(format!("{:15.5} ", if total.hist.is_empty() { 0.0 } else { total.hist.mean() / 1000.0 }));
    cols.push(("Avg. Latency".into(), 15, avg));
    for &p in &cfg.percentiles {
        let q = move |h: &Histogram<u64>| h.value_at_percentile(p) as f64 / 1000.0;
        let mut cells: Vec<String> = r.cmds.iter().map(|c| lat(c, &q)).collect();
        cells.push(format!("{:15.5} ", q(&total.hist)));
        cols.push((pct_label(p), 15, cells));
    }
    let mut kb: Vec<String> = r
        .cmds
        .iter()
        .enumerate()
        .map(|(i, c)| if setget && i == 2 { dash12.clone() } else { f12((c.bytes_rx + c.bytes_tx) as f64 / 1024.0 / secs) })
        .collect();
    kb.push(f12((total.bytes_rx + total.bytes_tx) as f64 / 1024.0 / secs));
    cols.push(("KB/sec".into(), 12, kb));

    let mut out = String::new();
    let _ = writeln!(out, "\n\n{header}");
    for (_, w, _) in &cols {
        out.push_str(&"=".repeat(w + 1));
    }
    out.push('\n');
    for (i, (h, w, _)) in cols.iter().enumerate() {
        if i == 0 {
            let _ = write!(out, "{h:<w$} ");
        } else {
            let _ = write!(out, "{h:>w$} ");
        }
    }
    out.push('\n');
    for (_, w, _) in &cols {
        out.push_str(&"-".repeat(w + 1));
    }
    out.push('\n');
    let nrows = cols[0].2.len();
    for row in 0..nrows {
        for (_, _, cells) in &cols {
            out.push_str(&cells[row]);
        }
        out.push('\n');
    }
    out
}

/// The open-loop addendum: uncorrected latency, in the table's shape.
pub fn uncorrected_table(cfg: &Config, r: &RunResult) -> String {
    let mut out = String::new();
    let Some(rate) = r.target_rate else { return out };
    let total = r.total();
    let _ = writeln!(
        out,
        "\nOpen loop: target {rate:.2} ops/sec, achieved {:.2} ops/sec. Latencies above are from each request's intended start \
         (coordinated omission corrected); below, from when it was actually sent (uncorrected).",
        r.ops_sec()
    );
    let type_w = r.names.iter().map(|n| row_name(n).len()).max().unwrap_or(0).max(6) + 1;
    let _ = write!(out, "{:<type_w$} {:>15} ", "Type", "Avg. Latency");
    for &p in &cfg.percentiles {
        let _ = write!(out, "{:>15} ", pct_label(p));
    }
    out.push('\n');
    let mut line = |name: String, c: &CmdStats| {
        let Some(u) = &c.uncorrected else { return };
        if u.is_empty() {
            return;
        }
        let _ = write!(out, "{name:<type_w$} {:15.5} ", u.mean() / 1000.0);
        for &p in &cfg.percentiles {
            let _ = write!(out, "{:15.5} ", u.value_at_percentile(p) as f64 / 1000.0);
        }
        out.push('\n');
    };
    for (n, c) in r.names.iter().zip(&r.cmds) {
        line(row_name(n), c);
    }
    line("Totals".into(), &total);
    if r.ops_sec() < rate * 0.95 {
        let _ = writeln!(
            out,
            "warning: achieved {:.0} ops/sec, below the target {rate:.0}: the server (or keel-bench) could not keep up; \
             corrected latencies include the backlog",
            r.ops_sec()
        );
    }
    out
}

/// Errors, CPU use and the load-generator-bottleneck warning.
pub fn footer(r: &RunResult) -> String {
    let mut out = String::new();
    let errs = r.error_replies();
    if errs > 0 || r.connection_errors > 0 {
        let _ = writeln!(out, "\nErrors: {errs} error replies, {} connection errors", r.connection_errors);
        for m in &r.error_messages {
            let _ = writeln!(out, "  {m}");
        }
    }
    let _ = writeln!(
        out,
        "\nkeel-bench CPU: {:.2} s user + {:.2} s system = {:.3} CPU-s per million ops; busiest thread {:.0}% of a core",
        r.cpu.user_s,
        r.cpu.sys_s,
        r.cpu_s_per_mop(),
        r.busiest_thread_cpu * 100.0
    );
    if r.busiest_thread_cpu > 0.90 {
        let _ = writeln!(
            out,
            "warning: a keel-bench thread used {:.0}% of a core: the load generator may be the bottleneck; add threads (-t) or cores",
            r.busiest_thread_cpu * 100.0
        );
    }
    out
}

/// The "Request Latency Distribution" section.
pub fn distribution(r: &RunResult) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "\n\nRequest Latency Distribution\n{:<6} {:>12} {:>12}\n{}\n",
        "Type",
        "<= msec   ",
        "Percent",
        "-".repeat(72)
    );
    let n = r.names.len();
    for (i, (name, c)) in r.names.iter().zip(&r.cmds).enumerate() {
        for (v, p) in hist_points(&c.hist) {
            let _ = writeln!(out, "{name:<6} {v:8.3} {p:12.3}");
        }
        if !(is_set_get(r) && i == n - 1) {
            out.push_str("---\n");
        }
    }
    out
}

/// (msec, percent) points of a histogram, as memtier iterates them.
pub fn hist_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    if h.is_empty() {
        return Vec::new();
    }
    h.iter_quantiles(HIST_TICKS)
        .map(|v| (h.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0, v.quantile_iterated_to() * 100.0))
        .collect()
}

fn r2(v: f64) -> Value {
    num((v * 100.0).round() / 100.0)
}

fn r3(v: f64) -> Value {
    num((v * 1000.0).round() / 1000.0)
}

fn num(v: f64) -> Value {
    serde_json::Number::from_f64(v).map(Value::Number).unwrap_or(Value::Null)
}

/// memtier's "Compressed Histogram": base64 of the V2 deflate encoding.
pub fn compressed(h: &Histogram<u64>) -> String {
    let mut buf = Vec::new();
    match V2DeflateSerializer::new().serialize(h, &mut buf) {
        Ok(_) => base64::engine::general_purpose::STANDARD.encode(buf),
        Err(_) => String::new(),
    }
}

/// One per-type object of the JSON file.
fn type_json(cfg: &Config, r: &RunResult, c: &CmdStats, with_hits: bool, slot: Option<usize>) -> Value {
    let secs = r.secs();
    let per = |v: u64| v as f64 / secs;
    let mut m = Map::new();
    let has = !c.hist.is_empty();
    m.insert("Count".into(), Value::from(c.ops));
    m.insert("Ops/sec".into(), r2(per(c.ops)));
    m.insert("Hits/sec".into(), r2(if with_hits { per(c.hits) } else { 0.0 }));
    m.insert("Misses/sec".into(), r2(if with_hits { per(c.misses) } else { 0.0 }));
    let (ce, ces) = if slot.is_none() { (r.connection_errors, per(r.connection_errors)) } else { (0, 0.0) };
    m.insert("Connection Errors/sec".into(), r2(ces));
    m.insert("Connection Errors".into(), Value::from(ce));
    m.insert("Error Replies".into(), Value::from(c.errors));
    let avg = if has { c.hist.mean() / 1000.0 } else { 0.0 };
    m.insert("Latency".into(), r3(avg));
    m.insert("Average Latency".into(), r3(avg));
    m.insert("Accumulated Latency".into(), Value::from(c.latency_us_sum / 1000));
    m.insert("Min Latency".into(), r3(if has { c.hist.min() as f64 / 1000.0 } else { 0.0 }));
    m.insert("Max Latency".into(), r3(if has { c.hist.max() as f64 / 1000.0 } else { 0.0 }));
    let kb = (c.bytes_rx + c.bytes_tx) as f64 / 1024.0 / secs;
    m.insert("KB/sec".into(), r2(kb));
    m.insert("KB/sec RX/TX".into(), r2(kb));
    m.insert("KB/sec RX".into(), r2(c.bytes_rx as f64 / 1024.0 / secs));
    m.insert("KB/sec TX".into(), r2(c.bytes_tx as f64 / 1024.0 / secs));
    let mut ts = Map::new();
    for s in &r.series {
        let sc = match slot {
            Some(i) => s.cmds.get(i).cloned().unwrap_or_default(),
            None => s.total.clone(),
        };
        let mut e = Map::new();
        e.insert("Bytes RX".into(), Value::from(sc.bytes_rx));
        e.insert("Bytes TX".into(), Value::from(sc.bytes_tx));
        e.insert("Count".into(), Value::from(sc.ops));
        if sc.ops > 0 {
            e.insert("Average Latency".into(), r3(sc.avg_ms));
            e.insert("Accumulated Latency".into(), Value::from(sc.latency_us_sum / 1000));
            e.insert("Min Latency".into(), r3(sc.min_ms));
            e.insert("Max Latency".into(), r3(sc.max_ms));
            for &p in &cfg.percentiles {
                e.insert(pct_key(p, 2), r3(sc.q(p)));
            }
        }
        ts.insert(s.second.to_string(), Value::Object(e));
    }
    m.insert("Time-Serie".into(), Value::Object(ts));
    let mut pl = Map::new();
    for &p in &cfg.percentiles {
        pl.insert(pct_key(p, 3), r3(if has { c.hist.value_at_percentile(p) as f64 / 1000.0 } else { 0.0 }));
    }
    let mut hl = Map::new();
    hl.insert("Compressed Histogram".into(), Value::from(compressed(&c.hist)));
    pl.insert("Histogram log format".into(), Value::Object(hl));
    m.insert("Percentile Latencies".into(), Value::Object(pl));
    if let Some(u) = &c.uncorrected {
        let mut ul = Map::new();
        let has = !u.is_empty();
        ul.insert("Average Latency".into(), r3(if has { u.mean() / 1000.0 } else { 0.0 }));
        ul.insert("Max Latency".into(), r3(if has { u.max() as f64 / 1000.0 } else { 0.0 }));
        for &p in &cfg.percentiles {
            ul.insert(pct_key(p, 3), r3(if has { u.value_at_percentile(p) as f64 / 1000.0 } else { 0.0 }));
        }
        m.insert("Uncorrected Latency".into(), Value::Object(ul));
    }
    Value::Object(m)
}

/// One result object ("ALL STATS", "BEST RUN RESULTS", ...).
pub fn result_json(cfg: &Config, r: &RunResult) -> Value {
    let mut m = Map::new();
    let mut rt = Map::new();
    rt.insert("Start time".into(), Value::from(r.start_unix_ms));
    rt.insert("Finish time".into(), Value::from(r.end_unix_ms));
    rt.insert("Total duration".into(), Value::from(r.end_unix_ms.saturating_sub(r.start_unix_ms)));
    rt.insert("Time unit".into(), Value::from("MILLISECONDS"));
    rt.insert("Interrupted".into(), Value::from(if r.interrupted { "true" } else { "false" }));
    m.insert("Runtime".into(), Value::Object(rt));
    let setget = is_set_get(r);
    for (i, (n, c)) in r.names.iter().zip(&r.cmds).enumerate() {
        m.insert(row_name(n), type_json(cfg, r, c, setget && i == 1, Some(i)));
    }
    let total = r.total();
    m.insert("Totals".into(), type_json(cfg, r, &total, setget, None));
    if !cfg.hide_histogram {
        for (n, c) in r.names.iter().zip(&r.cmds) {
            let arr: Vec<Value> = hist_points(&c.hist)
                .into_iter()
                .map(|(v, p)| {
                    let mut e = Map::new();
                    e.insert("<=msec".into(), r3(v));
                    e.insert("percent".into(), r3(p));
                    Value::Object(e)
                })
                .collect();
            m.insert(n.clone(), Value::Array(arr));
        }
    }
    let mut kb = Map::new();
    kb.insert("Target".into(), Value::from(r.target.clone()));
    kb.insert("CPU user seconds".into(), r3(r.cpu.user_s));
    kb.insert("CPU system seconds".into(), r3(r.cpu.sys_s));
    kb.insert("CPU seconds per million ops".into(), r3(r.cpu_s_per_mop()));
    kb.insert("Busiest thread CPU share".into(), r3(r.busiest_thread_cpu));
    kb.insert("Open loop".into(), Value::from(r.target_rate.is_some()));
    if let Some(rate) = r.target_rate {
        kb.insert("Target rate".into(), r2(rate));
        kb.insert("Latency measured from".into(), Value::from("intended start (coordinated omission corrected)"));
    }
    kb.insert("Error messages".into(), Value::from(r.error_messages.clone()));
    m.insert("keel-bench".into(), Value::Object(kb));
    Value::Object(m)
}

/// The "configuration" object, with memtier's keys.
pub fn config_json(cfg: &Config) -> Value {
    let mut m = Map::new();
    let (server, port, unix) = match &cfg.target {
        crate::config::Target::Tcp { host, port } => (host.clone(), *port, String::new()),
        crate::config::Target::Unix(p) => (String::new(), 0, p.clone()),
    };
    let (requests, test_time) = match cfg.limit {
        Limit::Requests(n) => (n, 0),
        Limit::Time(t) => (0, t),
    };
    let (dsize, drange, dlist) = match &cfg.data.sizes {
        SizeSpec::Fixed(n) => (*n, (0, 0), String::new()),
        SizeSpec::Range { min, max } => (0, (*min, *max), String::new()),
        SizeSpec::List(l) => (0, (0, 0), l.iter().map(|(s, w)| format!("{s}:{w}")).collect::<Vec<_>>().join(",")),
    };
    let b = |v: bool| Value::from(if v { "true" } else { "false" });
    m.insert("server".into(), Value::from(server));
    m.insert("port".into(), Value::from(port));
    m.insert("uri".into(), Value::from(cfg.uri.clone()));
    m.insert("unix socket".into(), Value::from(unix));
    m.insert("protocol".into(), Value::from(cfg.protocol.name()));
    m.insert("out_file".into(), Value::from(cfg.out_file.clone().unwrap_or_default()));
    m.insert("client_stats".into(), Value::from(cfg.client_stats.clone().unwrap_or_default()));
    m.insert("run_count".into(), Value::from(cfg.run_count));
    m.insert("debug".into(), Value::from(u32::from(cfg.debug)));
    m.insert("requests".into(), Value::from(requests));
    m.insert("rate_limit".into(), Value::from(0));
    m.insert("clients".into(), Value::from(cfg.clients));
    m.insert("threads".into(), Value::from(cfg.threads));
    m.insert("test_time".into(), Value::from(test_time));
    m.insert("ratio".into(), Value::from(format!("{}:{}", cfg.ratio.0, cfg.ratio.1)));
    m.insert("pipeline".into(), Value::from(cfg.pipeline));
    m.insert("data_size".into(), Value::from(dsize));
    m.insert("data_offset".into(), Value::from(0));
    m.insert("random_data".into(), b(cfg.data.random));
    m.insert("data_size_range".into(), Value::from(format!("{}:{}", drange.0, drange.1)));
    m.insert("data_size_list".into(), Value::from(dlist));
    m.insert("data_size_pattern".into(), Value::from(if cfg.data.size_by_key { "S" } else { "R" }));
    m.insert("expiry_range".into(), Value::from(format!("{}:{}", cfg.data.expiry.0, cfg.data.expiry.1)));
    m.insert("key_prefix".into(), Value::from(cfg.keys.prefix.clone()));
    m.insert("key_minimum".into(), Value::from(cfg.keys.min));
    m.insert("key_maximum".into(), Value::from(cfg.keys.max));
    m.insert("key_pattern".into(), Value::from(format!("{}:{}", cfg.keys.set_pattern.letter(), cfg.keys.get_pattern.letter())));
    m.insert("key_stddev".into(), num(cfg.keys.stddev));
    m.insert("key_median".into(), num(cfg.keys.median));
    m.insert("key_zipf_exp".into(), num(cfg.keys.zipf_exp));
    m.insert("reconnect_interval".into(), Value::from(cfg.reconnect_interval));
    m.insert("connection_timeout".into(), Value::from(cfg.connect_timeout.as_secs()));
    m.insert("multi_key_get".into(), Value::from(cfg.multi_key_get));
    m.insert("authenticate".into(), Value::from(if cfg.auth.is_some() { "(set)" } else { "" }));
    m.insert("select-db".into(), Value::from(cfg.select_db.unwrap_or(0)));
    m.insert("print-all-runs".into(), b(cfg.print_all_runs));
    m.insert("rate".into(), cfg.rate.map(num).unwrap_or(Value::Null));
    m.insert("scenario".into(), Value::from(cfg.scenario.clone().unwrap_or_default()));
    m.insert(
        "commands".into(),
        Value::from(cfg.commands.iter().map(|c| format!("{} (ratio {}, key pattern {})", c.text, c.ratio, c.key_pattern.letter())).collect::<Vec<_>>()),
    );
    Value::Object(m)
}

/// The "run information" object.
pub fn run_info_json(cfg: &Config) -> Value {
    let mut m = Map::new();
    m.insert("Threads".into(), Value::from(cfg.threads));
    m.insert("Connections per thread".into(), Value::from(cfg.clients));
    match cfg.limit {
        Limit::Requests(n) => m.insert("Requests per client".into(), Value::from(n)),
        Limit::Time(t) => m.insert("Seconds".into(), Value::from(t)),
    };
    m.insert("Format version".into(), Value::from(2));
    Value::Object(m)
}

/// The lines memtier prints before the tables.
pub fn run_info_text(cfg: &Config) -> String {
    let (n, what) = match cfg.limit {
        Limit::Requests(n) => (n, "Requests per client"),
        Limit::Time(t) => (t, "Seconds"),
    };
    format!("{:<9} Threads\n{:<9} Connections per thread\n{:<9} {what}\n", cfg.threads, cfg.clients, n)
}

/// Writes --hdr-file-prefix files for one run.
pub fn write_hdr_files(prefix: &str, run: u32, r: &RunResult) -> std::io::Result<()> {
    let start = std::time::UNIX_EPOCH + std::time::Duration::from_millis(r.start_unix_ms);
    let duration = std::time::Duration::from_micros(r.duration_us);
    let mut files: Vec<(String, Histogram<u64>)> = vec![(format!("{prefix}_FULL_RUN_{run}"), r.total().hist)];
    for (n, c) in r.names.iter().zip(&r.cmds) {
        if n == "WAIT" {
            continue;
        }
        files.push((format!("{prefix}_{n}_command_run_{run}"), c.hist.clone()));
    }
    for (base, h) in files {
        let mut log = Vec::new();
        {
            let mut ser = V2DeflateSerializer::new();
            let mut w = IntervalLogWriterBuilder::new()
                .add_comment("keel-bench latency log, values in microseconds")
                .with_start_time(start)
                .with_base_time(start)
                .with_max_value_divisor(1000.0)
                .begin_log_with(&mut log, &mut ser)?;
            w.write_histogram(&h, std::time::Duration::ZERO, duration, None)
                .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
        }
        std::fs::write(format!("{base}.txt"), log)?;
        std::fs::write(format!("{base}.hgrm"), hgrm(&h))?;
    }
    Ok(())
}

/// HdrHistogram's classic percentile distribution text, values in msec.
pub fn hgrm(h: &Histogram<u64>) -> String {
    let mut s = format!("{:>12} {:>14} {:>10} {:>14}\n\n", "Value", "Percentile", "TotalCount", "1/(1-Percentile)");
    if h.is_empty() {
        return s;
    }
    for v in h.iter_quantiles(5) {
        let q = v.quantile_iterated_to();
        let inv = if q < 1.0 { format!("{:14.2}", 1.0 / (1.0 - q)) } else { format!("{:>14}", "") };
        let _ = writeln!(
            s,
            "{:12.3} {:14.12} {:10} {inv}",
            h.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0,
            q,
            h.count_between(0, v.value_iterated_to())
        );
    }
    let _ = writeln!(s, "#[Mean    = {:12.3}, StdDeviation   = {:12.3}]", h.mean() / 1000.0, h.stdev() / 1000.0);
    let _ = writeln!(s, "#[Max     = {:12.3}, Total count    = {:12}]", h.max() as f64 / 1000.0, h.len());
    let _ = writeln!(s, "#[Buckets = {:12}, SubBuckets     = {:12}]", h.buckets(), h.distinct_values());
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_match_memtier() {
        assert_eq!(row_name("SET"), "Sets");
        assert_eq!(row_name("hget"), "Hgets");
        assert_eq!(pct_label(50.0), "p50 Latency");
        assert_eq!(pct_label(99.9), "p99.9 Latency");
        // memtier prints three decimals once a percentile needs any beyond one.
        assert_eq!(pct_label(99.99), "p99.990 Latency");
        assert_eq!(pct_key(50.0, 3), "p50.00");
        assert_eq!(pct_key(99.9, 3), "p99.90");
        assert_eq!(pct_key(99.9, 2), "p99.90");
        assert_eq!(pct_key(100.0, 3), "p100.0");
    }
}
