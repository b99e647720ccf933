"""Beat high availability: how long one firing of a schedule keeps other beat processes quiet.

Two ``bridge beat`` processes may run (one per host, for availability). Each would send every periodic
task, so before sending, a beat claims the schedule's marker in Redis (``SET NX PX``); the marker lives for
``CLAIM_FRACTION`` of the interval, so the other beat, whose clock ticks at a different offset within the
same interval, finds it and stays quiet, while the next interval's firing (by either beat) finds it gone.
Celery beat fires late, never early, so 80 % leaves room for the winner's own scheduling delay.
"""

from __future__ import annotations

CLAIM_FRACTION = 0.8


def claim_ttl_ms(interval: float) -> int:
    """Milliseconds a firing of a schedule with ``interval`` seconds keeps its claim (at least 1)."""
    if interval <= 0:
        raise ValueError("a schedule interval must be positive")
    return max(1, int(interval * CLAIM_FRACTION * 1000))
