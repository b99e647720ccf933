"""What every ``bridge`` sub-command does before its real work: load the settings once.

A command calls ``settings_or_exit()`` first. Invalid settings never produce a traceback: the operator gets
one line on stderr naming the field (never its value, which may be a secret) and exit status 2, the same
status typer uses for a bad command line.
"""

from __future__ import annotations

from typing import Any

import typer

from bridge.errors import ConfigurationError
from bridge.settings import Settings, load_settings

CONFIGURATION_EXIT_CODE = 2


def settings_or_exit(**overrides: Any) -> Settings:
    """The validated settings, or one ``bridge: configuration error: ...`` line on stderr and exit 2."""
    try:
        return load_settings(**overrides)
    except ConfigurationError as exc:
        # One line, even if a reason ever spans several, so log collectors keep it as one record.
        message = " ".join(str(exc).split())
        typer.echo(f"bridge: configuration error: {message}", err=True)
        raise typer.Exit(CONFIGURATION_EXIT_CODE) from None
