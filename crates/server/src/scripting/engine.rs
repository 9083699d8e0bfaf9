//! One Lua interpreter per thread, and a script's run in it: the host
//! functions behind `redis.call`, and the conversions between Redis
//! replies and Lua values (Redis's `redisProtocolToLuaType` and
//! `luaReplyToRedisReply`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use keel_protocol::{parse_frame, Frame, ReplyWriter};
use mlua::{Function, HookTriggers, Lua, LuaOptions, MultiValue, StdLib, Table, Value, Variadic, VmState};

use super::Script;
use crate::command::{self, flags, CmdError, CmdResult, Ctx};
use crate::server::Server;

/// Lua tables nested deeper than this in a script's reply are answered
/// with Redis's error for a full Lua stack rather than overflowing ours.
const REPLY_DEPTH_MAX: usize = 1000;
/// Instructions between two looks at the clock and at SCRIPT KILL, as
/// Redis's count hook.
const HOOK_INSTRUCTIONS: u32 = 100_000;
/// Scripts between two collector steps (Redis's LUA_GC_CYCLE_PERIOD).
const GC_PERIOD: u64 = 50;
/// How long FUNCTION LOAD may run a library's code (Redis's LOAD_TIMEOUT_MS).
const LOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

struct Engine {
    lua: Lua,
    /// The scripts' environment (the read-only view of the globals) and
    /// the table behind it, where KEYS and ARGV go.
    env: Table,
    visible: Table,
    runner: Function,
    /// RESP3 for the replies `redis.call` gives the running script
    /// (`redis.setresp`).
    resp3: Rc<Cell<bool>>,
    /// Switches the globals to the library API for FUNCTION LOAD.
    loading: Function,
    compiled: HashMap<String, Function>,
    generation: u64,
    /// The registered functions, as of the libraries' `functions_generation`.
    functions: HashMap<String, Function>,
    functions_generation: Option<u64>,
    /// Scripts run, for the collector's pace.
    runs: u64,
    /// The server's running-script state, which the hook reads.
    run: Arc<super::RunState>,
}

/// What a run calls: an EVAL script, or a function FCALL names.
pub(super) enum Target<'s> {
    Script(&'s Script),
    Function(&'s str),
}

/// The instruction hook of [`Engine::watch_runs`]. Once it stops a
/// script (`stopped`) it fires on every line as well, as Redis's does,
/// so that a script catching the error with `pcall` meets it again
/// outside (but not in the sandbox's own code, which reports it).
fn run_hook(state: Arc<super::RunState>, stopped: bool) -> impl Fn(&Lua, mlua::Debug) -> mlua::Result<VmState> {
    move |lua, debug| {
        if stopped && debug.source().source.as_deref() == Some("=keel") {
            return Ok(VmState::Continue);
        }
        if !stopped {
            let mut killed = state.tick();
            if state.busy() && !killed {
                if crate::worker::serve_beside_busy_script() {
                    state.abandon();
                }
                killed = state.killed();
            }
            if !killed && !state.abandoned() {
                return Ok(VmState::Continue);
            }
            if killed {
                tracing::warn!("Lua script killed by user with SCRIPT KILL.");
            }
            lua.set_hook(HookTriggers::EVERY_LINE.every_nth_instruction(HOOK_INSTRUCTIONS), run_hook(state.clone(), true));
        }
        Err(mlua::Error::runtime(match state.abandoned() {
            true => "Script abandoned: the server is shutting down",
            false => "Script killed by user with SCRIPT KILL...",
        }))
    }
}

/// A function a library's code registered while it loaded.
struct Registered {
    info: super::functions::FunctionInfo,
    callback: Function,
}

thread_local! {
    static ENGINE: RefCell<Option<Engine>> = const { RefCell::new(None) };
    /// Where this thread's interpreter reports its size (`Scripts::interpreter_memory`).
    static MEMORY: std::cell::OnceCell<Arc<AtomicU64>> = const { std::cell::OnceCell::new() };
}

/// Reports this thread's interpreter's size, after it ran or was made.
fn note_memory(server: &Server, lua: &Lua) {
    MEMORY.with(|m| m.get_or_init(|| server.scripts.interpreter_slot()).store(lua.used_memory() as u64, Ordering::Relaxed));
}

/// Runs `f` with this thread's interpreter, made afresh after SCRIPT FLUSH.
fn with_engine<R>(server: &Server, f: impl FnOnce(&mut Engine) -> R) -> Result<R, CmdError> {
    ENGINE.with(|cell| {
        let mut slot = cell.borrow_mut();
        let generation = server.scripts.generation();
        if slot.as_ref().is_none_or(|e| e.generation != generation) {
            *slot = None;
            let engine = Engine::new(generation, server.scripts.run.clone()).map_err(|e| CmdError::other(format!("ERR Lua initialization failed: {e}")))?;
            note_memory(server, &engine.lua);
            *slot = Some(engine);
        }
        let engine = slot.as_mut().ok_or_else(|| CmdError::other("ERR Lua initialization failed"))?;
        Ok(f(engine))
    })
}

impl Engine {
    fn new(generation: u64, run: Arc<super::RunState>) -> mlua::Result<Engine> {
        // The debug library is for the error handler only: the sandbox
        // takes it out of the globals. No os, io or package, as in Redis.
        let libs = StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG;
        // SAFETY: `unsafe_new_with` only because of the debug library,
        // which no script can reach (sandbox.lua removes it).
        let lua = unsafe { Lua::unsafe_new_with(libs, LuaOptions::default()) };
        super::libs::install(&lua)?;
        let resp3 = Rc::new(Cell::new(false));
        let script_resp3 = resp3.clone();
        let redis: Table = lua.globals().raw_get("redis")?;
        redis.raw_set("setresp", lua.create_function(move |_, args: Variadic<Value>| {
            let [resp] = &args[..] else { return Err(api_error("redis.setresp() requires one argument.")) };
            match lua_number(resp) {
                Some(2.0) => script_resp3.set(false),
                Some(3.0) => script_resp3.set(true),
                _ => return Err(api_error("RESP version must be 2 or 3.")),
            }
            Ok(())
        })?)?;
        let (env, visible, runner, loading): (Table, Table, Function, Function) =
            lua.load(include_str!("sandbox.lua")).set_name("=keel").call(())?;
        let engine = Engine {
            lua,
            env,
            visible,
            runner,
            resp3,
            loading,
            compiled: HashMap::new(),
            generation,
            functions: HashMap::new(),
            functions_generation: None,
            runs: 0,
            run,
        };
        engine.watch_runs();
        Ok(engine)
    }

    /// The hook that, every 100,000 instructions, marks a long script
    /// busy, serves the worker's other clients while it is
    /// (`crate::worker::serve_beside_busy_script`), and stops one that
    /// SCRIPT KILL or FUNCTION KILL asked to stop, or that the server's
    /// stop abandons (set once: it costs nothing between scripts).
    fn watch_runs(&self) {
        self.lua.set_hook(HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS), run_hook(self.run.clone(), false));
    }

    /// Compiles source `code` (binary chunks refused, as Redis's Lua does)
    /// into the sandbox, as chunk `name`; Redis's error, after `what`, if
    /// it does not compile.
    fn compile(&self, code: &[u8], name: &str, what: &str) -> Result<Function, CmdError> {
        let chunk = self.lua.load(code).set_name(name).set_mode(mlua::ChunkMode::Text);
        chunk.set_environment(self.env.clone()).into_function().map_err(|e| {
            let message = match &e {
                mlua::Error::SyntaxError { message, .. } => message.clone(),
                other => other.to_string(),
            };
            CmdError::other(format!("ERR {what}: {message}"))
        })
    }

    /// Runs a library's code (after its shebang line) with the library
    /// API as globals, as FUNCTION LOAD does, and returns what it
    /// registered. Bounded by Redis's 500 ms load timeout.
    fn load_library(&self, body: &[u8]) -> Result<Vec<Registered>, CmdError> {
        let chunk = self.compile(body, "@user_function", "Error compiling function")?;
        let registered = RefCell::new(Vec::new());
        let started = Instant::now();
        self.lua.set_hook(HookTriggers::new().every_nth_instruction(HOOK_INSTRUCTIONS), move |_, _| {
            if started.elapsed() > LOAD_TIMEOUT {
                return Err(api_error("FUNCTION LOAD timeout"));
            }
            Ok(VmState::Continue)
        });
        let outcome = self.lua.scope(|scope| {
            let register = scope.create_function(|_, args: Variadic<Value>| register_function(&registered, args))?;
            self.loading.call::<()>(register)?;
            self.runner.call::<(bool, Value)>((Value::Nil, Value::Nil, chunk))
        });
        let _ = self.loading.call::<()>(Value::Nil);
        self.watch_runs();
        let (ok, value) = outcome.map_err(|e| CmdError::other(format!("ERR Error registering functions: {e}")))?;
        if !ok {
            let message = match &value {
                Value::Table(t) => t.raw_get::<Option<mlua::String>>("err").ok().flatten().map(|m| m.to_string_lossy()),
                _ => None,
            };
            return Err(CmdError::other(format!("ERR Error registering functions: {}", message.unwrap_or_default())));
        }
        Ok(registered.into_inner())
    }

    /// Loads the server's libraries into this interpreter if they changed
    /// since it last did.
    fn sync_functions(&mut self, server: &Server) -> Result<(), CmdError> {
        let libraries = &server.scripts.functions;
        let generation = libraries.generation();
        if self.functions_generation == Some(generation) {
            return Ok(());
        }
        self.functions.clear();
        for library in libraries.snapshot() {
            for f in self.load_library(library.body())? {
                self.functions.insert(f.info.name.to_ascii_lowercase(), f.callback);
            }
        }
        self.functions_generation = Some(generation);
        Ok(())
    }

    /// The function of `script`, compiled into the sandbox on first use.
    fn function(&mut self, script: &Script) -> Result<Function, CmdError> {
        if let Some(f) = self.compiled.get(&script.sha) {
            return Ok(f.clone());
        }
        // The shebang line is compiled as an empty line, so that line
        // numbers stay the user's.
        let code = &script.body[script.shebang_len..];
        let f = self.compile(code, "@user_script", "Error compiling script (new function)")?;
        self.compiled.insert(script.sha.clone(), f.clone());
        Ok(f)
    }
}

/// Runs a library's code in this thread's interpreter (FUNCTION LOAD,
/// RESTORE) and returns the functions it registered.
pub(super) fn register_library(server: &Server, body: &[u8]) -> Result<Vec<super::functions::FunctionInfo>, CmdError> {
    let registered = with_engine(server, |engine| engine.load_library(body))??;
    Ok(registered.into_iter().map(|r| r.info).collect())
}

/// `redis.register_function(name, callback)` or
/// `redis.register_function{function_name=..., callback=..., flags=...,
/// description=...}`, with Redis's errors.
fn register_function(registered: &RefCell<Vec<Registered>>, args: Variadic<Value>) -> mlua::Result<()> {
    use super::functions::FunctionInfo;
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(_) | Value::Number(_) => lua_number(v).map(|n| super::libs::lua_number_text(n).into_bytes()),
        _ => None,
    };
    let (name, callback, description, flags) = match &args[..] {
        [Value::Table(named)] => {
            let (mut name, mut callback, mut description, mut flags) = (None, None, None, 0);
            for pair in named.pairs::<Value, Value>() {
                let (key, value) = pair?;
                let Some(key) = text(&key) else {
                    return Err(api_error("named argument key given to redis.register_function is not a string"));
                };
                match String::from_utf8_lossy(&key).to_ascii_lowercase().as_str() {
                    "function_name" => {
                        name = Some(text(&value).ok_or_else(|| {
                            api_error("function_name argument given to redis.register_function must be a string")
                        })?)
                    }
                    "description" => {
                        description = Some(text(&value).ok_or_else(|| {
                            api_error("description argument given to redis.register_function must be a string")
                        })?)
                    }
                    "callback" => match value {
                        Value::Function(f) => callback = Some(f),
                        _ => return Err(api_error("callback argument given to redis.register_function must be a function")),
                    },
                    "flags" => {
                        let Value::Table(list) = value else {
                            return Err(api_error(
                                "flags argument to redis.register_function must be a table representing function flags",
                            ));
                        };
                        for flag in list.sequence_values::<Value>() {
                            let flag = text(&flag?).map(|f| String::from_utf8_lossy(&f).to_ascii_lowercase());
                            let known = flag.and_then(|f| super::flags::NAMES.iter().find(|(n, _)| *n == f));
                            flags |= known.ok_or_else(|| api_error("unknown flag given"))?.1;
                        }
                    }
                    _ => return Err(api_error("unknown argument given to redis.register_function")),
                }
            }
            let name = name.ok_or_else(|| api_error("redis.register_function must get a function name argument"))?;
            let callback = callback.ok_or_else(|| api_error("redis.register_function must get a callback argument"))?;
            (name, callback, description, flags)
        }
        [_] => {
            return Err(api_error(
                "calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).",
            ))
        }
        [name, callback] => {
            let name = text(name).ok_or_else(|| api_error("first argument to redis.register_function must be a string"))?;
            let Value::Function(callback) = callback else {
                return Err(api_error("second argument to redis.register_function must be a function"));
            };
            (name, callback.clone(), None, 0)
        }
        _ => return Err(api_error("wrong number of arguments to redis.register_function")),
    };
    let name = String::from_utf8_lossy(&name).into_owned();
    // Redis 7.0 says "Library" here too.
    if !super::functions::valid_name(&name) {
        return Err(api_error(
            "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long",
        ));
    }
    let mut registered = registered.borrow_mut();
    if registered.iter().any(|r| r.info.name.eq_ignore_ascii_case(&name)) {
        return Err(api_error("Function already exists in the library"));
    }
    registered.push(Registered { info: FunctionInfo { name, description, flags }, callback });
    Ok(())
}

/// Compiles `script` in this thread's interpreter (SCRIPT LOAD, EVAL's
/// first sight of a body).
pub(super) fn compile(server: &Server, script: &Script) -> CmdResult {
    with_engine(server, |engine| engine.function(script).map(drop))?
}

/// The state of one run that its host functions share.
struct Run {
    /// RESP version of the replies `redis.call` gives the script
    /// (`redis.setresp`).
    resp3: Rc<Cell<bool>>,
    mode: Mode,
    /// Cluster mode: the slot of the keys the script declared or touched
    /// first.
    slot: Cell<Option<u16>>,
}

/// Runs `target` with its keys and arguments under every shard lock and
/// writes its reply.
pub(super) fn run(ctx: &mut Ctx<'_>, target: Target<'_>, keys: &[&[u8]], args: &[&[u8]], mode: Mode) -> CmdResult {
    let server = ctx.server;
    let threshold = server.config.read().busy_reply_threshold.max(0) as u64;
    let state = &server.scripts.run;
    state.start(threshold, ctx.client.is_master, matches!(target, Target::Script(_)));
    let caller_db = ctx.client.db;
    let in_transaction = std::mem::replace(&mut ctx.durability.in_transaction, true);
    ctx.in_script = true;
    let result = with_engine(server, |engine| {
        let result = run_in(engine, ctx, target, keys, args, mode);
        if state.killed() || state.abandoned() {
            // Back to the instruction count alone.
            engine.watch_runs();
        }
        result
    });
    if state.abandoned() {
        // The process stops with the script half run: none of it, nor of
        // a transaction around it, reaches the journal or replicas, as
        // Redis exits before it propagates a script's effects.
        ctx.durability.log.clear();
    }
    ctx.in_script = false;
    ctx.durability.in_transaction = in_transaction;
    // SELECT inside a script is the script's own (Redis 7.0).
    ctx.client.db = caller_db;
    ctx.dbs.selected = caller_db;
    state.finish(&mut ctx.dbs);
    let reply = result??;
    match reply {
        Reply::Ok(bytes) => {
            ctx.out.buf.extend_from_slice(&bytes);
            Ok(())
        }
        // An error the script's commands already counted in errorstats.
        Reply::Uncounted(text) => Err(CmdError::Counted(text)),
        Reply::Error(text) => Err(CmdError::Other(text)),
    }
}

/// How a script may run: from its command (the `_RO` forms) and its
/// flags.
#[derive(Clone, Copy)]
pub(super) struct Mode {
    /// Write commands are refused.
    pub read_only: bool,
    /// `allow-oom`: commands run past `maxmemory`.
    pub allow_oom: bool,
    /// `allow-cross-slot-keys` (or no shebang): in cluster mode, the
    /// commands may touch keys of several slots.
    pub allow_cross_slot: bool,
}

enum Reply {
    Ok(Vec<u8>),
    Error(String),
    Uncounted(String),
}

fn run_in(
    engine: &mut Engine,
    ctx: &mut Ctx<'_>,
    target: Target<'_>,
    keys: &[&[u8]],
    args: &[&[u8]],
    mode: Mode,
) -> Result<Reply, CmdError> {
    let server = ctx.server;
    let declared_slot = keys_slot(ctx, keys);
    let name = match target {
        Target::Script(script) => script.sha.as_str(),
        Target::Function(name) => name,
    };
    let lua_error = |e: mlua::Error| CmdError::other(format!("ERR Error running script {name}: {e}"));
    let keys = array(&engine.lua, keys).map_err(lua_error)?;
    let args = array(&engine.lua, args).map_err(lua_error)?;
    // EVAL's keys and arguments are globals; a function's are its
    // parameters, and it sees no KEYS or ARGV.
    let (function, params) = match target {
        Target::Script(script) => {
            engine.visible.raw_set("KEYS", keys).map_err(lua_error)?;
            engine.visible.raw_set("ARGV", args).map_err(lua_error)?;
            (engine.function(script)?, MultiValue::new())
        }
        Target::Function(name) => {
            engine.sync_functions(ctx.server)?;
            engine.visible.raw_set("KEYS", Value::Nil).map_err(lua_error)?;
            engine.visible.raw_set("ARGV", Value::Nil).map_err(lua_error)?;
            let f = engine.functions.get(&name.to_ascii_lowercase()).cloned().ok_or_else(|| CmdError::other("ERR Function not found"))?;
            (f, MultiValue::from_iter([Value::Table(keys), Value::Table(args)]))
        }
    };
    engine.resp3.set(false);
    let run = Run { resp3: engine.resp3.clone(), mode, slot: Cell::new(declared_slot) };
    let caller_resp3 = ctx.client.resp3;
    let _caller = CallerUser::set(ctx.client.user.clone());
    let ctx = RefCell::new(ctx);
    let outcome = engine.lua.scope(|scope| {
        // redis.call raises a command's error; the \1 marks it as one
        // (the sandbox's error handler reads it) and as counted already.
        let raising = scope.create_function(|lua, argv: MultiValue| {
            call(&mut ctx.borrow_mut(), &run, lua, argv).map_err(|text| mlua::Error::runtime(format!("\u{1}{text}")))
        })?;
        let protected = scope.create_function(|lua, argv: MultiValue| {
            Ok(call(&mut ctx.borrow_mut(), &run, lua, argv).unwrap_or_else(|text| error_value(lua, &text)))
        })?;
        let mut call_args = MultiValue::from_iter([Value::Function(raising), Value::Function(protected), Value::Function(function)]);
        call_args.extend(params);
        let (ok, value): (bool, Value) = engine.runner.call(call_args)?;
        let reply = if ok {
            if let Some(reply) = returned_error(&value)? {
                return Ok(reply);
            }
            let mut bytes = Vec::new();
            write_reply(&mut ReplyWriter::new(&mut bytes, caller_resp3), &value, run.resp3.get(), 0)?;
            Reply::Ok(bytes)
        } else {
            failure(&value, name)?
        };
        Ok(reply)
    });
    // Redis's LUA_GC_CYCLE_PERIOD: a collector step of 50 every 50
    // scripts, besides Lua's own (a step per script cost a sixth of a
    // short script's time).
    engine.runs += 1;
    if engine.runs.is_multiple_of(GC_PERIOD) {
        let _ = engine.lua.gc_step_kbytes(GC_PERIOD as i32);
    }
    note_memory(server, &engine.lua);
    outcome.map_err(lua_error)
}

thread_local! {
    /// The user of the script running on this thread, for
    /// `redis.acl_check_cmd` (None: one that may run anything).
    static CALLER: RefCell<Option<Arc<crate::acl::UserHandle>>> = const { RefCell::new(None) };
}

/// Sets the running script's user for as long as it lives.
struct CallerUser;

impl CallerUser {
    fn set(user: Option<Arc<crate::acl::UserHandle>>) -> CallerUser {
        CALLER.with(|c| *c.borrow_mut() = user);
        CallerUser
    }
}

impl Drop for CallerUser {
    fn drop(&mut self) {
        CALLER.with(|c| *c.borrow_mut() = None);
    }
}

/// `redis.acl_check_cmd`: whether the running script's user may run
/// `argv` (Redis's check of the original client's user).
pub(super) fn caller_may_run(argv: &[&[u8]]) -> Result<bool, mlua::Error> {
    if argv.is_empty() {
        return Err(api_error("Please specify at least one argument for this redis lib call"));
    }
    let table = command::table();
    let invalid = || api_error("Invalid command passed to redis.acl_check_cmd()");
    let (top, spec) = argv.first().and_then(|name| table.lookup(name)).ok_or_else(invalid)?;
    let (id, spec) = match (spec.subcommands.is_empty(), argv.get(1)) {
        (false, Some(sub)) => {
            let (sub, subspec) = spec.subcommand(sub).ok_or_else(invalid)?;
            (table.sub_index(top, sub), subspec)
        }
        _ => (top, spec),
    };
    Ok(CALLER.with(|c| c.borrow().as_ref().is_none_or(|user| user.check(id, spec, argv).is_ok())))
}

/// An error of Redis's script API (`luaPushError` then `luaError`): the
/// sandbox's handler reads the \2 as "a Redis error with its code".
pub(super) fn api_error(message: &str) -> mlua::Error {
    mlua::Error::runtime(format!("\u{2}ERR {message}"))
}

/// A Lua value as `lua_tonumber` reads it.
pub(super) fn lua_number(value: &Value) -> Option<f64> {
    match value {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => s.to_str().ok()?.trim().parse().ok(),
        _ => None,
    }
}

fn array(lua: &Lua, items: &[&[u8]]) -> mlua::Result<Table> {
    let t = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        t.raw_seti(i + 1, lua.create_string(item)?)?;
    }
    Ok(t)
}

/// A script that returned an error table (`redis.error_reply`, or what
/// redis.pcall gave it): its error, counted already when a command's.
fn returned_error(value: &Value) -> mlua::Result<Option<Reply>> {
    let Value::Table(t) = value else { return Ok(None) };
    let Value::String(e) = t.raw_get::<Value>("err")? else { return Ok(None) };
    let text = e.to_string_lossy();
    Ok(Some(match t.raw_get::<Option<bool>>("ignore_error_stats_update")? {
        Some(true) => Reply::Uncounted(text),
        _ => Reply::Error(text),
    }))
}

/// The reply of a failed script: Redis's `-<err> script: <sha>, on
/// <source>:<line>.` from the handler's error table.
fn failure(value: &Value, name: &str) -> mlua::Result<Reply> {
    let Value::Table(t) = value else {
        return Ok(Reply::Error(format!("ERR Error running script {name}, execution failure")));
    };
    let message: Option<mlua::String> = t.raw_get("err")?;
    let mut text = message.map(|m| m.to_string_lossy()).unwrap_or_default();
    let source: Option<mlua::String> = t.raw_get("source")?;
    let line: Option<i64> = t.raw_get("line")?;
    if let (Some(source), Some(line)) = (source, line) {
        text.push_str(&format!(" script: {name}, on {}:{line}.", source.to_string_lossy()));
    }
    let uncounted: Option<bool> = t.raw_get("ignore_error_stats_update")?;
    Ok(match uncounted {
        Some(true) => Reply::Uncounted(text),
        _ => Reply::Error(text),
    })
}

/// `redis.call` and `redis.pcall`: runs one command as the script's
/// client and returns its reply as a Lua value, or the text of its error
/// (`CODE message`), already counted in errorstats.
fn call(ctx: &mut Ctx<'_>, run: &Run, lua: &Lua, argv: MultiValue) -> Result<Value, String> {
    let reply = call_command(ctx, run, argv).map_err(|text| {
        let text = redis_error(&text);
        ctx.server.count_error(&text);
        text
    })?;
    match parse_frame(&reply) {
        Ok(Some((Frame::Error(e), _))) => Err(redis_error(&format!("-{}", String::from_utf8_lossy(&e)))),
        Ok(Some((frame, _))) => to_lua(lua, frame, run.resp3.get()).map_err(|e| format!("ERR {e}")),
        _ => Err("ERR the command's reply could not be read".into()),
    }
}

/// Redis's `scriptCall`: checks the command against the script's state,
/// then runs it. Returns its reply bytes, or the error a script sees.
fn call_command(ctx: &mut Ctx<'_>, run: &Run, args: MultiValue) -> Result<Vec<u8>, String> {
    if args.is_empty() {
        return Err("Please specify at least one argument for this redis lib call".into());
    }
    let mut owned: Vec<Vec<u8>> = Vec::with_capacity(args.len());
    for arg in args.iter() {
        owned.push(match arg {
            Value::String(s) => s.as_bytes().to_vec(),
            // Redis formats numbers with %.17g: Lua's own %.14g loses precision.
            Value::Integer(i) => i.to_string().into_bytes(),
            Value::Number(n) => {
                let mut out = Vec::new();
                keel_protocol::reply::format_double_g17(*n, &mut out);
                out
            }
            _ => return Err("Lua redis lib command arguments must be strings or integers".into()),
        });
    }
    let argv: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    let (index, spec) = match command::resolve(&argv) {
        Ok(found) => found,
        Err(CmdError::Arity(_)) => return Err("Wrong number of args calling Redis command from script".into()),
        Err(_) => return Err("Unknown Redis command called from script".into()),
    };
    if let Err(refused) = may_call(ctx, run, (index, spec), &argv) {
        ctx.stats.commands[index].rejected_calls.fetch_add(1, Ordering::Relaxed);
        return Err(refused);
    }
    if spec.has(flags::WRITE) {
        ctx.server.scripts.run.wrote.store(true, Ordering::Relaxed);
    }
    // The command's reply goes to a buffer of its own, in the script's
    // RESP version.
    let saved = std::mem::take(ctx.out.buf);
    let caller_resp3 = std::mem::replace(&mut ctx.out.resp3, run.resp3.get());
    ctx.server.scripts.run.install_watches(&mut ctx.dbs);
    let result = command::run(ctx, index, spec, &argv);
    if let Err(e) = result {
        let text = e.to_string();
        ctx.server.count_error(&text);
        ctx.out.error(&text);
    }
    command::feed_monitors(ctx.server, ctx.client, spec, &argv, true);
    ctx.out.resp3 = caller_resp3;
    Ok(std::mem::replace(ctx.out.buf, saved))
}

/// Whether the running script may call `spec` now (Redis's checks in
/// `scriptCall`), or Redis's error.
/// The slot of a script's declared keys, in cluster mode.
fn keys_slot(ctx: &Ctx<'_>, keys: &[&[u8]]) -> Option<u16> {
    ctx.server.cluster.as_ref()?;
    keys.first().map(|k| keel_engine::slot::key_slot(k))
}

fn may_call(ctx: &mut Ctx<'_>, run: &Run, (index, spec): (usize, &command::CommandSpec), argv: &[&[u8]]) -> Result<(), String> {
    if spec.has(flags::NOSCRIPT) && !ctx.server.scripts.allow_noscript.load(Ordering::Relaxed) {
        return Err("This Redis command is not allowed from script".into());
    }
    if !spec.has(flags::STALE) && ctx.server.replica.is_stale() && !ctx.client.is_master {
        return Err("Can not execute the command on a stale replica".into());
    }
    // The script runs as its caller's user.
    if ctx.client.user.as_ref().is_some_and(|u| !u.unrestricted()) {
        command::check_acl(ctx.server, ctx.client, index, spec, argv, crate::acl::Context::Lua)
            .map_err(|denied| format!("The user executing the script {}", denied.script_reason()))?;
    }
    let writes = spec.has(flags::WRITE);
    if run.mode.read_only && (writes || matches!(spec.name, "publish" | "spublish")) {
        return Err("Write commands are not allowed from read-only scripts.".into());
    }
    // Once a script has written, it cannot stop halfway on a refusal.
    if !ctx.server.scripts.run.wrote.load(Ordering::Relaxed) {
        let checked = if run.mode.allow_oom { spec.flags & !flags::DENYOOM } else { spec.flags };
        if let Some(error) = command::refusal(ctx.server, ctx.client.is_master, ctx.client.oom, checked, false) {
            return Err(format!("-{error}"));
        }
        crate::durability::check_writable(ctx.server, spec, ctx.client.is_master).map_err(|e| format!("-{e}"))?;
    }
    match crate::cluster::script_refusal(ctx, spec, argv, &run.slot, run.mode.allow_cross_slot) {
        Some(error) => Err(error.into()),
        None => Ok(()),
    }
}

/// Redis's `luaPushErrorBuff`: `-CODE message` or a message (code ERR)
/// as `CODE message`, line ends trimmed.
fn redis_error(text: &str) -> String {
    let (code, message) = match text.strip_prefix('-') {
        Some(rest) => rest.split_once(' ').unwrap_or(("ERR", rest)),
        None => ("ERR", text),
    };
    format!("{code} {}", message.trim_matches(['\r', '\n']))
}

/// The error table redis.pcall returns: `{err = "CODE message"}`, marked
/// as counted in errorstats already.
fn error_value(lua: &Lua, text: &str) -> Value {
    let table = || -> mlua::Result<Table> {
        let t = lua.create_table()?;
        t.raw_set("err", text)?;
        t.raw_set("ignore_error_stats_update", true)?;
        Ok(t)
    };
    table().map_or(Value::Nil, Value::Table)
}

/// A command's reply as Redis gives it to Lua.
fn to_lua(lua: &Lua, frame: Frame, resp3: bool) -> mlua::Result<Value> {
    let single = |field: &str, value: Value| -> mlua::Result<Value> {
        let t = lua.create_table()?;
        t.raw_set(field, value)?;
        Ok(Value::Table(t))
    };
    Ok(match frame {
        Frame::Integer(i) => Value::Number(i as f64),
        Frame::Bulk(b) => Value::String(lua.create_string(b)?),
        // RESP2's null bulk and null array are false; RESP3's null is nil.
        Frame::Null if resp3 => Value::Nil,
        Frame::Null => Value::Boolean(false),
        Frame::Simple(s) => single("ok", Value::String(lua.create_string(s)?))?,
        // Counted already, when the command failed.
        Frame::Error(e) => error_value(lua, &redis_error(&format!("-{}", String::from_utf8_lossy(&e)))),
        Frame::Array(items) | Frame::Push(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_seti(i + 1, to_lua(lua, item, resp3)?)?;
            }
            Value::Table(t)
        }
        Frame::Map(pairs) => {
            let t = lua.create_table()?;
            for (k, v) in pairs {
                t.raw_set(to_lua(lua, k, resp3)?, to_lua(lua, v, resp3)?)?;
            }
            single("map", Value::Table(t))?
        }
        Frame::Set(items) => {
            let t = lua.create_table()?;
            for item in items {
                t.raw_set(to_lua(lua, item, resp3)?, true)?;
            }
            single("set", Value::Table(t))?
        }
        Frame::Double(d) => {
            let text = String::from_utf8_lossy(&d);
            single("double", Value::Number(text.parse().unwrap_or(f64::NAN)))?
        }
        Frame::Boolean(b) => Value::Boolean(b),
        Frame::BigNumber(digits) => single("big_number", Value::String(lua.create_string(digits)?))?,
        Frame::Verbatim { format, text } => {
            let t = lua.create_table()?;
            t.raw_set("format", lua.create_string(format)?)?;
            t.raw_set("string", lua.create_string(text)?)?;
            single("verbatim_string", Value::Table(t))?
        }
    })
}

/// A script's return value as a reply (Redis's `luaReplyToRedisReply`).
/// `script_resp3`: the script asked for RESP3 (`redis.setresp(3)`), which
/// changes what a boolean is.
fn write_reply(out: &mut ReplyWriter<'_>, value: &Value, script_resp3: bool, depth: usize) -> mlua::Result<()> {
    if depth > REPLY_DEPTH_MAX {
        out.error("ERR reached lua stack limit");
        return Ok(());
    }
    match value {
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Boolean(b) if !script_resp3 => match b {
            true => out.int(1),
            false => out.null(),
        },
        Value::Boolean(b) => out.boolean(*b),
        // Redis casts the double: the fraction is dropped.
        Value::Integer(i) => out.int(*i),
        Value::Number(n) => out.int(*n as i64),
        Value::Table(t) => write_table(out, t, script_resp3, depth)?,
        _ => out.null(),
    }
    Ok(())
}

fn write_table(out: &mut ReplyWriter<'_>, t: &Table, script_resp3: bool, depth: usize) -> mlua::Result<()> {
    if let Value::String(e) = t.raw_get::<Value>("err")? {
        out.error(&format!("-{}", e.to_string_lossy()));
        return Ok(());
    }
    if let Value::String(s) = t.raw_get::<Value>("ok")? {
        out.simple(&s.to_string_lossy().replace(['\r', '\n'], " "));
        return Ok(());
    }
    match t.raw_get::<Value>("double")? {
        Value::Number(d) => {
            out.double(d);
            return Ok(());
        }
        Value::Integer(d) => {
            out.double(d as f64);
            return Ok(());
        }
        _ => {}
    }
    if let Value::String(s) = t.raw_get::<Value>("big_number")? {
        out.big_number(&s.to_string_lossy().replace(['\r', '\n'], " "));
        return Ok(());
    }
    if let Value::Table(v) = t.raw_get::<Value>("verbatim_string")? {
        if let (Value::String(format), Value::String(text)) = (v.raw_get("format")?, v.raw_get("string")?) {
            out.verbatim(&format.to_string_lossy(), &text.as_bytes());
            return Ok(());
        }
    }
    // Lua values are walked, never gathered: each one held from Rust
    // takes one of a few thousand reference slots.
    if let Value::Table(map) = t.raw_get::<Value>("map")? {
        out.map(map.pairs::<Value, Value>().count());
        for pair in map.pairs::<Value, Value>() {
            let (k, v) = pair?;
            write_reply(out, &k, script_resp3, depth + 1)?;
            write_reply(out, &v, script_resp3, depth + 1)?;
        }
        return Ok(());
    }
    if let Value::Table(set) = t.raw_get::<Value>("set")? {
        out.set(set.pairs::<Value, Value>().count());
        for pair in set.pairs::<Value, Value>() {
            write_reply(out, &pair?.0, script_resp3, depth + 1)?;
        }
        return Ok(());
    }
    // An array up to its first nil.
    let mut len = 0;
    while !t.raw_get::<Value>(len + 1)?.is_nil() {
        len += 1;
    }
    out.array(len);
    for i in 1..=len {
        write_reply(out, &t.raw_get(i)?, script_resp3, depth + 1)?;
    }
    Ok(())
}
