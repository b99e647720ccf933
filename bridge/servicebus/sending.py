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

The channel does the I/O (``NamespacePool`` passes one that runs each SDK call under the attempt deadline
and translates errors); this module never raises for a send failure.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from azure.servicebus import ServiceBusMessageBatch
from azure.servicebus.exceptions import MessageSizeExceededError

from bridge.core.outcomes import describe_error
from bridge.errors import MessagePermanentError, NamespaceError
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


class _Packer:
    def __init__(
        self,
        channel: BatchChannel,
        messages: Sequence[OutgoingMessage],
        namespace: str | None,
        keys: Sequence[str | None] | None,
    ) -> None:
        self.channel = channel
        self.messages = messages
        self.namespace = namespace
        self.keys = keys
        self.stopped: set[str] = set()
        """Keys whose message failed for good: their later messages are not sent."""
        self.result = SendResult()
        self.work: deque[int] = deque(range(len(messages)))
        self.alone: set[int] = set()
        self.batch: ServiceBusMessageBatch | None = None
        self.members: list[int] = []

    def run(self) -> SendResult:
        while self.work or self.members:
            if not self.work:
                self.flush()  # may put a refused batch's messages back to be sent one by one
                continue
            index = self.work.popleft()
            if self._key(index) in self.stopped:
                self.result.failed[index] = MessagePermanentError(
                    f"{self.namespace or 'namespace'}: message {index} not sent: an earlier message of its "
                    "key was refused for good",
                    namespace=self.namespace,
                )
                continue
            if self.members and index in self.alone:
                self.work.appendleft(index)
                self.flush()
                continue
            if self.batch is None:
                try:
                    self.batch = self.channel.new_batch()
                except NamespaceError as error:
                    self.fail_rest([index], error)
                    break
            if self.add(index) and index in self.alone:
                self.flush()
        return self.result

    def add(self, index: int) -> bool:
        """Add message ``index`` to the open batch; False when it went elsewhere (requeued or failed)."""
        assert self.batch is not None
        message = self.messages[index]
        try:
            self.batch.add_message(message)
        except MessageSizeExceededError as exc:
            limit = self.batch.max_size_in_bytes
            if self.members and _fits_alone(message, limit):
                self.work.appendleft(index)  # the batch is full: send it, then this one opens the next
                self.flush()
            else:
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
        ServiceBusMessageBatch(max_size_in_bytes=limit).add_message(message)
    except MessageSizeExceededError:
        return False
    return True


def send_in_batches(
    channel: BatchChannel,
    messages: Sequence[OutgoingMessage],
    namespace: str | None = None,
    *,
    keys: Sequence[str | None] | None = None,
) -> SendResult:
    """Send ``messages`` in order in as few batches as fit; see the module docstring for failures and
    ``keys``."""
    if keys is not None and len(keys) != len(messages):
        raise ValueError(f"{len(keys)} keys for {len(messages)} messages")
    return _Packer(channel, messages, namespace, keys).run()
