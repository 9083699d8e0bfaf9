//! nodes.conf and CLUSTER NODES lines (`keel-cluster`) from arbitrary
//! text: parsing never panics, and what parses writes out to text that
//! parses to the same nodes.
#![no_main]
use keel_cluster::{NodeLine, NodesFile};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    for line in text.lines() {
        if let Ok(node) = NodeLine::parse(line) {
            let mut out = String::new();
            node.write(&mut out);
            assert_eq!(NodeLine::parse(&out).expect("a written line parses"), node);
        }
    }
    if let Ok(file) = NodesFile::parse(text) {
        assert_eq!(NodesFile::parse(&file.write()).expect("a written file parses"), file);
    }
});
