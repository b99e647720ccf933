"""How each ingress door's wire format maps onto envelope fields (pure; the rules live in ``validation``).

Three formats reach the same ``build_envelope``: the JSON envelope of ``/v1`` (public contract in
``docs/doors/http.md``, "The envelope"), the Service Bus REST send protocol (``BrokerProperties`` header,
custom properties as headers, the ``application/vnd.microsoft.servicebus.json`` batch), and the Redis door's
stream fields (``docs/doors/redis-stream.md``). A malformed input raises ``InvalidMessageError`` with the
field at fault.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import uuid
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

from bridge.core.validation import ENVELOPE_FIELDS, TRACE_FIELDS, check_text
from bridge.errors import InvalidMessageError

V1_FIELDS = frozenset(("body", "body_encoding", *ENVELOPE_FIELDS))
BODY_ENCODINGS = ("text", "base64", "json")

# Service Bus REST BrokerProperties -> envelope field: every settable property of Microsoft's table
# (docs/references.md, "Service Bus REST send"), ContentType, and the batch format's TimeToLiveTimeSpan.
BROKER_PROPERTIES = {
    "MessageId": "message_id",
    "SessionId": "session_id",
    "PartitionKey": "partition_key",
    "ViaPartitionKey": "via_partition_key",
    "TimeToLive": "time_to_live",
    "TimeToLiveTimeSpan": "time_to_live",
    "ScheduledEnqueueTimeUtc": "scheduled_enqueue_time_utc",
    "CorrelationId": "correlation_id",
    "Label": "subject",
    "ReplyTo": "reply_to",
    "ReplyToSessionId": "reply_to_session_id",
    "To": "to",
    "ContentType": "content_type",
}
# Settable but without effect on what is stored (ForcePersistence) or read by the batch decoder itself
# (IsBodyBase64): accepted silently. Any other name is ignored as Service Bus ignores it, and reported.
SILENT_BROKER_PROPERTIES = frozenset(("ForcePersistence", "IsBodyBase64"))
# .NET TimeSpan text, ``[-][d.]hh:mm[:ss[.fffffff]]``, as TimeToLiveTimeSpan carries it.
_TIMESPAN = re.compile(r"(?:(\d+)\.)?(\d{1,2}):(\d{1,2})(?::(\d{1,2})(?:\.(\d{1,7}))?)?")


def v1_message(obj: object, index: int | None = None) -> tuple[bytes, dict[str, Any]]:
    """Body bytes and envelope properties from one ``/v1`` JSON envelope."""
    if not isinstance(obj, dict):
        raise InvalidMessageError("invalid_type", "a message must be a JSON object", index=index)
    for name in obj:
        if name not in V1_FIELDS:
            raise InvalidMessageError("unknown_field", f"unknown field {name!r}", field=name, index=index)
    if "body" not in obj:
        raise InvalidMessageError("field_required", "body is required", field="body", index=index)
    encoding = obj.get("body_encoding", "text")
    raw = obj["body"]
    props = {name: value for name, value in obj.items() if name not in ("body", "body_encoding")}
    if encoding == "text":
        if not isinstance(raw, str):
            raise InvalidMessageError(
                "invalid_type", "body must be a string when body_encoding is text", field="body", index=index
            )
        check_text(raw, "body", index)
        return raw.encode(), props
    if encoding == "base64":
        if not isinstance(raw, str):
            raise InvalidMessageError("invalid_type", "body must be base64 text", field="body", index=index)
        try:
            return base64.b64decode(raw, validate=True), props
        except (binascii.Error, ValueError):
            raise InvalidMessageError(
                "body_invalid_base64", "body is not valid base64", "body", index
            ) from None
    if encoding == "json":
        props.setdefault("content_type", "application/json")
        try:
            return json.dumps(raw, separators=(",", ":"), ensure_ascii=False).encode(), props
        except UnicodeEncodeError:
            raise InvalidMessageError(
                "invalid_utf8", "body holds a lone surrogate, which has no UTF-8 form", "body", index
            ) from None
    raise InvalidMessageError(
        "body_encoding_invalid",
        f"body_encoding must be one of {', '.join(BODY_ENCODINGS)}",
        "body_encoding",
        index,
    )


def rest_message(
    body: bytes,
    broker_properties: str | Mapping[str, Any] | None,
    custom: Mapping[str, Any],
    content_type: str | None,
    index: int | None = None,
    *,
    typed_custom: bool = False,
    ignored: list[str] | None = None,
) -> tuple[bytes, dict[str, Any]]:
    """Body and envelope properties from the Service Bus REST protocol.

    ``broker_properties`` is the ``BrokerProperties`` header text (or, in a batch, the parsed object);
    ``custom`` maps custom property names, as sent, to header text (typed as the REST API does: a JSON
    number, ``true``/``false`` or a quoted string; other text is taken as a string) or, with
    ``typed_custom`` (a batch's ``UserProperties``), to JSON values kept as they are. Broker properties
    Service Bus ignores are ignored too and their names appended to ``ignored``.
    """
    props: dict[str, Any] = {}
    if content_type:
        props["content_type"] = content_type
    if broker_properties is not None:
        for name, value in _broker_object(broker_properties, index).items():
            target = BROKER_PROPERTIES.get(name)
            if target is None:
                if ignored is not None and name not in SILENT_BROKER_PROPERTIES:
                    ignored.append(name)
            elif target == "scheduled_enqueue_time_utc" and isinstance(value, str):
                props[target] = rest_time(value)
            elif name == "TimeToLive" and isinstance(value, str):
                props[target] = _seconds_text(value, index)
            elif name == "TimeToLiveTimeSpan":
                props[target] = timespan_seconds(value, index)
            else:
                props[target] = value
    if custom:
        props["application_properties"] = (
            dict(custom) if typed_custom else {name: _custom_value(value) for name, value in custom.items()}
        )
    return body, props


def _broker_object(broker_properties: str | Mapping[str, Any], index: int | None) -> Mapping[str, Any]:
    if isinstance(broker_properties, str):
        try:
            broker_properties = json.loads(broker_properties)
        except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser goes
            raise InvalidMessageError(
                "invalid_broker_properties", "BrokerProperties is not JSON", "BrokerProperties", index
            ) from None
    if not isinstance(broker_properties, Mapping):
        raise InvalidMessageError(
            "invalid_broker_properties", "BrokerProperties must be a JSON object", "BrokerProperties", index
        )
    return broker_properties


def _seconds_text(value: str, index: int | None) -> float:
    """TimeToLive sent as text (Python's 0.x SDK writes ``"1800"``): a decimal number of seconds."""
    try:
        seconds = float(value.strip())
    except ValueError:
        raise InvalidMessageError(
            "time_to_live_invalid", "TimeToLive is not a number of seconds", "time_to_live", index
        ) from None
    if math.isnan(seconds):
        raise InvalidMessageError("time_to_live_invalid", "TimeToLive is not a number", "time_to_live", index)
    return seconds


def timespan_seconds(value: object, index: int | None = None) -> float:
    """Seconds of a .NET TimeSpan text such as ``"0.00:00:40"`` or ``"00:01:30.5"`` (TimeToLiveTimeSpan)."""
    match = _TIMESPAN.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None:
        raise InvalidMessageError(
            "time_to_live_invalid",
            "TimeToLiveTimeSpan is not a TimeSpan ([d.]hh:mm:ss[.fffffff])",
            "time_to_live",
            index,
        )
    days, hours, minutes, secs, fraction = match.groups()
    if int(hours) > 23 or int(minutes) > 59 or int(secs or 0) > 59:
        raise InvalidMessageError(
            "time_to_live_invalid",
            "TimeToLiveTimeSpan has an hour, minute or second out of range",
            "time_to_live",
            index,
        )
    return (
        int(days or 0) * 86400
        + int(hours) * 3600
        + int(minutes) * 60
        + int(secs or 0)
        + (int(fraction) / 10 ** len(fraction) if fraction else 0.0)
    )


def rest_time(value: str) -> str:
    """RFC 1123 (what the REST API documents) or ISO-8601 text, as ISO-8601 for the validator."""
    try:
        return parsedate_to_datetime(value).isoformat()
    except (TypeError, ValueError, IndexError):
        return value  # not RFC 1123: let the ISO-8601 rule judge it


def _custom_value(value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return value
    if isinstance(parsed, float) and not math.isfinite(parsed):
        return value
    return parsed if isinstance(parsed, str | int | float | bool) else value


BATCH_ITEM_FIELDS = frozenset(("Body", "BrokerProperties", "UserProperties"))


def rest_batch(items: object, ignored: list[str] | None = None) -> list[tuple[bytes, dict[str, Any]]]:
    """A REST batch (``[{"Body": ..., "BrokerProperties": {...}, "UserProperties": {...}}, ...]``).

    ``BrokerProperties.IsBodyBase64: true`` marks a base64 ``Body`` (binary messages); ``UserProperties``
    keep their JSON types. Unknown item fields and broker properties are ignored, named in ``ignored``.
    """
    if not isinstance(items, list):
        raise InvalidMessageError("invalid_type", "a batch must be a JSON array", field="messages")
    out = []
    for index, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("Body"), str):
            raise InvalidMessageError(
                "invalid_type", "each batch item needs a string Body", field="Body", index=index
            )
        if ignored is not None:
            ignored.extend(sorted(set(item) - BATCH_ITEM_FIELDS))
        user = item.get("UserProperties")
        user = {} if user is None else user
        if not isinstance(user, dict):
            raise InvalidMessageError(
                "invalid_type", "UserProperties must be an object", "UserProperties", index
            )
        check_text(item["Body"], "Body", index)
        broker = item.get("BrokerProperties")
        body = _batch_body(item["Body"], broker, index)
        out.append(rest_message(body, broker, user, None, index, typed_custom=True, ignored=ignored))
    return out


def _batch_body(text: str, broker: object, index: int) -> bytes:
    flag = broker.get("IsBodyBase64") if isinstance(broker, dict) else None
    if flag in (None, False, "false", "False"):
        return text.encode()
    if flag not in (True, "true", "True"):
        raise InvalidMessageError("invalid_type", "IsBodyBase64 is true or false", "IsBodyBase64", index)
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidMessageError("body_invalid_base64", "Body is not valid base64", "Body", index) from None


REDIS_DOOR_TEXT = (
    "message_id",
    "reply_to_session_id",
    "via_partition_key",
    "content_type",
    "correlation_id",
    "subject",
    "reply_to",
    "to",
    "session_id",
    "partition_key",
    "scheduled_enqueue_time_utc",
)


def redis_door_message(fields: Mapping[bytes, bytes], default_id: str) -> tuple[bytes, dict[str, Any]]:
    """Body and envelope properties from a Redis door entry (layout: ``docs/doors/redis-stream.md``).

    ``default_id`` becomes the MessageId when the entry has none; the door derives it from the entry id so
    that moving the same entry twice (after a crash) is idempotent.
    """
    if b"body" not in fields:
        raise InvalidMessageError("field_required", "the entry has no body field", field="body")
    props: dict[str, Any] = {"message_id": default_id}
    body = bytes(fields[b"body"])
    for raw_name, raw_value in fields.items():
        try:
            name = raw_name.decode()
            value = raw_value.decode() if name != "body" else ""
        except UnicodeDecodeError:
            raise InvalidMessageError(
                "invalid_utf8", "field names and non-body values must be UTF-8", field=repr(raw_name)
            ) from None
        if name == "body":
            continue
        if name == "body_encoding":
            if value == "base64":
                try:
                    body = base64.b64decode(body, validate=True)
                except (binascii.Error, ValueError):
                    raise InvalidMessageError(
                        "body_invalid_base64", "body is not valid base64", "body"
                    ) from None
            elif value != "text":
                raise InvalidMessageError("body_encoding_invalid", "body_encoding is text or base64", name)
        elif name in REDIS_DOOR_TEXT or name in TRACE_FIELDS:
            props[name] = value
        elif name == "time_to_live":
            try:
                props[name] = float(value)
            except ValueError:
                raise InvalidMessageError(
                    "time_to_live_invalid", "time_to_live is not a number", name
                ) from None
        elif name == "application_properties":
            try:
                props[name] = json.loads(value)
            except (ValueError, RecursionError):
                raise InvalidMessageError(
                    "invalid_type", "application_properties is not JSON", name
                ) from None
        else:
            raise InvalidMessageError("unknown_field", f"unknown field {name!r}", field=name)
    return body, props


def door_message_id(entity: str, entry_id: str) -> str:
    """The MessageId of a Redis door entry without one: stable for the same entity and entry id."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"bridge-redis-door:{entity}:{entry_id}").hex
