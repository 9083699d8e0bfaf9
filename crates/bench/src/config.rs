//! The validated run configuration: memtier_benchmark's defaults and checks
//! applied to [`Options`], producing a [`Config`] that the engine can use
//! without further questions.
//!
//! Defaults follow memtier_benchmark (threads 4, clients 50, 10000 requests,
//! ratio 1:10, 32-byte values, keys "memtier-0".."memtier-10000000",
//! percentiles 50,99,99.9). Error messages name the option and the expected
//! form, as memtier's do.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use crate::cli::Options;
use crate::BenchError;

/// Wire protocol spoken to the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// RESP, no HELLO (what memtier's "redis" does).
    Redis,
    /// RESP with `HELLO 2` first.
    Resp2,
    /// RESP with `HELLO 3` first.
    Resp3,
    /// Memcached's text protocol.
    MemcacheText,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Redis => "redis",
            Protocol::Resp2 => "resp2",
            Protocol::Resp3 => "resp3",
            Protocol::MemcacheText => "memcache_text",
        }
    }
    pub fn is_redis(self) -> bool {
        self != Protocol::MemcacheText
    }
}

/// Where to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Tcp { host: String, port: u16 },
    Unix(String),
}

impl Target {
    pub fn describe(&self) -> String {
        match self {
            Target::Tcp { host, port } => format!("{host}:{port}"),
            Target::Unix(p) => format!("unix:{p}"),
        }
    }
}

/// A resolved address, computed once before the threads start.
#[derive(Debug, Clone)]
pub enum Addr {
    Tcp(SocketAddr),
    Unix(String),
}

/// How a key index is chosen (memtier's --key-pattern letters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPattern {
    /// Uniform random.
    Random,
    /// Sequential over the whole range.
    Sequential,
    /// Gaussian around the median.
    Gaussian,
    /// Zipf over [max(min,1), max].
    Zipf,
    /// Sequential over a per-client slice of the range.
    Parallel,
}

impl KeyPattern {
    pub fn parse(c: char) -> Option<KeyPattern> {
        Some(match c {
            'R' => KeyPattern::Random,
            'S' => KeyPattern::Sequential,
            'G' => KeyPattern::Gaussian,
            'Z' => KeyPattern::Zipf,
            'P' => KeyPattern::Parallel,
            _ => return None,
        })
    }
    pub fn letter(self) -> char {
        match self {
            KeyPattern::Random => 'R',
            KeyPattern::Sequential => 'S',
            KeyPattern::Gaussian => 'G',
            KeyPattern::Zipf => 'Z',
            KeyPattern::Parallel => 'P',
        }
    }
}

/// Key space options.
#[derive(Debug, Clone)]
pub struct KeyConfig {
    pub prefix: String,
    pub min: u64,
    pub max: u64,
    pub set_pattern: KeyPattern,
    pub get_pattern: KeyPattern,
    /// 0 means "range / 6", as in memtier.
    pub stddev: f64,
    /// 0 means "middle of the range", as in memtier.
    pub median: f64,
    pub zipf_exp: f64,
}

/// Value sizes (memtier's -d, --data-size-range, --data-size-list).
#[derive(Debug, Clone, PartialEq)]
pub enum SizeSpec {
    Fixed(u32),
    Range { min: u32, max: u32 },
    /// (size, weight) pairs, cycled deterministically as memtier does.
    List(Vec<(u32, u32)>),
}

impl SizeSpec {
    pub fn largest(&self) -> u32 {
        match self {
            SizeSpec::Fixed(n) => *n,
            SizeSpec::Range { max, .. } => *max,
            SizeSpec::List(l) => l.iter().map(|(s, _)| *s).max().unwrap_or(0),
        }
    }
}

/// Value options.
#[derive(Debug, Clone)]
pub struct DataConfig {
    pub sizes: SizeSpec,
    /// true for --data-size-pattern=S (size follows the key index).
    pub size_by_key: bool,
    pub random: bool,
    /// (min, max) seconds; max 0 means no expiry.
    pub expiry: (u32, u32),
}

/// One piece of an arbitrary-command argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Lit(Vec<u8>),
    Key,
    Data,
}

/// One `--command`, split into arguments.
#[derive(Debug, Clone)]
pub struct ArbCommand {
    pub text: String,
    /// Upper-cased first word: the stats group ("Sets", "Gets", ...).
    pub name: String,
    pub args: Vec<Vec<Piece>>,
    pub ratio: u32,
    pub key_pattern: KeyPattern,
}

/// How a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// Requests per client.
    Requests(u64),
    /// Seconds.
    Time(u64),
}

/// Everything a run needs, validated.
#[derive(Debug, Clone)]
pub struct Config {
    pub target: Target,
    pub ipv6: Option<bool>,
    pub uri: String,
    pub protocol: Protocol,
    /// (user, password).
    pub auth: Option<(Option<String>, String)>,
    pub select_db: Option<u32>,
    pub threads: u32,
    pub clients: u32,
    pub limit: Limit,
    /// (sets, gets) per cycle.
    pub ratio: (u32, u32),
    pub pipeline: u32,
    pub multi_key_get: u32,
    pub keys: KeyConfig,
    pub data: DataConfig,
    pub commands: Vec<ArbCommand>,
    pub run_count: u32,
    pub print_all_runs: bool,
    pub seed: u64,
    pub distinct_client_seed: bool,
    pub reconnect_interval: u64,
    pub reconnect_on_error: bool,
    pub connect_timeout: Duration,
    pub reply_timeout: Duration,
    pub out_file: Option<String>,
    pub json_out_file: Option<String>,
    pub hdr_file_prefix: Option<String>,
    pub client_stats: Option<String>,
    pub percentiles: Vec<f64>,
    pub hide_histogram: bool,
    pub show_config: bool,
    pub debug: bool,
    /// Open loop: total requests per second.
    pub rate: Option<f64>,
    /// true when the rate came from memtier's --rate-limiting.
    pub rate_from_limiting: bool,
    pub compare: Vec<Target>,
    pub report: Option<String>,
    pub progress: Progress,
    pub scenario: Option<String>,
    /// `--tls` and its options: None for plain connections.
    pub tls: Option<crate::tls::TlsOptions>,
}

/// When to print live progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    Auto,
    Always,
    Never,
}

fn err(msg: impl Into<String>) -> BenchError {
    BenchError::Usage(msg.into())
}

/// memtier's "[0-n]:[0-n]".
pub fn parse_ratio(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once(':')?;
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
}

/// memtier's "MIN-MAX" (swapped if reversed).
pub fn parse_range(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once('-')?;
    let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    Some((a.min(b), a.max(b)))
}

/// "size:weight,size:weight".
pub fn parse_weight_list(s: &str) -> Option<Vec<(u32, u32)>> {
    let mut out = Vec::new();
    for item in s.split(',') {
        let (a, b) = item.split_once(':')?;
        out.push((a.trim().parse().ok()?, b.trim().parse().ok()?));
    }
    if out.is_empty() || out.iter().all(|&(_, w)| w == 0) {
        return None;
    }
    Some(out)
}

/// "50,99,99.9".
pub fn parse_percentiles(s: &str) -> Option<Vec<f64>> {
    let mut out = Vec::new();
    for item in s.split(',') {
        let v: f64 = item.trim().parse().ok()?;
        if !(0.0..=100.0).contains(&v) {
            return None;
        }
        out.push(v);
    }
    Some(out)
}

/// Splits a --command the way a shell would (double and single quotes),
/// then each argument into literal, `__key__` and `__data__` pieces.
pub fn parse_command(text: &str) -> Result<Vec<Vec<Piece>>, BenchError> {
    let mut words: Vec<String> = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) if c == '\\' => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
            }
            Some(_) => cur.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_word = true;
            }
            None if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            None => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(err(format!("--command \"{text}\": unbalanced quotes")));
    }
    if in_word {
        words.push(cur);
    }
    if words.is_empty() {
        return Err(err("--command: empty command"));
    }
    Ok(words.iter().map(|w| split_placeholders(w)).collect())
}

fn split_placeholders(word: &str) -> Vec<Piece> {
    let mut pieces = Vec::new();
    let mut rest = word;
    loop {
        let k = rest.find("__key__");
        let d = rest.find("__data__");
        let (at, len, piece) = match (k, d) {
            (None, None) => break,
            (Some(k), Some(d)) if d < k => (d, 8, Piece::Data),
            (Some(k), _) => (k, 7, Piece::Key),
            (None, Some(d)) => (d, 8, Piece::Data),
        };
        if at > 0 {
            pieces.push(Piece::Lit(rest.as_bytes()[..at].to_vec()));
        }
        pieces.push(piece);
        rest = &rest[at + len..];
    }
    if !rest.is_empty() || pieces.is_empty() {
        pieces.push(Piece::Lit(rest.as_bytes().to_vec()));
    }
    pieces
}

/// What a `-u` URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriParts {
    pub target: Target,
    pub user: Option<String>,
    pub password: Option<String>,
    pub db: Option<u32>,
}

/// Parses `redis://[user[:password]@]host[:port][/db]` (and `memcache://`).
pub fn parse_uri(uri: &str) -> Result<UriParts, BenchError> {
    let rest = if let Some(r) = uri.strip_prefix("redis://") {
        r
    } else if uri.starts_with("rediss://") {
        return Err(err("TLS (rediss://) is not supported by keel-bench"));
    } else if let Some(r) = uri.strip_prefix("memcache://") {
        r
    } else if let Some(r) = uri.strip_prefix("unix://") {
        return Ok(UriParts { target: Target::Unix(r.to_string()), user: None, password: None, db: None });
    } else {
        return Err(err(format!("invalid URI '{uri}': expected redis://[user:password@]host[:port][/db]")));
    };
    let (auth, hostpart) = match rest.rsplit_once('@') {
        Some((a, h)) => (Some(a), h),
        None => (None, rest),
    };
    let (hostport, db) = match hostpart.split_once('/') {
        Some((h, d)) if !d.is_empty() => {
            let db: u32 = d.parse().map_err(|_| err(format!("invalid database number in URI '{uri}'")))?;
            (h, Some(db))
        }
        Some((h, _)) => (h, None),
        None => (hostpart, None),
    };
    let (host, port) = split_host_port(hostport, 6379).ok_or_else(|| err(format!("invalid host or port in URI '{uri}'")))?;
    let (user, password) = match auth {
        None => (None, None),
        Some(a) => match a.split_once(':') {
            Some(("", p)) => (None, Some(p.to_string())),
            Some((u, p)) => (Some(u.to_string()), Some(p.to_string())),
            None => (None, Some(a.to_string())),
        },
    };
    Ok(UriParts { target: Target::Tcp { host, port }, user, password, db })
}

fn split_host_port(s: &str, default_port: u16) -> Option<(String, u16)> {
    if let Some(rest) = s.strip_prefix('[') {
        // [v6]:port
        let (h, p) = rest.split_once(']')?;
        let port = match p.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None => default_port,
        };
        return Some((h.to_string(), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => Some((if h.is_empty() { "localhost".into() } else { h.to_string() }, p.parse().ok()?)),
        _ if s.is_empty() => Some(("localhost".into(), default_port)),
        _ => Some((s.to_string(), default_port)),
    }
}

/// A --compare target: a URI, `host:port`, `:port`, or a path to a unix socket.
pub fn parse_target(s: &str) -> Result<Target, BenchError> {
    if s.contains("://") {
        return Ok(parse_uri(s)?.target);
    }
    if s.starts_with('/') || s.starts_with("./") {
        return Ok(Target::Unix(s.to_string()));
    }
    let (host, port) = split_host_port(s, 6379).ok_or_else(|| err(format!("invalid --compare target '{s}': expected host:port, URI or socket path")))?;
    Ok(Target::Tcp { host, port })
}

/// Resolves a target once, so threads never block on DNS.
pub fn resolve(target: &Target, ipv6: Option<bool>) -> Result<Addr, BenchError> {
    match target {
        Target::Unix(p) => Ok(Addr::Unix(p.clone())),
        Target::Tcp { host, port } => {
            let addrs: Vec<SocketAddr> = (host.as_str(), *port)
                .to_socket_addrs()
                .map_err(|e| BenchError::Connect(format!("cannot resolve '{host}': {e}")))?
                .collect();
            let pick = addrs
                .iter()
                .find(|a| match ipv6 {
                    Some(true) => a.is_ipv6(),
                    Some(false) => a.is_ipv4(),
                    None => a.is_ipv4(),
                })
                .or_else(|| if ipv6.is_none() { addrs.first() } else { None })
                .copied();
            pick.map(Addr::Tcp).ok_or_else(|| BenchError::Connect(format!("'{host}' has no usable address")))
        }
    }
}

impl Config {
    /// Applies memtier's defaults and checks.
    pub fn from_options(o: &Options) -> Result<Config, BenchError> {
        // --- target ---
        let mut user = None;
        let mut password = None;
        let mut db = o.select_db;
        let mut target = if let Some(path) = &o.unix_socket {
            Target::Unix(path.clone())
        } else {
            Target::Tcp { host: o.server.clone().unwrap_or_else(|| "localhost".into()), port: o.port.unwrap_or(6379) }
        };
        if let Some(uri) = &o.uri {
            let parts = parse_uri(uri)?;
            target = parts.target;
            user = parts.user;
            password = parts.password;
            if parts.db.is_some() {
                db = parts.db;
            }
        }
        if let Some(a) = &o.authenticate {
            match a.split_once(':') {
                Some((u, p)) => {
                    user = Some(u.to_string());
                    password = Some(p.to_string());
                }
                None => password = Some(a.clone()),
            }
        }
        let protocol = match o.protocol.as_deref().unwrap_or("redis") {
            "redis" => Protocol::Redis,
            "resp2" => Protocol::Resp2,
            "resp3" => Protocol::Resp3,
            "memcache_text" => Protocol::MemcacheText,
            "memcache_binary" => return Err(err("protocol memcache_binary is not supported by keel-bench; use memcache_text")),
            other => return Err(err(format!("invalid protocol '{other}': expected redis, resp2, resp3 or memcache_text"))),
        };
        let auth = password.map(|p| (user, p));
        if protocol == Protocol::MemcacheText && (auth.is_some() || db.is_some()) {
            return Err(err("--authenticate and --select-db need a Redis protocol (memcache_text has neither)"));
        }
        if o.ipv4 && o.ipv6 {
            return Err(err("--ipv4 and --ipv6 are mutually exclusive"));
        }
        let ipv6 = if o.ipv6 { Some(true) } else if o.ipv4 { Some(false) } else { None };

        // --- shape ---
        let threads = o.threads.unwrap_or(4);
        let clients = o.clients.unwrap_or(50);
        if threads == 0 {
            return Err(err("threads must be greater than zero"));
        }
        if clients == 0 {
            return Err(err("clients must be greater than zero"));
        }
        let pipeline = o.pipeline.unwrap_or(1);
        if pipeline == 0 {
            return Err(err("pipeline must be greater than zero"));
        }
        let ratio = match &o.ratio {
            Some(r) => parse_ratio(r).ok_or_else(|| err("ratio must be expressed as [0-n]:[0-n]"))?,
            None => (1, 10),
        };
        if ratio == (0, 0) {
            return Err(err("ratio 0:0 sends nothing: at least one side must be non-zero"));
        }
        let multi_key_get = o.multi_key_get.unwrap_or(0);
        if o.multi_key_get == Some(0) {
            return Err(err("multi-key-get must be greater than zero"));
        }

        // --- keys ---
        let key_pattern = o.key_pattern.clone().unwrap_or_else(|| "R:R".into());
        let kp: Vec<char> = key_pattern.chars().collect();
        let bad_kp = || err("key-pattern must be in the format of [S/R/G/P/Z]:[S/R/G/P/Z]");
        if kp.len() != 3 || kp[1] != ':' {
            return Err(bad_kp());
        }
        let set_pattern = KeyPattern::parse(kp[0]).ok_or_else(bad_kp)?;
        let get_pattern = KeyPattern::parse(kp[2]).ok_or_else(bad_kp)?;
        if (set_pattern == KeyPattern::Parallel) != (get_pattern == KeyPattern::Parallel) {
            return Err(err("parallel key-pattern must be configured for both SET and GET commands"));
        }
        let key_min = o.key_minimum.unwrap_or(0);
        let key_max = o.key_maximum.unwrap_or(10_000_000);
        if key_max < key_min {
            return Err(err("key-maximum must be greater than or equal to key-minimum"));
        }
        let zipf_exp = o.key_zipf_exp.unwrap_or(1.0);
        if !(zipf_exp > 0.0 && zipf_exp < 5.0) {
            return Err(err("key-zipf-exp must be in (0, 5)"));
        }
        let stddev = o.key_stddev.unwrap_or(0.0);
        let median = o.key_median.unwrap_or(0.0);
        if stddev < 0.0 {
            return Err(err("key-stddev must be positive"));
        }
        if median != 0.0 && (median <= key_min as f64 || median >= key_max as f64) {
            return Err(err("key-median must be inside the key range (key-minimum, key-maximum)"));
        }
        let keys = KeyConfig {
            prefix: o.key_prefix.clone().unwrap_or_else(|| "memtier-".into()),
            min: key_min,
            max: key_max,
            set_pattern,
            get_pattern,
            stddev,
            median,
            zipf_exp,
        };

        // --- requests / time ---
        let limit = match (&o.requests, o.test_time) {
            (Some(_), Some(_)) => return Err(err("--test-time and --requests are mutually exclusive")),
            (None, Some(0)) => return Err(err("test-time must be greater than zero")),
            (None, Some(t)) => Limit::Time(t),
            (Some(r), None) if r == "allkeys" => {
                let mut n = key_max - key_min;
                if set_pattern == KeyPattern::Parallel {
                    n = n / (u64::from(clients) * u64::from(threads)) + 1;
                }
                Limit::Requests(n.max(1))
            }
            (Some(r), None) => match r.parse::<u64>() {
                Ok(n) if n > 0 => Limit::Requests(n),
                _ => return Err(err("requests must be greater than zero (or 'allkeys')")),
            },
            (None, None) => Limit::Requests(10_000),
        };

        // --- data ---
        let given = [o.data_size.is_some(), o.data_size_range.is_some(), o.data_size_list.is_some()];
        if given.iter().filter(|g| **g).count() > 1 {
            return Err(err("only one of --data-size, --data-size-range and --data-size-list may be given"));
        }
        let sizes = if let Some(r) = &o.data_size_range {
            let (min, max) = parse_range(r).ok_or_else(|| err("data-size-range must be expressed as [0-n]-[1-n]"))?;
            if max == 0 {
                return Err(err("data-size-range must be expressed as [0-n]-[1-n]"));
            }
            SizeSpec::Range { min: min.max(1), max }
        } else if let Some(l) = &o.data_size_list {
            let list = parse_weight_list(l).ok_or_else(|| err("data-size-list must be expressed as [size1:weight1],...[sizeN:weightN]"))?;
            if list.iter().any(|&(s, _)| s == 0) {
                return Err(err("data-size-list sizes must be greater than zero"));
            }
            SizeSpec::List(list)
        } else {
            let d = o.data_size.unwrap_or(32);
            if d == 0 {
                return Err(err("data-size must be greater than zero"));
            }
            SizeSpec::Fixed(d)
        };
        let size_by_key = match o.data_size_pattern.as_deref() {
            None | Some("R") => false,
            Some("S") => true,
            Some(_) => return Err(err("data-size-pattern must be either R or S")),
        };
        let expiry = match &o.expiry_range {
            Some(r) => parse_range(r).ok_or_else(|| err("expiry-range must be expressed as [0-n]-[1-n]"))?,
            None => (0, 0),
        };
        let data = DataConfig { sizes, size_by_key, random: o.random_data, expiry };

        // --- arbitrary commands ---
        let mut commands = Vec::new();
        let pos = &o.command_positions;
        for (i, text) in o.command.iter().enumerate() {
            let args = parse_command(text)?;
            let name = match args.first().and_then(|a| a.first()) {
                Some(Piece::Lit(l)) if args[0].len() == 1 => String::from_utf8_lossy(l).to_uppercase(),
                _ => return Err(err(format!("--command \"{text}\": the command name must be a plain word"))),
            };
            commands.push(ArbCommand { text: text.clone(), name, args, ratio: 1, key_pattern: KeyPattern::Random });
            let _ = i;
        }
        // Pair --command-ratio / --command-key-pattern with the --command given last before them.
        let owner = |at: usize| -> Option<usize> { pos.command.iter().rposition(|&c| c < at) };
        for (k, r) in o.command_ratio.iter().enumerate() {
            let at = pos.ratio.get(k).copied().unwrap_or(usize::MAX);
            let c = owner(at).ok_or_else(|| err("--command-ratio: no arbitrary command found before it"))?;
            let v: u32 = r.parse().map_err(|_| err(format!("--command-ratio '{r}' must be a positive number")))?;
            if v == 0 {
                return Err(err("--command-ratio must be greater than zero"));
            }
            commands[c].ratio = v;
        }
        for (k, p) in o.command_key_pattern.iter().enumerate() {
            let at = pos.key_pattern.get(k).copied().unwrap_or(usize::MAX);
            let c = owner(at).ok_or_else(|| err("--command-key-pattern: no arbitrary command found before it"))?;
            let mut ch = p.chars();
            let kp = match (ch.next(), ch.next()) {
                (Some(c0), None) => KeyPattern::parse(c0),
                _ => None,
            };
            commands[c].key_pattern = kp.ok_or_else(|| err(format!("key-pattern for command {} must be in the format of [S/R/Z/G/P]", commands[c].name)))?;
        }
        if !commands.is_empty() && !protocol.is_redis() {
            return Err(err("--command needs a Redis protocol (redis, resp2 or resp3)"));
        }

        // --- runs, output ---
        let run_count = o.run_count.unwrap_or(1);
        if run_count == 0 {
            return Err(err("run-count must be greater than zero"));
        }
        let percentiles = match &o.print_percentiles {
            Some(p) => parse_percentiles(p).ok_or_else(|| err("quantiles must be expressed as [0.0-100.0],[0.0-100.0](,...)"))?,
            None => vec![50.0, 99.0, 99.9],
        };
        let seed = if o.randomize {
            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
            (t ^ u64::from(std::process::id())) & 0x7fff_ffff
        } else {
            0
        };
        let mut rate = o.rate;
        let mut rate_from_limiting = false;
        if let Some(r) = o.rate_limiting {
            if rate.is_some() {
                return Err(err("--rate and --rate-limiting are mutually exclusive"));
            }
            rate = Some(r * f64::from(threads) * f64::from(clients));
            rate_from_limiting = true;
        }
        if let Some(r) = rate {
            if !(r.is_finite() && r > 0.0) {
                return Err(err("--rate must be a positive number of requests per second"));
            }
        }
        let mut compare = Vec::new();
        for c in &o.compare {
            compare.push(parse_target(c)?);
        }
        if !compare.is_empty() && compare.len() != 2 {
            return Err(err("--compare needs exactly two targets (A,B)"));
        }
        let progress = match o.progress.as_deref() {
            None | Some("auto") => Progress::Auto,
            Some("always") => Progress::Always,
            Some("never") => Progress::Never,
            Some(p) => return Err(err(format!("--progress '{p}': expected auto, always or never"))),
        };
        let secs = |v: f64, name: &str| -> Result<Duration, BenchError> {
            if v.is_finite() && v > 0.0 {
                Ok(Duration::from_secs_f64(v))
            } else {
                Err(err(format!("--{name} must be a positive number of seconds")))
            }
        };
        let connect_timeout = match o.connection_timeout {
            None | Some(0) => Duration::from_secs(10),
            Some(s) => Duration::from_secs(s),
        };
        let reply_timeout = secs(o.reply_timeout.unwrap_or(30.0), "reply-timeout")?;

        let tls_options = [&o.cert, &o.key, &o.cacert, &o.sni].iter().any(|v| v.is_some()) || o.tls_skip_verify;
        if tls_options && !o.tls {
            return Err(err("--cert, --key, --cacert, --tls-skip-verify and --sni need --tls"));
        }
        if o.tls && matches!(target, Target::Unix(_)) {
            return Err(err("--tls needs a TCP server, not --unix-socket"));
        }
        let tls = o.tls.then(|| crate::tls::TlsOptions {
            cert: o.cert.clone(),
            key: o.key.clone(),
            cacert: o.cacert.clone(),
            skip_verify: o.tls_skip_verify,
            sni: o.sni.clone(),
        });

        Ok(Config {
            tls,
            uri: o.uri.clone().unwrap_or_default(),
            target,
            ipv6,
            protocol,
            auth,
            select_db: db,
            threads,
            clients,
            limit,
            ratio,
            pipeline,
            multi_key_get,
            keys,
            data,
            commands,
            run_count,
            print_all_runs: o.print_all_runs,
            seed,
            distinct_client_seed: o.distinct_client_seed,
            reconnect_interval: o.reconnect_interval.unwrap_or(0),
            reconnect_on_error: o.reconnect_on_error,
            connect_timeout,
            reply_timeout,
            out_file: o.out_file.clone(),
            json_out_file: o.json_out_file.clone(),
            hdr_file_prefix: o.hdr_file_prefix.clone(),
            client_stats: o.client_stats.clone(),
            percentiles,
            hide_histogram: o.hide_histogram,
            show_config: o.show_config,
            debug: o.debug,
            rate,
            rate_from_limiting,
            compare,
            report: o.report.clone(),
            progress,
            scenario: o.scenario.clone(),
        })
    }

    /// Total connections.
    pub fn connections(&self) -> u64 {
        u64::from(self.threads) * u64::from(self.clients)
    }

    /// Stats groups, in table order: Sets/Gets/Waits, or one per distinct
    /// arbitrary command name (memtier's default "by command" breakdown).
    pub fn stat_names(&self) -> Vec<String> {
        if self.commands.is_empty() {
            return vec!["SET".into(), "GET".into(), "WAIT".into()];
        }
        let mut names: Vec<String> = Vec::new();
        for c in &self.commands {
            if !names.contains(&c.name) {
                names.push(c.name.clone());
            }
        }
        names
    }

    /// Stats group of arbitrary command `i`.
    pub fn command_slot(&self, i: usize) -> usize {
        let names = self.stat_names();
        names.iter().position(|n| *n == self.commands[i].name).unwrap_or(0)
    }
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cli;

    fn cfg(args: &[&str]) -> Result<Config, BenchError> {
        let mut v = vec!["keel-bench"];
        v.extend_from_slice(args);
        Config::from_options(&cli::parse(v).unwrap())
    }

    #[test]
    fn memtier_defaults() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.threads, 4);
        assert_eq!(c.clients, 50);
        assert_eq!(c.limit, Limit::Requests(10_000));
        assert_eq!(c.ratio, (1, 10));
        assert_eq!(c.data.sizes, SizeSpec::Fixed(32));
        assert_eq!(c.keys.prefix, "memtier-");
        assert_eq!((c.keys.min, c.keys.max), (0, 10_000_000));
        assert_eq!(c.percentiles, vec![50.0, 99.0, 99.9]);
        assert_eq!(c.target, Target::Tcp { host: "localhost".into(), port: 6379 });
        assert_eq!(c.protocol, Protocol::Redis);
        assert_eq!(c.pipeline, 1);
    }

    #[test]
    fn uri_and_auth() {
        let c = cfg(&["-u", "redis://bob:secret@10.1.2.3:7000/3"]).unwrap();
        assert_eq!(c.target, Target::Tcp { host: "10.1.2.3".into(), port: 7000 });
        assert_eq!(c.auth, Some((Some("bob".into()), "secret".into())));
        assert_eq!(c.select_db, Some(3));
        let c = cfg(&["-a", "pw"]).unwrap();
        assert_eq!(c.auth, Some((None, "pw".into())));
        let c = cfg(&["-a", "u:pw"]).unwrap();
        assert_eq!(c.auth, Some((Some("u".into()), "pw".into())));
        assert!(cfg(&["-u", "rediss://x"]).is_err());
        assert!(cfg(&["-u", "http://x"]).is_err());
    }

    #[test]
    fn bad_values_are_rejected_with_the_option_named() {
        for (args, needle) in [
            (&["--ratio", "1-1"][..], "ratio"),
            (&["--key-pattern", "R:X"][..], "key-pattern"),
            (&["--key-pattern", "P:R"][..], "parallel"),
            (&["-n", "10", "--test-time", "5"][..], "mutually exclusive"),
            (&["--data-size-range", "abc"][..], "data-size-range"),
            (&["--data-size-list", "10"][..], "data-size-list"),
            (&["-P", "http"][..], "protocol"),
            (&["--print-percentiles", "50,abc"][..], "quantiles"),
            (&["--command-ratio", "2"][..], "no arbitrary command"),
            (&["--key-zipf-exp", "7"][..], "zipf"),
            (&["-c", "0"][..], "clients"),
            (&["--compare", "a:1"][..], "exactly two"),
            (&["--rate=-5"][..], "rate"),
        ] {
            let e = cfg(args).unwrap_err().to_string();
            assert!(e.contains(needle), "{args:?}: {e}");
        }
    }

    #[test]
    fn commands_pair_with_ratio_and_pattern() {
        let c = cfg(&["--command=set __key__ __data__", "--command-ratio=3", "--command=get k:__key__:x", "--command-key-pattern=G"]).unwrap();
        assert_eq!(c.commands.len(), 2);
        assert_eq!(c.commands[0].ratio, 3);
        assert_eq!(c.commands[0].key_pattern, KeyPattern::Random);
        assert_eq!(c.commands[1].key_pattern, KeyPattern::Gaussian);
        assert_eq!(c.commands[1].args[1], vec![Piece::Lit(b"k:".to_vec()), Piece::Key, Piece::Lit(b":x".to_vec())]);
        assert_eq!(c.stat_names(), vec!["SET".to_string(), "GET".to_string()]);
    }

    #[test]
    fn command_quoting() {
        let a = parse_command(r#"set "a b" '__data__'"#).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a[1], vec![Piece::Lit(b"a b".to_vec())]);
        assert_eq!(a[2], vec![Piece::Data]);
        assert!(parse_command("set \"a").is_err());
    }

    #[test]
    fn allkeys_and_rate_limiting() {
        let c = cfg(&["-n", "allkeys", "--key-maximum", "1000"]).unwrap();
        assert_eq!(c.limit, Limit::Requests(1000));
        let c = cfg(&["-t", "2", "-c", "3", "--rate-limiting", "10"]).unwrap();
        assert_eq!(c.rate, Some(60.0));
    }

    #[test]
    fn compare_targets() {
        let c = cfg(&["--compare", "127.0.0.1:1,redis://h:2"]).unwrap();
        assert_eq!(c.compare[1], Target::Tcp { host: "h".into(), port: 2 });
        assert_eq!(parse_target("/tmp/s.sock").unwrap(), Target::Unix("/tmp/s.sock".into()));
    }
}
