"""Which entities are paired, as the ping and the syphon read the settings."""

from __future__ import annotations

from bridge.settings import Settings


def paired_entities(settings: Settings) -> list[str]:
    """The configured entities with ``replication = "paired"``, sorted."""
    return sorted(name for name, entity in settings.entities.items() if entity.replication == "paired")
