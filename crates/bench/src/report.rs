//! `--report FILE.html`: one self-contained page (inline CSS, data and
//! script; nothing fetched, so it opens offline and can be mailed) with
//! throughput over time, latency over time, the latency percentile
//! spectrum (HdrHistogram's plot: x = percentile on a 1/(1-q) scale) and a
//! latency histogram per command. Charts are SVG drawn by the inline
//! script from the embedded JSON; the results table is also embedded as
//! text, so the page is useful even with scripts off.
//!
//! The page's Content-Security-Policy forbids every fetch, so a page that
//! needed the network would show it at once; script errors and blocked
//! fetches are recorded on the root element (`data-report-error`,
//! `data-report-blocked`), and a finished script marks the body
//! `data-report-rendered`. `tests/report.rs` opens the page in headless
//! Chromium and counts what each chart drew against the embedded data.

use serde_json::{json, Value};

use crate::config::Config;
use crate::output;
use crate::stats::RunResult;
use crate::BenchError;

fn spectrum(h: &hdrhistogram::Histogram<u64>) -> Value {
    if h.is_empty() {
        return json!([]);
    }
    let pts: Vec<Value> = h
        .iter_quantiles(5)
        .map(|v| json!([v.quantile_iterated_to(), h.highest_equivalent(v.value_iterated_to()) as f64 / 1000.0]))
        .collect();
    Value::Array(pts)
}

/// Log-spaced buckets: [upper bound msec, count].
fn buckets(h: &hdrhistogram::Histogram<u64>) -> Value {
    if h.is_empty() {
        return json!([]);
    }
    let pts: Vec<Value> =
        h.iter_log(10, 1.25).map(|v| json!([v.value_iterated_to() as f64 / 1000.0, v.count_since_last_iteration()])).collect();
    Value::Array(pts)
}

fn run_data(cfg: &Config, label: &str, r: &RunResult) -> Value {
    let series: Vec<Value> = r
        .series
        .iter()
        .map(|s| json!({"t": s.second, "ops": s.total.ops, "p50": s.total.q(50.0), "p99": s.total.q(99.0), "errors": s.total.errors}))
        .collect();
    let mut spec = serde_json::Map::new();
    let mut hist = serde_json::Map::new();
    for (n, c) in r.names.iter().zip(&r.cmds) {
        if c.hist.is_empty() {
            continue;
        }
        spec.insert(n.clone(), spectrum(&c.hist));
        hist.insert(n.clone(), buckets(&c.hist));
        if let Some(u) = &c.uncorrected {
            spec.insert(format!("{n} (uncorrected)"), spectrum(u));
        }
    }
    let total = r.total();
    spec.insert("ALL".into(), spectrum(&total.hist));
    if let Some(u) = &total.uncorrected {
        spec.insert("ALL (uncorrected)".into(), spectrum(u));
    }
    json!({
        "label": label,
        "target": r.target,
        "openLoop": r.target_rate,
        "opsSec": r.ops_sec(),
        "avgMs": total.avg_ms(),
        "p99Ms": total.pct_ms(99.0),
        "errors": r.error_replies(),
        "connectionErrors": r.connection_errors,
        "cpuPerMop": r.cpu_s_per_mop(),
        "series": series,
        "spectrum": spec,
        "histograms": hist,
        "table": output::table(cfg, r, "RESULTS") + &output::uncorrected_table(cfg, r),
    })
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Writes the report.
pub fn write(path: &str, cfg: &Config, title: &str, runs: &[(String, &RunResult)], extra_text: Option<&str>) -> Result<(), BenchError> {
    let data = json!({
        "title": title,
        "runs": runs.iter().map(|(l, r)| run_data(cfg, l, r)).collect::<Vec<_>>(),
        "config": output::config_json(cfg),
    });
    // "</" inside a script element would end it: escape it in the JSON.
    let data_text = serde_json::to_string(&data).map_err(|e| BenchError::Output(e.to_string()))?.replace("</", "<\\/");
    let mut pre = String::new();
    if let Some(t) = extra_text {
        pre.push_str(t);
    }
    for (l, r) in runs {
        pre.push_str(&format!("\n{l}"));
        pre.push_str(&output::table(cfg, r, &r.target));
        pre.push_str(&output::footer(r));
    }
    let html = TEMPLATE.replace("@TITLE@", &escape(title)).replace("@TABLE@", &escape(&pre)).replace("@DATA@", &data_text);
    std::fs::write(path, html).map_err(|e| BenchError::Output(format!("{path}: {e}")))?;
    eprintln!("Report written to {path}");
    Ok(())
}

const TEMPLATE: &str = r##"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'">
<title>@TITLE@</title>
<script>
// Script errors and anything the policy above blocks are written onto the
// root element, so a reader's inspector and the headless-browser test see them.
(function(){
function note(name,what){var d=document.documentElement;var was=d.getAttribute(name);d.setAttribute(name,(was?was+"; ":"")+what);}
window.addEventListener("error",function(e){note("data-report-error",e.message||"error");});
document.addEventListener("securitypolicyviolation",function(e){note("data-report-blocked",e.violatedDirective+" "+e.blockedURI);});
})();
</script>
<style>
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px} h2{font-size:17px;margin-top:28px}
pre{background:#f6f6f6;padding:10px;overflow-x:auto;font-size:12px}
.kb-chart{border:1px solid #ddd;background:#fff;margin:6px 0}
.kb-axis{stroke:#888;stroke-width:1} .kb-grid{stroke:#eee;stroke-width:1}
.kb-label{font-size:11px;fill:#555} .kb-legend{font-size:12px}
.kb-summary td,.kb-summary th{padding:3px 10px;text-align:right;border-bottom:1px solid #eee}
</style></head>
<body>
<h1>@TITLE@</h1>
<div id="summary"></div>
<h2>Throughput over time</h2><div id="throughput"></div>
<h2>Latency over time (p50, p99)</h2><div id="latency"></div>
<h2>Latency percentile spectrum</h2><div id="spectrum"></div>
<h2>Latency histograms per command</h2><div id="histograms"></div>
<h2>Results</h2><pre id="table">@TABLE@</pre>
<script id="kb-data" type="application/json">@DATA@</script>
<script>
(function(){
"use strict";
var D=JSON.parse(document.getElementById("kb-data").textContent);
var NS="http://www.w3.org/2000/svg";
var COLORS=["#1f77b4","#d62728","#2ca02c","#ff7f0e","#9467bd","#8c564b","#e377c2","#17becf"];
function el(tag,attrs,parent){var e=document.createElementNS(NS,tag);for(var k in attrs){e.setAttribute(k,attrs[k]);}if(parent){parent.appendChild(e);}return e;}
function text(parent,x,y,s,cls,anchor){var t=el("text",{x:x,y:y,"class":cls||"kb-label","text-anchor":anchor||"start"},parent);t.textContent=s;return t;}
function fmt(v){if(v===0)return "0";if(Math.abs(v)>=1000)return (v/1000).toFixed(v>=10000?0:1)+"k";if(Math.abs(v)>=10)return v.toFixed(0);if(Math.abs(v)>=1)return v.toFixed(1);return v.toPrecision(2);}
// chart(container, name, series[{name, points:[[x,y]]}], opts{xlog, ylog, xlabel, ylabel, xticks, bars})
function chart(box,name,series,o){
  var W=1000,H=320,L=70,R=20,T=20,B=50;
  var svg=el("svg",{"class":"kb-chart","data-chart":name,width:W,height:H,viewBox:"0 0 "+W+" "+H},box);
  var xs=[],ys=[];series.forEach(function(s){s.points.forEach(function(p){xs.push(p[0]);ys.push(p[1]);});});
  if(!xs.length){text(svg,W/2,H/2,"no data","kb-label","middle");return svg;}
  var fx=o.xlog?function(v){return Math.log10(v);}:function(v){return v;};
  var fy=o.ylog?function(v){return Math.log10(Math.max(v,1e-3));}:function(v){return v;};
  var x0=Math.min.apply(null,xs.map(fx)),x1=Math.max.apply(null,xs.map(fx));
  var y0=o.ylog?Math.min.apply(null,ys.map(fy)):0,y1=Math.max.apply(null,ys.map(fy));
  if(x1===x0){x1=x0+1;} if(y1<=y0){y1=y0+1;}
  y1=y1+(y1-y0)*0.05;
  // Bars are centred on their x: half a bar group of margin keeps the end ones inside.
  var n=Math.max.apply(null,series.map(function(s){return s.points.length;}).concat([1]));
  var pad=o.bars?(W-L-R)/n/2:0;
  function px(v){return L+pad+(fx(v)-x0)/(x1-x0)*(W-L-R-2*pad);}
  function py(v){return H-B-(fy(v)-y0)/(y1-y0)*(H-T-B);}
  for(var i=0;i<=5;i++){var yv=y0+(y1-y0)*i/5;var yy=H-B-(H-T-B)*i/5;el("line",{x1:L,x2:W-R,y1:yy,y2:yy,"class":"kb-grid"},svg);text(svg,L-6,yy+4,fmt(o.ylog?Math.pow(10,yv):yv),"kb-label","end");}
  var ticks=o.xticks||[];if(!ticks.length){for(var j=0;j<=8;j++){var xv=x0+(x1-x0)*j/8;ticks.push([o.xlog?Math.pow(10,xv):xv,null]);}}
  ticks.forEach(function(t){if(fx(t[0])<x0-1e-9||fx(t[0])>x1+1e-9)return;var xx=px(t[0]);el("line",{x1:xx,x2:xx,y1:T,y2:H-B,"class":"kb-grid"},svg);text(svg,xx,H-B+16,t[1]||fmt(t[0]),"kb-label","middle");});
  el("line",{x1:L,x2:W-R,y1:H-B,y2:H-B,"class":"kb-axis"},svg);el("line",{x1:L,x2:L,y1:T,y2:H-B,"class":"kb-axis"},svg);
  text(svg,(L+W-R)/2,H-10,o.xlabel||"","kb-label","middle");
  var yl=text(svg,14,(T+H-B)/2,o.ylabel||"","kb-label","middle");yl.setAttribute("transform","rotate(-90 14 "+((T+H-B)/2)+")");
  series.forEach(function(s,k){
    var c=COLORS[k%COLORS.length];
    if(o.bars){var bw=Math.max(2,2*pad/series.length-1);
      s.points.forEach(function(p){var xx=px(p[0])-bw*series.length/2+bw*k;el("rect",{x:xx,y:py(p[1]),width:bw,height:Math.max(0,H-B-py(p[1])),fill:c,"class":"kb-bar"},svg);});}
    else{var d=s.points.map(function(p,i){return (i?"L":"M")+px(p[0]).toFixed(1)+","+py(p[1]).toFixed(1);}).join("");
      el("path",{d:d,fill:"none",stroke:c,"stroke-width":2,"class":"kb-line","data-series":s.name},svg);}
    var lx=L+10+k*180;el("rect",{x:lx,y:4,width:10,height:10,fill:c},svg);text(svg,lx+14,13,s.name,"kb-legend");
  });
  svg.setAttribute("data-rendered","true");
  return svg;
}
// Summary table.
var tb=document.createElement("table");tb.className="kb-summary";
tb.innerHTML="<tr><th style='text-align:left'>Run</th><th>Target</th><th>Ops/sec</th><th>Avg msec</th><th>p99 msec</th><th>Errors</th><th>CPU-s/M ops</th><th>Open loop</th></tr>";
D.runs.forEach(function(r){var tr=document.createElement("tr");
  [r.label,r.target,r.opsSec.toFixed(0),r.avgMs.toFixed(3),r.p99Ms.toFixed(3),String(r.errors+r.connectionErrors),r.cpuPerMop.toFixed(3),r.openLoop?("yes, "+r.openLoop+" req/s, corrected"):"no"].forEach(function(v,i){var td=document.createElement("td");td.textContent=v;if(i===0)td.style.textAlign="left";tr.appendChild(td);});
  tb.appendChild(tr);});
document.getElementById("summary").appendChild(tb);
chart(document.getElementById("throughput"),"throughput",D.runs.map(function(r){return {name:r.label,points:r.series.map(function(s){return [s.t+1,s.ops];})};}),{xlabel:"second",ylabel:"ops/sec"});
var lat=[];D.runs.forEach(function(r){lat.push({name:r.label+" p50",points:r.series.map(function(s){return [s.t+1,s.p50];})});lat.push({name:r.label+" p99",points:r.series.map(function(s){return [s.t+1,s.p99];})});});
chart(document.getElementById("latency"),"latency",lat,{xlabel:"second",ylabel:"msec",ylog:true});
var spec=[];D.runs.forEach(function(r){for(var n in r.spectrum){spec.push({name:(D.runs.length>1?r.label+" ":"")+n,points:r.spectrum[n].filter(function(p){return p[0]<1;}).map(function(p){return [1/(1-p[0]),p[1]];})});}});
chart(document.getElementById("spectrum"),"spectrum",spec,{xlog:true,ylog:true,xlabel:"percentile",ylabel:"msec",
  xticks:[[1,"0%"],[2,"50%"],[10,"90%"],[100,"99%"],[1000,"99.9%"],[10000,"99.99%"],[100000,"99.999%"]]});
D.runs.forEach(function(r){for(var n in r.histograms){var h=document.createElement("div");document.getElementById("histograms").appendChild(h);
  var t=document.createElement("h3");t.textContent=(D.runs.length>1?r.label+" ":"")+n;t.style.fontSize="14px";h.appendChild(t);
  chart(h,"histogram-"+n,[{name:n,points:r.histograms[n].filter(function(p){return p[1]>0;})}],{xlog:true,bars:true,xlabel:"msec (upper bound of bucket)",ylabel:"requests"});}});
document.body.setAttribute("data-report-rendered","true");
})();
</script>
</body></html>
"##;
