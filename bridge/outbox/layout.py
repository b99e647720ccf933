"""The recorded outbox layout of an entity in Redis, and changing it safely (``bridge.core.layout``).

``bridge:{<entity>}:layout`` is a hash: ``shards`` (the count writers must use; the write script refuses a
write made for another count, so every writer follows it whatever its own settings say), ``previous`` and
``b:<i>`` (the newest entry id of old shard ``i`` when a migration started). The first write records the
writer's count. ``start`` and ``finish_if_drained`` are Lua scripts: a migration starts atomically with
respect to every write, and ends only when no old-layout entry is left.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``OutboxUnavailableError``.
"""

from __future__ import annotations

import logging
from typing import Any

from bridge.core.layout import Layout, next_migration
from bridge.errors import OutboxUnavailableError
from bridge.outbox import keys
from bridge.redis.errors import driver_errors
from bridge.redis.scripts import LuaScript, run_script

log = logging.getLogger(__name__)

# KEYS: layout, shard streams 0 .. max(old, new)-1. ARGV: new count, old count (the caller's view).
# Records the new count and the boundaries of the non-empty old shards; refuses (0) when the recorded
# count is not ARGV[2] or a migration runs already.
START = LuaScript(
    """#!lua
local layout = KEYS[1]
local new, old = tonumber(ARGV[1]), tonumber(ARGV[2])
local current = redis.call('HGET', layout, 'shards')
if redis.call('HEXISTS', layout, 'previous') == 1 then return 0 end
if current and tonumber(current) ~= old then return 0 end
redis.call('HSET', layout, 'shards', new, 'previous', old)
for i = 0, old - 1 do
  local last = redis.call('XREVRANGE', KEYS[2 + i], '+', '-', 'COUNT', 1)
  if #last > 0 then redis.call('HSET', layout, 'b:' .. i, last[1][1]) end
end
return 1
"""
)

# KEYS: layout, old shard streams 0 .. previous-1. Ends the migration (1) when no entry at or below a
# boundary is left; else 0.
FINISH = LuaScript(
    """#!lua
local layout = KEYS[1]
local previous = redis.call('HGET', layout, 'previous')
if not previous then return 1 end
local fields = {}
for i = 0, tonumber(previous) - 1 do
  local boundary = redis.call('HGET', layout, 'b:' .. i)
  if boundary then
    if #redis.call('XRANGE', KEYS[2 + i], '-', boundary, 'COUNT', 1) > 0 then return 0 end
    fields[#fields + 1] = 'b:' .. i
  end
end
fields[#fields + 1] = 'previous'
redis.call('HDEL', layout, unpack(fields))
return 1
"""
)


_WARNED: set[tuple[str, int]] = set()


class LayoutStore:
    """Read and change the recorded shard layout of entities."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def follow_settings(self, entity: str, wanted: int) -> Layout | None:
        """Make the recorded layout follow ``outbox_shards`` (the sweeper, once per sweep and entity).

        Starts a migration when the count differs, helps end one whose old layout is drained, and warns
        (once per process) about a further change while one runs: it starts when that one has ended.
        """
        layout = self.get(entity)
        if layout is None:
            return None  # the first write records the writer's count
        if layout.migrating:
            if self.finish_if_drained(entity, layout):
                layout = self.get(entity)
            elif layout.shards != wanted and (entity, wanted) not in _WARNED:
                _WARNED.add((entity, wanted))
                log.warning(
                    "outbox of %s: outbox_shards %d waits until the change to %d shards has drained",
                    entity,
                    wanted,
                    layout.shards,
                )
            if layout is None or layout.migrating:
                return layout
        target = next_migration(layout, wanted)
        if target is not None and self.start(entity, layout, target):
            return self.get(entity)
        return layout

    def get(self, entity: str) -> Layout | None:
        """The recorded layout, None before the first write."""
        with driver_errors(OutboxUnavailableError):
            return Layout.from_fields(self.client.hgetall(keys.layout(entity)))

    def start(self, entity: str, layout: Layout, shards: int) -> bool:
        """Migrate ``entity`` from ``layout`` to ``shards`` shards; False when someone changed it first."""
        streams = [keys.outbox(entity, i) for i in range(max(layout.shards, shards))]
        with driver_errors(OutboxUnavailableError):
            done = int(
                run_script(self.client, START, [keys.layout(entity), *streams], [shards, layout.shards])
            )
        if done:
            log.warning(
                "outbox of %s resharded %d -> %d shards: new entries wait until the old layout is drained",
                entity,
                layout.shards,
                shards,
            )
        return done == 1

    def finish_if_drained(self, entity: str, layout: Layout) -> bool:
        """End the migration of ``entity`` when the old layout is empty; True when none runs any more."""
        if not layout.migrating or layout.previous is None:
            return True
        streams = [keys.outbox(entity, i) for i in range(layout.previous)]
        with driver_errors(OutboxUnavailableError):
            done = int(run_script(self.client, FINISH, [keys.layout(entity), *streams], []))
        if done:
            log.warning("outbox of %s: the old layout is drained, %d shards in force", entity, layout.shards)
        return done == 1
