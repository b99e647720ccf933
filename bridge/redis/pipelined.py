"""``PipelinedRead``: one store's read as the commands it queues on a shared pipeline and the parse of their
replies; ``ReadBatch`` sends the reads of many stores in one round trip.

A read model that shows what several stores hold (the status snapshot) reads each through the store that
writes those keys, so the key names and the reply shapes stay with their owner, yet it pays one round trip
for all of them: each store hands out a ``PipelinedRead``, the reader adds them to one ``ReadBatch``.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError`` (or the subclass given to ``ReadBatch``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from bridge.errors import StateStoreUnavailableError
from bridge.redis.errors import driver_errors
from bridge.redis.types import SyncRedis

T = TypeVar("T")


@dataclass(frozen=True)
class PipelinedRead(Generic[T]):
    """``queue`` puts the read's commands on a pipeline (no I/O); ``parse`` reads their replies."""

    queue: Callable[[Any], None]
    parse: Callable[[Sequence[Any]], T]


class Reply(Generic[T]):
    """The value of one read of a ``ReadBatch``, there once the batch ran."""

    def __init__(self, read: PipelinedRead[T], start: int, end: int) -> None:
        self._read = read
        self._span = (start, end)
        self._value: tuple[T] | None = None

    def _take(self, replies: Sequence[Any]) -> None:
        self._value = (self._read.parse(replies[self._span[0] : self._span[1]]),)

    @property
    def value(self) -> T:
        """The parsed replies; ``RuntimeError`` before the batch ran."""
        if self._value is None:
            raise RuntimeError("the batch of this read has not run")
        return self._value[0]


class ReadBatch:
    """Reads of many stores on one pipeline (no transaction): ``add`` each, ``execute`` once."""

    def __init__(
        self, client: SyncRedis, unavailable: type[StateStoreUnavailableError] = StateStoreUnavailableError
    ) -> None:
        self._pipe: Any = client.pipeline(transaction=False)
        self._unavailable = unavailable
        self._replies: list[Reply[Any]] = []

    def add(self, read: PipelinedRead[T]) -> Reply[T]:
        """Queue ``read``; its value is in the answer once ``execute`` ran."""
        start = len(self._pipe)
        read.queue(self._pipe)
        reply = Reply(read, start, len(self._pipe))
        self._replies.append(reply)
        return reply

    def execute(self) -> None:
        """One round trip for every read added (none when no read queued a command)."""
        replies: list[Any] = []
        if len(self._pipe):
            with driver_errors(self._unavailable):
                replies = self._pipe.execute()
        for reply in self._replies:
            reply._take(replies)
