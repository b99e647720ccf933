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

**The record of handled ids** (``bridge.core.seen``). ``KEYS`` name its index, the hash
``bridge:{E}:rx:seen`` (bucket name -> ``"<expiry ms> <level> <split> <count>"``); a bucket's slots are
hashes named from it, ``<index>:<bucket>:<slot>``, with the index's hash tag (same slot on a Cluster), each
expiring with its bucket. A bucket is a linear hash table: slot = the fingerprint's first four bytes
(``h``) modulo ``2^level``, or modulo ``2^(level+1)`` when that is below ``split``; once the bucket holds
more than ``fill`` fingerprints per slot, slot ``split`` is split in two (the fingerprints whose next bit is
1 move to slot ``split + 2^level``) and ``split`` moves on, back to 0 with the level raised when it reaches
``2^level``. A split moves at most one slot's fingerprints, so its cost spreads over ``fill`` writes.

The record of an earlier version, the sorted set ``bridge:{E}:rx:done`` (MessageId -> expiry ms), is still
read while it exists: ids it remembers count as handled until their own expiry.
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

_MS = """
local function ms(x)
  return string.format('%.0f', x)
end
"""

_MARKS = (
    _MARK_OF
    + _MS
    + """
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

_SEEN = """
-- The record's live buckets, read from its index (expired entries dropped from it when prune is set).
local function buckets(index, prune)
  local raw = redis.call('HGETALL', index)
  local live = {}
  for j = 1, #raw, 2 do
    local e, i, p, n = string.match(raw[j + 1], '^(%d+) (%d+) (%d+) (%d+)$')
    if e and tonumber(e) > now then
      i = tonumber(i)
      live[#live + 1] = {
        name = raw[j], key = index .. ':' .. raw[j] .. ':', e = tonumber(e), i = i, p = tonumber(p),
        n = tonumber(n), low = 2 ^ i, high = 2 ^ (i + 1),
      }
    elseif prune then
      redis.call('HDEL', index, raw[j])
    end
  end
  -- Newest first: the copy of an id is most often near its first (active replication's second copy).
  table.sort(live, function(a, b) return a.e > b.e end)
  return live
end
local function head(fp)
  local b1, b2, b3, b4 = string.byte(fp, 1, 4)
  return ((b1 * 256 + b2) * 256 + b3) * 256 + b4
end
local function slot_key(b, slot)
  return b.key .. string.format('%d', slot)
end
-- The key of the slot of a fingerprint whose first four bytes are h.
local function slot_of(b, h)
  local slot = h % b.low
  if slot < b.p then slot = h % b.high end
  return slot_key(b, slot)
end
local function seen(live, fp)
  local h = head(fp)
  for _, b in ipairs(live) do
    if redis.call('HEXISTS', slot_of(b, h), fp) == 1 then
      return true
    end
  end
  return false
end
-- An id the earlier version's sorted set remembers (has_legacy: that key exists).
local function legacy_done(has_legacy, legacy, id)
  if not has_legacy then
    return false
  end
  local score = redis.call('ZSCORE', legacy, id)
  return score ~= false and score ~= nil and tonumber(score) > now
end
local function remembered(live, has_legacy, legacy)
  local total = 0
  for _, b in ipairs(live) do
    total = total + b.n
  end
  if has_legacy then
    total = total + redis.call('ZCOUNT', legacy, '(' .. string.format('%.0f', now), '+inf')
  end
  return total
end
"""

_REMEMBER = (
    _MS
    + """
-- The bucket whose span holds now (created empty if new); it expires one window after its span ends.
local function current(index, live, window_ms, span_ms)
  local start = now - now % span_ms
  local name, e = ms(start), start + span_ms + window_ms
  for _, b in ipairs(live) do
    if b.name == name then
      if b.e < e then b.e, b.dirty = e, true end  -- a longer window set meanwhile
      return b
    end
  end
  local b = {name = name, key = index .. ':' .. name .. ':', e = e, i = 0, p = 0, n = 0, low = 1, high = 2,
             dirty = true}
  live[#live + 1] = b
  return b
end
local function split(b)
  local high = b.low
  local from, to = slot_key(b, b.p), slot_key(b, b.p + high)
  local moved, flat = {}, {}
  for _, f in ipairs(redis.call('HKEYS', from)) do
    if head(f) % (2 * high) >= high then
      moved[#moved + 1] = f
      flat[#flat + 1] = f
      flat[#flat + 1] = ''
    end
  end
  if #moved > 0 then
    redis.call('HSET', to, unpack(flat))
    redis.call('PEXPIREAT', to, ms(b.e))
    redis.call('HDEL', from, unpack(moved))
  end
  b.p = b.p + 1
  if b.p == high then b.i, b.p, b.low, b.high = b.i + 1, 0, b.high, 2 * b.high end
end
-- Store fp in bucket b (the caller found it in no live bucket).
local function remember(b, fp, fill)
  local key = slot_of(b, head(fp))
  redis.call('HSET', key, fp, '')
  redis.call('PEXPIREAT', key, ms(b.e))
  b.n, b.dirty = b.n + 1, true
  while b.n > fill * (b.low + b.p) do
    split(b)
  end
end
local function save(index, live)
  local last = 0
  for _, b in ipairs(live) do
    if b.dirty then
      redis.call('HSET', index, b.name, ms(b.e) .. ' ' .. ms(b.i) .. ' ' .. ms(b.p) .. ' ' .. ms(b.n))
    end
    if b.e > last then last = b.e end
  end
  if last > 0 and redis.call('PTTL', index) < last - now then
    redis.call('PEXPIREAT', index, ms(last))  -- an entity nobody receives any more leaves nothing behind
  end
end
"""
)

CLAIM = LuaScript(
    "#!lua\n"
    + _NOW
    + _MARKS
    + _SEEN
    + """
-- KEYS[1] record index, KEYS[2] earlier version's window (zset), KEYS[3] attended clock, KEYS[4..] in-flight
-- marks; ARGV: max_remembered, inflight ttl ms, owner, keep ms, gap ms, the n ids, then their fingerprints.
-- Reply per id: 0 handle (mark set), 1 duplicate (done within the window), 2 busy (in flight), 3 full.
-- The shebang makes Redis refuse the script before it starts when memory is full (never half-written).
local index, legacy = KEYS[1], KEYS[2]
local max, ttl, owner = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local keep, gap = tonumber(ARGV[4]), tonumber(ARGV[5])
local n = #KEYS - 3
local attended = attend(KEYS[3], gap, ttl + keep)
local live = buckets(index, false)
local has_legacy = redis.call('EXISTS', legacy) == 1
local size = remembered(live, has_legacy, legacy)
local out = {}
for k = 1, n do
  local id, fp = ARGV[5 + k], ARGV[5 + n + k]
  local holder, deadline = mark_of(KEYS[3 + k])
  if seen(live, fp) or legacy_done(has_legacy, legacy, id) then
    out[k] = 1
  elseif holder and (deadline == nil or deadline > attended) then
    out[k] = 2
  elseif size >= max then
    out[k] = 3
  else
    set_mark(KEYS[3 + k], owner, attended, ttl, keep)
    size = size + 1  -- room for its done mark
    out[k] = 0
  end
end
return out
"""
)

RENEW = LuaScript(
    "#!lua\n"
    + _NOW
    + _MARKS
    + _SEEN
    + """
-- KEYS[1] record index, KEYS[2] earlier version's window, KEYS[3] attended clock, KEYS[4..] in-flight marks;
-- ARGV: owner, ttl ms, keep ms, gap ms, the n ids, then their fingerprints. Extend this owner's marks;
-- without ids, only the heartbeat that advances the attended clock.
-- Reply per id (``bridge.core.receiving.Renewal``): 0 renewed; 1 renewed late (ours, its life had run out,
-- nobody took it); 2 taken (another owner's mark); 3 handled (no mark of ours, the id is done within the
-- window); 4 gone (no mark at all, not done: set again, ours).
local index, legacy = KEYS[1], KEYS[2]
local owner, ttl = ARGV[1], tonumber(ARGV[2])
local keep, gap = tonumber(ARGV[3]), tonumber(ARGV[4])
local n = #KEYS - 3
local attended = attend(KEYS[3], gap, ttl + keep)
local live, has_legacy = nil, nil
local out = {}
for k = 1, n do
  local key, id, fp = KEYS[3 + k], ARGV[4 + k], ARGV[4 + n + k]
  local holder, deadline = mark_of(key)
  if holder == owner then
    set_mark(key, owner, attended, ttl, keep)
    if deadline ~= nil and deadline <= attended then out[k] = 1 else out[k] = 0 end
  elseif holder then
    out[k] = 2
  else
    if live == nil then
      live, has_legacy = buckets(index, false), redis.call('EXISTS', legacy) == 1
    end
    if seen(live, fp) or legacy_done(has_legacy, legacy, id) then
      out[k] = 3
    else
      set_mark(key, owner, attended, ttl, keep)
      out[k] = 4
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

LOOKUP = LuaScript(
    "#!lua flags=no-writes\n"
    + _NOW
    + _SEEN
    + """
-- KEYS[1] record index, KEYS[2] earlier version's window; ARGV: id, fingerprint. Observation only: 1 while
-- the id is remembered as handled, then how many ids are remembered.
local live = buckets(KEYS[1], false)
local has_legacy = redis.call('EXISTS', KEYS[2]) == 1
local found = 0
if ARGV[1] ~= '' and (seen(live, ARGV[2]) or legacy_done(has_legacy, KEYS[2], ARGV[1])) then
  found = 1
end
return {found, remembered(live, has_legacy, KEYS[2])}
"""
)

DONE = LuaScript(
    "#!lua\n"
    + _NOW
    + _MARK_OF
    + _SEEN
    + _REMEMBER
    + """
-- KEYS[1] record index, KEYS[2] earlier version's window, KEYS[3] counters, KEYS[4] journal stream, KEYS[5]
-- its overflow hash, KEYS[6..] in-flight marks; ARGV: window ms, span ms, fill, owner, journal max length
-- (0: no journal), e, the e field/value items of the handled event (no MessageId), then the n ids, then
-- their fingerprints. Reply: how many ids were new to the record, then the ids whose mark was another
-- owner's (the caller lost it while its handler ran: another receiver claimed it).
-- The done mark first, then the in-flight mark goes (only if still ours: an expired one may be another's).
-- Ids new to the record are counted (``handled``) and journaled (one batch entry) in the same step, so the
-- record, the counter and the journal never disagree; an id already there was counted and journaled by
-- the call that added it (a retry after a lost reply, or another copy's handler; an earlier version's
-- receiver for an id its window holds), so nothing is twice.
-- The shebang makes Redis refuse the script before it starts when memory is full (never half-written).
local index, legacy = KEYS[1], KEYS[2]
local window_ms, span_ms, fill = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local owner, journal_max, e = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local n = #KEYS - 5
local first_id = 6 + e
local live = buckets(index, true)
local has_legacy = redis.call('EXISTS', legacy) == 1
local bucket = current(index, live, window_ms, span_ms)
local new, taken = {}, {}
for k = 1, n do
  local id, fp = ARGV[first_id + k], ARGV[first_id + n + k]
  -- An id in any live bucket (an earlier span's, or this call's) is not new, and is not stored again.
  if not seen(live, fp) and not legacy_done(has_legacy, legacy, id) then
    remember(bucket, fp, fill)
    new[#new + 1] = id
  end
  local holder = mark_of(KEYS[5 + k])
  if holder == owner then
    redis.call('DEL', KEYS[5 + k])
  elseif holder then
    taken[#taken + 1] = id
  end
end
save(index, live)
if #new > 0 then
  redis.call('HINCRBY', KEYS[3], 'handled', #new)
  if journal_max > 0 then
    if redis.call('XLEN', KEYS[4]) < journal_max then
      local entry = {unpack(ARGV, 7, 6 + e)}
      entry[#entry + 1] = 'M'
      entry[#entry + 1] = cjson.encode(new)
      redis.call('XADD', KEYS[4], '*', unpack(entry))
    else
      redis.call('HINCRBY', KEYS[5], 'handled', 1)
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
