"""Serving the metrics: ``/metrics`` on the ingress, one HTTP endpoint for worker, beat and receiver.

The ingress is one process: its registry is prometheus_client's default one plus the state collector.

``bridge worker`` runs Celery's prefork pool: the tasks (and their counters) run in child processes, and a
``start_http_server`` per child would serve only that child's counts (and collide on the port). So
prometheus_client's multiprocess mode is used:

1. ``prepare_multiprocess`` runs in the worker's main process before Celery starts and before any count: it
   sets ``PROMETHEUS_MULTIPROC_DIR`` to a private directory (``metrics_dir``, wiped; default a new
   temporary one), so every process forked from it keeps its values in a file of its own there;
2. every per-process series has labels, so its values are created by the first ``labels(...)`` call,
   after this choice: they are file-backed;
3. when a pool child exits (Celery's ``worker_process_shutdown``), ``mark_process_dead`` removes its
   live-gauge files; its counters stay in the directory, so nothing it counted is lost;
4. one HTTP server in the main process (``serve_process_metrics``) serves a ``MultiProcessCollector`` over
   the directory, i.e. the sum over every child that ever ran, plus the state collector;
5. a metrics file keeps every value it was given, so a pool process cannot remove the label sets of an
   entity that retired (a worker's drain service does in a single process, ``metrics.forget_entity``):
   every endpoint leaves out the series of entities neither configured nor in the outbox's entity set
   (``ListedEntitiesOnly``), one ``SMEMBERS`` per scrape; the ingress and beat, which never learn of a
   retirement, too. An entity that comes back goes on from its earlier count.

Beat and receiver are single processes and serve the default registry the same way.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client import values as prometheus_values
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.multiprocess import MultiProcessCollector, mark_process_dead
from prometheus_client.registry import REGISTRY, Collector

from bridge.errors import BridgeError
from bridge.outbox.reader import OutboxReader
from bridge.settings import Settings
from bridge.status.collector import StateCollector
from bridge.status.snapshot import StateReader

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = CONTENT_TYPE_LATEST
_METRICS_MODULE = "bridge.observability.metrics"
_OWN_DIR_PREFIX = "bridge-metrics-"


def prepare_multiprocess(directory: Path | None) -> Path:
    """Make this process and every process forked from it keep metric values in files (see above).

    Must run before any per-process series got a value; raises ``RuntimeError`` otherwise (those values
    would stay in this process's memory and the children's counts would never be served).
    """
    metrics = sys.modules.get(_METRICS_MODULE)
    if metrics is not None and metrics.values_created():
        raise RuntimeError(f"{_METRICS_MODULE} recorded values before the multiprocess directory was set")
    if directory is None:
        remove_orphaned_dirs(Path(tempfile.gettempdir()))
        path = Path(tempfile.mkdtemp(prefix=f"{_OWN_DIR_PREFIX}{os.getpid()}-"))
        atexit.register(_remove_own_dir, path, os.getpid())
    else:
        path = Path(directory)
        # Wiped at start: files of a previous run would be added to this run's counts.
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
    os.environ[MULTIPROC_ENV] = str(path)
    # prometheus_client chooses in-memory or file-backed values when it is imported, which may already
    # have happened (a library imported it); choose again now that the directory is set.
    prometheus_values.ValueClass = prometheus_values.get_value_class()  # type: ignore[no-untyped-call]
    return path


def remove_orphaned_dirs(parent: Path) -> list[Path]:
    """Remove the metrics folders of processes that no longer exist; the removed folders.

    A process killed with SIGKILL never runs its ``atexit`` handler, so its own folder would stay in the
    temp directory forever; the next process to make one sweeps them (the creator's pid is in the name).
    """
    removed: list[Path] = []
    for path in parent.glob(f"{_OWN_DIR_PREFIX}*-*"):
        pid = path.name.removeprefix(_OWN_DIR_PREFIX).split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def _remove_own_dir(path: Path, owner: int) -> None:
    # Forked children inherit atexit handlers; only the process that made the directory removes it.
    if os.getpid() == owner:
        shutil.rmtree(path, ignore_errors=True)


def multiprocess_dir() -> Path | None:
    """The multiprocess directory of this process, None in single-process mode."""
    value = os.environ.get(MULTIPROC_ENV)
    return Path(value) if value else None


def child_exited(pid: int) -> None:
    """A prefork child ended: drop its live-gauge files (its counters stay, they are history)."""
    directory = multiprocess_dir()
    if directory is not None:
        mark_process_dead(pid, str(directory))  # type: ignore[no-untyped-call]


class _Sources(Collector):
    """Several collectors behind one ``collect`` (a registry that never checks names at registration)."""

    def __init__(self, sources: Iterable[Any]) -> None:
        self.sources = list(sources)

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


class ListedEntitiesOnly(Collector):
    """``source``'s series without the samples of entities ``listed()`` does not name (all of them when it
    answers None: Redis could not be read)."""

    def __init__(self, source: Any, listed: Callable[[], set[str] | None]) -> None:
        self.source = source
        self.listed = listed

    def collect(self) -> Iterator[Metric]:
        names = self.listed()
        for metric in self.source.collect():
            if names is not None:
                metric.samples = [s for s in metric.samples if s.labels.get("entity", "") in names or
                                  "entity" not in s.labels]  # fmt: skip
            yield metric


def listed_entities(reader: StateReader) -> set[str] | None:
    """The configured entities and those in the outbox's entity set; None when Redis cannot be read."""
    try:
        return set(reader.settings.entities) | set(OutboxReader(reader.client(), reader.settings).entities())
    except BridgeError as exc:
        log.debug("entity set not read for the metrics: %s", exc)
        return None


def process_registry(reader: StateReader | None) -> Collector:
    """This process's series (summed over the prefork children in multiprocess mode) and, read through
    ``reader``, the state series (None leaves them out); with a reader, the series of entities no longer
    listed are left out (``ListedEntitiesOnly``)."""

    own: Any = REGISTRY
    directory = multiprocess_dir()
    if directory is not None:
        own = CollectorRegistry()
        MultiProcessCollector(own, path=str(directory))  # type: ignore[no-untyped-call]
    if reader is None:
        return _Sources([own])
    return _Sources([ListedEntitiesOnly(own, partial(listed_entities, reader)), StateCollector(reader)])


def render(registry: Collector) -> bytes:
    """The text exposition of ``registry``."""
    return generate_latest(registry)


def serve_process_metrics(settings: Settings, registry: Collector) -> int | None:
    """Serve ``registry`` on ``metrics_host:metrics_port`` from a daemon thread; the port, None when off."""
    if settings.metrics_port is None:
        return None
    server, _ = start_http_server(settings.metrics_port, addr=settings.metrics_host, registry=registry)
    port = int(server.server_port)
    log.info("metrics on http://%s:%d/metrics", settings.metrics_host, port)
    return port
