//! The journal's AOF record reader, and start-up's scan of a last incr file,
//! on arbitrary bytes: a damaged or torn append-only file must give an
//! error, never a panic or an over-read.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    keel_journal::fuzzing::read_records(data);
    keel_journal::fuzzing::scan_file(data);
});
