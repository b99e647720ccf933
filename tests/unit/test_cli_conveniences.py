"""What a person meets first on the command line: the version, help on every option, the bridge's own words
for the Celery pass-through commands, and a misspelled ``BRIDGE_*`` variable named instead of ignored."""

from __future__ import annotations

from importlib.metadata import version
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from bridge.cli.main import DISTRIBUTION, app
from bridge.redis.connection import redis_location
from bridge.stray_variables import OTHER_VARIABLES, unknown_variables
from tests.unit.test_cli import clean_env

__all__ = ["clean_env"]  # autouse: no BRIDGE_* variable of the caller reaches these tests

RUNNER = CliRunner()


def commands() -> dict[str, Any]:
    """The app's sub-commands by name (typer's click objects)."""
    return dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def test_version_prints_the_installed_version() -> None:
    result = RUNNER.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"bridge {version(DISTRIBUTION)}"


# worker and beat take Celery's flags unparsed; their help is the text tested below.
OWN_OPTIONS = sorted(n for n, c in commands().items() if not c.context_settings.get("ignore_unknown_options"))


@pytest.mark.parametrize("name", OWN_OPTIONS)
def test_every_option_and_argument_has_help(name: str) -> None:
    missing = [p.name for p in commands()[name].params if not getattr(p, "help", None)]
    assert missing == [], f"bridge {name}: no help text for {missing}"


@pytest.mark.parametrize("name", sorted(commands()))
def test_help_shows_no_type_noise(name: str) -> None:
    result = RUNNER.invoke(app, [name, "--help"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    assert "Usage: bridge" in result.output
    assert "<bool>" not in result.output


@pytest.mark.parametrize(("name", "celery"), [("worker", "celery worker"), ("beat", "celery beat")])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_worker_and_beat_help_is_the_bridges_own(name: str, celery: str, flag: str) -> None:
    # Given no settings at all: help must not need them, nor start Celery.
    result = RUNNER.invoke(app, [name, flag])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"Usage: bridge {name}")
    assert f"`{celery} --help` lists them" in result.output
    assert "BRIDGE_" in result.output


def test_a_misspelled_top_level_variable_is_named_with_the_closest_setting() -> None:
    environ = {
        "BRIDGE_REDSI_URL": "redis://x",
        "BRIDGE_NOTHING_LIKE_IT": "1",
        "bridge_log_levle": "INFO",
        "BRIDGE_REDIS_URL": "redis://127.0.0.1:1/0",
        "BRIDGE_RETRY__ATTEMPT_DEADLINE": "3",
        "BRIDGE_ENTITIES__ORDERS__REPLICATION": "active",
        "HOME": "/root",
        **{name: "x" for name in OTHER_VARIABLES},
    }
    assert unknown_variables(environ) == [
        ("BRIDGE_NOTHING_LIKE_IT", None),
        ("BRIDGE_REDSI_URL", "BRIDGE_REDIS_URL"),
        ("bridge_log_levle", "BRIDGE_LOG_LEVEL"),
    ]


def test_a_command_warns_about_an_unknown_variable_and_check_config_fails(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BRIDGE_REDSI_URL", "redis://:s3cret-value@127.0.0.1:1/0")
    result = RUNNER.invoke(app, ["check-config"])
    assert result.exit_code == 2
    assert "BRIDGE_REDSI_URL is not a bridge setting and is ignored (did you mean BRIDGE_REDIS_URL?)" in (
        result.stderr
    )
    assert "s3cret-value" not in result.output
    monkeypatch.delenv("BRIDGE_REDSI_URL")
    clean = RUNNER.invoke(app, ["check-config"])
    assert clean.exit_code == 0
    assert "not a bridge setting" not in clean.stderr


@pytest.mark.parametrize(
    ("url", "where"),
    [
        ("redis://:pw-secret@10.0.0.5:6390/2", "10.0.0.5:6390"),
        ("redis://user:pw-secret@cache.example", "cache.example:6379"),
        ("rediss://[::1]:6380", "[::1]:6380"),
        ("unix:///run/redis.sock", "unix socket /run/redis.sock"),
        (
            "redis+sentinel://:pw-secret@s1:26379,s2:26380/mymaster/0",
            "Sentinel service 'mymaster' via s1:26379,s2:26380",
        ),
        ("redis+cluster://u:pw-secret@n1:7000,n2", "Cluster nodes n1:7000,n2:6379"),
        ("redis://:pw-secret@host:99999", "(redis_url cannot be parsed)"),
    ],
)
def test_redis_location_names_the_place_never_the_password(url: str, where: str) -> None:
    assert redis_location(url) == where
