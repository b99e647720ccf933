"""Defaults of the replication settings: SDK retry bounds, outbox backoff, paired-mode options."""

from __future__ import annotations

import pytest

from bridge.errors import ConfigurationError
from bridge.settings import EntitySettings, PairedSettings, Settings, load_settings


@pytest.mark.parametrize(
    ("field", "default"),
    [
        ("retry_total", 1),
        ("retry_backoff_factor", 0.2),
        ("retry_backoff_max", 2.0),
        ("attempt_deadline", 10.0),
        ("outbox_backoff_factor", 0.5),
        ("outbox_backoff_max", 30.0),
        ("transient_failures_to_outage", 3),
        ("transient_seconds_to_outage", 10.0),
    ],
)
def test_retry_defaults(field: str, default: object) -> None:
    assert getattr(Settings().retry, field) == default


@pytest.mark.parametrize(
    ("field", "default"),
    [
        # the .NET SDK's SendAvailabilityPairedNamespaceOptions defaults
        ("backlog_queue_count", 10),
        ("failover_interval", 60.0),
        ("ping_primary_interval", 60.0),
        ("ping_timeout", 120.0),
        ("syphon_batch_size", 100),
        ("syphon_retry_interval", 1.0),
        # the bridge's own
        ("syphon_receive_wait", 60.0),
        ("enable_syphon", True),
        ("ping_mode", "message"),
        ("backlog_readmit_after", 60.0),
    ],
)
def test_paired_defaults(field: str, default: object) -> None:
    assert getattr(Settings().paired, field) == default


def test_entity_success_policy_defaults_to_any() -> None:
    assert EntitySettings().success_policy == "any"
    assert EntitySettings(replication="active", success_policy="all").success_policy == "all"


def test_failover_interval_zero_is_allowed() -> None:
    assert PairedSettings(failover_interval=0).failover_interval == 0


def test_nested_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_PAIRED__FAILOVER_INTERVAL", "2")
    monkeypatch.setenv("BRIDGE_RETRY__RETRY_TOTAL", "0")
    settings = load_settings()
    assert settings.paired.failover_interval == 2.0
    assert settings.retry.retry_total == 0


@pytest.mark.parametrize(
    "bad",
    [
        {"retry": {"retry_total": -1}},
        {"paired": {"backlog_queue_count": 0}},
        {"paired": {"ping_mode": "carrier-pigeon"}},
        {"paired": {"failover_interval": -1}},
        {"retry": {"transient_failures_to_outage": 0}},
    ],
)
def test_invalid_values_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        load_settings(**bad)
