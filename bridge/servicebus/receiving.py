"""Receiving one entity from one namespace in PEEK_LOCK: the receiver side of the Service Bus adapter.

Connection string (``NamespaceSettings.connection_string``)::

    Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<rule>;SharedAccessKey=<key>

Options: ``retry_total``, ``retry_backoff_factor``, ``retry_backoff_max`` (``RetrySettings``, to the SDK
unchanged), ``prefetch`` (the SDK's ``prefetch_count``: prefetched messages are locked while they wait in
the client, so keep it below what the handlers finish within a lock duration), ``session_prefetch`` (the
least prefetch of a session receiver, which must not run with 0: see ``_receiver_options``),
``sdk_timeout`` (the SDK's ``try_timeout``).

An ``EntityLink`` is one SDK receiver (queue, topic subscription or, for a session entity, one accepted
session) owned by one thread: receive and settlement calls are made by that thread only. Lock renewal for
slow handlers is the SDK's ``AutoLockRenewer`` (``LockRenewer``), which renews from its own threads as the
SDK is designed to. Every SDK error comes out as a ``NamespaceError`` (``translate``); after an outage-class
failure the link's client is closed and the next call opens a fresh one.

Received messages are converted to ``bridge.core.received.ReceivedMessage`` here, so nothing above this
module sees an SDK type: ``Delivery`` carries the SDK message as an opaque token for settlement.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    AutoLockRenewer,
    ServiceBusClient,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusReceiver,
)
from azure.servicebus.amqp import AmqpMessageBodyType

from bridge.core.error_classes import ErrorClass, classify
from bridge.core.message_fields import PropertyValue
from bridge.core.received import ReceivedMessage
from bridge.core.trace_context import DIAGNOSTIC_ID, TRACEPARENT, TRACESTATE, from_properties
from bridge.errors import NamespaceError, NamespaceTimeoutError
from bridge.servicebus.admin import NamespaceAdmin
from bridge.servicebus.credentials import service_bus_client
from bridge.servicebus.messages import TIMESPAN_DESCRIPTOR, RestoredMessage, from_backlog_message
from bridge.servicebus.translate import translate
from bridge.settings import NamespaceSettings, RetrySettings

T = TypeVar("T")
logger = logging.getLogger(__name__)

_TRACE_KEYS = frozenset(
    name for text in (TRACEPARENT, DIAGNOSTIC_ID, TRACESTATE) for name in (text, text.encode())
)
"""The application properties that carry a creation context, as the SDK hands their names (bytes)."""


class Delivery:
    """One received copy: what the receiver decides by, the SDK message to settle (``token``), and the
    handler's view (``message``, converted on first use: a duplicate or a ping is settled without it).

    ``problem`` is set for a backlog message that cannot be restored (expired in the backlog, or not
    aliased): its ``message`` then has what could be read, and it is never handed to a handler.
    """

    __slots__ = ("_message", "content_type", "delivery_count", "entity", "locked_until", "message_id",
                 "problem", "role", "sequence_number", "subscription", "token")  # fmt: skip

    def __init__(
        self,
        token: ServiceBusReceivedMessage,
        role: str,
        entity: str,
        subscription: str | None,
        *,
        message: ReceivedMessage | None = None,
        problem: str | None = None,
    ) -> None:
        self.token = token
        self.role = role
        self.entity = entity
        self.subscription = subscription
        self.message_id = _text(token.message_id)
        self.content_type = _text(token.content_type)
        self.delivery_count: int = token.delivery_count or 0
        self.sequence_number: int | None = token.sequence_number
        locked = token.locked_until_utc
        self.locked_until = locked.timestamp() if locked is not None else None
        self._message = message
        self.problem = problem

    @property
    def message(self) -> ReceivedMessage:
        """The handler's view of the copy."""
        if self._message is None:
            self._message = received_message(self.token, self.role, self.entity, self.subscription)
        return self._message

    def trace_context(self) -> tuple[str | None, str | None]:
        """The creation context the copy carries (``docs/tracing.md``), read without converting the copy: a
        duplicate's or a ping's settlement span needs it too."""
        if self._message is not None:
            return from_properties(self._message.application_properties)
        properties = self.token.application_properties
        if not properties:
            return None, None
        return from_properties({_text(k) or "": v for k, v in properties.items() if k in _TRACE_KEYS})


class LockRenewer:
    """The SDK's ``AutoLockRenewer`` for messages whose handler runs long (and for held sessions)."""

    def __init__(self, max_lock_renewal: float, workers: int = 4) -> None:
        self.sdk = AutoLockRenewer(max_lock_renewal_duration=max_lock_renewal, max_workers=workers)

    def register(self, link: EntityLink, deliveries: Sequence[Delivery]) -> None:
        """Keep renewing the locks of ``deliveries`` (received on ``link``) until they are settled."""
        receiver = link.receiver
        if receiver is None or link.session_id is not None:
            return  # a session's messages are covered by the session lock, renewed for the session
        for delivery in deliveries:
            token = delivery.token
            if isinstance(token, ServiceBusReceivedMessage):
                try:
                    self.sdk.register(receiver, token)
                except Exception as exc:  # a settled or expired message: nothing to renew
                    logger.debug("lock renewal not registered: %s", type(exc).__name__)

    def close(self) -> None:
        """Stop renewing."""
        self.sdk.close(wait=False)


class EntityLink:
    """A PEEK_LOCK receiver of one queue or subscription on one namespace (see the module docstring)."""

    def __init__(
        self,
        role: str,
        namespace: NamespaceSettings,
        retry: RetrySettings,
        *,
        entity: str,
        subscription: str | None = None,
        prefetch: int = 0,
        session_prefetch: int = 0,
        sessions: bool = False,
        backlog: bool = False,
        renewer: LockRenewer | None = None,
        sdk_timeout: float = 10.0,
    ) -> None:
        self.role = role
        self.namespace = namespace
        self.retry = retry
        self.entity = entity
        self.subscription = subscription
        self.prefetch = prefetch
        self.session_prefetch = session_prefetch
        self.sessions = sessions
        self.backlog = backlog
        self.renewer = renewer
        self.sdk_timeout = sdk_timeout
        self.client: ServiceBusClient | None = None
        self.receiver: ServiceBusReceiver | None = None
        self.session_id: str | None = None

    @property
    def server_address(self) -> str:
        """The namespace's host, without the port (the messaging conventions' ``server.address``)."""
        return self.namespace.endpoint_host.rsplit(":", 1)[0]

    @property
    def path(self) -> str:
        """The entity path received from (``topic/Subscriptions/name`` for a subscription)."""
        return (
            self.entity if self.subscription is None else f"{self.entity}/Subscriptions/{self.subscription}"
        )

    # ---- opening -----------------------------------------------------------------------------------------
    def _client(self) -> ServiceBusClient:
        if self.client is None:
            self.client = self._call(
                "client",
                lambda: service_bus_client(
                    self.namespace,
                    retry_total=self.retry.retry_total,
                    retry_backoff_factor=self.retry.retry_backoff_factor,
                    retry_backoff_max=self.retry.retry_backoff_max,
                    try_timeout=self.sdk_timeout,
                ),
            )
        return self.client

    def _receiver_options(self, session: bool, max_wait: float | None) -> dict[str, Any]:
        options: dict[str, Any] = {
            "receive_mode": ServiceBusReceiveMode.PEEK_LOCK,
            "prefetch_count": self.prefetch,
        }
        if session:
            # With prefetch 0 the SDK *releases* a message that reaches the link between two receive calls
            # (credit left over from the last call) while a later one may arrive inside the next call: the
            # namespace sends the released one again behind its successor, and one receiver hands a session
            # out of order (seen in the chaos soak). A prefetch buffer keeps what arrives in order instead;
            # session messages stay locked under the session lock, which the receiver renews.
            options["prefetch_count"] = max(self.prefetch, self.session_prefetch)
            options["session_id"] = NEXT_AVAILABLE_SESSION
            options["max_wait_time"] = max_wait
            if self.renewer is not None:
                options["auto_lock_renewer"] = self.renewer.sdk
        return options

    def _open(self, session: bool = False, max_wait: float | None = None) -> ServiceBusReceiver:
        if self.receiver is not None:
            return self.receiver
        client = self._client()
        options = self._receiver_options(session, max_wait)
        if self.subscription is not None:
            subscription = self.subscription
            receiver = client.get_subscription_receiver(self.entity, subscription, **options)
        else:
            receiver = client.get_queue_receiver(self.entity, **options)
        self.receiver = receiver
        return receiver

    def accept_session(self, max_wait: float) -> str | None:
        """Lock the next session that has messages (session entities); None when none came in ``max_wait``."""
        if not self.sessions:
            raise ValueError("accept_session is for session entities")
        self.release_session()
        receiver = self._open(session=True, max_wait=max_wait)
        try:
            self._call(f"accept a session of {self.path}", receiver.__enter__)
        except NamespaceTimeoutError:
            self.release_session()
            return None
        except NamespaceError as error:
            self.release_session()
            if "no session" in str(error).lower() or "timed out" in str(error).lower():
                return None
            raise
        session = receiver.session
        self.session_id = None if session is None else str(session.session_id)
        return self.session_id

    def release_session(self) -> None:
        """Close the session receiver (the session's lock is released for other receivers)."""
        receiver, self.receiver, self.session_id = self.receiver, None, None
        if receiver is not None:
            _quietly(receiver.close)

    # ---- receiving and settling --------------------------------------------------------------------------
    def receive(self, max_count: int, max_wait: float) -> list[Delivery]:
        """Up to ``max_count`` locked messages, waiting at most ``max_wait`` seconds for the first."""
        if self.sessions and self.receiver is None:
            raise ValueError("accept a session first")
        receiver = self._open()
        raw = self._call(
            f"receive from {self.path}",
            lambda: receiver.receive_messages(max_message_count=max_count, max_wait_time=max_wait),
        )
        return [self._delivery(message) for message in raw]

    def complete(self, delivery: Delivery) -> None:
        """Complete (remove) the copy."""
        receiver, token = self._settling(delivery)
        self._call(f"complete on {self.path}", lambda: receiver.complete_message(token))

    def abandon(self, delivery: Delivery) -> None:
        """Abandon the copy: Service Bus delivers it again (its delivery count goes up)."""
        receiver, token = self._settling(delivery)
        self._call(f"abandon on {self.path}", lambda: receiver.abandon_message(token))

    def dead_letter(self, delivery: Delivery, reason: str, description: str) -> None:
        """Move the copy to the entity's dead-letter queue with ``reason`` and ``description``."""
        receiver, token = self._settling(delivery)
        self._call(
            f"dead-letter on {self.path}",
            lambda: receiver.dead_letter_message(token, reason=reason, error_description=description),
        )

    def _settling(self, delivery: Delivery) -> tuple[ServiceBusReceiver, ServiceBusReceivedMessage]:
        token = delivery.token
        if self.receiver is None or not isinstance(token, ServiceBusReceivedMessage):
            raise NamespaceTimeoutError(
                f"{self.role} {self.path}: the receiver was closed", namespace=self.role
            )
        return self.receiver, token

    def peek(self, max_count: int, from_sequence: int | None) -> list[Delivery]:
        """Messages without locking them (``token`` cannot be settled), from ``from_sequence`` on."""
        receiver = self._open()
        raw = self._call(
            f"peek {self.path}",
            lambda: receiver.peek_messages(max_message_count=max_count, sequence_number=from_sequence or 0),
        )
        return [self._delivery(message) for message in raw]

    def max_delivery_count(self) -> int | None:
        """The entity's MaxDeliveryCount from the administration client; None when it cannot be read."""
        try:
            with NamespaceAdmin(
                self.namespace, role=self.role, retry_total=0, timeout=self.sdk_timeout
            ) as admin:
                if self.subscription is not None:
                    props: Any = admin.get_subscription(self.entity, self.subscription)
                else:
                    props = admin.get_queue(self.entity)
        except NamespaceError as error:
            logger.warning("cannot read MaxDeliveryCount of %s on %s: %s", self.path, self.role, error)
            return None
        count = getattr(props, "max_delivery_count", None)
        return int(count) if count is not None else None

    def close(self) -> None:
        """Close the receiver and the client (errors from a faulted client are expected and ignored)."""
        self.release_session()
        client, self.client = self.client, None
        if client is not None:
            _quietly(client.close)

    # ---- conversion ----------------------------------------------------------------------------------------
    def _delivery(self, raw: ServiceBusReceivedMessage) -> Delivery:
        if not self.backlog:
            return Delivery(raw, self.role, self.entity, self.subscription)
        return _restored_delivery(raw, self.role, self.entity)

    def _call(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except Exception as exc:  # every SDK failure; translated outside the except block
            error = translate(exc, self.role, what)
        if classify(error).error_class in (ErrorClass.OUTAGE, ErrorClass.CONFIGURATION):
            self.close()
        raise error from None


def _quietly(close: Callable[[], object]) -> None:
    try:
        close()
    except Exception as exc:  # closing a faulted handler fails; it is gone either way
        logger.debug("closing a receiver failed: %s", type(exc).__name__)


def _text(value: object) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _body(raw: ServiceBusReceivedMessage) -> bytes:
    if raw.body_type == AmqpMessageBodyType.DATA:
        return b"".join(raw.body)
    body = raw.body
    if isinstance(body, bytes):
        return body
    return str(body).encode()


def _property(value: object) -> PropertyValue:
    # The SDK decodes AMQP string and binary both to bytes: text when it is UTF-8, else bytes.
    if getattr(value, "descriptor", None) == TIMESPAN_DESCRIPTOR and isinstance(value, int):
        return timedelta(microseconds=int(value) // 10)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return bytes(value)
    if isinstance(value, bool | int | float | str | uuid.UUID | datetime | timedelta) or value is None:
        return value
    return str(value)


def received_message(
    raw: ServiceBusReceivedMessage, role: str, entity: str, subscription: str | None
) -> ReceivedMessage:
    """The handler's view of an SDK message received from ``entity`` (or its ``subscription``)."""
    properties = {(_text(k) or ""): _property(v) for k, v in (raw.application_properties or {}).items()}
    ttl = raw.time_to_live
    return ReceivedMessage(
        message_id=_text(raw.message_id),
        body=_body(raw),
        entity=entity,
        namespace=role,
        subscription=subscription,
        content_type=_text(raw.content_type),
        correlation_id=_text(raw.correlation_id),
        subject=_text(raw.subject),
        reply_to=_text(raw.reply_to),
        to=_text(raw.to),
        session_id=_text(raw.session_id),
        partition_key=_text(raw.partition_key),
        time_to_live=None if ttl is None else ttl.total_seconds(),
        scheduled_enqueue_time_utc=raw.scheduled_enqueue_time_utc,
        enqueued_time_utc=raw.enqueued_time_utc,
        sequence_number=raw.sequence_number,
        delivery_count=raw.delivery_count or 0,
        application_properties=properties,
    )


def _restored_delivery(raw: ServiceBusReceivedMessage, role: str, queue: str) -> Delivery:
    plain = received_message(raw, role, queue, None)
    decision = from_backlog_message(raw, datetime.now(UTC).timestamp())
    if not isinstance(decision, RestoredMessage):
        return Delivery(raw, role, queue, None, message=plain, problem=decision.reason)
    fields = decision.fields
    message = ReceivedMessage(
        message_id=plain.message_id,
        body=plain.body,
        entity=decision.destination,
        namespace=plain.namespace,
        content_type=plain.content_type,
        correlation_id=plain.correlation_id,
        subject=plain.subject,
        reply_to=plain.reply_to,
        to=plain.to,
        session_id=fields.session_id,
        partition_key=fields.partition_key,
        time_to_live=fields.time_to_live,
        scheduled_enqueue_time_utc=fields.scheduled_enqueue_time_utc,
        enqueued_time_utc=plain.enqueued_time_utc,
        sequence_number=plain.sequence_number,
        delivery_count=plain.delivery_count,
        application_properties=dict(fields.application_properties),
        backlog_queue=queue,
    )
    return Delivery(raw, role, decision.destination, None, message=message)
