"""Which namespaces to probe, and when (pure; the I/O is ``bridge.delivery.probe``).

A namespace that carries an entity's traffic is measured by every send. One that carries none — the backup
in passive mode (after a failover and recovery nothing would ever try the old primary again), either
namespace in active mode when no message flows — would keep showing whatever it showed last. A probe every
``workers.probe_interval`` makes its availability in ``bridge status`` a measurement with a time.
"""

from __future__ import annotations

from collections.abc import Mapping

from bridge.core.roles import ROLES, Role, RoleState

DUE_SLACK = 0.5
"""Fraction of the interval by which a probe may come early (beat jitter; a second beat's firing)."""


def probe_roles(mode: str, roles: RoleState, configured: Mapping[Role, bool]) -> tuple[Role, ...]:
    """The namespaces to probe for an entity: the backup in passive mode, both in active mode."""
    if mode == "passive":
        return (roles.backup,) if configured.get(roles.backup) else ()
    if mode == "active":
        return tuple(role for role in ROLES if configured.get(role))
    return ()


def probe_due(last_at: float | None, now: float, interval: float) -> bool:
    """Never probed, or the last probe is (about) one interval old."""
    return last_at is None or now - last_at >= interval * (1 - DUE_SLACK)
