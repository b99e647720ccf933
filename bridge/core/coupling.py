"""Close/fault coupling of the two namespace clients (``docs/replication.md``).

In the .NET SDK's paired-namespace client, once the primary or secondary ``MessagingFactory`` faulted or
was closed without its partner also being faulted/closed, the partner was faulted too if it had not closed
by itself within 5 seconds (``docs/references.md``). The bridge keeps that rule for its
per-process client pool: the pair is reopened as a whole, so no client that lived through its partner's
failure outlives it.

The rule is about client *instances*. Each client the pool opens gets a generation number; a close or
fault of one role creates an obligation to close the partner generation that was open at that moment,
due ``grace`` seconds later. The obligation lapses when that partner generation closes by itself first. A
partner opened *after* the fault is already a clean client and is left alone, and a close that the
coupling itself caused creates no new obligation (otherwise the two roles would close each other in turn
forever).

The functions are pure: they take ``now`` and return a new state plus what to close; the pool closes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType

from bridge.core.roles import Role, partner

COUPLING_GRACE = 5.0
"""Seconds a partner may stay open after its pair faulted or closed (the .NET paired client's 5 s)."""


class CloseCause(StrEnum):
    """Why a role's client went away."""

    FAULT = "fault"
    """It failed (outage, deadline, lost connection) and was discarded."""
    CLOSED = "closed"
    """It was closed on purpose."""
    COUPLING = "coupling"
    """The coupling rule closed it because its partner went away; creates no new obligation."""


@dataclass(frozen=True)
class PartnerClose:
    """Close ``role``'s client generation ``generation`` at ``due_at`` (unless it closed by itself)."""

    role: Role
    generation: int
    due_at: float
    reason: str


def _no_clients() -> Mapping[Role, int]:
    return MappingProxyType({})


@dataclass(frozen=True)
class CouplingState:
    """Which client generation is open per role, and the partner closes that are pending."""

    open_generations: Mapping[Role, int] = field(default_factory=_no_clients, hash=False)
    pending: tuple[PartnerClose, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "open_generations", MappingProxyType(dict(self.open_generations)))

    def is_open(self, role: Role) -> bool:
        """True while a client of ``role`` is open."""
        return role in self.open_generations


def on_open(state: CouplingState, role: Role, generation: int) -> CouplingState:
    """A new client generation of ``role`` was opened."""
    return replace(state, open_generations={**state.open_generations, role: generation})


def on_close(
    state: CouplingState,
    role: Role,
    generation: int,
    now: float,
    *,
    cause: CloseCause,
    grace: float = COUPLING_GRACE,
) -> CouplingState:
    """Client ``generation`` of ``role`` faulted or was closed at ``now``.

    Obligations targeting that generation lapse (it closed by itself). Unless the coupling caused this
    close, the partner generation open right now must close within ``grace`` seconds.
    A close of a generation that is not the open one (a late report about an old client) changes nothing.
    """
    if state.open_generations.get(role) != generation:
        return state
    generations = {r: g for r, g in state.open_generations.items() if r != role}
    pending = tuple(p for p in state.pending if not (p.role == role and p.generation == generation))
    other = partner(role)
    other_generation = generations.get(other)
    if cause is not CloseCause.COUPLING and other_generation is not None:
        reason = f"{role} client {cause.value} at {now:.3f}; partner not closed within {grace:g}s"
        pending = (*pending, PartnerClose(other, other_generation, now + grace, reason))
    return CouplingState(open_generations=generations, pending=pending)


def due_closes(state: CouplingState, now: float) -> tuple[CouplingState, tuple[PartnerClose, ...]]:
    """The partner closes due at ``now`` whose target is still open, and the state without them.

    The caller closes each returned client and reports it with ``on_close(..., CloseCause.COUPLING)``.
    Obligations whose target already closed are dropped here too.
    """
    due: list[PartnerClose] = []
    keep: list[PartnerClose] = []
    for close in state.pending:
        if state.open_generations.get(close.role) != close.generation:
            continue
        (due if close.due_at <= now else keep).append(close)
    return replace(state, pending=tuple(keep)), tuple(due)


def next_due_at(state: CouplingState) -> float | None:
    """When the earliest pending partner close falls due, or None."""
    times = [p.due_at for p in state.pending if state.open_generations.get(p.role) == p.generation]
    return min(times) if times else None
