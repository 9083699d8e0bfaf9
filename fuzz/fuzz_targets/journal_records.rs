//! The journal's AOF record reader on arbitrary bytes: a damaged or torn
//! append-only file must give an error, never a panic or an over-read.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    keel_journal::fuzzing::read_records(data);
});
