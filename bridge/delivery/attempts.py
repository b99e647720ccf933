"""From what a namespace did with a batch to per-message outcomes the replication core can decide on.

A batched send answers per message: the accepted ones, the ones the namespace will never take (too large)
and, from the first failing batch on, one shared error. ``outcomes`` turns that into ``Outcome``s with the
*effective* error class: a transient failure that keeps coming for the same entity and namespace is
escalated to an outage (``error_classes.escalate``), tracked per process in ``Streaks``, which holds only
the streaks in progress: a success ends one and drops its entry, and a retired entity is forgotten.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from bridge.core.error_classes import EscalationPolicy, TransientStreak, classify, escalate
from bridge.core.outcomes import Outcome, describe_error
from bridge.core.roles import Role
from bridge.errors import InvariantError, NamespaceError, TransientNamespaceError


@dataclass
class Streaks:
    """Transient-failure streaks per (entity, namespace role) of this process (its drainers share them:
    shards of one entity served by several threads see one namespace)."""

    policy: EscalationPolicy
    streaks: dict[tuple[str, str], TransientStreak] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def outcome(self, entity: str, role: Role, error: NamespaceError | None, now: float) -> Outcome:
        """The effective outcome of one attempt (``error`` None: accepted)."""
        key = (entity, role)
        if error is None:
            with self.lock:
                self.streaks.pop(key, None)
            return Outcome.success()
        classification = classify(error)
        with self.lock:
            effective, streak = escalate(
                self.streaks.get(key, TransientStreak()), classification.error_class, now, self.policy
            )
            if streak.count:
                self.streaks[key] = streak
            else:
                self.streaks.pop(key, None)
        if effective is None:  # escalate answers None only for a success, and this was a failure
            raise InvariantError(f"a failed attempt ({type(error).__name__}) was classified as a success")
        return Outcome.failure(
            effective,
            describe_error(error),
            timeout=classification.timeout,
            entity_missing=classification.entity_missing,
            address_refused=classification.address_refused,
        )

    def forget(self, entity: str) -> None:
        """Drop ``entity``'s streaks (it retired: its next attempt starts afresh)."""
        with self.lock:
            for key in [key for key in self.streaks if key[0] == entity]:
                del self.streaks[key]


@dataclass(frozen=True)
class BatchOutcome:
    """Outcomes of one batched send, by position in the batch."""

    outcomes: Sequence[Outcome]

    @property
    def all_ok(self) -> bool:
        """True when every message was accepted."""
        return all(o.ok for o in self.outcomes)


def batch_outcome(
    streaks: Streaks,
    *,
    entity: str,
    role: Role,
    size: int,
    accepted: Sequence[int],
    failed: Mapping[int, NamespaceError],
    now: float,
) -> BatchOutcome:
    """Per-position outcomes; one shared error object is classified (and escalated) once."""
    by_error: dict[int, Outcome] = {}
    outcomes: list[Outcome] = []
    accepted_set = set(accepted)
    any_accepted = bool(accepted_set)
    for index in range(size):
        if index in accepted_set:
            outcomes.append(Outcome.success())
            continue
        error = failed.get(index)
        if error is None:  # neither accepted nor failed: not attempted, so it must be tried again
            error = next(iter(failed.values()), None) or TransientNamespaceError(
                f"message {index} was not attempted", namespace=role
            )
        outcome = by_error.get(id(error))
        if outcome is None:
            outcome = streaks.outcome(entity, role, error, now)
            by_error[id(error)] = outcome
        outcomes.append(outcome)
    if any_accepted and not by_error:
        streaks.outcome(entity, role, None, now)
    return BatchOutcome(outcomes)
