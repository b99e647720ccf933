"""The Lua scripts that make outbox writes and acknowledgements atomic per entity.

Redis runs a script as one step: no other client sees the idempotency check without the ``XADD``, or the
entry without its counters. Both scripts touch only keys with the entity's hash tag, so they run unchanged
on a Redis Cluster. The ``#!lua`` shebang (Redis >= 7) makes Redis refuse a writing script *before* it
starts when memory is full, so an out-of-memory error never leaves a batch half-written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class LuaScript:
    """Script text and its SHA-1 (what ``EVALSHA`` needs)."""

    text: str

    @property
    def sha(self) -> str:
        """SHA-1 hex digest of the text, as Redis computes it."""
        return hashlib.sha1(self.text.encode(), usedforsecurity=False).hexdigest()


# KEYS: stats, idempotency prefix, totals (or stats again when totals are kept outside), shard 0 .. n-1.
# ARGV: window_ms, max_messages, max_bytes, total_max_messages, total_max_bytes, use_totals (1/0),
#       group count, then per group: message count, then per message:
#       shard, message id, size, fresh (1 when the bridge just generated the id), k, k field/value items.
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
local pos = 8
local out = {}
for g = 1, tonumber(ARGV[7]) do
  local count = tonumber(ARGV[pos])
  pos = pos + 1
  local seen, msgs, lookup = {}, {}, {}
  for m = 1, count do
    local mid, k = ARGV[pos + 1], tonumber(ARGV[pos + 4])
    msgs[m] = {ARGV[pos], mid, tonumber(ARGV[pos + 2]), pos + 5, k}
    if ARGV[pos + 3] ~= '1' and seen[mid] == nil then
      lookup[#lookup + 1] = mid
    end
    seen[mid] = true
    pos = pos + 5 + k
  end
  if #lookup > 0 then
    local a = redis.call('HMGET', cur_key, unpack(lookup))
    local b = redis.call('HMGET', prev_key, unpack(lookup))
    for i = 1, #lookup do
      local marker = a[i] or b[i]
      if marker then seen[lookup[i]] = marker end
    end
  end
  local new_n, new_b = 0, 0
  local firsts = {}
  for m = 1, count do
    local mid = msgs[m][2]
    if seen[mid] == true and not firsts[mid] then
      firsts[mid] = true
      new_n, new_b = new_n + 1, new_b + msgs[m][3]
    end
  end
  if new_n > 0 and (n_now + new_n > max_n or b_now + new_b > max_b) then
    out[g] = {0, 'entity'}
  elseif new_n > 0 and use_totals and (t_now + new_n > tmax_n or tb_now + new_b > tmax_b) then
    out[g] = {0, 'total'}
  else
    local res, marks = {1}, {}
    for m = 1, count do
      local msg = msgs[m]
      local prior = seen[msg[2]]
      if prior == true then
        local stream = KEYS[4 + tonumber(msg[1])]
        local id = redis.call('XADD', stream, '*', unpack(ARGV, msg[4], msg[4] + msg[5] - 1))
        local marker = msg[1] .. ' ' .. id
        seen[msg[2]] = marker
        marks[#marks + 1] = msg[2]
        marks[#marks + 1] = marker
        res[#res + 1] = marker
        res[#res + 1] = 0
      else
        res[#res + 1] = prior
        res[#res + 1] = 1
      end
    end
    if #marks > 0 then
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
