"""Ending backoffs early: the news that a namespace is back, and the one shard per interval that may try
before its backoff ends (``bridge.core.backoff``, "seen back").

- ``bridge:{bridge}:namespace-back`` is a stream of the last ``KEEP`` times a namespace was seen back for
  some entity: a send it accepted after failures, a probe or a ping that got through. Every process's
  shard watcher blocks on it together with the outbox streams (``bridge.delivery.shard_pool``), so the
  news reaches every worker within a round trip, and each wakes its backing-off shards.
- ``bridge:{bridge}:scout`` (``SET NX PX``) makes one process of the deployment per interval the scout:
  it lets one of its backing-off shards try early. That try is what sees a namespace back when nothing
  else sends; it costs one failed attempt per interval while the namespaces stay down.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from bridge.core.roles import Role
from bridge.redis.errors import driver_errors
from bridge.redis.types import SyncRedis
from bridge.state import keys

KEEP = 16
"""Entries the namespace-back stream keeps (readers only need the newest id)."""


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
        entry_id = newest[0][0]
        return entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)

    def claim_scout(self, owner: str, interval: float) -> bool:
        """Whether ``owner`` is the scout for the next ``interval`` seconds (nobody else is)."""
        with driver_errors():
            return bool(self.client.set(keys.SCOUT, owner, nx=True, px=max(1, int(interval * 1000))))
