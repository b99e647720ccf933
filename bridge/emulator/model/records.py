"""Entity descriptions as JSON-able dicts, for the write-ahead log and its snapshots."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from bridge.emulator.model.descriptions import (
    CorrelationRuleFilter,
    EntityDescription,
    QueueDescription,
    RuleDescription,
    SqlRuleFilter,
    SubscriptionDescription,
    TopicDescription,
)

_KINDS: dict[str, type[Any]] = {
    "queue": QueueDescription,
    "topic": TopicDescription,
    "subscription": SubscriptionDescription,
    "rule": RuleDescription,
}


def description_to_dict(desc: EntityDescription) -> dict[str, Any]:
    """``{"kind": ..., field: value}`` with durations in seconds and the rule filter nested."""
    kind = next(k for k, cls in _KINDS.items() if isinstance(desc, cls))
    out: dict[str, Any] = {"kind": kind}
    for fld in dataclasses.fields(desc):
        value = getattr(desc, fld.name)
        if isinstance(value, timedelta):
            value = {"td": value.total_seconds()}
        elif isinstance(value, SqlRuleFilter):
            value = {"sql": value.sql_expression}
        elif isinstance(value, CorrelationRuleFilter):
            value = {"correlation": {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}}
        out[fld.name] = value
    return out


def description_from_dict(data: dict[str, Any]) -> EntityDescription:
    """Inverse of ``description_to_dict``."""
    cls = _KINDS[data["kind"]]
    kwargs: dict[str, Any] = {}
    for fld in dataclasses.fields(cls):
        if fld.name not in data:
            continue
        value = data[fld.name]
        if isinstance(value, dict) and "td" in value:
            value = timedelta(seconds=value["td"])
        elif isinstance(value, dict) and "sql" in value:
            value = SqlRuleFilter(value["sql"])
        elif isinstance(value, dict) and "correlation" in value:
            value = CorrelationRuleFilter(**value["correlation"])
        kwargs[fld.name] = value
    result: EntityDescription = cls(**kwargs)
    return result
