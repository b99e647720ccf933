"""One generation of a namespace role's ``ServiceBusClient`` with its cached senders and receivers.

Connection string (``NamespaceSettings.connection_string``, a ``SecretStr``)::

    Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<rule>;SharedAccessKey=<key>
    Endpoint=sb://127.0.0.1:<port>;SharedAccessKeyName=...;SharedAccessKey=...;UseDevelopmentEmulator=true

Options: ``retry_total``, ``retry_backoff_factor``, ``retry_backoff_max`` (``RetrySettings``, passed to the
SDK unchanged) and ``sdk_timeout``, given to the SDK as ``try_timeout`` (per attempt) and ``auth_timeout``
(the CBS token exchange of each link); the socket timeout stays the SDK's default (0.2 s for AMQP/TCP).
Building a client does no I/O; links open on first use. ``NamespacePool`` owns these objects and decides
when one is retired; this module only builds and closes them.
"""

from __future__ import annotations

import logging
import threading
import time

from azure.servicebus import ServiceBusClient, ServiceBusReceiveMode, ServiceBusReceiver, ServiceBusSender

from bridge.core.roles import Role
from bridge.errors import NamespaceConfigurationError
from bridge.settings import NamespaceSettings, RetrySettings

logger = logging.getLogger(__name__)


class RoleClient:
    """A role's client, generation ``generation``; the pool tracks its users and retirement."""

    def __init__(self, role: Role, generation: int, client: ServiceBusClient, sdk_timeout: float) -> None:
        self.role = role
        self.generation = generation
        self.client = client
        self.sdk_timeout = sdk_timeout
        self.senders: dict[str, ServiceBusSender] = {}
        self.last_used: dict[str, float] = {}  # entity → monotonic time its sender was last handed out
        self.receivers: dict[str, ServiceBusReceiver] = {}
        self.locks: dict[str, threading.Lock] = {}
        self.users = 0
        self.retired = False
        self.closing = False

    @classmethod
    def open(
        cls,
        role: Role,
        generation: int,
        namespace: NamespaceSettings,
        retry: RetrySettings,
        sdk_timeout: float,
    ) -> RoleClient:
        """Build the SDK client (no I/O); ``NamespaceConfigurationError`` when it cannot be built."""
        try:
            client = ServiceBusClient.from_connection_string(
                namespace.connection_string.get_secret_value(),
                retry_total=retry.retry_total,
                retry_backoff_factor=retry.retry_backoff_factor,
                retry_backoff_max=retry.retry_backoff_max,
                try_timeout=sdk_timeout,
            )
        except Exception as exc:  # a malformed connection string: name the type, never the value
            error = NamespaceConfigurationError(
                f"{role} namespace: cannot build a client ({type(exc).__name__})", namespace=role
            )
        else:
            return cls(role, generation, client, sdk_timeout)
        raise error from None

    def sender(self, entity: str) -> ServiceBusSender:
        """The cached sender for a queue or topic path (the AMQP link target is just the path)."""
        sender = self.senders.get(entity)
        if sender is None:
            sender = self.new_sender(entity)
            self.senders[entity] = sender
        self.last_used[entity] = time.monotonic()
        return sender

    def new_sender(self, entity: str) -> ServiceBusSender:
        """A new, unopened sender for ``entity`` (the cache is the caller's business)."""
        return self.client.get_queue_sender(entity, auth_timeout=self.sdk_timeout)

    def receiver(self, queue: str) -> ServiceBusReceiver:
        """The cached PEEK_LOCK receiver of ``queue`` (no prefetch: the syphon takes what it asks for)."""
        receiver = self.receivers.get(queue)
        if receiver is None:
            receiver = self.client.get_queue_receiver(
                queue,
                receive_mode=ServiceBusReceiveMode.PEEK_LOCK,
                prefetch_count=0,
                auth_timeout=self.sdk_timeout,
            )
            self.receivers[queue] = receiver
        return receiver

    def close(self) -> None:
        """Close every handler, then the client; errors are expected from a faulted client."""
        for handler in (*self.senders.values(), *self.receivers.values()):
            try:
                handler.close()
            except Exception as exc:  # already broken; the client close below still runs
                logger.debug("closing a %s handler failed: %s", self.role, type(exc).__name__)
        self.client.close()
