"""The Lua scripts that apply shared-state changes atomically (run by ``bridge.redis.scripts.run_script``).

Each script is the Redis twin of a pure function in ``bridge.core`` and must keep its semantics exactly
(the integration tests use the pure function as the oracle). A script touches one entity's keys only (one
hash tag), except where a caller passes a shared key explicitly on a single server. ``#!lua`` makes Redis
refuse a writing script before it starts when memory is full, so a change is never half-applied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bridge.redis.scripts import LuaScript

# KEYS: role hash. ARGV: expected_epoch, from_role, then the new state's field/value pairs.
# Reply: {applied (1/0), field, value, ...} with the hash as it is after the call.
# Compare-and-swap: applied only while the stored epoch AND active role are those the swap was decided on;
# an absent hash is the initial state (primary, epoch 0).
SWAP = LuaScript(
    """#!lua
local key = KEYS[1]
local cur = redis.call('HMGET', key, 'active', 'epoch')
local active = cur[1] or 'primary'
local epoch = tonumber(cur[2] or '0')
if epoch ~= tonumber(ARGV[1]) or active ~= ARGV[2] then
  local out = redis.call('HGETALL', key)
  table.insert(out, 1, 0)
  return out
end
redis.call('DEL', key)
redis.call('HSET', key, unpack(ARGV, 3))
local out = redis.call('HGETALL', key)
table.insert(out, 1, 1)
return out
"""
)

# KEYS: health hash. ARGV: the new record's changed_at ('' for none), then its field/value pairs.
# Reply: 1 when written, 0 when the stored record changed for a later attempt (bridge.core.roles.next_health:
# an older attempt never replaces a newer one; changed_at is the later of since and last_error_at).
SET_HEALTH = LuaScript(
    """#!lua
local key = KEYS[1]
if ARGV[1] ~= '' then
  local at = tonumber(ARGV[1])
  local cur = redis.call('HMGET', key, 'since', 'last_error_at')
  for _, stored in ipairs(cur) do
    if stored and tonumber(stored) > at then
      return 0
    end
  end
end
redis.call('DEL', key)
redis.call('HSET', key, unpack(ARGV, 2))
return 1
"""
)

# KEYS: paired hash, failed-over set (only on a single server, with ARGV[1] == '1').
# ARGV: use_set, entity, then ops:
#   start <at> | engage <at> | available | error <at> <text> | ping <at>
# Reply: {before field/value list, after field/value list}.
# bridge.core.paired.apply_change: StartTimer is HSETNX; EngageFailover does nothing once engaged, else
# keeps a running timer's start (HSETNX) and sets failed_over_at and last_failover_at; MarkAvailable deletes
# the first two (last_failover_at stays: the status page shows the last failover after the restore).
PAIRED = LuaScript(
    """#!lua
local key, set = KEYS[1], KEYS[2]
local use_set, entity = ARGV[1] == '1', ARGV[2]
local before = redis.call('HGETALL', key)
local i = 3
while i <= #ARGV do
  local op = ARGV[i]
  if op == 'start' then
    redis.call('HSETNX', key, 'failing_since', ARGV[i + 1])
    i = i + 2
  elseif op == 'engage' then
    if redis.call('HEXISTS', key, 'failed_over_at') == 0 then
      redis.call('HSETNX', key, 'failing_since', ARGV[i + 1])
      redis.call('HSET', key, 'failed_over_at', ARGV[i + 1], 'last_failover_at', ARGV[i + 1])
    end
    i = i + 2
  elseif op == 'available' then
    redis.call('HDEL', key, 'failing_since', 'failed_over_at')
    i = i + 1
  elseif op == 'error' then
    redis.call('HSET', key, 'last_error', ARGV[i + 2], 'last_error_at', ARGV[i + 1])
    i = i + 3
  elseif op == 'ping' then
    redis.call('HSET', key, 'last_ping_at', ARGV[i + 1])
    i = i + 2
  else
    return redis.error_reply('unknown paired op ' .. tostring(op))
  end
end
if use_set then
  if redis.call('HEXISTS', key, 'failed_over_at') == 1 then
    redis.call('SADD', set, entity)
  else
    redis.call('SREM', set, entity)
  end
end
return {before, redis.call('HGETALL', key)}
"""
)

# Times another process reads are Redis's own (``TIME``): a script adds the caller's duration to the server's
# clock when it writes and subtracts the server's clock when it reads, so the hosts' clocks never meet
# (docs/replication.md, "Clocks"). Stored as epoch seconds with six decimals; a reply is a decimal string
# (a Lua number would come back truncated to an integer).
_NOW = """local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""

# Fenced retry state of an outbox shard (``bridge.state.retry``): only the shard's lease holder may set or
# clear its backoff, so a drainer whose lease was taken over cannot wipe or overwrite the new holder's.
# KEYS: shard lease, not-before hash, attempts hash (one entity's tag). ARGV: token, shard, delay (seconds).
# Reply: -1 when the lease is not held with ``token`` (nothing written), else the new retry count.
FENCED_SCHEDULE = LuaScript(
    "#!lua\n"
    + _NOW
    + """if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
redis.call('HSET', KEYS[2], ARGV[2], string.format('%.6f', now + tonumber(ARGV[3])))
return redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
"""
)

# The same without a lease. KEYS: not-before hash, attempts hash. ARGV: shard, delay, count (1: count one
# more retry, 0: only set the time). Reply: the retry count after the call.
SCHEDULE = LuaScript(
    "#!lua\n"
    + _NOW
    + """redis.call('HSET', KEYS[1], ARGV[1], string.format('%.6f', now + tonumber(ARGV[2])))
if ARGV[3] == '1' then
  return redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
end
return tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
"""
)

# Seconds left of hash fields that hold Redis times. KEYS: the hash. ARGV: the fields (none: every field).
# Reply: {field, seconds left (decimal string, negative once passed), ...} for each field present whose value
# is a number.
TIME_LEFT = LuaScript(
    "#!lua flags=no-writes\n"
    + _NOW
    + """local out = {}
local function add(field, value)
  local at = tonumber(value)
  if at ~= nil then
    table.insert(out, field)
    table.insert(out, string.format('%.6f', at - now))
  end
end
if #ARGV == 0 then
  local all = redis.call('HGETALL', KEYS[1])
  for i = 1, #all, 2 do
    add(all[i], all[i + 1])
  end
else
  local values = redis.call('HMGET', KEYS[1], unpack(ARGV))
  for i = 1, #ARGV do
    if values[i] then
      add(ARGV[i], values[i])
    end
  end
end
return out
"""
)

# A wait after an abandoned send (``bridge.core.abandoned``). KEYS: the entity's waits hash. ARGV: field,
# wait (seconds), the key's expiry (milliseconds). Reply: 1.
ABANDON = LuaScript(
    "#!lua\n"
    + _NOW
    + """redis.call('HSET', KEYS[1], ARGV[1], string.format('%.6f', now + tonumber(ARGV[2])))
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
"""
)

# KEYS: shard lease, not-before hash, attempts hash. ARGV: token, shard. Reply: -1 (not ours) or 1.
FENCED_CLEAR = LuaScript(
    """#!lua
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return -1
end
redis.call('HDEL', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
return 1
"""
)


# KEYS: a claim key. ARGV: the claimant's token. Deletes the claim only while it is still that claimant's.
RELEASE_CLAIM = LuaScript(
    """local key = KEYS[1]
if redis.call('GET', key) == ARGV[1] then
  return redis.call('DEL', key)
end
return 0
"""
)


def pairs(flat: Sequence[Any]) -> dict[bytes | str, bytes | str]:
    """A ``HGETALL``-style flat reply ``[field, value, ...]`` as a dict."""
    return {flat[i]: flat[i + 1] for i in range(0, len(flat), 2)}
