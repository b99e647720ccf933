"""The live ledger's last publication in Redis, where ``bridge status``, the status page and the Prometheus
collector read it without Spark.

One hash, ``bridge:{bridge}:ledger``: ``summary`` (the verdict, its reasons, the overdue total, when it
was published) and ``entity:<E>`` per entity (its counts and its oldest overdue MessageIds), each JSON.
A publication replaces the whole hash in one transaction, so a reader never mixes two publications; the
hash expires ``ttl`` seconds after the last one, so a ledger that stopped leaves no stale verdict behind
for long, and ``published_at`` tells a reader how old the one it reads is.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

import json
from typing import Any

from bridge.core.hash_fields import decode_fields
from bridge.redis.errors import driver_errors
from bridge.state import keys

SUMMARY_KEYS = ("verdict", "reasons", "overdue", "overdue_after", "events", "journal_clock", "published_at")
ENTITY_PREFIX = "entity:"


class LiveLedgerStore:
    """The live ledger's publication."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def publish(self, ledger: dict[str, Any], ttl: float) -> None:
        """Replace the publication with ``ledger`` (``bridge.core.live_ledger.verdict`` plus
        ``published_at``), expiring after ``ttl`` seconds."""
        summary = {key: ledger.get(key) for key in SUMMARY_KEYS}
        summary["unreadable"] = ledger.get("unreadable", [])[:20]
        fields = {"summary": json.dumps(summary)}
        for name, entity in ledger.get("entities", {}).items():
            fields[ENTITY_PREFIX + name] = json.dumps(entity)
        with driver_errors():
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(keys.LIVE_LEDGER)
            pipe.hset(keys.LIVE_LEDGER, mapping=fields)
            pipe.pexpire(keys.LIVE_LEDGER, max(1, int(ttl * 1000)))
            pipe.execute()

    def read(self) -> dict[str, Any] | None:
        """The last publication (None when no live ledger published within its ttl)."""
        with driver_errors():
            reply = self.client.hgetall(keys.LIVE_LEDGER)
        data = decode_fields(reply)
        if "summary" not in data:
            return None
        out: dict[str, Any] = json.loads(data["summary"])
        out["entities"] = {
            name[len(ENTITY_PREFIX) :]: json.loads(value)
            for name, value in sorted(data.items())
            if name.startswith(ENTITY_PREFIX)
        }
        return out
