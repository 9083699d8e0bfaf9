//! LATENCY: the latency monitor's events (LATEST, HISTORY, RESET, GRAPH,
//! DOCTOR; `crate::latency` keeps them) and the per-command latency
//! histograms of `latency-tracking` (HISTOGRAM), as Redis 7.0's
//! `latencyCommand`.

use super::server::{lookup_full_name, reply_help};
use super::{cmd, flags::*, table, CmdError, CmdResult, CommandSpec, Ctx, Keys};
use crate::latency::{self, DoctorContext};
use crate::server::{unix_ms, LatencyHistogram};

pub static COMMANDS: &[CommandSpec] = &[cmd("latency", -2, 0, Keys::None, "server", super::server::container)
    .doc("A container for latency diagnostics commands", "2.8.13")
    .subs(SUBCOMMANDS)];

/// The tips of the subcommands whose reply each node answers for itself.
const PER_NODE: &[&str] = &["nondeterministic_output", "request_policy:all_nodes", "response_policy:special"];

const SUBCOMMANDS: &[CommandSpec] = &[
    cmd("latency|doctor", 2, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, "server", doctor)
        .doc("Return a human readable latency analysis report.", "2.8.13")
        .tips(PER_NODE),
    cmd("latency|graph", 3, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, "server", graph)
        .doc("Return a latency graph for the event.", "2.8.13")
        .tips(PER_NODE),
    cmd("latency|help", 2, LOADING | STALE, Keys::None, "server", help)
        .doc("Show helpful text about the different subcommands.", "2.8.13"),
    cmd("latency|histogram", -2, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, "server", histogram)
        .doc("Return the cumulative distribution of latencies of a subset of commands or all.", "7.0.0")
        .tips(PER_NODE),
    cmd("latency|history", 3, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, "server", history)
        .doc("Return timestamp-latency samples for the event.", "2.8.13")
        .tips(PER_NODE),
    cmd("latency|latest", 2, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, "server", latest)
        .doc("Return the latest latency samples for all events.", "2.8.13")
        .tips(PER_NODE),
    cmd("latency|reset", -2, ADMIN | NOSCRIPT | LOADING | STALE, Keys::None, "server", reset)
        .doc("Reset latency data for one or more events.", "2.8.13")
        .tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
];

fn now_s() -> i64 {
    (unix_ms() / 1000) as i64
}

/// LATENCY LATEST: [event, time of its newest sample, that sample's ms,
/// its worst ms] for every event.
fn latest(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let events = ctx.server.latency_monitor.events();
    ctx.out.array(events.len());
    for (event, series) in events {
        let last = series.last();
        ctx.out.array(4);
        ctx.out.bulk(event.as_bytes());
        ctx.out.int(last.time_s);
        ctx.out.int(i64::from(last.ms));
        ctx.out.int(i64::from(series.max));
    }
    Ok(())
}

/// LATENCY HISTORY event: its [time, ms] samples, oldest first; none for
/// an event without samples.
fn history(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let samples: Vec<_> = ctx.server.latency_monitor.series(argv[2]).map(|s| s.samples().collect()).unwrap_or_default();
    ctx.out.array(samples.len());
    for sample in samples {
        ctx.out.array(2);
        ctx.out.int(sample.time_s);
        ctx.out.int(i64::from(sample.ms));
    }
    Ok(())
}

/// LATENCY RESET [event ...]: how many events it dropped.
fn reset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let monitor = &ctx.server.latency_monitor;
    let dropped = match &argv[2..] {
        [] => monitor.reset(None),
        events => events.iter().map(|e| monitor.reset(Some(e))).sum(),
    };
    ctx.out.int(dropped as i64);
    Ok(())
}

/// LATENCY GRAPH event: its samples drawn as Redis draws them.
fn graph(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let event = argv[2];
    let Some(series) = ctx.server.latency_monitor.series(event) else {
        return Err(CmdError::other(format!(
            "ERR No samples available for event '{}'",
            String::from_utf8_lossy(event)
        )));
    };
    let text = latency::graph(&String::from_utf8_lossy(event), &series, now_s());
    ctx.out.verbatim("txt", text.as_bytes());
    Ok(())
}

/// LATENCY DOCTOR: the report of the events recorded, with advice.
fn doctor(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> CmdResult {
    let context = {
        let config = ctx.server.config.read();
        DoctorContext {
            threshold_ms: config.latency_monitor_threshold,
            slowlog_log_slower_than: config.slowlog_log_slower_than,
            hz: config.hz,
            anon_huge_pages: latency::anon_huge_pages(),
            fsync_always: config.appendfsync == crate::config::AppendFsync::Always,
        }
    };
    let report = latency::doctor(&ctx.server.latency_monitor.events(), &context, now_s());
    ctx.out.verbatim("txt", report.as_bytes());
    Ok(())
}

/// LATENCY HISTOGRAM [command ...]: for each command called since the
/// last CONFIG RESETSTAT (all of them, or those named, a container's
/// subcommands with it; unknown names are skipped), its calls and the
/// cumulative distribution of its run times.
fn histogram(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let latencies = ctx.server.command_latencies();
    let all = &table().all;
    let stat_index = |spec: &CommandSpec| all.iter().position(|s| std::ptr::eq(*s, spec));
    let mut picked: Vec<(&'static CommandSpec, &LatencyHistogram)> = Vec::new();
    let mut pick = |spec: &'static CommandSpec| {
        if let Some(h) = stat_index(spec).and_then(|i| latencies[i].as_ref()) {
            picked.push((spec, h));
        }
    };
    if argv.len() == 2 {
        all.iter().for_each(|spec| pick(spec));
    } else {
        for name in &argv[2..] {
            let Some(spec) = lookup_full_name(name) else { continue };
            pick(spec);
            spec.subcommands.iter().for_each(&mut pick);
        }
    }
    ctx.out.map(picked.len());
    for (spec, h) in picked {
        ctx.out.bulk(spec.name.as_bytes());
        ctx.out.map(2);
        ctx.out.bulk(b"calls");
        ctx.out.int(h.len() as i64);
        ctx.out.bulk(b"histogram_usec");
        let buckets = cumulative_buckets(h);
        ctx.out.map(buckets.len());
        for (us, count) in buckets {
            ctx.out.int(us as i64);
            ctx.out.int(count as i64);
        }
    }
    Ok(())
}

/// Redis's `fillCommandCDF`: at each power of two from 1024 ns, the
/// calls that took up to the top of that value's bucket, keyed by that
/// top in microseconds; a step that adds no call is left out.
fn cumulative_buckets(h: &LatencyHistogram) -> Vec<(u64, u64)> {
    let mut buckets = Vec::new();
    let (total, mut previous, mut level) = (h.len(), 0, 1024u64);
    while previous < total && level <= h.high() {
        let top = h.highest_equivalent(level);
        let cumulative = h.count_between(0, top);
        if cumulative > previous {
            buckets.push((top / 1000, cumulative));
        }
        previous = cumulative;
        level *= 2;
    }
    if previous < total {
        buckets.push((h.highest_equivalent(h.max()) / 1000, total));
    }
    buckets
}

fn help(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_help(
        ctx,
        argv[0],
        &[
            "DOCTOR",
            "    Return a human readable latency analysis report.",
            "GRAPH <event>",
            "    Return an ASCII latency graph for the <event> class.",
            "HISTORY <event>",
            "    Return time-latency samples for the <event> class.",
            "LATEST",
            "    Return the latest latency samples for all events.",
            "RESET [<event> ...]",
            "    Reset latency data of one or more <event> classes.",
            "    (default: reset all data for all event classes)",
            "HISTOGRAM [COMMAND ...]",
            "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
            "    If no commands are specified then all histograms are replied.",
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_reports_cumulative_counts_at_powers_of_two() {
        let mut h = LatencyHistogram::new_with_bounds(1, 1_000_000_000, 2).expect("bounds");
        for ns in [500, 1500, 1600, 9000, 1_000_000_000] {
            h.record(ns).expect("in range");
        }
        let buckets = cumulative_buckets(&h);
        assert_eq!(&buckets[..3], &[(1, 1), (2, 3), (16, 4)]);
        assert_eq!(buckets.last().map(|b| b.1), Some(5));
        assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
    }
}
