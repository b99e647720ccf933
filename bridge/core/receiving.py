"""The receiving end's decisions (``docs/receiving.md``): pings, duplicate claims, settlement, counters.

A receiver reads an entity from both namespaces, so with active replication every message arrives twice,
and with passive or paired replication a retried send may arrive twice too; every copy carries the same
MessageId. The receiver keeps a window of MessageIds in Redis and asks it, for every copy it receives,
what to do (a *claim*, atomic in Redis, answered with a ``Claim``):

- ``HANDLE``: nobody handled the id within the window and nobody is handling it now. The caller then holds
  the id's in-flight mark (with an expiry, so a crash does not block the other copies for ever; it is
  renewed until the done mark is written, and answers a ``Renewal`` each time), calls the handler, and
  only after the handler returned sets the id's *done* mark, then completes the copy. A crash
  between the handler's return and the done mark re-delivers the copy (a second handler call, never a loss);
  a crash between the done mark and the completion re-delivers a copy that is then recognised.
- ``DUPLICATE``: the id is done within the window: complete the copy without calling the handler.
- ``BUSY``: another copy is in its handler right now (in this process or another): the copy waits (its lock
  renewed) and is claimed again; after ``busy_wait`` seconds it is abandoned.
- ``FULL``: the window holds ``max_remembered`` ids: back-pressure. The copy waits with its lock renewed and
  the receiver stops receiving until ids expire; nothing is evicted early, which would let a duplicate
  through.

Pings (ContentType ``application/vnd.ms-servicebus-ping``, sent by the paired mode's ping task) never reach
the handler: they are completed and counted.

A handler that raises: the copy is abandoned (Service Bus redelivers it), or, on its last delivery
(``delivery_count + 1 >= max_delivery_count``; the SDK's count is the number of earlier deliveries),
dead-lettered explicitly with the error's class as the reason and its message as the description, so the
dead-letter queue says why rather than Service Bus's generic ``MaxDeliveryCountExceeded``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from enum import IntEnum, StrEnum

from bridge.core.hash_fields import FieldMap, decode_fields
from bridge.core.outcomes import scrub_secrets
from bridge.core.paired import PING_CONTENT_TYPE

MAX_REASON_LENGTH = 128
MAX_DESCRIPTION_LENGTH = 1024
MAX_WINDOW = 7 * 24 * 3600.0
"""The longest duplicate-suppression window (Service Bus's own duplicate detection goes up to 7 days)."""


def is_ping(content_type: str | None) -> bool:
    """True for the paired mode's ping message (never handed to the handler)."""
    return content_type == PING_CONTENT_TYPE


class Claim(IntEnum):
    """The window's answer for one copy (the values are the claim script's replies)."""

    HANDLE = 0
    DUPLICATE = 1
    BUSY = 2
    FULL = 3


def parse_claims(replies: Sequence[object], expected: int) -> list[Claim]:
    """The claim script's reply as ``Claim``s; ``ValueError`` when it is not one known code per id."""
    if len(replies) != expected:
        raise ValueError(f"claim reply has {len(replies)} codes for {expected} ids")
    claims: list[Claim] = []
    for reply in replies:
        if not isinstance(reply, int) or isinstance(reply, bool):
            raise ValueError(f"claim reply {reply!r} is not an integer code")
        claims.append(Claim(reply))
    return claims


class Renewal(IntEnum):
    """The window's answer when a running handler's in-flight mark is renewed (the renew script's replies).

    ``RENEWED`` and ``LATE`` keep the mark ours (``LATE``: its life had run out, but nobody claimed the id
    meanwhile); the other three mean the mark was lost while the handler ran, so another receiver may have
    handed the id meanwhile: ``TAKEN`` (another receiver holds the id's mark now), ``HANDLED`` (another
    receiver's handler of the id returned: the id is done), ``GONE`` (no mark at all: Redis lost it, or
    another receiver claimed and released it; the renewal set it again).
    """

    RENEWED = 0
    LATE = 1
    TAKEN = 2
    HANDLED = 3
    GONE = 4

    @property
    def lost(self) -> bool:
        """True when the mark was not ours any more."""
        return self not in (Renewal.RENEWED, Renewal.LATE)


def parse_renewals(replies: Sequence[object], expected: int) -> list[Renewal]:
    """The renew script's reply as ``Renewal``s; ``ValueError`` when it is not one known code per id."""
    if len(replies) != expected:
        raise ValueError(f"renew reply has {len(replies)} codes for {expected} ids")
    renewals: list[Renewal] = []
    for reply in replies:
        if not isinstance(reply, int) or isinstance(reply, bool):
            raise ValueError(f"renew reply {reply!r} is not an integer code")
        renewals.append(Renewal(reply))
    return renewals


class Action(StrEnum):
    """What to do with one received copy next."""

    HANDLE = "handle"
    COMPLETE = "complete"
    WAIT = "wait"
    ABANDON = "abandon"
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True)
class Decision:
    """An ``Action`` and, for a dead-letter, the reason and description Service Bus records."""

    action: Action
    reason: str | None = None
    description: str | None = None


def after_claim(claim: Claim, waited: float, busy_wait: float, stopping: bool) -> Decision:
    """What to do with a copy given its claim, after it has waited ``waited`` seconds already.

    A waiting copy is given up (abandoned, so Service Bus redelivers it later) when it waited longer than
    ``busy_wait`` for another copy's handler, or when the receiver is stopping; under back-pressure it waits
    as long as the receiver runs.
    """
    if claim is Claim.HANDLE:
        return Decision(Action.HANDLE)
    if claim is Claim.DUPLICATE:
        return Decision(Action.COMPLETE)
    if stopping:
        return Decision(Action.ABANDON)
    if claim is Claim.BUSY and waited >= busy_wait:
        return Decision(Action.ABANDON)
    return Decision(Action.WAIT)


def session_order(sequence_numbers: Sequence[int | None]) -> list[int]:
    """The positions of one session batch's copies in the order to hand them: by sequence number.

    A session's messages are meant to arrive in sequence-number order, yet a batch can hold a later one
    first: with ``prefetch_count`` 0 the SDK releases a message that reaches the link between two receive
    calls, and the broker, which had already sent the session's next message, sends the released one again
    behind it, into the same receive. Handing the batch by sequence number restores the session's order
    (the sort is stable; a batch with a copy lacking a sequence number keeps its order).
    """
    positions = list(range(len(sequence_numbers)))
    known = [n for n in sequence_numbers if n is not None]
    if len(known) < len(sequence_numbers):
        return positions
    return sorted(positions, key=known.__getitem__)


def last_delivery(delivery_count: int, max_delivery_count: int) -> bool:
    """True when Service Bus dead-letters the message if this delivery fails as well.

    ``delivery_count`` is the SDK's (AMQP) count of earlier delivery attempts: 0 on the first delivery.
    Service Bus dead-letters once ``max_delivery_count`` deliveries failed.
    """
    return delivery_count + 1 >= max_delivery_count


def dead_letter_reason(error: BaseException) -> tuple[str, str]:
    """``(reason, description)`` for a dead-letter caused by ``error``: its class name and message.

    Both are one line, cut to Service Bus-friendly lengths, with anything that looks like a credential
    removed (a handler's error may quote a connection string).
    """
    reason = type(error).__name__[:MAX_REASON_LENGTH]
    description = scrub_secrets(" ".join(str(error).split()))
    if len(description) > MAX_DESCRIPTION_LENGTH:
        description = description[: MAX_DESCRIPTION_LENGTH - 3] + "..."
    return reason, description


def after_handler_error(error: BaseException, delivery_count: int, max_delivery_count: int) -> Decision:
    """Abandon (Service Bus redelivers), or dead-letter with the error on the last delivery."""
    if last_delivery(delivery_count, max_delivery_count):
        reason, description = dead_letter_reason(error)
        return Decision(Action.DEAD_LETTER, reason, description)
    return Decision(Action.ABANDON)


# ---- counters ----------------------------------------------------------------------------------------------
class EventKind(StrEnum):
    """A lifecycle event of one received copy (counted; the journal records the same events)."""

    RECEIVED = "received"
    PING_DROPPED = "ping_dropped"
    DUPLICATE_SUPPRESSED = "duplicate_suppressed"
    HANDLED = "handled"
    HANDLER_ERROR = "handler_error"
    DEAD_LETTERED = "dead_lettered"
    BACKPRESSURE = "backpressure"


@dataclass(frozen=True)
class ReceiverEvent:
    """One event: what happened to which copy (``message_id``) from which namespace role."""

    kind: EventKind
    namespace: str
    message_id: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class ReceiverCounts:
    """The receiver counters of one entity (or subscription), summed over every receiver process.

    ``received_<role>`` counts every copy received from that namespace (pings included);
    ``duplicates_suppressed`` copies completed without a handler call; ``backpressure_waits`` claims refused
    because the window was full; ``inflight_marks_lost`` in-flight marks a receiver found lost while the
    handler of their id ran (another receiver may have handed the id meanwhile: ``Renewal``).
    """

    received_primary: int = 0
    received_secondary: int = 0
    handled: int = 0
    duplicates_suppressed: int = 0
    pings_dropped: int = 0
    handler_errors: int = 0
    dead_lettered: int = 0
    backpressure_waits: int = 0
    inflight_marks_lost: int = 0

    @classmethod
    def from_fields(cls, data: FieldMap) -> ReceiverCounts:
        """Counters read back from the Redis hash (unknown fields ignored, missing ones zero)."""
        decoded = decode_fields(data)
        values = {f.name: int(decoded.get(f.name) or 0) for f in fields(cls)}
        return cls(**values)

    def as_dict(self) -> dict[str, int]:
        """The counters by name (status pages, metrics)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


_FIELD_OF: dict[EventKind, str] = {
    EventKind.PING_DROPPED: "pings_dropped",
    EventKind.DUPLICATE_SUPPRESSED: "duplicates_suppressed",
    EventKind.HANDLED: "handled",
    EventKind.HANDLER_ERROR: "handler_errors",
    EventKind.DEAD_LETTERED: "dead_lettered",
    EventKind.BACKPRESSURE: "backpressure_waits",
}


def count_events(events: Iterable[ReceiverEvent]) -> dict[str, int]:
    """The counter increments for ``events`` (``ReceiverCounts`` field names, zeros left out)."""
    deltas: dict[str, int] = {}
    for event in events:
        name = f"received_{event.namespace}" if event.kind is EventKind.RECEIVED else _FIELD_OF[event.kind]
        deltas[name] = deltas.get(name, 0) + 1
    return deltas
