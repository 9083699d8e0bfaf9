//! The process title (`set-proc-title`, `proc-title-template`): what `ps`
//! and `/proc/<pid>/cmdline` show for the server, as Redis's
//! setproctitle.c sets it.
//!
//! Linux shows a process's command line from the memory its arguments
//! came in, and a title that overruns their last byte goes on into the
//! environment's strings, which lie just after them. So at start, before
//! any thread runs, [`claim`] moves the environment's strings to the heap
//! (Redis does the same) and keeps that memory; [`apply`] then writes the
//! title over it. `std::env::args` reads the same memory, so the server
//! reads its arguments before [`claim`].

use std::ffi::{c_char, CStr};

use parking_lot::Mutex;

use crate::config::Config;

/// Where the arguments and the environment's strings were: one run of
/// bytes, the title's room.
struct Area {
    start: usize,
    len: usize,
    /// The program as the command line named it: the template's `{title}`.
    program: String,
}

static AREA: Mutex<Option<Area>> = Mutex::new(None);

extern "C" {
    static mut environ: *mut *mut c_char;
    static mut program_invocation_name: *mut c_char;
    static mut program_invocation_short_name: *mut c_char;
}

/// Takes the memory of the arguments and the environment for the title.
/// Must run before any other thread starts (it replaces `environ`) and
/// after the arguments were read. Without `/proc`, there is no title.
pub fn claim(program: &str) {
    let Some((arg_start, arg_end, env_start, env_end)) = command_line_bounds() else { return };
    // Only one run of bytes can be taken: the environment's strings must
    // follow the arguments, as the kernel lays them out.
    let end = if env_start == arg_end && env_end > env_start { env_end } else { arg_end };
    // SAFETY: single-threaded (the caller's contract), so nothing reads
    // `environ` or glibc's program names while they are replaced; each
    // string is copied before its old memory is given to the title, and
    // the copies are leaked because they must live as long as the process.
    unsafe {
        let mut copies = Vec::new();
        let mut entry = environ;
        while !entry.is_null() && !(*entry).is_null() {
            copies.push(CStr::from_ptr(*entry).to_owned().into_raw());
            entry = entry.add(1);
        }
        copies.push(std::ptr::null_mut());
        environ = Box::leak(copies.into_boxed_slice()).as_mut_ptr();
        // glibc's error messages name the program through these, which
        // point into the arguments.
        program_invocation_name = CStr::from_ptr(program_invocation_name).to_owned().into_raw();
        program_invocation_short_name = CStr::from_ptr(program_invocation_short_name).to_owned().into_raw();
    }
    *AREA.lock() = Some(Area { start: arg_start, len: end - arg_start, program: program.to_string() });
}

/// `arg_start`, `arg_end`, `env_start` and `env_end` of /proc/self/stat
/// (its fields 48 to 51, after the command name in parentheses).
fn command_line_bounds() -> Option<(usize, usize, usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Field 3 (the state) is the first after the name.
    let fields: Vec<usize> = after_name.split_whitespace().skip(45).take(4).map(|f| f.parse().ok()).collect::<Option<_>>()?;
    match fields[..] {
        [arg_start, arg_end, env_start, env_end] if arg_start < arg_end => Some((arg_start, arg_end, env_start, env_end)),
        _ => None,
    }
}

/// Sets the title `proc-title-template` makes, if `set-proc-title` is on
/// and [`claim`] found the room. A title longer than the room is cut.
pub fn apply(config: &Config) {
    if !config.set_proc_title {
        return;
    }
    let area = AREA.lock();
    let Some(area) = area.as_ref() else { return };
    let Some(title) = expand(&config.proc_title_template, &area.program, config) else { return };
    let written = title.len().min(area.len - 1);
    // SAFETY: the area is this process's own argument and environment
    // memory, which nothing reads since `claim` (the lock serializes
    // writers); a NUL always ends it.
    unsafe {
        let start = area.start as *mut u8;
        std::ptr::write_bytes(start, 0, area.len);
        std::ptr::copy_nonoverlapping(title.as_ptr(), start, written);
    }
}

/// The template with its variables replaced, spaces trimmed from both
/// ends, as Redis's `sdstemplate`: `{{` is a brace; an unknown variable
/// or an unclosed `{` makes no title.
pub fn expand(template: &str, title: &str, config: &Config) -> Option<String> {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let name = &rest[open + 1..];
        if name.is_empty() {
            return None;
        }
        if let Some(after) = name.strip_prefix('{') {
            out.push('{');
            rest = after;
            continue;
        }
        let close = name.find('}')?;
        out.push_str(&variable(&name[..close], title, config)?);
        rest = &name[close + 1..];
    }
    out.push_str(rest);
    Some(out.trim_matches(' ').to_string())
}

/// Redis's `redisProcTitleGetVariable`.
fn variable(name: &str, title: &str, config: &Config) -> Option<String> {
    let unixsocket = || config.unixsocket.as_ref().map(|p| p.display().to_string()).unwrap_or_default();
    Some(match name {
        "title" => title.to_string(),
        "listen-addr" => match (config.port, config.tls.port) {
            (0, 0) => format!("unixsocket:{}", unixsocket()),
            (0, port) | (port, _) => format!("{}:{port}", config.bind.first().map_or("*", String::as_str)),
        },
        "server-mode" if config.cluster.enabled => "[cluster]".into(),
        "server-mode" => String::new(),
        "config-file" => config.config_file.as_ref().map_or("-".into(), |p| p.display().to_string()),
        "port" => config.port.to_string(),
        "tls-port" => config.tls.port.to_string(),
        "unixsocket" => unixsocket(),
        _ => return None,
    })
}

/// Redis's `isValidProcTitleTemplate`: the template expands, to something.
pub fn is_valid_template(template: &str, config: &Config) -> bool {
    expand(template, "", config).is_some_and(|t| !t.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Config {
        let mut c = Config::default();
        c.bind = vec!["127.0.0.1".into(), "::1".into()];
        c.port = 6380;
        c
    }

    #[test]
    fn variables_and_braces_expand_as_redis_s_sdstemplate() {
        let c = config();
        let t = |template| expand(template, "keel-server", &c);
        assert_eq!(t("{title} {listen-addr} {server-mode}").as_deref(), Some("keel-server 127.0.0.1:6380"));
        assert_eq!(t("v={{{port}}} {{} x").as_deref(), Some("v={6380}} {} x"));
        assert_eq!(t("{config-file} {tls-port} [{unixsocket}]").as_deref(), Some("- 0 []"));
        assert_eq!(t("  --my--title--template ").as_deref(), Some("--my--title--template"));
        assert_eq!(t("{invalid-var}"), None);
        assert_eq!(t("v1={"), None);
        assert_eq!(t("v1={start"), None);
    }

    #[test]
    fn the_listen_address_is_the_socket_without_a_port_the_tls_port_without_a_plain_one() {
        let mut c = config();
        c.port = 0;
        c.unixsocket = Some("/tmp/keel.sock".into());
        c.cluster.enabled = true;
        assert_eq!(expand("{listen-addr} {server-mode}", "", &c).as_deref(), Some("unixsocket:/tmp/keel.sock [cluster]"));
        // TLS only: its port.
        c.tls.port = 7001;
        assert_eq!(expand("{listen-addr} {port} {tls-port}", "", &c).as_deref(), Some("127.0.0.1:7001 0 7001"));
        c.bind.clear();
        c.port = 7000;
        assert_eq!(expand("{listen-addr}", "", &c).as_deref(), Some("*:7000"));
    }

    proptest::proptest! {
        /// Any template expands or is refused, without a panic; text with
        /// no brace comes out as it went in, trimmed.
        #[test]
        fn any_template_expands_or_is_refused(template in "[ a-z{}-]{0,24}", plain in "[ a-z-]{0,24}") {
            let _ = expand(&template, "keel", &config());
            proptest::prop_assert_eq!(expand(&plain, "keel", &config()), Some(plain.trim_matches(' ').to_string()));
        }
    }

    #[test]
    fn a_template_that_expands_to_nothing_is_invalid() {
        let c = config();
        assert!(is_valid_template("{title} {listen-addr}", &c));
        assert!(!is_valid_template("{title}", &c));
        assert!(!is_valid_template(" {server-mode} ", &c));
        assert!(!is_valid_template("{bad}", &c));
    }
}
