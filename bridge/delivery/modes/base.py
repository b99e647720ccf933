"""The protocol between the drainer and the replication modes (``bridge.delivery.modes``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from bridge.core.cost import Operation
from bridge.core.decisions import SendDecision, SendNext, Settlement, Target
from bridge.core.envelope import Envelope
from bridge.core.replication import RetryContext
from bridge.core.roles import Role, RoleState
from bridge.delivery.attempts import BatchOutcome
from bridge.delivery.context import DeliveryContext
from bridge.delivery.read_ahead import PackedAhead
from bridge.delivery.shard_sending import BatchSend
from bridge.errors import InvariantError
from bridge.outbox.reader import OutboxEntry
from bridge.servicebus.messages import OutgoingMessage, to_message


class SendPort(Protocol):
    """What a mode may use of the drainer: its context, its shard, one recorded send, its retry count."""

    ctx: DeliveryContext

    @property
    def entity(self) -> str:
        """The entity the shard belongs to."""
        ...

    @property
    def shard(self) -> int:
        """The shard's number."""
        ...

    def send_messages(
        self,
        role: Role,
        path: str,
        messages: Sequence[OutgoingMessage],
        operation: Operation,
        *,
        keys: Sequence[str | None] | None = None,
    ) -> BatchOutcome:
        """One batched send to ``path`` in namespace ``role``; outcomes, cost and health recorded. With
        ``keys`` (the messages' order keys), a message refused for good stops its key's later messages
        (``bridge.servicebus.sending``)."""
        ...

    def send_each(self, sends: Sequence[BatchSend]) -> list[BatchOutcome]:
        """Several batched sends, each as ``send_messages``, their SDK calls at the same time (to
        different namespaces); the outcomes in the order of ``sends``."""
        ...

    def delivered(self, entry_ids: Sequence[str]) -> dict[str, tuple[Target, ...]]:
        """Where each entry was already accepted (active mode), read with the batch's entries when it
        could be."""
        ...

    def packed(self, entries: Sequence[OutboxEntry]) -> PackedAhead | None:
        """The batch's messages built and packed with its read (active mode), when the batch is exactly
        the entries read and the TTL each message carries is still the one left of it."""
        ...

    def retry_context(self) -> RetryContext:
        """The clock, the shard's retry count and the backoff, for the decisions of this batch."""
        ...

    def observed_roles(self) -> RoleState:
        """The entity's roles for this batch's send (read with its entries when fresh, else now)."""
        ...


class Sender(Protocol):
    """One replication mode."""

    def settle(self, port: SendPort, entries: Sequence[OutboxEntry]) -> list[Settlement]:
        """Send ``entries`` (decoded, in shard order) and settle each one; changes ride on the decisions."""
        ...


def send_entries(
    port: SendPort, role: Role, entries: Sequence[OutboxEntry], operation: Operation
) -> BatchOutcome:
    """Send the entries' messages to the entity itself in namespace ``role``."""
    messages = [to_message(e.envelope) for e in entries if e.envelope is not None]
    return port.send_messages(role, port.entity, messages, operation)


def envelope_of(entry: OutboxEntry) -> Envelope:
    """The entry's envelope (the modes only see decoded entries: undecodable ones were quarantined)."""
    if entry.envelope is None:
        raise InvariantError("an undecodable entry reached a replication mode (quarantined before)")
    return entry.envelope


def final(decision: SendDecision) -> Settlement:
    """``decision`` as a settlement; a ``SendNext`` left over is a bug in the mode."""
    if isinstance(decision, SendNext):
        raise InvariantError(f"a send decision was not followed through: {decision!r}")
    return decision
