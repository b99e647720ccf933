"""The send workers' side of the outbox: consumer-group reads, acknowledgement, reclaim, dead-letter.

Layout: each outbox shard stream has the consumer group ``senders`` (created with ``ensure_groups``). A
worker reads new entries with ``XREADGROUP`` (``read``), acknowledges an entry only after a namespace
accepted it (``ack``: ``XACK`` + ``XDEL`` + counters, one script), and takes over entries that a crashed
worker left pending with ``XAUTOCLAIM`` (``reclaim``). An entry that cannot be decoded goes to quarantine,
a message Service Bus will never accept to the local dead-letter stream; both moves are atomic with the
acknowledgement, and both streams can be listed (``bridge status``, ``GET /v1/entities/{e}/quarantine``).

Quarantine and dead-letter entries keep the original fields under ``orig.<name>`` and add ``code``,
``reason``, ``field``, ``source`` (``redis-door``, ``outbox``, ``sender``), ``source_id`` and ``at``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis

from bridge.core.envelope import Envelope
from bridge.errors import CorruptEntryError
from bridge.outbox import keys
from bridge.outbox.connection import driver_errors, is_cluster
from bridge.outbox.scripts import ACK
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


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def problem_fields(
    fields: Mapping[bytes, bytes],
    *,
    code: str,
    reason: str,
    field: str | None,
    source: str,
    source_id: str,
    now: float,
) -> dict[bytes | str, bytes | str | float]:
    """Fields of a quarantine or dead-letter entry: the reason first, then the original fields."""
    out: dict[bytes | str, bytes | str | float] = {
        "code": code,
        "reason": reason,
        "field": field or "",
        "source": source,
        "source_id": source_id,
        "at": repr(now),
    }
    for name, value in fields.items():
        out[b"orig." + name] = value
    return out


class OutboxReader:
    """Consumer-group operations on one Redis (or Cluster) for any entity."""

    def __init__(self, client: Any, settings: Settings) -> None:
        # ``client``: any blocking client from ``bridge.outbox.connection.sync_client``.
        self.client = client
        self.settings = settings
        self.cluster = is_cluster(client)

    def shards(self, entity: str) -> int:
        """How many outbox shards the entity has (``outbox_shards`` of its settings)."""
        return self.settings.entity(entity).outbox_shards

    def ensure_groups(self, entity: str) -> None:
        """Create the ``senders`` group on every shard (idempotent; creates empty streams as needed)."""
        with driver_errors():
            for shard in range(self.shards(entity)):
                try:
                    self.client.xgroup_create(
                        keys.outbox(entity, shard), keys.SENDERS_GROUP, id="0", mkstream=True
                    )
                except redis.exceptions.ResponseError as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise

    def read(
        self, entity: str, consumer: str, count: int = 100, block_ms: int | None = None
    ) -> list[OutboxEntry]:
        """New entries for ``consumer`` from every shard of the entity (at most ``count`` per shard)."""
        streams = {keys.outbox(entity, shard): ">" for shard in range(self.shards(entity))}
        with driver_errors():
            if self.cluster:
                reply: list[Any] = []
                for stream in streams:
                    reply.extend(
                        self.client.xreadgroup(
                            keys.SENDERS_GROUP, consumer, {stream: ">"}, count=count, block=block_ms
                        )
                        or []
                    )
            else:
                reply = self.client.xreadgroup(
                    keys.SENDERS_GROUP, consumer, streams, count=count, block=block_ms
                )
        return [entry for stream, items in reply or [] for entry in self._entries(entity, stream, items)]

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

    def reclaim(self, entity: str, consumer: str, min_idle_ms: int, count: int = 100) -> list[OutboxEntry]:
        """Take over entries pending longer than ``min_idle_ms`` (their worker crashed or hangs)."""
        out: list[OutboxEntry] = []
        with driver_errors():
            for shard in range(self.shards(entity)):
                stream = keys.outbox(entity, shard)
                reply = self.client.xautoclaim(
                    stream, keys.SENDERS_GROUP, consumer, min_idle_ms, "0-0", count=count
                )
                out.extend(self._entries(entity, stream, reply[1]))
        return out

    def ack(self, entity: str, shard: int, entry_ids: list[str]) -> tuple[int, int]:
        """Acknowledge, delete and un-count entries; returns (messages, bytes) removed."""
        if not entry_ids:
            return 0, 0
        script_keys, args = self._ack_call(entity, shard, entry_ids)
        with driver_errors():
            try:
                reply = self.client.evalsha(ACK.sha, len(script_keys), *script_keys, *args)
            except redis.exceptions.NoScriptError:
                reply = self.client.eval(ACK.text, len(script_keys), *script_keys, *args)
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
        self, entry: OutboxEntry, *, to: str, code: str, reason: str, now: float, source: str = "outbox"
    ) -> None:
        """Move an entry to ``quarantine`` or ``deadletter`` with the reason, atomically with its ack."""
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
        with driver_errors():
            self.client.script_load(ACK.text)  # so the MULTI below cannot fail half-way on NOSCRIPT
            pipe = self.client.pipeline(transaction=True)
            pipe.xadd(problem_stream(entry.entity, to), fields)
            pipe.evalsha(ACK.sha, len(script_keys), *script_keys, *args)
            reply = pipe.execute()[1]
            self._uncount_totals(reply)

    def depth(self, entity: str) -> dict[str, int]:
        """Pending messages and bytes of the entity's outbox, and the lengths of its problem streams."""
        with driver_errors():
            pipe = self.client.pipeline(transaction=False)
            pipe.hmget(keys.stats(entity), ["messages", "bytes"])
            pipe.xlen(keys.quarantine(entity))
            pipe.xlen(keys.deadletter(entity))
            pipe.xlen(keys.ingress(entity))
            stats, quarantined, dead, ingress = pipe.execute()
        return {
            "pending_messages": int(stats[0] or 0),
            "pending_bytes": int(stats[1] or 0),
            "quarantine": int(quarantined),
            "deadletter": int(dead),
            "ingress": int(ingress),
        }

    def entities(self) -> list[str]:
        """Entities that ever had an outbox write."""
        with driver_errors():
            return sorted(_text(name) for name in self.client.smembers(keys.ENTITIES))

    # ---- one shard at a time (ordered draining: one lease holder per shard) ------------------------
    def read_shard(
        self, entity: str, shard: int, consumer: str, count: int = 100, block_ms: int | None = None
    ) -> list[OutboxEntry]:
        """New entries of one shard for ``consumer``, oldest first."""
        stream = keys.outbox(entity, shard)
        with driver_errors():
            reply = self.client.xreadgroup(keys.SENDERS_GROUP, consumer, {stream: ">"}, count=count,
                                           block=block_ms)
        return [entry for _, items in reply or [] for entry in self._entries(entity, stream, items)]

    def claim_shard(self, entity: str, shard: int, consumer: str, count: int = 1000) -> list[OutboxEntry]:
        """Every entry of the shard still pending for anyone, now ``consumer``'s, oldest first.

        Only the shard's lease holder calls this: whoever held the entries before is dead or lost its
        lease, so they are taken regardless of idle time. Entries deleted while pending are dropped from
        the group by ``XAUTOCLAIM`` itself.
        """
        stream = keys.outbox(entity, shard)
        out: list[OutboxEntry] = []
        cursor = "0-0"
        with driver_errors():
            while len(out) < count:
                reply = self.client.xautoclaim(stream, keys.SENDERS_GROUP, consumer, 0, cursor,
                                               count=min(100, count - len(out)))
                out.extend(self._entries(entity, stream, reply[1]))
                cursor = _text(reply[0])
                if cursor == "0-0":
                    break
        return out

    def reclaim_shard(self, entity: str, shard: int, consumer: str, min_idle_ms: int) -> int:
        """Move entries idle longer than ``min_idle_ms`` to ``consumer`` (a dead consumer's); how many."""
        stream = keys.outbox(entity, shard)
        with driver_errors():
            reply = self.client.xautoclaim(stream, keys.SENDERS_GROUP, consumer, min_idle_ms, "0-0",
                                           count=1000, justid=True)
        # redis-py answers JUSTID with the bare list of ids (no cursor, no deleted list).
        return len(reply)

    def shard_length(self, entity: str, shard: int) -> int:
        """Entries in the shard (acknowledged entries are deleted, so this is what is left to send)."""
        with driver_errors():
            return int(self.client.xlen(keys.outbox(entity, shard)))

    def ingress_length(self, entity: str) -> int:
        """Entries waiting in the entity's Redis-door stream."""
        with driver_errors():
            return int(self.client.xlen(keys.ingress(entity)))


def problem_stream(entity: str, which: str) -> str:
    """Key of the entity's ``quarantine`` or ``deadletter`` stream."""
    if which == "quarantine":
        return keys.quarantine(entity)
    if which == "deadletter":
        return keys.deadletter(entity)
    raise ValueError(f"no problem stream named {which!r}")


def list_problems(
    client: Any, entity: str, which: str, *, count: int = 50, after: str = "-"
) -> list[dict[str, Any]]:
    """Entries of the quarantine or dead-letter stream, oldest first, as JSON-ready dicts."""
    start = after if after == "-" else f"({after}"
    with driver_errors():
        items = client.xrange(problem_stream(entity, which), min=start, max="+", count=count)
    return problem_records(items)


def problem_records(items: list[Any]) -> list[dict[str, Any]]:
    """``XRANGE`` items of a problem stream as dicts; original fields as text when UTF-8, else base64
    under ``<name>.base64``."""
    out = []
    for entry_id, fields in items:
        record: dict[str, Any] = {"id": _text(entry_id)}
        original: dict[str, str] = {}
        for name, value in fields.items():
            text_name = _text(name)
            if text_name.startswith("orig."):
                try:
                    original[text_name[5:]] = value.decode()
                except UnicodeDecodeError:
                    original[text_name[5:] + ".base64"] = base64.b64encode(value).decode()
            else:
                record[text_name] = _text(value)
        record["original"] = original
        out.append(record)
    return out
