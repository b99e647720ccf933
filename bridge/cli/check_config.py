"""``bridge check-config``: validate the settings and print them with secrets masked.

Hidden from ``bridge --help`` (the listed commands are the documented surface, ``docs/operations.md``);
operators and scripts use it to find a bad setting before starting a process. A ``BRIDGE_*`` variable that
names no setting (a typo) is a finding here: after printing, the exit status is 2.
"""

from __future__ import annotations

import os

import typer

from bridge.cli.context import CONFIGURATION_EXIT_CODE, settings_or_exit
from bridge.stray_variables import unknown_variables


def register(app: typer.Typer) -> None:
    """Add the hidden ``check-config`` command."""
    app.command(
        name="check-config", hidden=True, help="Validate the settings and print them (secrets masked)."
    )(check_config)


def check_config() -> None:
    """Load the settings like every command does; print them, secrets as ``**********``."""
    settings = settings_or_exit()
    typer.echo(settings.model_dump_json(indent=2))
    if unknown_variables(os.environ):
        raise typer.Exit(CONFIGURATION_EXIT_CODE)
