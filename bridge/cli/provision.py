"""``bridge provision``: create the backlog queues (and with ``--entities`` the configured entities).

Prints a table (namespace, queue, action, details) or with ``--json`` one object, the public contract
built by ``ProvisionReport.to_json`` (``{"dry_run", "namespaces", "backlog_queue_count", "counts",
"queues": [{"role", "namespace", "name", "purpose", "type", "action", "differences"}]}``; fields are added,
never renamed). Exit status: 0 when every namespace answered (differing or extra queues are reported, not
failures), 2 for invalid or missing settings (one line), 1 when a namespace failed, naming its role.
"""

from __future__ import annotations

import json

import typer

from bridge.cli.context import CONFIGURATION_EXIT_CODE, settings_or_exit
from bridge.errors import ConfigurationError, NamespaceError


def register(app: typer.Typer) -> None:
    """Add ``provision``."""
    app.command(name="provision", help="Create backlog queues and configured entities on the namespaces.")(
        provision_command
    )


def provision_command(
    entities: bool = typer.Option(
        False, "--entities", help="Also create/validate the configured entities on both namespaces."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only report; create nothing."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output (one JSON object)."),
) -> None:
    """Create what is missing; report what exists, differs or is extra. Never deletes or changes a queue."""
    from bridge.servicebus.provisioning import provision

    settings = settings_or_exit()
    try:
        report = provision(settings, entities=entities, dry_run=dry_run)
    except ConfigurationError as exc:
        typer.echo(f"bridge: configuration error: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(CONFIGURATION_EXIT_CODE) from None
    except NamespaceError as exc:
        role = exc.namespace or "a"
        named = {"primary": settings.primary, "secondary": settings.secondary}.get(role)
        name = f" ({named.namespace_name})" if named is not None else ""
        detail = " ".join(str(exc).split())
        typer.echo(
            f"bridge provision: {role} namespace{name} failed: {type(exc).__name__}: {detail}", err=True
        )
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
        return
    _print_table(report.to_json())


def _details(row: dict[str, object]) -> str:
    differences = row["differences"]
    assert isinstance(differences, list)
    if row.get("action") == "retired":
        return f"{row['messages']} messages left: the syphon still moves them; do not delete it yet"
    if row.get("action") == "extra":
        return "empty, unused: yours to delete"
    return "; ".join(f"{d['field']}: wanted {d['wanted']}, is {d['actual']}" for d in differences)


def _print_table(report: dict[str, object]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    suffix = " (dry run)" if report["dry_run"] else ""
    table = Table(title=f"bridge provision{suffix}")
    for column in ("namespace", "queue", "purpose", "action", "details"):
        table.add_column(column)
    queues = report["queues"]
    assert isinstance(queues, list)
    for row in queues:
        cells = (
            f"{row['role']} ({row['namespace']})",
            row["name"] if row["type"] == "queue" else f"{row['name']} (topic)",
            row["purpose"],
            row["action"],
            _details(row),
        )
        # Text cells, not markup: a name or value with "[...]" must print as it is.
        table.add_row(*(Text(str(cell)) for cell in cells))
    console = Console()
    console.print(table)
    counts = report["counts"]
    assert isinstance(counts, dict)
    console.print(
        ", ".join(f"{action}: {n}" for action, n in counts.items() if n) or "nothing to do", markup=False
    )
