//! Any bytes given to the decoders a Lua script can call on what it read
//! (`cjson.decode`, `cmsgpack.unpack`): a value or an error, never a
//! panic, and never a stack overflow however deep the nesting.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    keel_server::scripting::decode_untrusted(data);
});
