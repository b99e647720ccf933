"""``bridge status``: outbox depth, quarantine and dead-letter counts per entity (``--json`` for scripts).

``--quarantine ENTITY`` / ``--deadletter ENTITY`` list that stream's entries with their reasons.
"""

from __future__ import annotations

import json

import typer

from bridge.cli.context import settings_or_exit
from bridge.errors import BridgeError


def register(app: typer.Typer) -> None:
    """Add ``status``."""
    app.command(name="status", help="Show outbox depths, quarantine and dead-letter entries.")(status)


def status(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    quarantine: str | None = typer.Option(None, help="List this entity's quarantine stream."),
    deadletter: str | None = typer.Option(None, help="List this entity's local dead-letter stream."),
    count: int = typer.Option(50, help="Entries to list."),
) -> None:
    """Print the outbox state."""
    from bridge.outbox.connection import sync_client
    from bridge.outbox.reader import OutboxReader, list_problems

    settings = settings_or_exit()
    try:
        client = sync_client(settings.redis_url.get_secret_value())
        try:
            if quarantine or deadletter:
                which = "quarantine" if quarantine else "deadletter"
                entity = str(quarantine or deadletter)
                typer.echo(json.dumps(list_problems(client, entity, which, count=count), indent=2))
                return
            reader = OutboxReader(client, settings)
            names = sorted(set(reader.entities()) | set(settings.entities))
            depths = {name: reader.depth(name) for name in names}
        finally:
            client.close()
    except BridgeError as exc:
        typer.echo(f"bridge status: {type(exc).__name__}: {exc}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps({"entities": depths}, indent=2))
        return
    typer.echo(f"{'entity':<40} {'pending':>10} {'bytes':>12} {'ingress':>8} {'quarant.':>8} {'deadlet.':>8}")
    for name, depth in depths.items():
        typer.echo(
            f"{name:<40} {depth['pending_messages']:>10} {depth['pending_bytes']:>12} {depth['ingress']:>8} "
            f"{depth['quarantine']:>8} {depth['deadletter']:>8}"
        )
