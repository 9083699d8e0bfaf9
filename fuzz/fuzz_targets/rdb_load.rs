//! Any bytes: the RDB reader and `restore_payload` must give items or an
//! error, never panic or over-allocate; and every value they decode must
//! survive `dump_payload` → `restore_payload` unchanged.
#![no_main]

use keel_rdb::{crc64, dump_payload, restore_payload, EncodeOptions, RdbItem, RdbReader, RdbValue, Thresholds};
use libfuzzer_sys::fuzz_target;

/// Unordered collections sorted, scores by their bits.
fn canonical(v: &RdbValue) -> RdbValue {
    let mut v = v.clone();
    match &mut v {
        RdbValue::String(_) | RdbValue::List(_) | RdbValue::Stream(_) => {}
        RdbValue::Set(s) => s.sort(),
        RdbValue::Hash(h) => h.sort(),
        RdbValue::ZSet(z) => z.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.to_bits().cmp(&b.1.to_bits()))),
    }
    v
}

fn round_trips(v: &RdbValue, small: bool) {
    let options = if small {
        let thresholds = Thresholds {
            hash_max_listpack_entries: 2,
            hash_max_listpack_value: 4,
            set_max_intset_entries: 2,
            zset_max_listpack_entries: 2,
            zset_max_listpack_value: 4,
            list_max_listpack_bytes: 16,
            list_packed_threshold: 8,
        };
        EncodeOptions { compression: true, thresholds }
    } else {
        EncodeOptions::default()
    };
    let back = restore_payload(&dump_payload(v, &options)).expect("our own payload decodes");
    let (a, b) = (canonical(v), canonical(&back));
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

fn read_file(file: &[u8], small: bool) {
    let Ok(reader) = RdbReader::new(file) else { return };
    for item in reader {
        match item {
            Ok(RdbItem::Entry(e)) => round_trips(&e.value, small),
            Ok(_) => {}
            Err(_) => break,
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, body)) = data.split_first() else { return };
    let small = mode & 1 == 1;
    // As given, and behind a valid header so that the fuzzer need not
    // find one.
    read_file(data, small);
    let mut file = b"REDIS0010".to_vec();
    file.extend_from_slice(body);
    read_file(&file, small);

    // As given (almost always a checksum error), and with a valid footer so
    // that the value decoder is reached.
    if let Ok(v) = restore_payload(data) {
        round_trips(&v, small);
    }
    let mut payload = body.to_vec();
    payload.extend_from_slice(&10u16.to_le_bytes());
    let crc = crc64(0, &payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    if let Ok(v) = restore_payload(&payload) {
        round_trips(&v, small);
    }
});
