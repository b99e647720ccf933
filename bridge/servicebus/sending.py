"""Packing messages into ``ServiceBusMessageBatch``es, in order, with per-message outcomes.

``send_in_batches`` packs the messages in order into as few batches as fit the link's size limit (each
batch is one transfer, accepted or refused as a whole) and reports, per message index, accepted or failed:

- A message too large even for an empty batch (or that the SDK cannot encode) fails alone with
  ``MessagePermanentError``; the others go on. It will never be sent, so it does not hold back its key.
- When a batch send fails, that batch and every later message fail with the same error and nothing after
  it is sent: order per SessionId/PartitionKey is kept, message k+1 never goes out after k failed.
- Except when a batch of several messages is refused as message-permanent (the broker's own size check):
  its messages are re-sent one by one, so only the culprit fails.
- With ``keys`` (each message's order key, None for none), a message that fails for good stops the later
  messages of its key: they fail with ``MessagePermanentError`` unsent, so none of them lands past it (a
  paired backlog send, whose refused message waits for the primary). Without ``keys`` the others go on.

Active mode sends the same messages to both namespaces at once: with one ``SharedBatches`` for both
sends, each batch is packed (encoded) once and the same ``ServiceBusMessageBatch`` goes to both; the
outcomes are those of packing for each namespace alone. ``prepack`` packs such batches ahead of the
sends, while the batch before is still in flight.

The channel does the I/O (``NamespacePool`` passes one that runs each SDK call under the attempt deadline
and translates errors); this module never raises for a send failure.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from azure.servicebus import ServiceBusMessageBatch
from azure.servicebus.exceptions import MessageSizeExceededError

from bridge.core.outcomes import describe_error
from bridge.errors import MessagePermanentError, NamespaceError
from bridge.servicebus.batches import make_batch
from bridge.servicebus.messages import OutgoingMessage


@dataclass
class SendResult:
    """Per-message outcome of one ``send``: indexes accepted (ascending) and failed with their error."""

    accepted: list[int] = field(default_factory=list)
    failed: dict[int, NamespaceError] = field(default_factory=dict)
    batches: int = 0
    """Batches (transfers) the namespace accepted."""

    @property
    def ok(self) -> bool:
        """Every message was accepted."""
        return not self.failed


class BatchChannel(Protocol):
    """Where batches come from and go to; both calls raise ``NamespaceError`` only."""

    def new_batch(self) -> ServiceBusMessageBatch:
        """An empty batch sized for the link."""
        ...

    def send_batch(self, batch: ServiceBusMessageBatch) -> None:
        """Send one batch; returns when the namespace accepted it."""
        ...


class _Packed:
    """One batch packed for several namespaces: what a packer that reuses it must take over."""

    def __init__(self) -> None:
        self.ready = threading.Event()
        self.batch: ServiceBusMessageBatch | None = None
        self.members: list[int] = []
        self.reasons: dict[int, str] = {}
        """Messages skipped while packing it (too large, not encodable): they fail for every namespace."""
        self.end = 0
        """The first message index after it."""

    def wait(self) -> _Packed | None:
        self.ready.wait()
        return self if self.batch is not None else None


class SharedBatches:
    """Batches packed once and sent to several namespaces (active mode's copies of the same messages).

    Why: packing is most of a send's CPU (the SDK encodes each message twice to size and add it), and an
    active entity sends every message to both namespaces. The first packer to reach a batch's first
    message packs it; the other waits for it and sends the same ``ServiceBusMessageBatch`` (a send reads
    the batch, it never changes it). A packer that has left the plain path (a batch refused as
    message-permanent, whose messages it now sends one by one; keys stopped), or whose link takes smaller
    batches than the one packed, packs its own from there: the outcomes are exactly those of packing
    alone. Thread-safe: each namespace's send runs on a thread of its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._packed: dict[int, _Packed] = {}

    def claim(self, start: int) -> tuple[_Packed, bool]:
        """The batch that starts at message ``start``, and True when the caller is to pack it."""
        with self._lock:
            packed = self._packed.get(start)
            if packed is not None:
                return packed, False
            packed = self._packed[start] = _Packed()
            return packed, True


class _Packer:
    def __init__(
        self,
        channel: BatchChannel,
        messages: Sequence[OutgoingMessage],
        namespace: str | None,
        keys: Sequence[str | None] | None,
        shared: SharedBatches | None = None,
    ) -> None:
        self.channel = channel
        self.messages = messages
        self.namespace = namespace
        self.keys = keys
        self.shared = shared
        self.stopped: set[str] = set()
        """Keys whose message failed for good: their later messages are not sent."""
        self.result = SendResult()
        self.work: deque[int] = deque(range(len(messages)))
        self.alone: set[int] = set()
        self.batch: ServiceBusMessageBatch | None = None
        self.members: list[int] = []
        self.reasons: dict[int, str] = {}

    def run(self) -> SendResult:
        while self._skip_stopped():
            if self.batch is None:
                try:
                    self.batch = self.channel.new_batch()
                except NamespaceError as error:
                    self.fail_rest([], error)
                    break
            if self.shared is not None and not self.alone and not self.stopped:
                self._fill_shared(self.shared)
            else:
                self._fill()
            self.flush()  # may put a refused batch's messages back to be sent one by one
        return self.result

    def _fill_shared(self, shared: SharedBatches) -> None:
        """Fill the open batch from ``shared``: pack it for every namespace, or take the one packed."""
        assert self.batch is not None
        start = self.work[0]
        packed, mine = shared.claim(start)
        if mine:
            try:
                self._fill()
            finally:
                packed.batch, packed.members = self.batch, list(self.members)
                packed.reasons = {i: r for i, r in self.reasons.items() if start <= i < self._next()}
                packed.end = self._next()
                packed.ready.set()
            return
        taken = packed.wait()
        if (
            taken is None
            or taken.batch is None
            or taken.batch.max_size_in_bytes > self.batch.max_size_in_bytes
        ):
            self._fill()  # packed for a link that takes larger batches than ours (or not at all)
            return
        self.batch, self.members = taken.batch, list(taken.members)
        for index, reason in taken.reasons.items():
            self.fail_permanent(index, reason)
        while self.work and self.work[0] < taken.end:
            self.work.popleft()

    def _next(self) -> int:
        return self.work[0] if self.work else len(self.messages)

    def _skip_stopped(self) -> bool:
        """Fail the next messages whose key is stopped; True when a message is left to send."""
        while self.work and self._key(self.work[0]) in self.stopped:
            index = self.work.popleft()
            self.result.failed[index] = MessagePermanentError(
                f"{self.namespace or 'namespace'}: message {index} not sent: an earlier message of its "
                "key was refused for good",
                namespace=self.namespace,
            )
        return bool(self.work)

    def _fill(self) -> None:
        """Add messages in order until the batch is full, a message must go alone, or none is left."""
        while self._skip_stopped():
            index = self.work[0]
            if self.members and index in self.alone:
                return  # it goes in a batch of its own, next
            self.work.popleft()
            added = self.add(index)
            if added is None:
                return  # the batch is full: it goes first, then this message opens the next
            if added and index in self.alone:
                return

    def add(self, index: int) -> bool | None:
        """Add message ``index`` to the open batch: True, False when it failed for good, None when the
        batch is full (the message is put back first in line)."""
        assert self.batch is not None
        message = self.messages[index]
        try:
            self.batch.add_message(message)
        except MessageSizeExceededError as exc:
            limit = self.batch.max_size_in_bytes
            if self.members and _fits_alone(message, limit):
                self.work.appendleft(index)
                return None
            self.fail_permanent(index, f"too large for any batch ({limit} bytes): {exc}")
            return False
        except (TypeError, ValueError) as exc:  # the SDK cannot encode it (e.g. a property value type)
            self.fail_permanent(index, f"cannot be encoded: {describe_error(exc)}")
            return False
        self.members.append(index)
        return True

    def flush(self) -> None:
        batch, members = self.batch, self.members
        self.batch, self.members = None, []
        if batch is None or not members:
            return
        try:
            self.channel.send_batch(batch)
        except MessagePermanentError as error:
            if len(members) == 1:
                self.result.failed[members[0]] = error
                self._stop_key(members[0])
            else:
                self.alone.update(members)
                self.work.extendleft(reversed(members))
            return
        except NamespaceError as error:
            self.fail_rest(members, error)
            return
        self.result.accepted.extend(members)
        self.result.batches += 1

    def fail_permanent(self, index: int, reason: str) -> None:
        self.reasons[index] = reason
        self.result.failed[index] = MessagePermanentError(
            f"{self.namespace or 'namespace'}: message {index} {reason}", namespace=self.namespace
        )
        self._stop_key(index)

    def _key(self, index: int) -> str | None:
        return self.keys[index] if self.keys is not None else None

    def _stop_key(self, index: int) -> None:
        key = self._key(index)
        if key is not None:
            self.stopped.add(key)

    def fail_rest(self, members: list[int], error: NamespaceError) -> None:
        for index in (*members, *self.work):
            self.result.failed[index] = error
        self.work.clear()


def _fits_alone(message: OutgoingMessage, limit: int) -> bool:
    """Whether ``message`` fits an empty batch of ``limit`` bytes (sized locally, no I/O)."""
    try:
        make_batch(limit).add_message(message)
    except MessageSizeExceededError:
        return False
    return True


class _PackOnly:
    """A ``BatchChannel`` that packs and sends nowhere (``prepack``'s)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def new_batch(self) -> ServiceBusMessageBatch:
        return make_batch(self.limit)

    def send_batch(self, batch: ServiceBusMessageBatch) -> None:
        return None


def prepack(messages: Sequence[OutgoingMessage], limit: int) -> SharedBatches:
    """``messages`` packed now into batches of at most ``limit`` bytes, for sends that come later with the
    returned ``SharedBatches`` (each takes the batches packed here as a second namespace takes those the
    first packed; one whose link takes smaller batches packs its own). Why: a shard packs its next batch
    while the current one is in flight at the namespaces, not after it was accepted."""
    shared = SharedBatches()
    _Packer(_PackOnly(limit), messages, None, None, shared).run()
    return shared


def send_in_batches(
    channel: BatchChannel,
    messages: Sequence[OutgoingMessage],
    namespace: str | None = None,
    *,
    keys: Sequence[str | None] | None = None,
    shared: SharedBatches | None = None,
) -> SendResult:
    """Send ``messages`` in order in as few batches as fit; see the module docstring for failures and
    ``keys``. With ``shared``, the batches are packed once for every namespace that sends the same
    messages with it (``SharedBatches``)."""
    if keys is not None and len(keys) != len(messages):
        raise ValueError(f"{len(keys)} keys for {len(messages)} messages")
    return _Packer(channel, messages, namespace, keys, shared).run()
