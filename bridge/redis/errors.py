"""Driver errors become bridge errors here, at the Redis edge, and nowhere else.

redis-py raises its own exception tree (``ConnectionError``, ``ReadOnlyError``, ``ResponseError``, cluster
errors that are not ``RedisError`` at all); callers above ``bridge.redis`` catch only ``bridge.errors``.
Shared state (roles, leases, retry times, status) fails as the neutral ``StateStoreUnavailableError``; the
outbox passes ``OutboxUnavailableError`` (a subclass) so a refused write keeps its own HTTP problem type.
Messages name the exception type, never the URL or a password.

``driver_errors`` is a plain context manager: an exception raised by an ``await`` inside the block passes
through it as well, so the asyncio adapters use the same one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import redis

from bridge.errors import BackpressureError, OutboxUnavailableError, StateStoreUnavailableError

DRIVER_ERRORS: tuple[type[Exception], ...] = (
    redis.exceptions.RedisError,
    redis.exceptions.RedisClusterException,
)
"""Every exception redis-py raises on purpose (the cluster client's own ones are not ``RedisError``)."""


def translate(
    exc: BaseException, unavailable: type[StateStoreUnavailableError] = StateStoreUnavailableError
) -> Exception:
    """The bridge error for a driver error (the message never includes the URL or a password).

    Out of memory is back-pressure (retry soon, the drainers are freeing space); anything else means Redis
    could not do it now: ``unavailable`` (the neutral error, or the outbox's own).
    """
    # redis-py raises ``OutOfMemoryError`` (its message without the ``OOM`` code) for scripts and commands
    # refused under maxmemory; a bare ``ResponseError`` starting with ``OOM`` comes from older versions.
    if isinstance(exc, redis.exceptions.OutOfMemoryError) or (
        isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("OOM")
    ):
        return BackpressureError("Redis is out of memory (maxmemory reached)", retry_after=1.0)
    if isinstance(exc, redis.exceptions.ReadOnlyError):
        return unavailable("Redis is read-only (a replica, or failover in progress)")
    if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
        return unavailable(f"Redis is unreachable ({type(exc).__name__})")
    if isinstance(exc, DRIVER_ERRORS):
        verb = "the write" if issubclass(unavailable, OutboxUnavailableError) else "the command"
        return unavailable(f"Redis refused {verb} ({type(exc).__name__})")
    return exc if isinstance(exc, Exception) else RuntimeError(str(exc))


@contextmanager
def driver_errors(
    unavailable: type[StateStoreUnavailableError] = StateStoreUnavailableError,
) -> Iterator[None]:
    """Translate redis-py errors raised inside the block (sync calls, or awaits in an async function)."""
    try:
        yield
    except DRIVER_ERRORS as exc:
        raise translate(exc, unavailable) from None
