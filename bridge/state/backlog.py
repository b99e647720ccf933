"""Where an outbox shard's keys went in the backlog, and the barriers that end a failover in order.

Order-preserving paired mode (``paired.restore_order = "ordered"``, ``bridge.delivery.modes.paired``):

- **Sticky queues.** While failed over, every key of a shard sticks to one backlog queue
  (``bridge:{E}:backlog-keys:<shard>``, key → queue index, written *before* the send), chosen by
  rendezvous hashing over the queues in rotation. A backlog queue is FIFO and at most one syphon moves it,
  so a key's messages leave the backlog in their order.
- **The ledger.** ``bridge:{E}:backlog:<shard>`` records every backlog queue the shard sent to since its
  last restore: field ``<index>`` = ``open`` (set before each send, and before keys are assigned to it).
  When the entity is available again the shard's drainer sends a *barrier* message to each of those
  queues (field → ``wait:<token>`` before the send, ``sent:<token>`` after it was accepted) and sends
  nothing to the primary until every field is gone.
- **Passing a barrier.** The syphon, reaching a barrier in a queue after every earlier message of the
  entity there (set-aside ones included), deletes the field if it still names that token
  (``pass_barrier``, a compare-and-delete) and completes the barrier. A newer send to the queue resets the
  field to ``open``, so an old barrier passes nothing; a barrier whose send was never confirmed is sent
  again with a new token. When the last field goes, the key map goes with it (same script).
- **Moved keys.** ``bridge:{E}:backlog-maps`` names the shards whose key maps may name keys. A shard looks
  up the keys of its batch that its own map does not name in the others' maps and ledgers
  (``elsewhere``); a key it takes over (``bridge.core.moved_keys``: ``outbox_shards`` changed while the
  backlog held it) is written to its own map first and then dropped from the old one (``forget``).

Only the shard's drainer (one lease holder) writes its ledger and adds to its key map; the syphon only
deletes a field whose token matches; another shard's drainer only drops keys that moved to it (or stale
ones). Every key of one entity shares its slot (Cluster-safe scripts).

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from bridge.core.barriers import OPEN
from bridge.core.hash_fields import decode_fields
from bridge.redis.errors import driver_errors
from bridge.redis.scripts import LuaScript, run_script
from bridge.state import keys

# KEYS: ledger, key map, maps set. ARGV: field, expected value, new value ("" deletes), shard. Reply 1
# when it matched. Deleting the last field also deletes the key map (and its shard from the set): every
# barrier passed, no key sticks to a queue now (the drainer marks a queue ``open`` before it assigns keys to
# it, so an empty ledger means no new ones).
_COMPARE_AND_SET = LuaScript(
    """#!lua
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  if redis.call('HLEN', KEYS[1]) == 0 then
    redis.call('DEL', KEYS[2])
    redis.call('SREM', KEYS[3], ARGV[4])
  end
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return 1
"""
)

# KEYS: maps set, then the key maps of the shards in ARGV. ARGV: per key map its shard, how many names
# follow, the names. Drops the names; a map left empty leaves the set.
_FORGET = LuaScript(
    """#!lua
local at = 1
for i = 2, #KEYS do
  local shard, count = ARGV[at], tonumber(ARGV[at + 1])
  redis.call('HDEL', KEYS[i], unpack(ARGV, at + 2, at + 1 + count))
  if redis.call('EXISTS', KEYS[i]) == 0 then redis.call('SREM', KEYS[1], shard) end
  at = at + 2 + count
end
return 1
"""
)


@dataclass(frozen=True)
class ShardBacklog:
    """One shard's ledger, the queues its map names for some keys, and the entity's other shards with a
    key map: read together (``BacklogLedger.read``)."""

    ledger: dict[int, str]
    sticky: dict[str, int]
    others: tuple[int, ...]


class BacklogLedger:
    """Sticky backlog queues per key, and restore barriers per outbox shard."""

    def __init__(self, client: Any) -> None:
        self.client = client

    # ---- the drainer's side ----------------------------------------------------------------------
    def queues(self, entity: str, shard: int) -> dict[int, str]:
        """Backlog queue index → ``open`` / ``wait:<token>`` / ``sent:<token>`` for the shard."""
        with driver_errors():
            return _ledger(self.client.hgetall(keys.backlog_ledger(entity, shard)))

    def open(self, entity: str, shard: int, indexes: Iterable[int]) -> None:
        """The shard is about to send to these backlog queues (any barrier sent to them is void now)."""
        mapping = {str(i): OPEN for i in indexes}
        if mapping:
            with driver_errors():
                self.client.hset(keys.backlog_ledger(entity, shard), mapping=mapping)

    def set_barrier(self, entity: str, shard: int, index: int, value: str) -> None:
        """Record the barrier state of one queue (``wait:<token>`` before the send)."""
        with driver_errors():
            self.client.hset(keys.backlog_ledger(entity, shard), str(index), value)

    def confirm_barrier(self, entity: str, shard: int, index: int, token: str) -> bool:
        """The barrier ``token`` was accepted by its queue: ``wait:`` → ``sent:`` (if still current)."""
        return self._cas(entity, shard, index, f"wait:{token}", f"sent:{token}")

    def assign(self, entity: str, shard: int, mapping: Mapping[str, int]) -> None:
        """Stick keys to backlog queues (before their first send there)."""
        if mapping:
            with driver_errors():
                pipe = self.client.pipeline(transaction=True)
                pipe.hset(keys.backlog_keys(entity, shard), mapping={k: str(v) for k, v in mapping.items()})
                pipe.sadd(keys.backlog_maps(entity), str(shard))
                pipe.execute()

    def read(self, entity: str, shard: int, names: Iterable[str]) -> ShardBacklog:
        """The shard's ledger, the queues its map names for ``names``, and which other shards have a map."""
        wanted = sorted(set(names))
        with driver_errors():
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(keys.backlog_ledger(entity, shard))
            if wanted:
                pipe.hmget(keys.backlog_keys(entity, shard), wanted)
            pipe.smembers(keys.backlog_maps(entity))
            replies = pipe.execute()
        ledger = _ledger(replies[0])
        found = replies[1] if wanted else []
        sticky = {name: int(value) for name, value in zip(wanted, found, strict=False) if value is not None}
        others = sorted(int(s) for s in (_text(m) for m in replies[-1]) if s.isdigit() and int(s) != shard)
        return ShardBacklog(ledger, sticky, tuple(others))

    def elsewhere(
        self, entity: str, shards: Iterable[int], names: Iterable[str]
    ) -> tuple[dict[int, dict[str, int]], dict[int, dict[int, str]]]:
        """What the key maps of ``shards`` name for ``names``, and those shards' ledgers (one snapshot)."""
        wanted, order = sorted(set(names)), sorted(set(shards))
        if not order:
            return {}, {}
        with driver_errors():
            pipe = self.client.pipeline(transaction=True)
            for shard in order:
                pipe.hgetall(keys.backlog_ledger(entity, shard))
                if wanted:
                    pipe.hmget(keys.backlog_keys(entity, shard), wanted)
            replies = iter(pipe.execute())
        maps: dict[int, dict[str, int]] = {}
        ledgers: dict[int, dict[int, str]] = {}
        for shard in order:
            ledgers[shard] = _ledger(next(replies))
            found = next(replies) if wanted else []
            maps[shard] = {k: int(v) for k, v in zip(wanted, found, strict=False) if v is not None}
        return maps, ledgers

    def forget(self, entity: str, mapping: Mapping[int, Iterable[str]]) -> None:
        """Drop keys from other shards' key maps (they moved to the caller's shard, or are stale)."""
        args: list[str] = []
        maps: list[str] = []
        for shard, names in sorted(mapping.items()):
            dropped = sorted(set(names))
            if dropped:
                maps.append(keys.backlog_keys(entity, shard))
                args += [str(shard), str(len(dropped)), *dropped]
        if maps:
            with driver_errors():
                run_script(self.client, _FORGET, [keys.backlog_maps(entity), *maps], args)

    # ---- the syphon's side -----------------------------------------------------------------------
    def pass_barrier(self, entity: str, shard: int, index: int, token: str) -> bool:
        """The syphon reached barrier ``token`` in queue ``index``: drop the field if it names it."""
        return self._cas(entity, shard, index, f"sent:{token}", "") or self._cas(
            entity, shard, index, f"wait:{token}", ""
        )

    def _cas(self, entity: str, shard: int, index: int, expected: str, new: str) -> bool:
        with driver_errors():
            reply = run_script(
                self.client,
                _COMPARE_AND_SET,
                [
                    keys.backlog_ledger(entity, shard),
                    keys.backlog_keys(entity, shard),
                    keys.backlog_maps(entity),
                ],
                [str(index), expected, new, str(shard)],
            )
        return int(reply) == 1


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _ledger(fields: Any) -> dict[int, str]:
    data = decode_fields(fields)
    return {int(k): v for k, v in data.items() if k.isdigit()}
