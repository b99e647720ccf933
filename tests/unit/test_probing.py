"""Which namespaces a probe measures, and when (``bridge.core.probing``): tables."""

from __future__ import annotations

import pytest

from bridge.core.probing import probe_due, probe_roles
from bridge.core.roles import Role, RoleState

BOTH: dict[Role, bool] = {"primary": True, "secondary": True}
PRIMARY_ONLY: dict[Role, bool] = {"primary": True, "secondary": False}


@pytest.mark.parametrize(
    ("mode", "roles", "configured", "probed"),
    [
        ("passive", RoleState(), BOTH, ("secondary",)),
        ("passive", RoleState(active="secondary"), BOTH, ("primary",)),
        ("passive", RoleState(), PRIMARY_ONLY, ()),
        ("passive", RoleState(active="secondary"), PRIMARY_ONLY, ("primary",)),
        ("active", RoleState(), BOTH, ("primary", "secondary")),
        ("active", RoleState(), PRIMARY_ONLY, ("primary",)),
        ("active", RoleState(), {"primary": False, "secondary": True}, ("secondary",)),
        ("paired", RoleState(), BOTH, ()),
        ("single", RoleState(), PRIMARY_ONLY, ()),
    ],
)
def test_the_namespaces_that_carry_no_traffic_are_probed(
    mode: str, roles: RoleState, configured: dict[Role, bool], probed: tuple[Role, ...]
) -> None:
    assert probe_roles(mode, roles, configured) == probed


@pytest.mark.parametrize(
    ("last_at", "now", "due"),
    [
        (None, 0.0, True),
        (100.0, 114.9, False),
        (100.0, 115.0, True),  # half an interval early is accepted (beat jitter)
        (100.0, 130.0, True),
        (100.0, 100.0, False),
        (-100.0, 0.0, True),
    ],
)
def test_a_probe_is_due_once_about_an_interval_has_passed(
    last_at: float | None, now: float, due: bool
) -> None:
    assert probe_due(last_at, now, interval=30.0) is due
