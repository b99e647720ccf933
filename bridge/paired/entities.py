"""Which entities are paired, and their failover policy, as the ping and the syphon read the settings."""

from __future__ import annotations

from bridge.core.paired import FailoverPolicy
from bridge.settings import Settings


def paired_entities(settings: Settings) -> list[str]:
    """The configured entities with ``replication = "paired"``, sorted."""
    return sorted(name for name, entity in settings.entities.items() if entity.replication == "paired")


def failover_policy(settings: Settings) -> FailoverPolicy:
    """The namespace-wide FailoverInterval / PingPrimaryInterval / ping timeout."""
    paired = settings.paired
    return FailoverPolicy(paired.failover_interval, paired.ping_primary_interval, paired.ping_timeout)
