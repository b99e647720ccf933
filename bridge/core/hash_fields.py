"""Flat Redis-hash encoding shared by the core's records (role state, health, paired state, rotation).

The core's shared records are small flat hashes of strings so that ``HSET key *fields`` / ``HGETALL key``
round-trip and Lua scripts can compare fields as strings. A None field is simply absent. Floats are written
with ``repr`` so they read back bit-identical.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

FieldMap: TypeAlias = Mapping[str, str] | Mapping[bytes, bytes] | Mapping[str | bytes, str | bytes]
"""What ``HGETALL`` returns, with or without ``decode_responses``."""


def decode_fields(fields: FieldMap) -> dict[str, str]:
    """``fields`` with bytes keys and values decoded as UTF-8."""
    out: dict[str, str] = {}
    for key, value in fields.items():
        k = key.decode() if isinstance(key, bytes) else key
        out[k] = value.decode() if isinstance(value, bytes) else value
    return out


def opt_float(fields: Mapping[str, str], name: str) -> float | None:
    """The float in ``fields[name]``, None when absent or empty."""
    raw = fields.get(name)
    return None if raw is None or raw == "" else float(raw)


def put_field(out: dict[str, str], name: str, value: object) -> None:
    """Set ``out[name]`` to ``value`` as text (floats by ``repr``); None leaves the field out."""
    if value is not None:
        out[name] = repr(value) if isinstance(value, float) else str(value)
