"""When each namespace was last probed for an entity, and what the probe found (``bridge.delivery.probe``).

One small hash per entity and namespace role, ``bridge:{E}:probe:<role>``: ``at`` (epoch seconds), ``ok``
(``1``/``0``) and ``error`` (secret-free text, only after a failure). ``bridge status`` shows it as the
namespace's ``checked_at`` / ``check_error``, so an availability shown there is a measurement with its time.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bridge.core.hash_fields import decode_fields, opt_float
from bridge.core.outcomes import scrub_secrets
from bridge.core.roles import ROLES, Role
from bridge.redis.errors import driver_errors
from bridge.state import keys


@dataclass(frozen=True)
class ProbeRecord:
    """The last probe of one namespace for one entity."""

    at: float
    ok: bool
    error: str | None = None


class ProbeStore:
    """Last probe per entity and namespace role."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def record(self, entity: str, role: Role, record: ProbeRecord) -> None:
        """Replace the last probe of ``role`` for ``entity``."""
        fields = {"at": repr(float(record.at)), "ok": "1" if record.ok else "0"}
        if record.error:
            fields["error"] = scrub_secrets(record.error)
        key = keys.probe(entity, role)
        with driver_errors():
            pipe = self.client.pipeline(transaction=True)
            pipe.delete(key)
            pipe.hset(key, mapping=fields)
            pipe.execute()

    def last(self, entity: str) -> dict[Role, ProbeRecord | None]:
        """The last probe of each namespace for ``entity`` (None: never probed)."""
        with driver_errors():
            pipe = self.client.pipeline(transaction=False)
            for role in ROLES:
                pipe.hgetall(keys.probe(entity, role))
            replies = pipe.execute()
        out: dict[Role, ProbeRecord | None] = {}
        for role, reply in zip(ROLES, replies, strict=True):
            data = decode_fields(reply)
            at = opt_float(data, "at")
            out[role] = None if at is None else ProbeRecord(at, data.get("ok") == "1", data.get("error"))
        return out
