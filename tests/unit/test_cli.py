"""The ``bridge`` command surface and how every command reports invalid settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bridge.cli.context import CONFIGURATION_EXIT_CODE, settings_or_exit
from bridge.cli.main import app

COMMANDS = ["serve", "worker", "beat", "provision", "status", "send", "emulator", "emulator-ctl", "demo"]
SECRET = "TOPSECRETkey0123456789abcdef+/="


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.upper().startswith("BRIDGE_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def bridge_executable() -> str:
    """The ``bridge`` console script installed next to the interpreter running the tests."""
    path = Path(sys.executable).parent / "bridge"
    assert path.exists(), f"console script missing: {path} (pip install -e .)"
    return str(path)


def listed_commands(help_text: str) -> set[str]:
    words = {line.strip(" │").split(" ", 1)[0] for line in help_text.splitlines()}
    return words & {*COMMANDS, "check-config"}


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "120"})
    assert result.exit_code == 0
    assert listed_commands(result.output) == set(COMMANDS)


def test_installed_entry_point_lists_every_command() -> None:
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1"}
    proc = subprocess.run(
        [bridge_executable(), "--help"], capture_output=True, text=True, timeout=60, env=env, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert listed_commands(proc.stdout) == set(COMMANDS)


def test_no_arguments_shows_usage() -> None:
    result = CliRunner().invoke(app, [])
    assert "Usage" in result.output
    assert result.exit_code != 0


# --- invalid settings -------------------------------------------------------------------------------------


def test_settings_or_exit_returns_the_validated_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_ENTITIES__ORDERS__REPLICATION", "active")
    assert settings_or_exit().entity("orders").replication == "active"


def test_settings_or_exit_prints_one_line_and_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BRIDGE_ENTITIES__ORDERS__REPLICATION", "bogus")
    monkeypatch.setenv("BRIDGE_LOG_LEVEL", "LOUD")
    with pytest.raises(typer.Exit) as info:
        settings_or_exit()
    assert info.value.exit_code == CONFIGURATION_EXIT_CODE == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("bridge: configuration error: ")
    assert "entities.orders.replication" in lines[0]
    assert "log_level" in lines[0]


def test_command_with_invalid_settings_names_the_field_and_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_ENTITIES__ORDERS__REPLICATION", "bogus")
    result = CliRunner().invoke(app, ["check-config"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.splitlines()) == 1
    assert "'entities.orders.replication'" in result.stderr
    assert "Traceback" not in result.output


def test_command_never_prints_a_malformed_secret(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BRIDGE_PRIMARY__CONNECTION_STRING", f"Endpoint=http://x/;SharedAccessKey={SECRET}")
    result = CliRunner().invoke(app, ["check-config"])
    assert result.exit_code == 2
    assert "primary.connection_string" in result.stderr
    assert SECRET not in result.output


def test_installed_entry_point_reports_invalid_settings(tmp_path: Path) -> None:
    config = tmp_path / "bridge.toml"
    config.write_text(f'[primary]\nconnection_string = "{SECRET}"\n')
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("BRIDGE_")}
    env["BRIDGE_CONFIG"] = str(config)
    proc = subprocess.run(
        [bridge_executable(), "check-config"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1
    assert "primary.connection_string" in proc.stderr
    assert SECRET not in proc.stderr


def test_check_config_prints_valid_settings_with_secrets_masked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "BRIDGE_PRIMARY__CONNECTION_STRING",
        f"Endpoint=sb://ns1.servicebus.windows.net/;SharedAccessKeyName=send;SharedAccessKey={SECRET}",
    )
    monkeypatch.setenv("BRIDGE_ENTITIES__ORDERS__REPLICATION", "paired")
    result = CliRunner().invoke(app, ["check-config"])
    assert result.exit_code == 0, result.stderr
    assert SECRET not in result.output
    shown = json.loads(result.stdout)
    assert shown["primary"]["connection_string"] == "**********"
    assert shown["entities"]["orders"]["replication"] == "paired"


@pytest.mark.parametrize("command", ["worker", "beat"])
def test_celery_on_a_cluster_needs_its_own_broker(command: str, tmp_path: Path) -> None:
    # A Cluster cannot be Celery's broker: the process says so and stops instead of falling back to a
    # default Redis it was not given (the seed node's port is closed: nothing could answer anyway).
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("BRIDGE_")}
    env["BRIDGE_REDIS_URL"] = f"redis+cluster://u:{SECRET}@127.0.0.1:1"
    proc = subprocess.run(
        [bridge_executable(), command],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "celery_broker_url" in proc.stderr and "Cluster" in proc.stderr
    assert SECRET not in proc.stderr


def test_the_celery_broker_is_the_one_given() -> None:
    from bridge.errors import ConfigurationError
    from bridge.settings import Settings
    from workers.broker import celery_broker

    assert celery_broker(Settings(redis_url="redis://h:1/0")) == ("redis://h:1/0", {})
    cluster = "redis+cluster://h:1,h:2"
    assert celery_broker(Settings(redis_url=cluster, celery_broker_url="redis://b:1/0")) == (
        "redis://b:1/0",
        {},
    )
    with pytest.raises(ConfigurationError, match="celery_broker_url"):
        celery_broker(Settings(redis_url=cluster))


def test_the_ledger_stops_between_publications_on_a_signal_and_a_second_one_interrupts() -> None:
    import signal

    from bridge.cli.ledger import _stop_on_signals

    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    try:
        stop = _stop_on_signals()
        # A first SIGTERM only asks: the running code is not interrupted
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(5)
        # A second signal (Ctrl-C here) while it stops interrupts, for a person who will not wait
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])
