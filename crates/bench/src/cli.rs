//! Command-line options: memtier_benchmark's names, short letters and
//! meanings, plus keel-bench's own extensions (`--rate`, `--compare`,
//! `--report`, `--scenario`, ...).
//!
//! This module only parses text into [`Options`]; every check and default
//! lives in `config.rs`, so that a scenario file and a command line go
//! through exactly the same validation.

use clap::{ArgAction, CommandFactory, FromArgMatches, Parser};

/// Raw options as typed. `Option` means "not given": memtier's defaults
/// depend on which other options were given, so they are applied later.
#[derive(Parser, Debug, Default, Clone)]
#[command(
    name = "keel-bench",
    version,
    about = "A memtier_benchmark-compatible load generator for Redis- and Memcached-protocol servers,\n\
             with open-loop rates, coordinated-omission correction, comparisons and HTML reports.",
    disable_help_flag = true,
    disable_version_flag = true,
    infer_long_args = true,
    args_override_self = true
)]
pub struct Options {
    // ---- connection and general ----
    /// Server address (default: localhost).
    #[arg(short = 's', long = "server", visible_alias = "host", short_alias = 'h')]
    pub server: Option<String>,
    /// Server port (default: 6379).
    #[arg(short = 'p', long)]
    pub port: Option<u16>,
    /// UNIX domain socket name.
    #[arg(short = 'S', long = "unix-socket")]
    pub unix_socket: Option<String>,
    /// Force IPv4 address resolution.
    #[arg(short = '4', long)]
    pub ipv4: bool,
    /// Force IPv6 address resolution.
    #[arg(short = '6', long)]
    pub ipv6: bool,
    /// Protocol: redis, resp2, resp3 or memcache_text (default: redis).
    #[arg(short = 'P', long)]
    pub protocol: Option<String>,
    /// Credentials: PASSWORD or USER:PASSWORD.
    #[arg(short = 'a', long)]
    pub authenticate: Option<String>,
    /// Server URI: redis://[user:password@]host[:port][/db].
    #[arg(short = 'u', long)]
    pub uri: Option<String>,
    /// Connect with TLS.
    #[arg(long)]
    pub tls: bool,
    /// Client certificate for TLS (with --key).
    #[arg(long)]
    pub cert: Option<String>,
    /// Client private key for TLS (with --cert).
    #[arg(long)]
    pub key: Option<String>,
    /// CA certificates to check the server's certificate against (its
    /// chain; not its name, as memtier).
    #[arg(long)]
    pub cacert: Option<String>,
    /// Do not check the server's certificate.
    #[arg(long = "tls-skip-verify")]
    pub tls_skip_verify: bool,
    /// Server name to send in the TLS handshake (default: the host).
    #[arg(long)]
    pub sni: Option<String>,
    /// Number of full-test iterations to perform.
    #[arg(short = 'x', long = "run-count")]
    pub run_count: Option<u32>,
    /// Print debug output.
    #[arg(short = 'D', long)]
    pub debug: bool,
    /// Display this help.
    #[arg(long, action = ArgAction::Help)]
    pub help: Option<bool>,
    /// Display version information.
    #[arg(short = 'v', long, action = ArgAction::Version)]
    pub version: Option<bool>,

    // ---- results output ----
    /// Name of output file (default: stdout).
    #[arg(short = 'o', long = "out-file")]
    pub out_file: Option<String>,
    /// Name of JSON output file.
    #[arg(long = "json-out-file")]
    pub json_out_file: Option<String>,
    /// Produce per-client stats files with this prefix.
    #[arg(long = "client-stats")]
    pub client_stats: Option<String>,
    /// Prefix of HDR latency histogram output files.
    #[arg(long = "hdr-file-prefix")]
    pub hdr_file_prefix: Option<String>,
    /// Print detailed configuration before running.
    #[arg(long = "show-config")]
    pub show_config: bool,
    /// Don't print the detailed latency histogram.
    #[arg(long = "hide-histogram")]
    pub hide_histogram: bool,
    /// Percentiles on the results table (default: 50,99,99.9).
    #[arg(long = "print-percentiles")]
    pub print_percentiles: Option<String>,
    /// With -x, print and save results for every iteration.
    #[arg(long = "print-all-runs")]
    pub print_all_runs: bool,

    // ---- test ----
    /// Requests per client, or 'allkeys' (default: 10000).
    #[arg(short = 'n', long)]
    pub requests: Option<String>,
    /// Clients (connections) per thread (default: 50).
    #[arg(short = 'c', long)]
    pub clients: Option<u32>,
    /// Threads (default: 4).
    #[arg(short = 't', long)]
    pub threads: Option<u32>,
    /// Seconds to run the test.
    #[arg(long = "test-time")]
    pub test_time: Option<u64>,
    /// Set:Get ratio (default: 1:10).
    #[arg(long)]
    pub ratio: Option<String>,
    /// Concurrent pipelined requests per connection (default: 1).
    #[arg(long)]
    pub pipeline: Option<u32>,
    /// Reconnect after this many requests.
    #[arg(long = "reconnect-interval")]
    pub reconnect_interval: Option<u64>,
    /// Reconnect (up to 3 tries) when a connection fails mid-run.
    #[arg(long = "reconnect-on-error")]
    pub reconnect_on_error: bool,
    /// Connection timeout in seconds, 0 for keel-bench's safety default of 10 s.
    #[arg(long = "connection-timeout")]
    pub connection_timeout: Option<u64>,
    /// Multi-key GET (MGET / `get k1 k2 ...`) of up to NUM keys.
    #[arg(long = "multi-key-get")]
    pub multi_key_get: Option<u32>,
    /// DB number to SELECT.
    #[arg(long = "select-db")]
    pub select_db: Option<u32>,
    /// Use a different random seed for each client.
    #[arg(long = "distinct-client-seed")]
    pub distinct_client_seed: bool,
    /// Random seed based on the time (default is a constant seed).
    #[arg(long)]
    pub randomize: bool,
    /// memtier's per-connection rate limit (requests/s per connection).
    #[arg(long = "rate-limiting")]
    pub rate_limiting: Option<f64>,

    // ---- arbitrary commands ----
    /// An arbitrary command, with __key__ and __data__ placeholders. Repeatable.
    #[arg(long = "command")]
    pub command: Vec<String>,
    /// Times the preceding --command is sent in sequence (default: 1).
    #[arg(long = "command-ratio")]
    pub command_ratio: Vec<String>,
    /// Key pattern of the preceding --command: R, S, G, Z or P (default: R).
    #[arg(long = "command-key-pattern")]
    pub command_key_pattern: Vec<String>,

    // ---- objects ----
    /// Object data size in bytes (default: 32).
    #[arg(short = 'd', long = "data-size")]
    pub data_size: Option<u32>,
    /// Randomize the data.
    #[arg(short = 'R', long = "random-data")]
    pub random_data: bool,
    /// Random sizes in MIN-MAX.
    #[arg(long = "data-size-range")]
    pub data_size_range: Option<String>,
    /// Sizes from a weight list: size1:weight1,...,sizeN:weightN.
    #[arg(long = "data-size-list")]
    pub data_size_list: Option<String>,
    /// R: random size in the range; S: sizes spread over the key range.
    #[arg(long = "data-size-pattern")]
    pub data_size_pattern: Option<String>,
    /// Random expiry (seconds) in MIN-MAX.
    #[arg(long = "expiry-range")]
    pub expiry_range: Option<String>,

    // ---- keys ----
    /// Key prefix (default: "memtier-").
    #[arg(long = "key-prefix")]
    pub key_prefix: Option<String>,
    /// Key ID minimum (default: 0).
    #[arg(long = "key-minimum")]
    pub key_minimum: Option<u64>,
    /// Key ID maximum (default: 10000000).
    #[arg(long = "key-maximum")]
    pub key_maximum: Option<u64>,
    /// SET:GET key pattern, each of R, S, G, Z, P (default: R:R).
    #[arg(long = "key-pattern")]
    pub key_pattern: Option<String>,
    /// Standard deviation of the Gaussian pattern (default: range/6).
    #[arg(long = "key-stddev")]
    pub key_stddev: Option<f64>,
    /// Median of the Gaussian pattern (default: middle of the range).
    #[arg(long = "key-median")]
    pub key_median: Option<f64>,
    /// Zipf exponent, in (0, 5) (default: 1).
    #[arg(long = "key-zipf-exp")]
    pub key_zipf_exp: Option<f64>,

    // ---- keel-bench extensions ----
    /// Open loop: R requests per second in total; latency measured from each
    /// request's intended start (coordinated omission corrected).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Compare two targets (URI, host:port or unix socket path): runs are
    /// alternated A, B, A, B. Give twice, or once as A,B.
    #[arg(long, value_delimiter = ',')]
    pub compare: Vec<String>,
    /// Write a self-contained HTML report to FILE.
    #[arg(long)]
    pub report: Option<String>,
    /// Load a scenario: a built-in name (see --list-scenarios) or a TOML file.
    /// Options given on the command line override the scenario's.
    #[arg(long)]
    pub scenario: Option<String>,
    /// List the built-in scenarios and exit.
    #[arg(long = "list-scenarios")]
    pub list_scenarios: bool,
    /// Seconds to wait for a reply before the connection counts as failed (default: 30).
    #[arg(long = "reply-timeout")]
    pub reply_timeout: Option<f64>,
    /// Live progress: auto (only on a terminal), always or never.
    #[arg(long)]
    pub progress: Option<String>,

    /// Position (in argv) of each --command, --command-ratio and
    /// --command-key-pattern: memtier applies the latter two to the command
    /// given last before them.
    #[arg(skip)]
    pub command_positions: CommandPositions,
}

/// argv indices of the arbitrary-command options, so `config.rs` can pair
/// each `--command-ratio` with the `--command` before it.
#[derive(Debug, Default, Clone)]
pub struct CommandPositions {
    pub command: Vec<usize>,
    pub ratio: Vec<usize>,
    pub key_pattern: Vec<usize>,
}

/// Parses argv (program name first). Errors are clap's, with its exit codes.
pub fn parse<I, T>(args: I) -> Result<Options, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let matches = Options::command().try_get_matches_from(args)?;
    let mut opts = Options::from_arg_matches(&matches)?;
    let idx = |name: &str| -> Vec<usize> {
        matches.indices_of(name).map(|i| i.collect()).unwrap_or_default()
    };
    opts.command_positions = CommandPositions {
        command: idx("command"),
        ratio: idx("command_ratio"),
        key_pattern: idx("command_key_pattern"),
    };
    Ok(opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[expect(clippy::unwrap_used)]
    fn p(args: &[&str]) -> Options {
        let mut v = vec!["keel-bench"];
        v.extend_from_slice(args);
        parse(v).unwrap()
    }

    #[test]
    fn memtier_short_and_long_forms() {
        let o = p(&["-s", "10.0.0.1", "-p", "7000", "-c", "5", "-t", "2", "-n", "100", "--ratio=1:1", "-R"]);
        assert_eq!(o.server.as_deref(), Some("10.0.0.1"));
        assert_eq!(o.port, Some(7000));
        assert_eq!(o.clients, Some(5));
        assert_eq!(o.threads, Some(2));
        assert_eq!(o.requests.as_deref(), Some("100"));
        assert_eq!(o.ratio.as_deref(), Some("1:1"));
        assert!(o.random_data);
        let o = p(&["-h", "example", "--host=other"]);
        assert_eq!(o.server.as_deref(), Some("other"));
    }

    #[test]
    fn prefixes_of_long_options_work_like_getopt() {
        let o = p(&["--test-t=5", "--hide-hist"]);
        assert_eq!(o.test_time, Some(5));
        assert!(o.hide_histogram);
    }

    #[test]
    fn command_positions_are_kept() {
        let o = p(&["--command=set __key__ __data__", "--command-ratio=2", "--command=get __key__", "--command-key-pattern=G"]);
        assert_eq!(o.command.len(), 2);
        assert!(o.command_positions.command[0] < o.command_positions.ratio[0]);
        assert!(o.command_positions.key_pattern[0] > o.command_positions.command[1]);
    }

    #[test]
    fn unknown_option_is_an_error() {
        assert!(parse(["keel-bench", "--no-such-option"]).is_err());
        assert!(parse(["keel-bench", "-c", "many"]).is_err());
    }
}
