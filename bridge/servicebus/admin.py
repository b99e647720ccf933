"""``NamespaceAdmin``: a thin wrapper over ``ServiceBusAdministrationClient`` for one namespace.

Built from ``NamespaceSettings``::

    connection_string = "Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=...;SharedAccessKey=..."
    management_endpoint = "https://127.0.0.1:5301"   # optional; default: the Endpoint's host[:port]
    certificate = "/path/to/ca.pem"                  # optional; passed as connection_verify

The SDK always speaks HTTPS to the connection string's Endpoint host (or ``fully_qualified_namespace``, with
the namespace's Entra ID credential, ``credentials.py``); when ``management_endpoint`` is set, its host:port
replaces it for the administration client only (the key or credential stays the same).
Options: ``retry_total`` (azure-core retries, default 1) and ``timeout`` (connect and read timeout of each
HTTP request, default 10 s), so a dead management endpoint fails in seconds.

Every SDK error comes out as the bridge's ``NamespaceError`` (``translate``): a missing entity as
``NamespaceEntityNotFoundError``, wrong credentials as ``NamespaceConfigurationError``. ``get_*`` answer
None for a missing entity, so callers check existence without catching anything. Options of
``create_*``/``update_*`` are the SDK's keyword names (``max_size_in_megabytes``, ``lock_duration``, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, TypeVar

from azure.servicebus.management import (
    QueueProperties,
    QueueRuntimeProperties,
    SubscriptionProperties,
    TopicProperties,
)

from bridge.errors import NamespaceEntityNotFoundError
from bridge.servicebus.credentials import admin_client, management_host
from bridge.servicebus.translate import translated
from bridge.settings import NamespaceSettings

T = TypeVar("T")


class NamespaceAdmin:
    """Get, create and update queues, topics and subscriptions of one namespace; see the module docstring."""

    def __init__(
        self,
        namespace: NamespaceSettings,
        *,
        role: str | None = None,
        retry_total: int = 1,
        timeout: float = 10.0,
    ) -> None:
        self.role = role or namespace.namespace_name
        options: dict[str, Any] = {
            "retry_total": retry_total,
            "connection_timeout": timeout,
            "read_timeout": timeout,
        }
        if namespace.certificate is not None:
            options["connection_verify"] = str(namespace.certificate)
        host = management_host(namespace)
        self._client = self._run("client", lambda: admin_client(namespace, host, **options))

    # ---- queues ------------------------------------------------------------------------------------------
    def get_queue(self, name: str) -> QueueProperties | None:
        """The queue's description, or None when it does not exist."""
        return self._get(f"get queue {name}", lambda: self._client.get_queue(name))

    def create_queue(self, name: str, **options: Any) -> QueueProperties:
        """Create a queue (``NamespaceConfigurationError`` when it exists already)."""
        return self._run(f"create queue {name}", lambda: self._client.create_queue(name, **options))

    def update_queue(self, queue: QueueProperties, **options: Any) -> None:
        """Write back a queue description (as read by ``get_queue``), with ``options`` changed."""
        self._run(f"update queue {queue.name}", lambda: self._client.update_queue(queue, **options))

    def list_queues(self) -> list[QueueProperties]:
        """Every queue of the namespace (all pages)."""
        return self._run("list queues", lambda: list(self._client.list_queues()))

    def queue_runtime_properties(self, name: str) -> QueueRuntimeProperties:
        """Message counts and sizes of a queue (``NamespaceEntityNotFoundError`` when missing)."""
        return self._run(
            f"runtime properties of {name}", lambda: self._client.get_queue_runtime_properties(name)
        )

    # ---- topics and subscriptions ------------------------------------------------------------------------
    def get_topic(self, name: str) -> TopicProperties | None:
        """The topic's description, or None when it does not exist."""
        return self._get(f"get topic {name}", lambda: self._client.get_topic(name))

    def create_topic(self, name: str, **options: Any) -> TopicProperties:
        """Create a topic."""
        return self._run(f"create topic {name}", lambda: self._client.create_topic(name, **options))

    def update_topic(self, topic: TopicProperties, **options: Any) -> None:
        """Write back a topic description with ``options`` changed."""
        self._run(f"update topic {topic.name}", lambda: self._client.update_topic(topic, **options))

    def get_subscription(self, topic: str, name: str) -> SubscriptionProperties | None:
        """The subscription's description, or None when it (or its topic) does not exist."""
        return self._get(
            f"get subscription {topic}/{name}", lambda: self._client.get_subscription(topic, name)
        )

    def create_subscription(self, topic: str, name: str, **options: Any) -> SubscriptionProperties:
        """Create a subscription of ``topic``."""
        return self._run(
            f"create subscription {topic}/{name}",
            lambda: self._client.create_subscription(topic, name, **options),
        )

    def update_subscription(self, topic: str, subscription: SubscriptionProperties, **options: Any) -> None:
        """Write back a subscription description with ``options`` changed."""
        self._run(
            f"update subscription {topic}/{subscription.name}",
            lambda: self._client.update_subscription(topic, subscription, **options),
        )

    # ---- lifecycle ---------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the HTTP pipeline."""
        self._run("close", self._client.close)

    def __enter__(self) -> NamespaceAdmin:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _run(self, what: str, call: Callable[[], T]) -> T:
        return translated(call, self.role, what)

    def _get(self, what: str, call: Callable[[], T]) -> T | None:
        try:
            return self._run(what, call)
        except NamespaceEntityNotFoundError:
            return None
