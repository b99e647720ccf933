"""Backlog messages the syphon set aside, by sequence number, so a failed-over entity blocks nothing else.

A backlog queue is FIFO and mixes the messages of several entities. When the head of the queue belongs to
an entity that is still failed over, the syphon must not abandon it (it would be received again and again,
each poll billed, and everything behind it would wait). It *defers* it instead: a deferred message leaves
the queue's receivable order and comes back only through ``receive_deferred`` by its sequence number. The
numbers are kept here, per backlog queue and destination entity, in a sorted set, so the syphon can take
them back in enqueue order once the entity is healthy again (``docs/servicebus-sdk.md``, "Deferral").

Rules the syphon keeps with this store (``bridge.paired.syphon``):

- The number is recorded *before* the message is deferred. A crash in between leaves a recorded number
  whose message is still active; it is received again and, since its destination has numbers set aside,
  deferred then. Recording after would risk a deferred message nobody knows about.
- While a destination has numbers here, every newer message of it is set aside too (appended), so the
  destination's messages leave the backlog in their enqueue order.
- A message whose settlement failed is recorded as well: its lock holds it invisible for a while, and the
  destination's later messages must not overtake it.

``locks`` is a short-lived marker a syphon refreshes after each receive (PX until the latest lock it holds
expires) and deletes when its run ends. A run that finds it (an earlier run was killed) waits: messages
locked by a dead run reappear at their place later, nobody recorded them, and moving their successors
first would break the order. (A settlement that fails in a run that goes on is recorded as set aside, so
its destination waits behind it without holding up the whole queue.)

Redis is not the only copy: a deferred message carries its state and its destination in the backlog queue
itself, so a record Redis lost (an ``everysec`` crash, a failover to a lagging replica, a restore) is found
again by a scan of the queue (``bridge.paired.aside_scan``) before the syphon receives anything, whenever
the Redis server is not the one the last complete scan ran against (``bridge.core.aside_pass``).

Keys (``bridge.state.keys``): ``bridge:{aside:<queue>}:destinations`` (set), ``bridge:{aside:<queue>}:d:<E>``
(sorted set, score = member = sequence number), ``bridge:{aside:<queue>}:locks`` (string, PX),
``bridge:{aside:<queue>}:scan`` (hash ``server``, ``next``, ``complete``). All of one queue share a slot; only
the syphon holding the queue's lease writes them.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis

from bridge.core.aside_pass import ScanPass
from bridge.redis.connection import is_cluster
from bridge.redis.errors import driver_errors
from bridge.state import keys


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class AsideStore:
    """The sequence numbers of set-aside backlog messages, per backlog queue and destination."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def destinations(self, queue: str) -> list[str]:
        """Destinations with messages set aside in ``queue``, sorted."""
        with driver_errors():
            return sorted(_text(m) for m in self.client.smembers(keys.aside_destinations(queue)))

    def add(self, queue: str, destination: str, numbers: Iterable[int]) -> int:
        """Record ``numbers`` as set aside for ``destination`` (before deferring them); how many of them
        were not recorded yet (the scan of ``bridge.paired.aside_scan`` counts the ones Redis had lost)."""
        mapping = {str(n): int(n) for n in numbers}
        if not mapping:
            return 0
        with driver_errors():
            pipe = self.client.pipeline(transaction=True)
            pipe.sadd(keys.aside_destinations(queue), destination)
            pipe.zadd(keys.aside(queue, destination), mapping)
            added = pipe.execute()[1]
        return int(added)

    def lowest(self, queue: str, destination: str, count: int) -> list[int]:
        """The ``count`` lowest numbers set aside for ``destination`` in ``queue``, ascending."""
        with driver_errors():
            members = self.client.zrange(keys.aside(queue, destination), 0, max(0, count - 1))
        return [int(_text(m)) for m in members]

    def remove(self, queue: str, destination: str, numbers: Iterable[int]) -> None:
        """Forget ``numbers`` (their messages left the backlog); the destination too once none is left."""
        members = [str(n) for n in numbers]
        if not members:
            return
        with driver_errors():
            key = keys.aside(queue, destination)
            pipe = self.client.pipeline(transaction=True)
            pipe.zrem(key, *members)
            pipe.zcard(key)
            left = pipe.execute()[1]
            if int(left) == 0:
                self.client.srem(keys.aside_destinations(queue), destination)

    def counts(self, queue: str) -> dict[str, int]:
        """How many messages are set aside per destination in ``queue`` (for status and provisioning)."""
        names = self.destinations(queue)
        if not names:
            return {}
        with driver_errors():
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.zcard(keys.aside(queue, name))
            sizes = pipe.execute()
        return {name: int(size) for name, size in zip(names, sizes, strict=True) if int(size)}

    # ---- locks that may outlive a run --------------------------------------------------------------------
    def note_locks(self, queue: str, seconds: float) -> None:
        """A syphon of ``queue`` holds message locks for up to ``seconds`` more."""
        with driver_errors():
            self.client.set(keys.aside_locks(queue), "1", px=max(1, int(seconds * 1000) + 1))

    def locks_pending(self, queue: str) -> float | None:
        """Seconds an earlier syphon's locks on ``queue`` may still hold, None when there are none."""
        with driver_errors():
            left = int(self.client.pttl(keys.aside_locks(queue)))
        return left / 1000 if left > 0 else None

    def clear_locks(self, queue: str) -> None:
        """The run ended with every message it received settled."""
        with driver_errors():
            self.client.delete(keys.aside_locks(queue))

    # ---- the scan for lost records -----------------------------------------------------------------------
    def server(self, queue: str) -> str | None:
        """The ``run_id`` of the Redis server holding ``queue``'s records (a restart or a failover changes
        it); None when the server does not say (``INFO`` refused, as some proxies do)."""
        with driver_errors():
            try:
                if is_cluster(self.client):
                    node = self.client.get_node_from_key(keys.aside_scan(queue))
                    info = self.client.info("server", target_nodes=node)
                else:
                    info = self.client.info("server")
            except redis.exceptions.ResponseError:
                return None
        run_id = info.get("run_id") if isinstance(info, dict) else None
        return str(run_id) if run_id else None

    def scan_pass(self, queue: str) -> ScanPass | None:
        """The scan pass Redis holds for ``queue`` (``bridge.core.aside_pass``), None when there is none."""
        with driver_errors():
            fields = {_text(k): _text(v) for k, v in self.client.hgetall(keys.aside_scan(queue)).items()}
        if "server" not in fields:
            return None
        return ScanPass(fields["server"], int(fields.get("next", "1")), fields.get("complete") == "1")

    def save_scan_pass(self, queue: str, scan: ScanPass) -> None:
        """Remember how far the scan pass of ``queue`` got (after the records its peeks found)."""
        mapping = {"server": scan.server, "next": str(scan.next), "complete": "1" if scan.complete else "0"}
        with driver_errors():
            self.client.hset(keys.aside_scan(queue), mapping=mapping)
