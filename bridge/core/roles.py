"""Passive replication: which namespace is active for an entity, and when that changes.

In passive mode (``docs/replication.md``) a worker sends to the active namespace; on an outage-class failure
it sends the same message to the backup, and if the backup accepts, the two swap roles for *all* workers. The
role state lives in Redis; this module decides, the Redis adapter applies. Every swap carries the epoch the
worker observed and the Redis script applies it only if that is still the current epoch and active role
(compare-and-swap, ``bridge.state.scripts.SWAP``), so two workers that both saw the primary fail produce
one swap, and a worker acting on a stale view cannot swap back.

``NamespaceHealth`` is what ``bridge status`` shows per namespace: available or not, since when, and the last
error (already secret-free, see ``outcomes.describe_error``). It follows the attempts in the order they
happened, not the order their outcomes are written: ``next_health`` takes the time of the attempt, and an
attempt older than the record's last change (``changed_at``) leaves it as it is. A batch's success written
behind the drainer (``bridge.delivery.settler``) after the next batch found the namespace down therefore
never marks it available again; the store writes a record only over an older one
(``bridge.state.scripts.SET_HEALTH``), so of two writers racing the later attempt wins.

Both records serialise to a small flat Redis hash (``to_fields``/``from_fields``): strings only, absent
fields for None, so ``HSET key *fields`` and ``HGETALL key`` round-trip and a Lua script can compare
``epoch`` as a string.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, TypeAlias

from bridge.core.error_classes import ErrorClass
from bridge.core.hash_fields import FieldMap, decode_fields, opt_float, put_field
from bridge.core.outcomes import Outcome

Role = Literal["primary", "secondary"]
ROLES: tuple[Role, Role] = ("primary", "secondary")

_FAILOVER_CLASSES = frozenset({ErrorClass.OUTAGE, ErrorClass.CONFIGURATION})


def partner(role: Role) -> Role:
    """The other namespace's role."""
    return "secondary" if role == "primary" else "primary"


def as_role(value: str) -> Role:
    """``value`` as a ``Role``; ``ValueError`` for anything else."""
    if value == "primary":
        return "primary"
    if value == "secondary":
        return "secondary"
    raise ValueError(f"not a role: {value!r}")


@dataclass(frozen=True)
class RoleState:
    """Which namespace is active for one entity; ``epoch`` increases by one on every swap."""

    active: Role = "primary"
    epoch: int = 0
    swapped_at: float | None = None
    reason: str | None = None

    @property
    def backup(self) -> Role:
        """The namespace that is not active."""
        return partner(self.active)

    def to_fields(self) -> dict[str, str]:
        """A flat string hash for Redis; None fields are left out."""
        out = {"active": self.active, "epoch": str(self.epoch)}
        put_field(out, "swapped_at", self.swapped_at)
        put_field(out, "reason", self.reason)
        return out

    @classmethod
    def from_fields(cls, fields: FieldMap) -> RoleState:
        """Inverse of ``to_fields``; an empty hash (no key yet) is the initial state."""
        data = decode_fields(fields)
        if not data:
            return cls()
        return cls(
            active=as_role(data.get("active", "primary")),
            epoch=int(data.get("epoch", "0")),
            swapped_at=opt_float(data, "swapped_at"),
            reason=data.get("reason"),
        )


@dataclass(frozen=True)
class Swap:
    """Make ``to_role`` active, if the stored epoch is still ``expected_epoch``."""

    from_role: Role
    to_role: Role
    expected_epoch: int
    new_epoch: int
    at: float
    reason: str

    def state(self) -> RoleState:
        """The role state after this swap."""
        return RoleState(active=self.to_role, epoch=self.new_epoch, swapped_at=self.at, reason=self.reason)


@dataclass(frozen=True)
class Stay:
    """Both namespaces failed: roles stay, the message stays in the outbox and is retried later."""

    retry_after: float
    reason: str


@dataclass(frozen=True)
class NoChange:
    """Nothing about roles to do (the active namespace answered, or the failure was not an outage)."""


@dataclass(frozen=True)
class Stale:
    """The backup accepted, but another worker changed roles since this one looked: re-read, do not swap."""

    current: RoleState


RoleDecision: TypeAlias = Swap | Stay | NoChange | Stale


def decide_roles(
    current: RoleState,
    observed_epoch: int,
    active: Outcome,
    backup: Outcome | None,
    *,
    now: float,
    retry_after: float,
) -> RoleDecision:
    """Decide the role change after a passive send.

    ``active`` is the outcome on the namespace the worker believed active at ``observed_epoch``; ``backup``
    the outcome of the same message on its partner, or None when the backup was not tried. A swap is
    decided only when the active namespace failed with an outage or configuration error, the backup
    accepted, and ``observed_epoch == current.epoch``.
    """
    if active.ok or active.error_class not in _FAILOVER_CLASSES or backup is None:
        return NoChange()
    if not backup.ok:
        reason = f"{current.active}: {active.error}; {current.backup}: {backup.error}"
        return Stay(retry_after=retry_after, reason=reason)
    if observed_epoch != current.epoch:
        return Stale(current)
    return Swap(
        from_role=current.active,
        to_role=current.backup,
        expected_epoch=current.epoch,
        new_epoch=current.epoch + 1,
        at=now,
        reason=f"{active.failed_with.value} on {current.active}: {active.error}",
    )


@dataclass(frozen=True)
class NamespaceHealth:
    """Availability of one namespace (for one entity) as ``bridge status`` reports it.

    ``since`` is when ``available`` last changed; ``last_error`` stays after recovery so an operator sees
    what happened (``last_error_at`` says when, ``last_error_trace_id`` in which trace: ``docs/tracing.md``).
    """

    available: bool = True
    since: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    error_class: ErrorClass | None = None
    last_error_trace_id: str | None = None

    @property
    def changed_at(self) -> float | None:
        """When the attempt this record last changed for happened: its availability (``since``) or its
        error (``last_error_at``); None for a record never changed."""
        times = [t for t in (self.since, self.last_error_at) if t is not None]
        return max(times) if times else None

    def to_fields(self) -> dict[str, str]:
        """A flat string hash for Redis; None fields are left out."""
        out = {"available": "1" if self.available else "0"}
        put_field(out, "since", self.since)
        put_field(out, "last_error", self.last_error)
        put_field(out, "last_error_at", self.last_error_at)
        if self.error_class is not None:
            out["error_class"] = self.error_class.value
        put_field(out, "last_error_trace_id", self.last_error_trace_id)
        return out

    @classmethod
    def from_fields(cls, fields: FieldMap) -> NamespaceHealth:
        """Inverse of ``to_fields``; an empty hash is a healthy namespace never seen failing."""
        data = decode_fields(fields)
        error_class = data.get("error_class")
        return cls(
            available=data.get("available", "1") == "1",
            since=opt_float(data, "since"),
            last_error=data.get("last_error"),
            last_error_at=opt_float(data, "last_error_at"),
            error_class=ErrorClass(error_class) if error_class else None,
            last_error_trace_id=data.get("last_error_trace_id") or None,
        )


def next_health(
    health: NamespaceHealth, outcome: Outcome, now: float, trace_id: str | None = None
) -> NamespaceHealth:
    """The health after one attempt on that namespace, made at ``now`` (when its outcome was known, not
    when it is recorded).

    Success makes it available; an outage or configuration error makes it unavailable; a transient error
    records the error but does not change availability; a message-permanent error is the message's fault
    and leaves the record untouched, and so does an attempt made before the record's last change (it says
    nothing newer). The same object comes back when nothing changed, so the adapter can skip the write.
    ``trace_id`` is the trace that shows the failed attempt (None: none), kept with the error.
    """
    changed_at = health.changed_at
    if changed_at is not None and now < changed_at:
        return health
    if outcome.ok:
        if health.available:
            return health
        return replace(health, available=True, since=now)
    error_class = outcome.failed_with
    if error_class is ErrorClass.MESSAGE_PERMANENT:
        return health
    available = health.available and error_class is ErrorClass.TRANSIENT
    since = health.since if available == health.available else now
    return NamespaceHealth(
        available=available,
        since=since,
        last_error=outcome.error,
        last_error_at=now,
        error_class=error_class,
        last_error_trace_id=trace_id,
    )
