"""Rule management over AMQP: ``add-rule``, ``remove-rule`` and ``enumerate-rules`` on a subscription.

``ServiceBusAdministrationClient`` manages rules over HTTP, but the .NET SDK's ``ServiceBusRuleManager``,
the Java SDK and older Python clients send these three operations to the subscription's ``$management``
node instead, with only Listen rights (``docs/local-servicebus.md``). The wire shapes follow Service Bus's
AMQP request/response reference (``docs/references.md``):

- ``add-rule``: ``{"rule-name", "rule-description": {"sql-filter": {"expression"} | "correlation-filter":
  {"correlation-id", "message-id", "to", "reply-to", "label", "session-id", "reply-to-session-id",
  "content-type", "properties"}, "sql-rule-action": {"expression"} | None}}``.
- ``remove-rule``: ``{"rule-name"}``.
- ``enumerate-rules``: ``{"top", "skip"}`` answered with ``{"rules": [{"rule-description": <described
  list [filter, action, name, created-at]>}]}``. The filter and action are described lists too; their
  descriptor codes are the ones the .NET and Java clients decode, including the filters' shorter codes
  (``0x1370000006`` rather than ``0x13700000006``: both SDKs spell them with one zero fewer, and the
  service answers what they decode).

The rules themselves are the same objects the HTTP management endpoint creates (``Namespace.create``), so
they are journaled, route messages and show in ``list_rules`` alike.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from proton import Described, ulong

from bridge.emulator.amqp.codec import ts
from bridge.emulator.errors import ArgumentError
from bridge.emulator.model.descriptions import (
    CorrelationRuleFilter,
    EntityKind,
    RuleDescription,
    RuleFilter,
    SqlRuleAction,
    SqlRuleFilter,
)
from bridge.emulator.model.namespace import Namespace

RULE_DESCRIPTION = 0x0000013700000004
EMPTY_RULE_ACTION = 0x0000013700000005
SQL_RULE_ACTION = 0x0000013700000006
SQL_FILTER = 0x000001370000006
TRUE_FILTER = 0x000001370000007
FALSE_FILTER = 0x000001370000008
CORRELATION_FILTER = 0x000001370000009
COMPATIBILITY_LEVEL = 20  # what Service Bus reports for every SQL filter and action

_CORRELATION_FIELDS = (
    ("correlation-id", "correlation_id"),
    ("message-id", "message_id"),
    ("to", "to"),
    ("reply-to", "reply_to"),
    ("label", "label"),
    ("session-id", "session_id"),
    ("reply-to-session-id", "reply_to_session_id"),
    ("content-type", "content_type"),
)

Handler = Callable[[Namespace, str, Mapping[Any, Any], float], Any]


def _subscription(path: str) -> tuple[str, str]:
    """``topic/Subscriptions/sub`` → (topic, subscription); rules live on subscriptions only."""
    parts = path.strip("/").split("/")
    if len(parts) != 3 or parts[1].lower() != "subscriptions":
        raise ArgumentError(f"Rule operations are only valid on a subscription, not on '{path}'.")
    return parts[0], parts[2]


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)


def _map(value: Any, what: str) -> Mapping[Any, Any]:
    if not isinstance(value, Mapping):
        raise ArgumentError(f"'{what}' must be a map.")
    return {_text(k): v for k, v in value.items()}


def _rule_name(body: Mapping[Any, Any]) -> str:
    name = _text(body.get("rule-name"))
    if not name:
        raise ArgumentError("rule-name is required.")
    return name


def parse_filter(description: Mapping[Any, Any]) -> RuleFilter:
    """The filter of an ``add-rule`` description (exactly one of ``sql-filter``, ``correlation-filter``)."""
    sql, correlation = description.get("sql-filter"), description.get("correlation-filter")
    if (sql is None) == (correlation is None):
        raise ArgumentError("A rule description needs exactly one of sql-filter and correlation-filter.")
    if sql is not None:
        expression = _text(_map(sql, "sql-filter").get("expression"))
        if not expression:
            raise ArgumentError("sql-filter needs an expression.")
        return SqlRuleFilter(expression)
    fields = _map(correlation, "correlation-filter")
    raw = fields.get("properties")
    properties = {str(k): v for k, v in _map(raw, "properties").items()} if raw else {}
    return CorrelationRuleFilter(
        **{attr: _text(fields.get(key)) for key, attr in _CORRELATION_FIELDS}, properties=properties
    )


def parse_action(description: Mapping[Any, Any]) -> SqlRuleAction | None:
    """The optional ``sql-rule-action`` of an ``add-rule`` description."""
    action = description.get("sql-rule-action")
    if action is None:
        return None
    expression = _text(_map(action, "sql-rule-action").get("expression"))
    return SqlRuleAction(expression) if expression else None


def _add(namespace: Namespace, path: str, body: Mapping[Any, Any], now: float) -> Any:
    topic, subscription = _subscription(path)
    description = _map(body.get("rule-description"), "rule-description")
    rule = RuleDescription(
        topic, subscription, _rule_name(body), parse_filter(description), parse_action(description)
    )
    namespace.create(rule, now)
    return {}  # 200 OK, which the .NET and Java clients check for


def _remove(namespace: Namespace, path: str, body: Mapping[Any, Any], now: float) -> Any:
    topic, subscription = _subscription(path)
    namespace.delete(EntityKind.RULE, f"{topic}/Subscriptions/{subscription}/Rules/{_rule_name(body)}")
    return {}


def _enumerate(namespace: Namespace, path: str, body: Mapping[Any, Any], now: float) -> Any:
    topic, subscription = _subscription(path)
    skip, top = int(body.get("skip", 0)), int(body.get("top", 100))
    if skip < 0 or top < 1:
        raise ArgumentError("skip must be at least 0 and top at least 1.")
    listed = namespace.list(EntityKind.RULE, f"{topic}/Subscriptions/{subscription}")[skip : skip + top]
    rules = [r for r in listed if isinstance(r, RuleDescription)]
    if not rules:
        return None  # Service Bus answers 204 No Content past the last rule
    # Rules keep no creation time of their own; the HTTP endpoint reports the subscription's too.
    created = namespace.runtime(EntityKind.SUBSCRIPTION, f"{topic}/Subscriptions/{subscription}").created_at
    return {"rules": [{"rule-description": encode_rule(r, created)} for r in rules]}


def encode_filter(rule_filter: RuleFilter) -> Described:
    """A filter as the described list the SDKs decode (``1=1`` and ``1=0`` as the true and false filters)."""
    if isinstance(rule_filter, CorrelationRuleFilter):
        values: list[Any] = [getattr(rule_filter, attr) for _, attr in _CORRELATION_FIELDS]
        properties: Any = dict(rule_filter.properties)
        return Described(ulong(CORRELATION_FILTER), [*values, properties])
    expression = rule_filter.sql_expression.strip()
    if expression == "1=1":
        return Described(ulong(TRUE_FILTER), [])
    if expression == "1=0":
        return Described(ulong(FALSE_FILTER), [])
    return Described(ulong(SQL_FILTER), [rule_filter.sql_expression, COMPATIBILITY_LEVEL])


def encode_rule(rule: RuleDescription, created_at: float) -> Described:
    """One ``rule-description`` entry: [filter, action, name, created-at]."""
    if rule.action is None:
        action = Described(ulong(EMPTY_RULE_ACTION), [])
    else:
        action = Described(ulong(SQL_RULE_ACTION), [rule.action.sql_expression, COMPATIBILITY_LEVEL])
    return Described(ulong(RULE_DESCRIPTION), [encode_filter(rule.filter), action, rule.name, ts(created_at)])


OPERATIONS: dict[str, Handler] = {
    "com.microsoft:add-rule": _add,
    "com.microsoft:remove-rule": _remove,
    "com.microsoft:enumerate-rules": _enumerate,
}
