"""The journal events of the bridge's own control messages: restore barriers and pings.

They are billable operations (a barrier is a send to a backlog queue, a ping's copy is a receive) but no
application message, so the ledger bills them and counts no message for them. A barrier's send is ``sent``
with path ``barrier``; a receiver's copy of a ping is ``received`` with result ``ping``.
"""

from __future__ import annotations

from bridge.core.journal import EventKind, SendPath

BARRIER_PATH: SendPath = "barrier"
"""``path`` of a ``sent`` event for a restore barrier."""
PING_RESULT = "ping"
"""``result`` of a ``received`` event for a copy of the paired mode's ping."""


def is_control(kind: str, path: str | None, result: str | None) -> bool:
    """True for the events of the bridge's control messages: billed, but no application message."""
    return (kind == EventKind.SENT and path == BARRIER_PATH) or (
        kind == EventKind.RECEIVED and result == PING_RESULT
    )
