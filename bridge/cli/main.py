"""Entry point of the ``bridge`` command.

Each sub-command lives in its own module under ``bridge.cli`` with a ``register(app)`` function and is
listed in ``COMMAND_MODULES`` here; a command is listed only once it works. A command loads the settings once
(``bridge.settings.load_settings``), turns a ``ConfigurationError`` into one clear line on stderr and exit
code 2, and hands the validated settings to the wiring code.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Protocol

import typer

from bridge.cli import (
    check_config,
    demo,
    emulator,
    emulator_ctl,
    ledger,
    provision,
    receive,
    report,
    send,
    serve,
    status,
    up,
    worker,
)
from bridge.cli.context import CONFIGURATION_EXIT_CODE
from bridge.errors import ConfigurationError


class CommandModule(Protocol):
    """A ``bridge.cli`` module: it adds its command(s) to the app."""

    def register(self, app: typer.Typer) -> None:
        """Add this module's command(s) to ``app``."""


COMMAND_MODULES: tuple[CommandModule, ...] = (
    check_config,
    serve,
    send,
    status,
    emulator,
    emulator_ctl,
    worker,
    demo,
    up,
    provision,
    receive,
    report,
    ledger,
)
"""Every sub-command module, in ``bridge --help`` order. A new command is one import and one entry here."""

DISTRIBUTION = "servicebus-bridge"
"""The installed distribution whose version ``bridge --version`` prints."""

app = typer.Typer(
    name="bridge",
    help="Service Bus bridge: durable local sends to Azure Service Bus with namespace replication.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain click help: an option's line is its flags and its help, with no ``<bool>`` type column, and it
    # reads the same piped into a file or a pager as on a terminal.
    rich_markup_mode=None,
)


def installed_version() -> str:
    """The bridge's version as installed (``pip install``), or ``unknown`` for a bare source tree."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"bridge {installed_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Service Bus bridge: durable local sends to Azure Service Bus with namespace replication."""


for _module in COMMAND_MODULES:
    _module.register(app)


def main() -> None:
    """Console-script entry point; a configuration error found late (e.g. an unusable redis_url when the
    first connection is made) still ends as one line and exit 2, never a traceback."""
    try:
        app()
    except ConfigurationError as exc:
        typer.echo(f"bridge: configuration error: {' '.join(str(exc).split())}", err=True)
        raise SystemExit(CONFIGURATION_EXIT_CODE) from None


if __name__ == "__main__":
    main()
