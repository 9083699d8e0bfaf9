//! Geospatial commands over sorted sets: GEOADD, GEOPOS, GEODIST, GEOHASH,
//! GEOSEARCH, GEOSEARCHSTORE and the GEORADIUS family.
//!
//! A member's score is Redis's 52-bit geohash: latitude (within Web
//! Mercator's ±85.05112878°) and longitude, each scaled to 26 bits and
//! interleaved, latitude in the even bits (`geohash.c`). GEOADD is a ZADD
//! of those scores, and is logged as that ZADD, as Redis propagates it.
//! Coordinates come back as the centre of the member's cell, distances by
//! Redis's haversine on its Earth radius, to the same digits.
//!
//! Searches work as `georadiusGeneric` does: the 9 geohash cells around
//! the centre, at a step coarse enough to cover the shape, are read as
//! zset score ranges and filtered by the shape; results are sorted by
//! Redis's own algorithms, so ties and COUNT cuts come out alike.

use std::cmp::Ordering;

use keel_engine::value::Value;
use keel_engine::zset::{AddFlags, ScoreRange, ZSet};
use keel_protocol::ReplyWriter;
use smallvec::SmallVec;

use super::keyspec::*;
use super::parse::{eq, i64_arg};
use super::zsets::{self, parse_score};
use super::{cmd, flags::*, CmdError, CmdResult, CommandSpec, Ctx, Keys, KEY1};
use crate::notify;

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
    cmd("georadius", -6, WRITE | DENYOOM, Keys::Custom(georadius_keys), G, georadius)
        .doc(
            "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance \
             from a point",
            "3.2.0",
        )
        .specs(&[key_at(1, RO | ACCESS), store_spec("STORE", 6), store_spec("STOREDIST", 6)]),
    cmd("georadiusbymember", -5, WRITE | DENYOOM, Keys::Custom(georadius_keys), G, georadiusbymember)
        .doc(
            "Query a sorted set representing a geospatial index to fetch members matching a given maximum distance \
             from a member",
            "3.2.0",
        )
        .specs(&[key_at(1, RO | ACCESS), store_spec("STORE", 5), store_spec("STOREDIST", 5)]),
    cmd("georadius_ro", -6, READONLY, KEY1, G, georadius_ro).doc("A read-only variant for GEORADIUS", "3.2.10"),
    cmd("georadiusbymember_ro", -5, READONLY, KEY1, G, georadiusbymember_ro)
        .doc("A read-only variant for GEORADIUSBYMEMBER", "3.2.10"),
    cmd("geosearch", -7, READONLY, KEY1, G, geosearch).doc(
        "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle.",
        "6.2.0",
    ),
    cmd("geosearchstore", -8, WRITE | DENYOOM, Keys::Range { first: 1, last: 2, step: 1 }, G, geosearchstore)
        .doc(
            "Query a sorted set representing a geospatial index to fetch members inside an area of a box or a circle, \
             and store the result in another key.",
            "6.2.0",
        )
        .specs(&[key_at(1, OW | UPDATE), key_at(2, RO | ACCESS)]),
];

/// GEORADIUS's optional destination, found by its keyword.
const fn store_spec(word: &'static str, startfrom: isize) -> KeySpec {
    ks(OW | UPDATE, keyword(word, startfrom), span(0, 1, 0))
}

/// Redis's `georadiusGetKeys`: the source, and the destination of the last
/// STORE or STOREDIST from argument 5 on.
fn georadius_keys(argv: &[&[u8]]) -> SmallVec<[usize; 4]> {
    let mut keys: SmallVec<[usize; 4]> = SmallVec::from_slice(&[1]);
    let mut store = None;
    let mut i = 5;
    while i < argv.len() {
        if (eq(argv[i], "store") || eq(argv[i], "storedist")) && i + 1 < argv.len() {
            store = Some(i + 1);
            i += 1;
        }
        i += 1;
    }
    keys.extend(store);
    keys
}

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

/// Redis's `geohashEncode` at `step` bits a coordinate; the coordinates
/// are within the geo limits and `lat_range`.
fn encode(lat_range: Range, long: f64, lat: f64, step: u32) -> u64 {
    let cells = (1u64 << step) as f64;
    // As C's double-to-uint32 conversion: truncation.
    let lat_cell = ((lat - lat_range.min) / (lat_range.max - lat_range.min) * cells) as u32;
    let long_cell = ((long - LONG_RANGE.min) / (LONG_RANGE.max - LONG_RANGE.min) * cells) as u32;
    spread(lat_cell) | (spread(long_cell) << 1)
}

/// Redis's `decodeGeohash`: the centre of the cell a score names, clamped
/// to the geo limits, as (longitude, latitude).
fn decode(score: f64) -> (f64, f64) {
    let (long, lat) = Cell { bits: c_double_to_u64(score), step: STEP }.area();
    let centre = |r: Range| (r.min + r.max) / 2.0;
    (centre(long).clamp(LONG_MIN, LONG_MAX), centre(lat).clamp(LAT_MIN, LAT_MAX))
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
        zadd.push(encode(LAT_RANGE, long, lat, STEP).to_string().into_bytes());
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
        out.bulk(&standard_geohash(encode(LAT_RANGE_STANDARD, long, lat, STEP)))
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

// ---------------------------------------------------------------------------
// Searches: GEOSEARCH, GEOSEARCHSTORE and the GEORADIUS family.

const MERCATOR_MAX: f64 = 20037726.37;

/// Redis's `rad_deg` (`ang / D_R`), the inverse of [`RadiansC`].
fn rad_deg(ang: f64) -> f64 {
    ang / (std::f64::consts::PI / 180.0)
}

/// Redis's `geohashGetLatDistance`.
fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_IN_METERS * (lat2.to_radians_c() - lat1.to_radians_c()).abs()
}

/// A geohash cell of `step` bits a coordinate; step 0 is Redis's zeroed
/// (excluded) cell.
#[derive(Clone, Copy, PartialEq)]
struct Cell {
    bits: u64,
    step: u32,
}

impl Cell {
    /// Redis's `geohashEncode` at `step` bits: the cell holding the point
    /// (within the geo limits, as every search centre is).
    fn of(long: f64, lat: f64, step: u32) -> Cell {
        Cell { bits: encode(LAT_RANGE, long, lat, step), step }
    }

    /// Redis's `geohashDecode`: the cell's (longitude, latitude) ranges.
    fn area(self) -> (Range, Range) {
        let cells = (1u64 << self.step) as f64;
        let (lat_cell, long_cell) = (squash(self.bits), squash(self.bits >> 1));
        // C adds 1 in 32 bits, wrapping.
        let range = |cell: u32, r: Range| Range {
            min: r.min + (f64::from(cell) / cells) * (r.max - r.min),
            max: r.min + (f64::from(cell.wrapping_add(1)) / cells) * (r.max - r.min),
        };
        (range(long_cell, LONG_RANGE), range(lat_cell, LAT_RANGE))
    }

    /// Redis's `geohash_move_x` (longitude, odd bits) and `geohash_move_y`
    /// (latitude, even bits): one cell over, wrapping around.
    fn moved(self, dx: i8, dy: i8) -> Cell {
        let shift = 64 - self.step * 2;
        let step_along = |bits: u64, own: u64, other: u64, d: i8| {
            let (v, rest) = (bits & own, bits & other);
            let zz = other >> shift;
            let v = match d.cmp(&0) {
                Ordering::Equal => return bits,
                Ordering::Greater => v.wrapping_add(zz + 1),
                Ordering::Less => (v | zz).wrapping_sub(zz + 1),
            };
            (v & (own >> shift)) | rest
        };
        let bits = step_along(self.bits, 0xAAAA_AAAA_AAAA_AAAA, 0x5555_5555_5555_5555, dx);
        Cell { bits: step_along(bits, 0x5555_5555_5555_5555, 0xAAAA_AAAA_AAAA_AAAA, dy), step: self.step }
    }

    /// Itself and its neighbours in Redis's order: N, S, E, W, NE, NW, SE, SW.
    fn with_neighbours(self) -> [Cell; 9] {
        [(0, 0), (0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, 1), (1, -1), (-1, -1)]
            .map(|(dx, dy)| self.moved(dx, dy))
    }

    /// The zset scores of the points within: Redis's `scoresOfGeoHashBox`.
    fn scores(self) -> ScoreRange {
        let shift = 52 - self.step * 2;
        let (min, max) = ((self.bits << shift) as f64, ((self.bits + 1) << shift) as f64);
        ScoreRange { min, max, min_ex: false, max_ex: true }
    }
}

/// What a search covers; sizes in the query's unit.
#[derive(Clone, Copy)]
enum Area {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// Redis's `GeoShape`: a centre, an area and meters per unit.
struct Shape {
    long: f64,
    lat: f64,
    area: Area,
    conversion: f64,
}

impl Shape {
    /// Redis's `geoWithinShape`: the distance from the centre to a point
    /// (a cell centre) inside the shape. A NaN distance is inside, as C's
    /// `>` says.
    fn distance_to(&self, long: f64, lat: f64) -> Option<f64> {
        match self.area {
            Area::Radius(radius) => {
                let d = distance(self.long, self.lat, long, lat);
                let outside = d.partial_cmp(&(radius * self.conversion)) == Some(Ordering::Greater);
                (!outside).then_some(d)
            }
            Area::Box { width, height } => {
                let (width, height) = (width * self.conversion, height * self.conversion);
                if lat_distance(lat, self.lat) > height / 2.0 || distance(long, lat, self.long, lat) > width / 2.0 {
                    return None;
                }
                Some(distance(self.long, self.lat, long, lat))
            }
        }
    }

    /// Redis's `geohashBoundingBox`: (min long, min lat, max long, max lat).
    fn bounds(&self) -> [f64; 4] {
        let (h, w) = match self.area {
            Area::Radius(r) => (r, r),
            Area::Box { width, height } => (height / 2.0, width / 2.0),
        };
        let (height, width) = (self.conversion * h, self.conversion * w);
        let lat_delta = rad_deg(height / EARTH_RADIUS_IN_METERS);
        let long_delta_top = rad_deg(width / EARTH_RADIUS_IN_METERS / (self.lat + lat_delta).to_radians_c().cos());
        let long_delta_bottom = rad_deg(width / EARTH_RADIUS_IN_METERS / (self.lat - lat_delta).to_radians_c().cos());
        // The hemispheres widen in opposite directions.
        let long_delta = if self.lat < 0.0 { long_delta_bottom } else { long_delta_top };
        [self.long - long_delta, self.lat - lat_delta, self.long + long_delta, self.lat + lat_delta]
    }

    /// Redis's `geohashCalculateAreasByShapeWGS84`: the cell holding the
    /// centre and its neighbours, the useless ones zeroed.
    fn cells(&self) -> [Cell; 9] {
        let [min_long, min_lat, max_long, max_lat] = self.bounds();
        let radius = match self.area {
            Area::Radius(r) => r,
            Area::Box { width, height } => ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt(),
        } * self.conversion;
        let mut step = estimate_step(radius, self.lat);
        let mut cells = Cell::of(self.long, self.lat, step).with_neighbours();
        // A centre near its cell's edge may leave part of the shape beyond
        // the neighbours: then one step coarser.
        let [_, north, south, east, west, ..] = cells.map(Cell::area);
        if step > 1
            && (north.1.max < max_lat || south.1.min > min_lat || east.0.max < max_long || west.0.min > min_long)
        {
            step -= 1;
            cells = Cell::of(self.long, self.lat, step).with_neighbours();
        }
        if step >= 2 {
            let (long, lat) = cells[0].area();
            let zero = Cell { bits: 0, step: 0 };
            // N, S, E, W, NE, NW, SE, SW are 1..=8.
            let mut drop = |which: [usize; 3]| which.into_iter().for_each(|i| cells[i] = zero);
            if lat.min < min_lat {
                drop([2, 8, 7]);
            }
            if lat.max > max_lat {
                drop([1, 5, 6]);
            }
            if long.min < min_long {
                drop([4, 8, 6]);
            }
            if long.max > max_long {
                drop([3, 7, 5]);
            }
        }
        cells
    }
}

/// Redis's `geohashEstimateStepsByRadius`.
fn estimate_step(mut range_meters: f64, lat: f64) -> u32 {
    if range_meters == 0.0 {
        return 26;
    }
    let mut step: i32 = 1;
    while range_meters < MERCATOR_MAX {
        range_meters *= 2.0;
        step += 1;
    }
    step -= 2;
    // Wider cells towards the poles.
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u32
}

/// A point found (Redis's `geoPoint`).
struct Point {
    member: Vec<u8>,
    long: f64,
    lat: f64,
    dist: f64,
    score: f64,
}

/// Redis's `membersOfAllNeighbors`: the points of `z` in `shape`, cell by
/// cell; with a `limit` (ANY), stopping once that many are found.
fn points_in(z: &ZSet, shape: &Shape, limit: usize) -> Vec<Point> {
    let mut found = Vec::new();
    let full = |found: &Vec<Point>| limit != 0 && found.len() >= limit;
    let cells = shape.cells();
    let mut last = 0;
    for (i, &cell) in cells.iter().enumerate() {
        if cell.step == 0 && cell.bits == 0 {
            continue;
        }
        // Huge radii make neighbours coincide: skip a repeat.
        if last != 0 && cell == cells[last] {
            continue;
        }
        if full(&found) {
            break;
        }
        for (member, score) in z.range(z.score_ranks(&cell.scores())) {
            let (long, lat) = decode(score);
            if let Some(dist) = shape.distance_to(long, lat) {
                found.push(Point { member: member.to_vec(), long, lat, dist, score });
            }
            if full(&found) {
                break;
            }
        }
        last = i;
    }
    found
}

/// Redis's `sort_gp_asc` as C's int: NaN compares as less.
fn by_distance(a: &Point, b: &Point) -> i32 {
    if a.dist > b.dist {
        1
    } else if a.dist == b.dist {
        0
    } else {
        -1
    }
}

/// A C comparator: negative, 0 or positive.
type Cmp = dyn Fn(&Point, &Point) -> i32;

/// glibc's `qsort` (its merge sort): stable, taking the left on ties.
fn merge_sort(v: &mut Vec<Point>, cmp: &Cmp) {
    if v.len() <= 1 {
        return;
    }
    let mut right = v.split_off(v.len() / 2);
    merge_sort(v, cmp);
    merge_sort(&mut right, cmp);
    let left = std::mem::take(v);
    v.reserve(left.len() + right.len());
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    while let (Some(a), Some(b)) = (l.peek(), r.peek()) {
        let next = if cmp(a, b) <= 0 { l.next() } else { r.next() };
        v.extend(next);
    }
    v.extend(l);
    v.extend(r);
}

/// Redis's `pqsort` (Bentley and McIlroy's quicksort that only recurses
/// into parts overlapping ranks `lrange..=rrange`) over `v[a..a + n]`.
fn pqsort(v: &mut [Point], cmp: &Cmp, mut a: usize, mut n: usize, lrange: usize, rrange: usize) {
    let c = |v: &[Point], i: usize, j: usize| cmp(&v[i], &v[j]);
    let med3 = |v: &[Point], i: usize, j: usize, k: usize| {
        if c(v, i, j) < 0 {
            if c(v, j, k) < 0 {
                j
            } else if c(v, i, k) < 0 {
                k
            } else {
                i
            }
        } else if c(v, j, k) > 0 {
            j
        } else if c(v, i, k) < 0 {
            i
        } else {
            k
        }
    };
    let vecswap = |v: &mut [Point], i: usize, j: usize, len: usize| (0..len).for_each(|k| v.swap(i + k, j + k));
    let overlaps = |from: usize, len: usize| !(rrange < from || lrange >= from + len);
    loop {
        if n < 7 {
            for m in a + 1..a + n {
                let mut l = m;
                while l > a && c(v, l - 1, l) > 0 {
                    v.swap(l, l - 1);
                    l -= 1;
                }
            }
            return;
        }
        let mut pm = a + n / 2;
        if n > 7 {
            let (mut pl, mut pn) = (a, a + n - 1);
            if n > 40 {
                let d = n / 8;
                pl = med3(v, pl, pl + d, pl + 2 * d);
                pm = med3(v, pm - d, pm, pm + d);
                pn = med3(v, pn - 2 * d, pn - d, pn);
            }
            pm = med3(v, pl, pm, pn);
        }
        v.swap(a, pm);
        // Positions as signed: `pc` may pass below `pb`.
        let (mut pa, mut pb) = (a as isize + 1, a as isize + 1);
        let (mut pc, mut pd) = (a as isize + n as isize - 1, a as isize + n as isize - 1);
        loop {
            while pb <= pc {
                let r = c(v, pb as usize, a);
                if r > 0 {
                    break;
                }
                if r == 0 {
                    v.swap(pa as usize, pb as usize);
                    pa += 1;
                }
                pb += 1;
            }
            while pb <= pc {
                let r = c(v, pc as usize, a);
                if r < 0 {
                    break;
                }
                if r == 0 {
                    v.swap(pc as usize, pd as usize);
                    pd -= 1;
                }
                pc -= 1;
            }
            if pb > pc {
                break;
            }
            v.swap(pb as usize, pc as usize);
            pb += 1;
            pc -= 1;
        }
        let pn = (a + n) as isize;
        let r = (pa - a as isize).min(pb - pa);
        vecswap(v, a, (pb - r) as usize, r as usize);
        let r = (pd - pc).min(pn - pd - 1);
        vecswap(v, pb as usize, (pn - r) as usize, r as usize);
        let r = (pb - pa) as usize;
        if r > 1 && overlaps(a, r) {
            pqsort(v, cmp, a, r, lrange, rrange);
        }
        let r = (pd - pc) as usize;
        if r <= 1 {
            return;
        }
        a = pn as usize - r;
        n = r;
        if !overlaps(a, n) {
            return;
        }
    }
}

/// Which command runs `georadius_generic` (Redis's RADIUS_* and GEOSEARCH
/// flags).
#[derive(Clone, Copy, PartialEq)]
enum Form {
    /// GEORADIUS(_RO): a centre of coordinates; STORE allowed unless RO.
    Coords { store: bool },
    /// GEORADIUSBYMEMBER(_RO): a member as the centre.
    Member { store: bool },
    /// GEOSEARCH, or GEOSEARCHSTORE with `store`.
    Search { store: bool },
}

fn georadius(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    georadius_generic(ctx, argv, 1, Form::Coords { store: true })
}

fn georadius_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    georadius_generic(ctx, argv, 1, Form::Coords { store: false })
}

fn georadiusbymember(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    georadius_generic(ctx, argv, 1, Form::Member { store: true })
}

fn georadiusbymember_ro(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    georadius_generic(ctx, argv, 1, Form::Member { store: false })
}

fn geosearch(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    georadius_generic(ctx, argv, 1, Form::Search { store: false })
}

fn geosearchstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    georadius_generic(ctx, argv, 2, Form::Search { store: true })
}

/// Redis's `extractDistanceOrReply`: a radius and its unit's meters.
fn parse_radius(radius: &[u8], unit_arg: &[u8]) -> Result<(f64, f64), CmdError> {
    let radius = parse_score(radius).ok_or_else(|| CmdError::other("ERR need numeric radius"))?;
    if radius < 0.0 {
        return Err(CmdError::other("ERR radius cannot be negative"));
    }
    Ok((radius, unit(unit_arg)?))
}

/// Redis's `extractBoxOrReply`: width, height and the unit's meters.
fn parse_box(argv: &[&[u8]]) -> Result<(f64, f64, f64), CmdError> {
    let width = parse_score(argv[0]).ok_or_else(|| CmdError::other("ERR need numeric width"))?;
    let height = parse_score(argv[1]).ok_or_else(|| CmdError::other("ERR need numeric height"))?;
    if height < 0.0 || width < 0.0 {
        return Err(CmdError::other("ERR height or width cannot be negative"));
    }
    Ok((width, height, unit(argv[2])?))
}

/// The centre of a search around `member` (Redis's `longLatFromMember`).
fn member_centre(z: &ZSet, member: &[u8]) -> Result<(f64, f64), CmdError> {
    z.score(member).map(decode).ok_or_else(|| CmdError::other("ERR could not decode requested zset member"))
}

/// Redis's `georadiusGeneric`: parses as Redis does (errors in its order,
/// a missing source answering only after the whole parse), searches,
/// sorts, and replies or stores.
fn georadius_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], src: usize, form: Form) -> CmdResult {
    let db = ctx.dbs.of(argv[src]);
    let z = zsets::read(ctx.stats, db, argv[src], ctx.now_ms)?;
    let mut centre: Option<(f64, f64)> = None;
    let mut area: Option<Area> = None;
    let mut conversion = 1.0;
    let mut store_key: Option<&[u8]> = None;
    let mut storedist = false;
    let base = match form {
        Form::Coords { .. } => {
            centre = Some(parse_long_lat(argv[2], argv[3])?);
            let (radius, meters) = parse_radius(argv[4], argv[5])?;
            (area, conversion) = (Some(Area::Radius(radius)), meters);
            6
        }
        Form::Member { .. } => {
            // Without a source, the arguments are still parsed for the
            // reply's shape, but the member and radius are not checked.
            if let Some(z) = z {
                centre = Some(member_centre(z, argv[2])?);
                let (radius, meters) = parse_radius(argv[3], argv[4])?;
                (area, conversion) = (Some(Area::Radius(radius)), meters);
            }
            5
        }
        Form::Search { store } => {
            if store {
                store_key = Some(argv[1]);
            }
            src + 1
        }
    };
    let (search, search_store) = match form {
        Form::Search { store } => (true, store),
        _ => (false, false),
    };
    let may_store = matches!(form, Form::Coords { store: true } | Form::Member { store: true });
    let (mut withdist, mut withhash, mut withcoord, mut any) = (false, false, false, false);
    let (mut from_member, mut from_lonlat, mut by_radius, mut by_box) = (false, false, false, false);
    let mut sort: Option<bool> = None; // Some(desc)
    let mut count: i64 = 0;
    let mut i = base;
    while i < argv.len() {
        let arg = argv[i];
        let left = argv.len() - i - 1;
        if eq(arg, "withdist") {
            withdist = true;
        } else if eq(arg, "withhash") {
            withhash = true;
        } else if eq(arg, "withcoord") {
            withcoord = true;
        } else if eq(arg, "any") {
            any = true;
        } else if eq(arg, "asc") {
            sort = Some(false);
        } else if eq(arg, "desc") {
            sort = Some(true);
        } else if eq(arg, "count") && left >= 1 {
            count = i64_arg(argv[i + 1])?;
            if count <= 0 {
                return Err(CmdError::other("ERR COUNT must be > 0"));
            }
            i += 1;
        } else if (eq(arg, "store") || eq(arg, "storedist")) && left >= 1 && may_store {
            store_key = Some(argv[i + 1]);
            storedist = eq(arg, "storedist");
            i += 1;
        } else if eq(arg, "storedist") && search_store {
            storedist = true;
        } else if eq(arg, "frommember") && left >= 1 && search && !from_lonlat {
            if let Some(z) = z {
                centre = Some(member_centre(z, argv[i + 1])?);
            }
            from_member = true;
            i += 1;
        } else if eq(arg, "fromlonlat") && left >= 2 && search && !from_member {
            centre = Some(parse_long_lat(argv[i + 1], argv[i + 2])?);
            from_lonlat = true;
            i += 2;
        } else if eq(arg, "byradius") && left >= 2 && search && !by_box {
            let (radius, meters) = parse_radius(argv[i + 1], argv[i + 2])?;
            (area, conversion) = (Some(Area::Radius(radius)), meters);
            by_radius = true;
            i += 2;
        } else if eq(arg, "bybox") && left >= 3 && search && !by_radius {
            let (width, height, meters) = parse_box(&argv[i + 1..i + 4])?;
            (area, conversion) = (Some(Area::Box { width, height }), meters);
            by_box = true;
            i += 3;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if store_key.is_some() && (withdist || withhash || withcoord) {
        let what = if search_store { "GEOSEARCHSTORE" } else { "STORE option in GEORADIUS" };
        return Err(CmdError::other(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        )));
    }
    let name = String::from_utf8_lossy(argv[0]);
    if search && !(from_member || from_lonlat) {
        return Err(CmdError::other(format!("ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}")));
    }
    if search && !(by_radius || by_box) {
        return Err(CmdError::other(format!("ERR exactly one of BYRADIUS and BYBOX can be specified for {name}")));
    }
    if any && count == 0 {
        return Err(CmdError::other("ERR the ANY argument requires COUNT argument"));
    }
    let (Some(z), Some((long, lat)), Some(area)) = (z, centre, area) else {
        // No source (the only way to get here without a shape).
        match store_key {
            Some(dst) => {
                if ctx.dbs.of(dst).remove(dst).is_some() {
                    ctx.wrote(1);
                    ctx.notify(notify::GENERIC, "del", dst);
                }
                ctx.out.int(0);
            }
            None => ctx.out.array(0),
        }
        return Ok(());
    };
    // COUNT sorts, closest first unless told otherwise (not with ANY).
    if count != 0 && sort.is_none() && !any {
        sort = Some(false);
    }
    let shape = Shape { long, lat, area, conversion };
    let mut points = points_in(z, &shape, if any { count as usize } else { 0 });
    if points.is_empty() && store_key.is_none() {
        ctx.out.array(0);
        return Ok(());
    }
    let returned = if count == 0 { points.len() } else { points.len().min(count as usize) };
    if let Some(desc) = sort {
        let cmp: &Cmp = if desc { &|a, b| -by_distance(a, b) } else { &by_distance };
        if returned == points.len() {
            merge_sort(&mut points, cmp);
        } else {
            let n = points.len();
            pqsort(&mut points, cmp, 0, n, 0, returned - 1);
        }
    }
    points.truncate(returned);
    for p in &mut points {
        p.dist /= conversion;
    }
    match store_key {
        None => reply_points(&mut ctx.out, &points, withdist, withhash, withcoord),
        Some(dst) => {
            let event = if search { "geosearchstore" } else { "georadiusstore" };
            store_points(ctx, dst, &points, storedist, event)
        }
    }
    Ok(())
}

/// Each point as its member, or as [member, distance?, hash?, [long, lat]?].
fn reply_points(out: &mut ReplyWriter<'_>, points: &[Point], withdist: bool, withhash: bool, withcoord: bool) {
    let options = usize::from(withdist) + usize::from(withhash) + usize::from(withcoord);
    out.array(points.len());
    for p in points {
        if options > 0 {
            out.array(options + 1);
        }
        out.bulk(&p.member);
        if withdist {
            out.bulk(format_distance(p.dist).as_bytes());
        }
        if withhash {
            out.int(p.score as i64);
        }
        if withcoord {
            out.array(2);
            reply_coordinate(out, p.long);
            reply_coordinate(out, p.lat);
        }
    }
}

/// STORE, STOREDIST and GEOSEARCHSTORE: the points as a sorted set scored
/// by geohash or distance, replacing `dst` (deleting it when none). Each
/// stored point counts as a change, as in Redis. `event` is the command's.
fn store_points(ctx: &mut Ctx<'_>, dst: &[u8], points: &[Point], storedist: bool, event: &str) {
    let limits = ctx.encoding_limits();
    let (lru, now) = (ctx.lru_s, ctx.now_ms);
    let db = ctx.dbs.of(dst);
    if points.is_empty() {
        // Redis's dbDelete, without a lookup: a key past its time goes as `del`.
        if db.remove(dst).is_some() {
            ctx.wrote(1);
            ctx.notify(notify::GENERIC, "del", dst);
        }
    } else {
        let mut z = ZSet::default();
        for p in points {
            let score = if storedist { p.dist } else { p.score };
            // A NaN distance (near antipodes) is no score; Redis asserts
            // on one, so nothing to match: the point is left out.
            let _ = z.add(&p.member, score, AddFlags::default(), &limits);
        }
        db.set_key(dst, Value::ZSet(z), now, lru);
        ctx.wrote(points.len() as u64);
        ctx.notify(notify::ZSET, event, dst);
    }
    ctx.out.int(points.len() as i64);
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
        assert_eq!(encode(LAT_RANGE, PALERMO.0, PALERMO.1, STEP), 3479099956230698);
        assert_eq!(encode(LAT_RANGE, CATANIA.0, CATANIA.1, STEP), 3479447370796909);
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
        assert_eq!(&standard_geohash(encode(LAT_RANGE_STANDARD, p.0, p.1, STEP)), b"sqc8b49rny0");
        assert_eq!(&standard_geohash(encode(LAT_RANGE_STANDARD, c.0, c.1, STEP)), b"sqdtr74hyu0");
    }

    #[test]
    fn steps_and_neighbours_are_redis_geohash_helpers() {
        assert_eq!(estimate_step(0.0, 0.0), 26);
        assert_eq!(estimate_step(200_000.0, 37.0), 6);
        assert_eq!(estimate_step(200_000.0, 70.0), 5);
        assert_eq!(estimate_step(200_000.0, -85.0), 4);
        assert_eq!(estimate_step(f64::INFINITY, 0.0), 1);
        // At step 1 (2x2 cells) a move wraps: north and south coincide.
        let cell = Cell::of(10.0, 10.0, 1);
        let [_, n, s, e, w, ..] = cell.with_neighbours();
        assert!(n == s && e == w && n != cell && e != cell);
        // Moving there and back is the identity; the 52-bit scores span the cell.
        let cell = Cell::of(PALERMO.0, PALERMO.1, 7);
        assert!(cell.moved(1, -1).moved(-1, 1) == cell);
        let scores = cell.scores();
        assert!(scores.min <= 3479099956230698.0 && 3479099956230698.0 < scores.max);
        let (long, lat) = cell.area();
        assert!(long.min <= PALERMO.0 && PALERMO.0 < long.max && lat.min <= PALERMO.1 && PALERMO.1 < lat.max);
    }

    fn points(dists: &[f64]) -> Vec<Point> {
        let point = |(i, &dist): (usize, &f64)| Point { member: vec![i as u8], long: 0.0, lat: 0.0, dist, score: 0.0 };
        dists.iter().enumerate().map(point).collect()
    }

    #[test]
    fn the_sorts_order_by_distance_as_redis_does() {
        let dists: Vec<f64> = (0..100u32).map(|i| f64::from((i * 37) % 23)).collect();
        let mut merged = points(&dists);
        merge_sort(&mut merged, &by_distance);
        // Stable: ties keep their order.
        let ordered = |w: &[Point]| w[0].dist < w[1].dist || (w[0].dist == w[1].dist && w[0].member < w[1].member);
        assert!(merged.windows(2).all(ordered));
        for k in [1, 5, 7, 41, 99] {
            let mut cut = points(&dists);
            pqsort(&mut cut, &by_distance, 0, 100, 0, k - 1);
            let dists = |v: &[Point]| v[..k].iter().map(|p| p.dist).collect::<Vec<_>>();
            assert_eq!(dists(&cut), dists(&merged));
        }
        // NaN is neither greater nor equal: no panic, whatever the order.
        let mut odd = points(&[f64::NAN, 1.0, f64::NAN, 0.0, 2.0, f64::NAN, 3.0, 1.0]);
        merge_sort(&mut odd, &by_distance);
        pqsort(&mut odd, &|a, b| -by_distance(a, b), 0, 8, 0, 2);
    }

    #[test]
    fn georadius_finds_the_last_store_from_argument_5() {
        let argv = |s: &'static str| s.split(' ').map(str::as_bytes).collect::<Vec<_>>();
        assert_eq!(georadius_keys(&argv("georadius k 1 2 3 km")).as_slice(), &[1]);
        assert_eq!(georadius_keys(&argv("georadius k 1 2 3 km STORE a storedist b")).as_slice(), &[1, 9]);
        assert_eq!(georadius_keys(&argv("georadiusbymember k m 3 km store")).as_slice(), &[1]);
    }
}
