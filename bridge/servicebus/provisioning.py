"""Provisioning of the backlog queues (and, when asked, the configured entities) on real namespaces.

Uses ``NamespaceAdmin`` with the namespaces' settings (``connection_string``, ``management_endpoint``,
``certificate``) and ``paired.backlog_queue_count``:

- Backlog queues: in the **secondary** namespace, ``<primary-namespace>/x-servicebus-transfer/<i>`` for i in
  [0, count), with the description of ``bridge.core.provisioning.BACKLOG_QUEUE``. The namespace's queues
  are listed first; only missing ones are created. Differing and extra ones are reported, never changed;
  a backlog queue beyond the count that still holds messages is ``retired`` (with how many), not ``extra``.
- Entities (``entities=True``): every entity in ``Settings.entities`` on the primary, and on the secondary
  unless its replication is ``none`` (nothing is ever sent there). A missing one is created as a queue
  with the entity's ``requires_session``, ``requires_duplicate_detection`` and message size; an existing
  queue or topic of that name is validated against the same options (a topic has no sessions).
- ``dry_run=True`` only reads: a missing queue is reported as ``would-create``.

Nothing is ever deleted or updated. A namespace that fails raises the bridge's ``NamespaceError`` with
``namespace`` set to the role (``"primary"``/``"secondary"``); messages never carry a key.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, Literal

from bridge.core.provisioning import (
    Difference,
    Provision,
    QueueDescription,
    entity_queue_description,
    format_value,
    plan,
    plan_backlog_queues,
)
from bridge.core.roles import Role
from bridge.errors import ConfigurationError, NamespaceConfigurationError
from bridge.servicebus.admin import NamespaceAdmin
from bridge.settings import EntitySettings, NamespaceSettings, Settings

log = logging.getLogger(__name__)

Outcome = Literal["exists", "created", "differs", "extra", "retired", "would-create"]
_DESCRIPTION_FIELDS = tuple(f.name for f in fields(QueueDescription))


@dataclass(frozen=True)
class ProvisionRow:
    """One line of the report: which queue (or topic) in which namespace, and what happened to it."""

    role: Role
    namespace: str
    name: str
    purpose: Literal["backlog", "entity"]
    entity_type: Literal["queue", "topic"]
    action: Outcome
    differences: tuple[Difference, ...] = ()
    messages: int | None = None
    """Messages in a backlog queue beyond the count (``extra`` when 0, ``retired`` when some are left)."""

    def to_json(self) -> dict[str, Any]:
        """The row as plain JSON values (durations as ISO-8601, "never" as ``"max"``)."""
        return {
            "role": self.role,
            "namespace": self.namespace,
            "name": self.name,
            "purpose": self.purpose,
            "type": self.entity_type,
            "action": self.action,
            "messages": self.messages,
            "differences": [
                {"field": d.field, "wanted": format_value(d.wanted), "actual": format_value(d.actual)}
                for d in self.differences
            ],
        }


@dataclass(frozen=True)
class ProvisionReport:
    """Everything ``provision`` saw and did, in the order it happened."""

    dry_run: bool
    primary_namespace: str
    secondary_namespace: str
    backlog_queue_count: int
    rows: tuple[ProvisionRow, ...]

    def counts(self) -> dict[str, int]:
        """Rows per action, every action present."""
        counts = dict.fromkeys(("exists", "created", "differs", "extra", "retired", "would-create"), 0)
        for row in self.rows:
            counts[row.action] += 1
        return counts

    def to_json(self) -> dict[str, Any]:
        """The public ``bridge provision --json`` object (fields are added, never renamed)."""
        return {
            "dry_run": self.dry_run,
            "namespaces": {"primary": self.primary_namespace, "secondary": self.secondary_namespace},
            "backlog_queue_count": self.backlog_queue_count,
            "counts": self.counts(),
            "queues": [row.to_json() for row in self.rows],
        }


def provision(settings: Settings, *, entities: bool = False, dry_run: bool = False) -> ProvisionReport:
    """Create what is missing, report the rest; see the module docstring."""
    if settings.primary is None or settings.secondary is None:
        raise ConfigurationError(
            "bridge provision needs both namespaces: set primary and secondary "
            "(connection_string, or fully_qualified_namespace and credential)"
        )
    primary, secondary = settings.primary, settings.secondary
    count = settings.paired.backlog_queue_count
    rows: list[ProvisionRow] = []
    with NamespaceAdmin(secondary, role="secondary") as admin:
        existing = _observed_queues(admin)
        decisions = plan_backlog_queues(primary.namespace_name, count, existing)
        rows += _carry_out(admin, secondary, decisions, purpose="backlog", dry_run=dry_run)
    if entities:
        roles: tuple[tuple[Role, NamespaceSettings], ...] = (("primary", primary), ("secondary", secondary))
        for role, namespace in roles:
            wanted = _entities_for(role, settings.entities)
            if wanted:
                rows += _provision_entities(role, namespace, wanted, dry_run)
    return ProvisionReport(
        dry_run=dry_run,
        primary_namespace=primary.namespace_name,
        secondary_namespace=secondary.namespace_name,
        backlog_queue_count=count,
        rows=tuple(rows),
    )


def _entities_for(role: Role, configured: Mapping[str, EntitySettings]) -> dict[str, EntitySettings]:
    # An entity with replication "none" is only ever sent to the primary; creating it in the secondary
    # would leave a queue that nothing fills and an operator would wonder about.
    return {
        name: entity
        for name, entity in configured.items()
        if role == "primary" or entity.replication != "none"
    }


def _provision_entities(
    role: Role, namespace: NamespaceSettings, wanted: Mapping[str, EntitySettings], dry_run: bool
) -> list[ProvisionRow]:
    with NamespaceAdmin(namespace, role=role) as admin:
        existing = _observed_queues(admin)
        known = {name.casefold() for name in existing}
        topics: dict[str, Mapping[str, object]] = {}
        desired: dict[str, QueueDescription] = {}
        for name, entity in wanted.items():
            description = entity_queue_description(
                requires_session=entity.requires_session,
                requires_duplicate_detection=entity.requires_duplicate_detection,
                max_message_size=entity.max_message_size,
            )
            if name.casefold() not in known:
                topic = admin.get_topic(name)
                if topic is not None:
                    # Sessions belong to a topic's subscriptions, not to the topic itself.
                    topics[name] = _observed(topic)
                    description = replace(description, requires_session=None)
            desired[name] = description
        decisions = plan(desired, {**existing, **topics})
        topic_names = {name.casefold() for name in topics}
        return _carry_out(
            admin, namespace, decisions, purpose="entity", dry_run=dry_run, topic_names=topic_names
        )


def _carry_out(
    admin: NamespaceAdmin,
    namespace: NamespaceSettings,
    decisions: Iterable[Provision],
    *,
    purpose: Literal["backlog", "entity"],
    dry_run: bool,
    topic_names: frozenset[str] | set[str] = frozenset(),
) -> list[ProvisionRow]:
    role: Role = "primary" if admin.role == "primary" else "secondary"
    rows = []
    for decision in decisions:
        action: Outcome
        diffs = decision.differences
        if decision.action != "create":
            action = decision.action
        elif dry_run:
            action = "would-create"
        else:
            action, diffs = _create(admin, decision)
        is_topic = decision.name.casefold() in topic_names
        entity_type: Literal["queue", "topic"] = "topic" if is_topic else "queue"
        messages = None
        if action == "extra":
            # A backlog queue beyond the count may still hold messages (the count was lowered): the syphon
            # keeps reading it while it does (bridge.paired.syphon_run), and it is not the operator's to
            # delete yet.
            messages = admin.queue_runtime_properties(decision.name).total_message_count
            action = "retired" if messages else "extra"
        rows.append(
            ProvisionRow(
                role, namespace.namespace_name, decision.name, purpose, entity_type, action, diffs, messages
            )
        )
    return rows


def _create(admin: NamespaceAdmin, decision: Provision) -> tuple[Outcome, tuple[Difference, ...]]:
    """Create a planned queue; one created meanwhile by someone else (a second provisioner) is compared."""
    description = decision.description or QueueDescription()
    try:
        admin.create_queue(decision.name, **description.options())
    except NamespaceConfigurationError:
        # "Already exists" and "unauthorized" look alike here; reading the queue back tells them apart
        # (an authorization problem fails the read too and propagates).
        queue = admin.get_queue(decision.name)
        if queue is None:
            raise
        diffs = plan({decision.name: description}, {decision.name: _observed(queue)})[0].differences
        return ("differs" if diffs else "exists"), diffs
    log.info("created queue %s in the %s namespace", decision.name, admin.role)
    return "created", ()


def _observed_queues(admin: NamespaceAdmin) -> dict[str, Mapping[str, object]]:
    return {queue.name: _observed(queue) for queue in admin.list_queues() if queue.name}


def _observed(properties: object) -> dict[str, object]:
    """The description fields of SDK ``QueueProperties``/``TopicProperties`` (absent ones as None)."""
    return {name: getattr(properties, name, None) for name in _DESCRIPTION_FIELDS}
