//! Any bytes as a stream in a DUMP payload (type 19, or 15 with the first
//! byte odd): whatever `keel-rdb` accepts, the engine must accept too
//! (`keel-server` trusts it to), and every stream operation on it must
//! answer without panicking and leave nodes that load again as they are.
#![no_main]

use keel_engine::stream::{NodeLimits, Stream, StreamId, Trim};
use keel_rdb::{crc64, restore_payload, RdbValue};
use libfuzzer_sys::fuzz_target;

fn reloads(s: &Stream) {
    let nodes: Vec<(StreamId, Vec<u8>)> = s.nodes().map(|(id, lp)| (id, lp.to_vec())).collect();
    let back = Stream::from_nodes(nodes).expect("nodes the engine wrote load again");
    assert_eq!(back.len(), s.len());
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else { return };
    let mut payload = vec![if mode & 1 == 1 { 15 } else { 19 }];
    payload.extend_from_slice(body);
    payload.extend_from_slice(&10u16.to_le_bytes());
    let crc = crc64(0, &payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    let Ok(RdbValue::Stream(st)) = restore_payload(&payload) else { return };
    let nodes = st.nodes.iter().map(|((ms, seq), lp)| (StreamId::new(*ms, *seq), lp.clone())).collect();
    let mut s = Stream::from_nodes(nodes).expect("the engine accepts what keel-rdb accepts");
    assert_eq!(s.len(), st.length);
    let all = s.range(StreamId::MIN, StreamId::MAX, false, 0);
    assert_eq!(all.len() as u64, s.len());
    let mut back = s.range(StreamId::MIN, StreamId::MAX, true, 0);
    back.reverse();
    assert_eq!(back, all);
    s.last_id = StreamId::new(st.last_id.0, st.last_id.1);
    let limits = NodeLimits { max_bytes: 200 + usize::from(mode >> 4) * 100, max_entries: usize::from(mode >> 1 & 7) };
    if let Some(first) = all.first() {
        assert!(s.delete(first.id));
    }
    if let Ok(id) = s.next_id(None, true, s.last_id.ms.saturating_add(1)) {
        let _ = s.append(id, &[b"f", b"v"], limits);
    }
    reloads(&s);
    s.trim(Trim::MaxLen(u64::from(mode >> 3)), mode & 2 == 2, 0);
    reloads(&s);
    if let Some(e) = all.get(all.len() / 2) {
        s.trim(Trim::MinId(e.id), mode & 4 == 4, 0);
    }
    reloads(&s);
});
