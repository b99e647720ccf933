"""The Lua scripts that make outbox writes and acknowledgements atomic per entity.

Redis runs a script as one step: no other client sees the idempotency check without the ``XADD``, or the
entry without its counters. Every script touches only keys with the entity's hash tag, so they run unchanged
on a Redis Cluster. The ``#!lua`` shebang (Redis >= 7) makes Redis refuse a writing script *before* it
starts when memory is full, so an out-of-memory error never leaves a batch half-written.
"""

from __future__ import annotations

from bridge.redis.scripts import LuaScript

# KEYS: stats, idempotency prefix, totals (or stats again when totals are kept outside), shard 0 .. n-1,
#       the entity's layout hash (``bridge.outbox.layout``), the entity's journal stream and its overflow
#       hash (``bridge.journal.keys``), and last the entity set ``bridge:{bridge}:entities`` (or stats again
#       when totals are kept outside: on a Cluster the writer adds the entity after the script).
# ARGV: window_ms, max_messages, max_bytes, total_max_messages, total_max_bytes, use_totals (1/0),
#       entity (the value of ``e``), group count, journal max length (0: no journal), then per group:
#       message count, door (``http``, ``rest``, ``producer``, ``redis-door``; may be empty), then three
#       strings with one byte per message: its shard (0..255), fresh (1 when the bridge just generated the
#       id, so no lookup is needed), k (how many optional field/value items follow it); then per message:
#       message id, body, at, then its k optional items (``Envelope.encode_optional``).
# The script writes each entry as ``Envelope.encode_flat`` lays it out (version 1: v, id, b, at, e, then
# the optional fields): the names and the version travel once, in this text, and the small numbers in a
# byte each, because every argument costs the client, the server and Lua (which hashes every byte of
# every argument) a little. An entry's size, what the bounds count, is the sum of its field name and value
# lengths, as the ACK script counts it.
# Reply per group: {0, "entity"|"total"} when the group does not fit a bound (nothing written), else
#       {1, marker, duplicate, marker, duplicate, ...} where marker is "<shard> <entry id>".
# Journal: every message stored (not a duplicate) gets its ``accepted`` event (``bridge.core.journal``) in
# the same step, so the journal never misses a message the outbox holds: one batch entry per group (its
# MessageIds, sizes, shards, partition keys and trace ids as JSON arrays). A full journal counts the entry
# in the overflow hash instead (the journal never refuses a write).
# Entity set: a write that stores something adds the entity to the set in the same step (single server), so
# an entity with an entry is always listed, whatever ``bridge.outbox.entities`` removes concurrently.
# Layout: the writer assumed n = #KEYS - 7 shards. The first write that stores something records n; when
# the recorded count differs (a migration, ``bridge.core.layout``), nothing is written and every group answers
# {2, "<recorded count>"}: the writer re-shards its groups for that count and sends them again.
# A group is all-or-nothing; duplicates (a marker exists, or the same id earlier in the group) are
# acknowledged with the first entry's marker and count toward no bound.
#
# Idempotency markers live in hashes per time bucket of one window (``<prefix><bucket>``, bucket taken from
# the server clock so every writer agrees); a lookup checks the current and the previous bucket and a
# bucket expires two windows after it starts, so a MessageId is remembered for at least one window and at
# most two. One HSET per group instead of a SET per message keeps the script cheap per message.
WRITE = LuaScript(
    """#!lua
local stats, prefix, totals = KEYS[1], KEYS[2], KEYS[3]
local window = tonumber(ARGV[1])
local max_n, max_b = tonumber(ARGV[2]), tonumber(ARGV[3])
local tmax_n, tmax_b = tonumber(ARGV[4]), tonumber(ARGV[5])
local use_totals = ARGV[6] == '1'
local entity = ARGV[7]
local layout, nshards = KEYS[#KEYS - 3], #KEYS - 7
local journal, journal_overflow = KEYS[#KEYS - 2], KEYS[#KEYS - 1]
local journal_max = tonumber(ARGV[9])
local recorded = redis.call('HGET', layout, 'shards')
if recorded and tonumber(recorded) ~= nshards then
  local refused = {}
  for g = 1, tonumber(ARGV[8]) do refused[g] = {2, recorded} end
  return refused
end
local overhead = #'v' + #'1' + #'id' + #'b' + #'at' + #'e' + #entity
local byte = string.byte
local clock = redis.call('TIME')
local bucket = math.floor((tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)) / window)
local cur_key = prefix .. string.format('%d', bucket)
local prev_key = prefix .. string.format('%d', bucket - 1)
local cur = redis.call('HMGET', stats, 'messages', 'bytes')
local n_now, b_now = tonumber(cur[1]) or 0, tonumber(cur[2]) or 0
local t_now, tb_now = 0, 0
if use_totals then
  local t = redis.call('HMGET', totals, 'messages', 'bytes')
  t_now, tb_now = tonumber(t[1]) or 0, tonumber(t[2]) or 0
end
local journal_len, journal_dropped = 0, 0
if journal_max > 0 then
  journal_len = redis.call('XLEN', journal)
end
local added_n, added_b = 0, 0
local pos = 10
local out = {}
for g = 1, tonumber(ARGV[8]) do
  local count = tonumber(ARGV[pos])
  local door = ARGV[pos + 1]
  local shards, fresh, optional = ARGV[pos + 2], ARGV[pos + 3], ARGV[pos + 4]
  pos = pos + 5
  local first = pos
  -- First pass: sizes, distinct ids and what they would add, which ids may have been stored before.
  local seen, sizes, lookup, nl = {}, {}, {}, 0
  local new_n, new_b = 0, 0
  for m = 1, count do
    local mid, k = ARGV[pos], byte(optional, m)
    local size = overhead + #mid + #ARGV[pos + 1] + #ARGV[pos + 2]
    for i = pos + 3, pos + 2 + k do
      size = size + #ARGV[i]
    end
    sizes[m] = size
    if seen[mid] == nil then
      seen[mid] = true
      new_n, new_b = new_n + 1, new_b + size
      if byte(fresh, m) ~= 1 then
        nl = nl + 1
        lookup[nl] = mid
      end
    end
    pos = pos + 3 + k
  end
  if nl > 0 then
    local a = redis.call('HMGET', cur_key, unpack(lookup))
    local b = redis.call('HMGET', prev_key, unpack(lookup))
    for i = 1, nl do
      local marker = a[i] or b[i]
      if marker then seen[lookup[i]] = marker end
    end
    -- Some ids may be stored already: count again, first occurrences of the ids still unseen only.
    new_n, new_b = 0, 0
    local counted = {}
    local p = first
    for m = 1, count do
      local mid = ARGV[p]
      if seen[mid] == true and not counted[mid] then
        counted[mid] = true
        new_n, new_b = new_n + 1, new_b + sizes[m]
      end
      p = p + 3 + byte(optional, m)
    end
  end
  if new_n > 0 and (n_now + new_n > max_n or b_now + new_b > max_b) then
    out[g] = {0, 'entity'}
  elseif new_n > 0 and use_totals and (t_now + new_n > tmax_n or tb_now + new_b > tmax_b) then
    out[g] = {0, 'total'}
  else
    local res, marks, nr, nm = {1}, {}, 1, 0
    local jids, jsizes, jshards, jkeys, jkeyed, nj = {}, {}, {}, {}, false, 0
    local jtraces, jtraced = {}, false
    local p = first
    for m = 1, count do
      local mid, k = ARGV[p], byte(optional, m)
      local prior = seen[mid]
      if prior == true then
        local shard = byte(shards, m)
        local id = redis.call('XADD', KEYS[4 + shard], '*', 'v', '1', 'id', mid, 'b', ARGV[p + 1],
          'at', ARGV[p + 2], 'e', entity, unpack(ARGV, p + 3, p + 2 + k))
        local marker = shard .. ' ' .. id
        seen[mid] = marker
        if journal_max > 0 then
          nj = nj + 1
          jids[nj], jsizes[nj], jshards[nj] = mid, sizes[m], shard
          jkeys[nj], jtraces[nj] = cjson.null, cjson.null
          local keyed = false
          for i = p + 3, p + 1 + k, 2 do
            local name = ARGV[i]
            if (name == 'sid' or name == 'pk') and not keyed then
              jkeys[nj], jkeyed, keyed = ARGV[i + 1], true, true
            elseif name == 'tp' then
              jtraces[nj], jtraced = string.sub(ARGV[i + 1], 4, 35), true
            end
          end
        end
        marks[nm + 1], marks[nm + 2], nm = mid, marker, nm + 2
        res[nr + 1], res[nr + 2], nr = marker, 0, nr + 2
      else
        res[nr + 1], res[nr + 2], nr = prior, 1, nr + 2
      end
      p = p + 3 + k
    end
    if nm > 0 then
      redis.call('HSET', cur_key, unpack(marks))
    end
    if nj > 0 then
      if journal_len < journal_max then
        local entry = {'v', '1', 'k', 'accepted', 't', ARGV[first + 2], 'd', door, 'M', cjson.encode(jids),
          'Z', cjson.encode(jsizes), 'S', cjson.encode(jshards)}
        if jkeyed then
          entry[#entry + 1], entry[#entry + 2] = 'Y', cjson.encode(jkeys)
        end
        if jtraced then
          entry[#entry + 1], entry[#entry + 2] = 'I', cjson.encode(jtraces)
        end
        redis.call('XADD', journal, '*', unpack(entry))
        journal_len = journal_len + 1
      else
        journal_dropped = journal_dropped + 1
      end
    end
    n_now, b_now = n_now + new_n, b_now + new_b
    t_now, tb_now = t_now + new_n, tb_now + new_b
    added_n, added_b = added_n + new_n, added_b + new_b
    out[g] = res
  end
end
if added_n > 0 then
  -- Recorded with the first entry it describes, so a refused write leaves no key behind.
  if not recorded then
    redis.call('HSET', layout, 'shards', nshards)
  end
  redis.call('PEXPIRE', cur_key, 2 * window + 1000)
  redis.call('HINCRBY', stats, 'messages', added_n)
  redis.call('HINCRBY', stats, 'bytes', added_b)
  if use_totals then
    redis.call('HINCRBY', totals, 'messages', added_n)
    redis.call('HINCRBY', totals, 'bytes', added_b)
    redis.call('SADD', KEYS[#KEYS], entity)
  end
end
if journal_dropped > 0 then
  redis.call('HINCRBY', journal_overflow, 'accepted', journal_dropped)
end
return out
"""
)

# The acknowledgement both scripts below share: acknowledges, deletes and un-counts the entries
# ARGV[first .. last] of ``stream`` (an entry's size is the length of its field names and values, as the
# writer counted it); entries already gone count nothing (a second ack after a crash is harmless).
# Returns {messages, bytes} removed, for the caller to subtract from the totals on a Cluster.
_ACK_ENTRIES = """
local function ack(stats, stream, totals, group, use_totals, first, last)
  local n, b = 0, 0
  local found = {}
  for i = first, last do
    local entry = redis.call('XRANGE', stream, ARGV[i], ARGV[i])
    if #entry > 0 then
      local fields = entry[1][2]
      local size = 0
      for j = 1, #fields do
        size = size + #fields[j]
      end
      n, b = n + 1, b + size
      found[n] = ARGV[i]
    end
  end
  -- One XACK and one XDEL for all of them (in slices that unpack takes): a command each per entry cost
  -- Redis more than the entries' lookups.
  for i = 1, n, 1000 do
    local last_of = math.min(n, i + 999)
    redis.call('XACK', stream, group, unpack(found, i, last_of))
    redis.call('XDEL', stream, unpack(found, i, last_of))
  end
  if n > 0 then
    redis.call('HINCRBY', stats, 'messages', -n)
    redis.call('HINCRBY', stats, 'bytes', -b)
    if use_totals then
      redis.call('HINCRBY', totals, 'messages', -n)
      redis.call('HINCRBY', totals, 'bytes', -b)
    end
  end
  return {n, b}
end
"""

# The same for a caller that read the entries and passes each one's size (id, size pairs from ARGV[first]
# on): no entry is read back into Lua (an ``XRANGE`` copying the whole entry cost Redis more than the rest
# of the acknowledgement); ``XDEL`` tells which were still there, only those are un-counted.
_ACK_SIZED = """
local function ack_sized(stats, stream, totals, group, use_totals, first)
  local n, b, ids = 0, 0, {}
  for i = first, #ARGV, 2 do
    ids[#ids + 1] = ARGV[i]
    if redis.call('XDEL', stream, ARGV[i]) == 1 then
      n, b = n + 1, b + tonumber(ARGV[i + 1])
    end
  end
  for i = 1, #ids, 1000 do
    redis.call('XACK', stream, group, unpack(ids, i, math.min(#ids, i + 999)))
  end
  if n > 0 then
    redis.call('HINCRBY', stats, 'messages', -n)
    redis.call('HINCRBY', stats, 'bytes', -b)
    if use_totals then
      redis.call('HINCRBY', totals, 'messages', -n)
      redis.call('HINCRBY', totals, 'bytes', -b)
    end
  end
  return {n, b}
end
"""

# KEYS: stats, the shard stream, totals (or stats again when totals are kept outside).
# ARGV: group, use_totals (1/0), entry ids. Reply: {messages, bytes} removed.
ACK = LuaScript(
    "#!lua\n" + _ACK_ENTRIES + "return ack(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2] == '1', 3, #ARGV)\n"
)

# The bound of a problem stream (``entities.<name>.max_problem_entries``): a move into a stream that holds
# that many entries writes nothing, acknowledges nothing and replies {-2, length}. Never trimmed.
_BOUND = (
    "local held = redis.call('XLEN', KEYS[4])\n"
    "if held >= tonumber(ARGV[{bound}]) then return {{-2, held}} end\n"
)

# KEYS: stats, the shard stream, totals (or stats again), the quarantine or dead-letter stream.
# ARGV: group, use_totals (1/0), entry id, bound, then the field/value pairs of the problem entry.
# Writes the problem entry and acknowledges the outbox entry in one step, so an entry is never in both
# streams or in neither. Reply: {messages, bytes} removed, or {-2, length} when the stream is full.
MOVE = LuaScript(
    "#!lua\n"
    + _ACK_ENTRIES
    + _BOUND.format(bound=4)
    + "redis.call('XADD', KEYS[4], '*', unpack(ARGV, 5))\n"
    + "return ack(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2] == '1', 3, 3)\n"
)

# ---- fenced scripts: the shard's lease holder only -------------------------------------------------------
# A drainer holds the lease ``bridge:{E}:lease:<i>`` of its shard (``bridge.state.lease``) with a token unique
# to its tenure. Every script below first checks ``GET lease == token`` and does nothing when it does not
# hold (reply -1 in the first position): a drainer whose lease expired mid-batch and was taken over can
# neither read new entries, nor acknowledge, nor move entries that the new holder now owns. The lease key
# carries the entity's hash tag, so the scripts stay within one Cluster slot.
_FENCE = "if redis.call('GET', KEYS[{lease}]) ~= ARGV[{token}] then return {{-1, 0}} end\n"

# KEYS: stats, the shard stream, totals (or stats again), lease. ARGV: group, use_totals, token, entry ids.
# Reply: {messages, bytes} removed, or {-1, 0} when the lease is not held with the token.
FENCED_ACK = LuaScript(
    "#!lua\n"
    + _ACK_ENTRIES
    + _FENCE.format(lease=4, token=3)
    + "return ack(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2] == '1', 4, #ARGV)\n"
)

# KEYS: as ``FENCED_ACK``. ARGV: group, use_totals, token, then entry id and size pairs (``_ACK_SIZED``).
FENCED_ACK_SIZED = LuaScript(
    "#!lua\n"
    + _ACK_SIZED
    + _FENCE.format(lease=4, token=3)
    + "return ack_sized(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2] == '1', 4)\n"
)

# KEYS: stats, the shard stream, totals (or stats again), the problem stream, lease.
# ARGV: group, use_totals, token, entry id, bound, then the field/value pairs of the problem entry.
FENCED_MOVE = LuaScript(
    "#!lua\n"
    + _ACK_ENTRIES
    + _FENCE.format(lease=5, token=3)
    + _BOUND.format(bound=5)
    + "redis.call('XADD', KEYS[4], '*', unpack(ARGV, 6))\n"
    + "return ack(KEYS[1], KEYS[2], KEYS[3], ARGV[1], ARGV[2] == '1', 4, 4)\n"
)

# KEYS: the shard stream, lease, then any hashes of the entity to read with the entries, then (with
# ARGV[5] = '1') one hash keyed by entry id. ARGV: token, group, consumer, count, per-entry hash (1/0).
# New entries for the lease holder (``XREADGROUP ... >``, never blocking: a script cannot block). Reply:
# {1, entries, {hash, ...}, {value, ...}} when there were some: each hash of KEYS[3..] as HGETALL gives it,
# read after the entries, and the per-entry hash's value of each entry read (HMGET, false for none);
# {0, last-delivered-id} when none, the id to wait after with a plain ``XREAD BLOCK`` (it returns as soon
# as an entry the group has not delivered yet arrives); {-1, 0}.
FENCED_READ = LuaScript(
    "#!lua\n"
    + _FENCE.format(lease=2, token=1)
    + """local r = redis.call('XREADGROUP', 'GROUP', ARGV[2], ARGV[3], 'COUNT', ARGV[4],
  'STREAMS', KEYS[1], '>')
if r then
  local last = #KEYS
  local per_entry = {}
  if ARGV[5] == '1' then
    local ids = {}
    for i, entry in ipairs(r[1][2]) do
      ids[i] = entry[1]
    end
    per_entry = redis.call('HMGET', KEYS[last], unpack(ids))
    last = last - 1
  end
  local hashes = {}
  for i = 3, last do
    hashes[#hashes + 1] = redis.call('HGETALL', KEYS[i])
  end
  return {1, r[1][2], hashes, per_entry}
end
for _, g in ipairs(redis.call('XINFO', 'GROUPS', KEYS[1])) do
  local name, last
  for i = 1, #g, 2 do
    if g[i] == 'name' then name = g[i + 1] elseif g[i] == 'last-delivered-id' then last = g[i + 1] end
  end
  if name == ARGV[2] then
    return {0, last}
  end
end
return {0, '0-0'}
"""
)

# KEYS: the shard stream, lease. ARGV: token, group, consumer, count, prune (1/0), start (an entry id).
# Every entry still pending in the group from ``start`` on, whoever read it (a crashed or superseded
# drainer), becomes the holder's, oldest first, up to ``count`` (``XAUTOCLAIM`` from ``start``, 0-0 for the
# whole list, with no idle time: the holder owns the shard). With prune, consumers other than the holder
# that have nothing pending are deleted (``XGROUP DELCONSUMER``), so the group holds about one consumer
# however many drainers came and went.
# Reply: {1, entries} or {-1, 0}.
FENCED_CLAIM = LuaScript(
    "#!lua\n"
    + _FENCE.format(lease=2, token=1)
    + """local want = tonumber(ARGV[4])
local out = {}
local cursor = ARGV[6] or '0-0'
repeat
  local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[2], ARGV[3], 0, cursor,
    'COUNT', math.min(100, want - #out))
  cursor = r[1]
  for _, entry in ipairs(r[2]) do
    out[#out + 1] = entry
  end
until cursor == '0-0' or #out >= want
if ARGV[5] == '1' then
  for _, c in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[2])) do
    local name, pending
    for i = 1, #c, 2 do
      if c[i] == 'name' then name = c[i + 1] elseif c[i] == 'pending' then pending = c[i + 1] end
    end
    if name ~= ARGV[3] and pending == 0 then
      redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[2], name)
    end
  end
end
return {1, out}
"""
)

# KEYS: the shard stream. ARGV: group, consumer. Deletes the consumer when it has nothing pending (a
# drainer handing its shard over); reply 1 when deleted. Safe without a fence: nothing pending, nothing lost.
RETIRE_CONSUMER = LuaScript(
    """#!lua
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) > 0 then
  return 0
end
return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2]) >= 0 and 1 or 0
"""
)

# KEYS: the entity's stats hash, then its shard streams 0 .. n-1. ARGV: idle_ms.
# Reply 1 when the entity's outbox is empty (no message counted, no entry in any shard, pending or not) and
# no shard was written within ``idle_ms`` (the time part of its last generated id, on the server's clock);
# else 0. Read only; ``bridge.outbox.entities`` asks it before and after it removes the entity from the set.
IDLE = LuaScript(
    """#!lua
if tonumber(redis.call('HGET', KEYS[1], 'messages') or '0') > 0 then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local since = now - tonumber(ARGV[1])
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    if redis.call('XLEN', KEYS[i]) > 0 then
      return 0
    end
    local info = redis.call('XINFO', 'STREAM', KEYS[i])
    for j = 1, #info, 2 do
      if info[j] == 'last-generated-id' then
        local ms = tonumber(string.match(info[j + 1], '^(%d+)'))
        if ms > since then
          return 0
        end
      end
    end
  end
end
return 1
"""
)
