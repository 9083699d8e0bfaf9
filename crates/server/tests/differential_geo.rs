//! Differential tests of the geo commands against Debian's redis-server
//! 7.0.15 (the harness is `common::diff`): random streams of GEOADD with
//! coordinates from everywhere (the limits, past them, not numbers),
//! GEOPOS, GEODIST in every unit, GEOHASH, and the sorted-set commands on
//! the same keys, so that scores GEOADD did not write are decoded too.

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
