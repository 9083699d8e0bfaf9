#![allow(clippy::unwrap_used)]

use proptest::prelude::*;

use super::*;
use crate::flags;

fn name(fill: u8) -> NodeName {
    NodeName([fill; NAME_LEN])
}

fn header() -> Header {
    let mut slots = SlotBitmap::empty();
    for slot in [0, 1, 5000, 16383] {
        slots.set(slot);
    }
    Header {
        port: 7000,
        pport: 0,
        cport: 17000,
        current_epoch: 7,
        config_epoch: 3,
        offset: 123_456,
        sender: name(b'a'),
        slots,
        replica_of: None,
        ip: "10.0.0.1".into(),
        flags: flags::MASTER,
        state_ok: true,
        mflags: [0; 3],
    }
}

fn gossip(fill: u8) -> Gossip {
    Gossip { name: name(fill), ping_sent: 1, pong_received: 2, ip: "::1".into(), port: 7001, cport: 17001, flags: flags::REPLICA | flags::PFAIL, pport: 6379 }
}

fn every_body() -> Vec<Body> {
    let mut slots = SlotBitmap::empty();
    slots.set(42);
    vec![
        Body::Ping { gossip: vec![gossip(b'b'), gossip(b'c')], extensions: vec![Extension::Hostname("host-1.example".into())] },
        Body::Pong { gossip: vec![], extensions: vec![] },
        Body::Meet { gossip: vec![gossip(b'd')], extensions: vec![Extension::Hostname(String::new()), Extension::Hostname("1234567".into())] },
        Body::Fail { name: name(b'e') },
        Body::Publish { channel: b"news".to_vec(), message: b"hello".to_vec() },
        Body::PublishShard { channel: vec![], message: vec![0, 1, 2] },
        Body::FailoverAuthRequest,
        Body::FailoverAuthAck,
        Body::MfStart,
        Body::Update { config_epoch: 9, name: name(b'f'), slots },
        Body::Module { module_id: 0x0102_0304_0506_0708, kind: 5, payload: b"payload".to_vec() },
    ]
}

/// A message as decode returns it: EXT_DATA is set exactly when there are
/// extensions (encode sets it; nothing clears it).
fn message(body: Body) -> Message {
    let mut header = header();
    if matches!(&body, Body::Ping { extensions, .. } | Body::Pong { extensions, .. } | Body::Meet { extensions, .. } if !extensions.is_empty()) {
        header.mflags[0] |= mflags::EXT_DATA;
    }
    Message { header, body }
}

fn set_u16(frame: &mut [u8], at: usize, value: u16) {
    frame[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

fn set_u32(frame: &mut [u8], at: usize, value: u32) {
    frame[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

#[test]
fn every_type_round_trips() {
    for body in every_body() {
        let message = message(body);
        let frame = message.encode();
        assert_eq!(frame_len(&frame).unwrap(), Some(frame.len()));
        assert_eq!(Message::decode(&frame).unwrap(), message);
        assert_eq!(usize::from(u16::from_be_bytes([frame[12], frame[13]])), message.kind() as usize);
    }
}

#[test]
fn layout_matches_redis_offsets() {
    let mut m = message(Body::Ping { gossip: vec![gossip(b'b')], extensions: vec![Extension::Hostname("abc".into())] });
    m.header.replica_of = Some(name(b'9'));
    m.header.mflags[0] |= mflags::PAUSED;
    let frame = m.encode();
    assert_eq!(&frame[..4], b"RCmb");
    assert_eq!(u32::from_be_bytes(frame[4..8].try_into().unwrap()) as usize, frame.len());
    assert_eq!(frame.len(), HEADER_LEN + GOSSIP_LEN + 8 + 8);
    assert_eq!(&frame[8..10], &[0, 1]);
    assert_eq!(&frame[10..12], &7000u16.to_be_bytes());
    assert_eq!(&frame[14..16], &[0, 1]);
    assert_eq!(&frame[16..24], &7u64.to_be_bytes());
    assert_eq!(&frame[40..80], &[b'a'; 40]);
    assert_eq!(frame[80], 0b11);
    assert_eq!(&frame[2128..2168], &[b'9'; 40]);
    assert_eq!(&frame[2168..2177], b"10.0.0.1\0");
    assert_eq!(&frame[2214..2216], &[0, 1]);
    assert_eq!(&frame[2248..2250], &17000u16.to_be_bytes());
    assert_eq!(frame[2252], 0);
    assert_eq!(frame[2253], mflags::PAUSED | mflags::EXT_DATA);
    let ext = &frame[HEADER_LEN + GOSSIP_LEN..];
    assert_eq!(ext, &[0, 0, 0, 16, 0, 0, 0, 0, b'a', b'b', b'c', 0, 0, 0, 0, 0]);
    assert_eq!(Message::decode(&frame).unwrap(), m);
}

#[test]
fn frame_len_waits_for_eight_bytes_and_checks_them() {
    let frame = message(Body::MfStart).encode();
    for cut in 0..8 {
        assert_eq!(frame_len(&frame[..cut]), Ok(None));
    }
    assert_eq!(frame_len(&frame[..8]), Ok(Some(HEADER_LEN)));
    assert_eq!(frame_len(b"RCmX\0\0\x10\0"), Err(BusError::BadSignature));
    assert_eq!(frame_len(b"RCmb\0\0\x08\xcf"), Err(BusError::TooShort { totlen: 2255 }));
}

#[test]
fn rejects_short_frames_and_bad_headers() {
    let frame = message(Body::FailoverAuthAck).encode();
    assert_eq!(Message::decode(&frame[..100]), Err(BusError::Short { len: 100 }));
    assert_eq!(Message::decode(&frame[..2]), Err(BusError::Short { len: 2 }));
    assert_eq!(Message::decode(b"XXXX"), Err(BusError::BadSignature));

    let mut bad = frame.clone();
    bad[0] = b'r';
    assert_eq!(Message::decode(&bad), Err(BusError::BadSignature));

    let mut bad = frame.clone();
    set_u16(&mut bad, 8, 2);
    assert_eq!(Message::decode(&bad), Err(BusError::Version(2)));

    let mut bad = frame.clone();
    set_u16(&mut bad, 12, 11);
    assert_eq!(Message::decode(&bad), Err(BusError::UnknownType(11)));

    let mut longer = frame.clone();
    longer.push(0);
    assert_eq!(Message::decode(&longer), Err(BusError::FrameMismatch { totlen: HEADER_LEN as u32, frame: HEADER_LEN + 1 }));
}

/// Every type refuses a frame one byte longer than its fields imply
/// (totlen kept equal to the frame, as a sender would have written it).
#[test]
fn rejects_a_length_mismatch_for_every_type() {
    for body in every_body() {
        let m = message(body);
        let mut frame = m.encode();
        frame.push(0);
        let totlen = frame.len() as u32;
        set_u32(&mut frame, 4, totlen);
        match Message::decode(&frame) {
            Err(BusError::BadLength { kind, totlen: got, expected }) => {
                assert_eq!((kind, got, expected), (m.kind(), totlen, u64::from(totlen) - 1));
            }
            other => panic!("{:?}: {other:?}", m.kind()),
        }
    }
}

#[test]
fn rejects_too_many_gossip_entries() {
    let mut frame = message(Body::Pong { gossip: vec![gossip(b'b')], extensions: vec![] }).encode();
    set_u16(&mut frame, 14, 2);
    assert_eq!(Message::decode(&frame), Err(BusError::GossipCountTooLarge { kind: MessageType::Pong, count: 2, totlen: frame.len() as u32 }));
    set_u16(&mut frame, 14, 0);
    assert!(matches!(Message::decode(&frame), Err(BusError::BadLength { .. })));
}

#[test]
fn rejects_bad_extension_lengths() {
    let m = message(Body::Ping { gossip: vec![], extensions: vec![Extension::Hostname("abc".into())] });
    let good = m.encode();
    let ext_at = HEADER_LEN;

    let mut bad = good.clone();
    set_u32(&mut bad, ext_at, 12);
    assert_eq!(Message::decode(&bad), Err(BusError::ExtensionPadding { length: 12 }));

    let mut bad = good.clone();
    set_u32(&mut bad, ext_at, 24);
    assert_eq!(Message::decode(&bad), Err(BusError::ExtensionTooLong { length: 24, left: 16 }));

    let mut bad = good.clone();
    set_u32(&mut bad, ext_at, 0);
    assert_eq!(Message::decode(&bad), Err(BusError::ExtensionTooShort { length: 0 }));

    // A second extension announced but absent.
    let mut bad = good.clone();
    set_u16(&mut bad, 2214, 2);
    assert_eq!(Message::decode(&bad), Err(BusError::ExtensionTooLong { length: 8, left: 0 }));

    // Fewer extensions announced than sent: the rest is a bad length.
    let mut bad = good.clone();
    set_u16(&mut bad, 2214, 0);
    assert!(matches!(Message::decode(&bad), Err(BusError::BadLength { .. })));

    // Without EXT_DATA the extension count is ignored, so the bytes are
    // a bad length too.
    let mut bad = good.clone();
    bad[2253] = 0;
    assert!(matches!(Message::decode(&bad), Err(BusError::BadLength { .. })));

    let mut bad = good.clone();
    bad[ext_at + 8..ext_at + 16].copy_from_slice(b"abcdefgh");
    assert_eq!(Message::decode(&bad), Err(BusError::HostnameUnterminated));

    let mut bad = good;
    bad[ext_at + 8] = 0xff;
    assert_eq!(Message::decode(&bad), Err(BusError::NotText("hostname")));
}

#[test]
fn skips_unknown_extension_types() {
    let mut frame = message(Body::Meet { gossip: vec![], extensions: vec![Extension::Hostname("a".into()), Extension::Hostname("b".into())] }).encode();
    set_u16(&mut frame, HEADER_LEN + 4, 7);
    let decoded = Message::decode(&frame).unwrap();
    assert_eq!(decoded.body, Body::Meet { gossip: vec![], extensions: vec![Extension::Hostname("b".into())] });
}

#[test]
fn rejects_publish_and_module_lengths_that_disagree() {
    let mut frame = message(Body::Publish { channel: b"c".to_vec(), message: b"m".to_vec() }).encode();
    set_u32(&mut frame, HEADER_LEN, u32::MAX);
    let totlen = frame.len() as u32;
    assert_eq!(Message::decode(&frame), Err(BusError::BadLength { kind: MessageType::Publish, totlen, expected: HEADER_LEN as u64 + 8 + u64::from(u32::MAX) + 1 }));

    let mut frame = message(Body::FailoverAuthRequest).encode();
    set_u16(&mut frame, 12, MessageType::Module.code());
    assert_eq!(Message::decode(&frame), Err(BusError::BadLength { kind: MessageType::Module, totlen: HEADER_LEN as u32, expected: (HEADER_LEN + 13) as u64 }));
    set_u16(&mut frame, 12, MessageType::PublishShard.code());
    assert_eq!(Message::decode(&frame), Err(BusError::BadLength { kind: MessageType::PublishShard, totlen: HEADER_LEN as u32, expected: (HEADER_LEN + 8) as u64 }));
}

#[test]
fn header_text_and_state_edges() {
    let mut m = message(Body::MfStart);
    m.header.ip = "x".repeat(60);
    let decoded = Message::decode(&m.encode()).unwrap();
    assert_eq!(decoded.header.ip, "x".repeat(45));

    let mut frame = message(Body::MfStart).encode();
    frame[2252] = 1;
    assert!(!Message::decode(&frame).unwrap().header.state_ok);
    frame[2168] = 0xc0;
    assert_eq!(Message::decode(&frame), Err(BusError::NotText("myip")));
}

fn text(max: usize) -> impl Strategy<Value = String> {
    proptest::collection::vec(proptest::char::range('!', '~'), 0..=max).prop_map(|chars| chars.into_iter().collect())
}

fn any_name() -> impl Strategy<Value = NodeName> {
    any::<[u8; NAME_LEN]>().prop_map(NodeName)
}

fn any_slots() -> impl Strategy<Value = SlotBitmap> {
    proptest::collection::vec(0..SLOTS as u16, 0..50).prop_map(|slots| {
        let mut bitmap = SlotBitmap::empty();
        slots.into_iter().for_each(|slot| bitmap.set(slot));
        bitmap
    })
}

fn any_gossip() -> impl Strategy<Value = Gossip> {
    (any_name(), any::<u32>(), any::<u32>(), text(45), any::<[u16; 4]>()).prop_map(|(name, ping_sent, pong_received, ip, [port, cport, flags, pport])| Gossip { name, ping_sent, pong_received, ip, port, cport, flags, pport })
}

fn any_body() -> impl Strategy<Value = Body> {
    let gossip = || proptest::collection::vec(any_gossip(), 0..5);
    let extensions = || proptest::collection::vec(text(30).prop_map(Extension::Hostname), 0..3);
    let bytes = || proptest::collection::vec(any::<u8>(), 0..40);
    prop_oneof![
        (gossip(), extensions()).prop_map(|(gossip, extensions)| Body::Ping { gossip, extensions }),
        (gossip(), extensions()).prop_map(|(gossip, extensions)| Body::Pong { gossip, extensions }),
        (gossip(), extensions()).prop_map(|(gossip, extensions)| Body::Meet { gossip, extensions }),
        any_name().prop_map(|name| Body::Fail { name }),
        (bytes(), bytes()).prop_map(|(channel, message)| Body::Publish { channel, message }),
        (bytes(), bytes()).prop_map(|(channel, message)| Body::PublishShard { channel, message }),
        Just(Body::FailoverAuthRequest),
        Just(Body::FailoverAuthAck),
        Just(Body::MfStart),
        (any::<u64>(), any_name(), any_slots()).prop_map(|(config_epoch, name, slots)| Body::Update { config_epoch, name, slots }),
        (any::<u64>(), any::<u8>(), bytes()).prop_map(|(module_id, kind, payload)| Body::Module { module_id, kind, payload }),
    ]
}

fn any_header() -> impl Strategy<Value = Header> {
    (any::<[u16; 4]>(), any::<[u64; 3]>(), any_name(), any_slots(), proptest::option::of(any_name().prop_filter("not all zero", |n| n.0 != [0; NAME_LEN])), text(45), any::<bool>(), any::<[u8; 3]>()).prop_map(
        |([port, pport, cport, flags], [current_epoch, config_epoch, offset], sender, slots, replica_of, ip, state_ok, mflags)| Header {
            port,
            pport,
            cport,
            current_epoch,
            config_epoch,
            offset,
            sender,
            slots,
            replica_of,
            ip,
            flags,
            state_ok,
            mflags,
        },
    )
}

proptest! {
    #[test]
    fn any_message_round_trips(header in any_header(), body in any_body()) {
        let message = Message { header, body };
        let frame = message.encode();
        prop_assert_eq!(frame_len(&frame).unwrap(), Some(frame.len()));
        let decoded = Message::decode(&frame).unwrap();
        // EXT_DATA is the one header bit encode may add.
        let mut want = message.clone();
        if matches!(&want.body, Body::Ping { extensions, .. } | Body::Pong { extensions, .. } | Body::Meet { extensions, .. } if !extensions.is_empty()) {
            want.header.mflags[0] |= mflags::EXT_DATA;
        }
        prop_assert_eq!(decoded, want);
    }
}
