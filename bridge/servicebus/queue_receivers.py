"""``QueueReceivers``: the PEEK_LOCK receive side of a ``NamespacePool`` — receive, settle, defer, peek.

The syphon (``bridge.paired``) reads backlog queues through it; the receiver (``bridge receive``) has its
own links (``bridge.servicebus.receiving``). One PEEK_LOCK receiver per (role, queue), cached in the role's
client (``RoleClient.receiver``), used by one call at a time under the handler lock ``receive:<queue>``.
Every call goes through the pool's ``_call``: under the attempt deadline, SDK errors translated to
``NamespaceError``, an outage retiring the role's client, so the receive side shares the pool's clients,
deadline and coupling without knowing how they work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import partial
from typing import Protocol, TypeVar

from azure.servicebus import ServiceBusReceivedMessage, ServiceBusReceiver
from azure.servicebus.exceptions import MessageNotFoundError

from bridge.core.roles import Role
from bridge.servicebus.clients import RoleClient

T = TypeVar("T")
logger = logging.getLogger(__name__)


class Caller(Protocol):
    """The pool's ``_call``: ``call()`` under the deadline (+ ``extra``), errors translated."""

    def __call__(self, client: RoleClient, what: str, call: Callable[[], T], extra: float = 0.0) -> T: ...


Using = Callable[[Role, str], AbstractContextManager[RoleClient]]
"""The pool's ``_using``: ``role``'s client, counted as in use, with the named handler's lock held."""


class QueueReceivers:
    """Receive and settle on queues through the pool's clients; see the module docstring."""

    def __init__(self, use: Using, call: Caller, sdk_timeout: float) -> None:
        self._use = use
        self._call = call
        self._sdk_timeout = sdk_timeout

    def receive_batch(
        self, role: Role, queue: str, max_count: int, max_wait: float
    ) -> list[ServiceBusReceivedMessage]:
        """Up to ``max_count`` PEEK_LOCK messages from ``queue``, waiting at most ``max_wait`` seconds."""
        with self._use(role, f"receive:{queue}") as client:
            receiver = client.receiver(queue)
            return self._call(
                client,
                f"receive from {queue}",
                lambda: receiver.receive_messages(max_message_count=max_count, max_wait_time=max_wait),
                extra=max_wait,
            )

    def close_receiver(self, role: Role, queue: str) -> None:
        """Close the cached receiver of ``queue`` (the next receive opens a new link).

        With prefetch 0 the SDK leaves credit on an idle link: a message that reaches it after the last
        receive call stays locked to this process, unseen, until the link is used again or the lock
        expires — an idle cached backlog link in one worker would hold messages back from the syphon that
        runs in another, and their successors would be moved first. Closing the link at the end of a run
        hands such deliveries back to the namespace at once. Errors are ignored: the link is gone anyway.
        """
        with self._use(role, f"receive:{queue}") as client:
            receiver = client.receivers.pop(queue, None)
            if receiver is None:
                return
            try:
                receiver.close()
            except Exception as exc:  # a faulted link; the client's own close or retirement follows
                logger.debug("closing the %s receiver of %s failed: %s", role, queue, type(exc).__name__)

    def complete(self, role: Role, queue: str, message: ServiceBusReceivedMessage) -> None:
        """Complete a message received from ``queue``; raises ``NamespaceError``."""
        self._settle(role, queue, "complete", lambda r: r.complete_message(message))

    def abandon(self, role: Role, queue: str, message: ServiceBusReceivedMessage) -> None:
        """Abandon a message received from ``queue`` (it becomes receivable again)."""
        self._settle(role, queue, "abandon", lambda r: r.abandon_message(message))

    def defer(self, role: Role, queue: str, message: ServiceBusReceivedMessage) -> None:
        """Defer a message received from ``queue``; only ``receive_deferred`` by its number gets it again."""
        self._settle(role, queue, "defer", lambda r: r.defer_message(message))

    def receive_deferred(
        self, role: Role, queue: str, sequence_numbers: Sequence[int]
    ) -> list[ServiceBusReceivedMessage] | None:
        """The deferred messages ``sequence_numbers`` of ``queue``, PEEK_LOCK, in the order asked.

        None when some number does not name a deferred message (it is active, locked, or gone): Service Bus
        then returns none of them, so ask again one at a time to find out which.
        """
        numbers = list(sequence_numbers)
        if not numbers:
            return []
        timeout = self._sdk_timeout

        def call() -> list[ServiceBusReceivedMessage] | None:
            try:
                got = receiver.receive_deferred_messages(numbers, timeout=timeout)
            except MessageNotFoundError:
                return None
            by_number = {m.sequence_number: m for m in got}
            return [by_number[n] for n in numbers if n in by_number]

        with self._use(role, f"receive:{queue}") as client:
            receiver = client.receiver(queue)
            return self._call(client, f"receive deferred from {queue}", call)

    def peek(
        self, role: Role, queue: str, from_sequence_number: int, max_count: int
    ) -> list[ServiceBusReceivedMessage]:
        """Up to ``max_count`` messages of ``queue`` from ``from_sequence_number`` on, any state, unlocked."""
        timeout = self._sdk_timeout
        with self._use(role, f"receive:{queue}") as client:
            receiver = client.receiver(queue)
            return self._call(
                client,
                f"peek {queue}",
                lambda: receiver.peek_messages(
                    max_message_count=max_count, sequence_number=from_sequence_number, timeout=timeout
                ),
            )

    def dead_letter(
        self, role: Role, queue: str, message: ServiceBusReceivedMessage, reason: str, description: str = ""
    ) -> None:
        """Dead-letter a message received from ``queue`` with ``reason`` (and ``description``)."""
        self._settle(
            role,
            queue,
            "dead-letter",
            lambda r: r.dead_letter_message(message, reason=reason, error_description=description or None),
        )

    def renew_locks(
        self, role: Role, queue: str, messages: Sequence[ServiceBusReceivedMessage]
    ) -> list[datetime]:
        """Renew the locks of ``messages`` received from ``queue``; their new expiry times, in order."""
        with self._use(role, f"receive:{queue}") as client:
            receiver = client.receiver(queue)
            return [
                self._call(client, f"renew lock on {queue}", partial(receiver.renew_message_lock, message))
                for message in messages
            ]

    def _settle(
        self, role: Role, queue: str, what: str, settle: Callable[[ServiceBusReceiver], object]
    ) -> None:
        with self._use(role, f"receive:{queue}") as client:
            receiver = client.receiver(queue)
            self._call(client, f"{what} on {queue}", lambda: settle(receiver))
