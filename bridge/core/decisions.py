"""What a send worker does with one outbox entry after its attempts: the decision types.

``replication`` returns one of four decisions; the worker executes it and nothing else:

- ``Ack``: a namespace accepted the message; acknowledge (XACK/XDEL) the outbox entry.
- ``DeadLetter``: the message can never be delivered; move it to the local dead-letter stream with
  ``reason`` and acknowledge it. Never chosen for a namespace failure, only for the message's own fault.
- ``Retry``: leave the entry in the outbox and try again after ``retry_after`` seconds; ``pending`` says
  which targets still need it (active mode with policy "all" remembers where it already landed).
- ``SendNext``: send the same message to ``targets`` now (the backup after an outage) and ask again with
  the new outcome.

A replication mode settles each entry of a batch with one of ``Ack``, ``DeadLetter``, ``Retry`` or ``Hold``
(a ``Settlement``). ``Retry`` says the namespace side is failing (both namespaces down, every backlog queue
out of the rotation): the whole shard backs off. ``Hold`` says only this entry's key must wait (a message
that cannot be aliased waits for the primary, a key whose backlog queue left the rotation waits for it):
the key's later entries wait behind it, entries of other keys go on.

Every decision carries ``changes`` for shared state (a role ``Swap``, paired-mode timer and rotation
changes) that the worker applies through the Redis adapter *before* acting on the outbox, and ``alerts``:
configuration errors that must be logged loudly (auth, missing entity).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from bridge.core.paired import PairedChange, RemoveFromRotation
from bridge.core.roles import Role, Swap


@dataclass(frozen=True, order=True)
class Target:
    """Where one attempt goes: a namespace, and a backlog queue path in it (None: the message's entity)."""

    namespace: Role
    queue: str | None = None

    def __str__(self) -> str:
        return self.namespace if self.queue is None else f"{self.namespace}:{self.queue}"


PRIMARY = Target("primary")
SECONDARY = Target("secondary")


def role_target(role: Role) -> Target:
    """The target for the message's own entity in the namespace that has ``role``."""
    return PRIMARY if role == "primary" else SECONDARY


def backlog_target(path: str) -> Target:
    """The target for backlog queue ``path``; backlog queues live in the secondary namespace."""
    return Target("secondary", path)


Change: TypeAlias = Swap | PairedChange | RemoveFromRotation
"""A change to shared state that the worker applies through the Redis adapter."""


@dataclass(frozen=True)
class Ack:
    """Acknowledge the outbox entry: ``delivered_to`` accepted the message."""

    delivered_to: tuple[Target, ...]
    changes: tuple[Change, ...] = ()
    alerts: tuple[str, ...] = ()


@dataclass(frozen=True)
class DeadLetter:
    """Move the entry to the local dead-letter stream with ``reason`` (it may have reached some targets)."""

    reason: str
    delivered_to: tuple[Target, ...] = ()
    changes: tuple[Change, ...] = ()
    alerts: tuple[str, ...] = ()
    code: str = "message_permanent"
    """The dead-letter entry's ``code``: ``message_permanent`` (Service Bus refused it for good) or
    ``expired_before_delivery`` (its TTL ran out in the outbox, ``bridge.core.expiry``)."""


@dataclass(frozen=True)
class Retry:
    """Keep the entry in the outbox; try again after ``retry_after`` seconds.

    ``backoff`` False: a planned wait (for the syphon, for a layout change), not a failure; it does not
    count towards the shard's backoff.
    """

    retry_after: float
    reason: str
    pending: tuple[Target, ...] = ()
    delivered_to: tuple[Target, ...] = ()
    changes: tuple[Change, ...] = ()
    alerts: tuple[str, ...] = ()
    backoff: bool = True


@dataclass(frozen=True)
class Hold:
    """Keep the entry (and every later entry of its key) in the outbox for ``retry_after`` seconds; entries
    of other keys are not held back. Nothing was sent for it."""

    retry_after: float
    reason: str
    changes: tuple[Change, ...] = ()
    alerts: tuple[str, ...] = ()
    awaits: tuple[Role, ...] = ("primary",)
    """The namespaces whose return, seen for this entity, decides the key again before ``retry_after``
    (``bridge.core.seen_back``): the primary ends a failover; a backlog queue is in the secondary."""


@dataclass(frozen=True)
class SendNext:
    """Send the message to ``targets`` now."""

    targets: tuple[Target, ...]
    reason: str = ""
    changes: tuple[Change, ...] = ()
    alerts: tuple[str, ...] = ()


SendDecision: TypeAlias = Ack | DeadLetter | Retry | SendNext

Settlement: TypeAlias = Ack | DeadLetter | Retry | Hold
"""What a replication mode finally says about one outbox entry (``bridge.delivery.modes``)."""
