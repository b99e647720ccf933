"""Entry point of the ``bridge`` command.

Each sub-command lives in its own module under ``bridge.cli`` and is registered here; a command loads the
settings once (``bridge.settings.load_settings``), turns a ``ConfigurationError`` into one clear line on
stderr and exit code 2, and hands the validated settings to the wiring code.
"""

from __future__ import annotations

import typer

from bridge.cli import (
    check_config,
    demo,
    emulator,
    emulator_ctl,
    pending,
    provision,
    send,
    serve,
    status,
    worker,
)
from bridge.cli.context import CONFIGURATION_EXIT_CODE
from bridge.errors import ConfigurationError

app = typer.Typer(
    name="bridge",
    help="Service Bus bridge: durable local sends to Azure Service Bus with namespace replication.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

pending.register(app)
check_config.register(app)
serve.register(app)
send.register(app)
status.register(app)
emulator.register(app)
emulator_ctl.register(app)
worker.register(app)
demo.register(app)
provision.register(app)


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
