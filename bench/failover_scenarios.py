"""What a failover harness "kill" does on Sentinel, per ``--scenario``.

``kill``       the primary is killed (``kill -9``), the Sentinels promote the replica, the killed node comes
               back as its replica, with its data, and syncs.
``double``     two failovers back to back: after the first promotion the new primary is killed too, either
               before the old one is restarted (for a moment no data node runs) or a seeded fraction of a
               second after it (while it syncs, or just after); the Sentinels promote the old primary
               again, with what its disk and the sync gave it, and the second victim comes back as its
               replica.
``disk-lost``  each node loses its disk in turn, never both at once: the killed primary's data directory
               is deleted and it comes back empty and resyncs from the promoted replica; then the promoted
               replica is killed and its data directory deleted, the Sentinels promote the old primary
               again and the wiped node restarts empty and resyncs. ``replicated`` keeps every
               acknowledged message here: each was fsync'd by both nodes, and one of them always has it.
``disk-lost-early``  the promoted replica loses its disk *before* the old primary is back: killed, data
               directory deleted, restarted empty while the Sentinels still name it primary; the old
               primary then comes back as its replica and the full sync replaces the old primary's data with
               the empty set. Both copies of the acknowledged messages are gone: with one replica and
               ``wait_replicas = 1`` no durability mode survives this; it loses whatever was acknowledged and
               not yet delivered.

Each function returns the line the harness prints for the run.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time

import redis

from bridge.embedded.redis_server import RedisServer
from bridge.embedded.sentinel import SentinelRedis

SCENARIOS = ("kill", "double", "disk-lost", "disk-lost-early")
"""The ``--scenario`` choices; only ``kill`` runs on a Cluster."""
DOUBLE_GAP = 1.0
"""At most this many seconds between the old primary's restart and the second kill (``double``)."""


def restart_following(node: RedisServer, primary: RedisServer | None) -> None:
    """Start a killed data node on its port and data, as a replica of ``primary`` (which may be dead:
    the Sentinels can still promote a replica of a dead primary), or as a primary when None."""
    args = list(node.extra_args)
    if "--replicaof" in args:
        at = args.index("--replicaof")
        del args[at : at + 3]
    following = ("--replicaof", "127.0.0.1", str(primary.port)) if primary else ()
    node.extra_args = (*args, *following)
    node.start()


def wipe(node: RedisServer) -> None:
    """Delete a stopped node's data (AOF directory, RDB files), keeping its log: a lost disk."""
    for path in node.data_dir.iterdir():
        if path.name == "redis.log":
            continue
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def linked(group: SentinelRedis, node: RedisServer) -> bool:
    """True when ``node`` is a replica whose link to its primary is up (it finished a sync)."""
    with group.client(node) as client, contextlib.suppress(redis.exceptions.RedisError):
        return bool(client.info("replication").get("master_link_status") == "up")
    return False


def first_failover(group: SentinelRedis) -> tuple[RedisServer, RedisServer]:
    """Kill the primary and wait for the promotion: (the killed one, the promoted one)."""
    old = group.kill_primary()
    return old, group.wait_failover(old, timeout=60)


def kill(group: SentinelRedis, rng: random.Random) -> str:
    """The plain failover (``kill``)."""
    old, new = first_failover(group)
    group.restart_node(old)
    group.wait_synced(60)
    return f"primary :{old.port} killed, :{new.port} promoted"


def double(group: SentinelRedis, rng: random.Random) -> str:
    """Two failovers back to back (``double``)."""
    a, b = first_failover(group)
    before = rng.random() < 0.5
    gap = rng.uniform(0.0, DOUBLE_GAP)
    if before:
        b.kill()
        time.sleep(gap)
        restart_following(a, b)
        when = f"{gap:.1f}s before :{a.port} restarted"
    else:
        restart_following(a, b)
        time.sleep(gap)
        synced = linked(group, a)
        b.kill()
        when = f"{gap:.1f}s after :{a.port} restarted ({'synced' if synced else 'not yet synced'})"
    again = group.wait_failover(b, timeout=90)
    restart_following(b, again)
    group.wait_synced(60)
    return f"primary :{a.port} killed, :{b.port} promoted and killed {when}, :{again.port} promoted"


def disk_lost(group: SentinelRedis, rng: random.Random) -> str:
    """The old primary's disk, then the promoted replica's, each after the other node synced
    (``disk-lost``)."""
    a, b = first_failover(group)
    wipe(a)
    group.restart_node(a)
    group.wait_synced(60)
    time.sleep(rng.uniform(0.0, 1.0))
    # Under load the Sentinels may have failed over once more by themselves: lose the disk of the node
    # that is the primary now, never of the one that just synced from it.
    b = group.kill_primary()
    wipe(b)
    again = group.wait_failover(b, timeout=90)
    restart_following(b, again)
    group.wait_synced(60)
    return (
        f"primary :{a.port} killed, lost its disk, resynced empty; :{b.port} promoted, lost its disk;"
        f" :{again.port} promoted, :{b.port} resynced empty"
    )


def disk_lost_early(group: SentinelRedis, rng: random.Random) -> str:
    """The promoted replica loses its disk before the old primary is back (``disk-lost-early``)."""
    a, b = first_failover(group)
    time.sleep(rng.uniform(0.0, 1.0))
    b.kill()
    wipe(b)
    restart_following(b, None)
    restart_following(a, b)
    group.wait_synced(60)
    return (
        f"primary :{a.port} killed, :{b.port} promoted, lost its disk and restarted empty as primary;"
        f" :{a.port} resynced from it"
    )


SENTINEL_SCENARIOS = {
    "kill": kill,
    "double": double,
    "disk-lost": disk_lost,
    "disk-lost-early": disk_lost_early,
}
