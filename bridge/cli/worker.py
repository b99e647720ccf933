"""``bridge worker`` and ``bridge beat``: thin wrappers over ``celery worker`` / ``celery beat``.

Both validate the settings first (one clear line and exit 2 when they are wrong), then hand every extra
argument to Celery unchanged, so the usual flags work: ``bridge worker --concurrency 4 -l INFO``.
"""

from __future__ import annotations

import typer

from bridge.cli.context import settings_or_exit

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}


def worker(ctx: typer.Context) -> None:
    """Run Celery send workers that drain the outbox to Service Bus (celery worker flags accepted)."""
    settings = settings_or_exit()
    from bridge.observability.process import start_process

    # Before Celery forks its pool: the children's metrics go to files the main process serves.
    start_process(settings, "worker", prefork=True)
    from workers.app import app

    args = list(ctx.args)
    if not any(a.startswith(("-l", "--loglevel")) for a in args):
        args += ["--loglevel", settings.log_level]
    if not any(a.startswith(("-Q", "--queues")) for a in args):
        args += ["--queues", settings.workers.queue]
    app.worker_main(["worker", *args])


def beat(ctx: typer.Context) -> None:
    """Run the periodic tasks: sweeper, and ping and syphon for paired mode (celery beat flags accepted)."""
    settings = settings_or_exit()
    from bridge.observability.process import start_process

    start_process(settings, "beat")
    from workers.app import app

    args = list(ctx.args)
    if not any(a.startswith(("-l", "--loglevel")) for a in args):
        args += ["--loglevel", settings.log_level]
    app.start(["beat", *args])


def register(app: typer.Typer) -> None:
    """Add ``bridge worker`` and ``bridge beat``."""
    app.command(name="worker", context_settings=_PASS_THROUGH)(worker)
    app.command(name="beat", context_settings=_PASS_THROUGH)(beat)
