//! The AOF manifest parser on arbitrary bytes: never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    keel_journal::fuzzing::parse_manifest(data);
});
