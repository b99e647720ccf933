"""Handlers named on the command line: ``--handler module:function`` and ``--celery-task name``.

``load_handler`` imports the function named by a ``module:attribute.path`` spec
(``bridge.core.handler_spec``); the current directory is put on ``sys.path`` first, as ``python -m`` and
uvicorn do, so an application's own package is found. ``CeleryTaskHandler`` hands each message to a Celery
task instead: the call succeeds once the broker accepted the task (``ReceivedMessage.to_json()`` is its one
argument), so "handled" then means "queued for Celery", and the task runs with Celery's own delivery
guarantees (use ``acks_late`` there if the task must survive a worker crash).
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from bridge.core.handler_spec import parse_handler_spec
from bridge.core.received import ReceivedMessage
from bridge.errors import ConfigurationError


def load_handler(spec_text: str) -> Callable[[ReceivedMessage], object]:
    """The callable named by ``module:function``; ``ConfigurationError`` saying why it cannot be loaded."""
    try:
        spec = parse_handler_spec(spec_text)
    except ValueError as exc:
        raise ConfigurationError(str(exc)) from None
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        target: Any = importlib.import_module(spec.module)
    except ImportError as exc:
        raise ConfigurationError(f"handler {spec}: cannot import {spec.module!r} ({exc})") from None
    for name in spec.attribute:
        try:
            target = getattr(target, name)
        except AttributeError:
            raise ConfigurationError(f"handler {spec}: {spec.module!r} has no {name!r}") from None
    if not callable(target):
        raise ConfigurationError(f"handler {spec} is not callable")
    handler: Callable[[ReceivedMessage], object] = target
    return handler


class CeleryTaskHandler:
    """Sends every message to the Celery task ``task`` (by name) on ``broker_url``."""

    def __init__(
        self,
        broker_url: str,
        task: str,
        queue: str | None = None,
        transport_options: dict[str, Any] | None = None,
    ) -> None:
        """``broker_url`` and ``transport_options`` as ``workers.broker.celery_broker`` makes them (a Sentinel
        primary is kombu's Sentinel transport with its ``master_name``)."""
        from celery import Celery

        self.task = task
        self.queue = queue
        self.app = Celery("bridge-receiver", broker=broker_url, set_as_current=False)
        self.app.conf.update(
            task_serializer="json",
            accept_content=["json"],
            broker_connection_retry_on_startup=True,
            task_ignore_result=True,
            broker_transport_options=transport_options or {},
        )

    def __call__(self, message: ReceivedMessage) -> None:
        self.app.send_task(self.task, args=[message.to_json()], queue=self.queue)

    def close(self) -> None:
        """Release the broker connections."""
        self.app.close()
