"""Capped exponential backoff with full jitter, as a pure function.

Workers that cannot deliver an outbox entry leave it where it is and come back after ``compute_backoff``
seconds. Full jitter (a uniform draw between 0 and the capped exponential) spreads the retries of many
workers that failed at the same moment, so a namespace coming back is not hit by all of them at once.

The parameter names follow azure-servicebus's ``retry_backoff_factor`` (the first delay) and
``retry_backoff_max`` (the cap); the random source is passed in so tests are exact and nothing here sleeps.

A backoff is a guess at how long a namespace stays down, and after a long outage it is at its cap: a shard
that failed just before the namespace came back would sit out up to ``retry_backoff_max`` seconds more for
nothing. So a backoff ends early once a namespace it waits for (``bridge.core.seen_back``) is *seen back* — a
send accepted after failures, a probe or a ping that got through, by any worker (``bridge.state.resume``) — or
when the shard is this second's *scout*, the one shard of the deployment that may try before its time
(``scout_due``). ``resume_at`` says when a woken shard may try: what the backoff must keep (``floor``: an
inherited abandoned send's wait) still holds. The jitter still spreads the retries while nothing is known;
what a namespace seen back gets at once is one turn of each shard waiting for it, which the pool's fixed
number of threads bounds.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

Rand = Callable[[], float]
"""A source of floats in [0, 1), e.g. ``random.Random(seed).random``."""


def backoff_ceiling(attempt: int, base: float, factor: float, cap: float) -> float:
    """The largest delay for ``attempt`` (0 = first retry): ``min(cap, base * factor**attempt)``.

    Non-decreasing in ``attempt`` for ``factor >= 1`` and never above ``cap``, even for attempts so large
    that the power would overflow a float.
    """
    if attempt < 0:
        raise ValueError("attempt must not be negative")
    if base < 0 or cap < 0:
        raise ValueError("base and cap must not be negative")
    if factor < 1:
        raise ValueError("factor must be at least 1")
    try:
        raw = base * float(factor) ** attempt
    except OverflowError:
        return cap
    return min(cap, raw)


def compute_backoff(attempt: int, base: float, factor: float, cap: float, rand: Rand) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): a uniform draw in [0, ceiling].

    ``rand()`` must return a float in [0, 1]; values outside are clamped so a bad source cannot produce a
    negative delay or one above the cap.
    """
    ceiling = backoff_ceiling(attempt, base, factor, cap)
    draw = min(1.0, max(0.0, rand()))
    return ceiling * draw


@dataclass(frozen=True)
class BackoffPolicy:
    """Backoff settings bundled for the decision functions (names as in azure-servicebus)."""

    retry_backoff_factor: float = 0.5
    retry_backoff_max: float = 30.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        backoff_ceiling(0, self.retry_backoff_factor, self.factor, self.retry_backoff_max)

    def delay(self, attempt: int, rand: Rand) -> float:
        """``compute_backoff`` with this policy's parameters."""
        return compute_backoff(attempt, self.retry_backoff_factor, self.factor, self.retry_backoff_max, rand)

    def ceiling(self, attempt: int) -> float:
        """The largest delay this policy can give for ``attempt``."""
        return backoff_ceiling(attempt, self.retry_backoff_factor, self.factor, self.retry_backoff_max)


def resume_at(not_before: float | None, floor: float | None, now: float) -> float | None:
    """When a shard that backs off until ``not_before`` may try again, now that a namespace was seen back.

    ``floor`` is the earliest its backoff may end (``bridge.core.settle.Stop.floor``; None: the wait is
    not a backoff and is kept). Returns the new time (None: at once), or ``not_before`` unchanged.
    """
    if floor is None or not_before is None:
        return not_before
    if floor <= now:
        return None
    return min(not_before, floor)


def scout_due(last: float | None, now: float, interval: float | None) -> bool:
    """Whether this process may ask for the deployment's scout again: ``interval`` seconds after its last
    ask (None: scouting is off)."""
    if interval is None:
        return False
    return last is None or not 0 <= now - last < interval
