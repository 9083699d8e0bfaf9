//! Differential tests of Lua scripting against Debian's redis-server: the
//! same scripts, in the same order, on a fresh Keel and a fresh Redis,
//! replies compared exactly (errors name the script's SHA1 and line, so
//! they compare too). The scripts cover the sandbox, the conversions of
//! replies both ways in RESP2 and RESP3, redis.* helpers, cjson, bit and
//! math.random (whose sequence is Redis's own); then FUNCTION and FCALL.

mod common;

use common::{Client, Frame, Server};

/// Each script runs with KEYS = {"k1", "k2"} and ARGV = {"a1", "7"}.
const SCRIPTS: &[&str] = &[
    "return a",
    "a = 1",
    "setmetatable(_G, {})",
    "local g = getmetatable(_G); g.__index = {}",
    "redis.call = 1",
    "string.foo = 1",
    "cjson.encode = 1",
    "bit.band = 1",
    "return type(print)",
    "return type(loadfile)",
    "return redis.call('nosuch')",
    "return redis.call('get')",
    "return redis.pcall('get')",
    "error('x')",
    "error({err='MY thing'})",
    "return {1,2,{3,'x'},nil,4}",
    "return redis.call('incr','k','x')",
    "return 'a' .. nil",
    "return pcall(function() error('boom') end)",
    "return {err='bad'}",
    "return redis.error_reply('FOO bar')",
    "return redis.error_reply('plain')",
    "return redis.error_reply(1)",
    "return {ok='fine'}",
    "return redis.status_reply('PONG')",
    "return 3.99",
    "return -3.99",
    "return true",
    "return false",
    "return {1,false,3}",
    "return nil",
    "x(",
    "return _G",
    "return loadstring('return 1')()",
    "return cjson.encode({1,2,{a=1}})",
    "return cjson.encode({s='a/b\"c', n=1.5, big=1e20, small=0.1, b=true, z=cjson.null})",
    "return cjson.decode('[1,2,{\"a\":null}]')[3].a == cjson.null",
    "return table.concat(cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]'), ' ')",
    "return cjson.decode('{\"a\":[1,2,3],\"b\":\"\\\\u00e9\"}').b",
    "return cjson.encode(function() end)",
    "local ok, e = pcall(cjson.encode, {[false]=1}); return e",
    "return cjson.encode({[1]=1, [20]=2})",
    "return redis.sha1hex('')",
    "return redis.sha1hex('abc')",
    "return {math.random(), math.random(10), math.random(5,8)}",
    "math.randomseed(42); return {math.random(1000), math.random(1000)}",
    "return {bit.tohex(255), bit.tohex(-1, 4), bit.band(7,3), bit.bxor(1,2), bit.lshift(1,31), bit.rshift(-1,28), bit.arshift(-16,2), bit.tobit(2^32+5)}",
    "return bit.band('x')",
    "return redis.call('set','a','b','c')",
    "return redis.call('set', KEYS[1], ARGV[1])",
    "return redis.call('get', KEYS[1])",
    "return redis.call('lpush', KEYS[1], 'x')",
    "local ok, e = pcall(redis.call, 'lpush', KEYS[1], 'x'); return e",
    "local t = redis.pcall('lpush', KEYS[1], 'x'); return t.err",
    "return redis.call('set', 'n', 1.5)",
    "return redis.call('get', 'n')",
    "return redis.call('incrbyfloat', 'n', 0.1)",
    "redis.call('select', 3); return redis.call('set', 'indb3', 1)",
    "return redis.call('exists', 'indb3')",
    "return redis.call('ping')",
    "return redis.call('hset', KEYS[2], 'f1', 'v1', 'f2', ARGV[2])",
    "return redis.call('hgetall', KEYS[2])",
    "redis.setresp(3); return redis.call('hgetall', KEYS[2])",
    "redis.setresp(3); return redis.call('hgetall', 'missing')",
    "redis.setresp(3); return redis.call('get', 'missing')",
    "return redis.call('get', 'missing')",
    "redis.setresp(3); return redis.call('zadd', 'z', 1.5, 'm')",
    "redis.setresp(3); return redis.call('zscore', 'z', 'm')",
    "redis.setresp(3); return {redis.call('exists', 'z') == 1, true, false}",
    "redis.setresp(3); return redis.call('smembers', 'nothing')",
    "return redis.setresp(4)",
    "return {double=3.5}",
    "return {map={a=1}}",
    "return {set={x=true}}",
    "return {big_number='123456789012345678901234567890'}",
    "return {verbatim_string={format='txt', string='hello'}}",
    "local t = {}; for i=1,10 do t[i] = redis.call('incr', 'ctr') end; return t",
    "return #KEYS + #ARGV",
    "return string.format('%d %s %5.2f', 3, 'x', 1.5)",
    "return ('x'):rep(3)",
    "return tostring(1e15) .. ' ' .. tostring(0.1) .. ' ' .. tostring(1/3)",
    "return coroutine.wrap(function() coroutine.yield(7) end)()",
    "return redis.REDIS_VERSION_NUM > 0",
    "redis.log(redis.LOG_WARNING, 'from a script')",
    "return redis.log(9, 'x')",
    "return redis.acl_check_cmd('get', 'x')",
    "return redis.acl_check_cmd('nosuch')",
    "return redis.replicate_commands()",
    "return string.dump ~= nil and loadstring(string.dump(function() return 1 end))",
    "local e = cmsgpack.pack(0.1, -1099511627776, 1, 200, 70000, 5000000000, -1, -100, -1000, -100000, 'x', true, false, nil, {1,2,3}, {a=1}, 1.5, 2^40, -3147483648) local h = '' for i = 1, #e do h = h .. string.format('%02x', string.byte(e, i)) end return h",
    "local a = {x=nil,y=5} local b = {x=a} a['x'] = b local e = cmsgpack.pack(a) local h = '' for i = 1, #e do h = h .. string.format('%02x', string.byte(e, i)) end return h",
    "return {cmsgpack.unpack(cmsgpack.pack(1, 'two', {3, {4}}, {k='v'}))}",
    "return {cmsgpack.unpack_one(cmsgpack.pack(1, 2), 0)}",
    "return {cmsgpack.unpack_limit(cmsgpack.pack(1, 2, 3), 2, 0)}",
    "return cmsgpack.unpack('\\193')",
    "return cmsgpack.unpack('\\146\\001')",
    "return cmsgpack.pack()",
    "return {cmsgpack.unpack_one(cmsgpack.pack(1), 5)}",
    "return cmsgpack.pack(string.rep('y', 40), string.rep('z', 300))",
    "cmsgpack.pack = 1",
];

#[test]
fn scripts_answer_as_redis_does() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&["--threads", "1"]);
    for resp in ["2", "3"] {
        let (mut r, mut k) = (redis.client(), keel.client());
        r.send(&["HELLO", resp]);
        k.send(&["HELLO", resp]);
        for (n, script) in SCRIPTS.iter().enumerate() {
            let argv = ["EVAL", script, "2", "k1", "k2", "a1", "7"];
            let (expected, got) = (r.send(&argv), k.send(&argv));
            assert_eq!(got, expected, "script {n} under RESP{resp}: {script}");
        }
        flush(&mut r);
        flush(&mut k);
    }
}

fn flush(client: &mut Client) {
    assert_eq!(client.cmd("FLUSHALL"), Frame::Simple(b"OK".to_vec()));
}

/// FUNCTION and FCALL commands, in order (one library at a time where
/// FUNCTION LIST shows them: Redis lists them in its hash table's order).
const FUNCTION_COMMANDS: &[&[&str]] = &[
    &["FUNCTION", "LOAD", "#!lua name=lib1\nredis.register_function('f1', function(keys, args) return {keys[1], args[1]} end)"],
    &["FCALL", "f1", "1", "k", "a"],
    &["FCALL", "f1", "0"],
    &["FCALL", "nosuch", "0"],
    &["FCALL", "f1", "x"],
    &["FCALL", "f1", "5", "a"],
    &["FUNCTION", "LOAD", "#!lua name=lib1\nredis.register_function('f1', function() return 1 end)"],
    &["FUNCTION", "LOAD", "REPLACE", "#!lua name=lib1\nredis.register_function('f1', function() return 2 end)"],
    &["FCALL", "f1", "0"],
    &["FUNCTION", "LIST"],
    &["FUNCTION", "LOAD", "#!lua name=lib2\nredis.register_function('f1', function() return 1 end)"],
    &["FUNCTION", "LOAD", "FOO", "#!lua name=lib2\nredis.register_function('f1', function() return 1 end)"],
    &["FUNCTION", "DELETE", "lib1"],
    &["FUNCTION", "LOAD", "#!lua name=lib3\nredis.register_function{function_name='f3', callback=function() return redis.call('set','x','y') end, flags={'no-writes'}, description='desc'}"],
    &["FCALL", "f3", "0"],
    &["FCALL_RO", "f3", "0"],
    &["FUNCTION", "LIST", "WITHCODE", "LIBRARYNAME", "lib*"],
    &["FUNCTION", "LIST", "LIBRARYNAME"],
    &["FUNCTION", "LIST", "BOGUS"],
    &["FUNCTION", "LOAD", "#!lua name=bad\nreturn 1"],
    &["FUNCTION", "LOAD", "#!lua\nreturn 1"],
    &["FUNCTION", "LOAD", "#!js name=x\nreturn 1"],
    &["FUNCTION", "LOAD", "lua name=x\nreturn 1"],
    &["FUNCTION", "LOAD", "#!lua name=x name=y\nreturn 1"],
    &["FUNCTION", "LOAD", "#!lua name=x foo=y\nreturn 1"],
    // The first line is split as sdssplitargs splits it.
    &["FUNCTION", "LOAD", "#!lua name=\"a b\"\nreturn 1"],
    &["FUNCTION", "LOAD", "#!lua name='a\nreturn 1"],
    &["FUNCTION", "LOAD", "#!#!lua name=z\nreturn 1"],
    &["FUNCTION", "LOAD", "#! lua name=z\nreturn 1"],
    &["FUNCTION", "LOAD", "#!lua na\"me=q\"\nreturn 1"],
    &["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('a b', function() end)"],
    &["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('a')"],
    &["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function{function_name='a'}"],
    &["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function{function_name='a', callback=function() end, flags={'bogus'}}"],
    &["FUNCTION", "LOAD", "#!lua name=x\nredis.register_function('a', function() end) redis.register_function('a', function() end)"],
    &["FUNCTION", "LOAD", "#!lua name=x\nredis.call('ping')"],
    &["FUNCTION", "LOAD", "#!lua name=x\nlocal a = string.len('x')"],
    &["FUNCTION", "LOAD", "#!lua name=x\nerror('boom')"],
    &["FUNCTION", "LOAD", "#!lua name=x\nx = 1"],
    &["FUNCTION", "LOAD", "#!lua name=x\nfunction("],
    &["FUNCTION", "LOAD", "#!lua name=x\nredis.log(redis.LOG_NOTICE, 'loading')"],
    &["FUNCTION", "LOAD", "#!lua name=g\nredis.register_function('g', function(k, a) return KEYS end)"],
    &["FCALL", "g", "0"],
    &["FUNCTION", "LOAD", "#!lua name=y\nredis.register_function('h', function(k, a) error('x') end)"],
    &["FCALL", "h", "0"],
    &["FUNCTION", "LOAD", "#!lua name=z\nredis.register_function('e', function(k, a) return redis.call('get') end)"],
    &["FCALL", "e", "0"],
    &["FUNCTION", "DELETE", "nosuch"],
    &["FUNCTION", "STATS"],
    &["FUNCTION", "KILL"],
    &["FUNCTION", "RESTORE", "bogus"],
    &["FUNCTION", "RESTORE", "bogus", "WHATEVER"],
    &["FUNCTION", "FLUSH", "FOO"],
    &["FUNCTION", "FLUSH"],
    &["FUNCTION", "LIST"],
    &["FUNCTION", "DUMP"],
    &["FUNCTION", "HELP"],
];

#[test]
fn functions_answer_as_redis_does() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&["--threads", "1"]);
    let (mut r, mut k) = (redis.client(), keel.client());
    for argv in FUNCTION_COMMANDS {
        let (expected, got) = (r.send(argv), k.send(argv));
        assert_eq!(got, expected, "{argv:?}");
    }
}

/// DEBUG SET-DISABLE-DENY-SCRIPTS lets scripts call `noscript` commands,
/// as Redis's tests use it: DEBUG PROTOCOL's every type, read by Lua in
/// RESP2 and RESP3 and handed back to RESP2 and RESP3 clients. SCRIPT
/// FLUSH leaves the setting as it is, as in Redis.
#[test]
fn scripts_call_noscript_commands_once_allowed_as_in_redis() {
    let debug = ["--enable-debug-command", "yes"];
    let Some(redis) = Server::start_redis(&debug) else { return };
    let keel = Server::start(&debug);
    // Not "push": Redis's reply parser for Lua does not know it and leaves
    // whatever was on Lua's stack (the function redis.call itself) as the
    // reply, where Keel hands the script the push as an array.
    let types = ["string", "integer", "double", "bignum", "null", "array", "set", "map", "attrib", "verbatim", "true", "false"];
    let call_debug = "return redis.call('debug', 'protocol', 'bignum')";
    let (mut r, mut k) = (redis.client(), keel.client());
    let mut both = |argv: &[&str]| {
        let (expected, got) = (r.send(argv), k.send(argv));
        assert_eq!(got, expected, "{argv:?}");
    };
    both(&["EVAL", call_debug, "0"]);
    both(&["DEBUG", "SET-DISABLE-DENY-SCRIPTS", "1"]);
    both(&["SCRIPT", "FLUSH"]);
    for client_resp in ["2", "3"] {
        // (HELLO's reply holds the connection's id, which differs.)
        let (mut r, mut k) = (redis.client(), keel.client());
        r.send(&["HELLO", client_resp]);
        k.send(&["HELLO", client_resp]);
        for lua_resp in ["2", "3"] {
            for kind in types {
                let script = format!("redis.setresp({lua_resp}); return redis.call('debug', 'protocol', '{kind}')");
                let argv = ["EVAL", &script, "0"];
                assert_eq!(k.send(&argv), r.send(&argv), "{argv:?} to a RESP{client_resp} client");
            }
        }
    }
    both(&["DEBUG", "SET-DISABLE-DENY-SCRIPTS", "0"]);
    both(&["EVAL", call_debug, "0"]);
}

/// Beside a busy script: WATCH and MULTI answer +OK, other commands
/// -BUSY (which also spoils the open transaction), and the script's write
/// after a WATCH aborts that watcher's EXEC while its write before does
/// not.
#[test]
fn clients_beside_a_busy_script_answer_as_redis_does() {
    let Some(redis) = Server::start_redis(&[]) else { return };
    let keel = Server::start(&["--threads", "1"]);
    assert_eq!(beside_a_busy_script(&keel), beside_a_busy_script(&redis));
}

/// What three clients see beside a script that writes, spins 1.5 s on
/// TIME, then writes again.
fn beside_a_busy_script(server: &Server) -> Vec<Frame> {
    let spin = "redis.call('set', 'early', 1) \
        local function ms() local t = redis.call('time') return t[1] * 1000 + t[2] / 1000 end \
        local start = ms() while ms() - start < 1500 do end \
        return redis.call('set', 'late', 1)";
    let (mut runner, mut late, mut early, mut queued) = (server.client(), server.client(), server.client(), server.client());
    runner.send(&["CONFIG", "SET", "busy-reply-threshold", "50"]);
    runner.write_command(&["EVAL", spin, "0"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !matches!(late.send(&["PING"]), Frame::Error(e) if e.starts_with(b"BUSY")) {
        assert!(std::time::Instant::now() < deadline, "the script never became busy");
    }
    let mut seen = vec![
        late.send(&["WATCH", "late"]),
        early.send(&["WATCH", "early"]),
        late.send(&["GET", "late"]),
        queued.send(&["MULTI"]),
        queued.send(&["SET", "k", "v"]),
        runner.read(),
    ];
    for client in [&mut late, &mut early] {
        seen.push(client.send(&["MULTI"]));
        seen.push(client.send(&["SET", "k", "v"]));
        seen.push(client.send(&["EXEC"]));
    }
    seen.push(queued.send(&["EXEC"]));
    seen
}
