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
    "#!lua\n"
    + _NOW
    + """
-- KEYS[1] window, KEYS[2] counters, KEYS[3] journal stream, KEYS[4] its overflow hash, KEYS[5..] in-flight
-- marks; ARGV: window ms, owner, journal max length (0: no journal), n, the n field/value items of the
-- handled event (no MessageId), then the ids. Reply: how many ids were new to the window.
-- The done mark first, then the in-flight mark goes (only if still ours: an expired one may be another's).
-- Ids new to the window are counted (``handled``) and journaled (one batch entry) in the same step, so the
-- window, the counter and the journal never disagree; an id already there was counted and journaled by
-- the call that added it (a retry after a lost reply, or another copy's handler), so nothing is twice.
-- The shebang makes Redis refuse the script before it starts when memory is full (never half-written).
local window_ms, owner = tonumber(ARGV[1]), ARGV[2]
local journal_max, n = tonumber(ARGV[3]), tonumber(ARGV[4])
local first_id = 5 + n
local new = {}
for i = 5, #KEYS do
  local id = ARGV[first_id + i - 5]
  if redis.call('ZADD', KEYS[1], now + window_ms, id) == 1 then
    new[#new + 1] = id
  end
  if redis.call('GET', KEYS[i]) == owner then
    redis.call('DEL', KEYS[i])
  end
end
if redis.call('PTTL', KEYS[1]) < window_ms then
  redis.call('PEXPIRE', KEYS[1], window_ms)  -- an entity nobody receives any more leaves nothing behind
end
if #new > 0 then
  redis.call('HINCRBY', KEYS[2], 'handled', #new)
  if journal_max > 0 then
    if redis.call('XLEN', KEYS[3]) < journal_max then
      local entry = {unpack(ARGV, 5, 4 + n)}
      entry[#entry + 1] = 'M'
      entry[#entry + 1] = cjson.encode(new)
      redis.call('XADD', KEYS[3], '*', unpack(entry))
    else
      redis.call('HINCRBY', KEYS[4], 'handled', 1)
    end
  end
end
return #new
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
