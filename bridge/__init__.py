"""Service Bus bridge: sends to Azure Service Bus that never fail from the sender's point of view.

Applications hand messages to a local, durable Redis outbox (HTTP, ``bridge.Producer`` or a Redis stream);
Celery workers deliver them to Service Bus with replication across two namespaces; ``bridge.Receiver``
reads both namespaces and hands each message to the application once.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["AsyncProducer", "AsyncReceiver", "Producer", "ReceivedMessage", "Receiver"]


def __getattr__(name: str) -> object:
    # Lazy, so `import bridge` (e.g. for the CLI or settings) does not import redis.
    if name in ("Producer", "AsyncProducer"):
        from bridge import producer

        return getattr(producer, name)
    if name in ("Receiver", "AsyncReceiver", "ReceivedMessage"):
        from bridge import receiving

        return getattr(receiving, name)
    raise AttributeError(f"module 'bridge' has no attribute {name!r}")
