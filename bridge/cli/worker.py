"""``bridge worker`` and ``bridge beat``: thin wrappers over ``celery worker`` / ``celery beat``.

Both validate the settings first (one clear line and exit 2 when they are wrong), then hand every extra
argument to Celery unchanged, so the usual flags work: ``bridge worker --concurrency 4 -l INFO``.
``--help`` is the bridge's own: what the process does, what it reads from the settings, and where Celery's
flags are listed (``celery worker --help``), since every other flag goes to Celery.
"""

from __future__ import annotations

import typer

from bridge.cli.context import settings_or_exit

_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}

WORKER_HELP = """\
Usage: bridge worker [CELERY WORKER FLAGS...]

  Run Celery send workers that drain the outbox to Service Bus.

  Each worker process leases outbox shards, sends their entries to the active
  namespace (passive, active or paired replication per entity) and
  acknowledges an entry only once a namespace accepted it. It reads the
  bridge's settings (BRIDGE_* variables, BRIDGE_CONFIG file; see `bridge
  check-config`) and consumes the Celery queue workers.queue.

  Defaults added unless given: --loglevel <log_level> --queues <workers.queue>.
  Every other flag goes to `celery worker` unchanged, e.g. --concurrency 4
  (`celery worker --help` lists them).
"""

BEAT_HELP = """\
Usage: bridge beat [CELERY BEAT FLAGS...]

  Run the periodic tasks: the sweeper (reclaims entries of crashed workers),
  the journal roll (when journal.directory is set), and for paired entities
  the ping and the syphon.

  Two beats may run for high availability: each tick is claimed in Redis
  first, so a task is sent once per interval. It reads the bridge's settings
  (BRIDGE_* variables, BRIDGE_CONFIG file; see `bridge check-config`).

  Default added unless given: --loglevel <log_level>. Every other flag goes to
  `celery beat` unchanged (`celery beat --help` lists them).
"""

_HELP_FLAGS = frozenset({"--help", "-h"})


def _print_help_if_asked(args: list[str], text: str) -> None:
    """Print the bridge's help for this pass-through command and exit, when ``--help`` is among ``args``."""
    if _HELP_FLAGS.intersection(args):
        typer.echo(text, nl=False)
        raise typer.Exit()


def worker(ctx: typer.Context) -> None:
    """Run Celery send workers that drain the outbox to Service Bus (celery worker flags accepted)."""
    _print_help_if_asked(ctx.args, WORKER_HELP)
    settings = settings_or_exit(celery=True)
    from bridge.status.process import start_process

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
    _print_help_if_asked(ctx.args, BEAT_HELP)
    settings = settings_or_exit(celery=True)
    from bridge.status.process import start_process

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
