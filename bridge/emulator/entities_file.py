"""Entities declared at start-up (``bridge emulator --entities FILE``), in TOML.

Field names are those of the description dataclasses; durations are seconds::

    [queues.orders]
    lock_duration = 30
    max_delivery_count = 5
    requires_session = true

    [topics.events]
    [topics.events.subscriptions.audit]
    [topics.events.subscriptions.red-only.rules.red]
    sql = "color = 'red'"          # or: correlation = { label = "x", properties = { color = "red" } }
    parameters = { }               # SQL filter parameters, e.g. { "@min" = 10 }
    action = "SET seen = TRUE"     # optional SQL rule action
    action_parameters = { }

A subscription with a ``rules`` table gets exactly those rules (its ``$Default`` rule is removed).
"""

from __future__ import annotations

import dataclasses
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

from bridge.emulator.model.descriptions import (
    CorrelationRuleFilter,
    EntityDescription,
    QueueDescription,
    RuleDescription,
    SqlRuleAction,
    SqlRuleFilter,
    SubscriptionDescription,
    TopicDescription,
)
from bridge.errors import EmulatorError


def load_entities(path: Path) -> list[EntityDescription]:
    """Descriptions in creation order (topics before their subscriptions before their rules)."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise EmulatorError(f"cannot read entities file {str(path)!r}: {exc}") from None
    return parse_entities(data, str(path))


def parse_entities(data: dict[str, Any], source: str = "entities") -> list[EntityDescription]:
    """Descriptions from an already-parsed TOML document."""
    unknown = set(data) - {"queues", "topics"}
    if unknown:
        raise EmulatorError(f"{source}: unknown top-level table(s) {sorted(unknown)}; use queues/topics")
    out: list[EntityDescription] = []
    for name, options in (data.get("queues") or {}).items():
        out.append(_build(QueueDescription, f"{source}: queues.{name}", name=name, **options))
    for name, raw_options in (data.get("topics") or {}).items():
        options = dict(raw_options)  # a copy: the caller's document stays as it was
        subs = options.pop("subscriptions", {}) or {}
        out.append(_build(TopicDescription, f"{source}: topics.{name}", name=name, **options))
        for sub_name, raw_sub_options in subs.items():
            sub_options = dict(raw_sub_options)
            rules = sub_options.pop("rules", None)
            where = f"{source}: topics.{name}.subscriptions.{sub_name}"
            out.append(_build(SubscriptionDescription, where, topic_name=name, name=sub_name, **sub_options))
            if rules is None:
                continue
            for rule_name, rule in rules.items():
                rule_where = f"{where}.rules.{rule_name}"
                unknown_keys = set(rule) - {"sql", "parameters", "correlation", "action", "action_parameters"}
                if unknown_keys:
                    raise EmulatorError(f"{rule_where}: unknown option(s) {sorted(unknown_keys)}")
                action = (
                    SqlRuleAction(str(rule["action"]), dict(rule.get("action_parameters") or {}))
                    if "action" in rule
                    else None
                )
                out.append(RuleDescription(name, sub_name, rule_name, _filter(rule, rule_where), action))
    return out


def _filter(rule: dict[str, Any], where: str) -> SqlRuleFilter | CorrelationRuleFilter:
    if "sql" in rule:
        return SqlRuleFilter(str(rule["sql"]), dict(rule.get("parameters") or {}))
    if "correlation" in rule:
        try:
            return CorrelationRuleFilter(**rule["correlation"])
        except TypeError as exc:
            raise EmulatorError(f"{where}: {exc}") from None
    raise EmulatorError(f"{where}: a rule needs 'sql' or 'correlation'")


def _build(cls: type[Any], where: str, **options: Any) -> Any:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in options.items():
        if key not in fields:
            raise EmulatorError(f"{where}: unknown option {key!r}")
        # Durations are seconds in TOML; descriptions use postponed annotations, hence the string compare.
        kwargs[key] = timedelta(seconds=float(value)) if fields[key].type == "timedelta" else value
    return cls(**kwargs)
