"""The receiver's Lua scripts (run through ``bridge.redis.scripts.run_script``).

Time is Redis's own (``TIME``), not the caller's clock, so receivers on different hosts agree on when an
id leaves the window. Every key a script touches is passed in ``KEYS`` and shares the entity's hash tag.

**In-flight marks and the attended clock.** A mark is the string ``<owner>@<deadline>``, where the deadline
is on the scope's *attended clock* (``bridge.receiving.keys``, ``clock``), not on Redis's: the attended
clock advances only while some receiver of the scope reaches Redis. Every script that reads or writes marks
(and the lock watch's heartbeat, every half second in every receiver process) moves it forward by the time
since the previous script of the scope, but by at most the ``gap`` argument. So while Redis is down,
stopped or cut off from every receiver, marks do not age (by more than one ``gap``): a receiver that comes
back first cannot claim an id whose handler is still running elsewhere just because the outage outlasted
the mark. Redis's own expiry of a mark (``PX``) is the deadline's life plus ``keep`` milliseconds, the
longest outage covered; it only clears marks nobody will ever claim again.

A mark written by an earlier version (the bare owner, no deadline) is live for as long as it exists.
"""

from __future__ import annotations

from bridge.redis.scripts import LuaScript

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
"""

_MARK_OF = """
-- A mark's owner and deadline (nil deadline: an earlier version's mark, live while it exists).
local function mark_of(key)
  local value = redis.call('GET', key)
  if not value then
    return nil, nil
  end
  local owner, deadline = string.match(value, '^(.*)@(%d+)$')
  if not owner then
    return value, nil
  end
  return owner, tonumber(deadline)
end
"""

_MARKS = (
    _MARK_OF
    + """
local function ms(x)
  return string.format('%.0f', x)
end
-- The attended clock of KEYS' scope, advanced to now (each gap since the last script counted up to gap_ms).
local function attend(clock, gap_ms, life_ms)
  local last = redis.call('HMGET', clock, 'at', 't')
  local attended = now
  if last[1] and last[2] then
    local gap = now - tonumber(last[1])
    if gap < 0 then gap = 0 elseif gap > gap_ms then gap = gap_ms end
    attended = tonumber(last[2]) + gap
  end
  redis.call('HSET', clock, 'at', ms(now), 't', ms(attended))
  if redis.call('PTTL', clock) < life_ms then
    redis.call('PEXPIRE', clock, life_ms)  -- outlives every mark it dates
  end
  return attended
end
local function set_mark(key, owner, attended, ttl_ms, keep_ms)
  redis.call('SET', key, owner .. '@' .. ms(attended + ttl_ms), 'PX', ms(ttl_ms + keep_ms))
end
"""
)

CLAIM = LuaScript(
    "#!lua\n"
    + _NOW
    + _MARKS
    + """
-- KEYS[1] window (zset), KEYS[2] attended clock, KEYS[3..] in-flight marks;
-- ARGV: max_remembered, inflight ttl ms, owner, keep ms, gap ms, ids...
-- Reply per id: 0 handle (mark set), 1 duplicate (done within the window), 2 busy (in flight), 3 full.
-- The shebang makes Redis refuse the script before it starts when memory is full (never half-written).
local window = KEYS[1]
local max, ttl, owner = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local keep, gap = tonumber(ARGV[4]), tonumber(ARGV[5])
local attended = attend(KEYS[2], gap, ttl + keep)
redis.call('ZREMRANGEBYSCORE', window, '-inf', now)
local size = redis.call('ZCARD', window)
local out = {}
for i = 3, #KEYS do
  local id = ARGV[i + 3]
  local holder, deadline = mark_of(KEYS[i])
  if redis.call('ZSCORE', window, id) then
    out[i - 2] = 1
  elseif holder and (deadline == nil or deadline > attended) then
    out[i - 2] = 2
  elseif size >= max then
    out[i - 2] = 3
  else
    set_mark(KEYS[i], owner, attended, ttl, keep)
    size = size + 1  -- room for its done mark
    out[i - 2] = 0
  end
end
return out
"""
)

RENEW = LuaScript(
    "#!lua\n"
    + _NOW
    + _MARKS
    + """
-- KEYS[1] window, KEYS[2] attended clock, KEYS[3..] in-flight marks; ARGV: owner, ttl ms, keep ms, gap ms,
-- ids... Extend this owner's marks; without ids, only the heartbeat that advances the attended clock.
-- Reply per id (``bridge.core.receiving.Renewal``): 0 renewed; 1 renewed late (ours, its life had run out,
-- nobody took it); 2 taken (another owner's mark); 3 handled (no mark of ours, the id is done within the
-- window); 4 gone (no mark at all, not done: set again, ours).
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local keep, gap = tonumber(ARGV[3]), tonumber(ARGV[4])
local attended = attend(KEYS[2], gap, ttl + keep)
local out = {}
for i = 3, #KEYS do
  local id = ARGV[i + 2]
  local holder, deadline = mark_of(KEYS[i])
  if holder == owner then
    set_mark(KEYS[i], owner, attended, ttl, keep)
    if deadline ~= nil and deadline <= attended then out[i - 2] = 1 else out[i - 2] = 0 end
  elseif holder then
    out[i - 2] = 2
  else
    local score = redis.call('ZSCORE', KEYS[1], id)
    if score and tonumber(score) > now then
      out[i - 2] = 3
    else
      set_mark(KEYS[i], owner, attended, ttl, keep)
      out[i - 2] = 4
    end
  end
end
return out
"""
)

IN_FLIGHT = LuaScript(
    "#!lua flags=no-writes\n"
    + _NOW
    + """
-- KEYS[1] attended clock, KEYS[2] an in-flight mark; ARGV[1] gap ms. 1 while the mark is live (observation
-- only: the clock is read, not advanced).
local value = redis.call('GET', KEYS[2])
if not value then
  return 0
end
local deadline = string.match(value, '@(%d+)$')
if not deadline then
  return 1
end
local last = redis.call('HMGET', KEYS[1], 'at', 't')
local attended = now
if last[1] and last[2] then
  local gap = now - tonumber(last[1])
  if gap < 0 then gap = 0 elseif gap > tonumber(ARGV[1]) then gap = tonumber(ARGV[1]) end
  attended = tonumber(last[2]) + gap
end
if tonumber(deadline) > attended then
  return 1
end
return 0
"""
)

DONE = LuaScript(
    "#!lua\n"
    + _NOW
    + _MARK_OF
    + """
-- KEYS[1] window, KEYS[2] counters, KEYS[3] journal stream, KEYS[4] its overflow hash, KEYS[5..] in-flight
-- marks; ARGV: window ms, owner, journal max length (0: no journal), n, the n field/value items of the
-- handled event (no MessageId), then the ids. Reply: how many ids were new to the window, then the ids
-- whose mark was another owner's (the caller lost it while its handler ran: another receiver claimed it).
-- The done mark first, then the in-flight mark goes (only if still ours: an expired one may be another's).
-- Ids new to the window are counted (``handled``) and journaled (one batch entry) in the same step, so the
-- window, the counter and the journal never disagree; an id already there was counted and journaled by
-- the call that added it (a retry after a lost reply, or another copy's handler), so nothing is twice.
-- The shebang makes Redis refuse the script before it starts when memory is full (never half-written).
local window_ms, owner = tonumber(ARGV[1]), ARGV[2]
local journal_max, n = tonumber(ARGV[3]), tonumber(ARGV[4])
local first_id = 5 + n
local new, taken = {}, {}
for i = 5, #KEYS do
  local id = ARGV[first_id + i - 5]
  if redis.call('ZADD', KEYS[1], now + window_ms, id) == 1 then
    new[#new + 1] = id
  end
  local holder = mark_of(KEYS[i])
  if holder == owner then
    redis.call('DEL', KEYS[i])
  elseif holder then
    taken[#taken + 1] = id
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
local out = {#new}
for i = 1, #taken do
  out[i + 1] = taken[i]
end
return out
"""
)

RELEASE = LuaScript(
    _MARK_OF
    + """
-- KEYS: in-flight marks; ARGV[1] owner. Drop the marks that are still ours (the handler failed).
local n = 0
for i = 1, #KEYS do
  if mark_of(KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
return n
"""
)
