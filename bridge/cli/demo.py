"""``bridge demo``: run the bridge end to end on the embedded default (see ``bridge.embedded.demo``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def demo(
    messages: Annotated[int, typer.Option(min=1, help="Messages per phase of the story.")] = 20,
    data_dir: Annotated[Path | None, typer.Option(help="Where Redis and the namespaces keep data.")] = None,
    keep: Annotated[bool, typer.Option(help="Leave everything running at the end (Ctrl-C stops).")] = False,
) -> None:
    """Start Redis and two local namespaces and run the bridge end to end (outage, failover, recovery)."""
    from rich.console import Console

    from bridge.embedded.demo import run_demo

    console = Console()
    ok = run_demo(data_dir, messages, keep, lambda line: console.print(f"[bold cyan]demo[/] {line}",
                                                                      highlight=False, markup=True))
    if not ok:
        console.print("[bold red]demo failed: messages were lost[/]")
        raise typer.Exit(1)
    console.print("[bold green]demo passed: every message delivered[/]")


def register(app: typer.Typer) -> None:
    """Add ``bridge demo``."""
    app.command(name="demo")(demo)
