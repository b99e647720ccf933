"""Fault state of one local namespace: what the fault control has switched on, and for which scope.

Pure state: nothing here sleeps, closes sockets or reads a clock. The server asks ``for_namespace()`` when
it accepts a connection and ``for_entity(path)`` when a link, a transfer or a CBS request names an entity,
and acts on the answer; it ``subscribe``-s to changes so it can close connections the moment an outage
starts. ``disaster`` is not a state: the controller drops all data at once, so it is not modelled here.

Kinds (``FaultKind``):

- ``outage``: close every connection and refuse new ones (namespace scope), or refuse links and CBS
  requests for one entity (entity scope).
- ``busy``: reject sends with ``com.microsoft:server-busy``, each with ``probability`` (0..1); the caller
  draws the random number (``ActiveFault.trips(rand)``) so tests can decide the outcome.
- ``stall``: accept transfers but settle them only after ``delay`` seconds, or never when ``delay`` is
  ``None``; CBS replies are delayed the same way. Acts after SASL, so clients connect normally.
- ``throttle``: Service Bus's own throttling shape. Each request (a send, a management request, a link
  attach) trips it with ``probability``; once tripped, every request of the namespace is refused with
  ``com.microsoft:server-busy`` for ``window`` seconds (the penalty window), then requests are judged
  afresh. Namespace scope only, as Azure throttles a namespace. ``PenaltyWindow`` holds the window.
- ``blackhole``: accept TCP and never answer a byte. Namespace scope only: it acts before any entity is
  named, so an entity-scoped blackhole would mean nothing and is refused.

Scopes: the whole namespace (``entity=None``) or one entity path, compared case-insensitively. A scope holds
at most one fault; setting another replaces it. Precedence in ``for_entity``: a namespace ``outage`` or
``blackhole`` always wins (the connection itself is gone); otherwise the most specific scope wins: the path
itself, then its ancestors (``t1/Subscriptions/s1`` inherits from ``t1``, ``q1/$deadletterqueue`` from
``q1``), then the namespace.

The blackhole hang (why callers must bound every attempt themselves)
---------------------------------------------------------------------
Against a blackholed endpoint the TCP connect succeeds and then nothing arrives. azure-servicebus 7.15
builds its SASL transport with ``socket_timeout=None`` (``_pyamqp/sasl.py``, passed on to
``_pyamqp/_transport.py``), so the blocking read of the protocol header waits forever. Measured (see
``docs/servicebus-sdk.md``, "Hazard"): ``send_messages`` hangs indefinitely even with ``timeout=3`` and
``retry_total=0``, and no exception is ever raised. Code that talks to a namespace must therefore run each
attempt under its own deadline (a thread or process it can abandon; ``bridge.errors.AttemptDeadlineExceeded``)
and discard the client afterwards. A stall is the
milder cousin: it acts after SASL, so the SDK's ``timeout=`` fires (``OperationTimeoutError``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from bridge.emulator.errors import ArgumentError

log = logging.getLogger(__name__)


class FaultKind(StrEnum):
    """What a fault does (see the module docstring)."""

    OUTAGE = "outage"
    BUSY = "busy"
    STALL = "stall"
    BLACKHOLE = "blackhole"
    THROTTLE = "throttle"


@dataclass(frozen=True, slots=True)
class ActiveFault:
    """One switched-on fault: its kind, scope (``entity`` ``None`` = namespace) and parameters."""

    kind: FaultKind
    entity: str | None = None
    probability: float = 1.0
    delay: float | None = None
    window: float | None = None

    def trips(self, rand: Callable[[], float]) -> bool:
        """Whether this fault hits the current operation; only ``busy`` and ``throttle`` are probabilistic."""
        if self.kind not in (FaultKind.BUSY, FaultKind.THROTTLE):
            return True
        if self.probability >= 1.0:
            return True
        return self.probability > 0.0 and rand() < self.probability

    def to_json(self) -> dict[str, Any]:
        """A JSON-able view (for ``/faults`` and ``status``)."""
        return {
            "fault": self.kind.value,
            "entity": self.entity,
            "probability": self.probability,
            "delay": self.delay,
            "window": self.window,
        }


@dataclass(frozen=True, slots=True)
class FaultChange:
    """What one ``set`` or ``clear`` did: faults that started and faults that ended."""

    started: tuple[ActiveFault, ...] = ()
    ended: tuple[ActiveFault, ...] = ()


Listener = Callable[[FaultChange], None]


class FaultState:
    """The faults of one namespace, keyed by scope; validated input only, listeners told of every change."""

    def __init__(self) -> None:
        self._namespace: ActiveFault | None = None
        self._entities: dict[str, ActiveFault] = {}
        self._listeners: list[Listener] = []

    def set(
        self,
        kind: FaultKind | str,
        entity: str | None = None,
        probability: float | None = 1.0,
        delay: float | None = None,
        window: float | None = None,
    ) -> ActiveFault:
        """Switch a fault on for a scope (replacing that scope's fault); bad input changes nothing."""
        fault = _validated(kind, entity, probability, delay, window)
        if fault.entity is None:
            replaced, self._namespace = self._namespace, fault
        else:
            replaced = self._entities.get(_key(fault.entity))
            self._entities[_key(fault.entity)] = fault
        log.warning("fault %s switched on for %s", fault.kind.value, fault.entity or "the namespace")
        self._notify(FaultChange(started=(fault,), ended=(replaced,) if replaced else ()))
        return fault

    def clear(self, entity: str | None = None) -> tuple[ActiveFault, ...]:
        """Restore: ``entity=None`` clears every fault, a path clears only that entity's scope."""
        if entity is None:
            ended = tuple(f for f in (self._namespace, *self._entities.values()) if f is not None)
            self._namespace = None
            self._entities.clear()
        else:
            removed = self._entities.pop(_key(_checked_entity(entity)), None)
            ended = (removed,) if removed else ()
        if ended:
            log.warning("faults cleared: %s", ", ".join(f"{f.kind.value}@{f.entity or '*'}" for f in ended))
            self._notify(FaultChange(ended=ended))
        return ended

    def for_namespace(self) -> ActiveFault | None:
        """The namespace-scoped fault, if any (what a new connection meets)."""
        return self._namespace

    def for_entity(self, path: str) -> ActiveFault | None:
        """The fault that applies to an operation on ``path`` (precedence in the module docstring)."""
        namespace = self._namespace
        if namespace is not None and namespace.kind in (FaultKind.OUTAGE, FaultKind.BLACKHOLE):
            return namespace
        if self._entities:
            segments = _key(path).split("/")
            for end in range(len(segments), 0, -1):
                fault = self._entities.get("/".join(segments[:end]))
                if fault is not None:
                    return fault
        return namespace

    def active(self) -> list[ActiveFault]:
        """Every switched-on fault, namespace scope first, then entities by path."""
        head = [self._namespace] if self._namespace else []
        return head + [self._entities[k] for k in sorted(self._entities)]

    def snapshot(self) -> dict[str, Any]:
        """A JSON-able view: ``{"namespace": fault|None, "entities": {path: fault}}``."""
        return {
            "namespace": self._namespace.to_json() if self._namespace else None,
            "entities": {f.entity: f.to_json() for f in self.active() if f.entity is not None},
        }

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` after every change; returns a function that unsubscribes it."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def _notify(self, change: FaultChange) -> None:
        # The state has already changed; one failing listener must not keep the others from hearing it.
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                log.exception("fault listener %r failed", listener)


def parse_kind(kind: FaultKind | str) -> FaultKind:
    """The ``FaultKind`` named by ``kind`` or ``ArgumentError`` listing the known kinds."""
    if isinstance(kind, FaultKind):
        return kind
    try:
        return FaultKind(kind)
    except ValueError:
        known = ", ".join(k.value for k in FaultKind)
        raise ArgumentError(f"fault: unknown kind {kind!r} (known: {known})") from None


def _validated(
    kind: FaultKind | str,
    entity: str | None,
    probability: float | None,
    delay: float | None,
    window: float | None = None,
) -> ActiveFault:
    parsed = parse_kind(kind)
    if entity is not None:
        entity = _checked_entity(entity)
        if parsed in (FaultKind.BLACKHOLE, FaultKind.THROTTLE):
            raise ArgumentError(f"entity: {parsed.value} applies to the whole namespace only")
    if probability is None:
        probability = 1.0
    if isinstance(probability, bool) or not isinstance(probability, int | float):
        raise ArgumentError("probability: must be a number between 0 and 1")
    if math.isnan(probability) or not 0.0 <= probability <= 1.0:
        raise ArgumentError(f"probability: {probability} is outside 0..1")
    if parsed not in (FaultKind.BUSY, FaultKind.THROTTLE) and probability != 1.0:
        raise ArgumentError("probability: applies to busy and throttle only")
    if delay is not None:
        if isinstance(delay, bool) or not isinstance(delay, int | float):
            raise ArgumentError("delay: must be a number of seconds")
        if math.isnan(delay) or math.isinf(delay) or delay < 0:
            raise ArgumentError(f"delay: {delay} is not a non-negative number of seconds")
        if parsed is not FaultKind.STALL:
            raise ArgumentError("delay: applies to stall only")
    checked_delay = None if delay is None else float(delay)
    return ActiveFault(parsed, entity, float(probability), checked_delay, _checked_window(parsed, window))


def _checked_window(kind: FaultKind, window: float | None) -> float | None:
    if window is None:
        if kind is FaultKind.THROTTLE:
            raise ArgumentError("window: required for throttle (seconds every request is refused)")
        return None
    if isinstance(window, bool) or not isinstance(window, int | float):
        raise ArgumentError("window: must be a number of seconds")
    if math.isnan(window) or math.isinf(window) or window <= 0:
        raise ArgumentError(f"window: {window} is not a positive number of seconds")
    if kind is not FaultKind.THROTTLE:
        raise ArgumentError("window: applies to throttle only")
    return float(window)


@dataclass(slots=True)
class PenaltyWindow:
    """The penalty window of a ``throttle`` fault: until when every request of the namespace is refused."""

    until: float = 0.0

    def refuses(self, fault: ActiveFault | None, now: float, rand: Callable[[], float]) -> bool:
        """Whether a request at ``now`` is refused; a tripping request opens the window."""
        if fault is None or fault.kind is not FaultKind.THROTTLE or fault.window is None:
            return False
        if now < self.until:
            return True
        if fault.trips(rand):
            self.until = now + fault.window
            return True
        return False

    def remaining(self, now: float) -> float:
        """Seconds left in the window (0 when none is open)."""
        return max(0.0, self.until - now)


def _checked_entity(entity: str) -> str:
    if not isinstance(entity, str) or not entity.strip("/ "):
        raise ArgumentError("entity: must be a non-empty entity path")
    return entity.strip("/ ")


def _key(path: str) -> str:
    return path.strip("/ ").lower()
