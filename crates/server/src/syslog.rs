//! `syslog-enabled`: every log line also goes to the system logger, as
//! Redis sends it, through the C library's `syslog(3)` (to `/dev/log`)
//! under `syslog-ident` and `syslog-facility`. A layer beside the log
//! file's: the line goes without the file's timestamp, which syslog adds.

use std::ffi::CString;
use std::fmt::Write as _;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// `syslog-facility`'s values, as Redis names them.
const FACILITIES: [(&str, libc::c_int); 9] = [
    ("user", libc::LOG_USER),
    ("local0", libc::LOG_LOCAL0),
    ("local1", libc::LOG_LOCAL1),
    ("local2", libc::LOG_LOCAL2),
    ("local3", libc::LOG_LOCAL3),
    ("local4", libc::LOG_LOCAL4),
    ("local5", libc::LOG_LOCAL5),
    ("local6", libc::LOG_LOCAL6),
    ("local7", libc::LOG_LOCAL7),
];

/// The log's layer that sends each line to syslog.
pub struct Syslog(());

impl Syslog {
    /// Opens the connection to the system logger as Redis's `openlog`:
    /// `ident`, the pid in each line, connected at once, never waiting.
    pub fn open(ident: &str, facility: &str) -> Syslog {
        let facility = FACILITIES.iter().find(|(name, _)| *name == facility).map_or(libc::LOG_LOCAL0, |(_, f)| *f);
        // openlog keeps the pointer: the ident lives as long as the process.
        let ident: &'static CString = Box::leak(Box::new(c_string(ident)));
        // SAFETY: `ident` is a NUL-terminated string that is never freed.
        unsafe { libc::openlog(ident.as_ptr(), libc::LOG_PID | libc::LOG_NDELAY | libc::LOG_NOWAIT, facility) };
        Syslog(())
    }
}

impl<S: Subscriber> Layer<S> for Syslog {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut line = Line(String::new());
        event.record(&mut line);
        // Redis's levels: warning for warnings (and Keel's errors), notice
        // for what its `notice` and `verbose` show, debug below.
        let priority = match *event.metadata().level() {
            Level::ERROR | Level::WARN => libc::LOG_WARNING,
            Level::INFO => libc::LOG_NOTICE,
            Level::DEBUG | Level::TRACE => libc::LOG_DEBUG,
        };
        let text = c_string(&line.0);
        // SAFETY: a constant format taking one NUL-terminated string.
        unsafe { libc::syslog(priority, c"%s".as_ptr(), text.as_ptr()) };
    }
}

/// A log line's text: its message, then any other fields as `name=value`.
struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let sep = if self.0.is_empty() { "" } else { " " };
        let _ = match field.name() {
            "message" => write!(self.0, "{sep}{value:?}"),
            name => write!(self.0, "{sep}{name}={value:?}"),
        };
    }
}

/// `text` as C wants it: a NUL inside would end it early, so it goes.
fn c_string(text: &str) -> CString {
    CString::new(text.replace('\0', "")).unwrap_or_default()
}
