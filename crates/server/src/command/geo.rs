//! Geospatial commands over sorted sets: GEOADD, GEOPOS, GEODIST and GEOHASH.
//!
//! A member's score is Redis's 52-bit geohash: latitude (within Web
//! Mercator's ±85.05112878°) and longitude, each scaled to 26 bits and
//! interleaved, latitude in the even bits (`geohash.c`). GEOADD is a ZADD
//! of those scores, and is logged as that ZADD, as Redis propagates it.
//! Coordinates come back as the centre of the member's cell, distances by
//! Redis's haversine on its Earth radius, to the same digits. GEOSEARCH
//! and GEORADIUS are not here yet.

use keel_protocol::ReplyWriter;

use super::parse::eq;
use super::zsets::{self, parse_score};
use super::{cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, KEY1};

const G: &str = "geo";

pub static COMMANDS: &[CommandSpec] = &[
    cmd("geoadd", -5, WRITE | DENYOOM, KEY1, G, geoadd)
        .doc("Add one or more geospatial items in the geospatial index represented using a sorted set", "3.2.0"),
    cmd("geopos", -2, READONLY, KEY1, G, geopos)
        .doc("Returns longitude and latitude of members of a geospatial index", "3.2.0"),
    cmd("geodist", -4, READONLY, KEY1, G, geodist)
        .doc("Returns the distance between two members of a geospatial index", "3.2.0"),
    cmd("geohash", -2, READONLY, KEY1, G, geohash)
        .doc("Returns members of a geospatial index as standard geohash strings", "3.2.0"),
];

const LAT_MIN: f64 = -85.05112878;
const LAT_MAX: f64 = 85.05112878;
const LONG_MIN: f64 = -180.0;
const LONG_MAX: f64 = 180.0;
/// Bits per coordinate: 26 + 26 fit a double's mantissa exactly.
const STEP: u32 = 26;
const EARTH_RADIUS_IN_METERS: f64 = 6372797.560856;

/// A coordinate range (Redis's `GeoHashRange`).
#[derive(Clone, Copy)]
struct Range {
    min: f64,
    max: f64,
}

const LONG_RANGE: Range = Range { min: LONG_MIN, max: LONG_MAX };
const LAT_RANGE: Range = Range { min: LAT_MIN, max: LAT_MAX };
/// The standard geohash's latitude range, which GEOHASH's strings use.
const LAT_RANGE_STANDARD: Range = Range { min: -90.0, max: 90.0 };

/// Spreads the 32 bits of `v` over the even bits of a u64.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The inverse of [`spread`]: the even bits of `x`, packed.
fn squash(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0xFFFF_FFFF) as u32
}

/// Redis's `geohashEncode` at 26 bits a coordinate; the coordinates are
/// within the geo limits and `lat_range`.
fn encode(lat_range: Range, long: f64, lat: f64) -> u64 {
    let cells = f64::from(1u32 << STEP);
    // As C's double-to-uint32 conversion: truncation.
    let lat_cell = ((lat - lat_range.min) / (lat_range.max - lat_range.min) * cells) as u32;
    let long_cell = ((long - LONG_RANGE.min) / (LONG_RANGE.max - LONG_RANGE.min) * cells) as u32;
    spread(lat_cell) | (spread(long_cell) << 1)
}

/// Redis's `decodeGeohash`: the centre of the cell a score names, clamped
/// to the geo limits, as (longitude, latitude).
fn decode(score: f64) -> (f64, f64) {
    let bits = c_double_to_u64(score);
    let (lat_cell, long_cell) = (squash(bits), squash(bits >> 1));
    let cells = f64::from(1u32 << STEP);
    let bounds = |cell: u32, range: Range| {
        let scale = range.max - range.min;
        let min = range.min + (f64::from(cell) / cells) * scale;
        let max = range.min + ((f64::from(cell) + 1.0) / cells) * scale;
        (min + max) / 2.0
    };
    let long = bounds(long_cell, LONG_RANGE).clamp(LONG_MIN, LONG_MAX);
    let lat = bounds(lat_cell, LAT_RANGE).clamp(LAT_MIN, LAT_MAX);
    (long, lat)
}

/// C's `(uint64_t)` of a double as x86-64 compilers emit it, so that a
/// score no GEOADD wrote (negative, huge, infinite) decodes as in Redis.
fn c_double_to_u64(d: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    // cvttsd2si: out of range or NaN gives the "integer indefinite".
    let cvtt = |v: f64| if (-TWO_63..TWO_63).contains(&v) { v as i64 as u64 } else { 1 << 63 };
    if d >= TWO_63 {
        cvtt(d - TWO_63) ^ (1 << 63)
    } else {
        cvtt(d)
    }
}

/// Redis's `geohashGetDistance`: the haversine distance in meters.
fn distance(long1: f64, lat1: f64, long2: f64, lat2: f64) -> f64 {
    let v = ((long2.to_radians_c() - long1.to_radians_c()) / 2.0).sin();
    if v == 0.0 {
        return EARTH_RADIUS_IN_METERS * (lat2.to_radians_c() - lat1.to_radians_c()).abs();
    }
    let (lat1r, lat2r) = (lat1.to_radians_c(), lat2.to_radians_c());
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_IN_METERS * a.sqrt().asin()
}

/// Degrees to radians as Redis's `deg_rad` (`ang * (M_PI / 180.0)`), which
/// rounds differently from `f64::to_radians` in the last bit.
trait RadiansC {
    fn to_radians_c(self) -> f64;
}

impl RadiansC for f64 {
    fn to_radians_c(self) -> f64 {
        self * (std::f64::consts::PI / 180.0)
    }
}

/// Redis's `fixedpoint_d2string(.., 4)`: rounded to 4 decimals, half to
/// even (`llrint`), as GEODIST and WITHDIST reply. A NaN (the haversine's
/// `asin` of a rounding past 1, near antipodes) is `llrint`'s LLONG_MIN.
fn format_distance(d: f64) -> String {
    let scaled = d * 10_000.0;
    let scaled = if scaled.is_nan() { i64::MIN } else { scaled.round_ties_even() as i64 };
    let sign = if scaled < 0 { "-" } else { "" };
    let abs = scaled.unsigned_abs();
    format!("{sign}{}.{:04}", abs / 10_000, abs % 10_000)
}

/// Redis's `addReplyHumanLongDouble`: `%.17Lf` without trailing zeros, a
/// bulk string in RESP2 and a double in RESP3.
fn reply_coordinate(out: &mut ReplyWriter<'_>, d: f64) {
    let mut text = format!("{d:.17}");
    if text.contains('.') {
        text.truncate(text.trim_end_matches('0').trim_end_matches('.').len());
    }
    if text == "-0" {
        text = "0".into();
    }
    if out.resp3 {
        out.buf.push(b',');
        out.buf.extend_from_slice(text.as_bytes());
        out.buf.extend_from_slice(b"\r\n");
    } else {
        out.bulk(text.as_bytes());
    }
}

/// Redis's `extractLongLatOrReply`: two doubles within the geo limits.
fn parse_long_lat(long: &[u8], lat: &[u8]) -> Result<(f64, f64), CmdError> {
    let long = parse_score(long).ok_or(CmdError::NotFloat)?;
    let lat = parse_score(lat).ok_or(CmdError::NotFloat)?;
    if !(LONG_MIN..=LONG_MAX).contains(&long) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return Err(CmdError::other(format!("ERR invalid longitude,latitude pair {long:.6},{lat:.6}")));
    }
    Ok((long, lat))
}

/// GEOADD key [NX|XX] [CH] longitude latitude member ...: the ZADD of the
/// members' geohashes, run and logged as that ZADD (Redis's geoaddCommand).
fn geoadd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let mut first = 2;
    let (mut nx, mut xx) = (false, false);
    while first < argv.len() {
        match argv[first] {
            o if eq(o, "nx") => nx = true,
            o if eq(o, "xx") => xx = true,
            o if eq(o, "ch") => {}
            _ => break,
        }
        first += 1;
    }
    if !(argv.len() - first).is_multiple_of(3) || (nx && xx) {
        return Err(CmdError::Syntax);
    }
    let mut zadd: Vec<Vec<u8>> = Vec::with_capacity(first + (argv.len() - first) / 3 * 2);
    zadd.push(b"zadd".to_vec());
    zadd.extend(argv[1..first].iter().map(|a| a.to_vec()));
    for item in argv[first..].chunks(3) {
        let (long, lat) = parse_long_lat(item[0], item[1])?;
        zadd.push(encode(LAT_RANGE, long, lat).to_string().into_bytes());
        zadd.push(item[2].to_vec());
    }
    let args: Vec<&[u8]> = zadd.iter().map(Vec::as_slice).collect();
    zsets::zadd(ctx, &args)?;
    ctx.propagate_as(vec![zadd]);
    Ok(())
}

/// GEOPOS key member ...: each member's (longitude, latitude), or a null.
fn geopos(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_per_member(ctx, argv, |out| out.null_array(), |out, (long, lat)| {
        out.array(2);
        reply_coordinate(out, long);
        reply_coordinate(out, lat);
    })
}

/// For each member named after the key: `point` with its decoded
/// (longitude, latitude), or `missing`.
fn reply_per_member(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    missing: fn(&mut ReplyWriter<'_>),
    point: fn(&mut ReplyWriter<'_>, (f64, f64)),
) -> CmdResult {
    let db = ctx.dbs.of(argv[1]);
    let z = zsets::read(ctx.stats, db, argv[1], ctx.now_ms)?;
    let members = &argv[2..];
    ctx.out.array(members.len());
    for member in members {
        match z.and_then(|z| z.score(member)) {
            Some(score) => point(&mut ctx.out, decode(score)),
            None => missing(&mut ctx.out),
        }
    }
    Ok(())
}

/// Meters per unit (Redis's `extractUnitOrReply`).
fn unit(arg: &[u8]) -> Result<f64, CmdError> {
    [("m", 1.0), ("km", 1000.0), ("ft", 0.3048), ("mi", 1609.34)]
        .into_iter()
        .find(|(name, _)| eq(arg, name))
        .map(|(_, meters)| meters)
        .ok_or_else(|| CmdError::other("ERR unsupported unit provided. please use M, KM, FT, MI"))
}

/// GEODIST key member1 member2 [M|KM|FT|MI].
fn geodist(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let to_meters = match argv.len() {
        4 => 1.0,
        5 => unit(argv[4])?,
        _ => return Err(CmdError::Syntax),
    };
    let db = ctx.dbs.of(argv[1]);
    let z = zsets::read(ctx.stats, db, argv[1], ctx.now_ms)?;
    match z.and_then(|z| Some((z.score(argv[2])?, z.score(argv[3])?))) {
        Some((a, b)) => {
            let ((long1, lat1), (long2, lat2)) = (decode(a), decode(b));
            ctx.out.bulk(format_distance(distance(long1, lat1, long2, lat2) / to_meters).as_bytes());
        }
        None => ctx.out.null(),
    }
    Ok(())
}

/// GEOHASH key member ...: each member's standard 11-character geohash
/// (latitude over ±90°, so re-encoded from the cell's centre), or a null.
fn geohash(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    reply_per_member(ctx, argv, |out| out.null(), |out, (long, lat)| {
        out.bulk(&standard_geohash(encode(LAT_RANGE_STANDARD, long, lat)))
    })
}

/// The base-32 text of a 52-bit hash, 5 bits a character; the 11th
/// character has no bits left and is '0', as Redis writes it.
fn standard_geohash(bits: u64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let mut text = [b'0'; 11];
    for (i, c) in text.iter_mut().enumerate().take(10) {
        *c = ALPHABET[((bits >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const PALERMO: (f64, f64) = (13.361389, 38.115556);
    const CATANIA: (f64, f64) = (15.087269, 37.502669);

    #[test]
    fn spreading_and_squashing_are_inverse() {
        for v in [0, 1, 0x3FF_FFFF, 0xDEAD_BEEF, u32::MAX] {
            assert_eq!(squash(spread(v)), v);
            assert_eq!(spread(v) & 0xAAAA_AAAA_AAAA_AAAA, 0);
        }
    }

    #[test]
    fn scores_are_redis_geohashes() {
        // GEOADD Sicily 13.361389 38.115556 Palermo; ZSCORE Sicily Palermo.
        assert_eq!(encode(LAT_RANGE, PALERMO.0, PALERMO.1), 3479099956230698);
        assert_eq!(encode(LAT_RANGE, CATANIA.0, CATANIA.1), 3479447370796909);
    }

    #[test]
    fn a_score_decodes_to_its_cells_centre() {
        let (long, lat) = decode(3479099956230698.0);
        assert!((long - PALERMO.0).abs() < 1e-5 && (lat - PALERMO.1).abs() < 1e-5);
        let mut out = Vec::new();
        reply_coordinate(&mut ReplyWriter::new(&mut out, false), long);
        assert_eq!(out, b"$20\r\n13.36138933897018433\r\n");
        // Beyond 52 bits or negative, as C's conversion gives them.
        assert_eq!(decode(-1.0), (LONG_MAX, LAT_MAX));
        assert_eq!(decode(f64::INFINITY), decode(0.0));
    }

    #[test]
    fn distances_and_geohashes_match_redis() {
        let (p, c) = (decode(3479099956230698.0), decode(3479447370796909.0));
        assert_eq!(format_distance(distance(p.0, p.1, c.0, c.1)), "166274.1516");
        assert_eq!(format_distance(distance(p.0, p.1, c.0, c.1) / 1000.0), "166.2742");
        assert_eq!(format_distance(0.0), "0.0000");
        assert_eq!(format_distance(0.00005), "0.0000");
        assert_eq!(format_distance(1.23456), "1.2346");
        assert_eq!(format_distance(f64::NAN), "-922337203685477.5808");
        assert_eq!(&standard_geohash(encode(LAT_RANGE_STANDARD, p.0, p.1)), b"sqc8b49rny0");
        assert_eq!(&standard_geohash(encode(LAT_RANGE_STANDARD, c.0, c.1)), b"sqdtr74hyu0");
    }
}
