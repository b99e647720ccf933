"""The one place that decides what a failure means: transient, outage, message-permanent or configuration.

The four classes (``ErrorClass``, docs/replication.md) are decided here and nowhere else: every worker,
ping, syphon and the adapters' exception translation ask ``classify``. A bridge error class carries its
own decision (``error_class``, ``timeout``, ``entity_missing`` in ``bridge.errors``), and ``classify``
reads it from the class. Exceptions the bridge does not own (the Service Bus SDK's, azure-core's, the
builtins a socket raises) never get this far: ``bridge.servicebus.translate`` turns them into bridge
errors at the adapter edge, by its own table. Anything else, and a bridge error that says nothing about
a namespace, is TRANSIENT: it is retried, and ``escalate`` turns it into an outage if it persists, so an
unforeseen error can delay a message but never drop or dead-letter it.

A timeout is TRANSIENT (``NamespaceTimeoutError``) unless it was the bridge's hard deadline
(``AttemptDeadlineExceeded``, an OUTAGE); either way ``timeout`` starts paired mode's FailoverInterval
timer at once, while one slow settlement does not swap roles for every worker (docs/replication.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from bridge.errors import BridgeError, ErrorClass

__all__ = [
    "Classification",
    "ErrorClass",
    "EscalationPolicy",
    "TransientStreak",
    "classify",
    "classify_type",
    "escalate",
]


@dataclass(frozen=True)
class Classification:
    """The verdict on one exception type: its class, and whether it was a timeout or a missing entity."""

    error_class: ErrorClass
    timeout: bool = False
    entity_missing: bool = False
    address_refused: bool = False


UNKNOWN = Classification(ErrorClass.TRANSIENT)
"""The verdict on an error that carries no decision: retried, and escalated if it persists."""


def classify_type(exc_type: type[BaseException]) -> Classification:
    """The decision ``exc_type`` carries (a ``bridge.errors`` class), else ``UNKNOWN``."""
    if issubclass(exc_type, BridgeError) and exc_type.error_class is not None:
        return Classification(
            exc_type.error_class, exc_type.timeout, exc_type.entity_missing, exc_type.address_refused
        )
    return UNKNOWN


def classify(exc: BaseException) -> Classification:
    """Classify an exception instance (its type decides; the message is never parsed)."""
    return classify_type(type(exc))


@dataclass(frozen=True)
class EscalationPolicy:
    """When transient failures in a row stop being transient.

    A namespace that answers ``ServerBusy`` (or times out) for ``max_consecutive`` attempts in a row, or
    for longer than ``max_duration`` seconds since the first of them, is treated as down.
    """

    max_consecutive: int = 3
    max_duration: float = 10.0

    def __post_init__(self) -> None:
        if self.max_consecutive < 1:
            raise ValueError("max_consecutive must be at least 1")
        if self.max_duration < 0:
            raise ValueError("max_duration must not be negative")


@dataclass(frozen=True)
class TransientStreak:
    """Transient failures in a row against one namespace (per entity), and when the first one happened."""

    count: int = 0
    first_at: float | None = None


def escalate(
    streak: TransientStreak,
    error_class: ErrorClass | None,
    now: float,
    policy: EscalationPolicy,
) -> tuple[ErrorClass | None, TransientStreak]:
    """The effective class of an attempt's result and the streak after it.

    ``error_class`` None means success, which ends the streak. A TRANSIENT failure extends the streak and is
    promoted to OUTAGE once the streak reaches the policy's count or age; the streak then starts over, so
    the next busy answer after a failover is judged afresh. Any other class ends the streak unchanged.
    """
    if error_class is not ErrorClass.TRANSIENT:
        return error_class, TransientStreak()
    first_at = now if streak.first_at is None else streak.first_at
    count = streak.count + 1
    if count >= policy.max_consecutive or now - first_at >= policy.max_duration:
        return ErrorClass.OUTAGE, TransientStreak()
    return ErrorClass.TRANSIENT, TransientStreak(count, first_at)
