"""Ending backoffs early: the news that a namespace is back, and the one shard per interval that may try
before its backoff ends (``bridge.core.backoff``, "seen back").

- ``bridge:{bridge}:namespace-back`` is a stream of the last ``KEEP`` times a namespace was seen back for
  some entity: a send it accepted after failures, a probe or a ping that got through. Every process's
  shard watcher blocks on it together with the outbox streams (``bridge.delivery.shard_pool``), so the
  news reaches every worker within a round trip, and each wakes its shards backing off for the namespace
  an entry names and the held keys that wait for that namespace and entity (``bridge.core.seen_back``).
- ``bridge:{bridge}:scout`` (``SET NX PX``) makes one process of the deployment per interval the scout:
  it lets one of its backing-off shards try early. That try is what sees a namespace back when nothing
  else sends; it costs one failed attempt per interval while the namespaces stay down.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from typing import Any

from bridge.core.roles import Role, as_role
from bridge.core.seen_back import SeenBack
from bridge.redis.errors import driver_errors
from bridge.redis.types import SyncRedis
from bridge.state import keys

KEEP = 256
"""Entries the namespace-back stream keeps: a reader that falls further behind than this cannot tell what
it missed, and takes its news as ``everything`` (``news_after``)."""


class ResumeSignals:
    """The namespace-back stream and the scout claim."""

    key = keys.NAMESPACE_BACK

    def __init__(self, client: SyncRedis) -> None:
        self.client = client

    def seen_back(self, role: Role, entity: str, why: str) -> None:
        """Announce that namespace ``role`` took ``entity``'s messages again after it was unavailable."""
        fields = {"role": role, "entity": entity, "why": why}
        with driver_errors():
            self.client.xadd(self.key, fields, maxlen=KEEP, approximate=False)  # type: ignore[arg-type]

    def last_id(self) -> str:
        """The newest entry's id (``0-0`` when there is none): a reader waits for entries after it."""
        with driver_errors():
            newest = self.client.xrevrange(self.key, count=1)
        if not newest:
            return "0-0"
        return _text(newest[0][0])

    def news_after(self, after: str) -> tuple[SeenBack, str]:
        """What was seen back after entry ``after`` (``0-0``: the stream's start), and the newest id read
        (``after`` when there is nothing newer). When entries after ``after`` may have been trimmed unread
        (``after`` itself is gone, or the stream is full from its start), the news is ``everything``."""
        with driver_errors():
            entries = list(self.client.xrange(self.key, min=after, count=KEEP + 1) or [])
        ids = [_text(entry_id) for entry_id, _ in entries]
        if ids and ids[0] == after:
            entries, ids = entries[1:], ids[1:]
            complete = True
        else:
            complete = after == "0-0" and len(ids) < KEEP
        pairs: list[tuple[Role, str]] = []
        for _, fields in entries:
            try:
                named = {_text(k): _text(v) for k, v in (fields or {}).items()}
                pairs.append((as_role(named["role"]), named["entity"]))
            except (KeyError, ValueError):  # not ours to read: whatever it meant may be back
                complete = False
        return SeenBack.of(pairs, everything=not complete), ids[-1] if ids else after

    def claim_scout(self, owner: str, interval: float) -> bool:
        """Whether ``owner`` is the scout for the next ``interval`` seconds (nobody else is)."""
        with driver_errors():
            return bool(self.client.set(keys.SCOUT, owner, nx=True, px=max(1, int(interval * 1000))))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
