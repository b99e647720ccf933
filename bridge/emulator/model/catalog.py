"""The catalog contract: what the management endpoint needs from the broker model.

Paths are Azure's: ``q1``; ``t1``; ``t1/Subscriptions/s1``; ``t1/Subscriptions/s1/Rules/r1``. Names compare
case-insensitively, as on Azure. ``now`` is epoch seconds, passed in so the model never reads a clock.
Errors are those of ``bridge.emulator.errors`` (``EntityNotFoundError``, ``EntityAlreadyExistsError``,
``ArgumentError``), each carrying the HTTP status the endpoint answers.
"""

from __future__ import annotations

from typing import Protocol

from bridge.emulator.model.descriptions import EntityDescription, EntityKind, RuleDescription, RuntimeCounts


class Catalog(Protocol):
    """Create, read, update, delete and list entities; read runtime counts."""

    def create(
        self, desc: EntityDescription, now: float, default_rule: RuleDescription | None = None
    ) -> EntityDescription:
        """Create an entity (a subscription also gets ``default_rule``, else ``$Default``); its parent must
        exist."""

    def update(self, desc: EntityDescription, now: float) -> EntityDescription:
        """Replace an existing entity's description; messages are kept."""

    def get(self, kind: EntityKind, path: str) -> EntityDescription:
        """The description of one entity of that kind."""

    def lookup(self, path: str) -> EntityDescription:
        """The description of whatever entity the path names (queue or topic for a bare name)."""

    def delete(self, kind: EntityKind, path: str) -> None:
        """Delete an entity with its messages (a topic with its subscriptions)."""

    def list(self, kind: EntityKind, parent: str | None = None) -> list[EntityDescription]:
        """Entities of a kind, sorted by name; subscriptions of topic ``parent``, rules of a subscription."""

    def runtime(self, kind: EntityKind, path: str) -> RuntimeCounts:
        """Message counts and timestamps of a queue, topic or subscription."""
