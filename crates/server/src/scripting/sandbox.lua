-- The sandbox scripts run in, as Redis 7.0's: the globals and every
-- library table are read-only, reading a global that does not exist is an
-- error, and `redis.*` is Redis's API. Plain Lua 5.1 has no read-only
-- tables (Redis patches its Lua for them), so scripts see read-only views:
-- proxies whose writes fail with Redis's message.
--
-- Runs once per Lua state, with the real globals. Returns the scripts'
-- environment, the table behind it, the runner that calls a script under
-- Redis's error handler, and the switch to the library API.
local G = _G
local error, type, tostring, select, unpack = error, type, tostring, select, unpack
local setmetatable, getmetatable, rawget, rawset = setmetatable, getmetatable, rawget, rawset
local setfenv, loadstring, pcall, xpcall = setfenv, loadstring, pcall, xpcall
local dbg = debug

local READONLY = 'Attempt to modify a readonly table'
local function refuse() error(READONLY, 2) end

-- Tables scripts cannot modify, and the read-only view of each table.
local protected = setmetatable({}, { __mode = 'k' })
local views = setmetatable({}, { __mode = 'k' })

local function view(t)
  local v = views[t]
  if v then return v end
  v = setmetatable({}, {
    __index = function(_, k)
      local x = t[k]
      if type(x) == 'table' then return view(x) end
      return x
    end,
    __newindex = refuse,
    __metatable = false,
  })
  protected[v] = true
  views[t] = v
  return v
end

-- What a script's globals hold; reading anything else is an error.
local visible = setmetatable({}, {
  __index = function(_, name)
    error("Script attempted to access nonexistent global variable '" .. tostring(name) .. "'", 2)
  end,
})
local env_meta = { __index = visible, __newindex = refuse }
env_meta.__metatable = view(env_meta)
local env = setmetatable({}, env_meta)
protected[env] = true

for _, name in ipairs({ 'xpcall', 'tostring', 'tonumber', 'next', 'assert', 'rawequal', 'rawget',
  'collectgarbage', 'type', 'select', 'unpack', 'gcinfo', 'pairs', 'ipairs', '_VERSION', 'error',
  'newproxy', 'coroutine', 'getmetatable' }) do
  visible[name] = G[name]
end
visible._G = env

-- The string methods ("x"):upper() reach through the string metatable.
local string_meta = getmetatable('')
string_meta.__metatable = view(string_meta)

-- Base functions that could reach around the views.
function visible.setmetatable(t, mt)
  if protected[t] then error(READONLY, 0) end
  return setmetatable(t, mt)
end
function visible.rawset(t, k, v)
  if protected[t] then error(READONLY, 0) end
  return rawset(t, k, v)
end
-- Source only (Redis's Lua refuses binary chunks), compiled into the sandbox.
local function sandboxed(f, msg)
  if f then setfenv(f, env) end
  return f, msg
end
function visible.loadstring(s, name)
  if type(s) == 'string' and s:byte(1) == 27 then return nil, 'binary chunks are not allowed' end
  return sandboxed(loadstring(s, name))
end
function visible.load(f, name)
  local parts = {}
  while true do
    local piece = f()
    if piece == nil or piece == '' then break end
    parts[#parts + 1] = piece
  end
  return visible.loadstring(table.concat(parts), name)
end

-- The message of an error raised by a host function (a Rust error's text).
-- A leading \1 marks a Redis error that redis.call raised, already
-- counted in errorstats; \2 one of Redis's own API, code included.
local function plain(e)
  local s = tostring(e)
  s = s:gsub('^runtime error: ', '')
  local cut = s:find('\nstack traceback', 1, true)
  if cut then s = s:sub(1, cut - 1) end
  return s
end
-- Redis's pcall: an error from redis.call becomes its message.
local function pack(...) return { n = select('#', ...), ... } end
function visible.pcall(...)
  local r = pack(pcall(...))
  if not r[1] and type(r[2]) == 'table' then
    local e = r[2].err
    if type(e) == 'string' or type(e) == 'number' then r[2] = e end
  elseif not r[1] and type(r[2]) == 'userdata' then
    r[2] = (plain(r[2]):gsub('^[\1\2]', ''))
  end
  return unpack(r, 1, r.n)
end

-- Redis's luaPushErrorBuff: "-CODE msg" or "msg" (code ERR), trimmed.
local function error_table(s)
  local code, msg = 'ERR', s
  if s:sub(1, 1) == '-' then
    local space = s:find(' ', 1, true)
    if space then
      code, msg = s:sub(2, space - 1), s:sub(space + 1)
    else
      msg = s:sub(2)
    end
  end
  msg = (msg:gsub('^[\r\n]+', ''):gsub('[\r\n]+$', ''))
  return { err = code .. ' ' .. msg }
end

local function outside(name)
  error(error_table(name .. ' can only be called inside a script invocation'), 0)
end

local redis = G.redis
local function call_outside() outside('redis.call/pcall') end
redis.call, redis.pcall = call_outside, call_outside
function redis.error_reply(e)
  if type(e) ~= 'string' then return error_table('wrong number or type of arguments') end
  if e:sub(1, 1) ~= '-' then e = '-' .. e end
  return error_table(e)
end
function redis.status_reply(s)
  if select('#', s) ~= 1 or type(s) ~= 'string' then return error_table('wrong number or type of arguments') end
  return { ok = s }
end
function redis.replicate_commands() return true end
function redis.breakpoint() return false end
function redis.debug() end
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
for _, name in ipairs({ 'string', 'math', 'table', 'redis', 'cjson', 'bit', 'cmsgpack', 'struct' }) do
  if G[name] then visible[name] = view(G[name]) end
end

-- Redis's __redis__err__handler: the error as a table, with where the
-- script was when it failed (the first frame that is the script's own).
local function handler(err)
  local level, info = 2, nil
  repeat
    info = dbg.getinfo(level, 'nSl')
    level = level + 1
  until not info or (info.what ~= 'C' and info.source ~= '=keel')
  if type(err) == 'userdata' then
    local message = plain(err)
    if message:byte(1) == 1 then
      err = { err = message:sub(2), ignore_error_stats_update = true }
    elseif message:byte(1) == 2 then
      err = { err = message:sub(2) }
    else
      -- As luaL_error: where the failing function was called from Lua.
      local caller = dbg.getinfo(3, 'Sl')
      if caller and caller.what ~= 'C' and caller.currentline > 0 then
        message = caller.short_src .. ':' .. caller.currentline .. ': ' .. message
      end
      err = { err = 'ERR ' .. message }
    end
  elseif type(err) ~= 'table' then
    err = { err = 'ERR ' .. tostring(err) }
  end
  if info then
    rawset(err, 'source', info.source)
    rawset(err, 'line', info.currentline)
  end
  return err
end

-- What a library's code sees while FUNCTION LOAD runs it (Redis's
-- library API): `redis` with register_function, log and the version only.
local load_redis = {}
local load_redis_view = setmetatable({}, {
  __index = function(_, k)
    local v = load_redis[k]
    if v == nil then error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2) end
    return v
  end,
  __newindex = refuse,
  __metatable = false,
})
protected[load_redis_view] = true
local load_visible = setmetatable({ redis = load_redis_view }, getmetatable(visible))
for _, name in ipairs({ 'log', 'LOG_DEBUG', 'LOG_VERBOSE', 'LOG_NOTICE', 'LOG_WARNING', 'REDIS_VERSION',
  'REDIS_VERSION_NUM' }) do
  load_redis[name] = redis[name]
end

-- The registering host function while FUNCTION LOAD runs a library.
local registering = nil
-- A reference a library kept to it works only while it loads.
local function register_function(...)
  if not registering then
    error(error_table('redis.register_function can only be called on FUNCTION LOAD command'), 0)
  end
  return registering(...)
end
load_redis.register_function = register_function

-- Switches the globals to the library API while `register` (the
-- registering host function) is given, back to the scripts' otherwise.
local function loading(register)
  registering = register
  env_meta.__index = register and load_visible or visible
end

-- Calls `f` with the arguments under the error handler, with the run's
-- host functions as redis.call and redis.pcall: C functions to Lua, so
-- that `return redis.call(...)` is no tail call and an error still knows
-- the script's line.
local function run(call, protected_call, f, ...)
  redis.call, redis.pcall = call or call_outside, protected_call or call_outside
  local n, args = select('#', ...), { ... }
  local ok, value = xpcall(function() return f(unpack(args, 1, n)) end, handler)
  redis.call, redis.pcall = call_outside, call_outside
  return ok, value
end

G.debug = nil
return env, visible, run, loading
