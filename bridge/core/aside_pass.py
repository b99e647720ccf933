"""Which part of a backlog queue the syphon's scan for lost set-aside records still has to peek: pure.

A set-aside (deferred) backlog message is reached again only by its sequence number, kept in Redis
(``bridge.state.aside``). Redis loses records only when the server that holds them is replaced: a restart
(an ``everysec`` crash, a restore from a backup) or a failover to a replica that lagged. Either gives the
server a new ``run_id``. So a *pass* over the queue (peeking every message once, recording every deferred
one Redis does not name) is needed only when the server differs from the one the last complete pass ran
against, or when no record of a pass survived (a flush, a fresh Redis). A pass resumes where the previous
run left it (``next``), so its peeks are bounded by the runs' budgets and none is repeated; until it is
complete the syphon receives nothing from the queue (docs/paired.md, "Set-aside records lost").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

FIRST_SEQUENCE = 1
"""Where a pass starts. A peek from sequence number 0 is not "from the start" to the SDK: it starts after
the last message the receiver received or peeked (docs/servicebus-sdk.md, "Peek")."""

UNKNOWN_SERVER = "?"
"""The server identity when Redis does not tell it (``INFO`` refused): a complete pass is never trusted."""


@dataclass(frozen=True)
class ScanPass:
    """A pass over one backlog queue against Redis server ``server``: every message below ``next`` was
    peeked and each deferred one recorded; ``complete`` once a peek from ``next`` found nothing."""

    server: str
    next: int = FIRST_SEQUENCE
    complete: bool = False


def pass_for_run(stored: ScanPass | None, server: str | None) -> ScanPass | None:
    """The pass a syphon run goes on with before receiving; None when none is needed.

    ``stored`` is the pass Redis holds for the queue, ``server`` the identity of the Redis server that holds
    it now (None: unknown). A complete pass on the same known server needs nothing; an incomplete one on the
    same server resumes; anything else (another server, none stored) starts a new pass from the beginning.
    """
    name = server or UNKNOWN_SERVER
    if stored is not None and stored.server == name:
        if not stored.complete:
            return replace(stored, next=max(FIRST_SEQUENCE, stored.next))
        if server is not None:
            return None
    return ScanPass(name)


def advance(current: ScanPass, peeked: Iterable[int]) -> ScanPass:
    """The pass after a peek from ``current.next`` returned the sequence numbers ``peeked``: on past the
    highest of them, or complete when the peek found nothing (or did not move forward: never loop on it)."""
    following = max(peeked, default=0) + 1
    if following <= current.next:
        return replace(current, complete=True)
    return replace(current, next=following)
