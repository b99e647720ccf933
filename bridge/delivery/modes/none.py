"""Replication mode ``none``: the primary only, still durable and retried (``decide_single``)."""

from __future__ import annotations

from collections.abc import Sequence

from bridge.core.cost import Operation
from bridge.core.decisions import PRIMARY, Settlement
from bridge.core.replication import decide_single
from bridge.delivery.modes.base import SendPort, final, send_entries
from bridge.outbox.reader import OutboxEntry


class NoneSender:
    """Mode ``none``."""

    def settle(self, port: SendPort, entries: Sequence[OutboxEntry]) -> list[Settlement]:
        """One send to the primary; a failure waits in the outbox (with backoff)."""
        outcome = send_entries(port, "primary", entries, Operation.PRIMARY_SEND)
        ctx = port.retry_context()
        return [final(decide_single(o, ctx, PRIMARY)) for o in outcome.outcomes]
