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
    let text = logged_text(&dir);
    assert!(text.contains("zadd\r\n$6\r\nsicily\r\n$16\r\n3479099956230698"), "{text}");
    assert!(!text.contains("geoadd"));
    let server = Server::start_in(&dir, &flags);
    let mut c = server.client();
    assert_eq!(c.cmd("GEOHASH Sicily Palermo Catania"), Frame::Array(vec![bulk("sqc8b49rny0"), bulk("sqdtr74hyu0")]));
}

/// Every file of the AOF directory in `dir`, as lowercase text.
fn logged_text(dir: &std::path::Path) -> String {
    let logged: Vec<u8> = std::fs::read_dir(dir.join("appendonlydir"))
        .expect("the AOF directory")
        .filter_map(|e| std::fs::read(e.ok()?.path()).ok())
        .flatten()
        .collect();
    String::from_utf8_lossy(&logged).to_lowercase()
}

fn arr(items: Vec<Frame>) -> Frame {
    Frame::Array(items)
}

/// [member, distance, [longitude, latitude]], as WITHDIST WITHCOORD reply.
fn found(member: &str, dist: &str, long: &str, lat: &str) -> Frame {
    arr(vec![bulk(member), bulk(dist), arr(vec![bulk(long), bulk(lat)])])
}

#[test]
fn searches_as_redis_documents_them() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd(SICILY), int(2));
    assert_eq!(
        c.cmd("GEORADIUS Sicily 15 37 200 km WITHDIST"),
        arr(vec![arr(vec![bulk("Palermo"), bulk("190.4424")]), arr(vec![bulk("Catania"), bulk("56.4413")])])
    );
    assert_eq!(c.cmd("GEORADIUS Sicily 15 37 200 km ASC"), arr(vec![bulk("Catania"), bulk("Palermo")]));
    assert_eq!(c.cmd("GEOADD Sicily 12.758489 38.788135 edge1 17.241510 38.788135 edge2"), int(2));
    assert_eq!(
        c.cmd("GEOSEARCH Sicily FROMLONLAT 15 37 BYBOX 400 400 km ASC WITHCOORD WITHDIST"),
        arr(vec![
            found("Catania", "56.4413", "15.08726745843887329", "37.50266842333162032"),
            found("Palermo", "190.4424", "13.36138933897018433", "38.11555639549629859"),
            found("edge2", "279.7403", "17.24151045083999634", "38.78813451624225195"),
            found("edge1", "279.7405", "12.7584877610206604", "38.78813451624225195"),
        ])
    );
    assert_eq!(
        c.cmd("GEORADIUSBYMEMBER Sicily Palermo 200 km WITHDIST DESC"),
        arr(vec![
            arr(vec![bulk("Catania"), bulk("166.2742")]),
            arr(vec![bulk("edge1"), bulk("91.4007")]),
            arr(vec![bulk("Palermo"), bulk("0.0000")]),
        ])
    );
    assert_eq!(
        c.cmd("GEOSEARCH Sicily FROMMEMBER Palermo BYRADIUS 200 km COUNT 1 WITHHASH"),
        arr(vec![arr(vec![bulk("Palermo"), int(3479099956230698)])])
    );
    assert_eq!(c.cmd("GEOSEARCH Sicily FROMLONLAT 0 0 BYRADIUS 1 km"), arr(vec![]));
    assert_eq!(c.cmd("GEOSEARCH nokey FROMMEMBER x BYBOX 1 1 km"), arr(vec![]));
}

#[test]
fn stores_write_scores_or_distances() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd(SICILY), int(2));
    assert_eq!(c.cmd("GEOSEARCHSTORE dst Sicily FROMLONLAT 15 37 BYRADIUS 200 km STOREDIST"), int(2));
    assert_eq!(
        c.cmd("ZRANGE dst 0 -1 WITHSCORES"),
        arr(vec![bulk("Catania"), bulk("56.441257870158204"), bulk("Palermo"), bulk("190.44242984775784")])
    );
    assert_eq!(c.cmd("GEORADIUS Sicily 15 37 200 km COUNT 1 STORE near"), int(1));
    assert_eq!(c.cmd("ZRANGE near 0 -1 WITHSCORES"), arr(vec![bulk("Catania"), bulk("3479447370796909")]));
    // Nothing found, or no source: the destination goes.
    c.cmd("SET dst x");
    assert_eq!(c.cmd("GEOSEARCHSTORE dst Sicily FROMLONLAT 0 0 BYRADIUS 1 km"), int(0));
    assert_eq!(c.cmd("EXISTS dst"), int(0));
    assert_eq!(c.cmd("GEORADIUSBYMEMBER nokey x 1 km STORE near"), int(0));
    assert_eq!(c.cmd("EXISTS near"), int(0));
    // From the key specs, as Redis finds them; the last one is written.
    assert_eq!(
        c.cmd("COMMAND GETKEYS GEORADIUS k 1 2 3 km STORE a STOREDIST b"),
        arr(vec![bulk("k"), bulk("a"), bulk("b")])
    );
    assert_eq!(c.cmd("GEORADIUS Sicily 15 37 200 km STORE a STOREDIST b"), int(2));
    assert_eq!(c.cmd("EXISTS a b"), int(1));
}

#[test]
fn search_errors_come_in_redis_order() {
    let server = Server::start(&[]);
    let mut c = server.client();
    assert_eq!(c.cmd(SICILY), int(2));
    let cases = [
        ("GEORADIUS Sicily 15 37 200 km COUNT 1 WITHCOORD STORE x",
         "ERR STORE option in GEORADIUS is not compatible with WITHDIST, WITHHASH and WITHCOORD options"),
        ("GEOSEARCHSTORE d Sicily FROMLONLAT 15 37 BYRADIUS 1 km WITHDIST",
         "ERR GEOSEARCHSTORE is not compatible with WITHDIST, WITHHASH and WITHCOORD options"),
        ("GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 200 km FROMMEMBER Palermo", "ERR syntax error"),
        ("geosearch Sicily BYRADIUS 200 km ASC WITHDIST",
         "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for geosearch"),
        ("GEOSEARCH Sicily FROMLONLAT 15 37 ASC DESC",
         "ERR exactly one of BYRADIUS and BYBOX can be specified for GEOSEARCH"),
        ("GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 200 km ANY", "ERR the ANY argument requires COUNT argument"),
        ("GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS -1 km", "ERR radius cannot be negative"),
        ("GEOSEARCH Sicily FROMLONLAT 15 37 BYBOX 1 -1 km", "ERR height or width cannot be negative"),
        ("GEOSEARCH Sicily FROMLONLAT 15 37 BYBOX 1 x km", "ERR need numeric height"),
        ("GEOSEARCH Sicily FROMMEMBER nope BYRADIUS 1 km", "ERR could not decode requested zset member"),
        ("GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 1 km COUNT 0", "ERR COUNT must be > 0"),
        ("GEOSEARCH Sicily FROMLONLAT 15 37 BYRADIUS 1 yd", "ERR unsupported unit provided. please use M, KM, FT, MI"),
        ("GEORADIUS_RO Sicily 15 37 200 km STORE x", "ERR syntax error"),
        ("GEORADIUS Sicily 15 37 x km", "ERR need numeric radius"),
        ("GEORADIUS Sicily 15 37 1 km COUNT x", "ERR value is not an integer or out of range"),
        ("GEORADIUS Sicily 200 37 1 km", "ERR invalid longitude,latitude pair 200.000000,37.000000"),
    ];
    for (command, error) in cases {
        assert_eq!(c.cmd(command), err(error), "{command}");
    }
    // Without a source the member and radius go unchecked.
    assert_eq!(c.cmd("GEORADIUSBYMEMBER nokey x -1 yd"), arr(vec![]));
    c.cmd("SET s x");
    let wrongtype = err("WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_eq!(c.cmd("GEOSEARCH s FROMLONLAT 15 37 BYRADIUS 1 km"), wrongtype);
    assert_eq!(c.cmd("GEOSEARCHSTORE d s FROMLONLAT 200 37 BYRADIUS 1 km"), wrongtype);
}

#[test]
fn stores_are_logged_as_they_came_and_replayed() {
    let dir = temp_dir("geo-store-journal");
    let flags = ["--appendonly", "yes", "--appendfsync", "always"];
    let server = Server::start_in(&dir, &flags);
    let mut c = server.client();
    assert_eq!(c.cmd(SICILY), int(2));
    assert_eq!(c.cmd("GEORADIUS Sicily 15 37 200 km STOREDIST near"), int(2));
    assert_eq!(c.cmd("GEOSEARCHSTORE box Sicily FROMMEMBER Palermo BYBOX 10 10 km"), int(1));
    assert_eq!(c.cmd("GEORADIUS Sicily 15 37 200 km"), arr(vec![bulk("Palermo"), bulk("Catania")]));
    server.kill9();
    let text = logged_text(&dir);
    assert!(text.contains("georadius\r\n$6\r\nsicily"), "{text}");
    assert!(text.contains("geosearchstore\r\n$3\r\nbox"), "{text}");
    assert_eq!(text.matches("georadius").count(), 1, "{text}");
    let server = Server::start_in(&dir, &flags);
    let mut c = server.client();
    assert_eq!(c.cmd("ZRANGE near 0 -1"), arr(vec![bulk("Catania"), bulk("Palermo")]));
    assert_eq!(c.cmd("ZRANGE box 0 -1 WITHSCORES"), arr(vec![bulk("Palermo"), bulk("3479099956230698")]));
}
