"""``bridge demo``: the whole bridge on this machine and a story told live (see ``bridge.embedded.demo``).

``--fast`` runs the story with short intervals (a minute or two); ``--no-input`` never asks to go on (for
scripts; also implied when stdin is not a terminal). The exit status is 0 only when the final line says
``lost=0`` (and every message was handled once); Ctrl-C stops everything and exits 130.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from bridge.embedded.demo import Outcome, Phase, Story

INTERRUPTED = 130


def _table(story: Any, status: dict[str, Any]) -> Any:
    from rich.table import Table
    from rich.text import Text

    from bridge.embedded.demo import ENTITIES, entity

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
    from bridge.embedded.demo import ENTITIES, entity

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


@dataclass
class _Screen:
    """Where the story is told: a live table under a progress bar on a terminal, else one line per step."""

    console: Any
    progress: Any
    interactive: bool
    live: Any = None
    """The ``rich.live.Live`` view while the phases run on a terminal; None for line-by-line output."""

    def say(self, line: str) -> None:
        self.console.print(f"[bold cyan]demo[/] {line}", highlight=False, markup=True)

    def show(self, story: Story, status: dict[str, Any]) -> None:
        """Redraw the live view (progress and the entity table) from ``status``."""
        from rich.console import Group

        self.live.update(Group(self.progress, _table(story, status)))

    def ask(self, next_phase: str) -> None:
        """Wait for Enter before ``next_phase`` when interactive (the live view pauses meanwhile)."""
        if not self.interactive:
            return
        if self.live is not None:
            self.live.stop()
        self.console.input(f"[bold]next:[/] {next_phase} — press Enter ")
        if self.live is not None:
            self.live.start()


def _start(screen: _Screen, story: Story) -> None:
    from bridge.embedded.demo import env_file_hint

    screen.say(
        "starting Redis, two local Service Bus namespaces, ingress, worker, two beats and receivers ..."
    )
    story.start()
    stack = story.stack
    screen.say(f"ingress {stack.ingress_url}; status page {stack.ingress_url}/status")
    screen.say(f"settings for your own shell: {env_file_hint(stack)}")


def _run_phase(screen: _Screen, story: Story, phase: Phase, timeout: float, outcome: Outcome) -> bool:
    """Run ``phase`` until it is done (after its hold) or times out; False when it timed out."""
    screen.ask(phase.name)
    task = screen.progress.add_task(phase.name, total=None)
    if screen.live is None:
        screen.say(f"phase: {phase.name}")
    phase.action()
    started = time.monotonic()
    while True:
        status = story.read_status()
        if screen.live is not None:
            screen.show(story, status)
        held = time.monotonic() - started >= phase.hold
        if held and phase.done(status):
            break
        if time.monotonic() - started > timeout + phase.hold:
            outcome.failed_phase = phase.name
            break
        time.sleep(0.5)
    screen.progress.update(task, total=1, completed=1)
    if screen.live is None:
        screen.say(f"  {_plain(story.status)} ({time.monotonic() - started:.1f} s)")
    if outcome.failed_phase:
        screen.say(f"[bold red]timed out[/] in phase: {phase.name}")
        return False
    return True


def _run_ledger(screen: _Screen, story: Story, outcome: Outcome) -> None:
    """``bridge report`` over the story's journal; its summary goes to ``outcome.ledger``."""
    task = screen.progress.add_task("ledger: bridge report (PySpark) reconciles the journal", total=None)
    if screen.live is not None:
        screen.show(story, story.read_status())
    else:
        screen.say("phase: ledger (bridge report)")
    started = time.monotonic()
    outcome.ledger = story.ledger()
    screen.progress.update(task, total=1, completed=1)
    if screen.live is not None:
        screen.show(story, story.read_status())
    else:
        screen.say(f"  ledger done in {time.monotonic() - started:.1f} s")


def _tell(screen: _Screen, story: Story, timeout: float, outcome: Outcome) -> None:
    """Every phase in turn, the verdict, then (when no phase timed out) the ledger."""
    from rich.live import Live

    live_view = screen.console.is_terminal
    view = Live(console=screen.console, refresh_per_second=4) if live_view else contextlib.nullcontext()
    with view as live:
        screen.live = live
        for phase in story.phases():
            if not _run_phase(screen, story, phase, timeout, outcome):
                break
        story.verdict(outcome)
        if outcome.failed_phase is None:
            _run_ledger(screen, story, outcome)
    screen.live = None


def _conclude(screen: _Screen, story: Story, outcome: Outcome, keep: bool) -> tuple[str, int]:
    """The final line still to print (empty once printed) and the exit status; with ``keep``, wait."""
    from bridge.embedded import up

    if outcome.ledger and not outcome.ledger_complete:
        ledger = outcome.ledger
        screen.say(
            "[bold red]the ledger does not account for every message[/]: it saw "
            f"{ledger.get('accepted')} accepted of {outcome.accepted}, lost {ledger.get('lost')}"
        )
    final = outcome.final_line(f"{story.stack.ingress_url}/status")
    status_code = 0 if outcome.passed else 1
    if keep:
        screen.console.print(final, markup=False, highlight=False, soft_wrap=True)
        screen.say("--keep: everything stays up (Ctrl-C stops)")
        up.wait(story.stack, screen.say)
        final = ""
    return final, status_code


def demo(
    fast: Annotated[bool, typer.Option(help="Short intervals: the whole story in a minute or two.")] = False,
    no_input: Annotated[bool, typer.Option("--no-input", help="Never ask before the next phase.")] = False,
    keep: Annotated[bool, typer.Option(help="Leave everything running at the end (Ctrl-C stops).")] = False,
    data_dir: Annotated[Path | None, typer.Option(help="Where Redis, the namespaces and logs live.")] = None,
) -> None:
    """Start the whole bridge and tell its story live: outages, failover per mode, recovery, the ledger."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from bridge.embedded.demo import FAST, NORMAL, Outcome, Story

    console = Console()
    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn(), console=console
    )
    interactive = console.is_terminal and sys.stdin.isatty() and not no_input
    screen = _Screen(console, progress, interactive)
    pace = FAST if fast else NORMAL
    story = Story(data_dir, pace)
    outcome = Outcome()
    final = ""
    status_code = 1
    try:
        _start(screen, story)
        _tell(screen, story, pace.timeout, outcome)
        final, status_code = _conclude(screen, story, outcome, keep)
    except KeyboardInterrupt:
        final = ""
        status_code = INTERRUPTED
        screen.say("interrupted")
    finally:
        screen.say("stopping ...")
        story.stop()
    if final:
        console.print(final, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(status_code)


def register(app: typer.Typer) -> None:
    """Add ``bridge demo``."""
    app.command(name="demo")(demo)
