"""``bridge ledger``: the live ledger, a long-running Structured Streaming job (``docs/journal-ledger.md``,
"The live ledger").

It rolls the live journal every ``journal.live_ledger.interval`` seconds (unless ``--offline``), keeps
the reconciliation per entity current in ``journal.live_ledger.directory`` (its checkpoint, its state,
``ledger.json``), and publishes the verdict and the overdue list to Redis, where ``bridge status``, the
status page and ``bridge_ledger_overdue_messages`` read them. Stopped and started again, it goes on from
its checkpoint. Spark is imported only inside this command.

``--master spark://HOST:7077`` runs it on a standalone cluster (the driver here, the micro-batches'
tasks on the executors): the journal folder and the ledger's folder must then be on storage every
executor sees at the same path, and the executors must reach this host (``--conf spark.driver.host=...``).
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from types import FrameType
from typing import Annotated, Any

import typer

from bridge.cli.context import CONFIGURATION_EXIT_CODE, key_value_pairs, settings_or_exit
from bridge.errors import BridgeError
from bridge.settings import Settings

log = logging.getLogger(__name__)


def register(app: typer.Typer) -> None:
    """Add ``ledger``."""
    app.command(name="ledger", help="Run the live ledger (Structured Streaming over the journal).")(ledger)


def ledger(
    journal: Annotated[
        Path | None, typer.Option("--journal", help="Parquet journal folder (default: journal.directory).")
    ] = None,
    directory: Annotated[
        Path | None,
        typer.Option("--dir", help="The ledger's folder (default: journal.live_ledger.directory)."),
    ] = None,
    master: Annotated[
        str | None, typer.Option("--master", help="Spark master URL (default: SPARK_MASTER, else local[*]).")
    ] = None,
    driver_memory: Annotated[str, typer.Option("--driver-memory", help="Spark driver memory.")] = "1g",
    conf: Annotated[
        list[str] | None, typer.Option("--conf", help="KEY=VALUE Spark setting (repeatable).")
    ] = None,
    duration: Annotated[
        float | None, typer.Option("--duration", help="Stop after this many seconds (default: never).")
    ] = None,
    offline: Annotated[
        bool, typer.Option("--offline", help="Neither roll the live journal nor publish to Redis.")
    ] = False,
) -> None:
    """Keep the ledger current until Ctrl-C (or ``--duration``)."""
    settings = settings_or_exit()
    live = settings.journal.live_ledger
    journal_dir = journal or settings.journal.directory
    folder = directory or live.folder(journal_dir)
    if journal_dir is None or folder is None:
        typer.echo(
            "bridge ledger: no journal folder: pass --journal or set journal.directory "
            "(BRIDGE_JOURNAL__DIRECTORY)",
            err=True,
        )
        raise typer.Exit(CONFIGURATION_EXIT_CODE)
    from bridge.ledger import service
    from bridge.ledger.live_store import LedgerPaths
    from bridge.ledger.spark import build_session, master_url, owns_session

    stop = _stop_on_signals()
    owned = owns_session()
    spark = build_session(master_url(master), driver_memory, conf=key_value_pairs(conf or [], "--conf"))
    publisher = None if offline else _Publisher(settings, journal_dir)
    try:
        final = service.run(
            spark,
            journal_dir,
            LedgerPaths(folder),
            live.options(),
            duration=duration,
            on_publish=None if publisher is None else publisher.publish,
            stop=stop,
        )
    finally:
        if publisher is not None:
            publisher.close()
        if owned:
            spark.stop()
    typer.echo(f"bridge ledger: {final.get('verdict', 'no data')} ({folder / 'ledger.json'})")


def _stop_on_signals() -> threading.Event:
    """SIGTERM (``bridge up`` stopping, ``docker stop``) and Ctrl-C end the ledger between publications:
    the query stops and the session closes, rather than the JVM being killed mid-commit. A second signal
    while it stops raises ``KeyboardInterrupt``, for a person who does not want to wait."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


class _Publisher:
    """Rolls the live journal before each publication and stores the publication in Redis; a Redis outage
    is logged and the ledger goes on from the files it has."""

    def __init__(self, settings: Settings, journal: Path) -> None:
        from bridge.redis.connection import sync_client

        self.settings = settings
        self.journal = journal
        self.client = sync_client(settings.redis_url.get_secret_value())

    def publish(self, ledger: dict[str, Any]) -> bool:
        from bridge.ledger.live import roll_live
        from bridge.state.live_ledger import LiveLedgerStore

        interval = self.settings.journal.live_ledger.interval
        try:
            LiveLedgerStore(self.client).publish(ledger, ttl=max(30.0, 10 * interval))
            roll_live(self.client, self.settings, self.journal)
        except BridgeError as exc:
            log.warning("live ledger: Redis unavailable (%s); going on from the journal files", exc)
        return False

    def close(self) -> None:
        self.client.close()
