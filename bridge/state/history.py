"""The status page's history in Redis: the samples, the claim of each time slot, and delivery latencies.

=====================================  ===============================================================
key                                    holds
=====================================  ===============================================================
``bridge:{bridge}:history``            sorted set: one JSON sample (``bridge.core.history.Sample``)
                                       per time slot, scored by its time on Redis's clock; trimmed to
                                       the window on every write, expires when nobody samples
``bridge:{bridge}:history:slot``       string: the last slot a process claimed (``CLAIM``)
``bridge:{E}:latency``                 hash latency bucket index -> deliveries counted there, ever
                                       (``bridge.core.history.LATENCY_BOUNDS``; workers ``HINCRBY``)
=====================================  ===============================================================

Several serve processes sample, each on its own timer; ``claim`` lets exactly one of them take each
slot (a compare-and-set on the slot number), so a slot is sampled once however many run.

Connection: any blocking client from ``bridge.redis.connection.sync_client``; driver errors leave as
``StateStoreUnavailableError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import redis

from bridge.core.history import LATENCY_BOUNDS, Sample, window_start
from bridge.redis.errors import driver_errors
from bridge.redis.keys import tag
from bridge.redis.scripts import LuaScript, run_script
from bridge.redis.types import SyncRedis

SAMPLES = "bridge:{bridge}:history"
SLOT = "bridge:{bridge}:history:slot"


def latency_key(entity: str) -> str:
    """The entity's cumulative delivery-latency histogram."""
    return tag(entity) + "latency"


# KEYS: the slot key. ARGV: slot, ttl_ms. Reply 1 when this caller took the slot (no one took it or a
# later one before), else 0.
CLAIM = LuaScript(
    """#!lua
local last = tonumber(redis.call('GET', KEYS[1]) or '-1')
if last >= tonumber(ARGV[1]) then
  return 0
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class HistoryStore:
    """The samples of the last ``window`` seconds, at most ``most`` of them."""

    def __init__(self, client: SyncRedis, window: float, most: int) -> None:
        self.client = client
        self.window = window
        self.most = most

    def claim(self, slot: int) -> bool:
        """Take ``slot`` for sampling: True for exactly one caller per slot."""
        ttl = max(1000, int(self.window * 1000))
        with driver_errors():
            return bool(run_script(self.client, CLAIM, [SLOT], [slot, ttl]))

    def append(self, sample: Sample) -> None:
        """Store ``sample`` and drop what fell out of the window (by time, then by count)."""
        member = json.dumps(sample.as_json(), separators=(",", ":"))
        with driver_errors():
            pipe = self.client.pipeline(transaction=True)
            pipe.zadd(SAMPLES, {member: sample.at})
            pipe.zremrangebyscore(SAMPLES, "-inf", f"({window_start(sample.at, self.window)}")
            pipe.zremrangebyrank(SAMPLES, 0, -(self.most + 1))
            pipe.pexpire(SAMPLES, max(1000, int(self.window * 2000)))
            pipe.execute()

    def samples(self, since: float | None = None) -> list[Sample]:
        """The stored samples (from ``since`` on), oldest first."""
        with driver_errors():
            members = self.client.zrangebyscore(SAMPLES, "-inf" if since is None else since, "+inf")
        return [Sample.from_json(json.loads(_text(m))) for m in members]

    def memory(self) -> int | None:
        """Bytes the samples take in Redis (``MEMORY USAGE``; None when the server refuses it)."""
        with driver_errors():
            try:
                used = self.client.memory_usage(SAMPLES, samples=0)
            except redis.exceptions.ResponseError:  # managed servers may refuse MEMORY: the size is optional
                return None
        return None if used is None else int(used)


class LatencyStore:
    """Cumulative delivery-latency histograms, per entity, shared by every worker process."""

    def __init__(self, client: SyncRedis) -> None:
        self.client = client

    def record(self, entity: str, counts: Mapping[int, int]) -> None:
        """Add ``counts`` (bucket index -> deliveries) to the entity's histogram."""
        if not counts:
            return
        with driver_errors():
            pipe = self.client.pipeline(transaction=False)
            for index, count in counts.items():
                pipe.hincrby(latency_key(entity), str(index), count)
            pipe.execute()

    def histograms(self, entities: Sequence[str]) -> dict[str, tuple[int, ...]]:
        """Every entity's histogram, one count per bucket (``len(LATENCY_BOUNDS) + 1``)."""
        with driver_errors():
            pipe = self.client.pipeline(transaction=False)
            for entity in entities:
                pipe.hgetall(latency_key(entity))
            replies = pipe.execute() if entities else []
        out: dict[str, tuple[int, ...]] = {}
        for entity, reply in zip(entities, replies, strict=True):
            counts = [0] * (len(LATENCY_BOUNDS) + 1)
            for index, count in (reply or {}).items():
                position = int(_text(index))
                if 0 <= position < len(counts):
                    counts[position] = int(count)
            out[entity] = tuple(counts)
        return out
