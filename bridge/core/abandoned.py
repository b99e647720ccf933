"""Waiting after an abandoned send: a transfer the bridge gave up on may still be committed later.

A send that timed out (the SDK's operation timeout or the bridge's attempt deadline) has no known fate:
the namespace may hold the transfer and commit it after the sender stopped waiting (``docs/replication.md``,
"Send workers"; the chaos soak saw a stalled namespace commit such a transfer 2 s later). The entry
stays in the outbox and is sent again, so nothing is lost, and the retry carries the same MessageId, so a
late copy is a duplicate. What can break is *order*: if newer messages of the same key reach that
namespace path before the late commit — the retry went to the other namespace (passive failover), or
active mode's policy ``any`` acknowledged the entry from the other namespace and went on — the old message
lands behind them, and a receiver that takes the first copy of each MessageId hands it after its
successors.

So after a send to (namespace, path) timed out, the shard sends nothing newer to that path for
``retry.abandoned_wait`` seconds (default: the attempt deadline): such sends are refused at once with a
TRANSIENT outcome (not counted towards the outage streak and not towards the namespace's health: nothing
was tried). A late commit within the wait lands before anything newer. The bound is an assumption about
the namespace: one that commits an abandoned transfer later than ``abandoned_wait`` after the sender gave
up can still reorder a key.

One send may go at once: the retry that carries every abandoned message again (``resent``), as a passive
retry to the same namespace or an active retry of the missing copy does (the shard is read in order, so
they come first in it). Its copies are committed before anything newer it carries, so a late commit is a
duplicate behind its own first copy; once that send is accepted the wait ends. The drainer knows which
messages it abandoned during its tenure only; a wait it inherits from Redis (the shard changed hands)
refuses every send there until it ends, and a ``Retry`` waiting for that path waits at least that long.

Waits are per outbox shard (a key lives in one shard) and kept in Redis, on Redis's clock: a new holder
reads the seconds left and counts them on its own clock (``bridge.state.retry``), so a holder on a host
whose clock runs ahead does not cut an inherited wait short. Pure: times are arguments, nothing here
reads a clock.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from bridge.core.decisions import Target
from bridge.core.error_classes import ErrorClass
from bridge.core.outcomes import Outcome
from bridge.core.roles import Role, as_role

Waits = Mapping[tuple[Role, str], float]
"""(namespace role, path) -> epoch seconds until which the shard sends nothing there."""


def wait_left(waits: Waits, role: Role, path: str, now: float) -> float:
    """Seconds the shard still waits before sending to ``path`` in ``role`` (0 when it need not)."""
    return max(0.0, waits.get((role, path), 0.0) - now)


def resent(abandoned_ids: Collection[str] | None, batch_ids: Sequence[str]) -> bool:
    """Whether a send carries every abandoned message again (so it may go to the same path during the
    wait); False when the abandoned messages are not known (a wait inherited from another tenure)."""
    return abandoned_ids is not None and bool(abandoned_ids) and set(abandoned_ids) <= set(batch_ids)


def timed_out(message_ids: Sequence[str], outcomes: Sequence[Outcome]) -> frozenset[str]:
    """The messages of a send whose fate is unknown (failed with a timeout)."""
    return frozenset(m for m, o in zip(message_ids, outcomes, strict=True) if not o.ok and o.timeout)


def all_accepted(
    abandoned_ids: Collection[str], message_ids: Sequence[str], outcomes: Sequence[Outcome]
) -> bool:
    """Whether this send's accepted messages include every abandoned one (the wait can end)."""
    accepted = {m for m, o in zip(message_ids, outcomes, strict=True) if o.ok}
    return bool(abandoned_ids) and set(abandoned_ids) <= accepted


def refused(role: Role, path: str, left: float) -> Outcome:
    """The outcome of a send refused because a send to the same path timed out less than the wait ago."""
    return Outcome.failure(
        ErrorClass.TRANSIENT,
        f"AbandonedSendWait: a send to {path} on {role} timed out; nothing newer goes there for {left:.1f}s"
        " more (the namespace may still commit it)",
    )


def retry_floor(waits: Waits, targets: Iterable[Target], entity: str, now: float) -> float:
    """The least delay of a ``Retry`` whose ``targets`` are waited for (a target's path: its backlog queue,
    else the entity)."""
    return max((wait_left(waits, t.namespace, t.queue or entity, now) for t in targets), default=0.0)


def encode_field(shard: int, role: Role, path: str) -> str:
    """The Redis hash field of one wait: ``<shard>|<role>|<path>``."""
    return f"{shard}|{role}|{path}"


def decode_field(field: str) -> tuple[int, Role, str] | None:
    """``encode_field`` undone; None for a field that is not one (ignored, never fatal)."""
    parts = field.split("|", 2)
    if len(parts) != 3:
        return None
    shard, role, path = parts
    try:
        return int(shard), as_role(role), path
    except ValueError:
        return None
