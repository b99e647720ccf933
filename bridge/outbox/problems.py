"""The quarantine and dead-letter streams: what an entry there holds, and how it is listed.

An entry that failed validation (the Redis door, a corrupt outbox entry) goes to ``bridge:{E}:quarantine``;
a message Service Bus will never accept to ``bridge:{E}:deadletter``. Both keep the original fields under
``orig.<name>`` and add ``code``, ``reason``, ``field``, ``source`` (``redis-door``, ``outbox``,
``sender``), ``source_id`` and ``at``. They are listed oldest first by ``bridge status --quarantine E``
(``list_problems``) and ``GET /v1/entities/{E}/quarantine`` (``list_problems_async``), from one range
rule and one record format.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

import redis
from redis.typing import EncodableT, FieldT

from bridge.errors import InvalidMessageError, OutboxUnavailableError
from bridge.outbox import keys
from bridge.redis.errors import driver_errors
from bridge.redis.types import AsyncRedis, SyncRedis

PROBLEM_STREAMS = ("quarantine", "deadletter")


def problem_stream(entity: str, which: str) -> str:
    """Key of the entity's ``quarantine`` or ``deadletter`` stream."""
    if which == "quarantine":
        return keys.quarantine(entity)
    if which == "deadletter":
        return keys.deadletter(entity)
    raise ValueError(f"no problem stream named {which!r}")


def problem_fields(
    fields: Mapping[bytes, bytes],
    *,
    code: str,
    reason: str,
    field: str | None,
    source: str,
    source_id: str,
    now: float,
) -> dict[FieldT, EncodableT]:
    """Fields of a quarantine or dead-letter entry: the reason first, then the original fields."""
    out: dict[FieldT, EncodableT] = {
        "code": code,
        "reason": reason,
        "field": field or "",
        "source": source,
        "source_id": source_id,
        "at": repr(now),
    }
    for name, value in fields.items():
        out[b"orig." + name] = value
    return out


def _range(entity: str, which: str, after: str) -> tuple[str, str]:
    """The stream key and the ``XRANGE`` start: from the beginning, or strictly after the entry ``after``."""
    return problem_stream(entity, which), after if after == "-" else f"({after}"


def list_problems(
    client: SyncRedis, entity: str, which: str, *, count: int = 50, after: str = "-"
) -> list[dict[str, Any]]:
    """Entries of the quarantine or dead-letter stream, oldest first, as JSON-ready dicts."""
    stream, start = _range(entity, which, after)
    with driver_errors(OutboxUnavailableError):
        items = client.xrange(stream, min=start, max="+", count=count)
    return problem_records(items)


async def list_problems_async(
    client: AsyncRedis, entity: str, which: str, *, count: int = 50, after: str = "-"
) -> list[dict[str, Any]]:
    """The asyncio counterpart of ``list_problems``; an ``after`` that is no entry id is a bad request."""
    stream, start = _range(entity, which, after)
    with driver_errors(OutboxUnavailableError):
        try:
            items = await client.xrange(stream, min=start, max="+", count=count)
        except redis.exceptions.ResponseError:  # the one argument the caller controls: ``after``
            raise InvalidMessageError("invalid_type", "?after= is a stream entry id", field="after") from None
    return problem_records(items)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def problem_records(items: Sequence[tuple[Any, Mapping[Any, Any] | None]] | None) -> list[dict[str, Any]]:
    """``XRANGE`` items of a problem stream as dicts; original fields as text when UTF-8, else base64
    under ``<name>.base64``."""
    out = []
    for entry_id, fields in items or []:
        record: dict[str, Any] = {"id": _text(entry_id)}
        original: dict[str, str] = {}
        for name, value in (fields or {}).items():
            text_name = _text(name)
            if text_name.startswith("orig."):
                try:
                    original[text_name[5:]] = _text(value)
                except UnicodeDecodeError:
                    original[text_name[5:] + ".base64"] = base64.b64encode(value).decode()
            else:
                record[text_name] = _text(value)
        record["original"] = original
        out.append(record)
    return out
