"""``bridge demo``: the whole bridge on this machine and a story told live (see ``bridge.embedded.story``).

``--fast`` runs the story with short intervals (a minute or two); ``--no-input`` never asks to go on (for
scripts; also implied when stdin is not a terminal). The exit status is 0 only when the final line says
``lost=0`` (and every message was handled once); Ctrl-C stops everything and exits 130.
"""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

INTERRUPTED = 130


def _table(story: Any, status: dict[str, Any]) -> Any:
    from rich.table import Table
    from rich.text import Text

    from bridge.embedded.story import ENTITIES, entity

    table = Table(title="entities (from /status.json)", expand=False)
    for column in ("entity", "mode", "active", "primary", "secondary"):
        table.add_column(column)
    for column in ("outbox", "oldest", "backlog", "accepted", "handled", "dup. suppressed"):
        table.add_column(column, justify="right")
    depths = (status.get("backlog") or {}).get("depths", {})
    backlog = sum(d["messages"] or 0 for d in depths.values()) if depths else 0
    for name, options in ENTITIES.items():
        record = entity(status, name)
        namespaces = record.get("namespaces", {})

        def health(role: str, namespaces: dict[str, Any] = namespaces) -> Text:
            up = namespaces.get(role, {}).get("available", True)
            return Text("up", style="green") if up else Text("DOWN", style="bold red")

        active = record.get("active", "?") + (
            " (backlog)" if record.get("paired", {}).get("failed_over") else ""
        )
        receiver = record.get("receiver", {})
        table.add_row(
            Text(name),
            Text(str(options["replication"])),
            Text(active),
            health("primary"),
            health("secondary"),
            Text(str(record.get("outbox_depth", 0))),
            Text(f"{record.get('outbox_oldest_age', 0.0):.1f} s"),
            Text(str(backlog) if options["replication"] == "paired" else "-"),
            Text(str(len(story.traffic.accepted[name]) if story.traffic else 0)),
            Text(str(receiver.get("handled", 0))),
            Text(str(receiver.get("duplicates_suppressed", 0))),
        )
    return table


def _plain(status: dict[str, Any]) -> str:
    from bridge.embedded.story import ENTITIES, entity

    parts = []
    for name in ENTITIES:
        record = entity(status, name)
        primary = "up" if record.get("namespaces", {}).get("primary", {}).get("available", True) else "DOWN"
        secondary = (
            "up" if record.get("namespaces", {}).get("secondary", {}).get("available", True) else "DOWN"
        )
        parts.append(
            f"{name}: active={record.get('active', '?')} primary={primary} secondary={secondary} "
            f"outbox={record.get('outbox_depth', 0)} handled={record.get('receiver', {}).get('handled', 0)}"
        )
    return "; ".join(parts)


def demo(
    fast: Annotated[bool, typer.Option(help="Short intervals: the whole story in a minute or two.")] = False,
    no_input: Annotated[bool, typer.Option("--no-input", help="Never ask before the next phase.")] = False,
    keep: Annotated[bool, typer.Option(help="Leave everything running at the end (Ctrl-C stops).")] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Where Redis, the namespaces and logs live.")] = None,
) -> None:
    """Start the whole bridge and tell its story live: outages, failover per mode, recovery, the ledger."""
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from bridge.embedded import up
    from bridge.embedded.story import FAST, NORMAL, Outcome, Story, env_file_hint

    console = Console()
    interactive = console.is_terminal and sys.stdin.isatty() and not no_input

    def say(line: str) -> None:
        console.print(f"[bold cyan]demo[/] {line}", highlight=False, markup=True)

    pace = FAST if fast else NORMAL
    story = Story(data_dir, pace)
    outcome = Outcome()
    final = ""
    status_code = 1
    try:
        say("starting Redis, two local Service Bus namespaces, ingress, worker, two beats and receivers ...")
        story.start()
        stack = story.stack
        say(f"ingress {stack.ingress_url}; status page {stack.ingress_url}/status")
        say(f"settings for your own shell: {env_file_hint(stack)}")
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        live_view = console.is_terminal
        view = Live(console=console, refresh_per_second=4) if live_view else contextlib.nullcontext()
        with view as live:
            for phase in story.phases():
                if interactive:
                    if live is not None:
                        live.stop()
                    console.input(f"[bold]next:[/] {phase.name} — press Enter ")
                    if live is not None:
                        live.start()
                task = progress.add_task(phase.name, total=None)
                if not live_view:
                    say(f"phase: {phase.name}")
                phase.action()
                started = time.monotonic()
                while True:
                    status = story.read_status()
                    if live is not None:
                        live.update(Group(progress, _table(story, status)))
                    held = time.monotonic() - started >= phase.hold
                    if held and phase.done(status):
                        break
                    if time.monotonic() - started > pace.timeout + phase.hold:
                        outcome.failed_phase = phase.name
                        break
                    time.sleep(0.5)
                progress.update(task, total=1, completed=1)
                if not live_view:
                    say(f"  {_plain(story.status)} ({time.monotonic() - started:.1f} s)")
                if outcome.failed_phase:
                    say(f"[bold red]timed out[/] in phase: {phase.name}")
                    break
            story.verdict(outcome)
            if outcome.failed_phase is None:
                task = progress.add_task("ledger: bridge report (PySpark) reconciles the journal", total=None)
                if live is not None:
                    live.update(Group(progress, _table(story, story.read_status())))
                else:
                    say("phase: ledger (bridge report)")
                started = time.monotonic()
                outcome.ledger = story.ledger()
                progress.update(task, total=1, completed=1)
                if live is not None:
                    live.update(Group(progress, _table(story, story.read_status())))
                else:
                    say(f"  ledger done in {time.monotonic() - started:.1f} s")
        if outcome.ledger and not outcome.ledger_complete:
            ledger = outcome.ledger
            say(
                "[bold red]the ledger does not account for every message[/]: it saw "
                f"{ledger.get('accepted')} accepted of {outcome.accepted}, lost {ledger.get('lost')}"
            )
        final = outcome.final_line(f"{story.stack.ingress_url}/status")
        status_code = 0 if outcome.passed else 1
        if keep:
            console.print(final, markup=False, highlight=False, soft_wrap=True)
            say("--keep: everything stays up (Ctrl-C stops)")
            up.wait(story.stack, say)
            final = ""
    except KeyboardInterrupt:
        final = ""
        status_code = INTERRUPTED
        say("interrupted")
    finally:
        say("stopping ...")
        story.stop()
    if final:
        console.print(final, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(status_code)


def register(app: typer.Typer) -> None:
    """Add ``bridge demo``."""
    app.command(name="demo")(demo)
