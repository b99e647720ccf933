"""Lua scripts and the one way every adapter runs them.

A script runs by ``EVALSHA`` (the client sends 40 bytes instead of the text). A server that does not know
the script yet (fresh start, restart without persistence, failover to a replica, a cluster node added,
``SCRIPT FLUSH``) answers ``NOSCRIPT`` *without running anything*, so the one strategy everywhere is: load
the text with ``SCRIPT LOAD`` (on a cluster, into every primary) and send the same call again, once.
``SCRIPT LOAD`` rather than ``EVAL``: a loaded script stays cached for every later caller, while Redis 7.4+
may evict scripts that arrived by ``EVAL``. A second ``NOSCRIPT`` in a row is a real failure and
propagates.

Pipelines follow the same rule with ``is_noscript`` (which replies to re-send) and ``load`` /
``load_async``. A script that must run together with other commands does all of it itself (as
``bridge.outbox.scripts.MOVE`` does) rather than being queued in a ``MULTI`` beside them, where a refused
call could not be sent again on its own.

Driver errors propagate from here; callers wrap the calls in ``bridge.redis.errors.driver_errors``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.typing import EncodableT

from bridge.redis.types import AsyncRedis, SyncRedis

Arg = EncodableT
"""One script argument: text, bytes or a number (redis-py sends a number as its decimal text)."""


@dataclass(frozen=True)
class LuaScript:
    """Script text and its SHA-1 (what ``EVALSHA`` needs), computed once."""

    text: str
    sha: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # SHA-1 hex digest of the text, as Redis computes it; hashing a 4 KB script on every call cost more
        # than a whole message's encoding.
        object.__setattr__(self, "sha", hashlib.sha1(self.text.encode(), usedforsecurity=False).hexdigest())


def is_noscript(reply: object) -> bool:
    """True for a pipelined reply that is ``NOSCRIPT`` (the call did nothing; load and send it again)."""
    return isinstance(reply, redis.exceptions.NoScriptError)


def load(client: SyncRedis, script: LuaScript) -> None:
    """``SCRIPT LOAD`` (every primary of a cluster)."""
    client.script_load(script.text)


async def load_async(client: AsyncRedis, script: LuaScript) -> None:
    """The asyncio counterpart of ``load``."""
    await client.script_load(script.text)


def run_script(client: SyncRedis, script: LuaScript, keys: Sequence[str], args: Sequence[Arg]) -> Any:
    """Run ``script`` and return its reply; on ``NOSCRIPT``, load it and run it again once."""
    try:
        return client.evalsha(script.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        load(client, script)
    return client.evalsha(script.sha, len(keys), *keys, *args)


async def run_script_async(
    client: AsyncRedis, script: LuaScript, keys: Sequence[str], args: Sequence[Arg]
) -> Any:
    """The asyncio counterpart of ``run_script`` (same strategy)."""
    try:
        return await client.evalsha(script.sha, len(keys), *keys, *args)
    except redis.exceptions.NoScriptError:
        await load_async(client, script)
    return await client.evalsha(script.sha, len(keys), *keys, *args)
