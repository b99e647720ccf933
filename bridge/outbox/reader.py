"""The send workers' side of the outbox: consumer-group reads, acknowledgement, reclaim, dead-letter.

Layout: each outbox shard stream has the consumer group ``senders`` (created with ``ensure_groups``). A
shard's lease holder reads new entries with ``XREADGROUP`` (``read_fenced``), acknowledges an entry only
after a namespace accepted it (``ack``: ``XACK`` + ``XDEL`` + counters, one script), and takes over entries
that a crashed worker left pending with ``XAUTOCLAIM`` (``claim_fenced``). An entry that cannot be decoded
goes to quarantine, a message Service Bus will never accept to the local dead-letter stream (``move``);
both moves are atomic with the acknowledgement (one script, ``scripts.MOVE``). What a problem entry holds
and how the streams are listed: ``bridge.outbox.problems``.

Fencing: the drainer passes its lease's ``Fence`` (``bridge.state.lease``) and every script checks it in
the same step as it reads, claims, acknowledges or moves, so a drainer whose lease passed to another can
change nothing (``LeaseLostError``). Waiting is a plain ``XREAD BLOCK`` after the group's last-delivered id
(``wait_for_new`` for one shard, ``wait_for_any`` for all the idle shards of a process at once): it returns
within a millisecond of a write and consumes nothing, so it needs no fence.
Consumers are named after the drainer's process (stable, one per process) and deleted once they have
nothing pending (``claim_fenced(prune=True)`` on takeover, ``retire_consumer`` on hand-over), so the group
keeps about one consumer per shard however many drains ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from bridge.core.envelope import Envelope
from bridge.core.layout import Layout
from bridge.errors import CorruptEntryError, LeaseLostError, OutboxUnavailableError, ProblemStreamFullError
from bridge.outbox import keys
from bridge.outbox.layout import LayoutStore
from bridge.outbox.problems import problem_fields, problem_stream
from bridge.outbox.scripts import (
    ACK,
    FENCED_ACK,
    FENCED_ACK_SIZED,
    FENCED_CLAIM,
    FENCED_MOVE,
    FENCED_READ,
    MOVE,
    RETIRE_CONSUMER,
)
from bridge.outbox.view import depth_record, queue_depth
from bridge.redis.connection import is_cluster
from bridge.redis.errors import driver_errors
from bridge.redis.fence import Fence
from bridge.redis.scripts import run_script
from bridge.redis.types import SyncRedis
from bridge.settings import Settings


@dataclass(frozen=True)
class OutboxEntry:
    """One entry read from an outbox shard: its envelope, or why it could not be decoded."""

    entity: str
    shard: int
    entry_id: str
    fields: dict[bytes, bytes]
    envelope: Envelope | None
    error: CorruptEntryError | None


@dataclass(frozen=True)
class ShardRead:
    """What a fenced read found: new entries, or the id after which to wait for the next one."""

    entries: list[OutboxEntry]
    last_delivered: str | None
    hashes: tuple[dict[bytes, bytes], ...] = ()
    """The hashes ``read_fenced`` was asked for, read in the same script just after the entries (only
    when there were entries)."""
    per_entry: dict[str, bytes] | None = None
    """With ``read_fenced(per_entry=...)``: that hash's value for each entry read that has one (entry id
    -> value), read in the same script; None when it was not asked for or nothing was read."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _flat_items(items: list[Any]) -> list[tuple[Any, dict[bytes, bytes] | None]]:
    # Entries as a script returns them: [id, [field, value, ...]] (no dict parsing as for XREADGROUP).
    return [
        (entry_id, None if flat is None else dict(zip(flat[::2], flat[1::2], strict=True)))
        for entry_id, flat in items
    ]


def entry_size(fields: Mapping[bytes, bytes]) -> int:
    """An entry's size as the writer counted it: the lengths of its field names and values."""
    return sum(len(name) + len(value) for name, value in fields.items())


def _check_fence(reply: Any, entity: str, shard: int) -> None:
    # The fenced scripts answer -1 first when the lease is not held with the token: nothing happened.
    if isinstance(reply, list) and reply and reply[0] == -1:
        raise LeaseLostError(f"shard {shard} of {entity}: the lease passed to another drainer")


class OutboxReader:
    """Consumer-group operations on one Redis (or Cluster) for any entity."""

    def __init__(self, client: SyncRedis, settings: Settings) -> None:
        # ``client``: any blocking client from ``bridge.redis.connection.sync_client``.
        self.client = client
        self.settings = settings
        self.cluster = is_cluster(client)

    def shards(self, entity: str) -> int:
        """How many shard streams to read: the layout recorded in Redis (both layouts' while the count
        changes, ``bridge.core.layout``), else ``outbox_shards`` of the settings."""
        layout = LayoutStore(self.client).get(entity)
        return layout.read_count if layout is not None else self.settings.entity(entity).outbox_shards

    def shard_counts(self, entities: list[str]) -> dict[str, int]:
        """``shards`` of many entities in one pipelined round trip (a Cluster client splits it per node)."""
        if not entities:
            return {}
        with driver_errors(OutboxUnavailableError):
            pipe = self.client.pipeline(transaction=False)
            for entity in entities:
                pipe.hgetall(keys.layout(entity))
            replies = pipe.execute()
        counts = {}
        for entity, fields in zip(entities, replies, strict=True):
            layout = Layout.from_fields(fields)
            default = self.settings.entity(entity).outbox_shards
            counts[entity] = layout.read_count if layout is not None else default
        return counts

    def ensure_groups(self, entity: str) -> None:
        """Create the ``senders`` group on every shard (idempotent; creates empty streams as needed)."""
        with driver_errors(OutboxUnavailableError):
            for shard in range(self.shards(entity)):
                try:
                    self.client.xgroup_create(
                        keys.outbox(entity, shard), keys.SENDERS_GROUP, id="0", mkstream=True
                    )
                except redis.exceptions.ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise

    def _entries(self, entity: str, stream: Any, items: list[Any]) -> list[OutboxEntry]:
        shard = int(_text(stream).rsplit(":", 1)[1])
        out = []
        for entry_id, fields in items:
            if fields is None:  # deleted while pending
                continue
            try:
                envelope: Envelope | None = Envelope.decode(fields)
                error = None
            except CorruptEntryError as exc:
                envelope, error = None, exc
            out.append(OutboxEntry(entity, shard, _text(entry_id), fields, envelope, error))
        return out

    def ack(
        self,
        entity: str,
        shard: int,
        entry_ids: list[str],
        fence: Fence | None = None,
        *,
        sizes: Sequence[int] | None = None,
    ) -> tuple[int, int]:
        """Acknowledge, delete and un-count entries; returns (messages, bytes) removed.

        With ``fence`` (the drainer's lease): only while that lease is held, else ``LeaseLostError`` and
        nothing is acknowledged. With ``sizes`` (each entry's ``entry_size``, which a caller that read the
        entries knows) and a fence, Redis does not read the entries back to count their bytes.
        """
        if not entry_ids:
            return 0, 0
        if sizes is not None and fence is not None:
            script_keys, args = self._ack_call(entity, shard, [])
            args += [item for pair in zip(entry_ids, map(str, sizes), strict=True) for item in pair]
            script = FENCED_ACK_SIZED
        else:
            script_keys, args = self._ack_call(entity, shard, entry_ids)
            script = ACK if fence is None else FENCED_ACK
        if fence is not None:
            script_keys.append(fence.key)
            args.insert(2, fence.token)
        with driver_errors(OutboxUnavailableError):
            reply = run_script(self.client, script, script_keys, args)
        _check_fence(reply, entity, shard)
        with driver_errors(OutboxUnavailableError):
            return self._uncount_totals(reply)

    def _ack_call(self, entity: str, shard: int, entry_ids: list[str]) -> tuple[list[str], list[str]]:
        totals = keys.stats(entity) if self.cluster else keys.TOTALS
        script_keys = [keys.stats(entity), keys.outbox(entity, shard), totals]
        return script_keys, [keys.SENDERS_GROUP, "0" if self.cluster else "1", *entry_ids]

    def _uncount_totals(self, reply: Any) -> tuple[int, int]:
        # On a Cluster the totals live in another slot, outside the script: subtract them here.
        removed = int(reply[0]), int(reply[1])
        if self.cluster and removed[0]:
            self.client.hincrby(keys.TOTALS, "messages", -removed[0])
            self.client.hincrby(keys.TOTALS, "bytes", -removed[1])
        return removed

    def move(
        self,
        entry: OutboxEntry,
        *,
        to: str,
        code: str,
        reason: str,
        now: float,
        source: str = "outbox",
        fence: Fence | None = None,
    ) -> None:
        """Move an entry to ``quarantine`` or ``deadletter`` with the reason, atomically with its ack
        (with ``fence``: only while that lease is held, else ``LeaseLostError`` and nothing moves).

        ``ProblemStreamFullError`` and nothing moves (the entry stays pending) when that stream already
        holds ``entities.<name>.max_problem_entries`` entries.
        """
        fields = problem_fields(
            entry.fields,
            code=code,
            reason=reason,
            field=None,
            source=source,
            source_id=f"{entry.shard} {entry.entry_id}",
            now=now,
        )
        script_keys, args = self._ack_call(entry.entity, entry.shard, [entry.entry_id])
        script_keys.append(problem_stream(entry.entity, to))
        problem = [item for pair in fields.items() for item in pair]
        script = MOVE
        if fence is not None:
            script = FENCED_MOVE
            script_keys.append(fence.key)
            args.insert(2, fence.token)
        bound = self.settings.entity(entry.entity).max_problem_entries
        with driver_errors(OutboxUnavailableError):
            reply = run_script(self.client, script, script_keys, [*args, str(bound), *problem])
        _check_fence(reply, entry.entity, entry.shard)
        if reply[0] == -2:
            raise ProblemStreamFullError(entry.entity, to, int(reply[1]), bound)
        with driver_errors(OutboxUnavailableError):
            self._uncount_totals(reply)

    def problem_room(self, entity: str, which: str) -> int:
        """How many more entries the entity's ``quarantine`` or ``deadletter`` stream takes (its bound,
        ``entities.<name>.max_problem_entries``, less its length; 0 when full)."""
        bound = self.settings.entity(entity).max_problem_entries
        with driver_errors(OutboxUnavailableError):
            held = int(self.client.xlen(problem_stream(entity, which)))
        return max(0, bound - held)

    def depth(self, entity: str) -> dict[str, int]:
        """Pending messages and bytes of the entity's outbox, and the lengths of its problem streams."""
        with driver_errors(OutboxUnavailableError):
            pipe = self.client.pipeline(transaction=False)
            queue_depth(pipe, entity)
            return depth_record(pipe.execute())

    def accepted_total(self, entity: str) -> int | None:
        """Messages ever written to the entity's outbox (``entries-added`` of its shard streams, Redis 7.0
        and later; None on an older server). A shard stream that does not exist yet adds nothing."""
        with driver_errors(OutboxUnavailableError):
            pipe = self.client.pipeline(transaction=False)
            for shard in range(self.shards(entity)):
                pipe.xinfo_stream(keys.outbox(entity, shard))
            replies = pipe.execute(raise_on_error=False)
        total = 0
        for reply in replies:
            if isinstance(reply, dict):
                added = reply.get("entries-added", reply.get(b"entries-added"))
                if added is None:
                    return None
                total += int(added)
        return total

    def entities(self) -> list[str]:
        """Entities listed in the entity set: written to, and not yet empty and idle long enough to be
        retired (``bridge.outbox.entities``)."""
        with driver_errors(OutboxUnavailableError):
            return sorted(_text(name) for name in self.client.smembers(keys.ENTITIES))

    # ---- one shard at a time (ordered draining: one lease holder per shard) ------------------------
    def read_fenced(
        self,
        entity: str,
        shard: int,
        consumer: str,
        fence: Fence,
        count: int,
        *,
        hashes: Sequence[str] = (),
        per_entry: str | None = None,
    ) -> ShardRead:
        """New entries of one shard for the lease holder (``LeaseLostError`` when ``fence`` is not held).

        Never blocks: when there is nothing new, ``ShardRead.last_delivered`` says after which id to
        ``wait_for_new``. ``hashes``: keys of hashes of the same entity (its hash tag, so one slot on a
        Cluster) that the same script reads just after the entries, when there are some
        (``ShardRead.hashes``): what a batch needs besides its entries, without another round trip.
        ``per_entry``: the key of a hash of the same entity keyed by entry id, whose values for the entries
        read the script returns too (``ShardRead.per_entry``).
        """
        stream = keys.outbox(entity, shard)
        args: list[str | int] = [fence.token, keys.SENDERS_GROUP, consumer, count, int(per_entry is not None)]
        extra = [per_entry] if per_entry is not None else []
        with driver_errors(OutboxUnavailableError):
            reply = run_script(self.client, FENCED_READ, [stream, fence.key, *hashes, *extra], args)
        _check_fence(reply, entity, shard)
        if int(reply[0]) == 0:
            return ShardRead([], _text(reply[1]))
        read = [dict(zip(flat[::2], flat[1::2], strict=True)) for flat in reply[2]] if hashes else []
        found: dict[str, bytes] | None = None
        if per_entry is not None:
            found = {_text(entry[0]): value for entry, value in zip(reply[1], reply[3], strict=True) if value}
        return ShardRead(self._entries(entity, stream, _flat_items(reply[1])), None, tuple(read), found)

    def wait_for_new(self, entity: str, shard: int, after: str, block_ms: int) -> bool:
        """Block up to ``block_ms`` until the shard has an entry newer than ``after``; True when it has.

        A plain ``XREAD``: it consumes nothing and needs no lease (the fenced read that follows does).
        ``block_ms`` must stay below the client's socket timeout.
        """
        stream = keys.outbox(entity, shard)
        with driver_errors(OutboxUnavailableError):
            reply = self.client.xread({stream: after}, count=1, block=block_ms)
        return bool(reply)

    def wait_for_any(
        self, after: Mapping[tuple[str, int], str], block_ms: int, wakes: Mapping[str, str] | None = None
    ) -> tuple[list[tuple[str, int]], dict[str, str]]:
        """Which of many shards have an entry newer than the id given for each: one ``XREAD BLOCK`` over
        all their streams and the ``wakes`` streams (``{key: after id}``), whose new entries end the wait
        early. Returns the shards with new entries and, per wake stream that had one, the last id read.

        On a Cluster the streams live in many slots, which one ``XREAD`` cannot span: each is looked at
        without blocking (one pipeline, split per node by the client) and the caller waits in between.
        """
        streams = {keys.outbox(entity, shard): (entity, shard) for entity, shard in after}
        ids: dict[Any, Any] = {keys.outbox(entity, shard): since for (entity, shard), since in after.items()}
        ids.update(wakes or {})
        replies: list[Any] = []
        if not ids:
            return [], {}
        with driver_errors(OutboxUnavailableError):
            if self.cluster:
                pipe = self.client.pipeline(transaction=False)
                for stream, since in ids.items():
                    pipe.xread({stream: since}, count=1)
                replies = [item for reply in pipe.execute() if reply for item in reply]
            else:
                reply: Any = self.client.xread(ids, count=1, block=block_ms)
                replies = list(reply.items()) if isinstance(reply, dict) else list(reply or [])
        ready: list[tuple[str, int]] = []
        woken: dict[str, str] = {}
        for stream, items in replies:
            name = _text(stream)
            if name in streams:
                ready.append(streams[name])
            elif items:
                woken[name] = _text(items[-1][0])
        return ready, woken

    def claim_fenced(
        self,
        entity: str,
        shard: int,
        consumer: str,
        fence: Fence,
        *,
        count: int = 1000,
        prune: bool = False,
        start: str = "0-0",
    ) -> list[OutboxEntry]:
        """Every entry still pending in the shard's group from entry id ``start`` on (inclusive; ``0-0``:
        all), now the holder's, oldest first (at most ``count``); with ``prune`` the other consumers with
        nothing pending are deleted from the group. ``LeaseLostError`` when ``fence`` is not held."""
        stream = keys.outbox(entity, shard)
        args: list[str | int] = [
            fence.token,
            keys.SENDERS_GROUP,
            consumer,
            count,
            "1" if prune else "0",
            start,
        ]
        with driver_errors(OutboxUnavailableError):
            reply = run_script(self.client, FENCED_CLAIM, [stream, fence.key], args)
        _check_fence(reply, entity, shard)
        return self._entries(entity, stream, _flat_items(reply[1]))

    def retire_consumer(self, entity: str, shard: int, consumer: str) -> bool:
        """Delete ``consumer`` from the shard's group if it has nothing pending; True when deleted."""
        stream = keys.outbox(entity, shard)
        with driver_errors(OutboxUnavailableError):
            reply = run_script(self.client, RETIRE_CONSUMER, [stream], [keys.SENDERS_GROUP, consumer])
        return int(reply) == 1

    def consumers(self, entity: str, shard: int) -> dict[str, int]:
        """The consumers of the shard's group and how many entries each has pending."""
        with driver_errors(OutboxUnavailableError):
            infos = self.client.xinfo_consumers(keys.outbox(entity, shard), keys.SENDERS_GROUP)
        return {_text(info["name"]): int(info["pending"]) for info in infos}

    def shard_length(self, entity: str, shard: int) -> int:
        """Entries in the shard (acknowledged entries are deleted, so this is what is left to send)."""
        with driver_errors(OutboxUnavailableError):
            return int(self.client.xlen(keys.outbox(entity, shard)))

    def ingress_length(self, entity: str) -> int:
        """Entries waiting in the entity's Redis-door stream."""
        with driver_errors(OutboxUnavailableError):
            return int(self.client.xlen(keys.ingress(entity)))
