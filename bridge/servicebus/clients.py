"""One generation of a namespace role's ``ServiceBusClient`` with its cached senders and receivers.

Built by ``bridge.servicebus.credentials.service_bus_client`` from a connection string
(``NamespaceSettings.connection_string``, a ``SecretStr``) or a namespace name and an Entra ID credential::

    Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<rule>;SharedAccessKey=<key>
    Endpoint=sb://127.0.0.1:<port>;SharedAccessKeyName=...;SharedAccessKey=...;UseDevelopmentEmulator=true

Options: ``retry_total``, ``retry_backoff_factor``, ``retry_backoff_max`` (``RetrySettings``, passed to the
SDK unchanged) and ``sdk_timeout``, given to the SDK as ``try_timeout`` (per attempt) and ``auth_timeout``
(the CBS token exchange of each link); the socket timeout stays the SDK's default (0.2 s for AMQP/TCP).
Building a client does no I/O; links open on first use. ``NamespacePool`` owns these objects and decides
when one is retired; this module only builds and closes them.

Senders are kept for the ``max_senders`` entity paths used last (``workers.max_senders``): the SDK gives
every sender a link and a keep-alive thread, so a sender per entity ever sent to made a process's threads
grow with the number of entities. The least recently used sender whose path no call is using is closed when
a new one would pass the bound; the next send to that path opens its link again. A sender no send used for
``workers.idle_sender_close`` seconds is closed too (``close_idle``, from the pool's link thread), with
everything the client kept for its path, so a process's threads and memory come back down once entities
fall silent. A sender is only ever closed while its path's lock is free: never under a send in flight.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

from azure.servicebus import (
    ServiceBusClient,
    ServiceBusReceiveMode,
    ServiceBusReceiver,
    ServiceBusSender,
    TransportType,
)

from bridge.core.roles import Role
from bridge.errors import NamespaceConfigurationError
from bridge.servicebus.credentials import service_bus_client, transport_options
from bridge.servicebus.path_locks import PathLocks
from bridge.settings import NamespaceSettings, RetrySettings

logger = logging.getLogger(__name__)

DEFAULT_MAX_SENDERS = 64
"""Senders (entity paths) one role's client keeps open (``workers.max_senders``)."""


class RoleClient:
    """A role's client, generation ``generation``; the pool tracks its users and retirement."""

    def __init__(
        self,
        role: Role,
        generation: int,
        client: ServiceBusClient,
        sdk_timeout: float,
        max_senders: int = DEFAULT_MAX_SENDERS,
        *,
        sender_socket_timeout: float | None = None,
    ) -> None:
        self.role = role
        self.generation = generation
        self.client = client
        self.sdk_timeout = sdk_timeout
        self.max_senders = max_senders
        # The SDK's keep-alive thread reads the sender's connection every 30 s holding its socket lock for
        # one read of socket_timeout (the SDK's 0.2 s on AMQP): a send waits behind it. None: the SDK's own
        # (WebSockets, whose 1 s the bridge keeps). docs/servicebus-sdk.md
        self.sender_socket_timeout = sender_socket_timeout
        self.senders: OrderedDict[str, ServiceBusSender] = OrderedDict()
        self.senders_lock = threading.Lock()
        self.last_used: dict[str, float] = {}  # entity → monotonic time its link was last used or refreshed
        self.sent_at: dict[str, float] = {}  # entity → monotonic time a send last wanted its sender
        self.receivers: dict[str, ServiceBusReceiver] = {}
        self.locks = PathLocks()  # one per handler path while a call holds or waits for it
        self.users = 0
        self.retired = False
        self.closing = False
        self.standby_tried: dict[str, float] = {}  # entity → monotonic time a standby open was started
        self.standby_opening = False  # one standby open at a time (``bridge.servicebus.standby``)
        self.reopened: set[str] = set()  # entities reopened on this client, once each (``standby``)

    @classmethod
    def open(
        cls,
        role: Role,
        generation: int,
        namespace: NamespaceSettings,
        retry: RetrySettings,
        sdk_timeout: float,
        *,
        max_senders: int = DEFAULT_MAX_SENDERS,
    ) -> RoleClient:
        """Build the SDK client (no I/O); ``NamespaceConfigurationError`` when it cannot be built."""
        try:
            client = service_bus_client(
                namespace,
                retry_total=retry.retry_total,
                retry_backoff_factor=retry.retry_backoff_factor,
                retry_backoff_max=retry.retry_backoff_max,
                try_timeout=sdk_timeout,
            )
        except (
            Exception
        ) as exc:  # a malformed connection string or credential: name the type, never the value
            error = NamespaceConfigurationError(
                f"{role} namespace: cannot build a client ({type(exc).__name__})", namespace=role
            )
        else:
            plain = transport_options(namespace)["transport_type"] == TransportType.Amqp
            socket_timeout = retry.sender_socket_timeout if plain else None
            return cls(
                role, generation, client, sdk_timeout, max_senders, sender_socket_timeout=socket_timeout
            )
        raise error from None

    def sender(self, entity: str) -> ServiceBusSender:
        """The cached sender for a queue or topic path (the AMQP link target is just the path); the caller
        holds the path's lock (``locks["send:<path>"]``)."""
        with self.senders_lock:
            sender = self.senders.get(entity)
            self.last_used[entity] = self.sent_at[entity] = time.monotonic()
            if sender is not None:
                self.senders.move_to_end(entity)
                return sender
            sender = self.new_sender(entity)
            self.senders[entity] = sender
            evicted = self._evict(keep=entity)
        self._close_senders(evicted)
        return sender

    def adopt(self, entity: str, sender: ServiceBusSender) -> bool:
        """Cache an already opened ``sender`` for ``entity`` unless a send opened one first or the client
        was retired (False: the caller closes it); the LRU bound applies as for ``sender``."""
        with self.locks.held(f"send:{entity}"), self.senders_lock:
            if self.retired or entity in self.senders:
                return False
            self.senders[entity] = sender
            self.last_used[entity] = self.sent_at[entity] = time.monotonic()
        with self.senders_lock:
            evicted = self._evict(keep=entity)
        self._close_senders(evicted)
        return True

    def touch(self, entity: str) -> None:
        """Count ``entity``'s cached sender as used now (its entity carries traffic elsewhere: a passive
        backup's standby link stays open while the active namespace is sent to)."""
        with self.senders_lock:
            if entity in self.senders:
                self.sent_at[entity] = time.monotonic()

    def close_idle(self, now: float, after: float) -> list[str]:
        """Close the senders no send wanted for ``after`` seconds, unless a call holds their path; the
        paths closed. Also drops standby tries older than that (``bridge.servicebus.standby``)."""
        with self.senders_lock:
            idle = [path for path, at in self.sent_at.items() if now - at >= after]
            closed = [pair for pair in (self._take_out(path) for path in idle) if pair is not None]
            self.standby_tried = {e: at for e, at in self.standby_tried.items() if now - at < after}
        self._close_senders(closed)
        return [path for path, _ in closed]

    def forget(self, entity: str) -> bool:
        """Close ``entity``'s sender now unless a call holds its path (its entity retired); True if gone."""
        with self.senders_lock:
            pair = self._take_out(entity)
            self.standby_tried.pop(entity, None)
            gone = entity not in self.senders
        self._close_senders([] if pair is None else [pair])
        return gone

    def _take_out(self, path: str) -> tuple[str, ServiceBusSender] | None:
        """(Under the senders lock.) Take ``path``'s sender and what the client kept for it out of the cache,
        unless a call holds the path (None then, or when there is no sender); closed outside the lock."""
        key = f"send:{path}"
        if not self.locks.acquire(key, 0):
            return None
        try:
            sender = self.senders.pop(path, None)
            self.last_used.pop(path, None)
            self.sent_at.pop(path, None)
            self.reopened.discard(path)
        finally:
            self.locks.release(key)
        return None if sender is None else (path, sender)

    def _evict(self, keep: str) -> list[tuple[str, ServiceBusSender]]:
        """(Under the senders lock.) Take out the least recently used senders beyond the bound whose path
        no call holds; they are closed outside the lock."""
        evicted: list[tuple[str, ServiceBusSender]] = []
        for path in list(self.senders):
            if len(self.senders) <= self.max_senders:
                break
            if path != keep and (pair := self._take_out(path)) is not None:
                evicted.append(pair)
        return evicted

    def _close_senders(self, senders: list[tuple[str, ServiceBusSender]]) -> None:
        for path, old in senders:
            try:
                old.close()
            except Exception as exc:  # the link is dropped anyway
                logger.debug("closing the %s sender of %s failed: %s", self.role, path, type(exc).__name__)

    def new_sender(self, entity: str) -> ServiceBusSender:
        """A new, unopened sender for ``entity`` (the cache is the caller's business)."""
        return self.client.get_queue_sender(
            entity, auth_timeout=self.sdk_timeout, socket_timeout=self.sender_socket_timeout
        )

    def idle_since(self) -> dict[str, float]:
        """A copy of ``last_used`` taken under the senders lock (the refresher reads it from its thread)."""
        with self.senders_lock:
            return dict(self.last_used)

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
