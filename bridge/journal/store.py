"""The journal's Redis adapter: append events (bounded, batched), and the roll's reads and trims.

Connection: any client from ``bridge.redis.connection`` (``sync_client`` for ``JournalStore``,
``async_client`` for ``AsyncJournalStore``); a single server, Sentinel or Cluster. Options come from
``Settings.journal`` (``enabled``, ``max_length``). Driver errors leave as ``StateStoreUnavailableError``.

Writing: ``append`` runs one ``APPEND`` script per owner and batch; ``queue`` adds the same call to a
pipeline or ``MULTI`` the caller is about to execute, so an event is written in the same step as the state
change it records (the owner's journal carries the owner's hash tag, so this works on a Cluster too, as
``EVAL``: a cluster pipeline refuses ``EVALSHA``). Every owner is added once per process to
``keys.REGISTRY`` so the roll finds it.

Reading (the roll): ``read`` returns the oldest events, ``trim_through`` removes them once they are in a
file, together with the overflow counts the roll wrote along with them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from bridge.core.journal import EventKind, JournalEvent, encode_batch, next_stream_id, split_stream_id
from bridge.core.journal_files import UNDECODABLE
from bridge.journal import keys
from bridge.journal.scripts import APPEND, append_args
from bridge.redis.errors import driver_errors
from bridge.redis.scripts import run_script, run_script_async
from bridge.redis.types import AsyncRedis, SyncRedis
from bridge.settings import JournalSettings

MAX_SEQUENCE = 2**63 - 1
"""A sequence number beyond any real one (stream sequences are counters within one millisecond)."""


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class _Registry:
    """Owners this process already added to ``keys.REGISTRY`` (one ``SADD`` per owner per process)."""

    def __init__(self) -> None:
        self.known: set[str] = set()
        self.lock = threading.Lock()

    def missing(self, owner: str) -> bool:
        with self.lock:
            return owner not in self.known

    def add(self, owner: str) -> None:
        with self.lock:
            self.known.add(owner)


class JournalStore:
    """Blocking journal operations."""

    def __init__(self, client: SyncRedis, settings: JournalSettings) -> None:
        self.client = client
        self.enabled = settings.enabled
        self.max_length = settings.max_length
        self._registry = _Registry()

    # ---- writing ---------------------------------------------------------------------------------
    def append(self, owner: str, events: Sequence[JournalEvent]) -> int:
        """Append ``events`` to ``owner``'s journal in one step; how many were written (the rest overflowed).

        Nothing is done when the journal is disabled.
        """
        return self._append(owner, events)

    def append_groups(self, owner: str, groups: Sequence[tuple[JournalEvent, Sequence[str]]]) -> int:
        """Append one batch entry per group: the template event once per MessageId (``encode_batch``)."""
        return self._append(owner, [encode_batch(template, ids) for template, ids in groups if ids])

    def _append(self, owner: str, entries: Sequence[JournalEvent | Sequence[str]]) -> int:
        if not self.enabled or not entries:
            return 0
        with driver_errors():
            self._register(owner)
            reply = run_script(
                self.client,
                APPEND,
                [keys.journal(owner), keys.overflow(owner)],
                append_args(self.max_length, entries),
            )
        return int(reply[0])

    def _register(self, owner: str) -> None:
        if self._registry.missing(owner):
            self.client.sadd(keys.REGISTRY, owner)
            self._registry.add(owner)

    # ---- the roll's side -------------------------------------------------------------------------
    def owners(self, also: Iterable[str] = ()) -> list[str]:
        """Every journal owner known to the registry, plus ``also`` (e.g. the outbox's entities)."""
        with driver_errors():
            found = {_text(name) for name in self.client.smembers(keys.REGISTRY)}
        return sorted(found | set(also))

    def read(self, owner: str, count: int) -> list[tuple[str, JournalEvent]]:
        """The events of the ``count`` oldest entries of ``owner``'s journal as ``(stream id, event)``, oldest
        first (a batch entry gives one event per MessageId, all with its stream id)."""
        with driver_errors():
            reply: Any = self.client.xrange(keys.journal(owner), "-", "+", count=count)
        out: list[tuple[str, JournalEvent]] = []
        for raw_id, data in reply:
            try:
                events = JournalEvent.decode_entry(data)
            except ValueError:
                events = [JournalEvent(UNDECODABLE, 0.0, extra={_text(k): _text(v) for k, v in data.items()})]
            out.extend((_text(raw_id), event) for event in events)
        return out

    def read_raw(self, owner: str, count: int) -> list[tuple[str, dict[bytes, bytes]]]:
        """The ``count`` oldest entries of ``owner``'s journal as they are stored (the roll decodes them
        column by column: ``bridge.core.journal_files.columns_from_entries``)."""
        with driver_errors():
            reply: Any = self.client.xrange(keys.journal(owner), "-", "+", count=count)
        return [(_text(raw_id), data) for raw_id, data in reply]

    def overflow(self, owner: str) -> dict[str, int]:
        """Events per kind that found ``owner``'s journal full and are not in it (since the last roll)."""
        with driver_errors():
            data = self.client.hgetall(keys.overflow(owner))
        counts = {_text(k): int(v) for k, v in data.items()}
        return {kind: n for kind, n in counts.items() if n > 0}

    def trim_through(self, owner: str, last_id: str | None, overflow_taken: Mapping[str, int]) -> None:
        """Remove the events up to ``last_id`` and subtract the overflow counts the roll wrote, atomically."""
        with driver_errors():
            pipe = self.client.pipeline(transaction=True)
            if last_id is not None:
                pipe.xtrim(keys.journal(owner), minid=next_stream_id(last_id), approximate=False)
            for kind, count in overflow_taken.items():
                pipe.hincrby(keys.overflow(owner), kind, -count)
            pipe.execute()

    def last_id(self, owner: str) -> str | None:
        """The newest event's stream id, None for an empty journal."""
        with driver_errors():
            reply: Any = self.client.xrevrange(keys.journal(owner), "+", "-", count=1)
        return _text(reply[0][0]) if reply else None

    def position(self, owner: str) -> tuple[int, int]:
        """A stream id at or after every event ``owner``'s journal ever held, and before any it will get.

        Redis keeps a stream's last generated id through trims, so an emptied journal still answers;
        a journal that does not exist gets the server's clock (new ids are never earlier than that).
        """
        key = keys.journal(owner)
        with driver_errors():
            if self.client.exists(key):
                info: Any = self.client.xinfo_stream(key)
                last = info.get("last-generated-id", info.get(b"last-generated-id"))
                return split_stream_id(_text(last))
            seconds, micros = self.client.time()
        return int(seconds) * 1000 + int(micros) // 1000 - 1, MAX_SEQUENCE

    def length(self, owner: str) -> int:
        """Events in ``owner``'s journal now."""
        with driver_errors():
            return int(self.client.xlen(keys.journal(owner)))


class AsyncJournalStore:
    """The asyncio counterpart of ``JournalStore``'s writing side."""

    def __init__(self, client: AsyncRedis, settings: JournalSettings) -> None:
        self.client = client
        self.enabled = settings.enabled
        self.max_length = settings.max_length
        self._registry = _Registry()

    async def append(self, owner: str, events: Sequence[JournalEvent]) -> int:
        """Append ``events`` to ``owner``'s journal in one step; how many were written."""
        if not self.enabled or not events:
            return 0
        with driver_errors():
            if self._registry.missing(owner):
                await self.client.sadd(keys.REGISTRY, owner)
                self._registry.add(owner)
            reply = await run_script_async(
                self.client,
                APPEND,
                [keys.journal(owner), keys.overflow(owner)],
                append_args(self.max_length, events),
            )
        return int(reply[0])


__all__ = ["UNDECODABLE", "AsyncJournalStore", "EventKind", "JournalStore"]
