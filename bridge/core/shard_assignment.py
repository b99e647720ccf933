"""Which outbox shards one drainer should hold: a fair share, chosen by rendezvous hashing.

Send workers own shards the way the tasks of a Kafka Connect connector own partitions: every drainer (one per
worker process) holds the leases of about ``ceil(shards / live drainers)`` shards and is the only reader of
those. Which shards a drainer prefers is decided by rendezvous (highest-random-weight) hashing of its
identity with each shard, so different drainers go for different shards first (few lost races when they
start together) and, when a drainer joins or leaves, only about a fair share of the shards changes hands.

The policy only *plans*: it says which held shards to hand over and which free ones to try, best first.
Whether a shard is free is the lease's business (an acquire attempt says so); the caller stops trying once
it holds its fair share. Pure: no I/O, no clock.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass

ShardRef = tuple[str, int]
"""(entity, shard index)."""


@dataclass(frozen=True)
class AssignmentPlan:
    """What one drainer should do now."""

    fair: int
    """How many shards it should hold."""
    release: tuple[ShardRef, ...]
    """Held shards to hand over (beyond the fair share, or no longer known)."""
    candidates: tuple[ShardRef, ...]
    """Shards not held by this drainer, best first, to try while it holds fewer than ``fair``."""


def fair_share(shards: int, drainers: int) -> int:
    """``ceil(shards / drainers)``; every shard is covered whatever the rounding (a drainer counts itself)."""
    if shards <= 0:
        return 0
    drainers = max(1, drainers)
    return -(-shards // drainers)


def weight(identity: str, shard: ShardRef) -> int:
    """The rendezvous weight of ``shard`` for drainer ``identity`` (higher: preferred)."""
    entity, index = shard
    digest = hashlib.blake2b(f"{identity}\x00{entity}\x00{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def plan_assignment(
    identity: str, shards: Iterable[ShardRef], held: Collection[ShardRef], drainers: int
) -> AssignmentPlan:
    """The plan for drainer ``identity`` holding ``held`` among ``shards`` with ``drainers`` alive."""
    known = sorted(set(shards))
    fair = fair_share(len(known), drainers)
    by_preference = sorted(known, key=lambda ref: (-weight(identity, ref), ref))
    rank = {ref: position for position, ref in enumerate(by_preference)}
    unknown = [ref for ref in held if ref not in rank]
    kept = sorted((ref for ref in held if ref in rank), key=rank.__getitem__)
    release = tuple(sorted(unknown)) + tuple(kept[fair:])
    candidates = tuple(ref for ref in by_preference if ref not in held)
    return AssignmentPlan(fair=fair, release=release, candidates=candidates if len(kept) < fair else ())
