//! Any value for any directive through CONFIG SET: it applies or is
//! refused with Redis's error, never a panic; a refusal changes nothing;
//! and what CONFIG GET then shows, set back, is accepted and shows the
//! same (a client's CONFIG GET output is always a valid CONFIG SET).
#![no_main]

use keel_server::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, value)) = data.split_first() else { return };
    let Ok(value) = std::str::from_utf8(value) else { return };
    let mut config = Config::default();
    let names: Vec<&'static str> = config.matching(b"*").map(|(name, _)| name).collect();
    let name = names[usize::from(pick) % names.len()];
    let before: Vec<_> = config.matching(b"*").collect();
    if config.set_at_runtime(name, value).is_err() {
        assert_eq!(config.matching(b"*").collect::<Vec<_>>(), before, "a refused CONFIG SET {name} changed the configuration");
        return;
    }
    let shown = config.get(name).expect("a set directive shows");
    let after: Vec<_> = config.matching(b"*").collect();
    config.set_at_runtime(name, &shown).unwrap_or_else(|e| panic!("CONFIG SET {name} of its own CONFIG GET {shown:?}: {e}"));
    assert_eq!(config.matching(b"*").collect::<Vec<_>>(), after, "CONFIG SET {name} {shown:?} changed what it showed");
});
