//! The libraries Redis adds to its Lua, written here against the same
//! behaviour: `bit` (LuaBitOp), `cjson` (lua-cjson 2.1), `cmsgpack`
//! (lua-cmsgpack 0.4), and Redis's own `math.random`, a 48-bit generator
//! whose sequence is the same on every platform. `struct` is not
//! provided.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use mlua::{Lua, LightUserData, MultiValue, Table, Value, Variadic};

pub fn install(lua: &Lua) -> mlua::Result<()> {
    let globals = lua.globals();
    globals.raw_set("bit", bit(lua)?)?;
    globals.raw_set("cjson", cjson(lua)?)?;
    globals.raw_set("cmsgpack", cmsgpack(lua)?)?;
    let redis = lua.create_table()?;
    redis.raw_set("sha1hex", lua.create_function(|_, args: MultiValue| {
        if args.len() != 1 {
            return Err(mlua::Error::runtime("wrong number of arguments"));
        }
        let text = match args.front() {
            Some(Value::String(s)) => s.as_bytes().to_vec(),
            Some(Value::Integer(i)) => i.to_string().into_bytes(),
            Some(Value::Number(n)) => lua_number_text(*n).into_bytes(),
            _ => Vec::new(),
        };
        Ok(super::sha1_hex(&text))
    })?)?;
    redis.raw_set("acl_check_cmd", lua.create_function(|_, args: Variadic<mlua::String>| {
        let argv: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        super::engine::caller_may_run(&argv)
    })?)?;
    redis.raw_set("log", lua.create_function(|_, args: MultiValue| {
        if args.len() < 2 {
            return Err(super::engine::api_error("redis.log() requires two arguments or more."));
        }
        let Some(level) = args.front().and_then(super::engine::lua_number) else {
            return Err(super::engine::api_error("First argument must be a number (log level)."));
        };
        let words: Vec<String> = args
            .iter()
            .skip(1)
            .filter_map(|v| match v {
                Value::String(s) => Some(s.to_string_lossy()),
                Value::Integer(_) | Value::Number(_) => super::engine::lua_number(v).map(lua_number_text),
                _ => None,
            })
            .collect();
        let text = words.join(" ");
        match level as i64 {
            0 => tracing::debug!("{text}"),
            1 | 2 => tracing::info!("{text}"),
            3 => tracing::warn!("{text}"),
            _ => return Err(super::engine::api_error("Invalid debug level.")),
        }
        Ok(())
    })?)?;
    redis.raw_set("set_repl", lua.create_function(|_, args: Variadic<Value>| {
        let [flags] = &args[..] else { return Err(super::engine::api_error("redis.set_repl() requires two arguments.")) };
        // Keel's durability is the journal: every write of a script goes
        // to it and to replicas, or the promise that an acknowledged write
        // is on disk would not hold.
        match super::engine::lua_number(flags).unwrap_or(0.0) as i64 {
            3 => Ok(()),
            0..=2 => Err(super::engine::api_error("Keel logs every write of a script: only redis.REPL_ALL is supported.")),
            _ => Err(super::engine::api_error("Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.")),
        }
    })?)?;
    for (name, level) in [("LOG_DEBUG", 0), ("LOG_VERBOSE", 1), ("LOG_NOTICE", 2), ("LOG_WARNING", 3)] {
        redis.raw_set(name, level)?;
    }
    redis.raw_set("REDIS_VERSION", crate::server::REDIS_VERSION)?;
    redis.raw_set("REDIS_VERSION_NUM", 0x0007_000f)?;
    globals.raw_set("redis", redis)?;
    let math: Table = globals.raw_get("math")?;
    math.raw_set("random", lua.create_function(|_, args: Variadic<Value>| {
        let args = numbers(&args, "random")?;
        let r = (lrand48() % LRAND48_MAX) as f64 / LRAND48_MAX as f64;
        let int = |x: f64| x as i64 as f64;
        match args.as_slice() {
            [] => Ok(r),
            [u] if int(*u) >= 1.0 => Ok((r * int(*u)).floor() + 1.0),
            [l, u] if int(*l) <= int(*u) => Ok((r * (int(*u) - int(*l) + 1.0)).floor() + int(*l)),
            [_] | [_, _] => Err(mlua::Error::runtime("bad argument to 'random' (interval is empty)")),
            _ => Err(mlua::Error::runtime("wrong number of arguments")),
        }
    })?)?;
    math.raw_set("randomseed", lua.create_function(|_, seed: Value| {
        let seed = number(&seed, 1, "randomseed")?;
        LRAND48.store(((seed as i64 as i32 as u32 as u64) << 16) | 0x330e, Ordering::Relaxed);
        Ok(())
    })?)?;
    Ok(())
}

/// Redis's `redisLrand48`: drand48's generator, started where an unseeded
/// lrand48 starts, one for the process as Redis's (scripts run one at a
/// time: each holds every shard).
static LRAND48: AtomicU64 = AtomicU64::new(0x1234_abcd_330e);
/// Redis's REDIS_LRAND48_MAX (INT32_MAX).
const LRAND48_MAX: u64 = (1 << 31) - 1;

fn lrand48() -> u64 {
    let next = |x: u64| x.wrapping_mul(0x5_deec_e66d).wrapping_add(0xb) & ((1 << 48) - 1);
    let before = LRAND48.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(next(x))).unwrap_or(0);
    next(before) >> 17
}

/// Lua's `luaL_checknumber`: a number, or a string that reads as one.
fn number(value: &Value, position: usize, function: &str) -> mlua::Result<f64> {
    let found = match value {
        Value::Integer(i) => return Ok(*i as f64),
        Value::Number(n) => return Ok(*n),
        Value::String(s) => match s.to_str().ok().and_then(|t| t.trim().parse::<f64>().ok()) {
            Some(n) => return Ok(n),
            None => "string",
        },
        Value::Nil => "no value",
        other => other.type_name(),
    };
    Err(mlua::Error::runtime(format!("bad argument #{position} to '{function}' (number expected, got {found})")))
}

fn numbers(values: &[Value], function: &str) -> mlua::Result<Vec<f64>> {
    values.iter().enumerate().map(|(i, v)| number(v, i + 1, function)).collect()
}

/// A Lua number as `tostring` writes it (`%.14g`).
pub(super) fn lua_number_text(n: f64) -> String {
    let mut out = Vec::new();
    keel_protocol::reply::format_double_g(n, 14, &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// LuaBitOp: 32-bit operations on Lua numbers, results signed.
fn bit(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let fold = |lua: &Lua, name: &str, op: fn(i32, i32) -> i32| -> mlua::Result<()> {
        let function = name.to_string();
        t.raw_set(name, lua.create_function(move |_, args: Variadic<Value>| {
            let first = number(args.first().unwrap_or(&Value::Nil), 1, &function)?;
            let rest = numbers(args.get(1..).unwrap_or_default(), &function)?;
            Ok(rest.iter().fold(tobit(first), |acc, &x| op(acc, tobit(x))))
        })?)
    };
    fold(lua, "band", |a, b| a & b)?;
    fold(lua, "bor", |a, b| a | b)?;
    fold(lua, "bxor", |a, b| a ^ b)?;
    let unary = |lua: &Lua, name: &'static str, op: fn(i32) -> i32| -> mlua::Result<()> {
        t.raw_set(name, lua.create_function(move |_, x: Value| Ok(op(tobit(number(&x, 1, name)?))))?)
    };
    unary(lua, "tobit", |x| x)?;
    unary(lua, "bnot", |x| !x)?;
    unary(lua, "bswap", i32::swap_bytes)?;
    let shift = |lua: &Lua, name: &'static str, op: fn(i32, u32) -> i32| -> mlua::Result<()> {
        t.raw_set(name, lua.create_function(move |_, (x, n): (Value, Value)| {
            Ok(op(tobit(number(&x, 1, name)?), tobit(number(&n, 2, name)?) as u32 & 31))
        })?)
    };
    shift(lua, "lshift", |x, n| ((x as u32) << n) as i32)?;
    shift(lua, "rshift", |x, n| ((x as u32) >> n) as i32)?;
    shift(lua, "arshift", |x, n| x >> n)?;
    shift(lua, "rol", |x, n| (x as u32).rotate_left(n) as i32)?;
    shift(lua, "ror", |x, n| (x as u32).rotate_right(n) as i32)?;
    t.raw_set("tohex", lua.create_function(|_, (x, n): (Value, Value)| {
        let x = number(&x, 1, "tohex")?;
        let mut n = if n.is_nil() { 8 } else { tobit(number(&n, 2, "tohex")?) };
        let upper = n < 0;
        if upper {
            n = -n;
        }
        let n = n.clamp(1, 8) as usize;
        let x = tobit(x) as u32 as u64;
        let text = if upper { format!("{x:08X}") } else { format!("{x:08x}") };
        Ok(text[8 - n..].to_string())
    })?)?;
    Ok(t)
}

/// LuaBitOp's normalisation: the number rounded, modulo 2^32, signed.
fn tobit(x: f64) -> i32 {
    if !x.is_finite() {
        return 0;
    }
    x.round_ties_even().rem_euclid(4_294_967_296.0) as u64 as u32 as i32
}

/// lua-cjson's settings, changed by its `encode_*`/`decode_*` functions.
#[derive(Clone, Copy)]
struct JsonConfig {
    encode_max_depth: usize,
    decode_max_depth: usize,
    encode_invalid_numbers: bool,
    decode_invalid_numbers: bool,
    number_precision: usize,
    sparse_convert: bool,
    sparse_ratio: usize,
    sparse_safe: usize,
}

const JSON_DEFAULTS: JsonConfig = JsonConfig {
    encode_max_depth: 1000,
    decode_max_depth: 1000,
    encode_invalid_numbers: false,
    decode_invalid_numbers: true,
    number_precision: 14,
    sparse_convert: false,
    sparse_ratio: 2,
    sparse_safe: 10,
};

fn cjson(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let config = Rc::new(Cell::new(JSON_DEFAULTS));
    let null = Value::LightUserData(LightUserData(std::ptr::null_mut()));
    t.raw_set("null", null)?;
    let c = config.clone();
    t.raw_set("encode", lua.create_function(move |_, value: Value| {
        let mut out = Vec::new();
        encode(&mut out, &value, &c.get(), 1)?;
        Ok(mlua::BString::from(out))
    })?)?;
    let c = config.clone();
    t.raw_set("decode", lua.create_function(move |lua, text: mlua::String| {
        let bytes = text.as_bytes();
        let mut parser = Parser { lua, bytes: &bytes, at: 0, config: c.get() };
        parser.skip_space();
        let value = parser.value(1)?;
        parser.skip_space();
        if parser.at < parser.bytes.len() {
            return Err(parser.error("the end", "trailing garbage"));
        }
        Ok(value)
    })?)?;
    let setting = |name: &str, apply: fn(&mut JsonConfig, Option<f64>)| -> mlua::Result<()> {
        let c = config.clone();
        t.raw_set(name, lua.create_function(move |_, arg: Value| {
            let mut now = c.get();
            let number = match arg {
                Value::Integer(i) => Some(i as f64),
                Value::Number(n) => Some(n),
                Value::Boolean(b) => Some(f64::from(u8::from(b))),
                Value::String(s) => match s.to_str()?.as_ref() {
                    "on" => Some(1.0),
                    "off" => Some(0.0),
                    other => other.parse().ok(),
                },
                _ => None,
            };
            apply(&mut now, number);
            c.set(now);
            Ok(())
        })?)
    };
    setting("encode_max_depth", |c, n| c.encode_max_depth = n.map_or(1000, |n| n.max(1.0) as usize))?;
    setting("decode_max_depth", |c, n| c.decode_max_depth = n.map_or(1000, |n| n.max(1.0) as usize))?;
    setting("encode_invalid_numbers", |c, n| c.encode_invalid_numbers = n.is_some_and(|n| n != 0.0))?;
    setting("decode_invalid_numbers", |c, n| c.decode_invalid_numbers = n.is_none_or(|n| n != 0.0))?;
    setting("encode_number_precision", |c, n| c.number_precision = n.map_or(14, |n| n.clamp(1.0, 14.0) as usize))?;
    setting("encode_keep_buffer", |_, _| {})?;
    let c = config.clone();
    t.raw_set("encode_sparse_array", lua.create_function(move |_, (convert, ratio, safe): (Option<bool>, Option<f64>, Option<f64>)| {
        let mut now = c.get();
        if let Some(convert) = convert {
            now.sparse_convert = convert;
        }
        if let Some(ratio) = ratio {
            now.sparse_ratio = ratio.max(0.0) as usize;
        }
        if let Some(safe) = safe {
            now.sparse_safe = safe.max(0.0) as usize;
        }
        c.set(now);
        Ok(())
    })?)?;
    Ok(t)
}

fn encode(out: &mut Vec<u8>, value: &Value, config: &JsonConfig, depth: usize) -> mlua::Result<()> {
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(i) => encode_number(out, *i as f64, config)?,
        Value::Number(n) => encode_number(out, *n, config)?,
        Value::String(s) => encode_string(out, &s.as_bytes()),
        Value::Table(t) => {
            if depth > config.encode_max_depth.min(DECODE_DEPTH_MAX) {
                return Err(mlua::Error::runtime(format!("Cannot serialise, excessive nesting ({depth})")));
            }
            match array_length(t, config)? {
                Some(len) if len > 0 => {
                    out.push(b'[');
                    for i in 1..=len {
                        if i > 1 {
                            out.push(b',');
                        }
                        encode(out, &t.raw_get::<Value>(i)?, config, depth + 1)?;
                    }
                    out.push(b']');
                }
                _ => {
                    out.push(b'{');
                    let mut first = true;
                    for pair in t.pairs::<Value, Value>() {
                        let (k, v) = pair?;
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        match &k {
                            Value::String(s) => encode_string(out, &s.as_bytes()),
                            Value::Integer(i) => encode_string(out, i.to_string().as_bytes()),
                            Value::Number(n) => {
                                let mut key = Vec::new();
                                encode_number(&mut key, *n, config)?;
                                encode_string(out, &key);
                            }
                            other => {
                                return Err(mlua::Error::runtime(format!(
                                    "Cannot serialise {}: table key must be a number or string",
                                    other.type_name()
                                )))
                            }
                        }
                        out.push(b':');
                        encode(out, &v, config, depth + 1)?;
                    }
                    out.push(b'}');
                }
            }
        }
        other => {
            return Err(mlua::Error::runtime(format!("Cannot serialise {}: type not supported", other.type_name())));
        }
    }
    Ok(())
}

/// lua-cjson's `lua_array_length`: the largest key of a table whose keys
/// are all positive integers, None for a table with any other key. An
/// excessively sparse array is an error (or, with `encode_sparse_array`'s
/// convert, an object).
fn array_length(t: &Table, config: &JsonConfig) -> mlua::Result<Option<usize>> {
    let (mut max, mut items) = (0usize, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let (k, _) = pair?;
        let n = match k {
            Value::Integer(i) => i as f64,
            Value::Number(n) => n,
            _ => return Ok(None),
        };
        if n < 1.0 || n.floor() != n {
            return Ok(None);
        }
        max = max.max(n as usize);
        items += 1;
    }
    if config.sparse_ratio > 0 && max > items * config.sparse_ratio && max > config.sparse_safe {
        if !config.sparse_convert {
            return Err(mlua::Error::runtime("Cannot serialise table: excessively sparse array"));
        }
        return Ok(None);
    }
    Ok(Some(max))
}

fn encode_number(out: &mut Vec<u8>, n: f64, config: &JsonConfig) -> mlua::Result<()> {
    if !n.is_finite() {
        if !config.encode_invalid_numbers {
            return Err(mlua::Error::runtime("Cannot serialise number: must not be NaN or Inf"));
        }
        out.extend_from_slice(match n {
            n if n.is_nan() => b"nan" as &[u8],
            n if n > 0.0 => b"inf",
            _ => b"-inf",
        });
        return Ok(());
    }
    keel_protocol::reply::format_double_g(n, config.number_precision, out);
    Ok(())
}

fn encode_string(out: &mut Vec<u8>, s: &[u8]) {
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 || b == 0x7f => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
}

/// A JSON text to Lua values, as lua-cjson decodes it.
struct Parser<'a> {
    lua: &'a Lua,
    bytes: &'a [u8],
    at: usize,
    config: JsonConfig,
}

impl Parser<'_> {
    fn error(&self, expected: &str, found: &str) -> mlua::Error {
        mlua::Error::runtime(format!("Expected {expected} but found {found} at character {}", self.at + 1))
    }

    fn skip_space(&mut self) {
        while self.bytes.get(self.at).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
            self.at += 1;
        }
    }

    fn value(&mut self, depth: usize) -> mlua::Result<Value> {
        match self.bytes.get(self.at) {
            Some(b'{') | Some(b'[') if depth > self.config.decode_max_depth.min(DECODE_DEPTH_MAX) => Err(mlua::Error::runtime(format!(
                "Found too many nested data structures ({depth}) at character {}",
                self.at + 1
            ))),
            Some(b'{') => self.object(depth),
            Some(b'[') => self.array(depth),
            Some(b'"') => Ok(Value::String(self.lua.create_string(self.string()?)?)),
            Some(b't') if self.bytes[self.at..].starts_with(b"true") => {
                self.at += 4;
                Ok(Value::Boolean(true))
            }
            Some(b'f') if self.bytes[self.at..].starts_with(b"false") => {
                self.at += 5;
                Ok(Value::Boolean(false))
            }
            Some(b'n') if self.bytes[self.at..].starts_with(b"null") => {
                self.at += 4;
                Ok(Value::LightUserData(LightUserData(std::ptr::null_mut())))
            }
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(b'i' | b'I' | b'n' | b'N') if self.config.decode_invalid_numbers => self.number(),
            Some(_) => Err(self.error("value", "invalid token")),
            None => Err(self.error("value", "T_END")),
        }
    }

    fn number(&mut self) -> mlua::Result<Value> {
        let start = self.at;
        while self.bytes.get(self.at).is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'+' | b'.')) {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.bytes[start..self.at]).unwrap_or("");
        let parsed = match text.to_ascii_lowercase().as_str() {
            "inf" | "infinity" => Some(f64::INFINITY),
            "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
            "nan" | "-nan" => Some(f64::NAN),
            t => match t.strip_prefix("0x").or_else(|| t.strip_prefix("-0x")) {
                Some(hex) if self.config.decode_invalid_numbers => {
                    i64::from_str_radix(hex, 16).ok().map(|v| if t.starts_with('-') { -(v as f64) } else { v as f64 })
                }
                _ => t.parse().ok(),
            },
        };
        match parsed {
            Some(n) => Ok(Value::Number(n)),
            None => {
                self.at = start;
                Err(self.error("value", "invalid number"))
            }
        }
    }

    fn string(&mut self) -> mlua::Result<Vec<u8>> {
        self.at += 1;
        let mut out = Vec::new();
        loop {
            let Some(&b) = self.bytes.get(self.at) else {
                return Err(self.error("value", "unexpected end of string"));
            };
            self.at += 1;
            match b {
                b'"' => return Ok(out),
                b'\\' => {
                    let Some(&e) = self.bytes.get(self.at) else {
                        return Err(self.error("value", "invalid escape code"));
                    };
                    self.at += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(0x08),
                        b'f' => out.push(0x0c),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let c = self.unicode_escape()?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return Err(self.error("value", "invalid escape code")),
                    }
                }
                b if b < 0x20 => return Err(self.error("value", "invalid token")),
                b => out.push(b),
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let text = self.bytes.get(self.at..self.at + 4)?;
        let v = u32::from_str_radix(std::str::from_utf8(text).ok()?, 16).ok()?;
        self.at += 4;
        Some(v)
    }

    fn unicode_escape(&mut self) -> mlua::Result<char> {
        let invalid = |p: &Self| p.error("value", "invalid unicode escape code");
        let first = self.hex4().ok_or_else(|| invalid(self))?;
        let code = if (0xd800..0xdc00).contains(&first) {
            if !self.bytes[self.at..].starts_with(b"\\u") {
                return Err(invalid(self));
            }
            self.at += 2;
            let low = self.hex4().ok_or_else(|| invalid(self))?;
            if !(0xdc00..0xe000).contains(&low) {
                return Err(invalid(self));
            }
            0x10000 + ((first - 0xd800) << 10) + (low - 0xdc00)
        } else {
            first
        };
        char::from_u32(code).ok_or_else(|| invalid(self))
    }

    fn array(&mut self, depth: usize) -> mlua::Result<Value> {
        self.at += 1;
        let t = self.lua.create_table()?;
        self.skip_space();
        if self.bytes.get(self.at) == Some(&b']') {
            self.at += 1;
            return Ok(Value::Table(t));
        }
        let mut i = 1;
        loop {
            self.skip_space();
            t.raw_seti(i, self.value(depth + 1)?)?;
            i += 1;
            self.skip_space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b']') => {
                    self.at += 1;
                    return Ok(Value::Table(t));
                }
                _ => return Err(self.error("comma or array end", "invalid token")),
            }
        }
    }

    fn object(&mut self, depth: usize) -> mlua::Result<Value> {
        self.at += 1;
        let t = self.lua.create_table()?;
        self.skip_space();
        if self.bytes.get(self.at) == Some(&b'}') {
            self.at += 1;
            return Ok(Value::Table(t));
        }
        loop {
            self.skip_space();
            if self.bytes.get(self.at) != Some(&b'"') {
                return Err(self.error("object key string", "invalid token"));
            }
            let key = self.string()?;
            self.skip_space();
            if self.bytes.get(self.at) != Some(&b':') {
                return Err(self.error("colon", "invalid token"));
            }
            self.at += 1;
            self.skip_space();
            let value = self.value(depth + 1)?;
            t.raw_set(self.lua.create_string(key)?, value)?;
            self.skip_space();
            match self.bytes.get(self.at) {
                Some(b',') => self.at += 1,
                Some(b'}') => {
                    self.at += 1;
                    return Ok(Value::Table(t));
                }
                _ => return Err(self.error("comma or object end", "invalid token")),
            }
        }
    }
}

/// lua-cmsgpack's nesting limit: deeper tables are packed as nil.
const MSGPACK_MAX_NESTING: usize = 16;

fn cmsgpack(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set("pack", lua.create_function(|_, values: Variadic<Value>| {
        if values.is_empty() {
            return Err(mlua::Error::runtime("bad argument #0 to 'pack' (MessagePack pack needs input.)"));
        }
        let mut out = Vec::new();
        for value in values.iter() {
            msgpack_encode(&mut out, value, 0)?;
        }
        Ok(mlua::BString::from(out))
    })?)?;
    t.raw_set("unpack", lua.create_function(|lua, packed: mlua::String| msgpack_unpack(lua, &packed.as_bytes(), 0, 0))?)?;
    t.raw_set("unpack_one", lua.create_function(|lua, (packed, offset): (mlua::String, Option<i64>)| {
        msgpack_unpack(lua, &packed.as_bytes(), 1, offset.unwrap_or(0))
    })?)?;
    t.raw_set("unpack_limit", lua.create_function(|lua, (packed, limit, offset): (mlua::String, i64, Option<i64>)| {
        msgpack_unpack(lua, &packed.as_bytes(), limit, offset.unwrap_or(0))
    })?)?;
    Ok(t)
}

fn msgpack_encode(out: &mut Vec<u8>, value: &Value, level: usize) -> mlua::Result<()> {
    match value {
        Value::String(s) => {
            let s = s.as_bytes();
            let len = s.len();
            match len {
                0..32 => out.push(0xa0 | len as u8),
                32..=0xff => out.extend_from_slice(&[0xd9, len as u8]),
                0x100..=0xffff => {
                    out.push(0xda);
                    out.extend_from_slice(&(len as u16).to_be_bytes());
                }
                _ => {
                    out.push(0xdb);
                    out.extend_from_slice(&(len as u32).to_be_bytes());
                }
            }
            out.extend_from_slice(&s);
        }
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(i) => msgpack_int(out, *i),
        Value::Number(n) => {
            // An integral number that fits in 64 bits is an integer.
            if n.is_finite() && (*n as i64) as f64 == *n {
                msgpack_int(out, *n as i64);
            } else if (*n as f32) as f64 == *n || n.is_nan() {
                out.push(0xca);
                out.extend_from_slice(&(*n as f32).to_be_bytes());
            } else {
                out.push(0xcb);
                out.extend_from_slice(&n.to_be_bytes());
            }
        }
        Value::Table(t) if level < MSGPACK_MAX_NESTING => {
            let header = |out: &mut Vec<u8>, len: usize, fix: u8, small: u8| match len {
                0..16 => out.push(fix | len as u8),
                16..=0xffff => {
                    out.push(small);
                    out.extend_from_slice(&(len as u16).to_be_bytes());
                }
                _ => {
                    out.push(small + 1);
                    out.extend_from_slice(&(len as u32).to_be_bytes());
                }
            };
            // Pairs are walked, never gathered: each Lua value held from
            // Rust takes one of a few thousand reference slots.
            match msgpack_array_len(t)? {
                Some(len) => {
                    header(out, len, 0x90, 0xdc);
                    for i in 1..=len {
                        msgpack_encode(out, &t.raw_get::<Value>(i)?, level + 1)?;
                    }
                }
                None => {
                    header(out, t.pairs::<Value, Value>().count(), 0x80, 0xde);
                    for pair in t.pairs::<Value, Value>() {
                        let (k, v) = pair?;
                        msgpack_encode(out, &k, level + 1)?;
                        msgpack_encode(out, &v, level + 1)?;
                    }
                }
            }
        }
        // nil, functions, userdata, and tables past the nesting limit.
        _ => out.push(0xc0),
    }
    Ok(())
}

/// lua-cmsgpack's `table_is_an_array`: every key a positive integer and
/// as many keys as the largest.
fn msgpack_array_len(t: &Table) -> mlua::Result<Option<usize>> {
    let (mut max, mut count) = (0usize, 0usize);
    for pair in t.pairs::<Value, Value>() {
        let n = match pair?.0 {
            Value::Integer(i) => i as f64,
            Value::Number(n) => n,
            _ => return Ok(None),
        };
        if n <= 0.0 || n.floor() != n {
            return Ok(None);
        }
        max = max.max(n as usize);
        count += 1;
    }
    Ok((max == count).then_some(max))
}

fn msgpack_int(out: &mut Vec<u8>, n: i64) {
    match n {
        0..=127 => out.push(n as u8),
        128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        0x1_0000_0000.. => {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
        -32..=-1 => out.push(n as i8 as u8),
        -128..=-33 => out.extend_from_slice(&[0xd0, n as i8 as u8]),
        -32768..=-129 => {
            out.push(0xd1);
            out.extend_from_slice(&(n as i16).to_be_bytes());
        }
        -2_147_483_648..=-32769 => {
            out.push(0xd2);
            out.extend_from_slice(&(n as i32).to_be_bytes());
        }
        _ => {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// lua-cmsgpack's `mp_unpack_full`: up to `limit` objects (0 with offset
/// 0: all) from `offset`; with a limit or offset, the next offset (-1 at
/// the end) comes first.
fn msgpack_unpack(lua: &Lua, packed: &[u8], limit: i64, offset: i64) -> mlua::Result<MultiValue> {
    if offset < 0 || limit < 0 {
        return Err(mlua::Error::runtime(format!(
            "Invalid request to unpack with offset of {offset} and limit of {}.",
            packed.len()
        )));
    }
    if offset as usize > packed.len() {
        return Err(mlua::Error::runtime(format!(
            "Start offset {offset} greater than input length {}.",
            packed.len()
        )));
    }
    let all = limit == 0 && offset == 0;
    let limit = if all { i64::MAX } else { limit };
    let mut cursor = MsgpackCursor { lua, bytes: packed, at: offset as usize, depth: 0 };
    let mut values = MultiValue::new();
    let mut count = 0;
    while cursor.at < packed.len() && count < limit {
        values.push_back(cursor.value()?);
        count += 1;
    }
    if !all {
        let next = if cursor.at == packed.len() { -1 } else { cursor.at as i64 };
        values.push_front(Value::Integer(next));
    }
    Ok(values)
}

struct MsgpackCursor<'a> {
    lua: &'a Lua,
    bytes: &'a [u8],
    at: usize,
    /// Containers open around the value being read: bounded, so that
    /// hostile input cannot overflow the thread's stack.
    depth: usize,
}

/// How deep decoders nest (cjson's `decode_max_depth` included): Lua's own
/// C stack would refuse much more.
const DECODE_DEPTH_MAX: usize = 1000;

impl MsgpackCursor<'_> {
    fn take(&mut self, n: usize) -> mlua::Result<&[u8]> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| mlua::Error::runtime("Missing bytes in input."))?;
        let taken = &self.bytes[self.at..end];
        self.at = end;
        Ok(taken)
    }

    fn uint(&mut self, n: usize) -> mlua::Result<u64> {
        Ok(self.take(n)?.iter().fold(0u64, |v, &b| v << 8 | u64::from(b)))
    }

    fn string(&mut self, len: usize) -> mlua::Result<Value> {
        let bytes = self.take(len)?.to_vec();
        Ok(Value::String(self.lua.create_string(bytes)?))
    }

    fn array(&mut self, len: usize) -> mlua::Result<Value> {
        let t = self.lua.create_table()?;
        for i in 1..=len {
            t.raw_seti(i, self.value()?)?;
        }
        Ok(Value::Table(t))
    }

    fn map(&mut self, len: usize) -> mlua::Result<Value> {
        let t = self.lua.create_table()?;
        for _ in 0..len {
            let (k, v) = (self.value()?, self.value()?);
            if !k.is_nil() {
                t.raw_set(k, v)?;
            }
        }
        Ok(Value::Table(t))
    }

    fn value(&mut self) -> mlua::Result<Value> {
        if self.depth >= DECODE_DEPTH_MAX {
            return Err(mlua::Error::runtime("MessagePack input is nested too deeply."));
        }
        self.depth += 1;
        let value = self.value_here();
        self.depth -= 1;
        value
    }

    fn value_here(&mut self) -> mlua::Result<Value> {
        let tag = self.take(1)?[0];
        let number = |n: f64| Ok(Value::Number(n));
        match tag {
            0x00..=0x7f => number(f64::from(tag)),
            0xe0..=0xff => number(f64::from(tag as i8)),
            0x80..=0x8f => self.map(usize::from(tag & 0x0f)),
            0x90..=0x9f => self.array(usize::from(tag & 0x0f)),
            0xa0..=0xbf => self.string(usize::from(tag & 0x1f)),
            0xc0 => Ok(Value::Nil),
            0xc2 => Ok(Value::Boolean(false)),
            0xc3 => Ok(Value::Boolean(true)),
            0xca => number(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => number(f64::from_bits(self.uint(8)?)),
            0xcc => number(self.uint(1)? as f64),
            0xcd => number(self.uint(2)? as f64),
            0xce => number(self.uint(4)? as f64),
            0xcf => number(self.uint(8)? as f64),
            0xd0 => number(f64::from(self.uint(1)? as u8 as i8)),
            0xd1 => number(f64::from(self.uint(2)? as u16 as i16)),
            0xd2 => number(f64::from(self.uint(4)? as u32 as i32)),
            0xd3 => number(self.uint(8)? as i64 as f64),
            0xc4 | 0xd9 => {
                let len = self.uint(1)? as usize;
                self.string(len)
            }
            0xc5 | 0xda => {
                let len = self.uint(2)? as usize;
                self.string(len)
            }
            0xc6 | 0xdb => {
                let len = self.uint(4)? as usize;
                self.string(len)
            }
            0xdc => {
                let len = self.uint(2)? as usize;
                self.array(len)
            }
            0xdd => {
                let len = self.uint(4)? as usize;
                self.array(len)
            }
            0xde => {
                let len = self.uint(2)? as usize;
                self.map(len)
            }
            0xdf => {
                let len = self.uint(4)? as usize;
                self.map(len)
            }
            _ => Err(mlua::Error::runtime("Bad data format in input.")),
        }
    }
}

/// Feeds untrusted bytes to the libraries' decoders (`cjson.decode`,
/// `cmsgpack.unpack`), as a script could: each answers a value or an
/// error, never a panic or a crash (the fuzz target `script_decoders`).
pub fn decode_untrusted(data: &[u8]) {
    thread_local! {
        static LUA: Option<(Lua, mlua::Function, mlua::Function)> = {
            let lua = Lua::new();
            let decoders = install(&lua).and_then(|()| {
                let cjson: Table = lua.globals().raw_get("cjson")?;
                let cmsgpack: Table = lua.globals().raw_get("cmsgpack")?;
                Ok((cjson.raw_get("decode")?, cmsgpack.raw_get("unpack")?))
            });
            decoders.ok().map(|(json, msgpack)| (lua, json, msgpack))
        };
    }
    LUA.with(|state| {
        let Some((lua, json, msgpack)) = state else { return };
        let Ok(text) = lua.create_string(data) else { return };
        let _ = json.call::<MultiValue>(text.clone());
        let _ = msgpack.call::<MultiValue>(text);
    });
}
