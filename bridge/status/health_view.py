"""The status page's summary line and error list, read from a snapshot (``bridge.status.snapshot``)
and the last samples of the history; the decisions are ``bridge.core.health``'s. ``with_health`` reads those
samples, so the page and ``bridge status`` say the same words."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from bridge.core.health import (
    SEPARATOR,
    EntityHealth,
    ErrorSeen,
    RoleHealth,
    error_digest,
    summary_level,
    summary_parts,
)
from bridge.core.history import ROLES, Sample
from bridge.state.history import HistoryStore

if TYPE_CHECKING:
    from bridge.redis.types import SyncRedis
    from bridge.settings import Settings

TREND_SAMPLES = 6
"""Samples the outbox's trend arrow looks back over (with the 5 s default: the last half minute)."""


def _down_since(entity: Mapping[str, Any], role: str) -> float | None:
    """Since when ``role``'s namespace is down for the entity (None: it is up, or not configured)."""
    view = entity["namespaces"][role]
    if not view.get("configured", True) or view["available"]:
        return None
    paired = entity.get("paired") or {}
    if role == "primary" and paired.get("failed_over"):
        # Failover engaged marks the primary down whatever the health record's ``since`` says.
        times = [paired.get("failing_since"), paired.get("failed_over_at")]
    else:
        times = [view.get("since"), view.get("last_error_at")]
    known = [float(t) for t in times if t is not None]
    return min(known) if known else None


def _roles(snapshot: Mapping[str, Any], names: Mapping[str, str | None]) -> list[RoleHealth]:
    out = []
    for role in ROLES:
        entities = snapshot["entities"]
        if names.get(role) is None and not any(
            e["namespaces"][role].get("configured", True) for e in entities
        ):
            continue
        down = [e for e in entities if _down_since(e, role) is not None or _is_down(e, role)]
        since = [t for e in down if (t := _down_since(e, role)) is not None]
        at = min(since) if since else float(snapshot["generated_at"]) if down else None
        out.append(RoleHealth(role, names.get(role), at))
    return out


def _is_down(entity: Mapping[str, Any], role: str) -> bool:
    view = entity["namespaces"][role]
    return bool(view.get("configured", True) and not view["available"])


def _entities(snapshot: Mapping[str, Any]) -> list[EntityHealth]:
    out = []
    for e in snapshot["entities"]:
        paired = e.get("paired") or {}
        lost = sum(1 for b in paired.get("barriers", []) if b["state"] == "lost")
        out.append(EntityHealth(e["name"], e["active"], bool(paired.get("failed_over")), lost))
    return out


def redis_problem(server: Mapping[str, Any] | None) -> str | None:
    """What an operator must know about Redis's durability or memory, in a few words (None: nothing)."""
    if server is None:
        return None
    if not server["aof_enabled"]:
        return "Redis AOF off"
    if not server["aof_last_write_ok"]:
        return "Redis AOF write failing"
    if server["maxmemory"] and server["used_memory"] >= 0.9 * server["maxmemory"]:
        return "Redis memory above 90%"
    return None


def _errors(snapshot: Mapping[str, Any]) -> list[ErrorSeen]:
    out = []
    for e in snapshot["entities"]:
        for role, ns in e["namespaces"].items():
            text = ns.get("last_error")
            if not text:
                continue
            at = float(ns.get("last_error_at") or 0.0)
            since = ns.get("since")
            back = ns["available"] and since is not None and since >= at
            trace = ns.get("last_error_trace_id")
            last = e.get("last_error") or {}
            out.append(
                ErrorSeen(
                    role=role,
                    entity=e["name"],
                    text=text,
                    at=at,
                    resolved_at=float(since) if back else None,
                    error_class=ns.get("error_class"),
                    trace_id=trace,
                    trace_url=last.get("trace_url") if last.get("trace_id") == trace else None,
                )
            )
    return out


def health_view(snapshot: Mapping[str, Any], recent: Sequence[Sample]) -> dict[str, Any]:
    """``summary`` (text, parts, level) and ``errors`` (``bridge.core.health.error_digest``)."""
    names: Mapping[str, str | None] = snapshot.get("namespace_names") or {}
    roles, entities = _roles(snapshot, names), _entities(snapshot)
    problem = redis_problem(snapshot.get("redis"))
    outbox: list[float | None] = [
        float(sum(e.depth for e in s.entities.values())) for s in recent[-TREND_SAMPLES:]
    ]
    outbox.append(float(sum(e["outbox_depth"] for e in snapshot["entities"])))
    parts = summary_parts(snapshot["generated_at"], roles, entities, outbox, problem)
    return {
        "summary": {
            "text": SEPARATOR.join(parts),
            "parts": parts,
            "level": summary_level(roles, entities, problem),
        },
        "errors": error_digest(_errors(snapshot)),
    }


def with_health(settings: Settings, client: SyncRedis, snapshot: dict[str, Any]) -> dict[str, Any]:
    """``snapshot`` with its ``summary`` and ``errors`` (``health_view``), the outbox's trend read from the
    history's last samples (none when no process samples: the line then has no arrow)."""
    history = settings.status_history
    since = snapshot["generated_at"] - (TREND_SAMPLES + 1) * history.interval
    recent = HistoryStore(client, history.window, history.samples).samples(since=since)
    snapshot.update(health_view(snapshot, recent))
    return snapshot
