"""The Service Bus adapter: the only code in the bridge that imports ``azure.servicebus``.

Connection string form (``Settings.primary`` / ``Settings.secondary``)::

    Endpoint=sb://<namespace>.servicebus.windows.net/;SharedAccessKeyName=<rule>;SharedAccessKey=<key>
    Endpoint=sb://127.0.0.1:<port>;SharedAccessKeyName=...;SharedAccessKey=...;UseDevelopmentEmulator=true

Modules, one responsibility each:

- ``messages``: ``Envelope`` → ``ServiceBusMessage`` (every field), backlog aliasing and its inverse, pings.
- ``translate``: SDK exceptions → ``bridge.errors.NamespaceError`` subclasses (its table gives the SDK's
  exceptions their failure class).
- ``deadline``: the hard per-attempt deadline enforced outside the SDK (``AttemptRunner``).
- ``sending``: packing messages into batches with per-message outcomes (``SendResult``).
- ``clients``: one generation of a role's ``ServiceBusClient`` with its cached senders and receivers.
- ``pool``: ``NamespacePool``, the per-process clients, senders and receivers with close/fault coupling.
- ``admin``: ``NamespaceAdmin``, a thin wrapper over ``ServiceBusAdministrationClient``.

Options: ``Settings.retry`` (``retry_total``, ``retry_backoff_factor``, ``retry_backoff_max``,
``attempt_deadline``). No azure exception leaves this package.
"""

from __future__ import annotations

from bridge.servicebus.admin import NamespaceAdmin
from bridge.servicebus.messages import (
    BacklogMessage,
    OutgoingMessage,
    RestoredMessage,
    from_backlog_message,
    ping_message,
    to_backlog_message,
    to_message,
)
from bridge.servicebus.pool import NamespacePool
from bridge.servicebus.sending import SendResult
from bridge.servicebus.translate import translate

__all__ = [
    "BacklogMessage",
    "NamespaceAdmin",
    "NamespacePool",
    "OutgoingMessage",
    "RestoredMessage",
    "SendResult",
    "from_backlog_message",
    "ping_message",
    "to_backlog_message",
    "to_message",
    "translate",
]
