//! `--report FILE.html` opened in headless Chromium: the page's script runs
//! to the end without an error, needs no network, and every chart draws
//! exactly the data embedded in the page (one line point per second or
//! percentile, one bar per non-empty histogram bucket, per command), inside
//! the plot area.
//!
//! Chromium missing is a failure, not a skip: `scripts/test.sh` installs
//! Debian's `chromium`.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{bench_ok, require, start_redis, unique, TempPath};
use serde_json::Value;

/// How long Chromium may take to load and dump one page on a busy machine.
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

/// The page's DOM after its scripts ran, as headless Chromium serialises it.
fn render(html: &Path) -> String {
    let chromium = require("chromium", "chromium");
    let profile = TempPath::new(&format!("chromium-profile-{}", unique()));
    let child = Command::new(chromium)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            &format!("--user-data-dir={}", profile.as_str()),
            "--dump-dom",
            &format!("file://{}", html.display()),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(CHROMIUM_TIMEOUT) {
        Ok(out) => out.expect("chromium's output"),
        Err(_) => {
            // SAFETY: kill has no memory-safety preconditions; pid is our child, not yet reaped.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            panic!("chromium did not finish within {CHROMIUM_TIMEOUT:?}");
        }
    };
    let dom = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && dom.contains("</html>"),
        "chromium failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    dom
}

/// The value of attribute `name` in the start tag `tag` (`<x a="v" ...>`).
fn attr<'a>(tag: &'a str, name: &str) -> Option<&'a str> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    let len = tag[at..].find('"')?;
    Some(&tag[at..at + len])
}

/// Start tags `<tag ...>` in `html`, in document order.
fn start_tags<'a>(html: &'a str, tag: &str) -> Vec<&'a str> {
    let open = format!("<{tag} ");
    let mut tags = Vec::new();
    let mut rest = html;
    while let Some(at) = rest.find(&open) {
        let len = rest[at..].find('>').expect("a closed start tag");
        tags.push(&rest[at..at + len + 1]);
        rest = &rest[at + len..];
    }
    tags
}

/// One chart: what the page drew, or what it must draw given its data.
#[derive(Debug, PartialEq)]
struct Chart {
    /// The svg's data-chart.
    name: String,
    /// (series name, points) of each line.
    lines: Vec<(String, usize)>,
    bars: usize,
}

/// Checks that `(x, y)` lies inside the axes of the 1000x320 chart (70 to
/// 980 across, 20 to 270 down; 0.01 for rounding).
fn check_point(chart: &str, x: f64, y: f64) -> Result<(), String> {
    if (69.99..=980.01).contains(&x) && (19.99..=270.01).contains(&y) {
        Ok(())
    } else {
        Err(format!("chart {chart}: point ({x}, {y}) outside the plot"))
    }
}

/// Every chart the page drew, with its lines' points and its bars checked
/// to be numbers inside the plot.
fn drawn_charts(dom: &str) -> Result<Vec<Chart>, String> {
    let mut charts = Vec::new();
    for (i, part) in dom.split("<svg ").enumerate().skip(1) {
        let svg = &part[..part.find("</svg>").ok_or("an unclosed svg")?];
        let head = &svg[..svg.find('>').ok_or("an svg start tag")?];
        let name = attr(&format!(" {head}"), "data-chart").ok_or(format!("svg #{i} without data-chart"))?.to_string();
        if svg.contains("NaN") || svg.contains("Infinity") {
            return Err(format!("chart {name}: a coordinate is not a number"));
        }
        let mut lines = Vec::new();
        for path in start_tags(svg, "path") {
            let d = attr(path, "d").ok_or(format!("chart {name}: a path without d"))?;
            let series = attr(path, "data-series").ok_or(format!("chart {name}: a path without data-series"))?;
            let mut points = 0;
            for point in d.split(['M', 'L']).filter(|p| !p.is_empty()) {
                let (x, y) = point.split_once(',').ok_or(format!("chart {name}: bad path point {point:?}"))?;
                let num = |v: &str| v.parse::<f64>().map_err(|_| format!("chart {name}: bad coordinate {v:?}"));
                check_point(&name, num(x)?, num(y)?)?;
                points += 1;
            }
            lines.push((series.to_string(), points));
        }
        let mut bars = 0;
        for rect in start_tags(svg, "rect").into_iter().filter(|r| attr(r, "class") == Some("kb-bar")) {
            let num = |a: &str| -> Result<f64, String> {
                attr(rect, a).and_then(|v| v.parse().ok()).ok_or(format!("chart {name}: bar without a numeric {a}"))
            };
            let (x, y, w, h) = (num("x")?, num("y")?, num("width")?, num("height")?);
            check_point(&name, x, y)?;
            check_point(&name, x + w, y + h)?;
            if h <= 0.0 {
                return Err(format!("chart {name}: a bar of height {h} for a non-empty bucket"));
            }
            bars += 1;
        }
        charts.push(Chart { name, lines, bars });
    }
    Ok(charts)
}

/// The charts the page must draw from its embedded `data`, in its order.
fn expected_charts(data: &Value) -> Vec<Chart> {
    let runs = data["runs"].as_array().expect("runs");
    let label = |r: &Value| r["label"].as_str().expect("label").to_string();
    let seconds = |r: &Value| r["series"].as_array().expect("series").len();
    let prefix = |r: &Value| if runs.len() > 1 { format!("{} ", label(r)) } else { String::new() };
    let mut charts = vec![Chart { name: "throughput".into(), lines: runs.iter().map(|r| (label(r), seconds(r))).collect(), bars: 0 }];
    let latency = runs.iter().flat_map(|r| [(format!("{} p50", label(r)), seconds(r)), (format!("{} p99", label(r)), seconds(r))]);
    charts.push(Chart { name: "latency".into(), lines: latency.collect(), bars: 0 });
    let mut spectrum = Vec::new();
    for r in runs {
        for (name, points) in r["spectrum"].as_object().expect("spectrum") {
            // The spectrum's x axis is 1/(1-q): q = 1 has no place on it.
            let shown = points.as_array().expect("points").iter().filter(|p| p[0].as_f64().expect("q") < 1.0).count();
            spectrum.push((format!("{}{name}", prefix(r)), shown));
        }
    }
    charts.push(Chart { name: "spectrum".into(), lines: spectrum, bars: 0 });
    for r in runs {
        for (name, buckets) in r["histograms"].as_object().expect("histograms") {
            let bars = buckets.as_array().expect("buckets").iter().filter(|b| b[1].as_u64().expect("count") > 0).count();
            charts.push(Chart { name: format!("histogram-{name}"), lines: Vec::new(), bars });
        }
    }
    charts
}

/// The JSON the page embeds for its script.
fn embedded_data(html: &str) -> Value {
    let open = "<script id=\"kb-data\" type=\"application/json\">";
    let start = html.find(open).expect("the embedded data") + open.len();
    let len = html[start..].find("</script>").expect("the end of the embedded data");
    serde_json::from_str(&html[start..start + len]).expect("the embedded data is JSON")
}

/// Everything the test requires of a rendered report page.
fn check_rendered(dom: &str, data: &Value) -> Result<(), String> {
    let root = start_tags(dom, "html").first().map(|t| t.to_string()).unwrap_or_default();
    if let Some(e) = attr(&root, "data-report-error") {
        return Err(format!("script error: data-report-error={e:?}"));
    }
    if let Some(b) = attr(&root, "data-report-blocked") {
        return Err(format!("the page tried the network: data-report-blocked={b:?}"));
    }
    let body = start_tags(dom, "body").first().map(|t| t.to_string()).unwrap_or_default();
    if attr(&body, "data-report-rendered") != Some("true") {
        return Err("the script did not run to the end (no data-report-rendered)".into());
    }
    let drawn = drawn_charts(dom)?;
    let expected = expected_charts(data);
    if drawn.len() != expected.len() {
        let names: Vec<&str> = drawn.iter().map(|d| d.name.as_str()).collect();
        return Err(format!("{} charts drawn ({names:?}), {} expected", drawn.len(), expected.len()));
    }
    for (d, e) in drawn.iter().zip(&expected) {
        if d != e {
            return Err(format!("chart drawn {d:?}, expected {e:?}"));
        }
    }
    let runs = data["runs"].as_array().map_or(0, Vec::len);
    let summary_rows = dom.split("<div id=\"summary\">").nth(1).map_or(0, |s| s[..s.find("</div>").unwrap_or(0)].matches("<tr").count());
    if summary_rows != runs + 1 {
        return Err(format!("summary table has {summary_rows} rows for {runs} runs"));
    }
    Ok(())
}

/// A report of two runs of SETs and GETs against a redis-server.
fn make_report(file: &TempPath) -> String {
    let redis = start_redis();
    let port = redis.port.to_string();
    bench_ok(&[
        "-p", &port, "-t", "1", "-c", "4", "-x", "2", "--test-time", "1", "--ratio", "1:1", "--key-maximum", "1000",
        "--hide-histogram", "--report", file.as_str(),
    ]);
    std::fs::read_to_string(&file.0).expect("the report file")
}

#[test]
fn the_report_renders_every_chart_in_headless_chromium() {
    let file = TempPath::new("report.html");
    let html = make_report(&file);

    // Nothing to fetch: the only URL is the SVG namespace's name.
    for scheme in ["http://", "https://"] {
        for (at, _) in html.match_indices(scheme) {
            assert!(html[at..].starts_with("http://www.w3.org/2000/svg\""), "a URL in the page: {}", &html[at..(at + 80).min(html.len())]);
        }
    }

    let data = embedded_data(&html);
    let expected = expected_charts(&data);
    // Both commands of both runs have data, so every chart has something to draw.
    let histograms: Vec<&str> = expected.iter().filter(|e| e.name.starts_with("histogram-")).map(|e| e.name.as_str()).collect();
    assert_eq!(histograms, ["histogram-SET", "histogram-GET", "histogram-SET", "histogram-GET"]);
    assert!(expected.iter().all(|e| e.bars > 0 || e.lines.iter().all(|l| l.1 > 0)), "{expected:?}");
    let spectrum: Vec<&str> = expected[2].lines.iter().map(|l| l.0.as_str()).collect();
    assert_eq!(spectrum, ["Run #1 SET", "Run #1 GET", "Run #1 ALL", "Run #2 SET", "Run #2 GET", "Run #2 ALL"]);

    let dom = render(&file.0);
    if let Err(e) = check_rendered(&dom, &data) {
        panic!("{e}\n{dom}");
    }
}

#[test]
fn a_script_error_or_a_fetch_in_the_report_is_caught() {
    let file = TempPath::new("broken-report.html");
    let html = make_report(&file);
    let data = embedded_data(&html);
    // Data the script does not expect makes it throw half-way; an image
    // from the network is refused by the page's policy.
    let broken = html.replacen("\"series\":", "\"seriez\":", 1).replacen("<h1>", "<img src=\"http://127.0.0.1:9/x.png\"><h1>", 1);
    assert_ne!(broken, html);
    std::fs::write(&file.0, broken).expect("write the broken page");
    let dom = render(&file.0);
    let root = start_tags(&dom, "html").first().map(|t| t.to_string()).unwrap_or_default();
    assert!(attr(&root, "data-report-error").is_some_and(|e| e.contains("map")), "{root}");
    assert!(attr(&root, "data-report-blocked").is_some_and(|b| b.contains("127.0.0.1:9")), "{root}");
    assert!(check_rendered(&dom, &data).is_err());
}
