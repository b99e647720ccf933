"""``bridge report``: the PySpark ledger over the journal (``docs/journal-ledger.md``).

``bridge report --out DIR [--json]`` first rolls the live journal (so a report right after a run is
complete) and snapshots the outbox, then runs the Spark job (``local[*]`` unless ``--master`` or
``SPARK_MASTER`` says otherwise) and writes ``DIR/tables/<name>/`` (Parquet) and ``DIR/report.html``.
``--json`` prints one JSON object: at least ``accepted``, ``delivered``, ``pending``, ``dead_lettered``,
``quarantined``, ``handled``, ``lost``, ``broker_duplicates``, ``suppressed_duplicates`` summed over
entities, and ``entities`` with the same per entity. Progress goes to stderr while Spark works.

Without Redis, ``--offline`` reports the journal folder as it is (open messages count as pending: nothing
can be called lost without the outbox), and ``--drained`` does the same for a finished run whose outbox is
known to be empty (open messages count as lost), e.g. on a cluster that sees only the shared journal.

``--follow`` draws the live ledger on the terminal instead (``bridge.ledger.follow``: the streaming query
of ``bridge ledger``, in ``--dir`` or a temporary folder), rolling the live journal every ``--interval``
seconds unless ``--offline``.

Spark is imported only inside this command, never when ``bridge`` starts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from bridge.cli.context import CONFIGURATION_EXIT_CODE, command_failed, key_value_pairs, settings_or_exit
from bridge.errors import BridgeError, ConfigurationError
from bridge.settings import Settings

if TYPE_CHECKING:
    from bridge.ledger.summary import ReportInputs


def register(app: typer.Typer) -> None:
    """Add ``report``."""
    app.command(name="report", help="Run the PySpark ledger report over the journal.")(report)


def report(
    out: Annotated[Path, typer.Option("--out", help="Folder for the tables and report.html (created).")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as one JSON object.")] = False,
    journal: Annotated[
        Path | None,
        typer.Option(
            "--journal", help="Parquet journal folder (default: journal.directory, else DIR/journal)."
        ),
    ] = None,
    master: Annotated[
        str | None, typer.Option("--master", help="Spark master URL (default: SPARK_MASTER, else local[*]).")
    ] = None,
    driver_memory: Annotated[str, typer.Option("--driver-memory", help="Spark driver memory.")] = "1g",
    price: Annotated[
        list[str] | None,
        typer.Option("--price", help="KIND=PRICE per million operations (over journal.prices; repeatable)."),
    ] = None,
    conf: Annotated[
        list[str] | None, typer.Option("--conf", help="KEY=VALUE Spark setting (repeatable).")
    ] = None,
    offline: Annotated[
        bool, typer.Option("--offline", help="Do not roll the live journal or check the outbox (no Redis).")
    ] = False,
    drained: Annotated[
        bool,
        typer.Option("--drained", help="--offline for a finished run: the outbox is empty, open = lost."),
    ] = False,
    follow: Annotated[
        bool, typer.Option("--follow", help="Draw the live ledger until Ctrl-C (Structured Streaming).")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", help="--follow: seconds between updates and rolls.")
    ] = 5.0,
    duration: Annotated[
        float | None, typer.Option("--duration", help="--follow: stop after this many seconds.")
    ] = None,
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir",
            help="--follow: the live ledger's folder, kept (default: a temporary one); "
            "not that of a running `bridge ledger`. --from-ledger: the running ledger's folder "
            "(default: journal.live_ledger.directory).",
        ),
    ] = None,
    from_ledger: Annotated[
        bool,
        typer.Option(
            "--from-ledger",
            help="Answer from the running live ledger once it has read every journal file (no Spark): "
            "reconciliation, billing and cost; latency, failover segments and tables need the batch report.",
        ),
    ] = False,
    wait: Annotated[
        float, typer.Option("--wait", help="--from-ledger: seconds to wait for the ledger to catch up.")
    ] = 30.0,
) -> None:
    """Reconcile the journal: lost, duplicates, latency, failovers and billable operations."""
    from bridge.core.ledger import price_table

    settings = settings_or_exit()
    try:
        given = {key: float(value) for key, value in key_value_pairs(price or [], "--price").items()}
        prices = price_table({**settings.journal.prices, **given})
    except ValueError as exc:
        typer.echo(f"bridge: configuration error: {exc}", err=True)
        raise typer.Exit(CONFIGURATION_EXIT_CODE) from None
    out = out.resolve()
    run = _Run(
        settings=settings,
        out=out,
        journal=(journal or settings.journal.directory or out / "journal").resolve(),
        master=master,
        driver_memory=driver_memory,
        spark_conf=key_value_pairs(conf or [], "--conf"),
        live=not (offline or drained),
        drained=drained,
        prices=prices,
        priced=frozenset({*settings.journal.prices, *given}),
    )
    if follow and from_ledger:
        typer.echo("bridge: configuration error: --follow and --from-ledger: choose one", err=True)
        raise typer.Exit(CONFIGURATION_EXIT_CODE)
    try:
        if follow:
            _follow(run, interval, duration, directory)
            return
        summary = _from_ledger(run, directory, wait) if from_ledger else _batch(run)
    except ConfigurationError as exc:
        typer.echo(f"bridge: configuration error: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(CONFIGURATION_EXIT_CODE) from None
    except BridgeError as exc:
        command_failed("report", exc, run.settings)
    if as_json:
        typer.echo(json.dumps(summary, default=str))
    else:
        _print_summary(summary)


@dataclass(frozen=True)
class _Run:
    """What one ``bridge report`` run was asked to do."""

    settings: Settings
    out: Path
    journal: Path
    master: str | None
    driver_memory: str
    spark_conf: dict[str, str]
    live: bool
    drained: bool
    prices: dict[str, float]
    priced: frozenset[str]


def _console() -> Any:
    from rich.console import Console

    return Console(stderr=True)


def _live_inputs(
    settings: Settings, out: Path, journal_dir: Path, step: Any
) -> tuple[tuple[Path, Path] | None, dict[str, str], dict[str, int], dict[str, Any], list[str]]:
    """Roll the live journal and snapshot the outbox; Redis unreachable means an offline report."""
    from dataclasses import asdict

    from bridge.journal.folders import JournalFolders
    from bridge.journal.store import JournalStore
    from bridge.ledger.gather import gather
    from bridge.ledger.live import outbox_entities, roll_now, take_snapshot
    from bridge.redis.connection import sync_client

    client = sync_client(settings.redis_url.get_secret_value())
    try:
        step("checking the outbox")
        entities = sorted(
            set(outbox_entities(client))
            | set(settings.entities)
            | {o for o in JournalStore(client, settings.journal).owners() if not o.startswith("~")}
        )
        snapshot = take_snapshot(client, settings, entities)
        step("rolling the live journal")
        rolled = roll_now(client, settings, journal_dir, entities)
        step("gathering the journal folders of every host")
        gathered = gather(JournalFolders(client).all(), journal_dir)
    finally:
        client.close()
    paths = snapshot.write(out / "inputs")
    roll_info = asdict(rolled)
    roll_info["files"] = len(rolled.files)
    roll_info["gathered_files"] = gathered.copied
    roll_info["unreadable_folders"] = gathered.unreadable
    return paths, snapshot.unchecked, snapshot.depths, roll_info, entities


def _batch(run: _Run) -> dict[str, Any]:
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from bridge.ledger.job import check_journal

    if not run.live:
        check_journal(run.journal)  # before the output folder or a Spark session is made
    run.out.mkdir(parents=True, exist_ok=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn())
    with Progress(*columns, console=_console(), transient=True) as progress:
        task = progress.add_task("bridge report", total=None)

        def step(stage: str) -> None:
            progress.update(task, description=f"bridge report: {stage}")

        inputs = _inputs(run, step, progress.console.print)
        check_journal(run.journal)  # what the live roll wrote, or the folder as it is
        step("starting Spark")
        from bridge.ledger.job import run_report
        from bridge.ledger.spark import build_session, master_url, owns_session

        url = master_url(run.master)
        owned = owns_session()
        spark = build_session(url, run.driver_memory, conf=run.spark_conf)
        try:
            return run_report(spark, replace(inputs, master=url), progress=step)
        finally:
            if owned:
                spark.stop()


def _inputs(run: _Run, step: Callable[[str], None], say: Callable[[str], None]) -> ReportInputs:
    """What the report knows besides the journal: in live mode the live journal rolled and the outbox's
    snapshot (in ``out/inputs``); Redis unreachable makes it an offline report, said with ``say``."""
    from bridge.errors import StateStoreUnavailableError
    from bridge.ledger.summary import ReportInputs

    snapshot: tuple[Path, Path] | None = None
    unchecked: dict[str, str] = {}
    depths: dict[str, int] = {}
    roll_info: dict[str, Any] = {"skipped": "offline"}
    if run.live:
        run.out.mkdir(parents=True, exist_ok=True)  # the snapshot's files go there
        try:
            snapshot, unchecked, depths, roll_info, _ = _live_inputs(run.settings, run.out, run.journal, step)
        except StateStoreUnavailableError as exc:
            roll_info = {"skipped": f"Redis unavailable: {exc}"}
            say(f"Redis unavailable ({exc}): reporting the journal folder as it is")
    return ReportInputs(
        journal=run.journal,
        out=run.out,
        prices=run.prices,
        priced=run.priced,
        currency=run.settings.journal.currency,
        snapshot=snapshot,
        drained=run.drained,
        unchecked=unchecked,
        live_depths=depths,
        roll=roll_info,
    )


def _from_ledger(run: _Run, directory: Path | None, wait: float) -> dict[str, Any]:
    """The answer of the running live ledger (``bridge.ledger.live_report``): the live journal rolled and
    the outbox checked first, as for the batch report, then the ledger's state once it read them."""
    from bridge.ledger.live_report import answer
    from bridge.ledger.live_store import LedgerPaths

    folder = directory or run.settings.journal.live_ledger.folder(run.journal)
    if folder is None:  # the journal folder always has a parent: kept for the type checker
        raise ConfigurationError("--from-ledger needs --dir or journal.live_ledger.directory")
    inputs = _inputs(run, lambda _stage: None, lambda line: typer.echo(line, err=True))
    return answer(LedgerPaths(folder.resolve()), replace(inputs, master="live ledger"), wait)


def _print_summary(summary: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from bridge.core.ledger import LABELS, SUMMARY_KEYS
    from bridge.ledger.html import decimal

    table = Table(title="bridge report")
    table.add_column("entity")
    for key in SUMMARY_KEYS:
        table.add_column(LABELS[key], justify="right")
    for name, record in summary["entities"].items():
        table.add_row(Text(name), *(Text(f"{int(record.get(key) or 0):,}") for key in SUMMARY_KEYS))
    table.add_row(Text("all"), *(Text(f"{int(summary.get(key) or 0):,}") for key in SUMMARY_KEYS))
    console = Console()
    if not console.is_terminal:
        # Piped into a file or a pager: no terminal width to fit, so no column is cut to "acce…".
        console = Console(width=1000)
    console.print(table)
    cost = summary["cost"]
    ratio = cost["resilience_ratio"]
    estimated = f"{decimal(cost['estimated_cost'])} {cost['currency']}"
    console.print(
        f"billable operations: {cost['operations']:,} (estimated {estimated}); "
        f"cost of resilience: {'-' if ratio is None else f'{ratio:.3f} x'}",
        markup=False,
    )
    if cost.get("placeholder_prices"):
        console.print(
            f"prices are placeholders for {', '.join(cost['placeholder_prices'])}: the cost is not money "
            "(set journal.prices or --price KIND=PRICE)",
            markup=False,
        )
    for note in summary.get("notes", []):
        console.print(f"note: {note}", markup=False)
    console.print(f"report: {summary['html']}", markup=False)


def _follow(run: _Run, interval: float, duration: float | None, directory: Path | None) -> None:
    import shutil
    import tempfile

    from bridge.ledger.follow import LiveRoll, follow
    from bridge.ledger.live_store import LedgerPaths
    from bridge.ledger.spark import build_session, master_url, owns_session

    folder = directory or Path(tempfile.mkdtemp(prefix="bridge-follow-"))
    options = {**run.settings.journal.live_ledger.options(), "interval": interval}
    owned = owns_session()
    spark = build_session(master_url(run.master), run.driver_memory, conf=run.spark_conf)
    try:
        roll = LiveRoll(run.settings, run.journal).roll if run.live else None
        follow(spark, run.journal, LedgerPaths(folder), options, roll=roll, duration=duration)
    finally:
        if owned:
            spark.stop()
        if directory is None:
            shutil.rmtree(folder, ignore_errors=True)
