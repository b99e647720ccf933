"""A message's trace context as plain strings: W3C ``traceparent`` and ``tracestate`` (pure, no I/O).

The bridge carries one *creation context* per message from the door to the handler (``docs/tracing.md``):
the door stores it with the outbox entry (``Envelope.traceparent``/``tracestate``), the send workers write it
on the broker message as the application properties the azure-servicebus SDK itself writes when its tracing
is on (``Diagnostic-Id`` and ``traceparent``, both the traceparent text, and ``tracestate``), and a receiver
(the bridge's or any SDK consumer) reads it back from there. Everything here is text in, text out, so the
core stays free of OpenTelemetry; the spans are ``bridge.observability.tracing``'s.

A malformed value is dropped, never refused: W3C Trace Context asks a receiver that cannot parse
``traceparent`` to start a new trace (and then to ignore ``tracestate``), and a message must not be lost or
refused for its trace context.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
DIAGNOSTIC_ID = "Diagnostic-Id"
"""The property names on a Service Bus message (the SDK's ``_common/tracing.py`` writes all three)."""

# version 00: 2 + 1 + 32 + 1 + 16 + 1 + 2 = 55 characters; lower-case hex; all-zero ids are invalid.
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
_ZERO_TRACE = "0" * 32
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_ZERO_SPAN = "0" * 16
MAX_TRACESTATE = 512
"""W3C: a vendor may drop ``tracestate`` beyond 512 characters; the bridge keeps at most that."""
_TRACESTATE_CHARS = re.compile(r"[\x20-\x7e]*")


def _ascii(value: object) -> str | None:
    if type(value) is bytes:
        try:
            return value.decode("ascii")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def valid_traceparent(value: object) -> str | None:
    """``value`` when it is a ``traceparent`` the bridge may carry, else None.

    Version ``00`` must be exactly 55 characters; a later version may carry more after the flags (W3C's
    forward compatibility) and is kept as it is; version ``ff`` and all-zero ids are invalid.
    """
    text = _ascii(value)
    if text is None or len(text) > 512:
        return None
    match = _TRACEPARENT.fullmatch(text)
    if match is None:
        return None
    version, trace, span, _flags, rest = match.groups()
    if version == "ff" or trace == _ZERO_TRACE or span == _ZERO_SPAN:
        return None
    if version == "00" and rest is not None:
        return None
    return text


def valid_tracestate(value: object) -> str | None:
    """``value`` when it is printable ASCII of at most ``MAX_TRACESTATE`` characters, else None."""
    text = _ascii(value)
    if not text or len(text) > MAX_TRACESTATE:
        return None
    return text if _TRACESTATE_CHARS.fullmatch(text) else None


def trace_id(traceparent: str | None) -> str | None:
    """The 32 hex digits of the trace id in a (valid) ``traceparent``."""
    return traceparent[3:35] if traceparent else None


def viewer_url(template: str | None, trace: str | None) -> str | None:
    """``template`` (the ``trace_url`` setting) with ``{trace_id}`` replaced by ``trace``, when both are
    given and ``trace`` is a W3C trace id (32 lower-case hex digits, not all zero); else None."""
    if template is None or trace is None or not _TRACE_ID.fullmatch(trace) or trace == _ZERO_TRACE:
        return None
    return template.replace("{trace_id}", trace)


def incoming(traceparent: object, tracestate: object) -> tuple[str | None, str | None]:
    """A valid pair from what a door received; without a valid ``traceparent`` there is no ``tracestate``."""
    parent = valid_traceparent(traceparent)
    if parent is None:
        return None, None
    return parent, valid_tracestate(tracestate)


def from_properties(properties: Mapping[str, object]) -> tuple[str | None, str | None]:
    """The creation context written on a broker message: ``traceparent``, else ``Diagnostic-Id`` (the
    SDK's order when it reads a message back), and ``tracestate``."""
    if not properties:
        return None, None
    value = properties.get(TRACEPARENT)
    if value is None:
        value = properties.get(DIAGNOSTIC_ID)
    if value is None:
        return None, None
    return incoming(value, properties.get(TRACESTATE))


def message_properties(traceparent: str, tracestate: str | None) -> dict[str, str]:
    """The application properties that carry the creation context on a broker message."""
    out = {DIAGNOSTIC_ID: traceparent, TRACEPARENT: traceparent}
    if tracestate:
        out[TRACESTATE] = tracestate
    return out


def property_bytes(traceparent: str | None, tracestate: str | None) -> int:
    """Bytes ``message_properties`` adds to a message's properties (names and values), 0 without context."""
    if traceparent is None:
        return 0
    size = len(DIAGNOSTIC_ID) + len(TRACEPARENT) + 2 * len(traceparent)
    if tracestate:
        size += len(TRACESTATE) + len(tracestate)
    return size


def within(traceparent: str | None, tracestate: str | None, room: int) -> dict[str, str]:
    """The envelope's ``traceparent``/``tracestate`` from what a door was given: nothing when the value is
    malformed or the properties that carry it (``property_bytes``) would not fit in ``room`` bytes."""
    fields, size = _checked(traceparent, tracestate)
    return fields if size <= room else {}


@functools.lru_cache(maxsize=256)
def _checked(traceparent: str | None, tracestate: str | None) -> tuple[dict[str, str], int]:
    # Cached: the messages of one request, or of a door passing one context on, share the same text.
    parent, state = incoming(traceparent, tracestate)
    if parent is None:
        return {}, 0
    fields = {TRACEPARENT: parent, TRACESTATE: state} if state else {TRACEPARENT: parent}
    return fields, property_bytes(parent, state)
