"""Where a receiver's state lives in Redis: one scope per queue, or per subscription of a topic.

Every key carries the entity's hash tag (``bridge.redis.keys``), so on a Redis Cluster the window, the
in-flight marks and the counters of an entity share its slot and one script may touch them together. Each
subscription of a topic receives its own copy of every message, so it has a window of its own.

==============================================  ==============================================================
key                                             holds
==============================================  ==============================================================
``bridge:{E}:rx:seen``                          hash: the window's index, bucket -> its expiry and shape
``bridge:{E}:rx:seen:<bucket>:<slot>``          hash: fingerprints of handled ids (``bridge.core.seen``)
``bridge:{E}:rx:done``                          sorted set: an earlier version's window, read until it expires
``bridge:{E}:rx:inflight:<MessageId>``          string ``<owner>@<deadline>``: who hands the id out, until
``bridge:{E}:rx:clock``                         hash ``at``, ``t``: the attended clock of those deadlines
``bridge:{E}:rx:counts``                        hash ``ReceiverCounts`` (HINCRBY)
``bridge:{T}:rx:sub:<S>:...``                   the same four for subscription S of topic T
==============================================  ==============================================================
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.redis.keys import tag


@dataclass(frozen=True)
class ReceiverKeys:
    """The key names of one receiving scope (``entity``, or ``entity`` + ``subscription``)."""

    entity: str
    subscription: str | None = None

    @property
    def prefix(self) -> str:
        """``bridge:{E}:rx:`` or ``bridge:{T}:rx:sub:<S>:``."""
        base = tag(self.entity) + "rx:"
        return base if self.subscription is None else f"{base}sub:{self.subscription}:"

    @property
    def seen(self) -> str:
        """The window: the index of the record of handled ids (its slots' names start with it)."""
        return self.prefix + "seen"

    @property
    def done(self) -> str:
        """An earlier version's window (handled id -> when it is forgotten), honoured until it expires."""
        return self.prefix + "done"

    def inflight(self, message_id: str) -> str:
        """The in-flight mark of one id."""
        return f"{self.prefix}inflight:{message_id}"

    @property
    def clock(self) -> str:
        """The attended clock of the in-flight marks (``bridge.receiving.scripts``)."""
        return self.prefix + "clock"

    @property
    def counts(self) -> str:
        """The counters."""
        return self.prefix + "counts"
