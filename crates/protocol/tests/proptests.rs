//! Property tests across the crate: round trips and no panics on any input.

#![allow(clippy::unwrap_used)]

use keel_protocol::{needs_repr, parse_frame, parse_request, repr, split_args, Frame, Limits, ReplyWriter};
use proptest::prelude::*;

fn encode(argv: &[Vec<u8>]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", argv.len()).into_bytes();
    for a in argv {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// A frame that `ReplyWriter` can produce, with the bytes it writes.
#[derive(Debug, Clone)]
enum Value {
    Ok,
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Vec<u8>),
    BulkInt(i64),
    Null,
    NullArray,
    Double(f64),
    Boolean(bool),
    Verbatim(String, Vec<u8>),
    BigNumber(String),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
    Set(Vec<Value>),
    Push(Vec<Value>),
}

fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Ok),
        "[a-zA-Z0-9 ]{0,20}".prop_map(Value::Simple),
        "ERR [a-z\r\n ]{0,20}".prop_map(Value::Error),
        any::<i64>().prop_map(Value::Int),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Value::Bulk),
        any::<i64>().prop_map(Value::BulkInt),
        Just(Value::Null),
        Just(Value::NullArray),
        any::<f64>().prop_map(Value::Double),
        any::<bool>().prop_map(Value::Boolean),
        ("[a-z]{3}", proptest::collection::vec(any::<u8>(), 0..32))
            .prop_map(|(f, t)| Value::Verbatim(f, t)),
        "-?[1-9][0-9]{0,40}".prop_map(Value::BigNumber),
    ];
    leaf.prop_recursive(4, 64, 8, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            proptest::collection::vec((inner.clone(), inner.clone()), 0..4).prop_map(Value::Map),
            proptest::collection::vec(inner.clone(), 0..8).prop_map(Value::Set),
            proptest::collection::vec(inner, 0..8).prop_map(Value::Push),
        ]
    })
}

fn write(w: &mut ReplyWriter<'_>, v: &Value) {
    match v {
        Value::Ok => w.ok(),
        Value::Simple(s) => w.simple(s),
        Value::Error(s) => w.error(s),
        Value::Int(i) => w.int(*i),
        Value::Bulk(b) => w.bulk(b),
        Value::BulkInt(i) => w.bulk_int(*i),
        Value::Null => w.null(),
        Value::NullArray => w.null_array(),
        Value::Double(d) => w.double(*d),
        Value::Boolean(b) => w.boolean(*b),
        Value::Verbatim(f, t) => w.verbatim(f, t),
        Value::BigNumber(d) => w.big_number(d),
        Value::Array(items) => {
            w.array(items.len());
            items.iter().for_each(|i| write(w, i));
        }
        Value::Map(pairs) => {
            w.map(pairs.len());
            for (k, v) in pairs {
                write(w, k);
                write(w, v);
            }
        }
        Value::Set(items) => {
            w.set(items.len());
            items.iter().for_each(|i| write(w, i));
        }
        Value::Push(items) => {
            w.push(items.len());
            items.iter().for_each(|i| write(w, i));
        }
    }
}

/// The frame a client must read back for `v`.
fn expected(v: &Value, resp3: bool) -> Frame {
    let g17 = |d: f64| {
        let mut out = Vec::new();
        keel_protocol::reply::format_double_g17(d, &mut out);
        out
    };
    let list = |items: &[Value]| items.iter().map(|i| expected(i, resp3)).collect::<Vec<_>>();
    match v {
        Value::Ok => Frame::Simple(b"OK".to_vec()),
        Value::Simple(s) => Frame::Simple(s.as_bytes().to_vec()),
        Value::Error(s) => Frame::Error(s.replace(['\r', '\n'], " ").into_bytes()),
        Value::Int(i) => Frame::Integer(*i),
        Value::Bulk(b) => Frame::Bulk(b.clone()),
        Value::BulkInt(i) => Frame::Bulk(i.to_string().into_bytes()),
        Value::Null | Value::NullArray => Frame::Null,
        Value::Double(d) if resp3 => Frame::Double(g17(*d)),
        Value::Double(d) => Frame::Bulk(g17(*d)),
        Value::Boolean(b) if resp3 => Frame::Boolean(*b),
        Value::Boolean(b) => Frame::Integer(i64::from(*b)),
        Value::Verbatim(f, t) if resp3 => Frame::Verbatim {
            format: f.as_bytes().to_vec(),
            text: t.clone(),
        },
        Value::Verbatim(_, t) => Frame::Bulk(t.clone()),
        Value::BigNumber(d) if resp3 => Frame::BigNumber(d.as_bytes().to_vec()),
        Value::BigNumber(d) => Frame::Bulk(d.as_bytes().to_vec()),
        Value::Array(items) => Frame::Array(list(items)),
        Value::Map(pairs) if resp3 => Frame::Map(
            pairs
                .iter()
                .map(|(k, v)| (expected(k, resp3), expected(v, resp3)))
                .collect(),
        ),
        Value::Map(pairs) => Frame::Array(
            pairs
                .iter()
                .flat_map(|(k, v)| [expected(k, resp3), expected(v, resp3)])
                .collect(),
        ),
        Value::Set(items) if resp3 => Frame::Set(list(items)),
        Value::Push(items) if resp3 => Frame::Push(list(items)),
        Value::Set(items) | Value::Push(items) => Frame::Array(list(items)),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn multibulk_round_trips(
        argv in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..20),
        tail in proptest::collection::vec(any::<u8>(), 0..10),
    ) {
        let mut buf = encode(&argv);
        let len = buf.len();
        buf.extend_from_slice(&tail);
        let (req, n) = parse_request(&buf, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(n, len);
        let got: Vec<Vec<u8>> = req.argv.iter().map(|a| a.to_vec()).collect();
        prop_assert_eq!(got, argv);
        // Every strict prefix is incomplete.
        for cut in 0..len {
            prop_assert_eq!(parse_request(&buf[..cut], &Limits::default()), Ok(None));
        }
    }

    #[test]
    fn pipelines_round_trip(
        reqs in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..10), 1..5), 1..10),
    ) {
        let buf: Vec<u8> = reqs.iter().flat_map(|r| encode(r)).collect();
        let mut pos = 0;
        let mut got = Vec::new();
        while let Some((req, n)) = parse_request(&buf[pos..], &Limits::default()).unwrap() {
            got.push(req.argv.iter().map(|a| a.to_vec()).collect::<Vec<_>>());
            pos += n;
        }
        prop_assert_eq!(pos, buf.len());
        prop_assert_eq!(got, reqs);
    }

    #[test]
    fn inline_plain_words_round_trip(
        words in proptest::collection::vec("[a-zA-Z0-9:_.-]{1,12}", 0..10),
        crlf in any::<bool>(),
    ) {
        let mut line = words.join(" ").into_bytes();
        line.extend_from_slice(if crlf { b"\r\n" } else { b"\n" });
        let (req, n) = parse_request(&line, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(n, line.len());
        let got: Vec<String> =
            req.argv.iter().map(|a| String::from_utf8(a.to_vec()).unwrap()).collect();
        prop_assert_eq!(got, words);
    }

    #[test]
    fn inline_quoted_round_trip(arg in proptest::collection::vec(any::<u8>(), 0..30)) {
        // Quote like redis-cli's sdscatrepr: everything escaped as \xHH.
        let mut line = b"SET \"".to_vec();
        for b in &arg {
            line.extend_from_slice(format!("\\x{b:02x}").as_bytes());
        }
        line.extend_from_slice(b"\"\r\n");
        let (req, _) = parse_request(&line, &Limits::default()).unwrap().unwrap();
        prop_assert_eq!(req.argv.len(), 2);
        prop_assert_eq!(req.argv[1].to_vec(), arg);
    }

    /// What a config file or a manifest gets written as, words quoted
    /// where they need it, `split_args` reads back as the same words.
    #[test]
    fn words_quoted_where_needed_split_back(
        words in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 0..6),
    ) {
        let line: Vec<String> = words
            .iter()
            .map(|w| if needs_repr(w) { repr(w) } else { String::from_utf8(w.clone()).unwrap() })
            .collect();
        let line = line.join(" ");
        let got = split_args(line.as_bytes()).expect("balanced");
        prop_assert_eq!(got.iter().map(|w| w.to_vec()).collect::<Vec<_>>(), words);
    }

    #[test]
    fn parse_request_never_panics(
        bytes in proptest::collection::vec(any::<u8>(), 0..256),
        star in any::<bool>(),
        unauthenticated in any::<bool>(),
    ) {
        let mut buf = bytes;
        if star {
            buf.insert(0, b'*');
        }
        let limits = Limits { max_inline_len: 64, max_bulk_len: 100, unauthenticated, ..Limits::default() };
        if let Ok(Some((_, n))) = parse_request(&buf, &limits) {
            prop_assert!(n > 0 && n <= buf.len());
        }
        let _ = parse_request(&buf, &Limits::default());
    }

    #[test]
    fn parse_request_never_panics_on_near_valid(
        argv in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..8), 1..5),
        flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let mut buf = encode(&argv);
        for (at, b) in flips {
            let i = at % buf.len();
            buf[i] = b;
        }
        for cut in 0..=buf.len() {
            if let Ok(Some((_, n))) = parse_request(&buf[..cut], &Limits::default()) {
                prop_assert!(n <= cut);
            }
        }
    }

    #[test]
    fn parse_frame_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        if let Ok(Some((_, n))) = parse_frame(&bytes) {
            prop_assert!(n > 0 && n <= bytes.len());
        }
    }

    #[test]
    fn replies_round_trip(v in value(), resp3 in any::<bool>()) {
        let mut buf = Vec::new();
        write(&mut ReplyWriter::new(&mut buf, resp3), &v);
        let (frame, n) = parse_frame(&buf).unwrap().unwrap();
        prop_assert_eq!(n, buf.len());
        prop_assert_eq!(frame, expected(&v, resp3));
        for cut in 0..buf.len() {
            prop_assert_eq!(parse_frame(&buf[..cut]), Ok(None));
        }
    }
}
