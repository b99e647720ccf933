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

Only the shard's drainer (one lease holder) writes the key map and sets fields; the syphon only deletes a
field whose token matches. Every key of one entity shares its slot (Cluster-safe scripts).

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bridge.core.barriers import OPEN
from bridge.core.hash_fields import decode_fields
from bridge.redis.errors import driver_errors
from bridge.redis.scripts import LuaScript, run_script
from bridge.state import keys

# KEYS: ledger, key map. ARGV: field, expected value, new value ("" deletes). Reply 1 when it matched.
# Deleting the last field also deletes the key map: every barrier passed, no key sticks to a queue now
# (the drainer marks a queue ``open`` before it assigns keys to it, so an empty ledger means no new ones).
_COMPARE_AND_SET = LuaScript(
    """#!lua
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return 0 end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
  if redis.call('HLEN', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return 1
"""
)


class BacklogLedger:
    """Sticky backlog queues per key, and restore barriers per outbox shard."""

    def __init__(self, client: Any) -> None:
        self.client = client

    # ---- the drainer's side ----------------------------------------------------------------------
    def queues(self, entity: str, shard: int) -> dict[int, str]:
        """Backlog queue index → ``open`` / ``wait:<token>`` / ``sent:<token>`` for the shard."""
        with driver_errors():
            data = decode_fields(self.client.hgetall(keys.backlog_ledger(entity, shard)))
        return {int(k): v for k, v in data.items() if k.isdigit()}

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

    def keys_of(self, entity: str, shard: int, names: Iterable[str]) -> dict[str, int]:
        """The backlog queue each of ``names`` sticks to (only those that have one)."""
        wanted = sorted(set(names))
        if not wanted:
            return {}
        with driver_errors():
            found = self.client.hmget(keys.backlog_keys(entity, shard), wanted)
        return {name: int(value) for name, value in zip(wanted, found, strict=True) if value is not None}

    def assign(self, entity: str, shard: int, mapping: Mapping[str, int]) -> None:
        """Stick keys to backlog queues (before their first send there)."""
        if mapping:
            with driver_errors():
                self.client.hset(
                    keys.backlog_keys(entity, shard), mapping={k: str(v) for k, v in mapping.items()}
                )

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
                [keys.backlog_ledger(entity, shard), keys.backlog_keys(entity, shard)],
                [str(index), expected, new],
            )
        return int(reply) == 1
