"""Commands whose implementation arrives with later issues.

They are listed in ``bridge --help`` so the command surface is stable from the start; running one says
which part of the system it belongs to and exits with status 2 instead of pretending to work. Each entry
is removed from here when its module lands.
"""

from __future__ import annotations

from collections.abc import Callable

import typer

PENDING: dict[str, str] = {
    "receive": "Receive from both namespaces with duplicate suppression.",
    "report": "Run the PySpark ledger report over the journal.",
}


def register(app: typer.Typer) -> None:
    """Add a placeholder command for every name still in ``PENDING``."""
    # Extra arguments are accepted so that scripts written against the final command line get the
    # "not available yet" message rather than a usage error.
    context_settings = {"allow_extra_args": True, "ignore_unknown_options": True}
    for name, help_text in PENDING.items():
        app.command(name=name, help=help_text, context_settings=context_settings)(_placeholder(name))


def _placeholder(name: str) -> Callable[[], None]:
    def command() -> None:
        typer.echo(f"bridge {name}: not available in this version yet", err=True)
        raise typer.Exit(2)

    command.__name__ = name
    return command
