"""When an outbox shard may be drained again, and what its waiting entries already achieved.

After both namespaces failed, a shard's entries stay in the outbox and the core's backoff says how long to
wait. The time is stored here (``schedule``) so that every worker and the sweeper respect it, not only the
worker that failed; the number of retries in a row (``attempts``) feeds the next backoff and is reset by
``clear`` once the shard drains again. In active mode with success policy ``all``, an entry that one
namespace already accepted remembers it (``remember_delivered``) so the retry goes to the other one only.
``mark_scheduled`` is a short-lived "a drain is already queued" marker that keeps the sweeper from
enqueueing the same shard twice. One consumer per keyed shard is ``bridge.state.lease.LeaseStore``; a
drainer passes its lease's ``Fence`` to ``schedule`` and ``clear``, so one that lost its shard can neither
set nor wipe the backoff of the new holder (one Lua script checks the lease and writes).

Times here are read by other processes, on other hosts, so they are Redis's own (``TIME``), never the
caller's: a caller passes a *duration* (``back_off(..., delay)``, ``wait_after_abandoned(..., wait)``), the
script adds it to the server's clock, and readers get the seconds left, computed by a script against the
same clock (``backoff_left``, ``abandoned_waits_left``). A host whose clock runs ahead or behind therefore
neither cuts a wait short nor stretches it (docs/replication.md, "Clocks").

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from bridge.core import abandoned
from bridge.core.decisions import Target
from bridge.core.hash_fields import decode_fields
from bridge.core.roles import Role, as_role
from bridge.errors import LeaseLostError
from bridge.redis.errors import driver_errors
from bridge.redis.fence import Fence
from bridge.redis.lease import Lease
from bridge.redis.scripts import run_script
from bridge.redis.types import SyncRedis
from bridge.state import keys, scripts
from bridge.state.lease import LeaseStore

__all__ = ["Fence", "Lease", "LeaseStore", "RetryStore", "decode_targets", "encode_targets"]


def encode_targets(targets: Iterable[Target]) -> str:
    """Targets as JSON ``[[namespace, queue-or-null], ...]`` (a queue path may hold any character)."""
    # Sorted by a key of our own: ``Target``'s ordering cannot compare a None queue with a path.
    unique = sorted(set(targets), key=lambda t: (t.namespace, t.queue or ""))
    return json.dumps([[t.namespace, t.queue] for t in unique])


def decode_targets(raw: str | bytes) -> tuple[Target, ...]:
    """Inverse of ``encode_targets``."""
    return tuple(Target(as_role(namespace), queue) for namespace, queue in json.loads(raw))


class RetryStore:
    """Retry times, retry counts, delivered-to markers and drain-queued markers of outbox shards."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client

    # ---- not before -----------------------------------------------------------------------------
    def hold_off(self, entity: str, shard: int, delay: float) -> None:
        """Do not drain ``shard`` of ``entity`` for ``delay`` seconds from now on Redis's clock (replaces an
        earlier time; the retry count stays)."""
        args = [str(shard), repr(float(delay)), "0"]
        with driver_errors():
            run_script(self.client, scripts.SCHEDULE, [keys.not_before(entity), keys.attempts(entity)], args)

    def back_off(self, entity: str, shard: int, delay: float, fence: Fence | None = None) -> int:
        """``hold_off`` and count one more retry in a row, atomically; returns the new count.

        With ``fence`` (the drainer's lease): only while that lease is still held, else ``LeaseLostError``
        and nothing is written.
        """
        if fence is not None:
            args = [fence.token, str(shard), repr(float(delay))]
            with driver_errors():
                count = int(
                    run_script(self.client, scripts.FENCED_SCHEDULE, self._fenced(entity, fence), args)
                )
            if count < 0:
                raise LeaseLostError(f"shard {shard} of {entity}: lease lost, backoff not set")
            return count
        with driver_errors():
            return int(
                run_script(
                    self.client,
                    scripts.SCHEDULE,
                    [keys.not_before(entity), keys.attempts(entity)],
                    [str(shard), repr(float(delay)), "1"],
                )
            )

    @staticmethod
    def _fenced(entity: str, fence: Fence) -> list[str]:
        return [fence.key, keys.not_before(entity), keys.attempts(entity)]

    def backoff_left(self, entity: str, shard: int) -> float | None:
        """Seconds the shard still waits on Redis's clock (0 once its time passed, until ``clear``), None
        when no time is recorded."""
        with driver_errors():
            reply = run_script(self.client, scripts.TIME_LEFT, [keys.not_before(entity)], [str(shard)])
        left = _seconds_left(reply)
        return None if not left else max(0.0, next(iter(left.values())))

    def all_not_before(self, entity: str) -> dict[int, float]:
        """Every waiting shard of the entity and its time, epoch seconds on Redis's clock (for ``bridge
        status``)."""
        with driver_errors():
            data = decode_fields(self.client.hgetall(keys.not_before(entity)))
        return {int(shard): float(at) for shard, at in data.items()}

    def attempts(self, entity: str, shard: int) -> int:
        """Retries in a row of the shard's head entry (0 after ``clear``): the backoff's attempt number."""
        with driver_errors():
            raw = self.client.hget(keys.attempts(entity), str(shard))
        return 0 if raw is None else int(raw)

    def clear(self, entity: str, shard: int, fence: Fence | None = None) -> None:
        """The shard drained: it may be drained at once again and its retry count starts over.

        With ``fence``: only while that lease is still held, else ``LeaseLostError`` and nothing changes
        (a drainer that lost its shard must not wipe the new holder's backoff).
        """
        if fence is not None:
            with driver_errors():
                done = int(
                    run_script(
                        self.client,
                        scripts.FENCED_CLEAR,
                        self._fenced(entity, fence),
                        [fence.token, str(shard)],
                    )
                )
            if done < 0:
                raise LeaseLostError(f"shard {shard} of {entity}: lease lost, backoff not cleared")
            return
        with driver_errors():
            pipe = self.client.pipeline(transaction=True)
            pipe.hdel(keys.not_before(entity), str(shard))
            pipe.hdel(keys.attempts(entity), str(shard))
            pipe.execute()

    # ---- delivered-to (active mode) -------------------------------------------------------------
    def remember_delivered(self, entity: str, shard: int, entry_id: str, targets: Iterable[Target]) -> None:
        """Record every target that has accepted entry ``entry_id`` so far (replaces the earlier record)."""
        with driver_errors():
            self.client.hset(keys.delivered(entity, shard), entry_id, encode_targets(targets))

    def delivered(self, entity: str, shard: int, entry_ids: Sequence[str]) -> dict[str, tuple[Target, ...]]:
        """The recorded targets of those entries that have a record."""
        if not entry_ids:
            return {}
        with driver_errors():
            raw = self.client.hmget(keys.delivered(entity, shard), list(entry_ids))
        return {eid: decode_targets(value) for eid, value in zip(entry_ids, raw, strict=True) if value}

    def forget_delivered(self, entity: str, shard: int, entry_ids: Sequence[str]) -> None:
        """Drop the records of entries that left the outbox (acknowledged or dead-lettered)."""
        if entry_ids:
            with driver_errors():
                self.client.hdel(keys.delivered(entity, shard), *entry_ids)

    # ---- waits after abandoned sends (bridge.core.abandoned) ----------------------------------------
    def wait_after_abandoned(self, entity: str, shard: int, role: Role, path: str, *, wait: float) -> None:
        """Record that shard ``shard`` sends nothing to ``path`` in ``role`` for ``wait`` s from now, on
        Redis's clock.

        Not fenced with the lease: a stale holder's wait only makes the next holder wait too. The key
        expires a second after the latest wait written (every wait is as long as the others), so it never
        piles up.
        """
        field = abandoned.encode_field(shard, role, path)
        args = [field, repr(float(wait)), str(int(wait * 1000) + 1000)]
        with driver_errors():
            run_script(self.client, scripts.ABANDON, [keys.abandoned(entity)], args)

    def end_wait_after_abandoned(self, entity: str, shard: int, role: Role, path: str) -> None:
        """The abandoned messages were accepted there again: shard ``shard`` may send to ``path`` at once."""
        with driver_errors():
            self.client.hdel(keys.abandoned(entity), abandoned.encode_field(shard, role, path))

    def abandoned_waits_left(self, entity: str, shard: int) -> dict[tuple[Role, str], float]:
        """The waits of shard ``shard`` still running: ``(role, path)`` -> seconds left on Redis's clock."""
        with driver_errors():
            reply = run_script(self.client, scripts.TIME_LEFT, [keys.abandoned(entity)], [])
        waits: dict[tuple[Role, str], float] = {}
        for field, left in _seconds_left(reply).items():
            parsed = abandoned.decode_field(field)
            if parsed is not None and parsed[0] == shard and left > 0:
                waits[(parsed[1], parsed[2])] = left
        return waits

    # ---- drain queued ---------------------------------------------------------------------------
    def mark_scheduled(self, entity: str, shard: int, ttl_ms: int) -> bool:
        """Note that a drain of the shard (an ingest for shard -1) is queued; False when one already is.

        The marker expires after ``ttl_ms`` so a lost task message never blocks the shard for long.
        """
        with driver_errors():
            return bool(self.client.set(keys.scheduled(entity, shard), "1", nx=True, px=int(ttl_ms)))

    def unmark_scheduled(self, entity: str, shard: int) -> None:
        """The queued drain started: the sweeper may queue the next one."""
        with driver_errors():
            self.client.delete(keys.scheduled(entity, shard))


def _seconds_left(reply: Sequence[bytes | str]) -> dict[str, float]:
    """``scripts.TIME_LEFT``'s reply as ``{field: seconds left}``."""
    return {_text(reply[i]): float(_text(reply[i + 1])) for i in range(0, len(reply) - 1, 2)}


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
