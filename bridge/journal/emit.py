"""What the send side journals, gathered per batch and written before the batch is settled.

Order, not a shared transaction, is what keeps the ledger exact here: a drainer writes the events of a
batch (``sent`` for every copy a namespace accepted, ``send_failed`` for every attempt that failed,
``dead_lettered`` for what it is about to move) *before* it acknowledges or moves the entries. So at any
moment an accepted message is in the outbox, or its terminal event is already in the journal: a report's
outbox snapshot can never catch a message in neither place (``bridge.ledger.live``). A drainer that dies in
between leaves a ``sent`` event for an entry still in the outbox: the next holder sends it again and the
ledger counts the second copy as a duplicate, which it is.

Paths: the first attempt of a message in a batch is ``direct`` (the active namespace), a later attempt of
the same message in the same batch ``backup``, a send to a backlog queue ``backlog``; in ``active`` mode
both copies are ``direct`` (dual sends by design).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from bridge.core import journal as J
from bridge.core.control_events import BARRIER_PATH, PING_RESULT
from bridge.core.journal import EventKind, JournalEvent, SendPath
from bridge.core.outcomes import Outcome
from bridge.core.paired import EngageFailover, MarkAvailable, RemoveFromRotation
from bridge.core.receiving import EventKind as ReceiverEventKind
from bridge.core.receiving import ReceiverEvent
from bridge.errors import StateStoreUnavailableError
from bridge.journal.keys import backlog_scope
from bridge.journal.store import JournalStore

log = logging.getLogger(__name__)


class PairedUpdate(Protocol):
    """What applying paired changes did (``bridge.state.paired.PairedUpdate``; the journal sits below
    the state package and only reads these two answers)."""

    @property
    def engaged(self) -> bool:
        """This call engaged failover."""
        ...

    @property
    def restored(self) -> bool:
        """This call ended failover."""
        ...


@dataclass
class JournalBatch:
    """Events ready to write: groups that differ only by MessageId (one template each), and the rest."""

    groups: list[tuple[JournalEvent, list[str]]] = field(default_factory=list)
    events: list[JournalEvent] = field(default_factory=list)

    def write(self, store: JournalStore | None, owner: str) -> None:
        """Append everything to ``owner``'s journal (a call per kind of content, usually one)."""
        if store is None:
            return
        if self.groups:
            store.append_groups(owner, self.groups)
        if self.events:
            store.append(owner, self.events)


class BatchJournal:
    """The journal events of one drainer batch."""

    def __init__(self, namespaces: Mapping[str, str], *, dual: bool = False) -> None:
        self.namespaces = namespaces
        self.dual = dual
        self._pending = JournalBatch()
        self._tried: set[str] = set()

    def clear(self) -> None:
        """Start a new batch."""
        self._pending = JournalBatch()
        self._tried = set()

    def record_send(
        self,
        role: str,
        message_ids: Sequence[str | None],
        outcomes: Sequence[Outcome],
        now: float,
        *,
        backlog_queue: str | None = None,
        barrier: bool = False,
    ) -> None:
        """One batched send's copies: ``sent`` for the accepted, ``send_failed`` for the others; a restore
        barrier's send is ``sent`` with path ``barrier`` (billed, no application message)."""
        batch = uuid.uuid4().hex[:12]
        namespace = self.namespaces.get(role, role)
        groups: dict[tuple[str, str], tuple[JournalEvent, list[str]]] = {}
        for message_id, outcome in zip(message_ids, outcomes, strict=False):
            if message_id is None:
                continue
            path: SendPath
            if barrier:
                path = BARRIER_PATH
            elif backlog_queue is not None:
                path = "backlog"
            elif message_id in self._tried and not self.dual:
                path = "backup"
            else:
                path = "direct"
            self._tried.add(message_id)
            error_class = (
                "" if outcome.ok else (outcome.error_class.value if outcome.error_class else "unknown")
            )
            key = (path, error_class)
            if key not in groups:
                if outcome.ok:
                    template = JournalEvent(
                        EventKind.SENT,
                        now,
                        namespace=namespace,
                        role=role,
                        path=path,
                        batch=batch,
                        queue=backlog_queue,
                    )
                else:
                    template = JournalEvent(
                        EventKind.SEND_FAILED,
                        now,
                        namespace=namespace,
                        role=role,
                        error_class=error_class,
                        batch=batch,
                    )
                groups[key] = (template, [])
            groups[key][1].append(message_id)
        self._pending.groups.extend(groups.values())

    def dead_lettered(self, message_id: str | None, now: float, reason: str) -> None:
        """The entry is about to be moved to the local dead-letter stream."""
        self._pending.events.append(J.dead_lettered(message_id, now, where="local", reason=reason))

    def take(self) -> JournalBatch:
        """What was gathered so far (and forget it; the batch's paths are remembered)."""
        pending, self._pending = self._pending, JournalBatch()
        return pending


def namespace_names(primary: str | None, secondary: str | None) -> dict[str, str]:
    """Role to namespace name, for the events' ``namespace`` (the role itself when not configured)."""
    return {"primary": primary or "primary", "secondary": secondary or "secondary"}


def paired_events(change: object, update: PairedUpdate, now: float) -> list[JournalEvent]:
    """The journal events of one applied paired change: a backlog queue leaving the rotation, and the
    failover engaging or ending (``update`` says whether *this* call did it, so it is journaled once)."""
    events: list[JournalEvent] = []
    if isinstance(change, RemoveFromRotation):
        events.append(
            J.backlog_rotation_changed(now, queue=str(change.index), result="removed", reason=change.error)
        )
    if update.engaged:
        reason = change.reason if isinstance(change, EngageFailover) else ""
        events.append(J.failover_engaged(now, reason=reason))
    elif update.restored:
        reason = change.reason if isinstance(change, MarkAvailable) else ""
        events.append(J.failover_ended(now, reason=reason))
    return events


def ping_events(
    namespace: str, outcome: Outcome, operations: int, update: PairedUpdate, now: float
) -> list[JournalEvent]:
    """A ping of the primary (``operations``: 2 in schedule mode) and, when it ended the failover, that."""
    error_class = outcome.error_class.value if outcome.error_class is not None else None
    events = [J.ping(now, namespace=namespace, ok=outcome.ok, error_class=error_class, count=operations)]
    if update.restored:
        events.append(J.failover_ended(now, reason="ping accepted by the primary"))
    return events


class SyphonJournal:
    """What a syphon journals for one backlog queue: each copy its destination accepted (``sent``, path
    ``syphon``, written at once: before the backlog message is completed), then, buffered and written per
    batch, ``syphoned`` / ``dead_lettered`` (``where="backlog"``) per message and one ``syphon_receive``
    per receive call (under the backlog's own journal owner: a call belongs to no entity)."""

    def __init__(self, store: JournalStore | None, primary: str, secondary: str, queue: str) -> None:
        self.store = store
        self.primary = primary
        self.secondary = secondary
        self.queue = queue
        self.scope = backlog_scope(primary)
        self._pending: dict[str, list[JournalEvent]] = {}

    def sent(self, destination: str, message_ids: Sequence[str | None], now: float) -> None:
        """The primary accepted these restored copies (written now)."""
        template = JournalEvent(
            EventKind.SENT, now, namespace=self.primary, role="primary", path="syphon", queue=self.queue
        )
        ids = [mid for mid in message_ids if mid is not None]
        if self.store is not None and ids:
            self.store.append_groups(destination, [(template, ids)])

    def syphoned(self, destination: str, message_id: str | None, now: float) -> None:
        """The backlog message was completed after its destination accepted it."""
        if message_id is not None:
            self._add(destination, J.syphoned(message_id, now, namespace=self.secondary, queue=self.queue))

    def dead_lettered(self, destination: str | None, message_id: str | None, now: float, reason: str) -> None:
        """The backlog message was dead-lettered in the backlog queue."""
        self._add(destination or self.scope, J.dead_lettered(message_id, now, where="backlog", reason=reason))

    def receive_call(self, messages: int, now: float) -> None:
        """One receive call on the backlog queue (billed even when it returned nothing)."""
        event = J.syphon_receive(
            now, namespace=self.secondary, queue=self.queue, calls=1, empty=messages == 0
        )
        self._add(self.scope, event)

    def _add(self, owner: str, event: JournalEvent) -> None:
        self._pending.setdefault(owner, []).append(event)

    def flush(self) -> None:
        """Write what is buffered, one call per journal owner."""
        pending, self._pending = self._pending, {}
        if self.store is None:
            return
        try:
            for owner, events in pending.items():
                self.store.append(owner, events)
        except StateStoreUnavailableError as exc:
            # These events settle nothing (the backlog message is already completed or dead-lettered):
            # losing them must not stop the syphon; the ledger then shows the message still in the backlog.
            log.warning("syphon journal events of %s not written: %s", self.queue, exc)


_RECEIVER_KINDS = {
    ReceiverEventKind.RECEIVED: EventKind.RECEIVED,
    ReceiverEventKind.HANDLED: EventKind.HANDLED,
    ReceiverEventKind.DUPLICATE_SUPPRESSED: EventKind.DUPLICATE_SUPPRESSED,
    ReceiverEventKind.DEAD_LETTERED: EventKind.DEAD_LETTERED,
}


class ReceiverJournal:
    """A receiver's lifecycle events in its entity's journal (a topic's subscriptions journal under the
    topic: every subscription's copy is a copy of the topic's message). Pings, handler errors and
    back-pressure waits are counted by the receiver, not journaled."""

    def __init__(self, store: JournalStore, entity: str, namespaces: Mapping[str, str]) -> None:
        self.store = store
        self.entity = entity
        self.namespaces = namespaces

    def batch(self, events: Sequence[ReceiverEvent], now: float) -> JournalBatch:
        """The journal events for the receiver's ``events``: one template per kind and namespace. A ping's
        receive is journaled with result ``ping``: billed like any receive, counted as no message."""
        out = JournalBatch()
        pings = {e.message_id for e in events if e.kind is ReceiverEventKind.PING_DROPPED}
        groups: dict[tuple[EventKind, str, bool], tuple[JournalEvent, list[str]]] = {}
        for event in events:
            kind = _RECEIVER_KINDS.get(event.kind)
            if kind is None or event.message_id is None:
                continue
            role = event.namespace
            if kind is EventKind.DEAD_LETTERED:
                reason = event.detail or ""
                out.events.append(J.dead_lettered(event.message_id, now, where="receiver", reason=reason))
                continue
            ping = kind is EventKind.RECEIVED and event.message_id in pings
            key = (kind, role, ping)
            if key not in groups:
                if kind is EventKind.HANDLED:
                    template = JournalEvent(kind, now)
                else:
                    namespace = self.namespaces.get(role, role)
                    result = PING_RESULT if ping else None
                    template = JournalEvent(kind, now, namespace=namespace, role=role, result=result)
                groups[key] = (template, [])
            groups[key][1].append(event.message_id)
        out.groups = list(groups.values())
        return out

    def record(self, events: Sequence[ReceiverEvent], now: float) -> None:
        """Journal ``events`` (one call); a Redis failure is logged, the receiver goes on."""
        journaled = self.batch(events, now)
        if not journaled.groups and not journaled.events:
            return
        try:
            journaled.write(self.store, self.entity)
        except StateStoreUnavailableError as exc:
            log.warning("receiver journal events of %s not written: %s", self.entity, exc)
