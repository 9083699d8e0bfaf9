//! Black-box tests of the geo commands over real sockets: Redis's
//! documented replies for Sicily, errors, RESP3, and the journal logging
//! GEOADD as the ZADD it is, which a restart replays.

mod common;

use common::{bulk, err, int, temp_dir, Frame, Server};

const SICILY: &str = "GEOADD Sicily 13.361389 38.115556 Palermo 15.087269 37.502669 Catania";

#[test]
fn sicily_as_redis_documents_it() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd(SICILY), int(2));
    assert_eq!(c.cmd("GEODIST Sicily Palermo Catania"), bulk("166274.1516"));
    assert_eq!(c.cmd("GEODIST Sicily Palermo Catania km"), bulk("166.2742"));
    assert_eq!(c.cmd("GEODIST Sicily Palermo Catania mi"), bulk("103.3182"));
    assert_eq!(c.cmd("GEODIST Sicily Foo Bar"), Frame::Null);
    assert_eq!(
        c.cmd("GEOPOS Sicily Palermo NonExisting"),
        Frame::Array(vec![
            Frame::Array(vec![bulk("13.36138933897018433"), bulk("38.11555639549629859")]),
            Frame::Null,
        ])
    );
    assert_eq!(
        c.cmd("GEOHASH Sicily Palermo Catania nope"),
        Frame::Array(vec![bulk("sqc8b49rny0"), bulk("sqdtr74hyu0"), Frame::Null])
    );
    assert_eq!(c.cmd("ZSCORE Sicily Palermo"), bulk("3479099956230698"));
    assert_eq!(c.cmd("GEOADD Sicily XX CH 13.4 38.1 Palermo 1 1 Nowhere"), int(1));
    assert_eq!(c.cmd("ZCARD Sicily"), int(2));
    c.cmd("HELLO 3");
    assert_eq!(
        c.cmd("GEOPOS Sicily Catania"),
        Frame::Array(vec![Frame::Array(vec![
            Frame::Double(b"15.08726745843887329".to_vec()),
            Frame::Double(b"37.50266842333162032".to_vec()),
        ])])
    );
}

#[test]
fn bad_arguments_get_redis_errors_and_change_nothing() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd("GEOADD k 200 1 a"), err("ERR invalid longitude,latitude pair 200.000000,1.000000"));
    assert_eq!(c.cmd("GEOADD k 1 1 a 1 86 b"), err("ERR invalid longitude,latitude pair 1.000000,86.000000"));
    assert_eq!(c.cmd("GEOADD k abc 1 a"), err("ERR value is not a valid float"));
    assert_eq!(c.cmd("GEOADD k NX XX 1 1 a"), err("ERR syntax error"));
    assert_eq!(c.cmd("GEOADD k 1 1 a 2"), err("ERR syntax error"));
    assert_eq!(c.cmd("EXISTS k"), int(0));
    assert_eq!(c.cmd("GEODIST k a b yd"), err("ERR unsupported unit provided. please use M, KM, FT, MI"));
    assert_eq!(c.cmd("GEODIST k a b km x"), err("ERR syntax error"));
    c.cmd("SET s x");
    let wrongtype = err("WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_eq!(c.cmd("GEOADD s 1 1 a"), wrongtype);
    assert_eq!(c.cmd("GEOPOS s a"), wrongtype);
    assert_eq!(c.cmd("GEOHASH s a"), wrongtype);
}

#[test]
fn geoadd_is_logged_as_zadd_and_replayed() {
    let dir = temp_dir("geo-journal");
    let flags = ["--appendonly", "yes", "--appendfsync", "always"];
    let server = Server::start_in(&dir, &flags);
    let mut c = server.client();
    assert_eq!(c.cmd(SICILY), int(2));
    assert_eq!(c.cmd("GEOADD Sicily NX 1 1 Palermo"), int(0));
    server.kill9();
    let logged: Vec<u8> = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("the AOF directory")
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .flatten()
        .collect();
    let text = String::from_utf8_lossy(&logged).to_lowercase();
    assert!(text.contains("zadd\r\n$6\r\nsicily\r\n$16\r\n3479099956230698"), "{text}");
    assert!(!text.contains("geoadd"));
    let server = Server::start_in(&dir, &flags);
    let mut c = server.client();
    assert_eq!(c.cmd("GEOHASH Sicily Palermo Catania"), Frame::Array(vec![bulk("sqc8b49rny0"), bulk("sqdtr74hyu0")]));
}
