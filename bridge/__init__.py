"""Service Bus bridge: sends to Azure Service Bus that never fail from the sender's point of view.

Applications hand messages to a local, durable Redis outbox (HTTP, ``bridge.Producer`` or a Redis stream);
Celery workers deliver them to Service Bus with replication across two namespaces.
"""

from __future__ import annotations

__version__ = "0.1.0"
