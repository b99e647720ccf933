"""The Lua scripts that make outbox writes and acknowledgements atomic per entity.

Redis runs a script as one step: no other client sees the idempotency check without the ``XADD``, or the
entry without its counters. Both scripts touch only keys with the entity's hash tag, so they run unchanged
on a Redis Cluster. The ``#!lua`` shebang (Redis >= 7) makes Redis refuse a writing script *before* it
starts when memory is full, so an out-of-memory error never leaves a batch half-written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LuaScript:
    """Script text and its SHA-1 (what ``EVALSHA`` needs), computed once."""

    text: str
    sha: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # SHA-1 hex digest of the text, as Redis computes it; hashing a 4 KB script on every call cost more
        # than a whole message's encoding.
        object.__setattr__(self, "sha", hashlib.sha1(self.text.encode(), usedforsecurity=False).hexdigest())


# KEYS: stats, idempotency prefix, totals (or stats again when totals are kept outside), shard 0 .. n-1.
# ARGV: window_ms, max_messages, max_bytes, total_max_messages, total_max_bytes, use_totals (1/0),
#       entity (the value of ``e``), group count, then per group: message count, then three strings with
#       one byte per message: its shard (0..255), fresh (1 when the bridge just generated the id, so no
#       lookup is needed), k (how many optional field/value items follow it); then per message: message id,
#       body, at, then its k optional items (``Envelope.encode_optional``).
# The script writes each entry as ``Envelope.encode_flat`` lays it out (version 1: v, id, b, at, e, then
# the optional fields): the names and the version travel once, in this text, and the small numbers in a
# byte each, because every argument costs the client, the server and Lua (which hashes every byte of
# every argument) a little. An entry's size, what the bounds count, is the sum of its field name and value
# lengths, as the ACK script counts it.
# Reply per group: {0, "entity"|"total"} when the group does not fit a bound (nothing written), else
#       {1, marker, duplicate, marker, duplicate, ...} where marker is "<shard> <entry id>".
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
local added_n, added_b = 0, 0
local pos = 9
local out = {}
for g = 1, tonumber(ARGV[8]) do
  local count = tonumber(ARGV[pos])
  local shards, fresh, optional = ARGV[pos + 1], ARGV[pos + 2], ARGV[pos + 3]
  pos = pos + 4
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
    n_now, b_now = n_now + new_n, b_now + new_b
    t_now, tb_now = t_now + new_n, tb_now + new_b
    added_n, added_b = added_n + new_n, added_b + new_b
    out[g] = res
  end
end
if added_n > 0 then
  redis.call('PEXPIRE', cur_key, 2 * window + 1000)
  redis.call('HINCRBY', stats, 'messages', added_n)
  redis.call('HINCRBY', stats, 'bytes', added_b)
  if use_totals then
    redis.call('HINCRBY', totals, 'messages', added_n)
    redis.call('HINCRBY', totals, 'bytes', added_b)
  end
end
return out
"""
)

# KEYS: stats, the shard stream, totals (or stats again when totals are kept outside).
# ARGV: group, use_totals (1/0), entry ids.
# Acknowledges, deletes and un-counts the entries (an entry's size is the length of its field names and
# values, as the writer counted it); entries already gone count nothing (a second ack after a
# crash is harmless). Reply: {messages, bytes} removed, for the caller to subtract from the totals.
ACK = LuaScript(
    """#!lua
local stats, stream, totals, group = KEYS[1], KEYS[2], KEYS[3], ARGV[1]
local n, b = 0, 0
for i = 3, #ARGV do
  local entry = redis.call('XRANGE', stream, ARGV[i], ARGV[i])
  if #entry > 0 then
    local fields = entry[1][2]
    local size = 0
    for j = 1, #fields do
      size = size + #fields[j]
    end
    n, b = n + 1, b + size
    redis.call('XACK', stream, group, ARGV[i])
    redis.call('XDEL', stream, ARGV[i])
  end
end
if n > 0 then
  redis.call('HINCRBY', stats, 'messages', -n)
  redis.call('HINCRBY', stats, 'bytes', -b)
  if ARGV[2] == '1' then
    redis.call('HINCRBY', totals, 'messages', -n)
    redis.call('HINCRBY', totals, 'bytes', -b)
  end
end
return {n, b}
"""
)
