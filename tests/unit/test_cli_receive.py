"""``bridge receive`` refuses what it cannot run: one line, exit status 2, no namespace contacted."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bridge.cli.main import app

MODULE = "tests.integration.receiver_handlers"
HANDLER = f"{MODULE}:record"


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """A runner with no ``BRIDGE_*`` settings from the environment (no namespaces configured)."""
    import os

    for name in list(os.environ):
        if name.startswith("BRIDGE_"):
            monkeypatch.delenv(name)
    return CliRunner()


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["receive", "orders"], "give exactly one of --handler module:function and --celery-task NAME"),
        (["receive", "orders", "--handler", HANDLER, "--celery-task", "t"], "give exactly one of"),
        (["receive", "orders", "--handler", "no_such_module_here:f"], "cannot import 'no_such_module_here'"),
        (["receive", "orders", "--handler", f"{MODULE}:nothing"], "has no 'nothing'"),
        (["receive", "orders", "--handler", MODULE], "must be module:function"),
        (["receive", "orders", "--handler", HANDLER], "receiving needs the primary and/or secondary"),
        (["receive", "--backlog"], "backlog queues need both the primary and the secondary namespace"),
        (["receive", "--backlog", "--drain", "--handler", HANDLER], "name the entity to receive"),
        (["receive", "orders", "--handler", HANDLER, "--window", "0"], "invalid receiver option"),
        (["receive", "orders", "--handler", HANDLER, "--window", "604801"], "invalid receiver option"),
    ],
)
def test_refusals_are_one_line_and_exit_2(runner: CliRunner, args: list[str], complaint: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and complaint in lines[0], result.output
