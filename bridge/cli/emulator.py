"""``bridge emulator``: run one local Service Bus namespace until stopped."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from pathlib import Path
from typing import Annotated

import typer

from bridge.errors import EmulatorError

KEY_ENV = "BRIDGE_EMULATOR_KEY"


def emulator(
    name: Annotated[str, typer.Option(help="Namespace name (appears in paths and logs).")] = "primary",
    host: Annotated[str, typer.Option(help="Address to bind (AMQP + HTTPS management).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="AMQP/HTTPS port; 0 picks a free one.")] = 0,
    control_port: Annotated[int, typer.Option(help="Fault-control HTTP port; 0 picks a free one.")] = 0,
    key_name: Annotated[str, typer.Option(help="SAS key name.")] = "RootManageSharedAccessKey",
    key: Annotated[
        str | None,
        typer.Option(help=f"SAS key (default: ${KEY_ENV}, else a fixed local key).", show_default=False),
    ] = None,
    entities: Annotated[
        Path | None, typer.Option(help="TOML file of queues/topics to create at start.")
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            help="Persist entities and messages here (fsync'd log); without it a restart loses everything."
        ),
    ] = None,
    auto_create: Annotated[
        bool, typer.Option(help="Create a queue on first use of an unknown name.")
    ] = False,
    disable_local_auth: Annotated[
        bool, typer.Option(help="Refuse SAS tokens (Azure's disableLocalAuth): Entra ID tokens only.")
    ] = False,
    identities: Annotated[
        Path | None,
        typer.Option(help="Run the local token issuer for the identities in this TOML file."),
    ] = None,
    identity_dir: Annotated[
        Path | None,
        typer.Option(help="Issuer key directory: trust its tokens (shared by the namespaces of one stack)."),
    ] = None,
    identity_port: Annotated[int, typer.Option(help="Managed-identity endpoint port (HTTP).")] = 0,
    authority_port: Annotated[int, typer.Option(help="OAuth2 authority port (HTTPS).")] = 0,
    amqps_port: Annotated[
        list[int] | None,
        typer.Option(
            help="Also serve AMQPS/HTTPS here where free (repeatable: 5671 AMQPS, 443 HTTPS/WebSockets)."
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one JSON line with the endpoints.")
    ] = False,
    log_level: Annotated[str, typer.Option(help="Python log level.")] = "WARNING",
    link_idle_timeout: Annotated[
        float,
        typer.Option(help="Seconds without messages before an entity link is force-detached (Azure: 600)."),
    ] = 600.0,
    connection_idle_timeout: Annotated[
        float,
        typer.Option(help="Seconds a connection without entity links may idle before closing (Azure: 300)."),
    ] = 300.0,
) -> None:
    """Run a local Service Bus namespace (AMQP + management + fault control) until stopped."""
    from bridge.emulator.amqp.idle import IdleTimeouts
    from bridge.emulator.server import EmulatorConfig

    _check_options(host, (link_idle_timeout, connection_idle_timeout), log_level)
    config = EmulatorConfig(
        name=name,
        host=host,
        port=port,
        control_port=control_port,
        key_name=key_name,
        key=key or os.environ.get(KEY_ENV) or "local-emulator-key",
        data_dir=data_dir,
        entities_file=entities,
        auto_create=auto_create,
        disable_local_auth=disable_local_auth,
        identities_file=identities,
        identity_dir=identity_dir,
        identity_port=identity_port,
        authority_port=authority_port,
        amqps_ports=tuple(amqps_port or ()),
        idle_timeouts=IdleTimeouts(link=link_idle_timeout, connection=connection_idle_timeout),
    )
    _run(config, json_output, host, port)


def _check_options(host: str, idle_timeouts: tuple[float, float], log_level: str) -> None:
    """Refuse what cannot work (exit 2), set up logging, warn about a bind beyond loopback."""
    if min(idle_timeouts) <= 0:
        typer.echo("bridge emulator: idle timeouts must be positive numbers of seconds", err=True)
        raise typer.Exit(2)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if host not in ("127.0.0.1", "localhost", "::1"):
        typer.echo(
            "warning: the local Service Bus is a test tool; binding beyond loopback exposes it", err=True
        )


def _run(config: object, json_output: bool, host: str, port: int) -> None:
    from bridge.emulator.server import run

    try:
        asyncio.run(_serve(config, json_output, run))
    except EmulatorError as exc:
        typer.echo(f"bridge emulator: {exc}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"bridge emulator: cannot listen on {host}:{port}: {exc.strerror}", err=True)
        raise typer.Exit(2) from None


async def _serve(config: object, json_output: bool, run: object) -> None:
    loop = asyncio.get_running_loop()
    task = loop.create_task(run(config, json_output))  # type: ignore[operator]
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, task.cancel)
    with contextlib.suppress(asyncio.CancelledError):
        await task


def register(app: typer.Typer) -> None:
    """Add ``bridge emulator`` to the CLI."""
    app.command(name="emulator")(emulator)
