//! Scenario files: named experiments (design.md's W1 and W2 variants) as
//! TOML, so a figure can be reproduced with `--scenario w1` instead of a
//! remembered command line.
//!
//! Format:
//! ```toml
//! name = "w1"
//! description = "..."
//! [options]            # long option names, as on the command line
//! clients = 100
//! ratio = "1:1"
//! random-data = true   # flags: true to set
//! [[command]]          # optional arbitrary commands, in order
//! text = "set __key__ __data__"
//! ratio = 1
//! key-pattern = "R"
//! ```
//! A scenario becomes command-line arguments placed *before* the user's,
//! so anything typed on the command line overrides it; options that would
//! conflict with the user's (e.g. the scenario's --test-time when the user
//! gave -n) are dropped.

use crate::cli::Options;
use crate::BenchError;

/// Built-in scenarios, compiled in so the binary needs no data files.
pub const BUILTIN: &[(&str, &str)] = &[
    ("w1", include_str!("../scenarios/w1.toml")),
    ("w2-100b-rw1-1", include_str!("../scenarios/w2-100b-rw1-1.toml")),
    ("w2-100b-rw1-9", include_str!("../scenarios/w2-100b-rw1-9.toml")),
    ("w2-100b-rw9-1", include_str!("../scenarios/w2-100b-rw9-1.toml")),
    ("w2-6000b-rw1-1", include_str!("../scenarios/w2-6000b-rw1-1.toml")),
    ("w2-6000b-rw1-9", include_str!("../scenarios/w2-6000b-rw1-9.toml")),
    ("w2-6000b-rw9-1", include_str!("../scenarios/w2-6000b-rw9-1.toml")),
];

/// A loaded scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// (long option name, value); value None for a flag.
    pub options: Vec<(String, Option<String>)>,
}

fn err(m: String) -> BenchError {
    BenchError::Usage(m)
}

/// Parses scenario TOML text.
pub fn parse(text: &str, origin: &str) -> Result<Scenario, BenchError> {
    let doc: toml::Table = text.parse().map_err(|e| err(format!("scenario {origin}: {e}")))?;
    let name = doc.get("name").and_then(|v| v.as_str()).unwrap_or(origin).to_string();
    let description = doc.get("description").and_then(|v| v.as_str()).unwrap_or("").to_string();
    let mut options = Vec::new();
    if let Some(t) = doc.get("options") {
        let t = t.as_table().ok_or_else(|| err(format!("scenario {origin}: [options] must be a table")))?;
        for (k, v) in t {
            match v {
                toml::Value::Boolean(true) => options.push((k.clone(), None)),
                toml::Value::Boolean(false) => {}
                toml::Value::String(s) => options.push((k.clone(), Some(s.clone()))),
                toml::Value::Integer(i) => options.push((k.clone(), Some(i.to_string()))),
                toml::Value::Float(f) => options.push((k.clone(), Some(f.to_string()))),
                _ => return Err(err(format!("scenario {origin}: option '{k}' must be a string, number or boolean"))),
            }
        }
    }
    if let Some(cmds) = doc.get("command") {
        let arr = cmds.as_array().ok_or_else(|| err(format!("scenario {origin}: use [[command]] tables")))?;
        for c in arr {
            let text = c.get("text").and_then(|v| v.as_str()).ok_or_else(|| err(format!("scenario {origin}: [[command]] needs text")))?;
            options.push(("command".into(), Some(text.to_string())));
            if let Some(r) = c.get("ratio").and_then(|v| v.as_integer()) {
                options.push(("command-ratio".into(), Some(r.to_string())));
            }
            if let Some(p) = c.get("key-pattern").and_then(|v| v.as_str()) {
                options.push(("command-key-pattern".into(), Some(p.to_string())));
            }
        }
    }
    Ok(Scenario { name, description, options })
}

/// Finds a scenario by built-in name or file path.
pub fn load(name_or_path: &str) -> Result<Scenario, BenchError> {
    if let Some((n, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
        return parse(text, n);
    }
    match std::fs::read_to_string(name_or_path) {
        Ok(text) => parse(&text, name_or_path),
        Err(e) => {
            let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
            Err(err(format!("scenario '{name_or_path}': not a built-in scenario ({}) and not a readable file: {e}", names.join(", "))))
        }
    }
}

/// The scenario's options as arguments, leaving out those that conflict
/// with what the user typed.
pub fn to_args(s: &Scenario, user: &Options) -> Vec<String> {
    let user_sizes = user.data_size.is_some() || user.data_size_range.is_some() || user.data_size_list.is_some();
    let user_target = user.server.is_some() || user.port.is_some() || user.unix_socket.is_some() || user.uri.is_some();
    let mut out = Vec::new();
    for (k, v) in &s.options {
        let skip = match k.as_str() {
            "test-time" => user.requests.is_some(),
            "requests" => user.test_time.is_some(),
            "data-size" | "data-size-range" | "data-size-list" => user_sizes,
            "server" | "host" | "port" | "unix-socket" | "uri" => user_target,
            "command" | "command-ratio" | "command-key-pattern" => !user.command.is_empty(),
            _ => false,
        };
        if skip {
            continue;
        }
        match v {
            None => out.push(format!("--{k}")),
            Some(v) => out.push(format!("--{k}={v}")),
        }
    }
    out
}

/// `--list-scenarios` text.
pub fn list() -> String {
    let mut s = String::new();
    for (n, text) in BUILTIN {
        let d = parse(text, n).map(|s| s.description).unwrap_or_default();
        s.push_str(&format!("{n:<16} {d}\n"));
    }
    s
}

#[cfg(test)]
#[expect(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::cli;
    use crate::config::{Config, Limit, SizeSpec};

    #[test]
    fn builtins_parse_and_validate() {
        for (n, _) in BUILTIN {
            let s = load(n).unwrap();
            let user = cli::parse(["keel-bench"]).unwrap();
            let mut argv = vec!["keel-bench".to_string()];
            argv.extend(to_args(&s, &user));
            let o = cli::parse(argv).unwrap();
            Config::from_options(&o).unwrap();
        }
    }

    #[test]
    fn w1_and_w2_capture_the_design() {
        let user = cli::parse(["keel-bench"]).unwrap();
        let cfg = |name: &str| {
            let mut argv = vec!["keel-bench".to_string()];
            argv.extend(to_args(&load(name).unwrap(), &user));
            Config::from_options(&cli::parse(argv).unwrap()).unwrap()
        };
        let w1 = cfg("w1");
        assert_eq!(w1.connections(), 100);
        assert_eq!(w1.ratio, (1, 1));
        assert_eq!(w1.data.sizes, SizeSpec::Range { min: 100, max: 1000 });
        let w2 = cfg("w2-6000b-rw1-9");
        assert_eq!((w2.threads, w2.clients, w2.pipeline), (1, 70, 20));
        assert_eq!(w2.data.sizes, SizeSpec::Fixed(6000));
        assert_eq!(w2.ratio, (9, 1), "read:write 1:9 is SET:GET 9:1");
    }

    #[test]
    fn user_options_override_and_conflicts_drop() {
        let s = load("w1").unwrap();
        let user = cli::parse(["keel-bench", "-n", "100", "-d", "10"]).unwrap();
        let mut argv = vec!["keel-bench".to_string()];
        argv.extend(to_args(&s, &user));
        argv.extend(["-n", "100", "-d", "10", "--clients", "3"].map(String::from));
        let c = Config::from_options(&cli::parse(argv).unwrap()).unwrap();
        assert_eq!(c.limit, Limit::Requests(100));
        assert_eq!(c.data.sizes, SizeSpec::Fixed(10));
        assert_eq!(c.clients, 3);
        assert_eq!(c.ratio, (1, 1));
    }

    #[test]
    fn commands_and_errors() {
        let s = parse("[options]\nclients = 2\n[[command]]\ntext = \"incr __key__\"\nratio = 2\nkey-pattern = \"S\"\n", "t").unwrap();
        assert_eq!(s.options.len(), 4);
        assert!(parse("[options]\nclients = [1]\n", "t").is_err());
        assert!(load("no-such-scenario-anywhere").is_err());
    }
}
