"""Many calls of one Lua script in one round trip per server, on a single server or a Cluster.

redis-py's cluster pipeline refuses ``EVALSHA`` (``RedisClusterException``: the command is blocked in
cluster pipelines), so a Cluster's calls are grouped by the node that serves each call's key and sent
through a plain pipeline on that node's own connection pool. What a node cannot answer is kept apart per
call: a call whose slot moved (``MOVED``/``ASK``) or whose node lost the script (``NOSCRIPT``) is run
again on its own through the cluster client, which follows the redirection and loads the script; the
calls of a node that is unreachable are answered with the error, and the client's slot table is refreshed
for the next round. A node's failure never fails the calls of the other nodes.

Driver errors are returned in place of replies (the caller decides per call); none is raised, except the
translated ``StateStoreUnavailableError`` when a single server fails as a whole.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import redis

from bridge.redis.connection import is_cluster
from bridge.redis.errors import DRIVER_ERRORS, driver_errors
from bridge.redis.scripts import Arg, LuaScript, load, run_script
from bridge.redis.types import SyncRedis

log = logging.getLogger(__name__)

Call = tuple[str, Sequence[Arg]]
"""One script call: its one key, and its arguments."""

_RERUN = (redis.exceptions.NoScriptError, redis.exceptions.MovedError, redis.exceptions.AskError)


def run_script_many(client: SyncRedis, script: LuaScript, calls: Sequence[Call]) -> list[Any]:
    """The reply of each call, or the driver error it met (per call, in order)."""
    if not calls:
        return []
    if not is_cluster(client):
        with driver_errors():
            load(client, script)
            got = _pipelined(client, script, calls)
        return [
            _rerun(client, script, call) if isinstance(reply, _RERUN) else reply
            for reply, call in zip(got, calls, strict=True)
        ]
    return _per_node(client, script, calls)


def _pipelined(client: Any, script: LuaScript, calls: Sequence[Call]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for key, args in calls:
        pipe.evalsha(script.sha, 1, key, *args)
    replies: list[Any] = pipe.execute(raise_on_error=False)
    return replies


def _per_node(client: Any, script: LuaScript, calls: Sequence[Call]) -> list[Any]:
    replies: list[Any] = [None] * len(calls)
    groups: dict[str, list[int]] = {}
    nodes: dict[str, Any] = {}
    for index, (key, _) in enumerate(calls):
        try:
            node = client.get_node_from_key(key)
        except DRIVER_ERRORS as exc:  # a slot nobody serves now (a failover under way)
            replies[index] = exc
            continue
        nodes[node.name] = node
        groups.setdefault(node.name, []).append(index)
    stale = False
    for name, indexes in groups.items():
        try:
            node_client = client.get_redis_connection(nodes[name])
            got = _pipelined(node_client, script, [calls[i] for i in indexes])
        except DRIVER_ERRORS as exc:
            log.info("Redis Cluster node %s did not answer %d script calls: %s", name, len(indexes), exc)
            stale = True
            got = [exc] * len(indexes)
        for index, reply in zip(indexes, got, strict=True):
            replies[index] = _rerun(client, script, calls[index]) if isinstance(reply, _RERUN) else reply
    if stale:
        _refresh_slots(client)
    return replies


def _rerun(client: Any, script: LuaScript, call: Call) -> Any:
    """One call through the cluster client (it follows ``MOVED``/``ASK``; ``run_script`` loads a missing
    script); its error in place of the reply."""
    key, args = call
    try:
        return run_script(client, script, [key], args)
    except DRIVER_ERRORS as exc:
        return exc


def _refresh_slots(client: Any) -> None:
    """Read the slot table again (a dead master's slots move to its promoted replica)."""
    try:
        client.nodes_manager.initialize()
    except DRIVER_ERRORS as exc:
        log.info("Redis Cluster slot table not refreshed: %s", exc)
