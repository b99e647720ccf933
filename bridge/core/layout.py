"""An entity's outbox layout while its shard count changes (``docs/architecture.md``; pure, no I/O).

The shard of a keyed message is CRC-32 of its key modulo the shard count, so a new count moves most keys to
another shard. Done naively, entries in shards at or above a lower count would never be read again, and a
key's new entries (in its new shard) could be sent before its old ones (still in the old shard). So the
count in force is recorded in Redis, every writer checks it atomically with its write (``scripts.WRITE``),
and a change is a *migration*:

1. It starts in one atomic step that records the new count (``shards``), the old one (``previous``) and,
   per old shard, the id of its newest entry at that moment (``boundaries``). From then on every writer
   uses the new count; everything at or below a boundary was written under the old layout.
2. Drainers read every stream of either layout (``read_count``). An old-layout entry goes as usual. A
   new-layout entry waits (``must_wait``) until no old-layout entry is left in any old shard — only then can
   no key's new message overtake its old one.
3. When the old layout is drained (``drained``) the migration ends: ``previous`` and the boundaries go, and
   streams beyond the new count are no longer read (they are empty).

A second change while one migration runs waits for it to end (``next_migration``); the sweeper warns.
Entries of an empty old shard have no boundary: there is nothing to wait for there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from bridge.core.hash_fields import FieldMap, decode_fields


def stream_id(entry_id: str) -> tuple[int, int]:
    """A stream entry id ``<ms>-<seq>`` as a comparable pair."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _frozen(value: Mapping[int, str] | None = None) -> Mapping[int, str]:
    return MappingProxyType(dict(value or {}))


@dataclass(frozen=True)
class Layout:
    """The recorded layout of one entity's outbox."""

    shards: int
    previous: int | None = None
    boundaries: Mapping[int, str] = field(default_factory=_frozen, hash=False)

    def __post_init__(self) -> None:
        if self.shards < 1 or (self.previous is not None and self.previous < 1):
            raise ValueError("an outbox has at least one shard")
        object.__setattr__(self, "boundaries", _frozen(self.boundaries))

    @property
    def migrating(self) -> bool:
        """A change of the shard count is in progress."""
        return self.previous is not None

    @property
    def read_count(self) -> int:
        """How many shard streams drainers read: both layouts' while migrating."""
        return max(self.shards, self.previous or 0)

    def is_old(self, shard: int, entry_id: str) -> bool:
        """``entry_id`` of ``shard`` was written under the previous layout."""
        boundary = self.boundaries.get(shard)
        return boundary is not None and stream_id(entry_id) <= stream_id(boundary)

    def must_wait(self, shard: int, entry_id: str) -> bool:
        """A new-layout entry while the old layout still has entries: it must not go yet."""
        return self.migrating and bool(self.boundaries) and not self.is_old(shard, entry_id)

    def to_fields(self) -> dict[str, str]:
        """The Redis hash: ``shards``, ``previous``, ``b:<i>``."""
        out = {"shards": str(self.shards)}
        if self.previous is not None:
            out["previous"] = str(self.previous)
        out.update({f"b:{i}": entry for i, entry in self.boundaries.items()})
        return out

    @classmethod
    def from_fields(cls, fields: FieldMap) -> Layout | None:
        """Inverse of ``to_fields``; None when nothing is recorded."""
        data = decode_fields(fields)
        if "shards" not in data:
            return None
        previous = data.get("previous")
        boundaries = {int(k[2:]): v for k, v in data.items() if k.startswith("b:") and k[2:].isdigit()}
        return cls(int(data["shards"]), int(previous) if previous else None, boundaries)


def next_migration(layout: Layout | None, wanted: int) -> int | None:
    """The count to migrate to now: ``wanted`` when it differs and no migration runs, else None."""
    if layout is None or layout.migrating or layout.shards == wanted:
        return None
    return wanted
