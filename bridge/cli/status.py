"""``bridge status``: per entity the active namespace, namespace health, outbox and dead-letter depths.

``--json`` prints exactly one JSON object, the public contract assembled by ``bridge.status``
(``{"entities": [{"name", "replication", "active", "namespaces", "outbox_depth", "dead_letter_depth",
...}]}``; fields are added, never renamed) with the status page's extras (``bridge.status.snapshot``)
and its one-line health ``summary`` (``{"text", "parts", "level"}``) and ``errors``. Without it the summary
line comes first, then the same is shown as a table.
``--quarantine ENTITY`` / ``--deadletter ENTITY`` list that stream's entries with their reasons instead.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

import typer

from bridge.cli.context import CONFIGURATION_EXIT_CODE, command_failed, settings_or_exit
from bridge.errors import BridgeError, ConfigurationError

if TYPE_CHECKING:
    from bridge.redis.types import SyncRedis
    from bridge.settings import Settings


def register(app: typer.Typer) -> None:
    """Add ``status``."""
    app.command(
        name="status", help="Show roles, namespace health, outbox depths, quarantine and dead-letter entries."
    )(status)


def status(
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (one JSON object)."),
    quarantine: str | None = typer.Option(
        None, metavar="ENTITY", help="List this entity's quarantine stream (exit 1 for an unknown entity)."
    ),
    deadletter: str | None = typer.Option(
        None, metavar="ENTITY", help="List this entity's local dead-letter stream (exit 1 if unknown)."
    ),
    count: int = typer.Option(50, help="Entries to list."),
) -> None:
    """Print the replication and outbox state."""
    from bridge.outbox.problems import list_problems
    from bridge.redis.connection import sync_client
    from bridge.status.health_view import with_health
    from bridge.status.snapshot import collect_snapshot

    settings = settings_or_exit()
    try:
        client = sync_client(settings.redis_url.get_secret_value())
    except ConfigurationError as exc:  # its message never quotes the URL (see bridge.redis.connection)
        typer.echo(f"bridge: configuration error: {exc}", err=True)
        raise typer.Exit(CONFIGURATION_EXIT_CODE) from None
    try:
        try:
            if quarantine or deadletter:
                which = "quarantine" if quarantine else "deadletter"
                entity = str(quarantine or deadletter)
                problems = list_problems(client, entity, which, count=count)
                if not problems:
                    _exit_if_unknown(settings, client, entity)
                typer.echo(json.dumps(problems, indent=2))
                return
            # The page's snapshot without its backlog probe (a Service Bus call per queue): the summary
            # reads the roles, not the queues' depths.
            report = with_health(settings, client, collect_snapshot(settings, client))
        finally:
            client.close()
    except BridgeError as exc:
        command_failed("status", exc, settings)
    if as_json:
        typer.echo(json.dumps(report, indent=2))
        return
    _print_table(report)


def _exit_if_unknown(settings: Settings, client: SyncRedis, entity: str) -> None:
    """Exit 1 naming the known entities when ``entity`` is neither configured nor in the outbox: an empty
    list for a misspelled name would read as "nothing quarantined"."""
    from bridge.outbox.reader import OutboxReader

    known = sorted(set(settings.entities) | set(OutboxReader(client, settings).entities()))
    if entity in known:
        return
    listed = ", ".join(known) if known else "none yet"
    typer.echo(
        f"bridge status: unknown entity {entity!r}: not in the settings and never written to the outbox "
        f"(known entities: {listed})",
        err=True,
    )
    raise typer.Exit(1)


def _health(namespace: dict[str, Any]) -> str:
    # A recorded failure is shown even when the settings no longer name the namespace: it is history.
    if not namespace["available"]:
        text = f"UNAVAILABLE: {namespace['last_error'] or '?'}"
    else:
        text = "available" if namespace["configured"] else "not configured"
    checked = namespace.get("checked_at")
    if checked is not None:
        # A namespace without traffic is only as current as its last probe: say when that was.
        text += f" (checked {_ago(checked)} ago)"
    return text


def _problem_depth(entity: dict[str, Any], which: str, depth: int) -> str:
    """A problem stream's depth, marked FULL at its bound (its entries are then held where they are)."""
    return f"{depth} FULL" if which in entity.get("problem_streams_full", ()) else str(depth)


def _ago(at: float) -> str:
    seconds = max(0, int(time.time() - at))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h"


_LEVEL_STYLE = {"ok": "green", "degraded": "yellow", "down": "bold red"}
"""The summary line's colour by its level (``bridge.core.health.summary_level``), as the page colours it."""


def _print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # Cells are ``Text``, not markup: an error like "[amqp:not-found]" must print as it is.
    table = Table(title="bridge status")
    for column in ("entity", "mode", "active", "epoch", "primary", "secondary"):
        table.add_column(column)
    for column in ("outbox", "bytes", "dead-letter", "quarantine", "ops"):
        table.add_column(column, justify="right")
    for entity in report["entities"]:
        active = entity["active"]
        if entity.get("paired", {}).get("failed_over"):
            active += " (backlog)"
        cells = (
            entity["name"],
            entity["replication"],
            active,
            str(entity["epoch"]),
            _health(entity["namespaces"]["primary"]),
            _health(entity["namespaces"]["secondary"]),
            str(entity["outbox_depth"]),
            str(entity["outbox_bytes"]),
            _problem_depth(entity, "deadletter", entity["dead_letter_depth"]),
            _problem_depth(entity, "quarantine", entity["quarantine_depth"]),
            str(entity["cost"]["total"]),
        )
        table.add_row(*(Text(cell) for cell in cells))
    console = Console()
    summary = report["summary"]
    console.print(Text(summary["text"], style=_LEVEL_STYLE.get(summary["level"], "")), soft_wrap=True)
    console.print(table)
    backlog = report.get("backlog")
    if backlog and backlog["removed"]:
        removed = ", ".join(f"{i} ({r['error'] or '?'})" for i, r in backlog["removed"].items())
        console.print(f"backlog queues of {backlog['namespace']} out of rotation: {removed}", markup=False)
    for entity in report["entities"]:
        for barrier in entity.get("paired", {}).get("barriers", []):
            if barrier["state"] == "lost":
                console.print(
                    f"restore barrier LOST: {entity['name']} shard {barrier['shard']} backlog queue "
                    f"{barrier['queue']} (re-sent {barrier['resends']}x; the shard waits for the syphon "
                    "to pass the new one; docs/paired.md)",
                    markup=False,
                )
        journal = entity.get("journal") or {}
        if journal.get("overflow"):
            lost_events = ", ".join(f"{kind} {n}" for kind, n in sorted(journal["overflow"].items()))
            console.print(
                f"journal of {entity['name']} is full ({journal['length']}/{journal['max_length']} entries; "
                f"events counted, not stored: {lost_events}) — is a beat rolling it?",
                markup=False,
            )
    console.print(redis_line(report), markup=False)
    console.print(f"billable operations: {report['cost']['total']}", markup=False)
    for line in ledger_lines(report.get("ledger"), time.time()):
        console.print(line, markup=False)


def redis_line(report: dict[str, Any]) -> str:
    """One line on Redis and the durability mode: role, topology, replicas and their lag, AOF."""
    durability = report.get("durability") or {}
    mode = durability.get("mode", "local")
    wanted = durability.get("wait_replicas", 0)
    plural = "s" if wanted != 1 else ""
    said = f"durability {mode}" + (f" ({wanted} replica{plural} confirm)" if wanted else "")
    redis = report.get("redis")
    if redis is None:
        return f"redis: no INFO (a Cluster, or refused); {said}"
    lags = ", ".join(
        f"{r['address']} {r['state']} lag {r['lag_bytes']} B/{r['lag_seconds']} s" for r in redis["replicas"]
    )
    aof = "on" if redis["aof_enabled"] else "OFF"
    if redis["aof_enabled"] and not redis["aof_last_write_ok"]:
        aof = "WRITE FAILING"
    return (
        f"redis: {redis['role']} ({redis['topology']}), replicas {redis['connected_replicas']}"
        f"{' [' + lags + ']' if lags else ''}, AOF {aof}; {said}"
    )


def ledger_lines(ledger: dict[str, Any] | None, now: float, shown: int = 10) -> list[str]:
    """The live ledger's verdict, its reasons and each entity's oldest overdue MessageIds, as text."""
    if ledger is None:
        return ["live ledger: not running (no publication in Redis; start `bridge ledger`)"]
    published = ledger.get("published_at")
    when = f", published {_ago(published)} ago" if published is not None else ""
    lines = [f"live ledger: {str(ledger['verdict']).upper()} ({ledger.get('overdue', 0)} overdue{when})"]
    lines += [f"  {reason}" for reason in ledger.get("reasons", [])]
    for name, entity in sorted(ledger.get("entities", {}).items()):
        ids = entity.get("overdue_ids", [])
        if not ids:
            continue
        listed = ", ".join(f"{m['message_id']} ({int(m['age'])}s)" for m in ids[:shown])
        more = f" and {entity['overdue'] - shown} more" if entity["overdue"] > shown else ""
        lines.append(f"  {name}: {entity['overdue']} overdue: {listed}{more}")
    return lines
