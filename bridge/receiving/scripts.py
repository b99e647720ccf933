"""The receiver's Lua scripts (run through ``bridge.redis.scripts.run_script``).

Time is Redis's own (``TIME``), not the caller's clock, so receivers on different hosts agree on when an
id leaves the window. Every key a script touches is passed in ``KEYS`` and shares the entity's hash tag.
"""

from __future__ import annotations

from bridge.redis.scripts import LuaScript

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

CLAIM = LuaScript(
    _NOW
    + """
-- KEYS[1] window (zset), KEYS[2..] in-flight marks; ARGV: max_remembered, inflight ttl ms, owner, ids...
-- Reply per id: 0 handle (mark set), 1 duplicate (done within the window), 2 busy (in flight), 3 full.
local window = KEYS[1]
redis.call('ZREMRANGEBYSCORE', window, '-inf', now)
local size = redis.call('ZCARD', window)
local max = tonumber(ARGV[1])
local out = {}
for i = 2, #KEYS do
  local id = ARGV[i + 2]
  if redis.call('ZSCORE', window, id) then
    out[i - 1] = 1
  elseif redis.call('EXISTS', KEYS[i]) == 1 then
    out[i - 1] = 2
  elseif size >= max then
    out[i - 1] = 3
  else
    redis.call('SET', KEYS[i], ARGV[3], 'PX', ARGV[2])
    size = size + 1  -- room for its done mark
    out[i - 1] = 0
  end
end
return out
"""
)

DONE = LuaScript(
    _NOW
    + """
-- KEYS[1] window, KEYS[2..] in-flight marks; ARGV: window ms, owner, ids...
-- The done mark first, then the in-flight mark goes (only if still ours: an expired one may be another's).
local window_ms = tonumber(ARGV[1])
for i = 2, #KEYS do
  redis.call('ZADD', KEYS[1], now + window_ms, ARGV[i + 1])
  if redis.call('GET', KEYS[i]) == ARGV[2] then
    redis.call('DEL', KEYS[i])
  end
end
if redis.call('PTTL', KEYS[1]) < window_ms then
  redis.call('PEXPIRE', KEYS[1], window_ms)  -- an entity nobody receives any more leaves nothing behind
end
return #KEYS - 1
"""
)

RELEASE = LuaScript(
    """
-- KEYS: in-flight marks; ARGV[1] owner. Drop the marks that are still ours (the handler failed).
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
"""
)

RENEW = LuaScript(
    """
-- KEYS: in-flight marks; ARGV[1] owner, ARGV[2] ttl ms. Extend the marks that are still ours.
local n = 0
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('PEXPIRE', KEYS[i], ARGV[2])
    n = n + 1
  end
end
return n
"""
)
