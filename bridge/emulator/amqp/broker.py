"""State shared by every AMQP connection of one local namespace: consumers, pumping, group commit.

All connections run on one asyncio thread, so a send on one connection can hand messages to a receiver
link on another directly; those connections are marked dirty and their output is written in
``after_io`` — always *after* the write-ahead log has been flushed, so nothing is acknowledged before it
is on disk.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from proton import Sender

from bridge.emulator.amqp import idle
from bridge.emulator.amqp.codec import BrokerStamp, stamp_message
from bridge.emulator.faults import ActiveFault, FaultKind, FaultState, PenaltyWindow
from bridge.emulator.identity.grants import AuthPolicy
from bridge.emulator.model.messages import Delivery
from bridge.emulator.model.namespace import Namespace
from bridge.emulator.model.store import MessageStore
from bridge.emulator.wal import WriteAheadLog

if TYPE_CHECKING:
    from bridge.emulator.amqp.connection import AmqpConnection

log = logging.getLogger(__name__)


class Flushable(Protocol):
    """A connection whose pending protocol output can be written."""

    def flush_output(self) -> None:
        """Write what the protocol engine produced."""


@dataclass(eq=False)
class Consumer:
    """A receiver link of a client: where it reads, how, and what it holds unsettled."""

    link: Sender
    conn: AmqpConnection
    store: MessageStore
    peek_lock: bool
    session_id: str | None
    owner: str
    source_address: str
    active: float = field(default_factory=idle.now)  # last message traffic (``idle``)


@dataclass(eq=False)
class PendingSession:
    """A next-available-session attach waiting for a session with messages."""

    link: Sender
    conn: AmqpConnection
    store: MessageStore
    peek_lock: bool
    deadline: float


class Broker:
    """The namespace, its journal and faults, and the live consumers of every store."""

    def __init__(
        self,
        namespace: Namespace,
        faults: FaultState,
        auth: AuthPolicy,
        wal: WriteAheadLog | None = None,
        *,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.namespace = namespace
        self.faults = faults
        self.auth = auth
        self.wal = wal
        self.clock = clock
        self.rand = rand
        self.penalty = PenaltyWindow()
        self.idle_timeouts = idle.IdleTimeouts()
        self._next_idle_sweep = 0.0
        self.consumers: dict[int, list[Consumer]] = {}
        self.pending_sessions: list[PendingSession] = []
        self.connections: set[AmqpConnection] = set()
        self._dirty: set[Any] = set()
        self._tag = 0

    # ---- I/O ordering -----------------------------------------------------------------------------
    def mark_dirty(self, conn: Flushable) -> None:
        """``conn`` has protocol output to write after the next log flush."""
        self._dirty.add(conn)

    def after_io(self) -> None:
        """Group commit: fsync the journal, then release every connection's answers."""
        if self.wal is not None:
            self.wal.flush()
        dirty, self._dirty = self._dirty, set()
        for conn in dirty:
            conn.flush_output()

    # ---- faults --------------------------------------------------------------------------------------
    def fault_for(self, path: str) -> ActiveFault | None:
        """The fault that applies to ``path`` now, if any."""
        return self.faults.for_entity(path)

    def throttled(self) -> float | None:
        """Seconds left of the namespace's penalty window if this request is refused (``throttle``)."""
        fault = self.faults.for_namespace()
        if fault is None or fault.kind is not FaultKind.THROTTLE:
            return None  # the common case costs one lookup
        now = self.clock()
        if self.penalty.refuses(fault, now, self.rand):
            return self.penalty.remaining(now)
        return None

    # ---- consumers -----------------------------------------------------------------------------------
    def add_consumer(self, consumer: Consumer) -> None:
        """Register a receiver link and give it what is ready."""
        self.consumers.setdefault(id(consumer.store), []).append(consumer)
        self.pump_consumer(consumer)

    def remove_consumer(self, consumer: Consumer) -> None:
        """Forget a closed receiver link: a session lock goes with its messages' locks; others run out."""
        group = self.consumers.get(id(consumer.store), [])
        if consumer in group:
            group.remove(consumer)
        if consumer.session_id is not None and consumer.store.release_session(
            consumer.session_id, consumer.owner, self.clock()
        ):
            self.pump_store(consumer.store)

    def pump_store(self, store: MessageStore, skip: Consumer | None = None) -> None:
        """Hand ready messages of ``store`` to its consumers with credit; wake waiting session attaches."""
        for consumer in list(self.consumers.get(id(store), [])):
            if consumer is not skip:
                self.pump_consumer(consumer)
        if self.pending_sessions:
            self._retry_pending_sessions(store)

    def pump_consumer(self, consumer: Consumer) -> None:
        """Fill one link's credit."""
        link = consumer.link
        credit = link.credit
        if credit <= 0 or link.state & link.LOCAL_CLOSED:
            return
        fault = self.fault_for(consumer.store.path)
        if fault is not None and fault.kind.value in ("outage", "blackhole"):
            return
        now = self.clock()
        deliveries = consumer.store.take(credit, now, consumer.peek_lock, consumer.session_id)
        for delivery in deliveries:
            self._send(consumer, delivery)
        if deliveries:
            consumer.active = idle.now()
            self.mark_dirty(consumer.conn)
        if link.drain_mode and link.credit > 0:
            # A drain asks for the credit to be used now or handed back (AMQP 1.0 section 2.6.7): the
            # JavaScript SDK drains after each receiveMessages and closes a receiver whose drain goes
            # unanswered.
            link.drained()
            self.mark_dirty(consumer.conn)

    def _send(self, consumer: Consumer, delivery: Delivery) -> None:
        msg = delivery.message
        raw = stamp_message(
            msg.raw,
            BrokerStamp(
                sequence_number=msg.seq,
                enqueued_at=msg.visible_since,
                delivery_count=delivery.delivery_count,
                locked_until=delivery.locked_until,
                scheduled_at=msg.scheduled_at,
                time_to_live=msg.time_to_live,
                dead_letter_reason=msg.dead_letter_reason,
                dead_letter_description=msg.dead_letter_description,
                dead_letter_source=msg.dead_letter_source,
            ),
        )
        if delivery.lock_token is not None:
            tag = delivery.lock_token.bytes_le
        else:
            self._tag += 1
            tag = self._tag.to_bytes(8, "big")
        link = consumer.link
        # Delivery tags are binary (AMQP ``delivery-tag``); proton's stub says str, pn_delivery takes bytes.
        dlv = link.delivery(tag)  # type: ignore[arg-type]
        link.stream(raw)
        link.advance()
        if consumer.peek_lock and delivery.lock_token is not None:
            dlv.sb_token = delivery.lock_token  # proton keeps wrapper attributes on the C object
        else:
            dlv.settle()

    def _retry_pending_sessions(self, store: MessageStore) -> None:
        for pending in [p for p in self.pending_sessions if p.store is store]:
            pending.conn.try_pending_session(pending)

    def tick(self) -> None:
        """Time-driven work: lock expiry, scheduled messages, TTL, session attach deadlines."""
        now = self.clock()
        for store in self.namespace.tick(now):
            self.pump_store(store)
        for pending in [p for p in self.pending_sessions if p.deadline <= now]:
            pending.conn.expire_pending_session(pending)
        for conn in list(self.connections):
            conn.tick(now)
        self._sweep_idle()
        self.after_io()

    def _sweep_idle(self) -> None:
        at = idle.now()
        if at < self._next_idle_sweep:
            return
        self._next_idle_sweep = at + self.idle_timeouts.sweep_interval()
        for conn in list(self.connections):
            if not conn.closed:
                idle.sweep(conn, self.idle_timeouts, at)
