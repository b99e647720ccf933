"""An owner-checked lease on one Redis key: at most one holder at a time, and a dead holder's lease expires.

A Redis primitive every store may use (the outbox's Redis-door mover, the shard drain leases and named
leases of ``bridge.state.lease``, the journal roll), so it lives here, below them all. The holder is a
string the caller chooses (e.g. ``<host>:<pid>:<uuid>``); every operation is a Lua script that compares it
first, so a process whose lease expired and was taken over can neither renew nor release the new holder's
lease (the classic ``GET`` then ``DEL`` race). The TTL is the longest a crashed holder blocks others; renew
well inside it (a third is customary). TTLs are whole milliseconds, as ``SET ... PX`` takes them.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bridge.redis.errors import driver_errors
from bridge.redis.keys import tagged
from bridge.redis.pipelined import PipelinedRead
from bridge.redis.scripts import LuaScript, run_script
from bridge.redis.types import SyncRedis

# KEYS: lease key. ARGV: owner, ttl_ms. Reply 1 when ``owner`` holds the lease afterwards.
# Taking a lease one already holds refreshes it, so a retried acquire is not refused by its own success.
ACQUIRE = LuaScript(
    """#!lua
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if holder then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
)

# KEYS: lease key. ARGV: owner, ttl_ms. Reply 1 when renewed; an expired or foreign lease is not taken.
RENEW = LuaScript(
    """#!lua
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""
)

# KEYS: lease key. ARGV: owner. Reply 1 when released; only the holder may release.
RELEASE = LuaScript(
    """#!lua
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""
)


def named_lease_key(name: str) -> str:
    """The key of the lease called ``name``: ``bridge:{lease:<name>}``, alone in its slot."""
    return tagged("lease:" + name)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def named_holders(names: Sequence[str]) -> PipelinedRead[dict[str, str]]:
    """Who holds each of the named leases ``names`` now (name -> owner; a free lease is left out), as a
    read on a shared pipeline: what ``Lease.holder`` answers, for many leases in one round trip."""

    def queue(pipe: Any) -> None:
        for name in names:
            pipe.get(named_lease_key(name))

    def parse(replies: Sequence[Any]) -> dict[str, str]:
        return {name: _text(owner) for name, owner in zip(names, replies, strict=True) if owner is not None}

    return PipelinedRead(queue, parse)


def _checked(ttl_ms: int) -> int:
    # PX 0 or a negative PX is an error in Redis, and a fraction would be refused as "not an integer".
    if int(ttl_ms) != ttl_ms or ttl_ms <= 0:
        raise ValueError("a lease TTL must be a positive whole number of milliseconds")
    return int(ttl_ms)


class Lease:
    """A lease on ``key``; ``Lease.named`` builds one from a name in the ``bridge:{lease:<name>}`` space."""

    def __init__(self, client: SyncRedis, key: str) -> None:
        self.client = client
        self.key = key

    @classmethod
    def named(cls, client: SyncRedis, name: str) -> Lease:
        """The lease called ``name`` (e.g. ``syphon:<backlog queue path>``, ``beat``)."""
        return cls(client, named_lease_key(name))

    def acquire(self, owner: str, ttl_ms: int) -> bool:
        """Take the lease for ``ttl_ms``; True when ``owner`` holds it now (re-acquiring refreshes it)."""
        args: list[str | int] = [owner, _checked(ttl_ms)]
        with driver_errors():
            return int(run_script(self.client, ACQUIRE, [self.key], args)) == 1

    def renew(self, owner: str, ttl_ms: int) -> bool:
        """Extend the lease to ``ttl_ms`` from now; False when ``owner`` no longer holds it."""
        args: list[str | int] = [owner, _checked(ttl_ms)]
        with driver_errors():
            return int(run_script(self.client, RENEW, [self.key], args)) == 1

    def release(self, owner: str) -> bool:
        """Give the lease up; False (and nothing deleted) when ``owner`` does not hold it."""
        with driver_errors():
            return int(run_script(self.client, RELEASE, [self.key], [owner])) == 1

    def holder(self) -> str | None:
        """Who holds the lease now, None when free."""
        with driver_errors():
            value = self.client.get(self.key)
        return None if value is None else _text(value)
