"""Reading a shard's next batch while the current one is being sent.

Why: a drainer that reads new entries did everything for one batch in turn: the fenced read (a script
whose ``XREADGROUP`` Redis writes to its append-only file, fsync'd before the reply with ``appendfsync
always``), the layout check, the send, and only then the next read. At a steady rate each batch waited
for its read after the previous batch's send; a busy shard spent a tenth of its time there. The
``ReadAhead`` runs the next read (and the layout check that goes with it) on a thread of its own while
the drainer sends the current batch.

What does not change (``bridge.delivery.drainer``):

- The read is the same fenced read (``OutboxReader.read_fenced``): a tenure whose lease passed to another
  drainer reads nothing (``LeaseLostError``, raised in the drainer when it takes the read).
- The entries read ahead are pending under the tenure's consumer, as after any read. They are sent only if
  the drainer is still reading new entries when it takes them: the batch before them was settled with
  nothing of it left pending. Otherwise (a ``Retry``, a held-back layout, a hold coming due) the drainer
  drops the read and claims: the claim takes them again, in order, with the older pending entries.
- A claim never runs while a read ahead is in flight (``drop`` waits for it first): a claim that ran
  before the read took its entries would not see them, and the read after the claim would not return them
  again (they were delivered).
- In active mode the read also builds the entries' messages and packs them into batches
  (``PackedAhead``): the CPU of the next batch runs while the namespaces work on the current one. A batch
  sends them only when it is exactly those entries, to both namespaces, and the TTL each carries (what was
  left at the read) is still what is left at the send (``bridge.core.expiry.built_ttl_holds``); otherwise
  it builds its own.
- The layout is read after the entries, as the drainer always did: an entry written for a new layout was
  written after the change began, so the layout read after it shows the change.

A read in flight at the end of a turn waits in the drainer for its next turn (``close`` keeps it). The reads
run on one pool of ``THREADS`` threads per process, shared by every drainer: a thread started and joined
per turn cost a shard at a low rate (a turn per message) more than the read it saves. A drainer has at most
one read outstanding, so a read waits for a thread only when more drainers than ``THREADS`` read at once.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass

from bridge.core.layout import Layout
from bridge.core.roles import RoleState
from bridge.outbox.reader import ShardRead
from bridge.process_threads import ProcessThreads
from bridge.servicebus.messages import OutgoingMessage
from bridge.servicebus.sending import SharedBatches

THREADS = 8
"""Read-ahead threads per process (as many as ``workers.drain_threads`` by default)."""


_THREADS = ProcessThreads(THREADS, "bridge-read-ahead")


@dataclass(frozen=True)
class Ahead:
    """A read (ahead or in line): the entries (or where to wait), and the entity's layout and roles read
    just after them in the same script (none when the read found no entries)."""

    read: ShardRead
    layout: Layout | None
    roles: RoleState | None = None
    at: float = 0.0
    """When the read's reply came (the context's ``monotonic`` clock): how old its roles are when the batch
    is sent."""
    packed: PackedAhead | None = None
    """Active mode: the entries' messages, built and packed with the read (``ShardSending.pack_ahead``)."""


@dataclass(frozen=True)
class PackedAhead:
    """The messages of the entries ``entry_ids`` (in that order), built and packed into batches
    (``bridge.servicebus.sending.prepack``) on the read-ahead thread while the batch before them was in
    flight. Used only for a batch of exactly these entries going to both namespaces."""

    entry_ids: tuple[str, ...]
    messages: tuple[OutgoingMessage, ...]
    shared: SharedBatches
    time_to_live: tuple[float | None, ...]
    """The TTL each message carries: what was left of it at the read (``bridge.core.expiry``)."""


class ReadAhead:
    """One tenure's read of its next batch, on a thread of its own (see the module docstring)."""

    def __init__(self) -> None:
        self._future: Future[Ahead] | None = None
        self._done: Ahead | None = None

    @property
    def pending(self) -> bool:
        """A read was started or finished and not taken yet."""
        return self._future is not None or self._done is not None

    def start(self, read: Callable[[], Ahead]) -> None:
        """Run ``read`` now on a read-ahead thread (at most one read is outstanding)."""
        if self.pending:
            raise RuntimeError("a read ahead is outstanding")
        self._future = _THREADS.executor().submit(read)

    def take(self) -> Ahead | None:
        """The read started last, once it finished (its error raised here); None when there is none."""
        done, future = self._done, self._future
        self._done, self._future = None, None
        if future is not None:
            return future.result()
        return done

    def drop(self) -> bool:
        """Wait for an outstanding read and forget it; True when it took entries (pending now: the claim
        that must follow takes them again)."""
        ahead = self.take()
        return ahead is not None and bool(ahead.read.entries)

    def close(self, *, quiet: bool = False) -> None:
        """Wait for a read in flight (the turn ends). The read is kept for the next turn; with ``quiet``
        (another error is on its way) it is forgotten and a failure of it dropped: its entries stay
        pending, and the claim of the next take-over sends them."""
        future, self._future = self._future, None
        if quiet:
            self._done = None
            if future is not None:
                future.exception()
        elif future is not None:
            self._done = future.result()
