"""Paired-namespace mode (``docs/paired.md``): the failover timer, backlog rotation, ping, syphon.

Per entity, state shared by all workers (in Redis, applied by an adapter):

- The FailoverInterval timer starts at the first non-transient failure or timeout on the primary
  (``StartTimer``), as in the .NET SDK's paired namespaces (``docs/references.md``). When
  ``failover_interval`` has passed with no successful send, failover engages for the entity
  (``EngageFailover``): primary sends stop and messages go to backlog queues in the secondary namespace.
  0 means immediately.
- A successful primary send or ping ends it all (``MarkAvailable``): every worker sends to the primary again.
- While failed over, a ping is due every ``ping_primary_interval``.

Per secondary namespace, the backlog rotation: ``<primary-namespace>/x-servicebus-transfer/<i>``. Each
worker process keeps one randomly chosen queue; a queue whose send fails leaves the rotation for every
worker (``RemoveFromRotation``) and the worker picks another. With none left the message stays in the
outbox and the error is recorded. A removed queue is readmitted after ``readmit_after`` seconds (the .NET
client never readmitted within a factory's life; a long-lived worker fleet needs a way back).

Every transition is a small *change* record with the semantics of a Redis hash operation, so the adapter can
apply it atomically and two workers racing produce the same result: ``StartTimer`` and ``EngageFailover``
are set-if-absent (the first failure's time wins), ``MarkAvailable`` deletes both. ``apply_change`` is the
reference semantics the adapter (and its contract test) must match.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Literal, TypeAlias

from bridge.core.backoff import Rand
from bridge.core.error_classes import ErrorClass
from bridge.core.hash_fields import FieldMap, decode_fields, opt_float, put_field
from bridge.core.outcomes import Outcome

BACKLOG_SEGMENT = "x-servicebus-transfer"
PING_CONTENT_TYPE = "application/vnd.ms-servicebus-ping"
PING_TIME_TO_LIVE = 1.0
PING_SCHEDULE_AHEAD = timedelta(days=365)
PingMode = Literal["message", "schedule"]


def backlog_queue_path(primary_namespace: str, index: int) -> str:
    """``<primary-namespace>/x-servicebus-transfer/<index>``, the path of one backlog queue."""
    if index < 0:
        raise ValueError("backlog queue index must not be negative")
    if not primary_namespace or "/" in primary_namespace:
        raise ValueError("primary namespace must be a non-empty name without '/'")
    return f"{primary_namespace}/{BACKLOG_SEGMENT}/{index}"


def backlog_queue_paths(primary_namespace: str, count: int) -> tuple[str, ...]:
    """All backlog queue paths for ``count`` queues, index 0 to count-1."""
    return tuple(backlog_queue_path(primary_namespace, i) for i in range(count))


def backlog_queue_index(path: str) -> int | None:
    """The index of a backlog queue path, or None when ``path`` is not one."""
    parts = path.split("/")
    if len(parts) != 3 or parts[1] != BACKLOG_SEGMENT or not parts[0] or not parts[2].isdigit():
        return None
    return int(parts[2])


@dataclass(frozen=True)
class FailoverPolicy:
    """Timing options of the .NET SDK's ``SendAvailabilityPairedNamespaceOptions``, its defaults (seconds)."""

    failover_interval: float = 60.0
    ping_primary_interval: float = 60.0
    ping_timeout: float = 120.0

    def __post_init__(self) -> None:
        if self.failover_interval < 0 or self.ping_primary_interval <= 0 or self.ping_timeout <= 0:
            raise ValueError("failover_interval must be >= 0, ping intervals and timeouts > 0")


@dataclass(frozen=True)
class PairedState:
    """One entity's shared failover state."""

    failing_since: float | None = None
    failed_over_at: float | None = None
    last_error: str | None = None
    last_error_at: float | None = None
    last_ping_at: float | None = None
    last_failover_at: float | None = None
    """When failover was last engaged; kept after the restore (``failed_over_at`` is cleared), for status."""

    @property
    def failed_over(self) -> bool:
        """Failover is engaged: sends go to backlog queues, pings are due."""
        return self.failed_over_at is not None

    @property
    def healthy(self) -> bool:
        """No timer running and not failed over (the syphon may deliver to this entity)."""
        return self.failing_since is None and self.failed_over_at is None

    def to_fields(self) -> dict[str, str]:
        """A flat string hash for Redis; None fields are left out."""
        out: dict[str, str] = {}
        put_field(out, "failing_since", self.failing_since)
        put_field(out, "failed_over_at", self.failed_over_at)
        put_field(out, "last_error", self.last_error)
        put_field(out, "last_error_at", self.last_error_at)
        put_field(out, "last_ping_at", self.last_ping_at)
        put_field(out, "last_failover_at", self.last_failover_at)
        return out

    @classmethod
    def from_fields(cls, fields: FieldMap) -> PairedState:
        """Inverse of ``to_fields``."""
        data = decode_fields(fields)
        return cls(
            failing_since=opt_float(data, "failing_since"),
            failed_over_at=opt_float(data, "failed_over_at"),
            last_error=data.get("last_error"),
            last_error_at=opt_float(data, "last_error_at"),
            last_ping_at=opt_float(data, "last_ping_at"),
            last_failover_at=opt_float(data, "last_failover_at"),
        )


@dataclass(frozen=True)
class StartTimer:
    """Set ``failing_since`` if absent (HSETNX): the first non-transient failure starts the timer."""

    at: float


@dataclass(frozen=True)
class EngageFailover:
    """Set ``failed_over_at`` if absent (HSETNX); log at WARNING and journal a failover."""

    at: float
    reason: str


@dataclass(frozen=True)
class MarkAvailable:
    """Delete ``failing_since`` and ``failed_over_at``: every worker sends to the primary again."""

    at: float
    reason: str


@dataclass(frozen=True)
class RecordError:
    """Set ``last_error`` and ``last_error_at`` (secret-free text)."""

    at: float
    error: str


@dataclass(frozen=True)
class RecordPing:
    """Set ``last_ping_at``; the ping was sent (and billed) whatever its outcome."""

    at: float


@dataclass(frozen=True)
class RemoveFromRotation:
    """Backlog queue ``index`` leaves the rotation for every worker (HSET rotation <index> <at>)."""

    index: int
    at: float
    error: str
    refused: bool = False
    """The namespace's address refused a TCP connect: the queue left for its namespace, not for itself."""


PairedChange: TypeAlias = StartTimer | EngageFailover | MarkAvailable | RecordError | RecordPing
"""A change to one entity's ``PairedState``."""


def apply_change(state: PairedState, change: PairedChange) -> PairedState:
    """The reference semantics of a change; the Redis adapter must behave the same way."""
    if isinstance(change, StartTimer):
        return state if state.failing_since is not None else replace(state, failing_since=change.at)
    if isinstance(change, EngageFailover):
        if state.failed_over_at is not None:
            return state
        since = change.at if state.failing_since is None else state.failing_since
        return replace(state, failing_since=since, failed_over_at=change.at, last_failover_at=change.at)
    if isinstance(change, MarkAvailable):
        return replace(state, failing_since=None, failed_over_at=None)
    if isinstance(change, RecordError):
        return replace(state, last_error=change.error, last_error_at=change.at)
    return replace(state, last_ping_at=change.at)


def apply_changes(state: PairedState, changes: Iterable[PairedChange]) -> PairedState:
    """Apply changes in order."""
    for change in changes:
        state = apply_change(state, change)
    return state


def failover_due(state: PairedState, now: float, policy: FailoverPolicy) -> bool:
    """Failover is engaged, or its timer has run for ``failover_interval`` with no successful send."""
    if state.failed_over:
        return True
    return state.failing_since is not None and now - state.failing_since >= policy.failover_interval


def seconds_until_failover(state: PairedState, now: float, policy: FailoverPolicy) -> float | None:
    """Seconds until the running timer engages failover (0 if due), None without a timer."""
    if state.failed_over:
        return 0.0
    if state.failing_since is None:
        return None
    return max(0.0, state.failing_since + policy.failover_interval - now)


def route(
    state: PairedState, now: float, policy: FailoverPolicy
) -> tuple[Literal["primary", "backlog"], tuple[PairedChange, ...]]:
    """Where the next message for this entity goes, and the change to record when the timer just expired."""
    if state.failed_over:
        return "backlog", ()
    if failover_due(state, now, policy):
        return "backlog", (EngageFailover(now, "failover_interval passed with no successful send"),)
    return "primary", ()


def on_primary_success(state: PairedState, now: float) -> tuple[PairedChange, ...]:
    """A send to the primary succeeded: the timer is reset and the entity is available."""
    if state.healthy:
        return ()
    return (MarkAvailable(now, "primary send succeeded"),)


def on_primary_failure(
    state: PairedState, outcome: Outcome, now: float, policy: FailoverPolicy
) -> tuple[PairedChange, ...]:
    """The changes after a failed primary send.

    A message-permanent failure is the message's fault and changes nothing. Any other failure is recorded;
    a non-transient one or a timeout starts the timer if it is not running; failover engages once the timer
    (started now or earlier) has run ``failover_interval``, whatever the class of this latest failure.
    """
    error_class = outcome.failed_with
    if error_class is ErrorClass.MESSAGE_PERMANENT:
        return ()
    changes: list[PairedChange] = [RecordError(now, outcome.error or error_class.value)]
    starts_timer = error_class is not ErrorClass.TRANSIENT or outcome.timeout
    if starts_timer and state.failing_since is None:
        changes.append(StartTimer(now))
    after = apply_changes(state, changes)
    if not after.failed_over and failover_due(after, now, policy):
        reason = f"no successful send for {policy.failover_interval:g}s: {outcome.error or error_class.value}"
        changes.append(EngageFailover(now, reason))
    return tuple(changes)


def ping_due(state: PairedState, now: float, policy: FailoverPolicy) -> bool:
    """A failed-over entity gets a ping every ``ping_primary_interval``."""
    if not state.failed_over:
        return False
    return state.last_ping_at is None or now - state.last_ping_at >= policy.ping_primary_interval


def on_ping(outcome: Outcome, now: float) -> tuple[PairedChange, ...]:
    """A ping's changes: success makes the entity available again at once."""
    if outcome.ok:
        return RecordPing(now), MarkAvailable(now, "ping accepted by the primary")
    return RecordPing(now), RecordError(now, outcome.error or outcome.failed_with.value)


@dataclass(frozen=True)
class PingMessage:
    """The ping to send: empty body, ping content type, TTL 1 s, a random SessionId.

    In ``schedule`` mode it is scheduled ``PING_SCHEDULE_AHEAD`` in the future and cancelled at once, so no
    receiver ever sees it: to Service Bus and today's SDKs a plain ping is an ordinary message, handed to any
    receiver that does not drop it itself (the bridge's receiver does, ``bridge.core.receiving``).
    """

    session_id: str
    content_type: str = PING_CONTENT_TYPE
    time_to_live: float = PING_TIME_TO_LIVE
    scheduled_enqueue_time_utc: datetime | None = None
    cancel_after_schedule: bool = False


def ping_message(mode: PingMode, session_id: str, now: float) -> PingMessage:
    """The ping for ``mode``; ``session_id`` comes from the caller's random source (e.g. ``uuid4().hex``)."""
    if mode == "message":
        return PingMessage(session_id=session_id)
    when = datetime.fromtimestamp(now, tz=UTC) + PING_SCHEDULE_AHEAD
    return PingMessage(session_id=session_id, scheduled_enqueue_time_utc=when, cancel_after_schedule=True)


def _empty_removed() -> Mapping[int, float]:
    return MappingProxyType({})


@dataclass(frozen=True)
class BacklogRotation:
    """Which of ``count`` backlog queues left the rotation, and when (shared by all workers)."""

    count: int
    removed: Mapping[int, float] = field(default_factory=_empty_removed, hash=False)
    refused: frozenset[int] = frozenset()
    """Removed queues whose last failure was the namespace's address refusing connections."""

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError("backlog queue count must be at least 1")
        object.__setattr__(self, "removed", MappingProxyType(dict(self.removed)))

    def in_rotation(
        self, now: float, readmit_after: float | None, accepting: bool = False
    ) -> tuple[int, ...]:
        """Indexes in rotation: one removed ``readmit_after`` s ago or more is back, and one removed because
        the address refused connections once it is ``accepting`` again (else the outbox waited up to
        ``readmit_after`` after every outage of the secondary, however short)."""
        out = []
        for index in range(self.count):
            removed_at = self.removed.get(index)
            if (
                removed_at is None
                or (readmit_after is not None and now - removed_at >= readmit_after)
                or (accepting and index in self.refused)
            ):
                out.append(index)
        return tuple(out)

    def refused_out(self, now: float, readmit_after: float | None) -> bool:
        """Whether a queue is out because its address refused (the adapter probes it for ``accepting``)."""
        back = self.in_rotation(now, readmit_after)
        return any(index not in back for index in self.refused)

    def apply(self, change: RemoveFromRotation) -> BacklogRotation:
        """The rotation after ``change`` (the adapter's HSET)."""
        refused = self.refused | {change.index} if change.refused else self.refused - {change.index}
        return replace(self, removed={**self.removed, change.index: change.at}, refused=refused)

    def to_fields(self) -> dict[str, str]:
        """``{index: removed_at, "<index>.refused": "1"|"0"}`` (the count comes from settings)."""
        out = {str(index): repr(at) for index, at in self.removed.items()}
        out.update({f"{index}.refused": "1" if index in self.refused else "0" for index in self.removed})
        return out

    @classmethod
    def from_fields(cls, count: int, fields: FieldMap) -> BacklogRotation:
        """Inverse of ``to_fields``; indexes outside ``count`` (a smaller count now) are ignored."""
        data = decode_fields(fields)
        removed = {int(k): float(v) for k, v in data.items() if k.isdigit() and int(k) < count}
        refused = frozenset(i for i in removed if data.get(f"{i}.refused") == "1")
        return cls(count=count, removed=removed, refused=refused)


def choose_backlog(
    rotation: BacklogRotation,
    now: float,
    rand: Rand,
    current: int | None = None,
    readmit_after: float | None = None,
    *,
    accepting: bool = False,
) -> int | None:
    """The backlog queue this worker sends to: its ``current`` one if still in rotation, else a random pick.

    None when every queue left the rotation: the message stays in the outbox and the error is recorded.
    """
    candidates = rotation.in_rotation(now, readmit_after, accepting)
    if not candidates:
        return None
    if current is not None and current in candidates:
        return current
    pick = int(min(0.999999999, max(0.0, rand())) * len(candidates))
    return candidates[pick]


def on_backlog_failure(index: int, outcome: Outcome, now: float) -> RemoveFromRotation | None:
    """A failed backlog send removes the queue from the rotation, unless the message was at fault."""
    if outcome.failed_with is ErrorClass.MESSAGE_PERMANENT:
        return None
    error = outcome.error or outcome.failed_with.value
    return RemoveFromRotation(index, now, error, refused=outcome.address_refused)


def rendezvous_backlog(key: str, candidates: Sequence[int]) -> int | None:
    """The backlog queue of ``key`` among ``candidates`` (rendezvous hashing): every worker picks the same
    one, and a queue leaving the candidates moves only the keys that were on it. None without candidates."""
    if not candidates:
        return None

    def weight(index: int) -> tuple[bytes, int]:
        return hashlib.blake2b(f"{index}\x00{key}".encode(), digest_size=8).digest(), index

    return max(candidates, key=weight)
