"""Entity descriptions and sent messages as JSON-able dicts, for the write-ahead log and its snapshots.

The log frames JSON fields plus raw blobs (``bridge.emulator.wal``); these functions say what goes in the
JSON. A message's encoded bytes travel as a blob, never through JSON.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
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
from bridge.emulator.model.messages import IncomingMessage

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
            value = {"sql": value.sql_expression, "parameters": value.parameters}
        elif isinstance(value, SqlRuleAction):
            value = {"action": value.sql_expression, "parameters": value.parameters}
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
            value = SqlRuleFilter(value["sql"], value.get("parameters") or {})
        elif isinstance(value, dict) and "action" in value:
            value = SqlRuleAction(value["action"], value.get("parameters") or {})
        elif isinstance(value, dict) and "correlation" in value:
            value = CorrelationRuleFilter(**value["correlation"])
        kwargs[fld.name] = value
    result: EntityDescription = cls(**kwargs)
    return result


def incoming_to_record(msg: IncomingMessage) -> dict[str, Any]:
    """A sent message's broker fields (``raw`` goes as a blob).

    Filter properties JSON cannot hold (dates, UUIDs, binaries) are left out of the record, so after a
    restart a replayed send is routed by the remaining properties only.
    """
    props = dict(msg.properties) if msg.properties else None
    return {
        "mid": msg.message_id,
        "sid": msg.session_id,
        "pk": msg.partition_key,
        "ttl": msg.time_to_live,
        "sch": msg.scheduled_at,
        "pr": _jsonable(props),
    }


def _jsonable(props: dict[str, Any] | None) -> dict[str, Any] | None:
    if props is None:
        return None
    return {k: v for k, v in props.items() if isinstance(v, str | int | float | bool) or v is None}


def incoming_from_record(fields: dict[str, Any], raw: bytes) -> IncomingMessage:
    """Inverse of ``incoming_to_record``."""
    return IncomingMessage(
        raw=raw,
        message_id=fields.get("mid"),
        session_id=fields.get("sid"),
        partition_key=fields.get("pk"),
        time_to_live=fields.get("ttl"),
        scheduled_at=fields.get("sch"),
        properties=fields.get("pr"),
    )
