"""The Atom/XML codec of the Service Bus management API, as ``ServiceBusAdministrationClient`` 7.15 speaks it.

Requests (PUT bodies) look like this after the SDK's ``ServiceBusXMLWorkaroundPolicy`` (captured from the
SDK): ``<ns0:entry xmlns:ns0="<atom>" xmlns="<sb>"><ns0:content type="application/xml"><QueueDescription>
<LockDuration>PT30S</LockDuration>...</QueueDescription></ns0:content></ns0:entry>``; only the fields the
caller set are present, the rest take Azure's defaults. Rule filters carry ``xsi:type`` (``SqlFilter``,
``TrueFilter``, ``FalseFilter``, ``CorrelationFilter``) and correlation properties arrive as
``<Properties><KeyValueOfstringanyType><Key/><Value xsi:type="d6p1:string"/></...></Properties>``
(``management/_utils.py:serialize_key_values``). Elements are matched by local name, so a client that
omits the namespaces is understood too.

Responses use the element names and namespaces of the SDK's generated models
(``management/_generated/models/_models.py``; its deserializer finds children by name, so runtime fields
follow the options rather than interleaving with them as Azure does): descriptions in the
``.../2010/10/servicebus/connect`` namespace, runtime counts in ``<CountDetails>`` with ``d2p1:`` children
in ``.../2011/06/servicebus``, lists as an Atom ``<feed>`` whose second ``<link>`` (``rel="next"``) carries
``$skip``/``$top`` of the next page (``_utils.py:get_next_template``). The SDK re-reads correlation
properties from ``KeyValueOfstringanyType`` with an ``xsi:type`` of ``prefix:type``
(``deserialize_key_values``), so that is what is written.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import fields
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from bridge.emulator.errors import ArgumentError
from bridge.emulator.http.timespans import format_duration, format_time, parse_duration
from bridge.emulator.model.descriptions import (
    CorrelationRuleFilter,
    EntityDescription,
    QueueDescription,
    RuleDescription,
    RuleFilter,
    RuntimeCounts,
    SqlRuleAction,
    SqlRuleFilter,
    SubscriptionDescription,
    TopicDescription,
)

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
SB_2011 = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"
CONTENT_TYPE = "application/atom+xml;type=entry;charset=utf-8"

# (XML element, dataclass field, type) in the order Azure writes them; runtime-only elements are handled
# separately. Types: dur (ISO-8601 duration), int, bool, str.
_QUEUE = [
    ("LockDuration", "lock_duration", "dur"),
    ("MaxSizeInMegabytes", "max_size_in_megabytes", "int"),
    ("RequiresDuplicateDetection", "requires_duplicate_detection", "bool"),
    ("RequiresSession", "requires_session", "bool"),
    ("DefaultMessageTimeToLive", "default_message_time_to_live", "dur"),
    ("DeadLetteringOnMessageExpiration", "dead_lettering_on_message_expiration", "bool"),
    ("DuplicateDetectionHistoryTimeWindow", "duplicate_detection_history_time_window", "dur"),
    ("MaxDeliveryCount", "max_delivery_count", "int"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("Status", "status", "str"),
    ("ForwardTo", "forward_to", "str"),
    ("UserMetadata", "user_metadata", "str"),
    ("AutoDeleteOnIdle", "auto_delete_on_idle", "dur"),
    ("EnablePartitioning", "enable_partitioning", "bool"),
    ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_messages_to", "str"),
    ("EnableExpress", "enable_express", "bool"),
    ("MaxMessageSizeInKilobytes", "max_message_size_in_kilobytes", "int"),
]
_TOPIC = [
    ("DefaultMessageTimeToLive", "default_message_time_to_live", "dur"),
    ("MaxSizeInMegabytes", "max_size_in_megabytes", "int"),
    ("RequiresDuplicateDetection", "requires_duplicate_detection", "bool"),
    ("DuplicateDetectionHistoryTimeWindow", "duplicate_detection_history_time_window", "dur"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("Status", "status", "str"),
    ("SupportOrdering", "support_ordering", "bool"),
    ("AutoDeleteOnIdle", "auto_delete_on_idle", "dur"),
    ("EnablePartitioning", "enable_partitioning", "bool"),
    ("UserMetadata", "user_metadata", "str"),
    ("EnableExpress", "enable_express", "bool"),
    ("MaxMessageSizeInKilobytes", "max_message_size_in_kilobytes", "int"),
]
_SUBSCRIPTION = [
    ("LockDuration", "lock_duration", "dur"),
    ("RequiresSession", "requires_session", "bool"),
    ("DefaultMessageTimeToLive", "default_message_time_to_live", "dur"),
    ("DeadLetteringOnMessageExpiration", "dead_lettering_on_message_expiration", "bool"),
    ("DeadLetteringOnFilterEvaluationExceptions", "dead_lettering_on_filter_evaluation_exceptions", "bool"),
    ("MaxDeliveryCount", "max_delivery_count", "int"),
    ("EnableBatchedOperations", "enable_batched_operations", "bool"),
    ("Status", "status", "str"),
    ("ForwardTo", "forward_to", "str"),
    ("UserMetadata", "user_metadata", "str"),
    ("ForwardDeadLetteredMessagesTo", "forward_dead_lettered_messages_to", "str"),
    ("AutoDeleteOnIdle", "auto_delete_on_idle", "dur"),
]
_POSITIVE = {"max_size_in_megabytes", "max_delivery_count", "max_message_size_in_kilobytes"}
_CORRELATION = [
    ("CorrelationId", "correlation_id"),
    ("MessageId", "message_id"),
    ("To", "to"),
    ("ReplyTo", "reply_to"),
    ("Label", "label"),
    ("SessionId", "session_id"),
    ("ReplyToSessionId", "reply_to_session_id"),
    ("ContentType", "content_type"),
]


# ---- parsing ----------------------------------------------------------------------------------------------
def parse_description(
    body: bytes, name: str, topic: str | None = None, subscription: str | None = None
) -> EntityDescription:
    """The description in a PUT body; its element (``QueueDescription``, ...) gives the kind."""
    root = _xml(body)
    if _local(root.tag) != "entry":
        raise ArgumentError("body: expected an Atom <entry>")
    content = _child(root, "content")
    described = list(content) if content is not None else []
    if not described:
        raise ArgumentError("body: the <entry> has no <content> with a description")
    element = described[0]
    tag = _local(element.tag)
    if tag == "QueueDescription":
        return QueueDescription(name=name, **_values(element, _QUEUE))
    if tag == "TopicDescription":
        return TopicDescription(name=name, **_values(element, _TOPIC))
    if tag == "SubscriptionDescription" and topic is not None:
        return SubscriptionDescription(topic_name=topic, name=name, **_values(element, _SUBSCRIPTION))
    if tag == "RuleDescription" and topic is not None and subscription is not None:
        return _rule(element, name, topic, subscription)
    raise ArgumentError(f"body: <{tag[:40]}> does not describe an entity at this path")


def parse_default_rule(body: bytes, topic: str, subscription: str) -> RuleDescription | None:
    """The ``<DefaultRuleDescription>`` of a subscription's PUT body, or None when it has none.

    The JavaScript SDK sends one for ``createSubscription(..., {defaultRuleOptions})``: the new subscription
    starts with that rule (named by its ``<Name>``, else ``$Default``) instead of the catch-all."""
    content = _child(_xml(body), "content")
    described = list(content) if content is not None else []
    if not described or _local(described[0].tag) != "SubscriptionDescription":
        return None
    element = _child(described[0], "DefaultRuleDescription")
    if element is None:
        return None
    named = _child(element, "Name")
    name = (named.text or "").strip() if named is not None else ""
    return _rule(element, name or "$Default", topic, subscription)


def _rule(element: ET.Element, name: str, topic: str, subscription: str) -> RuleDescription:
    return RuleDescription(
        topic_name=topic,
        subscription_name=subscription,
        name=name,
        filter=_parse_filter(_child(element, "Filter")),
        action=_parse_action(_child(element, "Action")),
    )


def _xml(body: bytes) -> ET.Element:
    # Refusing DTDs outright rules out entity expansion and external entities; Service Bus bodies never
    # carry one. The HTTP layer bounds the size.
    if b"<!DOCTYPE" in body or b"<!ENTITY" in body:
        raise ArgumentError("body: DTDs are not accepted")
    try:
        return ET.fromstring(body)  # noqa: S314 - DTDs refused above, size bounded by the HTTP server
    except ET.ParseError as exc:
        raise ArgumentError(f"body: not well-formed XML ({exc})") from None


def _values(element: ET.Element, table: list[tuple[str, str, str]]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for xml_name, attr, kind in table:
        child = _child(element, xml_name)
        if child is None:
            continue
        text = (child.text or "").strip()
        if kind == "str":
            # An empty optional string means "not set"; an empty Status means the default.
            values[attr] = text or ("Active" if attr == "status" else None)
        elif kind == "bool":
            if text.lower() not in ("true", "false"):
                raise ArgumentError(f"{xml_name}: {text[:20]!r} is not true or false")
            values[attr] = text.lower() == "true"
        elif kind == "int":
            if not re.fullmatch(r"-?\d{1,12}", text) or (attr in _POSITIVE and int(text) < 1):
                raise ArgumentError(f"{xml_name}: {text[:20]!r} is not a positive integer")
            values[attr] = int(text)
        else:
            values[attr] = parse_duration(text, xml_name)
    return values


def _parse_action(action: ET.Element | None) -> SqlRuleAction | None:
    if action is None:
        return None
    kind = _xsi_type(action)
    expression = _child(action, "SqlExpression")
    if kind == "EmptyRuleAction" or (kind is None and expression is None):
        return None
    if kind not in (None, "SqlRuleAction"):
        raise ArgumentError(f"Action: unsupported action type {kind[:40]!r}")
    text = (expression.text or "").strip() if expression is not None else ""
    if not text:
        raise ArgumentError("SqlExpression: a SQL rule action needs an expression")
    return SqlRuleAction(text, _parse_properties(_child(action, "Parameters"), "Parameters"))


def _parse_filter(element: ET.Element | None) -> RuleFilter:
    if element is None:
        return SqlRuleFilter("1=1")
    kind = _xsi_type(element) or "SqlFilter"
    if kind == "TrueFilter":
        return SqlRuleFilter("1=1")
    if kind == "FalseFilter":
        return SqlRuleFilter("1=0")
    if kind == "SqlFilter":
        expression = _child(element, "SqlExpression")
        text = (expression.text or "").strip() if expression is not None else ""
        if not text:
            raise ArgumentError("SqlExpression: a SQL filter needs an expression")
        return SqlRuleFilter(text, _parse_properties(_child(element, "Parameters"), "Parameters"))
    if kind == "CorrelationFilter":
        found = {
            attr: (child.text or "")
            for xml_name, attr in _CORRELATION
            if (child := _child(element, xml_name)) is not None
        }
        return CorrelationRuleFilter(**found, properties=_parse_properties(_child(element, "Properties")))
    raise ArgumentError(f"Filter: unsupported filter type {kind[:40]!r}")


def _parse_properties(element: ET.Element | None, label: str = "Properties") -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for pair in element if element is not None else []:
        key, value = _child(pair, "Key"), _child(pair, "Value")
        if key is None or value is None or not key.text:
            raise ArgumentError(f"{label}: each entry needs a Key and a Value")
        kind = _xsi_type(value) or "string"
        properties[key.text] = _typed(key.text, kind, value.text or "", label)
    return properties


def _typed(key: str, kind: str, text: str, label: str = "Properties") -> Any:
    try:
        if kind == "string":
            return text
        if kind in ("int", "long"):
            return int(text)
        if kind == "double":
            return float(text)
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
    except ValueError:
        pass
    reason = f"{key[:40]!r} ({kind[:20]}) is malformed or of an unsupported type"
    raise ArgumentError(f"{label}: {reason}")


def _child(element: ET.Element, name: str) -> ET.Element | None:
    for child in element:
        if _local(child.tag) == name:
            return child
    return None


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _xsi_type(element: ET.Element) -> str | None:
    """The ``xsi:type`` without its prefix (``d6p1:string`` → ``string``)."""
    value = element.get(f"{{{XSI}}}type")
    return value.split(":")[-1] if value else None


# ---- rendering --------------------------------------------------------------------------------------------
def render_entry(desc: EntityDescription, url: str, counts: RuntimeCounts | None, author: str) -> bytes:
    """One entity as a standalone Atom ``<entry>`` document (GET and PUT answers)."""
    return _document(_entry(desc, url, counts, author, xmlns=True))


def render_feed(
    title: str,
    url: str,
    entries: Iterable[tuple[EntityDescription, str, RuntimeCounts | None]],
    *,
    author: str,
    next_url: str | None,
    now: float,
) -> bytes:
    """A list page: an Atom ``<feed>`` of entries, with a ``next`` link when more pages follow."""
    links = f'<link rel="self" href={quoteattr(url)}/>'
    if next_url:
        links += f'<link rel="next" href={quoteattr(next_url)}/>'
    body = "".join(_entry(desc, link, counts, author, xmlns=False) for desc, link, counts in entries)
    return _document(
        f'<feed xmlns="{ATOM}"><title type="text">{escape(title)}</title><id>{escape(url)}</id>'
        f"<updated>{format_time(now)}</updated>{links}{body}</feed>"
    )


def render_error(code: int, detail: str) -> bytes:
    """Azure's error body: ``<Error><Code>404</Code><Detail>...</Detail></Error>``."""
    return _document(f"<Error><Code>{code}</Code><Detail>{escape(detail)}</Detail></Error>")


def render_namespace(name: str, url: str, created: float, now: float) -> bytes:
    """The ``/$namespaceinfo`` entry ``get_namespace_properties`` reads."""
    info = (
        f'<NamespaceInfo xmlns="{SB}" xmlns:i="{XSI}"><Alias>{escape(name)}</Alias>'
        f"<CreatedTime>{format_time(created)}</CreatedTime><MessagingSKU>Standard</MessagingSKU>"
        f"<MessagingUnits>1</MessagingUnits><ModifiedTime>{format_time(now)}</ModifiedTime>"
        f"<Name>{escape(name)}</Name><NamespaceType>Messaging</NamespaceType></NamespaceInfo>"
    )
    return _document(
        f'<entry xmlns="{ATOM}"><id>{escape(url)}</id><title type="text">{escape(name)}</title>'
        f"<updated>{format_time(now)}</updated><author><name>{escape(name)}</name></author>"
        f'<link rel="self" href={quoteattr(url)}/>'
        f'<content type="application/xml">{info}</content></entry>'
    )


def _document(xml: str) -> bytes:
    return ('<?xml version="1.0" encoding="utf-8"?>' + xml).encode()


def _entry(desc: EntityDescription, url: str, counts: RuntimeCounts | None, author: str, xmlns: bool) -> str:
    created = format_time(counts.created_at if counts else 0.0)
    updated = format_time(counts.updated_at if counts else 0.0)
    namespace = f' xmlns="{ATOM}"' if xmlns else ""
    return (
        f'<entry{namespace}><id>{escape(url)}</id><title type="text">{escape(desc.name)}</title>'
        f"<published>{created}</published><updated>{updated}</updated>"
        f'<author><name>{escape(author)}</name></author><link rel="self" href={quoteattr(url)}/>'
        f'<content type="application/xml">{_description(desc, counts)}</content></entry>'
    )


def _description(desc: EntityDescription, counts: RuntimeCounts | None) -> str:
    head = f' xmlns="{SB}" xmlns:i="{XSI}"'
    if isinstance(desc, RuleDescription):
        created = format_time(counts.created_at if counts else 0.0)
        return (
            f"<RuleDescription{head}>{_filter(desc.filter)}{_action(desc.action)}"
            f"<CreatedAt>{created}</CreatedAt><Name>{escape(desc.name)}</Name></RuleDescription>"
        )
    counts = counts or RuntimeCounts()
    if isinstance(desc, QueueDescription):
        tag, table = "QueueDescription", _QUEUE
    elif isinstance(desc, TopicDescription):
        tag, table = "TopicDescription", _TOPIC
    else:
        tag, table = "SubscriptionDescription", _SUBSCRIPTION
    return f"<{tag}{head}>{''.join(_fields(desc, table))}{_runtime(desc, counts)}</{tag}>"


def _fields(desc: EntityDescription, table: list[tuple[str, str, str]]) -> Iterable[str]:
    known = {f.name for f in fields(desc)}
    for xml_name, attr, kind in table:
        value = getattr(desc, attr) if attr in known else None
        if value is None:
            continue
        if kind == "dur":
            text = format_duration(value)
        elif kind == "bool":
            text = "true" if value else "false"
        else:
            text = escape(str(value))
        yield f"<{xml_name}>{text}</{xml_name}>"


def _runtime(desc: EntityDescription, counts: RuntimeCounts) -> str:
    details = (
        f'<CountDetails xmlns:d2p1="{SB_2011}">'
        f"<d2p1:ActiveMessageCount>{counts.active_message_count}</d2p1:ActiveMessageCount>"
        f"<d2p1:DeadLetterMessageCount>{counts.dead_letter_message_count}</d2p1:DeadLetterMessageCount>"
        f"<d2p1:ScheduledMessageCount>{counts.scheduled_message_count}</d2p1:ScheduledMessageCount>"
        f"<d2p1:TransferMessageCount>{counts.transfer_message_count}</d2p1:TransferMessageCount>"
        f"<d2p1:TransferDeadLetterMessageCount>{counts.transfer_dead_letter_message_count}"
        f"</d2p1:TransferDeadLetterMessageCount></CountDetails>"
    )
    times = (
        f"<CreatedAt>{format_time(counts.created_at)}</CreatedAt>"
        f"<UpdatedAt>{format_time(counts.updated_at)}</UpdatedAt>"
        f"<AccessedAt>{format_time(counts.accessed_at)}</AccessedAt>"
    )
    sizes = f"<SizeInBytes>{counts.size_in_bytes}</SizeInBytes>"
    extra = "<EntityAvailabilityStatus>Available</EntityAvailabilityStatus>"
    if isinstance(desc, TopicDescription):
        subscriptions = f"<SubscriptionCount>{counts.subscription_count}</SubscriptionCount>"
        return f"{sizes}{times}{details}{subscriptions}{extra}"
    return f"{sizes}<MessageCount>{counts.total_message_count}</MessageCount>{times}{details}{extra}"


def _filter(rule_filter: RuleFilter) -> str:
    if isinstance(rule_filter, CorrelationRuleFilter):
        parts = "".join(
            f"<{xml_name}>{escape(value)}</{xml_name}>"
            for xml_name, attr in _CORRELATION
            if (value := getattr(rule_filter, attr)) is not None
        )
        properties = "".join(_property(key, value) for key, value in rule_filter.properties.items())
        return f'<Filter i:type="CorrelationFilter">{parts}<Properties>{properties}</Properties></Filter>'
    expression = rule_filter.sql_expression.strip()
    compact = expression.replace(" ", "").upper()
    kind = (
        "TrueFilter"
        if compact in ("1=1", "TRUE")
        else "FalseFilter"
        if compact in ("1=0", "FALSE")
        else "SqlFilter"
    )
    return (
        f'<Filter i:type="{kind}"><SqlExpression>{escape(expression)}</SqlExpression>'
        f"<CompatibilityLevel>20</CompatibilityLevel>{_parameters(rule_filter.parameters)}</Filter>"
    )


def _action(action: SqlRuleAction | None) -> str:
    if action is None:
        return '<Action i:type="EmptyRuleAction"/>'
    return (
        f'<Action i:type="SqlRuleAction"><SqlExpression>{escape(action.sql_expression)}</SqlExpression>'
        f"<CompatibilityLevel>20</CompatibilityLevel>{_parameters(action.parameters)}</Action>"
    )


def _parameters(parameters: dict[str, Any]) -> str:
    if not parameters:
        return ""
    return f"<Parameters>{''.join(_property(key, value) for key, value in parameters.items())}</Parameters>"


def _property(key: str, value: Any) -> str:
    if isinstance(value, bool):
        kind, text = "boolean", "true" if value else "false"
    elif isinstance(value, int):
        kind, text = ("int" if -(2**31) <= value < 2**31 else "long"), str(value)
    elif isinstance(value, float):
        kind, text = "double", repr(value)
    else:
        kind, text = "string", str(value)
    return (
        f"<KeyValueOfstringanyType><Key>{escape(key)}</Key>"
        f'<Value i:type="d6p1:{kind}" xmlns:d6p1="{XSD}">{escape(text)}</Value>'
        "</KeyValueOfstringanyType>"
    )
