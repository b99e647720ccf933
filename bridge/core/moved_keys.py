"""Keys that reach another outbox shard while the backlog still holds their older messages (docs/paired.md).

In ordered paired mode a shard's key map and backlog ledger (``bridge.state.backlog``) record where that
shard's keys went while failed over, and the shard sends nothing to the primary until the syphon has
passed its restore barrier in every queue its ledger names. Both are kept per outbox shard, and a change of
``outbox_shards`` moves most keys to another shard: without more, a moved key's newer messages would find
an empty ledger in their new shard and go to the primary at once, past its older ones still in a backlog
queue (or, still failed over, go to another queue that is syphoned in parallel).

So a shard looks up the keys of its batch that its own key map does not name in the key maps of the
entity's other shards (``moved_keys``). A key another shard's map names, in a queue that shard's ledger
still names, has older messages that may not be syphoned yet: the shard takes the key over — it names the
key and its queue in its own key map and ledger, so the key keeps its queue while failed over and, after a
restore, the shard's own barrier in that queue (sent after every older message of the key, which the
outbox migration of ``bridge.core.layout`` has all sent before any newer one is read) keeps the key from
the primary until the syphon has moved them. The old shard's map then forgets the key. An entry whose
queue the old ledger no longer names is stale (its barrier passed: everything before it was syphoned) and
is forgotten too. The decision depends only on the keys, never on either shard count.

A lowered count leaves the ledgers of the shards beyond it (*retired*: no drainer reads their streams once
the change has drained, nobody writes their ledgers again) waiting for barriers nobody would send. Each is
looked after by the live shard its index falls on modulo the count (``retired_ledgers``): after a restore
that shard sends the retired ledger's barriers in its name, and the syphon passing them clears the ledger
and its key map as it clears any. Only barriers are written to a retired ledger, so two senders could not
void each other's proof: a barrier still lands behind every message the retired shard ever sent.

Pure: the caller reads the maps and ledgers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class MovedKey:
    """A key of the batch that other shards' key maps name with older messages maybe still in the backlog."""

    queues: tuple[int, ...]
    """The backlog queues its older messages may wait in; the key sticks to the first."""
    shards: tuple[int, ...]
    """The shards whose key maps name it (they forget it once this shard's map names it)."""


@dataclass(frozen=True)
class MovedKeys:
    """What one shard found about the keys of its batch in the other shards' key maps."""

    keys: Mapping[str, MovedKey] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    stale: Mapping[int, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}), hash=False)
    """Shard → keys its map names in a queue its ledger no longer names (nothing left to wait for)."""

    def forget(self, taken: Iterable[str]) -> dict[int, tuple[str, ...]]:
        """Shard → the keys its map drops once the keys ``taken`` are in this shard's map: those and the
        stale ones."""
        out: dict[int, set[str]] = {shard: set(keys) for shard, keys in self.stale.items()}
        for key in taken:
            moved = self.keys.get(key)
            for shard in moved.shards if moved is not None else ():
                out.setdefault(shard, set()).add(key)
        return {shard: tuple(sorted(keys)) for shard, keys in sorted(out.items()) if keys}


NO_MOVED_KEYS = MovedKeys()


def moved_keys(
    shard: int,
    keys: Iterable[str | None],
    own: Mapping[str, int],
    maps: Mapping[int, Mapping[str, int]],
    ledgers: Mapping[int, Mapping[int, str]],
) -> MovedKeys:
    """The keys among ``keys`` that shard ``shard`` takes over: ``own`` is its key map (for these keys),
    ``maps`` the other shards' key maps and ``ledgers`` their ledgers (queue index → status)."""
    found: dict[str, MovedKey] = {}
    stale: dict[int, list[str]] = {}
    for key in sorted({k for k in keys if k is not None and k not in own}):
        queues: list[int] = []
        shards: list[int] = []
        for other in sorted(maps):
            queue = maps[other].get(key)
            if other == shard or queue is None:
                continue
            if queue in ledgers.get(other, {}):
                shards.append(other)
                if queue not in queues:
                    queues.append(queue)
            else:
                stale.setdefault(other, []).append(key)
        if queues:
            found[key] = MovedKey(tuple(queues), tuple(shards))
    return MovedKeys(MappingProxyType(found), MappingProxyType({s: tuple(keys) for s, keys in stale.items()}))


def retired_ledgers(
    shard: int, shards: int | None, ledgers: Mapping[int, Mapping[int, str]]
) -> dict[int, Mapping[int, str]]:
    """The ledgers among ``ledgers`` that shard ``shard`` sends barriers for: those of shards at or beyond
    the count in force, ``shards`` (None while a change of the count runs: no shard is retired then),
    whose index modulo the count is ``shard``."""
    if shards is None:
        return {}
    return {
        other: ledger
        for other, ledger in sorted(ledgers.items())
        if ledger and other >= shards and other % shards == shard
    }
