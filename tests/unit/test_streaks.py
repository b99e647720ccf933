"""``Streaks`` holds only the transient-failure streaks in progress, and forgets a retired entity's."""

from __future__ import annotations

from bridge.core.error_classes import EscalationPolicy
from bridge.delivery.attempts import Streaks
from bridge.errors import TransientNamespaceError


def busy() -> TransientNamespaceError:
    return TransientNamespaceError("server busy", namespace="primary")


def test_only_streaks_in_progress_are_kept() -> None:
    streaks = Streaks(EscalationPolicy(3, 60.0))
    # Given successes for many entities and a transient failure for one
    for n in range(100):
        streaks.outcome(f"e{n}", "primary", None, now=0.0)
    streaks.outcome("busy", "primary", busy(), now=1.0)
    # Then only the failing entity has an entry, until its streak ends
    assert set(streaks.streaks) == {("busy", "primary")}
    streaks.outcome("busy", "primary", None, now=2.0)
    assert streaks.streaks == {}


def test_a_streak_escalated_to_an_outage_starts_over_without_an_entry() -> None:
    streaks = Streaks(EscalationPolicy(2, 60.0))
    streaks.outcome("e", "primary", busy(), now=0.0)
    outcome = streaks.outcome("e", "primary", busy(), now=1.0)
    assert outcome.error_class is not None and outcome.error_class.value == "outage"
    assert streaks.streaks == {}


def test_a_retired_entity_is_forgotten_on_both_namespaces() -> None:
    streaks = Streaks(EscalationPolicy(3, 60.0))
    for role in ("primary", "secondary"):
        streaks.outcome("gone", role, busy(), now=0.0)  # type: ignore[arg-type]
    streaks.outcome("kept", "primary", busy(), now=0.0)
    streaks.forget("gone")
    assert set(streaks.streaks) == {("kept", "primary")}
