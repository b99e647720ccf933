"""``bridge receive``: run the receiving end for one entity, or look into the paired-mode backlog.

    bridge receive ENTITY [--subscription S] (--handler module:function | --celery-task NAME) [options]
    bridge receive [ENTITY] --backlog [--queue I ...] [--limit N]                   # peek: JSON lines
    bridge receive ENTITY --backlog --drain (--handler ... | --celery-task ...)      # hand them over

The receiver runs until SIGTERM or SIGINT, then finishes the work in hand (handlers run to their end,
copies are settled) and exits 0. ``--concurrency``, ``--prefetch``, ``--batch-size`` and ``--window``
override the ``[receiver]`` settings for this run. A bad handler spec, missing namespaces or invalid
settings end with one line on stderr and exit status 2.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Annotated, Any

import typer

from bridge.cli.context import CONFIGURATION_EXIT_CODE, settings_or_exit
from bridge.errors import ConfigurationError, NamespaceError, StateStoreUnavailableError
from bridge.settings import ReceiverSettings, Settings


def register(app: typer.Typer) -> None:
    """Add ``receive``."""
    app.command(name="receive", help="Receive from both namespaces; each message handed once.")(receive)


def receive(
    entity: str | None = typer.Argument(None, help="Queue or topic path (optional with --backlog)."),
    *,
    subscription: str | None = typer.Option(None, "--subscription", help="Subscription of the topic."),
    handler: str | None = typer.Option(None, "--handler", help="module:function called per message."),
    celery_task: str | None = typer.Option(None, "--celery-task", help="Celery task name sent per message."),
    celery_queue: str | None = typer.Option(None, "--celery-queue", help="Celery queue for --celery-task."),
    concurrency: int | None = typer.Option(None, "--concurrency", min=1, help="Handler calls at once."),
    prefetch: int | None = typer.Option(None, "--prefetch", min=0, help="SDK prefetch_count."),
    batch_size: int | None = typer.Option(None, "--batch-size", min=1, help="Messages per receive call."),
    window: float | None = typer.Option(None, "--window", help="Duplicate window in seconds."),
    backlog: bool = typer.Option(False, "--backlog", help="Read the paired-mode backlog queues."),
    drain: bool = typer.Option(False, "--drain", help="With --backlog: hand the entity's messages over."),
    queue: Annotated[
        list[int] | None, typer.Option("--queue", help="With --backlog: only backlog queue index I.")
    ] = None,
    limit: int | None = typer.Option(None, "--limit", min=1, help="With --backlog: show at most N."),
) -> None:
    """Receive ENTITY from both namespaces and hand each message once to the handler, until stopped."""
    settings = _with_overrides(
        settings_or_exit(),
        {"concurrency": concurrency, "prefetch": prefetch, "batch_size": batch_size, "window": window},
    )
    try:
        if backlog and not drain:
            _peek(settings, entity, queue or [], limit)
            return
        if entity is None:
            raise ConfigurationError("name the entity to receive (bridge receive ENTITY ...)")
        call = _handler(settings, handler, celery_task, celery_queue)
        if backlog:
            _drain(settings, entity, subscription, call, queue or [])
        else:
            _run(settings, entity, subscription, call)
    except ConfigurationError as exc:
        typer.echo(f"bridge: configuration error: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(CONFIGURATION_EXIT_CODE) from None
    except (NamespaceError, StateStoreUnavailableError) as exc:
        typer.echo(f"bridge receive: {type(exc).__name__}: {' '.join(str(exc).split())}", err=True)
        raise typer.Exit(1) from None


def _with_overrides(settings: Settings, overrides: dict[str, Any]) -> Settings:
    chosen = {name: value for name, value in overrides.items() if value is not None}
    if not chosen:
        return settings
    try:
        receiver = ReceiverSettings.model_validate({**settings.receiver.model_dump(), **chosen})
    except ValueError as exc:
        first = str(exc).splitlines()
        typer.echo(f"bridge: configuration error: invalid receiver option: {first[-1].strip()}", err=True)
        raise typer.Exit(CONFIGURATION_EXIT_CODE) from None
    return settings.model_copy(update={"receiver": receiver})


def _handler(
    settings: Settings, spec: str | None, task: str | None, celery_queue: str | None
) -> Callable[[Any], object]:
    from bridge.receiving.handlers import CeleryTaskHandler, load_handler

    if (spec is None) == (task is None):
        raise ConfigurationError("give exactly one of --handler module:function and --celery-task NAME")
    if spec is not None:
        return load_handler(spec)
    assert task is not None
    from workers.broker import celery_broker

    broker, options = celery_broker(settings)
    return CeleryTaskHandler(broker, task, celery_queue, transport_options=options)


def _start_operations(settings: Settings) -> None:
    from bridge.status.process import start_process

    start_process(settings, "receiver")


def _run(settings: Settings, entity: str, subscription: str | None, call: Callable[[Any], object]) -> None:
    from bridge.receiving import Receiver

    _start_operations(settings)
    receiver = Receiver(entity, call, subscription=subscription, settings=settings)

    def stop(signum: int, frame: object) -> None:
        receiver.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    receiver.run()


def _drain(
    settings: Settings,
    entity: str,
    subscription: str | None,
    call: Callable[[Any], object],
    queues: list[int],
) -> None:
    from bridge.receiving.backlog import drain_backlog
    from bridge.receiving.receiver import read_counts

    _start_operations(settings)
    before = read_counts(settings, entity, subscription)
    drain_backlog(settings, entity, call, subscription=subscription, indexes=queues)
    after = read_counts(settings, entity, subscription)
    changed = {k: v - before.as_dict()[k] for k, v in after.as_dict().items() if v != before.as_dict()[k]}
    typer.echo(json.dumps({"entity": entity, "drained": changed}))


def _peek(settings: Settings, entity: str | None, queues: list[int], limit: int | None) -> None:
    from bridge.receiving.backlog import peek_backlog

    shown = 0
    for row in peek_backlog(settings, entity=entity, indexes=queues, limit=limit):
        typer.echo(json.dumps(row, default=str))
        shown += 1
    typer.echo(f"{shown} backlog message(s)", err=True)
