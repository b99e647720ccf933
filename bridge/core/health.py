"""The status page's one-line health summary and its list of errors, each shown once.

The summary reads like an operator's first sentence about an incident: which namespace is down and for
how long, where each entity sends instead, what Redis lacks, and whether the outbox is growing (``primary
(sb-east) DOWN for 38 s · orders on secondary · payments in backlog · outbox 170 ↑``). The error list
folds the same error text seen by several entities into one entry with a short code; an error is
*resolved* once the namespace it came from is available again for every entity that saw it.
Pure: the adapter (``bridge.observability.health_view``) reads the snapshot into these values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from bridge.core.history import trend

SEPARATOR = " \u00b7 "
_CODE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*)(?::|$)")


@dataclass(frozen=True)
class RoleHealth:
    """A namespace by role: its name, and since when it is down for some entity (None: up for all)."""

    role: str
    name: str | None
    down_since: float | None


@dataclass(frozen=True)
class EntityHealth:
    """Where an entity sends now."""

    name: str
    active: str
    backlog: bool
    barriers_lost: int = 0


def duration(seconds: float) -> str:
    """``38 s``, ``4 min 10 s``, ``2 h 5 min``: a length of time read at a glance."""
    whole = max(0, int(seconds))
    if whole < 120:
        return f"{whole} s"
    if whole < 7200:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"


def role_name(role: str, name: str | None) -> str:
    """``primary (sb-east)``, or the bare role when the name is not known."""
    return f"{role} ({name})" if name else role


def summary_parts(
    now: float,
    roles: Sequence[RoleHealth],
    entities: Sequence[EntityHealth],
    outbox: Sequence[float | None],
    redis_problem: str | None = None,
) -> list[str]:
    """The summary's parts, worst first; ``outbox`` is the total depth over the last samples, now last."""
    parts = [
        f"{role_name(r.role, r.name)} DOWN for {duration(now - r.down_since)}"
        for r in roles
        if r.down_since is not None
    ]
    for entity in entities:
        if entity.backlog:
            parts.append(f"{entity.name} in backlog")
        elif entity.active != "primary":
            parts.append(f"{entity.name} on {entity.active}")
        if entity.barriers_lost:
            parts.append(f"{entity.name} restore barrier lost")
    if redis_problem:
        parts.append(redis_problem)
    if not parts:
        parts.append("all healthy")
    current = next((v for v in reversed(outbox) if v is not None), 0)
    parts.append(f"outbox {int(current)} {trend(outbox)}")
    return parts


def summary_level(
    roles: Sequence[RoleHealth], entities: Sequence[EntityHealth], redis_problem: str | None
) -> str:
    """``down`` (every namespace down for some entity), ``degraded`` (anything else amiss) or ``ok``."""
    down = [r for r in roles if r.down_since is not None]
    if roles and len(down) == len(roles):
        return "down"
    amiss = (
        down or redis_problem or any(e.backlog or e.active != "primary" or e.barriers_lost for e in entities)
    )
    return "degraded" if amiss else "ok"


@dataclass(frozen=True)
class ErrorSeen:
    """The last error one entity recorded for one namespace, and when that namespace came back (None: it
    has not, for this entity)."""

    role: str
    entity: str
    text: str
    at: float
    resolved_at: float | None = None
    error_class: str | None = None
    trace_id: str | None = None
    trace_url: str | None = None


def error_code(text: str, error_class: str | None) -> str:
    """A short code for an error: its exception class name when the text starts with one, else its
    failure class, else ``error``."""
    match = _CODE.match(text)
    if match and match.group(1)[0].isupper():
        return match.group(1)
    return error_class or "error"


def error_digest(seen: Sequence[ErrorSeen]) -> list[dict[str, object]]:
    """One entry per namespace and error text: its code, the entities that saw it, first and last time,
    whether it is resolved (and when), and the traces of the failed sends; open errors first, newest
    first within each group."""
    groups: dict[tuple[str, str], list[ErrorSeen]] = {}
    for item in seen:
        groups.setdefault((item.role, item.text), []).append(item)
    out: list[dict[str, object]] = []
    for (role, text), items in groups.items():
        resolved = all(i.resolved_at is not None for i in items)
        out.append(
            {
                "role": role,
                "code": error_code(text, items[0].error_class),
                "text": text,
                "entities": sorted({i.entity for i in items}),
                "first_at": min(i.at for i in items),
                "last_at": max(i.at for i in items),
                "resolved": resolved,
                "resolved_at": max(i.resolved_at or 0.0 for i in items) if resolved else None,
                "traces": [
                    {"entity": i.entity, "trace_id": i.trace_id, "trace_url": i.trace_url}
                    for i in sorted(items, key=lambda i: i.entity)
                    if i.trace_id
                ],
            }
        )
    out.sort(key=lambda e: (bool(e["resolved"]), -float(str(e["last_at"]))))
    return out
