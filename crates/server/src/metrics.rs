//! Prometheus metrics on `metrics-port` (off by default): `GET /metrics`
//! answers INFO's figures in Prometheus's text format, so a scraper needs
//! no exporter beside Keel.
//!
//! The figures are INFO's own: a scrape runs `INFO everything` as a client
//! of its own (it shows in INFO commandstats as such, as an exporter's
//! INFO would) and turns each numeric field into a gauge `keel_<field>`,
//! and the per-command lines into labelled series: calls, time, failures
//! (commandstats), latency percentiles (latencystats), errors by prefix
//! (errorstats) and keys per database (keyspace). One thread serves
//! scrapes one at a time, off the workers' path, on listeners that CONFIG
//! SET moves as it moves `port`'s ([`crate::listen::PortListeners`]).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::sync::Arc;
use std::time::Duration;

use crate::client::{Client, ClientInfo};
use crate::server::{unix_ms, Server};

/// A request that has not arrived whole after this long is dropped.
const READ_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest request head read.
const REQUEST_MAX: usize = 8 * 1024;

/// Serves scrapes on `bound` (one listener per `bind` address of
/// `metrics-port`, none while it is 0), and on whatever CONFIG SET puts in
/// their place, until the process ends.
pub fn spawn(server: Arc<Server>, bound: Vec<mio::net::TcpListener>) -> std::io::Result<()> {
    let mut poll = mio::Poll::new()?;
    let listeners = server.metrics_listeners.attach(poll.registry().try_clone()?, bound)?;
    std::thread::Builder::new().name("keel-metrics".into()).spawn(move || {
        let mut events = mio::Events::with_capacity(8);
        loop {
            if let Err(e) = poll.poll(&mut events, None) {
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                tracing::error!("metrics: poll failed: {e}");
                return;
            }
            for event in events.iter() {
                loop {
                    // Not locked while a scrape is served: CONFIG SET
                    // takes the lock to move the listeners. None: one it
                    // has just closed.
                    let accepted = listeners.lock().get(event.token().0).map(|l| l.accept());
                    let Some(Ok((stream, _))) = accepted else { break };
                    // SAFETY: the descriptor comes from `into_raw_fd`, owned by nothing else.
                    let stream = unsafe { TcpStream::from_raw_fd(stream.into_raw_fd()) };
                    if let Err(e) = stream.set_nonblocking(false).and_then(|()| serve(&server, stream)) {
                        tracing::debug!("metrics request failed: {e}");
                    }
                }
            }
        }
    })?;
    Ok(())
}

fn serve(server: &Server, mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < REQUEST_MAX {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut words = line.split(|&b| b == b' ');
    let (method, path) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
    let (status, body) = match (method, path) {
        (b"GET", b"/metrics") => ("200 OK", render(server)),
        (b"GET", _) => ("404 Not Found", "Keel serves /metrics only\n".to_string()),
        _ => ("405 Method Not Allowed", "Keel answers GET only\n".to_string()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes())
}

/// `INFO everything`, as Prometheus's text exposition format.
pub fn render(server: &Server) -> String {
    let mut client = Client::new(Arc::new(ClientInfo::detached(0)), true);
    let mut reply = Vec::new();
    crate::command::execute(server, &server.workers[0], &mut client, &mut reply, &[b"INFO", b"everything"], unix_ms());
    let info = match keel_protocol::parse_frame(&reply) {
        Ok(Some((keel_protocol::Frame::Bulk(text), _))) => String::from_utf8_lossy(&text).into_owned(),
        _ => String::new(),
    };
    from_info(&info)
}

/// The metrics of an INFO reply's lines.
fn from_info(info: &str) -> String {
    let mut out = String::new();
    for line in info.lines() {
        let Some((field, value)) = line.split_once(':') else { continue };
        if let Some(cmd) = field.strip_prefix("cmdstat_") {
            let pairs = pairs(value);
            let get = |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| *v);
            let label = format!("cmd=\"{}\"", escape(cmd));
            if let Some(calls) = get("calls") {
                let _ = writeln!(out, "keel_commands_total{{{label}}} {calls}");
            }
            // Microseconds as INFO wrote them, scaled by the exponent: no rounding.
            if let Some(usec) = get("usec") {
                let _ = writeln!(out, "keel_commands_duration_seconds_total{{{label}}} {usec}e-6");
            }
            for (name, metric) in [("rejected_calls", "rejected"), ("failed_calls", "failed")] {
                if let Some(n) = get(name) {
                    let _ = writeln!(out, "keel_commands_{metric}_calls_total{{{label}}} {n}");
                }
            }
        } else if let Some(cmd) = field.strip_prefix("latency_percentiles_usec_") {
            for (p, us) in pairs(value) {
                let Some(p) = p.strip_prefix('p').and_then(|p| p.parse::<f64>().ok()) else { continue };
                let quantile = crate::config::format_percentile(p / 100.0);
                let _ = writeln!(out, "keel_command_latency_seconds{{cmd=\"{}\",quantile=\"{quantile}\"}} {us}e-6", escape(cmd));
            }
        } else if let Some(prefix) = field.strip_prefix("errorstat_") {
            if let Some((_, count)) = pairs(value).into_iter().find(|(k, _)| *k == "count") {
                let _ = writeln!(out, "keel_errors_total{{error=\"{}\"}} {count}", escape(prefix));
            }
        } else if field.starts_with("db") && field[2..].parse::<u32>().is_ok() {
            for (name, n) in pairs(value) {
                let metric = match name {
                    "keys" => "keel_db_keys",
                    "expires" => "keel_db_keys_expiring",
                    "avg_ttl" => "keel_db_avg_ttl_milliseconds",
                    _ => continue,
                };
                let _ = writeln!(out, "{metric}{{db=\"{field}\"}} {n}");
            }
        } else if value.parse::<f64>().is_ok() && is_metric_name(field) {
            // Keel's own fields already carry the prefix.
            let name = field.strip_prefix("keel_").unwrap_or(field);
            let _ = writeln!(out, "keel_{name} {value}");
        }
    }
    out
}

/// The `name=value` pairs of an INFO value (`calls=3,usec=10,...`).
fn pairs(value: &str) -> Vec<(&str, &str)> {
    value.split(',').filter_map(|pair| pair.split_once('=')).collect()
}

/// Prometheus's metric names: letters, digits and `_`, not starting with a digit.
fn is_metric_name(field: &str) -> bool {
    !field.is_empty()
        && !field.starts_with(|c: char| c.is_ascii_digit())
        && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A label value with `\` and `"` escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_lines_become_metrics() {
        let info = "# Server\r\nredis_version:7.0.15\r\nuptime_in_seconds:12\r\n# Clients\r\nconnected_clients:3\r\n\
            # Commandstats\r\ncmdstat_config|get:calls=2,usec=30,usec_per_call=15.00,rejected_calls=0,failed_calls=1\r\n\
            # Errorstats\r\nerrorstat_ERR:count=4\r\n\
            # Latencystats\r\nlatency_percentiles_usec_set:p50=1.003,p99.9=20.479\r\n\
            # Keyspace\r\ndb0:keys=5,expires=1,avg_ttl=100\r\n";
        let metrics = from_info(info);
        let lines: Vec<&str> = metrics.lines().collect();
        assert_eq!(
            lines,
            [
                "keel_uptime_in_seconds 12",
                "keel_connected_clients 3",
                "keel_commands_total{cmd=\"config|get\"} 2",
                "keel_commands_duration_seconds_total{cmd=\"config|get\"} 30e-6",
                "keel_commands_rejected_calls_total{cmd=\"config|get\"} 0",
                "keel_commands_failed_calls_total{cmd=\"config|get\"} 1",
                "keel_errors_total{error=\"ERR\"} 4",
                "keel_command_latency_seconds{cmd=\"set\",quantile=\"0.5\"} 1.003e-6",
                "keel_command_latency_seconds{cmd=\"set\",quantile=\"0.999\"} 20.479e-6",
                "keel_db_keys{db=\"db0\"} 5",
                "keel_db_keys_expiring{db=\"db0\"} 1",
                "keel_db_avg_ttl_milliseconds{db=\"db0\"} 100",
            ]
        );
    }
}
