//! Differential tests of the geo commands against Debian's redis-server
//! 7.0.15 (the harness is `common::diff`): random streams of GEOADD with
//! coordinates from everywhere (the limits, past them, not numbers),
//! GEOPOS, GEODIST in every unit, GEOHASH, GEOSEARCH, GEOSEARCHSTORE and
//! the GEORADIUS family (every option, COUNT cuts and ANY, stores, errors),
//! and the sorted-set commands on the same keys, so that scores GEOADD did
//! not write are decoded too. Search replies are compared as they come,
//! order included: Keel scans cells and sorts (ties and COUNT cuts too) as
//! Redis does.

mod common;

use common::diff::Stream;
use rand::rngs::StdRng;
use rand::Rng;

const GEO: &[&str] = &[
    "GEOADD {k} [NX|XX|CH] [CH|NX|XX|GT] {lon} {lat} {m}",
    "GEOADD {k} {lon} {lat} {m} {lon} {lat} {m} [{lon}] [{lat}] [{m}]",
    "GEOADD {k} [NX|XX] {lon} {lat}",
    "GEOPOS {k} {m} [{m}] [{m}]",
    "GEOPOS {k}",
    "GEODIST {k} {m} {m} [m|km|ft|mi|KM|Mi|yd|]",
    "GEODIST {k} {m} {m} km [x]",
    "GEOHASH {k} {m} [{m}] [{m}]",
];

const SEARCH: &[&str] = &[
    "GEOSEARCH {k} [FROMLONLAT {lon} {lat}|FROMMEMBER {m}] [BYRADIUS {r} {unit}|BYBOX {r} {r} {unit}] [ASC|DESC] \
     [WITHCOORD] [WITHDIST] [WITHHASH] [COUNT {n}] [ANY]",
    "GEOSEARCH {k} FROMMEMBER {m} BYRADIUS {r} {unit} [ASC|DESC] [WITHDIST|WITHHASH|WITHCOORD] \
     [COUNT {n} ANY|COUNT {n}]",
    "GEOSEARCH {k} FROMLONLAT {lon} {lat} BYBOX {r} {r} {unit} [ASC|DESC] [WITHDIST] [COUNT {n} ANY|COUNT {n}]",
    "GEOSEARCH {k} [FROMLONLAT {lon} {lat}|BYRADIUS {r} {unit}] \
     [FROMMEMBER {m}|BYBOX {r} {r} {unit}|STOREDIST|STORE {k}]",
    "GEOSEARCHSTORE {k} {k} [FROMLONLAT {lon} {lat}|FROMMEMBER {m}] [BYRADIUS {r} {unit}|BYBOX {r} {r} {unit}] \
     [ASC|DESC] [COUNT {n}|COUNT {n} ANY] [STOREDIST] [WITHDIST|ANY]",
    "GEORADIUS {k} {lon} {lat} {r} {unit} [WITHDIST] [WITHCOORD] [WITHHASH] [ASC|DESC] [COUNT {n}|COUNT {n} ANY] \
     [STORE {k}|STOREDIST {k}]",
    "GEORADIUS {k} {lon} {lat} {r} {unit} [ASC|DESC] [COUNT {n}|COUNT {n} ANY] [STORE {k}|STOREDIST {k}]",
    "GEORADIUSBYMEMBER {k} {m} {r} {unit} [WITHDIST] [WITHCOORD] [ASC|DESC] [COUNT {n}|COUNT {n} ANY|ANY] \
     [STORE {k}|STOREDIST {k}|FROMMEMBER {m}]",
    "GEORADIUS_RO {k} {lon} {lat} {r} {unit} [WITHDIST] [ASC|DESC] [COUNT {n}] [STORE {k}]",
    "GEORADIUSBYMEMBER_RO {k} {m} {r} {unit} [WITHHASH] [DESC] [COUNT {n}] [STOREDIST {k}]",
    "ZRANGE {k} 0 -1 WITHSCORES",
];

const AROUND: &[&str] = &[
    "ZADD {k} [{s}] [{m}] {s} {m}",
    "ZRANGE {k} 0 -1 WITHSCORES",
    "ZREM {k} {m}",
    "ZCARD {k}",
    "DEL {k}",
    "SET {k} {v}",
    "TYPE {k}",
];

/// `{lon}` and `{lat}` a coordinate, `{m}` a member, `{s}` a score.
fn fill(token: &str, rng: &mut StdRng) -> Option<String> {
    Some(match token {
        "{lon}" | "{lat}" => {
            let limit = if token == "{lon}" { 180.0 } else { 85.05112878 };
            match rng.gen_range(0..16) {
                0 => format!("{limit}"),
                1 => format!("-{limit}"),
                2 => format!("{}", limit + 0.000001),
                3 => "abc".into(),
                4 => String::new(),
                5 => "0".into(),
                6 => "nan".into(),
                7 => "0x10".into(),
                8 => "1e2".into(),
                9 => "90".into(),
                _ => format!("{:.6}", rng.gen_range(-limit..=limit)),
            }
        }
        "{m}" => format!("m{}", rng.gen_range(0..12)),
        "{r}" => pick(rng, &["0", "1", "50", "100", "500", "1000", "3000", "5000", "10000", "20000", "-1", "x", "inf"]),
        "{unit}" => pick(rng, &["km", "km", "km", "m", "mi", "ft", "KM", "yd"]),
        "{n}" => pick(rng, &["1", "2", "3", "5", "8", "100", "0", "-1", "x"]),
        "{s}" => match rng.gen_range(0..8) {
            0 => "-1".into(),
            1 => "inf".into(),
            2 => "-inf".into(),
            3 => "4503599627370496".into(),
            4 => "1e300".into(),
            _ => rng.gen_range(0u64..1 << 52).to_string(),
        },
        _ => return None,
    })
}

fn pick(rng: &mut StdRng, choices: &[&str]) -> String {
    choices[rng.gen_range(0..choices.len())].to_string()
}

/// A crowd: 120 members within a few degrees, on a half-degree grid so
/// that many share a place (ties in distance: the sorts must break them as
/// Redis's do), for COUNT cuts of long arrays.
fn crowded(token: &str, rng: &mut StdRng) -> Option<String> {
    Some(match token {
        "{lon}" => format!("{}", 10.0 + f64::from(rng.gen_range(0..8)) / 2.0),
        "{lat}" => format!("{}", 35.0 + f64::from(rng.gen_range(0..6)) / 2.0),
        "{m}" => format!("m{}", rng.gen_range(0..120)),
        "{r}" => pick(rng, &["0", "10", "100", "200", "300", "500", "1000"]),
        "{unit}" => pick(rng, &["km", "km", "mi", "m"]),
        "{n}" => pick(rng, &["1", "3", "7", "8", "20", "41", "50", "90", "200"]),
        _ => return fill(token, rng),
    })
}

const CROWD: &[&str] = &[
    "GEOADD {k} {lon} {lat} {m} {lon} {lat} {m} {lon} {lat} {m} {lon} {lat} {m}",
    "GEOADD {k} {lon} {lat} {m} {lon} {lat} {m} {lon} {lat} {m} {lon} {lat} {m}",
    "GEOADD {k} {lon} {lat} {m} {lon} {lat} {m} {lon} {lat} {m} {lon} {lat} {m}",
    "GEOSEARCH {k} [FROMLONLAT {lon} {lat}|FROMMEMBER {m}] [BYRADIUS {r} {unit}|BYBOX {r} {r} {unit}] [ASC|DESC] \
     [WITHDIST] [WITHHASH] [COUNT {n}|COUNT {n} ANY]",
    "GEORADIUS {k} {lon} {lat} {r} {unit} [ASC|DESC] WITHDIST [COUNT {n}|COUNT {n} ANY]",
    "GEOSEARCHSTORE {k} {k} FROMLONLAT {lon} {lat} BYRADIUS {r} {unit} [ASC|DESC] [COUNT {n}] [STOREDIST]",
    "ZRANGE {k} 0 -1 WITHSCORES",
];

#[test]
fn searches_match_redis() {
    for seed in 320..324 {
        Stream { fill, ..Stream::new(&[GEO, SEARCH, SEARCH, AROUND]) }.run(seed, 2000);
    }
}

#[test]
fn crowded_searches_match_redis() {
    for seed in 330..333 {
        Stream { fill: crowded, ..Stream::new(&[CROWD]) }.run(seed, 1500);
    }
}

#[test]
fn search_resp3_replies_match_redis() {
    Stream { fill, resp3: true, ..Stream::new(&[GEO, SEARCH]) }.run(340, 1500);
}

#[test]
fn geo_commands_match_redis() {
    for seed in 300..304 {
        Stream { fill, ..Stream::new(&[GEO, GEO, AROUND]) }.run(seed, 2000);
    }
}

#[test]
fn geo_resp3_replies_match_redis() {
    Stream { fill, resp3: true, ..Stream::new(&[GEO, AROUND]) }.run(310, 2000);
}

#[test]
fn geo_notifications_match_redis() {
    for seed in 340..342 {
        Stream { fill, notify: true, ..Stream::new(&[GEO, SEARCH, AROUND]) }.run(seed, 1000);
    }
}
