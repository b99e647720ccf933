"""What news of a namespace seen back may end early: backoffs, and only the held keys that wait for it.

A namespace is *seen back* for an entity when a send there is accepted after failures, or a probe or a
ping gets through (``bridge.state.resume`` carries the news to every worker). Two kinds of wait may end:

- A shard's **backoff** (``bridge.core.backoff.resume_at``) waits for the namespaces its failed batch
  could go to next (``backoff_awaits``: both for ``passive``, ``active`` the ones its entries still lack,
  the primary for ``none``, both for ``paired``, whose failover goes to backlog queues in the secondary).
  An outage is the namespace's, not one entity's: news of one of those namespaces about *any* entity ends
  it (``ends_backoff``); news of a namespace it does not wait for costs it nothing. The scout's and the door
  watch's early try (``NOTHING``: news of nothing) ends a backoff and no hold.
- A **held key** (``bridge.core.decisions.Hold``) waits for its own entity's failover to end or for its
  backlog queue (``Hold.awaits``: the namespaces that may end it). Only news about the same entity and one
  of those namespaces decides it again; deciding a key again claims every pending entry after its first,
  so news about anything else must cost it nothing.

``everything`` stands for news that was lost before it was read (the stream keeps the last few entries
only): every wait it could have ended ends, as if each had been named.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from bridge.core.decisions import Target
from bridge.core.roles import ROLES, Role


@dataclass(frozen=True)
class SeenBack:
    """The (namespace, entity) pairs seen back since a reader last looked; ``everything``: some were lost."""

    named: frozenset[tuple[Role, str]] = frozenset()
    everything: bool = False

    @classmethod
    def of(cls, pairs: Iterable[tuple[Role, str]], *, everything: bool = False) -> SeenBack:
        """News naming ``pairs`` (and, with ``everything``, all that may have been lost)."""
        return cls(frozenset(pairs), everything)

    def __bool__(self) -> bool:
        return self.everything or bool(self.named)

    def __or__(self, other: SeenBack) -> SeenBack:
        return SeenBack(self.named | other.named, self.everything or other.everything)

    def ends_hold(self, entity: str, awaits: Collection[Role]) -> bool:
        """Whether a key of ``entity`` held until one of ``awaits`` is back is decided again now."""
        return self.everything or any((role, entity) in self.named for role in awaits)

    def ends_backoff(self, awaits: Collection[Role] | None) -> bool:
        """Whether a backoff that waits for ``awaits`` (None: not known, any) ends early now: news of one
        of them about any entity, news that was lost, or the scout's try (news of nothing)."""
        if self.everything or not self.named or awaits is None:
            return True
        return any(role in awaits for role, _ in self.named)


def backoff_awaits(mode: str, pending: Iterable[Target] = ()) -> frozenset[Role]:
    """The namespaces whose return may let a shard of ``mode`` through, after a batch whose first retried
    entry still lacked ``pending`` (empty: not known, e.g. a backoff inherited from an earlier tenure).

    ``passive``: both (the active one takes it again, or the backup does and the roles swap). ``active``:
    the ones it lacks (``all`` waits for the missing copy only). ``none``: where it goes. ``paired``: both
    (the primary ends the failover; the backlog queues are in the secondary)."""
    lacking = frozenset(target.namespace for target in pending)
    if mode in ("active", "none") and lacking:
        return lacking
    return frozenset(ROLES) if mode != "none" else frozenset({"primary"})


NOTHING = SeenBack()
"""No namespace named: the scout's or the door watch's early try (it ends a backoff, never a hold)."""
