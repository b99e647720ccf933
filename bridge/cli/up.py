"""``bridge up``: the whole bridge on this machine until Ctrl-C (see ``bridge.embedded.up``)."""

from __future__ import annotations

import faulthandler
import signal
from pathlib import Path
from typing import Annotated

import typer


def up(
    data_dir: Annotated[
        Path | None, typer.Option(help="Where Redis, the namespaces and the logs live.")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Ingress port (default: a free one).")] = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Send worker processes (prefork children).")] = 2,
    receivers: Annotated[bool, typer.Option(help="Start a logging receiver per entity.")] = True,
    tls: Annotated[
        bool,
        typer.Option(
            help="Serve the ingress over HTTPS with a self-signed certificate (HTTPS-only clients)."
        ),
    ] = False,
    entra: Annotated[
        bool,
        typer.Option(help="Sign in with Microsoft Entra ID only: local token issuer, SAS disabled."),
    ] = False,
    ha: Annotated[
        bool,
        typer.Option(
            help="Redis as a primary, a replica and three Sentinels, with replicated durability: kill the "
            "primary and watch the failover."
        ),
    ] = False,
    ledger: Annotated[
        bool,
        typer.Option(
            help="Also run the live ledger (`bridge ledger`, needs Java); `bridge status` shows its verdict."
        ),
    ] = False,
    standard_ports: Annotated[
        bool,
        typer.Option(
            help="Also serve the primary on localhost's ports 5671 (AMQPS) and 443 (HTTPS) where free, "
            "as the SDKs dial them; --no-standard-ports leaves them alone."
        ),
    ] = True,
) -> None:
    """Start Redis, two local namespaces, the ingress, a worker, two beats and receivers; Ctrl-C stops."""
    from rich.console import Console

    from bridge.embedded import up as stack_up

    # `kill -USR1 <pid>` prints every thread's stack to stderr, even while the main thread is inside a
    # blocking call: how a stack that does not stop tells where it is.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    # A shell starts a background job (`bridge up &`, a script's, CI's) with SIGINT and SIGQUIT ignored,
    # and Python then leaves SIGINT ignored: Ctrl-C or `kill -INT` would never stop the stack. Stopping
    # is what SIGINT asks of `bridge up`, however it was started.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    console = Console()

    def say(line: str) -> None:
        console.print(f"[bold cyan]up[/] {line}", highlight=False, markup=True)

    redis = "Redis (a primary, a replica, three Sentinels)" if ha else "Redis"
    say(f"starting {redis}, two local Service Bus namespaces and the bridge processes ...")
    started: list[stack_up.Stack] = []  # filled before the first process starts: stopped even half-way
    status = 1
    try:
        stack = stack_up.start(
            data_dir,
            port=port,
            concurrency=concurrency,
            receivers=receivers,
            on_start=started.append,
            tls=tls,
            entra=entra,
            standard_ports=standard_ports,
            ha=ha,
            ledger=ledger,
        )
        for line in stack_up.describe(stack):
            typer.echo(line)  # not rich: URLs and paths must not be wrapped
        status = stack_up.wait(stack, say)
    except KeyboardInterrupt:
        status = 0
    finally:
        say("stopping ...")
        for stack in started:
            stack_up.stop(stack)
        say("stopped")
    raise typer.Exit(status)


def register(app: typer.Typer) -> None:
    """Add ``bridge up``."""
    app.command(name="up")(up)
